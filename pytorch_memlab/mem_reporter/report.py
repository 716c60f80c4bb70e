"""A report: the rows ``MemReporter.report`` found, and the printed table of
them (rows per device, the totals, and on CUDA the allocator's blocks that
add up to ``torch.cuda.memory_allocated()``)."""
from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any, Optional

import torch

from ..common.devices import DeviceSpec, device_matches
from ..common.sizes import readable_size, with_bytes
from ..reports.base import Reporter
from . import blocks
from .blocks import BlockRow
from .rows import MEMREPORTER_KINDS, DeviceTotal, TensorRow, parse_filter

# The CUDA caching allocator hands out blocks in multiples of this many bytes.
CUDA_BLOCK_BYTES = 512
# The Kind column fits every kind a row or block can be.
KIND_WIDTH = max(len(kind) for kind in MEMREPORTER_KINDS) + 2


class MemReportText:
    """MemReporter's printed table (a ``Reporter[MemReport]``); ``verbose``
    lists the rows that share a storage with one above too."""

    def __init__(self, verbose: bool = False) -> None:
        self.verbose = verbose

    def render(self, report: MemReport) -> str:
        verbose = self.verbose
        shown = [r for r in report.rows if verbose or r.alias_of is None]
        name_w = min(60, max([len(r.display_name(verbose)) for r in shown] + [24])) + 2
        fmt = "{:<%d}{:<%d}{:<9}{:>14}{:>11}{:>9}" % (name_w, KIND_WIDTH)
        width = name_w + KIND_WIDTH + 43
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


def _block_lines(report: MemReport, total: DeviceTotal, rule: str) -> list[str]:
    """The allocator's blocks on a CUDA device: those no found tensor holds, then
    the sum that makes up torch.cuda.memory_allocated."""
    lines = []
    mine = [b for b in report.blocks if b.device == total.device]
    if mine:
        lines.append(rule)
        lines.append(f"Allocator blocks not held by a visible tensor on {total.device}")
        fmt = "{:>6}  {:>12}  {:<14}  {:<%d}{}" % KIND_WIDTH
        lines.append(fmt.format("Blocks", "Size each", "Stream", "Kind", "What"))
        for count, b in blocks.grouped(mine):
            what = [b.label] if b.label else []
            if b.allocated_at:
                what.append(f"allocated at {b.allocated_at}")
            text = "; ".join(what) or "unknown (MemReporter(record_history=True) names its line)"
            lines.append(fmt.format(count, readable_size(b.size), blocks.stream_name(b.stream),
                                    b.kind, text))
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


class MemReport:
    """The result of :meth:`MemReporter.report`: rows grouped per device and per storage.

    ``str(report)`` is the printed table; ``to_dicts()`` / ``to_json()`` give the same
    data without formatting.
    """

    def __init__(self, rows: list[TensorRow], devices: list[DeviceTotal],
                 verbose: bool = False, skipped: int = 0,
                 blocks: Optional[list[BlockRow]] = None) -> None:
        self.rows = rows
        self.devices = devices
        self.blocks = list(blocks or [])   # CUDA blocks no found tensor holds
        self.verbose = verbose
        self.skipped = skipped  # objects that raised while being inspected

    @property
    def total_bytes(self) -> int:
        return sum(d.bytes for d in self.devices)

    def rows_on(self, device: Optional[DeviceSpec]) -> list[TensorRow]:
        want = parse_filter(device, "rows_on(device=...)")
        return [r for r in self.rows if want is None or device_matches(want, torch.device(r.device))]

    def row(self, name: str) -> TensorRow:
        """The row called ``name``; KeyError if there is none."""
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(name)

    def to_dicts(self) -> list[dict[str, Any]]:
        out = []
        for r in self.rows:
            d = asdict(r)
            d["shape"] = list(r.shape)
            out.append(d)
        return out

    def to_json(self, **dumps_kwargs: Any) -> str:
        return json.dumps({"devices": [asdict(d) for d in self.devices],
                           "rows": self.to_dicts(),
                           "blocks": [asdict(b) for b in self.blocks],
                           "skipped": self.skipped}, **dumps_kwargs)

    def format(self, verbose: Optional[bool] = None) -> str:
        reporter: Reporter[MemReport] = MemReportText(
            self.verbose if verbose is None else verbose)
        return reporter.render(self)

    def __str__(self) -> str:
        return self.format()

    def __repr__(self) -> str:
        return (f"<MemReport: {len(self.rows)} rows on {len(self.devices)} device(s), "
                f"{self.total_bytes} bytes>")
