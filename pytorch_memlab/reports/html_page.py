"""The HTML report: one self-contained file (inline CSS and SVG, a few lines of
plain JavaScript to sort, nothing fetched from the network).

Per function: its source, and for each line a bar per column and device,
scaled to the largest figure of that column in the report; click a column's
heading to sort the lines by it (again to reverse, "line" for source order;
``report.html#sort=cpu/active_bytes.all.peak`` opens sorted).
For a ``profile_every`` function, an SVG timeline of active and reserved bytes
after each call.  Above each function's table, the memory curve of its kept
call (``curve_svg``): hover a point for its line, code and figures, click it
to go to that line's row.  Under it, what the function's peak is made of, as
one bar split by the line that allocated each part (``peak_bar``), and which
modules hold what then, by kind (``icicle_svg``).  A legend says what each
column means.

    from pytorch_memlab.html_report import write_report
    write_report(profiler, "report.html")      # or a SavedProfile, or a saved file's path
"""
from __future__ import annotations

import html
import os
from typing import Any, Sequence, Union

from ..common.sizes import readable_size
from ..records.saved import read
from ..records.document import from_document
from ..records.model import Profile, TimelineRow
from .base import Reporter
from .html_assets import CSS, CURVE_JS, RANK_JS, SORT_JS
from .notebook import COLORS, bar_color
from .curve_svg import caption, curve_data, curve_svg
from .legend import UNIT_NOTE, legend_rows
from .peak_bar import peak_bar
from .sections import Figure, HideArg, Table, render_sections, title
_ACTIVE, _RESERVED = COLORS[0], COLORS[1]


ProfileArg = Union[Any, str, "os.PathLike[str]"]


def _profile(profile: ProfileArg) -> Profile:
    """The profile of a LineProfiler, SavedProfile, saved file's path or document."""
    if isinstance(profile, Profile):
        return profile
    if isinstance(profile, (str, os.PathLike)):
        return read(profile)
    if isinstance(profile, dict):
        return from_document(profile, "the profile")
    from .saved_profile import SavedProfile     # it displays through this module
    if isinstance(profile, SavedProfile):
        return profile.profile
    if hasattr(profile, "to_dict"):
        return from_document(profile.to_dict(), "the profile")
    raise TypeError(f"cannot report on {type(profile).__name__}: pass a LineProfiler, "
                    "a SavedProfile, a saved profile's path or its dict")


def _figure(figure: Figure) -> str:
    value, scale = figure.value, figure.scale
    if value is None:
        return '<td class="fig" data-v=""></td>'
    bar = ""
    if scale > 0 and value != 0:
        width = max(0.5, min(100.0, 100.0 * abs(value) / scale))
        fill = bar_color(figure.index, value)
        bar = f'<div class="bar" style="width:{width:.1f}%;background:{fill}"></div>'
    text = html.escape(figure.text)
    return f'<td class="fig" data-v="{value}" title="{value:,}">{bar}<span>{text}</span></td>'


def _curve(view: Any) -> str:
    return (f'<div class="curve"><p class="cap">{html.escape(caption(view))}</p>'
            f"{curve_svg(view)}<div class=\"curvetip\" hidden></div>"
            f'<script type="application/json" class="curve-data">{curve_data(view)}</script>'
            "</div>")


def _section(section: Table) -> str:
    columns = section.columns
    groups = "".join(f'<th class="group" colspan="{len(columns)}">{html.escape(d)}</th>'
                     for d in section.groups)
    heads, col = [], 0
    for device in section.groups:
        for column in columns:
            top, rest = title(column)
            key = html.escape(f"{device}/{column}")
            heads.append(f'<th class="sort" data-col="{col}" data-key="{key}">'
                         f"{html.escape(top)}<br>{html.escape(rest)}</th>")
            col += 1
    heads.append(f'<th class="sort" data-col="{col}" data-key="count">count</th>')
    heads.append(f'<th class="sort asc" data-col="{col + 1}" data-key="line">line</th>')
    heads.append('<th style="text-align:left">code</th>')
    rows = []
    for row in section.rows:
        tds = [_figure(f) for f in row.figures]
        tds.append(f'<td data-v="{row.count}">{row.count}</td>')
        tds.append(f'<td data-v="{row.lineno}">{row.lineno}</td>')
        code = html.escape(row.code) + (
            f' <b class="raised">{html.escape(row.note)}</b>' if row.note else "")
        tds.append(f'<td class="code">{code}</td>')
        cls = "raised" if row.note else ("" if row.ran else "idle")
        attr = f' class="{cls}"' if cls else ""
        rows.append(f'<tr data-line="{row.lineno}"{attr}>{"".join(tds)}</tr>')
    where = f"{section.filename}:{section.first_line}"
    pm = section.postmortem
    after = "" if pm is None else f"<pre>{html.escape(pm)}</pre>"
    peaks = "".join(peak_bar(note) for note in section.peaks) + "".join(
        f'<p class="peaknote">{html.escape(line)}</p>' for line in section.kinds)
    hidden = (f" &middot; {section.hidden} line{'s' if section.hidden != 1 else ''} that "
              "never ran not shown" if section.hidden else "")
    return (f'<section data-qualname="{html.escape(section.qualname)}">'
            f"<h2>{html.escape(section.qualname)}</h2>"
            f'<p class="where">{html.escape(where)}{hidden}</p>'
            f"{''.join(_curve(view) for view in section.curves)}"
            f'<div class="scroll"><table class="prof"><thead><tr>{groups}'
            f'<th colspan="3"></th></tr><tr>{"".join(heads)}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table></div>"
            f"{peaks}{after}</section>")


