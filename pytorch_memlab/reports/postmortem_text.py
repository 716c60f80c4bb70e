"""The post-mortem of an out-of-memory error as text: the figures and hints
``postmortem.capture`` gathered, printed under the line table.  Needs no
torch, so a saved profile's post-mortem prints where torch is not installed."""
from __future__ import annotations

from typing import Any, Optional

from ..common.sizes import readable_size, with_bytes
from ..kinds.names import INPUT, NO_MODULE, OTHER, TEMPORARY
from .kinds_text import kinds_text, modules_text
from .peak_text import PeakItem, items_text, summed_items


def _size(n: Optional[int]) -> str:
    return "-" if n is None else readable_size(n)


def hints(pm: dict[str, Any]) -> list[str]:
    """What to do about it, most telling first."""
    found = []
    requested, allocated = pm["requested_bytes"], pm["allocated_bytes"]
    total, reserved = pm["total_bytes"], pm["reserved_bytes"]
    where = "the machine's memory" if pm["device"] == "cpu" else f"{pm['device']}'s memory"
    if requested is not None and total is not None and requested > total:
        found.append(f"The failing allocation alone ({_size(requested)}) is larger than "
                     f"{where} ({_size(total)}): no amount of freeing makes it fit; "
                     f"allocate less on the line that raised.")
    elif (requested is not None and allocated is not None and reserved is not None
          and pm["largest_free_block_bytes"] is not None
          and reserved - allocated >= requested > pm["largest_free_block_bytes"]):
        found.append(f"{_size(reserved - allocated)} is reserved but unallocated, enough for "
                     f"the request, yet no free block is large enough (largest "
                     f"{_size(pm['largest_free_block_bytes'])}): memory is fragmented. Set "
                     f"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.")
    top = pm["tensors"][0] if pm["tensors"] else None
    if top is not None and allocated and top["bytes"] * 2 >= allocated:
        at = f", assigned at {top['line']}" if top["line"] else ""
        found.append(f"{top['name']} alone holds {_size(top['bytes'])} "
                     f"({100 * top['bytes'] // allocated}% of allocated{at}): free it "
                     f"(del {top['name']}) or make it smaller before the failing line.")
    if not found:
        found.append("Live tensors fill the memory: free those no longer needed (del), "
                     "or use smaller batches.")
    return found


def _row(label: str, value: str) -> str:
    return f"  {label:<22}{value}"


def _exact(n: Optional[int]) -> str:
    return "-" if n is None else with_bytes(n)


def _by_line(pm: dict[str, Any]) -> list[str]:
    """The allocated bytes by where they were made (none in a post-mortem
    saved before schema version 4, or where the profiler could not tell)."""
    live = pm.get("live_by_line")
    if live is None:
        return []
    parts = [PeakItem("before the call", live["before_call"])]
    parts += [PeakItem(f"line {line['lineno']}", line["bytes"], line["lineno"])
              for line in live["lines"]]
    parts += [PeakItem("other threads", live["other_threads"]),
              PeakItem("after the call", live["after_call"])]
    out = [f"  live at the failure (call {live['call']}), by the line that allocated it:",
           f"    {items_text(summed_items(parts)) or 'nothing'}"]
    if set(live.get("by_kind") or ()) - {INPUT, TEMPORARY, OTHER}:   # as under a table
        out.append(f"    by kind: {kinds_text(live['by_kind'])}")
    if set(live.get("by_module") or ()) - {NO_MODULE}:
        out.append(f"    by module: {modules_text(live['by_module'])}")
    return out


def format_postmortem(pm: dict[str, Any], qualname: str) -> str:
    """The text printed after the line table."""
    out = [f"Out of memory ({pm['error']}) in {qualname} on {pm['device']}; "
           f"figures read {pm['when']}:",
           _row("requested", _exact(pm["requested_bytes"])),
           _row("allocated", _exact(pm["allocated_bytes"])),
           _row("reserved", _exact(pm["reserved_bytes"]))]
    free = _size(pm["free_bytes"])
    if pm["total_bytes"] is not None:
        free += f" of {_size(pm['total_bytes'])}"
    out.append(_row("free", free))
    out.append(_row("fragmentation", f"reserved - allocated = {_size(pm['fragmentation_bytes'])}; "
                                     f"largest free block {_size(pm['largest_free_block_bytes'])}"))
    out += _by_line(pm)
    if pm["tensors"]:
        out.append(f"  largest live tensors on {pm['device']}:")
        width = max(len(t["name"]) for t in pm["tensors"]) + 2
        for t in pm["tensors"]:
            shape = str(tuple(t["shape"]))
            line = f"assigned at {t['line']}" if t["line"] else ""
            out.append(f"    {t['name']:<{width}}{t['dtype']:<10}{shape:>16}{_size(t['bytes']):>14}"
                       f"  {line}".rstrip())
    else:
        out.append(f"  no live tensor found on {pm['device']}")
    out += [f"  hint: {h}" for h in pm["hints"]]
    return "\n".join(out)
