"""The CSV file: one row per source line of every function and device, with
the header ``qualname, filename, first_line, device, lineno, count,
net_growth, <columns...>, <figures per call...>, <the peak...>, <start levels...>,
peak.kinds, raised, code``; an empty cell is a null.  The peak (since schema
version 4; ``PEAK_HEADER``) is the line's ``held_at_peak`` then the function's
``peak.<key>``; a file without it loads as not having recorded it.  Then the
function's ``start_level.first_call`` and ``start_level.later_calls`` (since
schema version 5; ``START_HEADER``).  The peak's kinds and modules (since schema
version 6, ``KINDS_CELL``) are one cell of JSON, the other keys of ``peak``
(its modules' kinds too, since version 7); a file without it loads without
them.  The figures per call (since schema version 3; ``call_header``) are
the function's ``calls``, the line's ``growth_per_call``, then
``first_call.<key>`` and ``later_calls.<key>`` for count, net_growth and each
column; a file without them loads as not having recorded them.  It has no
versions or timeline, and no slot for what each column measures: reading one
derives the columns' kinds and units from their names by torch's naming rule
(``records.meanings``), as for a JSON file of schema version 1.

A file is whole when its last row is ``#end,<the number of rows of lines>``:
a file cut at a row boundary, or inside its last cell, is refused.  Files
written before that row existed still load: a writer that closes the file so
writes the header's first cell quoted (``"qualname",...``, the same header to
any CSV reader), and only a file so marked must end with the row."""
from __future__ import annotations

import csv
import io
import json
from typing import IO, Any, Optional, Sequence

from .document import RECORD_KEYS, SCHEMA_VERSION, _Reader, meanings_of
from .model import GROWTH, HELD, PEAK_KEYS, START_KEYS, FunctionRecord, LineRecord, Profile
from .peak_document import read_peak

_NUMBERS = ("lineno", "count", GROWTH)


# Figures per call (schema version 3), after the columns: the function's
# calls, the line's growth_per_call, then first_call.<key> and later_calls.<key>
# for count, net_growth and each column; all empty where not recorded.
_PARTS = ("first_call", "later_calls")


def call_header(columns: Sequence[str]) -> list[str]:
    keys = ["count", GROWTH] + list(columns)
    return ["calls", "growth_per_call"] + [f"{part}.{k}" for part in _PARTS for k in keys]


# What was alive at the peak (schema version 4), after the figures per call.
PEAK_HEADER = [HELD] + [f"peak.{key}" for key in PEAK_KEYS]
# What was alive when the calls began (schema version 5), after the peak.
START_HEADER = [f"start_level.{key}" for key in START_KEYS]
# Then the peak's kinds and modules (schema version 6; modules_by_kind since 7):
# one cell, the JSON of those keys of ``peak`` (empty without a peak), the same
# on each of its rows.
KINDS_CELL = "peak.kinds"


def header(columns: Sequence[str]) -> list[str]:
    return (list(RECORD_KEYS) + list(_NUMBERS) + list(columns) + call_header(columns)
            + PEAK_HEADER + START_HEADER + [KINDS_CELL, "raised", "code"])


def _kinds_cell(peak: Optional[dict[str, Any]]) -> Optional[str]:
    kinds = {k: v for k, v in (peak or {}).items() if k not in PEAK_KEYS}
    return json.dumps(kinds, separators=(",", ":")) if kinds else None


def _call_cells(record: FunctionRecord, line: LineRecord, columns: Sequence[str]) -> list[Any]:
    keys = ["count", GROWTH] + list(columns)
    cells: list[Any] = [record.calls, line.growth_per_call]
    for part in (line.first_call, line.later_calls):
        cells += [part.get(k) if part is not None else None for k in keys]
    return cells


def row_values(record: FunctionRecord, line: LineRecord, columns: Sequence[str]) -> list[Any]:
    """A line's cells under ``header(columns)``, None for an empty one."""
    return ([record.qualname, record.filename, record.first_line, record.device,
             line.lineno, line.count, line.net_growth]
            + [line.figures.get(c) for c in columns] + _call_cells(record, line, columns)
            + [line.held_at_peak] + [record.peak[k] if record.peak else None for k in PEAK_KEYS]
            + [(record.start_level or {}).get(k) for k in START_KEYS]
            + [_kinds_cell(record.peak), line.raised, line.code])


END = "#end"                      # the first cell of the last row
_MARK = f'"{RECORD_KEYS[0]}",'     # how a file that ends with that row begins


def write(profile: Profile, columns: Sequence[str], out: IO[str]) -> None:
    writer = csv.writer(out, lineterminator="\n")
    head = header(columns)
    out.write(_MARK)
    writer.writerow(head[1:])
    rows = 0
    for record in profile.functions:
        for line in record.lines:
            writer.writerow(["" if v is None else v for v in row_values(record, line, columns)])
            rows += 1
    writer.writerow([END, rows])


def _whole(rows: list[list[str]], marked: bool, where: str) -> list[list[str]]:
    """The rows of lines, once the last row says the file is whole."""
    last = rows[-1] if rows else []
    if last[:1] != [END]:
        if not marked:
            return rows         # written before files ended with the row
        raise ValueError(f"{where} is cut short (truncated?): its last row should be "
                         f"{END},<rows>")
    told = last[1] if len(last) == 2 else ""
    if not told.isdigit() or int(told) != len(rows) - 1:
        raise ValueError(f"{where} is cut short (truncated?): {len(rows) - 1} rows of lines, "
                         f"where its last row says {told or 'nothing'}")
    return rows[:-1]


