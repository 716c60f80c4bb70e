"""A report as the printed table: rows per device, the totals, and on CUDA the
allocator's blocks that add up to ``torch.cuda.memory_allocated()``."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..common.sizes import readable_size, with_bytes
from . import blocks

if TYPE_CHECKING:
    from .rows import DeviceTotal, MemReport

# The CUDA caching allocator hands out blocks in multiples of this many bytes.
CUDA_BLOCK_BYTES = 512


class MemReportText:
    """MemReporter's printed table (a ``Reporter[MemReport]``); ``verbose``
    lists the rows that share a storage with one above too."""

    def __init__(self, verbose: bool = False) -> None:
        self.verbose = verbose

    def render(self, report: "MemReport") -> str:
        verbose = self.verbose
        shown = [r for r in report.rows if verbose or r.alias_of is None]
        name_w = min(60, max([len(r.display_name(verbose)) for r in shown] + [24])) + 2
        fmt = "{:<%d}{:<10}{:<9}{:>14}{:>11}{:>9}" % name_w
        width = name_w + 53
        rule = "-" * width
        lines = [fmt.format("Element type", "Kind", "DType", "Size", "Used MEM", "Storage"), rule]
        if not report.devices:
            lines += ["No tensors found", rule]
        for total in report.devices:
            lines.append(f"Storage on {total.device}")
            hidden = 0
            for r in report.rows:
                if r.device != total.device:
                    continue
                if r.alias_of is not None and not verbose:
                    hidden += 1
                    continue
                storage = "-" if r.storage_id is None else f"#{r.storage_id}"
                lines.append(fmt.format(r.display_name(verbose), r.kind, r.dtype,
                                        str(r.shape), readable_size(r.bytes), storage))
            lines.append(rule)
            summary = (f"Total Tensors: {total.tensors}  Storages: {total.storages}  "
                       f"Used Memory: {with_bytes(total.bytes)}")
            if hidden:
                summary += f"  [{hidden} rows sharing a storage above; verbose=True lists them]"
            lines.append(summary)
            if total.other_block_bytes is not None:
                lines += _block_lines(report, total, rule)
            elif total.allocator_bytes is not None and total.block_bytes is not None:
                lines.append(f"Allocated on {total.device} (torch.cuda.memory_allocated): "
                             f"{with_bytes(total.allocator_bytes)}")
                lines.append(f"Found storages in {CUDA_BLOCK_BYTES}-byte blocks: "
                             f"{with_bytes(total.block_bytes)}")
                lines.append(str(total.note))
            lines.append(rule)
        if report.skipped:
            lines.append(f"{report.skipped} object(s) raised while being inspected and are not listed")
        return "\n".join(lines)


def _block_lines(report: "MemReport", total: "DeviceTotal", rule: str) -> list[str]:
    """The allocator's blocks on a CUDA device: those no found tensor holds, then
    the sum that makes up torch.cuda.memory_allocated."""
    lines = []
    mine = [b for b in report.blocks if b.device == total.device]
    if mine:
        lines.append(rule)
        lines.append(f"Allocator blocks not held by a visible tensor on {total.device}")
        lines.append("{:>6}  {:>12}  {:<14}  {}".format("Blocks", "Size each", "Stream", "What"))
        for count, b in blocks.grouped(mine):
            what = [b.label] if b.label else []
            if b.allocated_at:
                what.append(f"allocated at {b.allocated_at}")
            text = "; ".join(what) or "unknown (MemReporter(record_history=True) names its line)"
            lines.append("{:>6}  {:>12}  {:<14}  {}".format(
                count, readable_size(b.size), blocks.stream_name(b.stream), text))
        lines.append(rule)
    allocated = total.allocator_bytes or 0
    held, other = total.block_bytes or 0, total.other_block_bytes or 0
    lines.append(f"Allocated on {total.device} (torch.cuda.memory_allocated): {with_bytes(allocated)}")
    lines.append(f"  = blocks backing the storages above:      {with_bytes(held)}")
    lines.append(f"  + blocks not held by a visible tensor:    {with_bytes(other)}")
    if total.awaiting_free_bytes:
        lines.append(f"Freed blocks still used by another stream (not allocated): "
                     f"{with_bytes(total.awaiting_free_bytes)}")
    lines.append(str(total.note))
    return lines
