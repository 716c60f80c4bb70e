"""The one walk every table format shares: a profile's records grouped into a
section per function (a column group per device), each line's cells, notes
and bar scales worked out once, as a ``Table`` a format only styles (text,
notebook and HTML reports; the rank table builds its ``Table`` from ranks)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import AbstractSet, Any, Optional, Protocol, Sequence, Union

from ..common.sizes import readable_size
from ..records.model import GROWTH, HELD, FunctionRecord, LineRecord, Profile
from .calls import COUNT, PARTS, first_call_note, grows_note, part_figure
from .curve_svg import CurveView
from .kinds_text import with_kinds
from .peak_text import PeakNote, peak_breakdowns
from .postmortem_text import format_postmortem

# hide_unrun: True for every table, or the qualnames of the tables that hide
# their lines that never ran (the training callbacks' framework methods)
HideArg = Union[bool, AbstractSet[str]]
GROWTH_TITLE = ("active_bytes", "net growth")
HELD_TITLE = ("held at", "peak")


@dataclass
class Section:
    """One function: a record per device, each with the same source lines."""

    qualname: str
    filename: str
    first_line: int
    records: list[FunctionRecord]

    @property
    def devices(self) -> list[str]:
        return [r.device for r in self.records]

    @property
    def columns(self) -> list[str]:
        """Figures of each device group, in order: requested columns, the bytes
        each line held at the peak (where recorded), then growth."""
        held = [HELD] if any(r.has_held for r in self.records) else []
        return self.records[0].columns + held + [GROWTH]

    @property
    def postmortem(self) -> Optional[dict[str, Any]]:
        """The out-of-memory post-mortem of this function, if one escaped it."""
        return next((r.postmortem for r in self.records if r.postmortem is not None), None)

    def rows(self) -> list[tuple[LineRecord, list[LineRecord]]]:
        """(first device's line, every device's line) for each source line."""
        per_device = [r.lines for r in self.records]
        return [(lines[0], list(lines)) for lines in zip(*per_device)]


def sections(records: Sequence[FunctionRecord]) -> tuple[list[Section], list[str]]:
    """(sections of functions that ran, qualnames of those that did not)."""
    grouped: dict[tuple[str, int, str], Section] = {}
    for record in records:
        if record.key not in grouped:
            grouped[record.key] = Section(record.qualname, record.filename,
                                          record.first_line, [])
        grouped[record.key].records.append(record)
    shown = [s for s in grouped.values() if any(r.ran for r in s.records)]
    idle = [s.qualname for s in grouped.values() if not any(r.ran for r in s.records)]
    return shown, list(dict.fromkeys(idle))


def title(column: str) -> tuple[str, str]:
    """Two header rows: the field's family and the rest of its name."""
    if column == GROWTH:
        return GROWTH_TITLE
    if column == HELD:
        return HELD_TITLE
    family, _, rest = column.partition(".")
    return family, rest


def cell(value: Optional[int], unit: str) -> str:
    """A figure as a table shows it: a size for bytes, else the number."""
    if value is None:
        return ""
    return readable_size(value) if unit == "bytes" else str(value)


def count_cell(line: LineRecord) -> str:
    return str(line.count) if line.ran else ""


def raised_note(raised: Optional[str]) -> str:
    return f"<-- {raised} raised here" if raised else ""


def scales(shown: Sequence[Section]) -> dict[tuple[str, str], int]:
    """The largest |figure| per (device, column) over the whole display: the
    full length of that column's bars."""
    out: dict[tuple[str, str], int] = {}
    for section in shown:
        for record in section.records:
            for column in section.columns:
                values = [abs(v) for v in (line.figure(column) for line in record.lines)
                          if v is not None]
                key = (record.device, column)
                out[key] = max([out.get(key, 0)] + values)
    return out


def no_source_note(qualname: str, filename: str) -> str:
    """Why a table's code column is empty: there is no source to read."""
    return (f"note: the source of {qualname} ({filename}) is not available (a string run by "
            "exec() or compile(), or a file gone since), so the code column is empty.")


NOTHING_REGISTERED = ("No function is registered with this profiler: pass functions to "
                      "LineProfiler(...) or call add_function(func).")


def idle_note(idle: Sequence[str], any_shown: bool) -> str:
    if not idle:
        return "" if any_shown else NOTHING_REGISTERED
    if any_shown:
        return f"(not run while profiling: {', '.join(idle)})"
    return ("No profiled function ran while the profiler was enabled "
            f"(registered: {', '.join(idle)}).")


# ---- the walk ------------------------------------------------------------------------

@dataclass
class Figure:
    """One cell of a column group: ``text`` as shown, ``value`` (None where the
    cell is not one measured figure), ``scale`` the full length of its bar (0:
    no bar)."""

    group: str
    column: str
    index: int              # the column's place in its group: its colour
    value: Optional[int]
    text: str
    scale: int = 0


@dataclass
class Row:
    """One source line: its figures, group by group, then the line itself."""

    lineno: int
    code: str
    count: str
    note: str               # "<-- X raised here" ("" for none)
    ran: bool
    figures: list[Figure]


