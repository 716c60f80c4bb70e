"""The line under a function's table that says what its peak is made of:
``peak 21.00M on line 6 (call 1): 16.00M line 6, 4.00M line 5, 1.00M before
the call`` (largest first, at most MAX_ITEMS items, the rest summed), or why
a profile has no such breakdown.  ``peak_items`` are that line's items, which
the HTML report's bar (``peak_bar``) draws too; ``summed_items`` chooses them,
and the out-of-memory post-mortem's breakdown by line too."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, NamedTuple, Optional, Sequence

from ..common.sizes import readable_size
from ..records.model import FunctionRecord

MAX_ITEMS = 5


class PeakItem(NamedTuple):
    """One item of a breakdown: a part of the peak, or the rest summed."""

    label: str                  # "line 6", "before the call", "other threads", "3 more"
    size: int                   # bytes
    lineno: Optional[int] = None  # a line's item: its number
    code: str = ""              # a line's item: its source ("" for the others)
    rest: tuple["PeakItem", ...] = ()  # "N more": its parts


def summed_items(parts: Iterable[PeakItem]) -> list[PeakItem]:
    """The items a breakdown shows: the non-zero parts, largest first (by
    size without sign, for a diff's changes; ties keep their order), at most
    MAX_ITEMS, the rest summed into one "N more" item.  The peak's line and
    bar, the out-of-memory post-mortem's breakdown and a diff's blame all
    choose their items here."""
    ordered = sorted((p for p in parts if p.size), key=lambda p: -abs(p.size))
    if len(ordered) <= MAX_ITEMS:
        return ordered
    rest = ordered[MAX_ITEMS - 1:]
    return ordered[:MAX_ITEMS - 1] + [PeakItem(
        f"{len(rest)} more", sum(p.size for p in rest), rest=tuple(rest))]


def items_text(items: Iterable[PeakItem]) -> str:
    """"16.00M line 6, 4.00M line 5"."""
    return ", ".join(f"{readable_size(p.size)} {p.label}" for p in items)


def peak_items(record: FunctionRecord) -> list[PeakItem]:
    """The items of a record's peak: before the call, each line with its code,
    other threads (ties in that order), chosen by ``summed_items``."""
    peak = record.peak
    if peak is None:
        return []
    parts = [PeakItem("before the call", peak["before_call"])]
    parts += [PeakItem(f"line {line.lineno}", line.held_at_peak, line.lineno, line.code)
              for line in record.lines if line.held_at_peak]
    parts.append(PeakItem("other threads", peak["other_threads"]))
    return summed_items(parts)


def peak_line(record: FunctionRecord) -> str:
    """The breakdown line of one record ("" when it has no peak)."""
    peak = record.peak
    if peak is None:
        return ""
    items = items_text(peak_items(record))
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
    (none where the line says why there is no breakdown); the peak's
    ``modules_by_kind`` (empty where it has none), which the HTML report draws."""

    text: str
    items: list[PeakItem] = field(default_factory=list)
    modules_by_kind: dict[str, dict[str, int]] = field(default_factory=dict)


def peak_breakdowns(records: Sequence[FunctionRecord]) -> list[PeakNote]:
    """One note per device: its breakdown, or why there is none; a device's
    label leads when there are several."""
    notes = []
    for record in records:
        text = peak_line(record) or missing_line(record)
        if text:
            notes.append(PeakNote(f"{record.device}: {text}" if len(records) > 1 else text,
                                  peak_items(record),
                                  (record.peak or {}).get("modules_by_kind", {})))
    return notes


def peak_notes(records: Sequence[FunctionRecord]) -> list[str]:
    """The text of ``peak_breakdowns``."""
    return [note.text for note in peak_breakdowns(records)]
