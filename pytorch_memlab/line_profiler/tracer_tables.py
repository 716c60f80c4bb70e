"""Turns the tracers' tables into records (``records.model``): one per
function and device, every source line of the function listed.  A line that
never ran has count 0 and None for every figure; ``raised`` names the
exception that escaped the profiler through that line."""
from __future__ import annotations

import types
from typing import Any, Optional, Sequence

from ..kinds import tagging
from ..kinds.breakdown import module_kinds, peak_kinds, peak_modules
from ..records.columns import PEAK_COLUMN
from ..records.curve import CurveArg, CurveInfo, CurvePoint
from ..records.model import GROWTH, FunctionRecord, LineRecord
from .tracers import (CallStats, CallTable, CurvePoints, Figures, LineTable, PeakTuple,
                      TracerCurves, TracerPeaks, TracerStats)
from .functions import FunctionEntry
from .source_text import source_lines

# {id(code): {lineno: exception name}}: by identity, like TracerStats (the
# profiler's entries hold the code objects, so their ids stay valid)
Raised = dict[int, dict[int, str]]


def _part(figures: Optional[Figures], position: dict[str, int]) -> dict[str, Optional[int]]:
    """One call group of a line: {each column, "net_growth", "count"}."""
    part: dict[str, Optional[int]] = {
        name: figures[2][index] if figures else None for name, index in position.items()}
    part[GROWTH] = figures[1] if figures else None
    part["count"] = figures[0] if figures else 0
    return part


def _lines(code: types.CodeType, table: LineTable, calls: CallTable,
           recorded: Sequence[str], shown: Sequence[str],
           raised: dict[int, str], held: Optional[dict[int, int]] = None) -> list[LineRecord]:
    """Every source line's record; ``held``: bytes each line held at the
    function's peak (None: not known)."""
    position = {name: recorded.index(name) for name in shown}
    n_calls, first_kept, per_call, _ = calls
    rows: list[LineRecord] = []
    for lineno, text in source_lines(code, list(table) + list(raised)):
        figures: Optional[Figures] = table.get(lineno)
        first, later, least = per_call.get(lineno, (None, None, None))
        rows.append(LineRecord(
            lineno, text, figures[0] if figures else 0, figures[1] if figures else None,
            {name: figures[2][position[name]] if figures else None for name in shown},
            raised.get(lineno),
            first_call=_part(first, position) if first_kept else None,
            later_calls=_part(later, position) if first_kept else None,
            growth_per_call=max(least, 0) if least is not None and figures else None,
            held_at_peak=None if held is None else held.get(lineno, 0 if figures else None),
            has_held=True))
    return rows


def _start_level(calls: CallTable, recorded: Sequence[str]) -> Optional[dict[str, Optional[int]]]:
    """record["start_level"]: the level (active bytes) when the first call
    began, and when the later call began that reached the later calls'
    highest active bytes' peak (the tracer keeps one per column); None when
    neither is known."""
    n_calls, _, _, (first, later) = calls
    at = recorded.index(PEAK_COLUMN) if PEAK_COLUMN in recorded else len(later)
    later_start = later[at] if at < len(later) else None
    if not n_calls or (first is None and later_start is None):
        return None
    return {"first_call": first, "later_calls": later_start}


def _peak(found: Optional[PeakTuple], kinds_missing: Optional[str],
          modules_missing: Optional[str]
          ) -> tuple[Optional[dict[str, Any]], Optional[dict[int, int]]]:
    """(record["peak"], held per line) of a tracer's peak tuple."""
    if found is None:
        return None, None
    size, lineno, call, before, other, held, kbefore, kother, klines, modules, mkinds = found
    peak: dict[str, Any] = {"bytes": size, "lineno": lineno, "call": call,
                            "before_call": before, "other_threads": other}
    if tagging.ENABLED:     # off: nothing was told, so no kinds rather than all "input"
        peak.update(peak_kinds(before, other, held, (kbefore, kother, klines), kinds_missing))
        peak.update(peak_modules(sum(held.values()), modules, modules_missing))
        peak.update(module_kinds(peak, mkinds))
    return peak, held


def _points(points: CurvePoints, names: dict[int, str]) -> list[CurvePoint]:
    """The tracer's points as a record holds them: a nested line's callee by
    qualname."""
    return [[line, active, reserved, peak] if callee is None
            else [line, active, reserved, peak, names.get(id(callee), callee.co_name)]
            for line, active, reserved, peak, callee in points]


def build_records(entries: Sequence[FunctionEntry], labels: Sequence[str],
                  per_device: Sequence[TracerStats], recorded: Sequence[str],
                  shown: Sequence[str], raised: Raised,
                  per_call: Sequence[CallStats] = (),
                  curves: Sequence[TracerCurves] = (),
                  choice: CurveArg = None,
                  peaks: Sequence[TracerPeaks] = ()) -> list[FunctionRecord]:
    """Records for every code object of ``entries``: the current one always,
    earlier ones (before ``__code__`` was replaced) only if they have figures."""
    records: list[FunctionRecord] = []
    # by identity: look-alike code objects compare equal (see TracerStats)
    by_code = [{id(code): lines for code, lines in stats} for stats in per_device]
    calls_by_code = [{id(code): calls for code, calls in stats} for stats in per_call]
    none: CallTable = (0, False, {}, (None, ()))
    names = {id(code): entry.qualname for entry in entries for code in entry.codes}
    kept = [{id(code): found for code, found in device} for device in curves]
    at_peak = [({id(code): found for code, found in device}, why, inexact, modules)
               for device, why, inexact, modules in peaks]
    for entry in entries:
        for code in entry.codes:
            tables = [found.get(id(code), {}) for found in by_code]
            calls = [found.get(id(code), none) for found in calls_by_code] or [none] * len(tables)
            current = code is entry.current_code
            if not current and not any(tables) and id(code) not in raised:
                continue
            for d, (device, table, called) in enumerate(zip(labels, tables, calls)):
                found_peaks, why, inexact, modules = (at_peak[d] if d < len(at_peak)
                                                      else ({}, "not recorded", None, None))
                peak, held = (_peak(found_peaks.get(id(code)), inexact, modules)
                              if why is None else (None, None))
                record = FunctionRecord(
                    entry.qualname, code.co_filename, code.co_firstlineno, device, list(shown),
                    _lines(code, table, called, recorded, shown, raised.get(id(code), {}),
                           held),
                    calls=called[0] if called[0] else None, peak=peak, peak_missing=why,
                    start_level=_start_level(called, recorded))
                found = kept[d].get(id(code)) if d < len(kept) else None
                if found is not None and choice is not None:
                    points, merged, call, n_calls, events = found
                    record.curve = _points(points, names)
                    record.curve_of = CurveInfo(choice=choice, call=call, calls=n_calls,
                                                line_events=events, merged=merged)
                records.append(record)
    return records
