"""The line under a function's table that says what its peak is made of:
``peak 21.00M on line 6 (call 1): 16.00M line 6, 4.00M line 5, 1.00M before
the call`` (largest first, at most MAX_ITEMS items, the rest summed), or why
a profile has no such breakdown.  ``peak_items`` is that choice of items,
which the HTML report's bar (``peak_bar``) draws too."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Optional, Sequence

from ..common.sizes import readable_size
from ..records.model import FunctionRecord

MAX_ITEMS = 5


def peak_parts(record: FunctionRecord) -> list[tuple[str, int, Optional[int]]]:
    """(label, bytes, lineno or None) of each non-zero part of the peak,
    largest first (ties: before the call, then by line, then other threads)."""
    peak = record.peak
    if peak is None:
        return []
    parts: list[tuple[str, int, Optional[int]]] = [
        ("before the call", peak["before_call"], None)]
    parts += [(f"line {line.lineno}", line.held_at_peak, line.lineno) for line in record.lines
              if line.held_at_peak]
    parts.append(("other threads", peak["other_threads"], None))
    return sorted((p for p in parts if p[1]), key=lambda p: -p[1])


class PeakItem(NamedTuple):
    """One item of a breakdown: a part of the peak, or the rest summed."""

    label: str                  # "line 6", "before the call", "other threads", "3 more"
    size: int                   # bytes
    lineno: Optional[int]       # a line's item: its number
    code: str                   # a line's item: its source ("" for the others)
    rest: tuple[str, ...] = ()  # "N more": its parts, as "4.00K line 9"


def peak_items(record: FunctionRecord) -> list[PeakItem]:
    """The items the breakdown line shows: the largest parts, the rest summed
    into one item when there are more than MAX_ITEMS."""
    code = {line.lineno: line.code for line in record.lines}
    parts = [PeakItem(label, size, lineno, code.get(lineno, "") if lineno is not None else "")
             for label, size, lineno in peak_parts(record)]
    if len(parts) <= MAX_ITEMS:
        return parts
    rest = parts[MAX_ITEMS - 1:]
    return parts[:MAX_ITEMS - 1] + [PeakItem(
        f"{len(rest)} more", sum(p.size for p in rest), None, "",
        tuple(f"{readable_size(p.size)} {p.label}" for p in rest))]


def peak_line(record: FunctionRecord) -> str:
    """The breakdown line of one record ("" when it has no peak)."""
    peak = record.peak
    if peak is None:
        return ""
    items = ", ".join(f"{readable_size(p.size)} {p.label}" for p in peak_items(record))
    head = (f"peak {readable_size(peak['bytes'])} on line {peak['lineno']} "
            f"(call {peak['call']})")
    return f"{head}: {items}" if items else head


def missing_line(record: FunctionRecord) -> str:
    """Why a live record's held_at_peak cells are empty ("" when they are not)."""
    if record.peak is not None or record.peak_missing is None or not record.has_held:
        return ""
    return f"held at peak: not known, {record.peak_missing}"


@dataclass
class PeakNote:
    """One device's line under a table, and the items of its breakdown
    (none where the line says why there is no breakdown)."""

    text: str
    items: list[PeakItem] = field(default_factory=list)


def peak_breakdowns(records: Sequence[FunctionRecord]) -> list[PeakNote]:
    """One note per device: its breakdown, or why there is none; a device's
    label leads when there are several."""
    notes = []
    for record in records:
        text = peak_line(record) or missing_line(record)
        if text:
            notes.append(PeakNote(f"{record.device}: {text}" if len(records) > 1 else text,
                                  peak_items(record)))
    return notes


def peak_notes(records: Sequence[FunctionRecord]) -> list[str]:
    """The text of ``peak_breakdowns``."""
    return [note.text for note in peak_breakdowns(records)]