@dataclass
class Table:
    """One function's section, ready to be styled."""

    qualname: str
    filename: str
    first_line: int
    groups: list[str]       # column group labels: devices, or ranks
    columns: list[str]      # the columns of each group, growth last
    rows: list[Row]
    postmortem: Optional[str] = None   # the formatted post-mortem, if any
    notes: list[str] = field(default_factory=list)   # under the table (first call apart)
    curves: list[CurveView] = field(default_factory=list)   # one per device that kept one
    hidden: int = 0                    # lines left out: they never ran (hide_unrun)
    # the breakdown of each device's peak, or why there is none: its text
    # leads ``notes``, and the HTML report draws its items as a bar
    peaks: list[PeakNote] = field(default_factory=list)
    # the lines by kind and by module under each peak line (also in ``notes``)
    kinds: list[str] = field(default_factory=list)


def _by_call_figures(section: Section, lines: Sequence[LineRecord], columns: Sequence[str],
                     units: Sequence[str]) -> list[Figure]:
    """A line's cells in the groups "<device>, first call" and "<device>, later calls"."""
    return [Figure(f"{device}, {label}", column, c, part_figure(line, part, column),
                   cell(part_figure(line, part, column), units[c]))
            for device, line in zip(section.devices, lines)
            for label, part in PARTS
            for c, column in enumerate(columns)]


def _curves(section: Section, code: dict[str, dict[int, str]]) -> list[CurveView]:
    """A view of each device's curve, with the code of the lines it names."""
    views = []
    for record in section.records:
        if record.curve is None or record.curve_of is None or not record.curve:
            continue
        named: dict[str, dict[int, str]] = {}
        for p in record.curve:
            owner = p[4] if len(p) > 4 else section.qualname
            lines = named.setdefault(owner, {})
            if p[0] not in lines:
                lines[p[0]] = code.get(owner, {}).get(p[0], "")
        views.append(CurveView(section.qualname, record.device, record.curve, record.curve_of,
                               named))
    return views


def _table(section: Section, profile: Profile, full: dict[tuple[str, str], int],
           code: dict[str, dict[int, str]], by_call: bool, hide_unrun: HideArg,
           curves: bool = True) -> Table:
    # per call, a line's bytes at the peak have no first / later split
    columns = [c for c in section.columns if c != HELD] + [COUNT] if by_call \
        else section.columns
    units = ["count" if c == COUNT else profile.unit(c) for c in columns]
    groups = ([f"{device}, {label}" for device in section.devices for label, _ in PARTS]
              if by_call else section.devices)
    rows = []
    hidden = 0
    hide = hide_unrun if isinstance(hide_unrun, bool) else section.qualname in hide_unrun
    for first, lines in section.rows():
        if hide and not any(line.ran for line in lines) and not first.raised:
            hidden += 1
            continue
        if by_call:
            figures = _by_call_figures(section, lines, columns, units)
        else:
            figures = [Figure(device, column, c, line.figure(column),
                              cell(line.figure(column), units[c]), full.get((device, column), 0))
                       for device, line in zip(section.devices, lines)
                       for c, column in enumerate(columns)]
        note = "   ".join(n for n in (raised_note(first.raised), grows_note(lines)) if n)
        rows.append(Row(first.lineno, first.code, count_cell(first), note, first.ran, figures))
    pm = section.postmortem
    peaks = [] if by_call else peak_breakdowns(section.records)
    with_lines = [] if by_call else with_kinds(section.records, [p.text for p in peaks])
    notes = with_lines + ([] if by_call else
                          [n for n in map(first_call_note, section.records) if n])
    kinds = [line for note in with_lines for line in note.split("\n")[1:]]
    if rows and not any(row.code.strip() for row in rows):
        notes.append(no_source_note(section.qualname, section.filename))
    return Table(section.qualname, section.filename, section.first_line, groups,
                 columns, rows, None if pm is None else format_postmortem(pm, section.qualname),
                 notes, _curves(section, code) if curves else [], hidden, peaks, kinds)


class Style(Protocol):
    """What a format decides: how a section, and the note under them, look."""

    def section(self, table: Table) -> str: ...

    def note(self, text: str) -> str: ...


def source_code(functions: Sequence[FunctionRecord]) -> dict[str, dict[int, str]]:
    """qualname -> lineno -> source text, for finding a curve point's code."""
    code: dict[str, dict[int, str]] = {}
    for record in functions:
        code.setdefault(record.qualname, {l.lineno: l.code for l in record.lines})
    return code


def tables(profile: Profile, by_call: bool = False, hide_unrun: HideArg = False,
           curves: bool = True) -> tuple[list[Table], list[str]]:
    """(a ``Table`` per function that ran, qualnames of those that did not);
    ``curves=False``: no ``Table.curves`` (a format that draws none)."""
    shown, idle = sections(profile.functions)
    full = scales(shown)
    code = source_code(profile.functions) if curves else {}
    return [_table(s, profile, full, code, by_call, hide_unrun, curves) for s in shown], idle


def render_sections(profile: Profile, style: Style, by_call: bool = False,
                    hide_unrun: HideArg = False, curves: bool = True) -> list[str]:
    """The one section renderer: each function that ran as ``style`` shows it,
    then the note on those that did not (or on there being none).  ``by_call``:
    each device's columns twice, for the first call and for the later ones;
    ``hide_unrun``: leave out the lines that never ran (a docstring, a branch
    not taken), in every table or in those of the qualnames it holds;
    ``curves=False`` for a style that draws no curve (a text table)."""
    shown_tables, idle = tables(profile, by_call, hide_unrun, curves)
    parts = [style.section(table) for table in shown_tables]
    note = idle_note(idle, bool(shown_tables))
    if note:
        parts.append(style.note(note))
    return parts
