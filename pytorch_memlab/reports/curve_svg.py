"""The memory curve of one call as inline SVG, shared by the HTML
report (which adds a script: hover and click) and the notebook (no script:
each stretch of the curve is a link to its table row, with a tooltip).

x is the order of the call's line events, y bytes on round MiB/GiB ticks:
active bytes at each line's end (solid), reserved bytes (wide, pale), the
peak inside each line (dashed); the highest peak is marked, and the lines of
nested profiled calls are shaded and labelled with the callee's name.  One
polyline per figure, so a 100,000-point curve is three elements, not
300,000."""
from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from typing import Optional

from ..common.sizes import axis_ticks, readable_size
from ..records.curve import CurveInfo, CurvePoint, describe, peak_index

ACTIVE, RESERVED, PEAK_MARK, NESTED = "#4878d0", "#ee854a", "#d62728", "#956cb4"
WIDTH, HEIGHT = 760, 236
LEFT, RIGHT, TOP, BOTTOM = 72, 14, 20, 52
PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
MAX_SPANS = 2000          # shaded nested spans drawn (narrower ones merge first)
LINK_BUCKETS = 300        # the notebook's hover/link regions


@dataclass
class CurveView:
    """One function's curve on one device, with the code of its lines."""

    qualname: str
    device: str
    points: list[CurvePoint]
    info: CurveInfo
    # qualname -> lineno -> source text, for the lines the points name
    code: dict[str, dict[int, str]] = field(default_factory=dict)

    def code_of(self, point: CurvePoint) -> str:
        owner = point[4] if len(point) > 4 else self.qualname
        return self.code.get(owner, {}).get(point[0], "")


def _x(i: int, n: int) -> float:
    return LEFT + PLOT_W * (i / (n - 1) if n > 1 else 0.5)


def _top(points: list[CurvePoint]) -> int:
    return max([1] + [int(max(p[1], p[2], p[3])) for p in points])


def _spans(points: list[CurvePoint]) -> list[tuple[float, float, str]]:
    """(x from, x to, callee) of each run of a nested call's lines, runs of
    one callee closer than a pixel merged, at most MAX_SPANS."""
    n, half = len(points), PLOT_W / max(len(points) - 1, 1) / 2
    runs: list[list] = []   # type: ignore[type-arg]
    for i, point in enumerate(points):
        callee = point[4] if len(point) > 4 else None
        if callee is None:
            continue
        x0, x1 = _x(i, n) - half, _x(i, n) + half
        if runs and runs[-1][2] == callee and x0 - runs[-1][1] < 1.0:
            runs[-1][1] = x1
        else:
            runs.append([x0, x1, callee])
    gap = 1.0
    while len(runs) > MAX_SPANS:   # merge the closest neighbours until few enough
        merged: list[list] = []   # type: ignore[type-arg]
        for run in runs:
            if merged and run[0] - merged[-1][1] < gap:
                merged[-1][1] = run[1]
            else:
                merged.append(run)
        runs, gap = merged, gap * 2
    return [(max(LEFT, a), min(LEFT + PLOT_W, b), str(c)) for a, b, c in runs]


def _figures(view: CurveView, point: CurvePoint) -> str:
    where = f" (in {point[4]})" if len(point) > 4 else ""
    return (f"line {point[0]}{where}: {view.code_of(point).strip()}\n"
            f"active {readable_size(point[1])}, reserved {readable_size(point[2])}, "
            f"peak in line {readable_size(point[3])}")


