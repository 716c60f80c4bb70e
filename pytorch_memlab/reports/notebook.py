"""The HTML table a notebook shows: inline CSS only (bars are gradients), no JS.
Above a function's table, the memory curve of its kept call (``curve_svg``):
hovering shows a line's figures (SVG titles), clicking goes to its row.  Under
its notes, which modules hold what at its peak (``icicle_svg``, as the HTML
report draws it)."""
from __future__ import annotations

import hashlib
import html
from typing import Optional

from ..records.model import Profile
from .curve_svg import caption, curve_svg, row_anchor
from .sections import Table, render_sections, title

# Seaborn's "muted" cycle, as the old tool used.
COLORS = ("#4878d0", "#ee854a", "#6acc64", "#d65f5f", "#956cb4",
          "#8c613c", "#dc7ec0", "#797979", "#d5bb67", "#82c6e2")
SHRINK = "#d65f5f"   # a negative figure (net growth) and nothing else
# The bar of a figure >= 0: its column's colour, red left out
BAR_COLORS = tuple(c for c in COLORS if c != SHRINK)


def bar_color(index: int, value: int) -> str:
    """The bar colour of the ``index``-th column of a group showing ``value``."""
    return SHRINK if value < 0 else BAR_COLORS[index % len(BAR_COLORS)]

_TABLE = "border-collapse:collapse;font-family:monospace;font-size:12px"
_TH = "padding:2px 8px;text-align:right;border-bottom:1px solid #bbb;vertical-align:bottom"
_TD = "padding:1px 8px;text-align:right;white-space:nowrap"
_CODE = "padding:1px 8px;text-align:left;white-space:pre"
_RAISED = "background:#fde0dc"


def _bar(value: Optional[int], scale: int, index: int) -> str:
    if value is None or scale <= 0:
        return ""
    pct = min(100.0, 100.0 * abs(value) / scale)
    fill = bar_color(index, value)
    return (f"background:linear-gradient(90deg,{fill}99 {pct:.1f}%,"
            f"transparent {pct:.1f}%);")


def _curves(section: Table, anchor: str) -> str:
    return "".join(f'<p style="font-family:monospace;font-size:12px;color:#666;margin:4px 0">'
                   f"{html.escape(caption(view))}</p>{curve_svg(view, anchor)}"
                   for view in section.curves)


def _section(section: Table, anchor: str) -> str:
    columns = section.columns
    head1 = "".join(f'<th colspan="{len(columns)}" style="{_TH};text-align:center">'
                    f"{html.escape(d)}</th>" for d in section.groups)
    head1 += f'<th colspan="3" style="{_TH}"></th>'
    head2 = "".join(f'<th style="{_TH}">{html.escape(a)}<br>{html.escape(b)}</th>'
                    for _ in section.groups for a, b in map(title, columns))
    head2 += (f'<th style="{_TH}">count</th><th style="{_TH}">line</th>'
              f'<th style="{_TH};text-align:left">code</th>')
    body = []
    for row in section.rows:
        tds = [f'<td style="{_TD};{_bar(f.value, f.scale, f.index)}">'
               f"{html.escape(f.text)}</td>" for f in row.figures]
        code = html.escape(row.code) + (
            f' <b style="color:#b00">{html.escape(row.note)}</b>' if row.note else "")
        row_style = f' style="{_RAISED}"' if row.note else ""
        row_id = html.escape(row_anchor(anchor, section.qualname, row.lineno))
        body.append(f'<tr id="{row_id}"{row_style}>{"".join(tds)}'
                    f'<td style="{_TD}">{row.count}</td>'
                    f'<td style="{_TD}">{row.lineno}</td>'
                    f'<td style="{_CODE}">{code}</td></tr>')
    pm = section.postmortem
    after = "" if pm is None else f"<pre>{html.escape(pm)}</pre>"
    return (f'<h3 style="font-family:monospace">{html.escape(section.qualname)}</h3>'
            f"{_curves(section, anchor)}"
            f'<table style="{_TABLE}"><thead><tr>{head1}</tr><tr>{head2}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>{after}")


class _NotebookStyle:
    def __init__(self, profile: Profile) -> None:
        # row ids: the same profile renders the same, other profiles' differ
        names = "\0".join(f"{r.filename}:{r.first_line}:{r.device}" for r in profile.functions)
        self.anchor = "memlab" + hashlib.sha1(names.encode()).hexdigest()[:8]

    def section(self, table: Table) -> str:
        from .icicle_svg import icicle_svg      # it takes this module's colours
        # a note's lines (the peak, then its kinds and modules) stay lines
        return _section(table, self.anchor) + "".join(
            "<p>" + "<br>".join(map(html.escape, n.split("\n"))) + "</p>" for n in table.notes
        ) + "".join(icicle_svg(note.modules_by_kind) for note in table.peaks)

    def note(self, text: str) -> str:
        return f"<p>{html.escape(text)}</p>"


class NotebookReport:
    """What a notebook shows for ``display()`` (``_repr_html_``; a
    ``Reporter[Profile]``); ``by_call``: first call and later calls apart;
    ``hide_unrun``: leave out lines that never ran.  One blank line (an empty
    paragraph's margin) between tables."""

    def __init__(self, by_call: bool = False, hide_unrun: bool = False) -> None:
        self.by_call = by_call
        self.hide_unrun = hide_unrun

    def render(self, profile: Profile) -> str:
        parts = render_sections(profile, _NotebookStyle(profile), self.by_call, self.hide_unrun)
        return ('<div class="pytorch-memlab">' + '\n<div style="height:1em"></div>\n'.join(parts)
                + "</div>"
                + "".join(f"<p>{html.escape(note)}</p>" for note in profile.notes))
