"""Turns the tracers' tables into records (``records.model``): one per
function and device, every source line of the function listed.  A line that
never ran has count 0 and None for every figure; ``raised`` names the
exception that escaped the profiler through that line."""
from __future__ import annotations

import types
from typing import Optional, Sequence

from ..records.curve import CurveArg, CurveInfo, CurvePoint
from ..records.model import FunctionRecord, LineRecord
from .tracers import CurvePoints, LineTable, TracerCurves, TracerStats
from .functions import FunctionEntry
from .source_text import source_lines

# {id(code): {lineno: exception name}}: by identity, like TracerStats (the
# profiler's entries hold the code objects, so their ids stay valid)
Raised = dict[int, dict[int, str]]


def _lines(code: types.CodeType, table: LineTable,
           recorded: Sequence[str], shown: Sequence[str],
           raised: dict[int, str]) -> list[LineRecord]:
    position = {name: recorded.index(name) for name in shown}
    rows: list[LineRecord] = []
    for lineno, text in source_lines(code, list(table) + list(raised)):
        figures: Optional[tuple[int, int, tuple[int, ...]]] = table.get(lineno)
        rows.append(LineRecord(
            lineno, text, figures[0] if figures else 0, figures[1] if figures else None,
            {name: figures[2][position[name]] if figures else None for name in shown},
            raised.get(lineno)))
    return rows


def _points(points: CurvePoints, names: dict[int, str]) -> list[CurvePoint]:
    """The tracer's points as a record holds them: a nested line's callee by
    qualname."""
    return [[line, active, reserved, peak] if callee is None
            else [line, active, reserved, peak, names.get(id(callee), callee.co_name)]
            for line, active, reserved, peak, callee in points]


def build_records(entries: Sequence[FunctionEntry], labels: Sequence[str],
                  per_device: Sequence[TracerStats], recorded: Sequence[str],
                  shown: Sequence[str], raised: Raised,
                  curves: Sequence[TracerCurves] = (),
                  choice: CurveArg = None) -> list[FunctionRecord]:
    """Records for every code object of ``entries``: the current one always,
    earlier ones (before ``__code__`` was replaced) only if they have figures."""
    records: list[FunctionRecord] = []
    # by identity: look-alike code objects compare equal (see TracerStats)
    by_code = [{id(code): lines for code, lines in stats} for stats in per_device]
    names = {id(code): entry.qualname for entry in entries for code in entry.codes}
    kept = [{id(code): found for code, found in device} for device in curves]
    for entry in entries:
        for code in entry.codes:
            tables = [found.get(id(code), {}) for found in by_code]
            current = code is entry.current_code
            if not current and not any(tables) and id(code) not in raised:
                continue
            for d, (device, table) in enumerate(zip(labels, tables)):
                record = FunctionRecord(
                    entry.qualname, code.co_filename, code.co_firstlineno, device, list(shown),
                    _lines(code, table, recorded, shown, raised.get(id(code), {})))
                found = kept[d].get(id(code)) if d < len(kept) else None
                if found is not None and choice is not None:
                    points, merged, call, calls, events = found
                    record.curve = _points(points, names)
                    record.curve_of = CurveInfo(choice=choice, call=call, calls=calls,
                                                line_events=events, merged=merged)
                records.append(record)
    return records