class _HtmlStyle:
    def section(self, table: Table) -> str:
        return _section(table)

    def note(self, text: str) -> str:
        return f"<p>{html.escape(text)}</p>"


def _timeline_svg(device: str, rows: Sequence[TimelineRow]) -> str:
    """Active and reserved bytes after each call, on one device."""
    width, height, left, right, top, bottom = 640, 170, 70, 12, 12, 26
    calls = [row["call"] for row in rows]
    top_value = max([1] + [row["active_bytes"] for row in rows]
                    + [row["reserved_bytes"] for row in rows])
    first, last = calls[0], calls[-1]
    span = max(1, last - first)

    def x(call: int) -> float:
        return left + (width - left - right) * (call - first) / span

    def y(value: int) -> float:
        return top + (height - top - bottom) * (1 - value / top_value)

    parts = [f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="memory after each call on {html.escape(device)}">',
             f'<rect x="{left}" y="{top}" width="{width - left - right}" '
             f'height="{height - top - bottom}" fill="#fafafa" stroke="#ccc"/>',
             f'<text x="{left - 6}" y="{top + 4}" text-anchor="end">'
             f"{readable_size(top_value)}</text>",
             f'<text x="{left - 6}" y="{height - bottom}" text-anchor="end">0</text>',
             f'<text x="{left}" y="{height - 8}">call {first}</text>',
             f'<text x="{width - right}" y="{height - 8}" text-anchor="end">call {last}</text>']
    # reserved >= active: a wide pale line under a thin one, both visible when equal
    for reserved, color, style in ((True, _RESERVED, 'stroke-width="6" opacity="0.55"'),
                                   (False, _ACTIVE, 'stroke-width="2"')):
        points = " ".join(f"{x(r['call']):.1f},"
                          f"{y(r['reserved_bytes'] if reserved else r['active_bytes']):.1f}"
                          for r in rows)
        parts.append(f'<polyline fill="none" stroke="{color}" {style} '
                     f'stroke-linejoin="round" points="{points}"/>')
    if len(rows) <= 200:
        for r in rows:
            tip = (f"call {r['call']}: active {readable_size(r['active_bytes'])}, "
                   f"reserved {readable_size(r['reserved_bytes'])}")
            parts.append(f'<circle cx="{x(r["call"]):.1f}" cy="{y(r["active_bytes"]):.1f}" '
                         f'r="2.5" fill="{_ACTIVE}"><title>{html.escape(tip)}</title></circle>')
    parts.append("</svg>")
    return "".join(parts)


def _timeline(timeline: Sequence[TimelineRow]) -> str:
    if not timeline:
        return ""
    per_device: dict[str, list[TimelineRow]] = {}
    for row in timeline:
        per_device.setdefault(row["device"], []).append(row)
    out = ["<section><h2>memory after each call</h2>"]
    for device, rows in per_device.items():
        out.append(f'<p class="where">{html.escape(device)}, calls {rows[0]["call"]}'
                   f'&ndash;{rows[-1]["call"]}</p>{_timeline_svg(device, rows)}')
    out.append(f'<p class="legend"><i style="background:{_ACTIVE}"></i>active bytes'
               f'<i style="background:{_RESERVED}"></i>reserved bytes</p></section>')
    return "".join(out)


