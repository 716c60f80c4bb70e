"""The memory curve of one call: which call a profiler keeps, and
what a record's ``curve`` holds.

For each profiled function and device the tracer keeps the line events of
one outermost call, in the order the lines ended: by default the call in
which the function reached its peak (``curve="peak"``), else the first, the
last, the N-th, or none (``curve=None``).  Each point is ``[lineno, active,
reserved, line_peak]``: active and reserved bytes at the line's end and the
highest active bytes inside it; a line of a nested profiled call carries its
function's qualname as a fifth item.  Whatever columns a profiler records,
a curve reads these three fields (``CURVE_FIELDS``), recorded alongside.  At
most ``MAX_POINTS`` points are kept: past that, neighbours are merged into
their maximum (``CurveInfo.merged`` events per point).
"""
from __future__ import annotations

from typing import Any, Optional, TypedDict, Union

CurveArg = Union[str, int, None]
CHOICES = ("peak", "first", "last")
DEFAULT_CURVE: CurveArg = "peak"

# What a point reads: the level at the line's end of active bytes (the
# growth field, always recorded), of reserved bytes, and active bytes' peak.
RESERVED_FIELD = "reserved_bytes.all.current"
PEAK_FIELD = "active_bytes.all.peak"
CURVE_FIELDS = ("active_bytes.all.current", RESERVED_FIELD, PEAK_FIELD)

MAX_POINTS = 100_000   # the tracer's CURVE_MAX_POINTS

# [lineno, active, reserved, line_peak] or, for a nested function's line,
# [lineno, active, reserved, line_peak, qualname]
CurvePoint = list[Any]


class CurveInfo(TypedDict):
    """Which call a curve is, and how it was kept."""

    choice: Union[str, int]   # "peak", "first", "last" or the call's number
    call: int                 # the call kept: the n-th outermost call
    calls: int                # outermost calls while profiling
    line_events: int          # line events of that call
    merged: int               # line events per point (1: none merged)


def check_curve(curve: Any) -> CurveArg:
    """``curve`` as given, or ValueError naming what ``curve=`` accepts."""
    if curve is None or curve in CHOICES:
        return curve  # type: ignore[no-any-return]
    if isinstance(curve, int) and not isinstance(curve, bool) and curve >= 1:
        return curve
    raise ValueError(f"curve={curve!r}: expected \"peak\" (the call that reached the peak), "
                     "\"first\", \"last\", a call number >= 1, or None (no curve)")


def describe(info: CurveInfo) -> str:
    """"call 3 of 5, the one that reached the peak; 812 line events"."""
    why = {"peak": ", the one that reached the peak", "first": ", the first",
           "last": ", the last"}.get(str(info["choice"]), "")
    text = f"call {info['call']} of {info['calls']}{why}; {info['line_events']:,} line events"
    if info["merged"] > 1:
        text += (f", more than {MAX_POINTS:,}: every {info['merged']} consecutive events "
                 "are merged into one point holding their maximum")
    return text


def peak_index(points: list[CurvePoint]) -> Optional[int]:
    """The first point with the highest line peak."""
    if not points:
        return None
    best = 0
    for i, point in enumerate(points):
        if point[3] > points[best][3]:
            best = i
    return best
