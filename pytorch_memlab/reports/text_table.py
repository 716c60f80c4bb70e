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

from ..records.model import Profile
from .sections import HideArg, Table, render_sections, title

SEP = "  "


def group_row(label: str, width: int) -> str:
    """``label`` centred in a rule ``width`` wide, over its column group."""
    text = f" {label} "
    if len(text) >= width:
        return text.strip().rjust(width)
    left = (width - len(text)) // 2
    return "─" * left + text + "─" * (width - len(text) - left)


def table(groups: Sequence[str], columns: Sequence[str], cells: Sequence[Sequence[str]],
          counts: Sequence[str], linenos: Sequence[int], code: Sequence[str]) -> list[str]:
    """The rows of a table: a rule per group, two title rows, then per line
    ``cells[line]`` (one per group and column), its count, number and code."""
    heads = [title(c) for _ in groups for c in columns] + [("count", ""), ("line", "")]
    bodies = [[row[i] for row in cells] for i in range(len(groups) * len(columns))]
    bodies += [list(counts), [str(n) for n in linenos]]
    widths = [max([len(h[0]), len(h[1])] + [len(v) for v in body])
              for h, body in zip(heads, bodies)]
    per = len(columns)
    out = [SEP.join(group_row(label, sum(widths[g * per:(g + 1) * per]) + len(SEP) * (per - 1))
                    for g, label in enumerate(groups))]
    for part in (0, 1):
        out.append(SEP.join(h[part].rjust(w) for h, w in zip(heads, widths)) + SEP
                   + ("code" if part == 0 else ""))
    for i, text in enumerate(code):
        out.append(SEP.join(body[i].rjust(w) for body, w in zip(bodies, widths)) + SEP + text)
    return [line.rstrip() for line in out]


def section_text(section: Table) -> str:
    """A section as text: its title, the table, then the post-mortem if any."""
    cells = [[figure.text for figure in row.figures] for row in section.rows]
    code = [row.code + ("   " + row.note if row.note else "") for row in section.rows]
    out = table(section.groups, section.columns, cells, [row.count for row in section.rows],
                [row.lineno for row in section.rows], code)
    text = f"## {section.qualname}\n\n" + "\n".join(out) + "\n"
    for note in section.notes:
        text += "\n" + note + "\n"
    if section.postmortem is not None:
        text += "\n" + section.postmortem + "\n"
    return text


class _TextStyle:
    def section(self, table: Table) -> str:
        return section_text(table)

    def note(self, text: str) -> str:
        return text + "\n"


class TextReport:
    """What ``print_stats`` and ``repr`` show (a ``Reporter[Profile]``);
    ``by_call``: first call and later calls side by side; ``hide_unrun``:
    leave out the lines that never ran (in every table, or in those of the
    qualnames it holds).  Each table ends with its newline, and one blank
    line separates it from the next."""

    def __init__(self, by_call: bool = False, hide_unrun: HideArg = False) -> None:
        self.by_call = by_call
        self.hide_unrun = hide_unrun

    def render(self, profile: Profile) -> str:
        text = "\n".join(render_sections(profile, _TextStyle(), self.by_call, self.hide_unrun,
                                         curves=False))
        for note in profile.notes:
            text += note + "\n"
        return text
