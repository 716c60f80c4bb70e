"""The HTML view of ``diff OLD NEW`` (``-o diff.html``): one self-contained
page in the report's style (``html_page.page``).  Per function a table with,
per column, the old figure, the new one and the change (exact bytes on
hover, red for an increase, green for a decrease), the line and its code; the
row of the largest increase is highlighted, a deleted old line is grey, and
the line blaming the peak's change and the summary close the function; the
ranks, devices and functions found on one side only follow the summaries.
Click a heading to sort by it.  A table wider than the window scrolls
sideways in its own box (``div.scroll``), as the report's do."""
from __future__ import annotations

import html
from typing import TYPE_CHECKING, Optional

from ..common.sizes import readable_size
from .html_page import page
from .sections import title

if TYPE_CHECKING:
    from ..records.diff import FunctionDiff, ProfileDiff


def _cell(value: Optional[int], text: str, cls: str = "") -> str:
    klass = f' class="{cls}"' if cls else ""
    if value is None:
        return f'<td{klass} data-v=""></td>'
    return f'<td{klass} data-v="{value}" title="{value:,} bytes">{html.escape(text)}</td>'


def _function(fd: "FunctionDiff") -> str:
    from .diff_text import blame_line, diff_columns, diff_rows, signed
    columns = diff_columns(fd)
    groups = "".join(f'<th class="group" colspan="3">{"<br>".join(map(html.escape, title(c)))}'
                     "</th>" for c in columns)
    heads, col = [], 0
    for column in columns:
        for part in ("old", "new", "change"):
            key = html.escape(f"{part}/{column}")
            heads.append(f'<th class="sort" data-col="{col}" data-key="{key}">{part}</th>')
            col += 1
    heads.append(f'<th class="sort asc" data-col="{col}" data-key="line">line</th>')
    heads.append('<th style="text-align:left">code</th>')
    rows = []
    for row in diff_rows(fd):
        tds = []
        for old, new, change in row.figures:
            tds.append(_cell(old, "" if old is None else readable_size(old)))
            tds.append(_cell(new, "" if new is None else readable_size(new)))
            trend = "up" if (change or 0) > 0 else "down" if (change or 0) < 0 else ""
            tds.append(_cell(change if change else None, signed(change), trend))
        order = row.line.new.lineno if row.line.new is not None else row.line.old.lineno  # type: ignore[union-attr]
        tds.append(f'<td data-v="{order}">{html.escape(row.lineno)}</td>')
        mark = ' <b class="largest">&larr; largest increase</b>' if row.largest else ""
        tds.append(f'<td class="code">{html.escape(row.line.code)}{mark}</td>')
        cls = "largest" if row.largest else "gone" if row.line.new is None else ""
        attr = f' class="{cls}"' if cls else ""
        rows.append(f'<tr data-line="{order}"{attr}>{"".join(tds)}</tr>')
    name = f"{fd.qualname} ({fd.device})"
    return (f'<section data-qualname="{html.escape(fd.qualname)}">'
            f"<h2>{html.escape(name)}</h2>"
            f'<div class="scroll"><table class="prof"><thead><tr>{groups}'
            f'<th colspan="2"></th></tr><tr>{"".join(heads)}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table></div>"
            f'<p class="blame">{html.escape(blame_line(fd))}</p>'
            f'<p class="summary">{html.escape(fd.summary())}</p></section>')


def render_diff_html(result: "ProfileDiff",
                     title_text: str = "pytorch_memlab diff") -> str:
    body = [_function(fd) for fd in result.functions]
    body.append("<h2>summary</h2>" + "".join(
        f'<p class="summary">{html.escape(fd.summary())}</p>' for fd in result.functions)
        + "".join(f'<p class="one-side">{html.escape(item.text())}</p>'
                  for item in result.one_side))
    return page(title_text, body)
