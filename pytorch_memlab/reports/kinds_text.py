"""The lines under a function's table, after its peak line, that say what the
peak is made of in the model's terms: ``by kind: 3.10G saved for backward,
2.40G optimizer state, 1.20G parameters`` and ``by module: 1.90G
layers.*.mlp.fc1, 0.80G layers.*.attn`` (largest first, at most
``peak_text.MAX_ITEMS`` items, the rest summed; repeated layers folded), or
why they are not known exactly."""
from __future__ import annotations

from typing import Sequence

from ..kinds.names import INPUT, LABELS, NO_MODULE, OTHER, TEMPORARY, folded
from ..records.model import FunctionRecord
from .peak_text import PeakItem, items_text, missing_line, summed_items


def kinds_text(by_kind: dict[str, int]) -> str:
    """"3.10G saved for backward, 2.40G optimizer state"."""
    return items_text(summed_items(PeakItem(LABELS.get(kind, kind), size)
                                   for kind, size in by_kind.items()))


def modules_text(by_module: dict[str, int]) -> str:
    """"1.90G layers.*.mlp.fc1, 0.80G outside modules": repeated layers folded."""
    sizes: dict[str, int] = {}
    for name, size in by_module.items():
        label = "outside modules" if name == NO_MODULE else folded(name)
        sizes[label] = sizes.get(label, 0) + size
    return items_text(summed_items(PeakItem(n, s) for n, s in sizes.items()))


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
    return f"by kind: {kinds_text(peak['by_kind'])}"


def module_line(record: FunctionRecord) -> str:
    """The by-module line of one record ("" when no module made what its
    lines hold at the peak): each module's own bytes, repeated layers folded
    together (``layers.*.mlp``)."""
    peak = record.peak
    if peak is None:
        return ""
    if peak.get("by_module_missing"):
        return f"by module: not exact, {peak['by_module_missing']}"
    by_module = peak.get("by_module") or {}
    if not set(by_module) - {NO_MODULE}:
        return ""
    return f"by module: {modules_text(by_module)}"


def stopped_line(record: FunctionRecord) -> str:
    """The note under the by-module line when some modules' bytes include
    what their own modules made inside a compiled or checkpointed region
    ("" when none)."""
    at = (record.peak or {}).get("by_module_stopped_at") or []
    if not at or not (record.peak or {}).get("by_module"):
        return ""
    names = ", ".join(dict.fromkeys(folded(name) for name in at))
    return ("note: modules inside compiled or checkpointed regions are charged to the "
            f"outermost visible module ({names})")


def with_kinds(records: Sequence[FunctionRecord], peak_texts: Sequence[str]) -> list[str]:
    """Each device's peak line (``peak_text.peak_breakdowns``' texts, one per
    record that has a peak or says why not) with its by-kind and by-module
    lines right under it; a device's label leads when there are several."""
    notes = []
    texts = iter(peak_texts)
    for record in records:
        if record.peak is None and not missing_line(record):
            continue
        text = next(texts, "")
        for line in (kind_line(record), module_line(record), stopped_line(record)):
            if line:
                text += "\n" + (f"{record.device}: {line}" if len(records) > 1 else line)
        notes.append(text)
    return notes
