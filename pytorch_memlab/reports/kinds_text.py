"""The line under a function's table, after its peak line, that says what the
peak is made of in the model's terms: ``by kind: 3.10G saved for backward,
2.40G optimizer state, 1.20G parameters`` (largest first, at most
``peak_text.MAX_ITEMS`` items, the rest summed), or why the kinds are not
known exactly."""
from __future__ import annotations

from typing import Sequence

from ..kinds.names import INPUT, LABELS, OTHER, TEMPORARY
from ..records.model import FunctionRecord
from .peak_text import PeakItem, items_text, missing_line, summed_items


def kind_items(record: FunctionRecord) -> list[PeakItem]:
    """The items of a record's ``by_kind``, chosen by ``summed_items``."""
    by_kind = (record.peak or {}).get("by_kind") or {}
    return summed_items(PeakItem(LABELS.get(kind, kind), size) for kind, size in by_kind.items())


def kind_line(record: FunctionRecord) -> str:
    """The by-kind line of one record: "" when its peak has no kinds, or only
    the kinds the peak line already says (input: before the call; temporary:
    its lines; other: other threads)."""
    peak = record.peak
    if peak is None:
        return ""
    if peak.get("by_kind_missing"):
        return f"by kind: not exact, {peak['by_kind_missing']}"
    if not set(peak.get("by_kind") or ()) - {INPUT, TEMPORARY, OTHER}:
        return ""
    return f"by kind: {items_text(kind_items(record))}"


def with_kinds(records: Sequence[FunctionRecord], peak_texts: Sequence[str]) -> list[str]:
    """Each device's peak line (``peak_text.peak_breakdowns``' texts, one per
    record that has a peak or says why not) with its by-kind line right
    under it; a device's label leads when there are several."""
    notes = []
    texts = iter(peak_texts)
    for record in records:
        if record.peak is None and not missing_line(record):
            continue
        text = next(texts, "")
        kinds = kind_line(record)
        if kinds:
            text += "\n" + (f"{record.device}: {kinds}" if len(records) > 1 else kinds)
        notes.append(text)
    return notes
