"""The plain-text table.

    ## func

    ─────────────── cpu ────────────────
    active_bytes  reserved_bytes  active_bytes  count  line  code
        all.peak        all.peak    net growth
                                                          7  def func():
           1.00M           1.00M         1.00M      1     8      x = torch.empty(262144)
"""
from __future__ import annotations

from typing import Sequence

from .._postmortem import format_postmortem
from ._sections import Section, cell, count_cell, idle_note, raised_note, sections, title
from ._stats import FunctionRecord

_SEP = "  "


def _group_row(label: str, width: int) -> str:
    text = f" {label} "
    if len(text) >= width:
        return text.strip().rjust(width)
    left = (width - len(text)) // 2
    return "─" * left + text + "─" * (width - len(text) - left)


def _section(section: Section) -> str:
    columns = section.columns
    rows = section.rows()
    # one text column per (device, figure), then count, line, code
    heads: list[tuple[str, str]] = []
    bodies: list[list[str]] = []
    for d in range(len(section.records)):
        for column in columns:
            heads.append(title(column))
            bodies.append([cell(column, lines[d].get(column)) for _, lines in rows])
    heads += [("count", ""), ("line", "")]
    bodies.append([count_cell(first) for first, _ in rows])
    bodies.append([str(first["lineno"]) for first, _ in rows])
    widths = [max([len(h[0]), len(h[1])] + [len(v) for v in body])
              for h, body in zip(heads, bodies)]

    per_group = len(columns)
    groups = [_group_row(device, sum(widths[g * per_group:(g + 1) * per_group])
                         + len(_SEP) * (per_group - 1))
              for g, device in enumerate(section.devices)]
    out = [_SEP.join(groups)]
    for part in (0, 1):
        cells = [h[part].rjust(w) for h, w in zip(heads, widths)]
        out.append(_SEP.join(cells) + _SEP + ("code" if part == 0 else ""))
    for i, (first, _) in enumerate(rows):
        cells = [body[i].rjust(w) for body, w in zip(bodies, widths)]
        note = raised_note(first)
        code = first["code"] + ("   " + note if note else "")
        out.append(_SEP.join(cells) + _SEP + code)
    text = f"## {section.qualname}\n\n" + "\n".join(line.rstrip() for line in out) + "\n"
    pm = section.postmortem
    if pm is not None:
        text += "\n" + format_postmortem(pm, section.qualname) + "\n"
    return text


def render_text(records: Sequence[FunctionRecord]) -> str:
    shown, idle = sections(records)
    parts = [_section(s) for s in shown]
    note = idle_note(idle, bool(shown))
    if note:
        parts.append(note + "\n")
    return "\n\n".join(parts)
