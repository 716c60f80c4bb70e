"""The text of ``diff OLD NEW``, and the rows and notes its HTML view shares
(``diff_html``): per function a table with, per column, the old figure, the
new one and the change, the line and its code, the largest increase marked;
under it the line that blames the peak's change on its parts (or says why it
cannot); at the end each function's summary and each rank, device or function
found on one side only."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

from ..common.sizes import readable_size
from ..records.model import GROWTH, HELD
from .peak_text import PeakItem, summed_items

if TYPE_CHECKING:
    from ..records.diff import FunctionDiff, LineDiff, ProfileDiff

MARK = "<-- largest increase"


def signed(value: Optional[int]) -> str:
    """A change as the tables write it: ``+16.00M``, ``-2.00M``, blank when 0."""
    if not value:
        return ""
    return ("+" if value > 0 else "") + readable_size(value)


@dataclass
class DiffRow:
    """One aligned line of a function's diff, as both views show it."""
    line: "LineDiff"
    lineno: str                  # the new line number, "-N" for a deleted old line N
    figures: list[tuple[Optional[int], Optional[int], Optional[int]]]   # (old, new, change)
    largest: bool                # the largest increase of the function's peak


def diff_columns(fd: "FunctionDiff") -> list[str]:
    return fd.columns + [GROWTH] + ([HELD] if fd.held else [])


def diff_rows(fd: "FunctionDiff") -> list[DiffRow]:
    rows = []
    for line in fd.lines:
        figures = [(line.old.figure(c) if line.old is not None else None,
                    line.new.figure(c) if line.new is not None else None, line.change(c))
                   for c in diff_columns(fd)]
        lineno = str(line.new.lineno) if line.new is not None else f"-{line.old.lineno}"  # type: ignore[union-attr]
        largest = line.new is not None and line.new.lineno == fd.peak_line
        rows.append(DiffRow(line, lineno, figures, largest))
    return rows


def blame_line(fd: "FunctionDiff") -> str:
    """``peak change +5.00M: +4.00M line 8, +1.00M line 9`` (the parts that
    changed, largest first), led by ``grew before the call: ...`` when the
    growth is before the call; or why there is no breakdown."""
    blame = fd.blame
    if blame is None:
        return fd.no_blame
    parts = [PeakItem("before the call", blame.before_call)]
    for line, change in blame.lines:
        if not change:
            continue
        where = (f"line {line.new.lineno}" if line.new is not None
                 else f"old line {line.old.lineno}")  # type: ignore[union-attr]
        parts.append(PeakItem(where, change))
    parts.append(PeakItem("other threads", blame.other_threads))
    if blame.before:
        parts = parts[1:]
    items = ", ".join(f"{signed(p.size)} {p.label}" for p in summed_items(parts))
    if blame.before:
        return (f"grew before the call: {signed(blame.before_call)} (alive before the call "
                f"began) of the peak's {signed(blame.total) or '0.00B'}"
                + (f"; the lines: {items}" if items else ""))
    return f"peak change {signed(blame.total) or '0.00B'}" + (f": {items}" if items else "")


def render_diff_text(result: "ProfileDiff") -> str:
    out: list[str] = []
    for fd in result.functions:
        head = []
        for c in diff_columns(fd):
            head += [f"old {c}", f"new {c}", "change"]
        rows = [head + ["line", "code"]]
        for row in diff_rows(fd):
            cells = []
            for a, b, change in row.figures:
                cells += ["" if a is None else readable_size(a),
                          "" if b is None else readable_size(b), signed(change)]
            mark = f"   {MARK}" if row.largest else ""
            rows.append(cells + [row.lineno, row.line.code + mark])
        widths = [max(len(r[k]) for r in rows) for k in range(len(head) + 1)]
        out.append(f"## {fd.qualname} ({fd.device})\n")
        for r in rows:
            out.append("  ".join(v.rjust(w) for v, w in zip(r, widths)) + "  " + r[-1])
        out += ["", blame_line(fd), ""]
    out += [fd.summary() for fd in result.functions]
    out += [item.text() for item in result.one_side]
    return "\n".join(line.rstrip() for line in out) + "\n"
