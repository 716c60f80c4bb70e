"""What every table shares: the per-device records of one function grouped
into a section, the two-row title of each column, and each cell's text."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from .. import native
from ..common.sizes import readable_size
from ..records.model import GROWTH, FunctionRecord, LineRecord

GROWTH_TITLE = ("active_bytes", "net growth")


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
        """Figures of each device group, in order: requested columns, then growth."""
        return self.records[0].columns + [GROWTH]

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
    family, _, rest = column.partition(".")
    return family, rest


def cell(column: str, value: Optional[int]) -> str:
    if value is None:
        return ""
    if column == GROWTH or native.field_meaning(column).unit == "bytes":
        return readable_size(value)
    return str(value)


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


NOTHING_REGISTERED = ("No function is registered with this profiler: pass functions to "
                      "LineProfiler(...) or call add_function(func).")


def idle_note(idle: Sequence[str], any_shown: bool) -> str:
    if not idle:
        return "" if any_shown else NOTHING_REGISTERED
    if any_shown:
        return f"(not run while profiling: {', '.join(idle)})"
    return ("No profiled function ran while the profiler was enabled "
            f"(registered: {', '.join(idle)}).")