def _meta(profile: Profile) -> str:
    bits = []
    run = profile.run
    if run:
        argv = " ".join(run.get("argv") or [])
        bits.append(f"<code>{html.escape(argv)}</code> exited with {run.get('exit_status')}")
    bits.append("devices: " + html.escape(", ".join(profile.devices)))
    for key, name in (("torch_version", "torch"), ("pytorch_memlab_version", "pytorch_memlab"),
                      ("python_version", "Python")):
        if profile.versions.get(key):
            bits.append(f"{name} {html.escape(profile.versions[key])}")
    if profile.created:
        bits.append(html.escape(profile.created))
    return " &middot; ".join(bits)


def _legend(profile: Profile) -> str:
    """What each column means, and the size units."""
    rows = legend_rows(profile.columns, [profile.meaning(c) for c in profile.columns],
                       held=any(r.has_held for r in profile.functions))
    items = "".join(f"<dt>{html.escape(name)}</dt><dd>{html.escape(text)}</dd>"
                    for name, text in rows)
    return (f'<details class="columns" open><summary>What the columns mean</summary>'
            f"<dl>{items}</dl><p>{html.escape(UNIT_NOTE)}</p></details>")


def _body(profile: Profile, hide_unrun: HideArg = False) -> list[str]:
    return ([f'<p class="meta">{_meta(profile)}</p>', _legend(profile),
             _timeline(profile.timeline)]
            + render_sections(profile, _HtmlStyle(), hide_unrun=hide_unrun))


def page(title_text: str, body: Sequence[str], script: str = "") -> str:
    """A whole self-contained page: the report's style, sorting and curve
    scripts around ``body`` (also the diff's page, ``diff_html``)."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title_text)}</title><style>{CSS}</style></head>\n"
            f"<body>\n<h1>{html.escape(title_text)}</h1>{''.join(body)}\n"
            f"<script>{SORT_JS}{CURVE_JS}{script}</script>\n</body></html>\n")


class HtmlReport:
    """The report page of one profile (a ``Reporter[Profile]``);
    ``hide_unrun``: leave out the lines that never ran."""

    def __init__(self, title_text: str = "pytorch_memlab line profile",
                 hide_unrun: HideArg = False) -> None:
        self.title_text = title_text
        self.hide_unrun = hide_unrun

    def render(self, profile: Profile) -> str:
        return page(self.title_text, _body(profile, self.hide_unrun))


def render_report(profile: ProfileArg, title_text: str = "pytorch_memlab line profile",
                  hide_unrun: HideArg = False) -> str:
    """The report as one HTML string; ``hide_unrun``: leave out lines that
    never ran (True: of every function; a set: of the functions so named)."""
    reporter: Reporter[Profile] = HtmlReport(title_text, hide_unrun)
    return reporter.render(_profile(profile))


RankDocs = Sequence[dict[str, Any]]


class RanksHtmlReport:
    """One report for the rank profiles of a torchrun job: the merged text
    table, and each rank's full report behind a rank selector (a
    ``Reporter[RankDocs]``: it reads the rank documents, which carry the ranks'
    whole profiles)."""

    def __init__(self, title_text: str = "pytorch_memlab line profile, per rank") -> None:
        self.title_text = title_text

    def render(self, docs: RankDocs) -> str:
        from .rank_table import merged_text
        ordered = sorted(docs, key=lambda d: d["rank"]["rank"])
        options = "".join(f'<option value="{d["rank"]["rank"]}">rank {d["rank"]["rank"]} '
                          f'({html.escape(", ".join(d.get("devices") or []))})</option>'
                          for d in ordered)
        body = ['<h2>all ranks</h2><pre class="merged">'
                f"{html.escape(merged_text(list(ordered)))}</pre>",
                f'<p><label>rank <select id="rank">{options}</select></label></p>']
        for doc in ordered:
            rank = doc["rank"]["rank"]
            one = "".join(_body(from_document(doc, f"rank {rank}'s profile")))
            body.append(f'<div class="rank" data-rank="{rank}">{one}</div>')
        return page(self.title_text, body, RANK_JS)


def render_ranks_report(docs: RankDocs,
                        title_text: str = "pytorch_memlab line profile, per rank") -> str:
    """``RanksHtmlReport``'s page of ``docs``."""
    reporter: Reporter[RankDocs] = RanksHtmlReport(title_text)
    return reporter.render(docs)


def write_ranks_report(docs: Sequence[dict[str, Any]],
                       path: Union[str, "os.PathLike[str]"]) -> None:
    with open(path, "w", encoding="utf-8") as out:
        out.write(render_ranks_report(docs))


def write_report(profile: ProfileArg, path: Union[str, "os.PathLike[str]"], **kwargs: Any) -> None:
    """Write ``render_report(profile)`` to ``path`` (UTF-8)."""
    text = render_report(profile, **kwargs)
    with open(path, "w", encoding="utf-8") as out:
        out.write(text)
