"""``view --curve``: each function's kept curve as a compact text chart, one
row per bucket of consecutive line events (at most ``ROWS``), a bar for the
bucket's highest line peak.

    ## f  (cpu: call 1 of 2, the one that reached the peak; 6 line events)

      events  line      active    reserved   line peak
         1-1     7       4.00M       4.00M       4.00M  ████████████████████████████████
         2-2     4 g     5.00M       5.00M       5.00M  ████████████████████████████████████████  <- peak
"""
from __future__ import annotations

from ..common.sizes import readable_size
from ..records.curve import peak_index
from ..records.model import Profile
from .curve_svg import CurveView, caption
from .sections import tables

ROWS = 60
BAR = 40


def chart(view: CurveView, rows: int = ROWS, width: int = BAR) -> str:
    """The chart of one curve: at most ``rows`` rows."""
    points, n = view.points, len(view.points)
    buckets = min(n, rows)
    top = max([1] + [p[3] for p in points])
    best = peak_index(points)
    out = [f"## {view.qualname}  ({caption(view)})", "",
           f"{'events':>13}  {'line':>5}  {'active':>10}  {'reserved':>10}  {'line peak':>10}"]
    merged = view.info["merged"]
    for b in range(buckets):
        lo, hi = b * n // buckets, (b + 1) * n // buckets
        span = range(lo, hi)
        high = max(span, key=lambda i: points[i][3])
        p = points[high]
        first, last = lo * merged + 1, min(hi * merged, view.info["line_events"])
        events = f"{first}" if first == last else f"{first}-{last}"
        bar = "█" * max(1, round(width * p[3] / top)) if p[3] > 0 else ""
        mark = (f"  (in {p[4]})" if len(p) > 4 else "") + (
            "  <- peak" if best is not None and lo <= best < hi else "")
        active = max(points[i][1] for i in span)
        reserved = max(points[i][2] for i in span)
        out.append(f"{events:>13}  {p[0]:>5}  {readable_size(active):>10}  "
                   f"{readable_size(reserved):>10}  {readable_size(p[3]):>10}  "
                   f"{bar:<{width}}{mark}")
    return "\n".join(line.rstrip() for line in out) + "\n"


def curve_charts(profile: Profile) -> str:
    """Every kept curve of ``profile``, one blank line between charts; a note
    when there is none."""
    views = [view for table in tables(profile)[0] for view in table.curves]
    if not views:
        return ("This profile has no curve: it was saved before curves were recorded "
                "(schema version < 3), or profiled with curve=None.\n")
    return "\n".join(chart(view) for view in views)
