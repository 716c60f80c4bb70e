"""The text of ``diff OLD NEW``, and the rows and notes its HTML view shares
(``diff_html``): per function a table with, per column, the old figure, the
new one and the change, the line and its code, the largest increase marked;
under it the line that blames the peak's change on its parts (or says why it
cannot); at the end each function's summary and each rank, device or function
found on one side only."""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Callable, Optional

from ..common.sizes import readable_size
from ..records.model import GROWTH, HELD
from .peak_text import PeakItem, summed_items

if TYPE_CHECKING:
    from ..records.diff import Figures, FunctionDiff, LineDiff, ProfileDiff

MARK = "<-- largest increase"


def signed(value: Optional[int], size: Callable[[int], str] = readable_size) -> str:
    """A change as the tables write it: ``+16.00M``, ``-2.00M``, blank when 0
    (``size`` writes the figure)."""
    if not value:
        return ""
    return ("+" if value > 0 else "") + size(value)


@dataclass
class DiffRow:
    """One aligned line of a function's diff, as both views show it."""
    line: "LineDiff"
    lineno: str                  # the new line number, "-N" for a deleted old line N
    figures: list["Figures"]     # (old, new, change) per column
    largest: bool                # the largest increase of the function's peak


def diff_columns(fd: "FunctionDiff") -> list[str]:
    return fd.columns + [GROWTH] + ([HELD] if fd.held else [])


def diff_rows(fd: "FunctionDiff") -> list[DiffRow]:
    columns = diff_columns(fd)
    rows = []
    for line in fd.lines:
        if line.new is not None:
            lineno, largest = str(line.new.lineno), line.new.lineno == fd.peak_line
        else:
            lineno, largest = f"-{line.old.lineno}", False  # type: ignore[union-attr]
        rows.append(DiffRow(line, lineno, line.figures(columns), largest))
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
    # An unchanged line's old and new figures are the same: each value is written once.
    size = lru_cache(maxsize=None)(readable_size)
    out: list[str] = []
    for fd in result.functions:
        rows = diff_rows(fd)
        # the table column by column: its heading, then its cells
        columns: list[list[str]] = []
        for k, c in enumerate(diff_columns(fd)):
            figures = [row.figures[k] for row in rows]
            columns += [[f"old {c}"] + ["" if old is None else size(old) for old, _, _ in figures],
                        [f"new {c}"] + ["" if new is None else size(new) for _, new, _ in figures],
                        ["change"] + [signed(change, size) for _, _, change in figures]]
        columns.append(["line"] + [row.lineno for row in rows])
        code = ["code"] + [row.line.code + (f"   {MARK}" if row.largest else "") for row in rows]
        # each column but the code right-aligned to its widest cell, then the code
        template = "  ".join(f"{{:>{max(map(len, column))}}}" for column in columns) + "  {}"
        out.append(f"## {fd.qualname} ({fd.device})\n")
        out += [template.format(*cells) for cells in zip(*columns, code)]
        out += ["", blame_line(fd), ""]
    out += [fd.summary() for fd in result.functions]
    out += [item.text() for item in result.one_side]
    return "\n".join(line.rstrip() for line in out) + "\n"