def _links(view: CurveView, anchor: str, y: float) -> list[str]:
    """The notebook's hover and click: per stretch of the curve, a link to
    the row of its highest point, titled with that line's figures."""
    n = len(view.points)
    buckets = min(n, LINK_BUCKETS)
    out = []
    for b in range(buckets):
        lo, hi = b * n // buckets, (b + 1) * n // buckets
        best = max(range(lo, hi), key=lambda i: view.points[i][3])
        point = view.points[best]
        x0 = LEFT + PLOT_W * b / buckets
        owner = point[4] if len(point) > 4 else view.qualname
        out.append(f'<a href="#{html.escape(anchor)}-{html.escape(_slug(owner))}-{point[0]}">'
                   f'<rect x="{x0:.1f}" y="{TOP}" width="{PLOT_W / buckets:.2f}" '
                   f'height="{y - TOP:.1f}" fill="#fff" fill-opacity="0">'
                   f"<title>{html.escape(_figures(view, point))}</title></rect></a>")
    return out


def _slug(qualname: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in qualname)


def row_anchor(prefix: str, qualname: str, lineno: int) -> str:
    """The id a table row carries so a curve's link finds it."""
    return f"{prefix}-{_slug(qualname)}-{lineno}"


def curve_svg(view: CurveView, anchor: Optional[str] = None) -> str:
    """The chart; with ``anchor`` (the notebook), links from the curve to
    rows whose ids ``row_anchor(anchor, ...)`` made."""
    points, n = view.points, len(view.points)
    ticks = axis_ticks(_top(points))
    top = ticks[-1][0] or 1

    def y(value: int) -> float:
        return TOP + PLOT_H * (1 - value / top)

    def line(k: int) -> str:
        return " ".join(f"{_x(i, n):.1f},{y(p[k]):.1f}" for i, p in enumerate(points))

    bottom = TOP + PLOT_H
    out = [f'<svg class="curve" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
           f'height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
           f'data-points="{n}" font-family="monospace" font-size="11" '
           f'aria-label="memory over the line events of one call of '
           f'{html.escape(view.qualname)} on {html.escape(view.device)}">',
           f'<rect x="{LEFT}" y="{TOP}" width="{PLOT_W}" height="{PLOT_H}" fill="#fafafa" '
           'stroke="#ccc"/>']
    for x0, x1, callee in _spans(points):
        out.append(f'<rect class="nested" x="{x0:.1f}" y="{TOP}" width="{max(x1 - x0, 0.5):.1f}" '
                   f'height="{PLOT_H}" fill="{NESTED}" fill-opacity="0.14">'
                   f"<title>{html.escape(callee)}</title></rect>")
        if x1 - x0 >= 7 * len(callee) + 6:
            out.append(f'<text x="{(x0 + x1) / 2:.1f}" y="{TOP + PLOT_H - 5}" '
                       f'text-anchor="middle" '
                       f'fill="{NESTED}">{html.escape(callee)}</text>')
    for value, label in ticks:
        out.append(f'<line x1="{LEFT}" x2="{LEFT + PLOT_W}" y1="{y(value):.1f}" '
                   f'y2="{y(value):.1f}" stroke="#e4e4e4"/>'
                   f'<text x="{LEFT - 6}" y="{y(value) + 4:.1f}" text-anchor="end" '
                   f'fill="#444">{label}</text>')
    out.append(f'<polyline class="reserved" fill="none" stroke="{RESERVED}" stroke-width="5" '
               f'stroke-opacity="0.5" stroke-linejoin="round" points="{line(2)}"/>')
    out.append(f'<polyline class="peak" fill="none" stroke="{ACTIVE}" stroke-width="1" '
               f'stroke-dasharray="3 2" stroke-opacity="0.7" points="{line(3)}"/>')
    out.append(f'<polyline class="active" fill="none" stroke="{ACTIVE}" stroke-width="1.8" '
               f'stroke-linejoin="round" points="{line(1)}"/>')
    best = peak_index(points)
    if best is not None:
        p = points[best]
        px, py = _x(best, n), y(p[3])
        anchor_side = "end" if px > LEFT + PLOT_W * 0.7 else "start"
        dx = -7 if anchor_side == "end" else 7
        out.append(f'<circle class="peakmark" cx="{px:.1f}" cy="{py:.1f}" r="4.5" fill="none" '
                   f'stroke="{PEAK_MARK}" stroke-width="2"><title>{html.escape(_figures(view, p))}'
                   f'</title></circle><text x="{px + dx:.1f}" y="{max(py - 6, TOP + 10):.1f}" '
                   f'text-anchor="{anchor_side}" fill="{PEAK_MARK}">peak {readable_size(p[3])} '
                   f"(line {p[0]}{' in ' + str(p[4]) if len(p) > 4 else ''})</text>")
    out.append(f'<text x="{LEFT}" y="{bottom + 14}" fill="#444">event 1</text>'
               f'<text x="{LEFT + PLOT_W / 2:.0f}" y="{bottom + 14}" text-anchor="middle" '
               f'fill="#888">line events of the call, in order</text>'
               f'<text x="{LEFT + PLOT_W}" y="{bottom + 14}" text-anchor="end" '
               f'fill="#444">{n}</text>')
    legend = ((ACTIVE, "active at line end", ""), (ACTIVE, "peak inside line", "3 2"),
              (RESERVED, "reserved at line end", ""))
    lx, ly = LEFT, HEIGHT - 10
    for color, label, dash in legend:
        width = "5\" stroke-opacity=\"0.5" if color == RESERVED else "2"
        out.append(f'<line x1="{lx}" x2="{lx + 18}" y1="{ly - 4}" y2="{ly - 4}" '
                   f'stroke="{color}" stroke-width="{width}" stroke-dasharray="{dash or "none"}"/>'
                   f'<text x="{lx + 22}" y="{ly}" fill="#444">{label}</text>')
        lx += 34 + 7 * len(label)
    out.append(f'<rect x="{lx}" y="{ly - 9}" width="14" height="10" fill="{NESTED}" '
               f'fill-opacity="0.25"/><text x="{lx + 18}" y="{ly}" fill="#444">nested call</text>'
               f'<circle cx="{lx + 112}" cy="{ly - 4}" r="4" fill="none" stroke="{PEAK_MARK}" '
               f'stroke-width="2"/><text x="{lx + 120}" y="{ly}" fill="#444">peak</text>')
    if anchor is not None:
        out.extend(_links(view, anchor, bottom))
    else:   # the HTML report's script moves these to the hovered point
        out.append(f'<line class="rule" x1="0" x2="0" y1="{TOP}" y2="{bottom}" stroke="#666" '
                   f'stroke-dasharray="2 2" visibility="hidden"/><circle class="mark" r="4" '
                   f'fill="{ACTIVE}" visibility="hidden"/>'
                   f'<rect class="hit" x="{LEFT}" y="{TOP}" width="{PLOT_W}" height="{PLOT_H}" '
                   'fill="#fff" fill-opacity="0" style="cursor:pointer"/>')
    out.append("</svg>")
    return "".join(out)


