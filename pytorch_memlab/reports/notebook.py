"""The HTML table a notebook shows: inline CSS only (bars are gradients), no JS."""
from __future__ import annotations

import html
from typing import Optional

from ..records.model import Profile
from .postmortem_text import format_postmortem
from .sections import (Section, cell, count_cell, idle_note, raised_note, scales,
                       sections, title)

# Seaborn's "muted" cycle, as the old tool used.
COLORS = ("#4878d0", "#ee854a", "#6acc64", "#d65f5f", "#956cb4",
          "#8c613c", "#dc7ec0", "#797979", "#d5bb67", "#82c6e2")
SHRINK = "#d65f5f"   # a negative net growth

_TABLE = "border-collapse:collapse;font-family:monospace;font-size:12px"
_TH = "padding:2px 8px;text-align:right;border-bottom:1px solid #bbb;vertical-align:bottom"
_TD = "padding:1px 8px;text-align:right;white-space:nowrap"
_CODE = "padding:1px 8px;text-align:left;white-space:pre"
_RAISED = "background:#fde0dc"


def _bar(value: Optional[int], scale: int, color: str) -> str:
    if value is None or scale <= 0:
        return ""
    pct = min(100.0, 100.0 * abs(value) / scale)
    fill = SHRINK if value < 0 else color
    return (f"background:linear-gradient(90deg,{fill}99 {pct:.1f}%,"
            f"transparent {pct:.1f}%);")


def _section(section: Section, full: dict[tuple[str, str], int]) -> str:
    columns = section.columns
    head1 = "".join(f'<th colspan="{len(columns)}" style="{_TH};text-align:center">'
                    f"{html.escape(d)}</th>" for d in section.devices)
    head1 += f'<th colspan="3" style="{_TH}"></th>'
    head2 = "".join(f'<th style="{_TH}">{html.escape(a)}<br>{html.escape(b)}</th>'
                    for _ in section.devices for a, b in map(title, columns))
    head2 += (f'<th style="{_TH}">count</th><th style="{_TH}">line</th>'
              f'<th style="{_TH};text-align:left">code</th>')
    body = []
    for first, lines in section.rows():
        tds = []
        for device, line in zip(section.devices, lines):
            for c, column in enumerate(columns):
                value = line.figure(column)
                bar = _bar(value, full.get((device, column), 0), COLORS[c % len(COLORS)])
                tds.append(f'<td style="{_TD};{bar}">{html.escape(cell(column, value))}</td>')
        note = raised_note(first.raised)
        code = html.escape(first.code) + (
            f' <b style="color:#b00">{html.escape(note)}</b>' if note else "")
        row_style = f' style="{_RAISED}"' if note else ""
        body.append(f"<tr{row_style}>{''.join(tds)}"
                    f'<td style="{_TD}">{count_cell(first)}</td>'
                    f'<td style="{_TD}">{first.lineno}</td>'
                    f'<td style="{_CODE}">{code}</td></tr>')
    pm = section.postmortem
    after = ("" if pm is None else
             f"<pre>{html.escape(format_postmortem(pm, section.qualname))}</pre>")
    return (f'<h3 style="font-family:monospace">{html.escape(section.qualname)}</h3>'
            f'<table style="{_TABLE}"><thead><tr>{head1}</tr><tr>{head2}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>{after}")


class NotebookReport:
    """What a notebook shows for ``display()`` (``_repr_html_``)."""

    def render(self, profile: Profile) -> str:
        shown, idle = sections(profile.functions)
        full = scales(shown)
        parts = [_section(s, full) for s in shown]
        note = idle_note(idle, bool(shown))
        if note:
            parts.append(f"<p>{html.escape(note)}</p>")
        return ('<div class="pytorch-memlab">' + "\n".join(parts) + "</div>"
                + "".join(f"<p>{html.escape(note)}</p>" for note in profile.notes))
