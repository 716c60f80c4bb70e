"""The training callbacks' figures of many steps, folded from one step's at a
time (``step_profiler``).

After each training step the profiler's figures are taken and forgotten
(``LineProfiler._rotate``), while the tracer goes on counting the calls:
a step's records hold its own line figures, its own peak with what was alive
then, and its own curve, beside the calls so far and each line's least growth
per call so far.  ``renumber`` makes a step's record say the calls of that
step alone, numbered as in the whole fit; ``fold`` adds it to the figures of
several steps (the whole fit, an ``every_n_steps`` window) as the tracer
would have kept them had it not forgotten anything in between:

- a line's figures by each column's kind, as the tracer folds executions of
  a line: a peak or a level keeps the max, a counter, the count and the net
  growth add up;
- the calls add up; the first call's figures stay those of the step that
  ran it, and every later step's go to the later calls (a window that does
  not hold the first call has neither);
- a line's growth per call is the tracer's latest least (0 for a line that
  did not run in a step the function ran in);
- the peak, with what each line held then, and the curve are those of the
  step that reached the highest, the first such (the callbacks' profiler
  keeps the curve of the call that reached the peak);
- what was alive when the later calls began (``start_level``) is the step's
  whose lines first reached the later calls' highest active bytes' peak.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from .columns import PEAK_COLUMN
from .meanings import Field
from .model import GROWTH, FunctionRecord, LineRecord

Key = tuple[str, int, str, str]      # filename, first line, qualname, device
Figures = dict[str, Optional[int]]


def key(record: FunctionRecord) -> Key:
    return (record.filename, record.first_line, record.qualname, record.device)


def renumber(record: FunctionRecord, calls_before: int) -> FunctionRecord:
    """``record`` of one step, whose ``calls`` counts every call so far and
    whose curve numbers the step's calls from 1: the calls of the step alone,
    and its curve's call numbered from the fit's start, of the calls so far
    (as the peak's call is)."""
    curve_of = None if record.curve_of is None else record.curve_of.copy()
    if curve_of is not None:
        curve_of["call"] += calls_before
        curve_of["calls"] = record.calls or calls_before
    return dataclasses.replace(record, calls=(record.calls or calls_before) - calls_before
                               or None, curve_of=curve_of)


def _add(into: Figures, figures: Figures, meanings: dict[str, Field]) -> None:
    """Fold one window's figures of a line into ``into`` (the same keys)."""
    for column, value in figures.items():
        old = into.get(column)
        if value is None or old is None:
            into[column] = old if value is None else value
        elif column in (GROWTH, "count") or meanings[column].kind == "counter":
            into[column] = old + value
        else:                    # a peak, or a level at the line's end
            into[column] = max(old, value)


def _whole(line: LineRecord) -> Figures:
    """A line's figures as a call group holds them."""
    return {**line.figures, GROWTH: line.net_growth, "count": line.count}


def _curve_peak(record: FunctionRecord) -> int:
    return max((point[3] for point in record.curve or ()), default=-1)


def _top(figures: Sequence[Optional[Figures]]) -> Optional[int]:
    """The highest active bytes' peak of some lines' figures, None if none."""
    values = [v for v in (f.get(PEAK_COLUMN) for f in figures if f) if v is not None]
    return max(values, default=None)


def _later_start(total: FunctionRecord, record: FunctionRecord, first_known: bool) -> None:
    """The later calls' start level: the step's, where its lines reach above
    the later calls' highest so far (all of ``total``'s calls are later ones
    where it does not hold the first)."""
    mine = _top([line.later_calls if first_known else _whole(line) for line in total.lines])
    step = _top([_whole(line) for line in record.lines])
    if step is not None and (mine is None or step > mine):
        known = total.start_level or {"first_call": None, "later_calls": None}
        total.start_level = {**known,
                             "later_calls": (record.start_level or {}).get("later_calls")}


def _fold_one(total: FunctionRecord, record: FunctionRecord,
              meanings: dict[str, Field]) -> None:
    by_line = {line.lineno: line for line in record.lines}
    first_known = any(line.first_call is not None for line in total.lines)
    _later_start(total, record, first_known)
    least_known = any(line.growth_per_call is not None for line in record.lines)
    higher = record.peak is not None and (total.peak is None
                                          or record.peak["bytes"] > total.peak["bytes"])
    for mine in total.lines:
        line = by_line.get(mine.lineno)
        if line is not None and line.ran:
            if not mine.ran:
                mine.count, mine.net_growth = line.count, line.net_growth
                mine.figures = dict(line.figures)
            else:
                mine.count += line.count
                mine.net_growth = (mine.net_growth or 0) + (line.net_growth or 0)
                _add(mine.figures, line.figures, meanings)
            if first_known and mine.later_calls is not None:
                _add(mine.later_calls, _whole(line), meanings)
        if line is not None:
            mine.raised = line.raised or mine.raised
        if least_known and mine.ran:
            # the least over the calls so far; a line that sat out a call grew 0 in it
            found = line.growth_per_call if line is not None else None
            mine.growth_per_call = found if found is not None else 0
        if higher:
            held = line.held_at_peak if line is not None else None
            mine.held_at_peak = held if held is not None or not mine.ran else 0
    total.calls = (total.calls or 0) + (record.calls or 0) or None
    if higher:
        total.peak = dict(record.peak or {})
        total.peak_missing = None
    if record.curve is not None and _curve_peak(record) > _curve_peak(total):
        total.curve, total.curve_of = record.curve, record.curve_of
    if total.curve_of is not None and record.curve_of is not None:
        total.curve_of = total.curve_of.copy()
        total.curve_of["calls"] = record.curve_of["calls"]
    total.postmortem = record.postmortem or total.postmortem


def fold(into: dict[Key, FunctionRecord], records: Sequence[FunctionRecord],
         meanings: dict[str, Field]) -> None:
    """Add ``records`` (one step, ``renumber``-ed) to the steps in ``into``."""
    for record in records:
        total = into.get(key(record))
        if total is None or not total.ran:
            # a copy: the records of later steps are folded into it
            into[key(record)] = record.project(record.columns)
            continue
        _fold_one(total, record, meanings)