def caption(view: CurveView) -> str:
    """"cpu: call 2 of 3, the one that reached the peak; 812 line events"."""
    return f"{view.device}: {describe(view.info)}"


def curve_data(view: CurveView) -> str:
    """What the HTML report's script reads: the points column by column, the
    callees by index, the code of each line named, the plot's geometry.  For
    a <script type="application/json">: "</" cannot close it."""
    callees: list[str] = []
    index: dict[str, int] = {}
    columns: list[list[int]] = [[], [], [], [], []]
    for p in view.points:
        for k in range(4):
            columns[k].append(p[k])
        if len(p) > 4:
            if p[4] not in index:
                index[p[4]] = len(callees)
                callees.append(p[4])
            columns[4].append(index[p[4]])
        else:
            columns[4].append(-1)
    top = axis_ticks(_top(view.points))[-1][0] or 1
    data = {"line": columns[0], "active": columns[1], "reserved": columns[2],
            "peak": columns[3], "callee": columns[4], "callees": callees,
            "self": view.qualname, "code": {q: {str(k): v for k, v in lines.items()}
                                            for q, lines in view.code.items()},
            "geom": {"left": LEFT, "width": PLOT_W, "top": TOP, "height": PLOT_H,
                     "max": top, "vw": WIDTH}}
    return json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
