"""The text of a failed memlab check: the figures, then the line tables with
the line that matters marked.

The figures in the first line are in IEC units (``33.00 MiB (34,603,008
bytes)``, ``iec_size``), not the line table's ``33.00M``: they are read beside
the budget or tolerance the user wrote in those units (``"16 MiB"``).  The
tables below keep the line-table style."""
from __future__ import annotations

import os
from typing import Optional, Sequence

from ...common.sizes import iec_size, readable_size
from ...records.model import FunctionRecord, LineRecord, Profile
from ...reports.base import reporter_for
from ._markers import LIMIT, NO_GROWTH, Request
from ._measure import PEAK, DeviceResult, record_peak

_HEADER_ROWS = 5      # "## name", blank, device row, two heading rows (see reports.text)


def marked_table(record: FunctionRecord, marks: dict[int, str]) -> str:
    """The text table of ``record`` with ``marks[lineno]`` after those lines."""
    rows = reporter_for("text").render(Profile([record], record.columns, [record.device])) \
        .rstrip("\n").split("\n")
    for k, line in enumerate(record["lines"]):
        note = marks.get(line["lineno"])
        if note and _HEADER_ROWS + k < len(rows):
            rows[_HEADER_ROWS + k] += "   <-- " + note
    return "\n".join(rows) + "\n"


def peak_line(record: FunctionRecord) -> Optional[LineRecord]:
    """The first line (in source order) that reached the function's peak."""
    top = record_peak(record)
    for line in record.lines:
        if line.count and line.figures.get(PEAK) == top:
            return line
    return None


def _peak_tables(result: DeviceResult) -> list[str]:
    tables = []
    top = max([p for p in map(record_peak, result.test_records) if p is not None], default=None)
    for record in result.test_records:
        line = peak_line(record)
        marks = {line["lineno"]: "peak"} if line is not None else {}
        tables.append(marked_table(record, marks))
    for record in result.callee_records:
        if top is not None and record_peak(record) == top:
            line = peak_line(record)
            assert line is not None
            tables.append(marked_table(record, {line["lineno"]: "peak (inside this call)"}))
    return tables


def _size(request: Request) -> str:
    exact = f"{request.size:,} bytes"
    same = request.text.replace(" ", "") == f"{request.size}B"
    return request.text if same else f"{request.text} ({exact})"


def limit_failure(request: Request, result: DeviceResult) -> str:
    head = (f"{LIMIT}: the test's peak on {result.device} was {iec_size(result.peak)}, "
            f"over its budget of {_size(request)}")
    if result.baseline:
        head += (f"; that is live tensor memory above the {iec_size(result.baseline)} "
                 "already live when the test started")
    return head + "\n\n" + "\n".join(_peak_tables(result))


def _growth_lines(records: Sequence[FunctionRecord]) -> list[tuple[int, str]]:
    found = []
    for record in records:
        where = os.path.basename(record["filename"])
        for line in record["lines"]:
            growth = line["net_growth"]
            if growth:
                found.append((growth, f"  {where}:{line['lineno']} ({record['qualname']})  "
                                      f"{'+' if growth > 0 else ''}{readable_size(growth)}  "
                                      f"{line['code'].strip()}"))
    return sorted(found, key=lambda pair: -pair[0])


def growth_failure(request: Request, result: DeviceResult) -> str:
    head = (f"{NO_GROWTH}: {iec_size(result.growth)} of tensors on {result.device} were "
            f"still alive after the test returned (and gc.collect()), over the tolerance of "
            f"{_size(request)}")
    grown = [(g, text) for g, text in _growth_lines(result.test_records + result.callee_records)
             if g > 0]
    # A line that grew by more than is still alive was at least partly freed
    # since (a local freed at return, say): list it apart.
    holding = [text for g, text in grown if g <= result.growth]
    partly = [text for g, text in grown if g > result.growth]
    if holding:
        head += ("\nlines whose net growth holds them (bytes a line allocated and had not "
                 "freed when it ended), largest first:\n" + "\n".join(holding))
    if partly:
        head += ("\nlines that grew by more than is still alive (so partly freed since, "
                 "e.g. locals freed when the test returned):\n" + "\n".join(partly))
    every = _every_call_lines(result.per_call_records)
    if every:
        head += ("\nlines that grew in every call after the first (least growth of one "
                 "call):\n" + "\n".join(every))
    tables = [marked_table(r, {}) for r in result.test_records + result.callee_records]
    return head + "\n\n" + "\n".join(tables)


def _every_call_lines(records: Sequence[FunctionRecord]) -> list[str]:
    """Lines of functions called 3 or more times whose growth per call is positive."""
    from ...reports.calls import growing_lines
    found = []
    for record in records:
        where = os.path.basename(record.filename)
        for line in growing_lines(record):
            found.append((line.growth_per_call or 0,
                          f"  {where}:{line.lineno} ({record.qualname}, {record.calls} calls)  "
                          f"+{readable_size(line.growth_per_call or 0)} per call  "
                          f"{line.code.strip()}"))
    return [text for _, text in sorted(found, key=lambda pair: -pair[0])]
