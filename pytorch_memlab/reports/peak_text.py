"""The line under a function's table that says what its peak is made of:
``peak 21.00M on line 6 (call 1): 16.00M line 6, 4.00M line 5, 1.00M before
the call`` (largest first, at most MAX_ITEMS items, the rest summed), or why
a profile has no such breakdown."""
from __future__ import annotations

from typing import Optional, Sequence

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


def summed_items(parts: Sequence[tuple[str, int]]) -> str:
    """"16.00M line 6, 4.00M line 5, ...": the non-zero ``(label, bytes)``,
    largest first (ties keep their order), at most MAX_ITEMS items, the
    rest summed (the out-of-memory post-mortem's breakdown says it so too)."""
    ordered = sorted((p for p in parts if p[1]), key=lambda p: -p[1])
    if len(ordered) > MAX_ITEMS:
        rest = ordered[MAX_ITEMS - 1:]
        ordered = ordered[:MAX_ITEMS - 1] + [(f"{len(rest)} more", sum(s for _, s in rest))]
    return ", ".join(f"{readable_size(size)} {label}" for label, size in ordered)


def peak_line(record: FunctionRecord) -> str:
    """The breakdown line of one record ("" when it has no peak)."""
    peak = record.peak
    if peak is None:
        return ""
    items = summed_items([(label, size) for label, size, _ in peak_parts(record)])
    head = (f"peak {readable_size(peak['bytes'])} on line {peak['lineno']} "
            f"(call {peak['call']})")
    return f"{head}: {items}" if items else head


def missing_line(record: FunctionRecord) -> str:
    """Why a live record's held_at_peak cells are empty ("" when they are not)."""
    if record.peak is not None or record.peak_missing is None or not record.has_held:
        return ""
    return f"held at peak: not known, {record.peak_missing}"


def peak_notes(records: Sequence[FunctionRecord]) -> list[str]:
    """One line per device: its breakdown, or why there is none; a device's
    label leads when there are several."""
    notes = []
    for record in records:
        text = peak_line(record) or missing_line(record)
        if text:
            notes.append(f"{record.device}: {text}" if len(records) > 1 else text)
    return notes