def _number(text: str, name: str, where: str, row: int) -> Optional[int]:
    if text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{where}, row {row}: {name} is {text!r}; expected an integer "
                         "or an empty cell") from None


def _with_kinds(peak: dict[str, Any], cell: str, where: str, row: int) -> dict[str, Any]:
    """``peak`` with the kinds and modules of its KINDS_CELL, checked as the
    JSON file's are."""
    try:
        kinds = json.loads(cell)
    except ValueError:
        kinds = None
    if not isinstance(kinds, dict):
        raise ValueError(f"{where}, row {row}: {KINDS_CELL} is {cell[:40]!r}; expected the "
                         "JSON of the peak's kinds")
    return read_peak(_Reader(where), {**peak, **kinds}, f"row {row}, {KINDS_CELL}")


def _part(keys: Sequence[str], cells: Sequence[Optional[int]]) -> dict[str, Optional[int]]:
    part = dict(zip(keys, cells))
    part = {**{k: v for k, v in part.items() if k not in ("count", GROWTH)},
            GROWTH: part[GROWTH], "count": part["count"] or 0}
    return part


def loads(text: str, where: str) -> Profile:
    """The profile a CSV text holds; ValueError naming ``where`` and the row."""
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        head = next(reader, None)
    except csv.Error as exc:
        raise ValueError(f"{where}, row 1: {exc}") from None
    keys = len(RECORD_KEYS)
    if head is None or head[:keys] != list(RECORD_KEYS) \
            or head[keys:keys + len(_NUMBERS)] != list(_NUMBERS) \
            or len(head) < keys + len(_NUMBERS) + 2 or head[-2:] != ["raised", "code"]:
        raise ValueError(f"{where} is not a pytorch_memlab CSV profile: the header should be "
                         + ", ".join(header(["<columns...>"])))
    names = head[len(RECORD_KEYS):-2]
    has_kinds = names[-1:] == [KINDS_CELL]           # schema version 6
    names = names[:-1] if has_kinds else names
    has_start = names[-len(START_HEADER):] == START_HEADER   # schema version 5
    names = names[:-len(START_HEADER)] if has_start else names
    columns = names[len(_NUMBERS):]
    has_peak = names[-len(PEAK_HEADER):] == PEAK_HEADER   # schema version 4
    if has_peak:
        names = names[:-len(PEAK_HEADER)]
        columns = columns[:-len(PEAK_HEADER)]
    if "calls" in columns:        # schema version 3: the figures per call follow
        columns = columns[:columns.index("calls")]
        if names[len(_NUMBERS) + len(columns):] != call_header(columns):
            raise ValueError(f"{where} is not a pytorch_memlab CSV profile: after the columns "
                             "the header should be " + ", ".join(call_header(columns)))
    per_call = len(names) > len(_NUMBERS) + len(columns)
    names += PEAK_HEADER if has_peak else []
    functions: list[FunctionRecord] = []
    devices: list[str] = []
    try:
        rows = list(reader)
    except csv.Error as exc:
        raise ValueError(f"{where}, row {reader.line_num}: {exc}") from None
    for number, row in enumerate(_whole(rows, text.startswith(_MARK), where), start=2):
        if len(row) != len(head):
            raise ValueError(f"{where}, row {number}: {len(row)} cells; the header has "
                             f"{len(head)}")
        qualname, filename, first, device = row[:4]
        first_line = _number(first, "first_line", where, number)
        if first_line is None:
            raise ValueError(f"{where}, row {number}: first_line is empty; expected an "
                             "integer")
        end = -3 if has_kinds else -2
        values = [_number(v, n, where, number) for v, n in zip(row[4:end], names)]
        starts = [_number(v, n, where, number) for v, n in
                  zip(row[end - len(START_HEADER):end], START_HEADER)] if has_start else []
        lineno, count = values[0], values[1]
        if lineno is None or count is None:
            raise ValueError(f"{where}, row {number}: lineno and count must be integers")
        key = (filename, first_line, qualname)
        figures = values[3:3 + len(columns)]
        peak_cells = values[len(values) - len(PEAK_HEADER):] if has_peak else []
        calls_cells = values[3 + len(columns):len(values) - len(peak_cells)]
        calls = calls_cells[0] if per_call else None
        if not functions or functions[-1].key != key or functions[-1].device != device:
            peak = dict(zip(PEAK_KEYS, peak_cells[1:])) if peak_cells[1:2] != [None] \
                and has_peak else None
            if peak is not None and has_kinds and row[-3]:
                peak = _with_kinds(peak, row[-3], where, number)
            functions.append(FunctionRecord(qualname, filename, first_line, device,
                                            list(columns), [], calls=calls,
                                            peak=peak,
                                            start_level=dict(zip(START_KEYS, starts))
                                            if any(v is not None for v in starts) else None))
            if device not in devices:
                devices.append(device)
        line = LineRecord(lineno, row[-1], count, values[2], dict(zip(columns, figures)),
                          row[-2] or None, held_at_peak=peak_cells[0] if has_peak else None,
                          has_held=has_peak)
        if per_call and calls is not None:
            part_keys = ["count", GROWTH] + list(columns)
            line.growth_per_call = calls_cells[1]
            line.first_call = _part(part_keys, calls_cells[2:2 + len(part_keys)])
            line.later_calls = _part(part_keys, calls_cells[2 + len(part_keys):])
        functions[-1].lines.append(line)
    return Profile(functions, list(columns), devices, schema_version=SCHEMA_VERSION,
                   meanings=meanings_of(columns))
