"""Per-device totals, and on CUDA how they compare with the caching allocator:
``torch.cuda.memory_allocated()`` split into the blocks backing the storages
found and every other block (see ``blocks``)."""
from __future__ import annotations

import functools
from typing import Callable, Optional

import torch

from ..common.devices import cuda_in_use, device_matches
from ..common.sizes import readable_size, with_bytes
from . import blocks
from .collect import Collector, graph_ptrs
from .rows import DeviceTotal, TensorRow
from .report import CUDA_BLOCK_BYTES


def cuda_allocated() -> dict[str, int]:
    """torch.cuda.memory_allocated per device, without initialising CUDA."""
    if not cuda_in_use():
        return {}
    return {f"cuda:{i}": torch.cuda.memory_allocated(i) for i in range(torch.cuda.device_count())}


def explain(allocated: int, found: int, scoped: bool) -> str:
    """One line on why the allocator's total and the found storages' blocks differ."""
    diff = allocated - found
    if diff == 0:
        return ("Matches the allocator: every allocated block belongs to a storage listed above "
                f"(sizes rounded up to {CUDA_BLOCK_BYTES} bytes as the caching allocator does)")
    if diff > 0:
        where = ("this report is scoped by module=, the rest of the device is not listed"
                 if scoped else
                 "tensors held only by C++ (the autograd graph: pass outputs=; cuBLAS/cuDNN "
                 "workspaces; extensions)")
        return f"Allocator holds {readable_size(diff)} more than found: {where}"
    return (f"Found {readable_size(-diff)} more than the allocator counts: storages from outside "
            "the caching allocator (DLPack/from_blob imports, another allocator)")


def split_blocks(col: Collector, want: Optional[torch.device],
                 walk_graph: bool) -> dict[str, blocks.DeviceBlocks]:
    """Each CUDA device's allocated blocks, split by the storages found."""
    segments = blocks.snapshot_segments()
    if segments is None:
        return {}
    ptrs = col.storage_ptrs()
    devices = {f"cuda:{int(seg.get('device', 0))}" for seg in segments}
    devices |= {d for d in ptrs if d.startswith("cuda")}
    graph: list[dict[tuple[str, int], str]] = []

    def graph_of(device: str) -> Callable[[], dict[int, str]]:
        def get() -> dict[int, str]:
            if not walk_graph:
                return {}
            if not graph:
                graph.append(graph_ptrs(col))
            return {ptr: name for (dev, ptr), name in graph[0].items() if dev == device}
        return get

    out: dict[str, blocks.DeviceBlocks] = {}
    for device in sorted(devices):
        if want is not None and not device_matches(want, torch.device(device)):
            continue
        index = torch.device(device).index or 0
        out[device] = blocks.split_blocks(segments, device, ptrs.get(device, []),
                                          graph_of(device),
                                          functools.partial(blocks.workspace_labels, index))
    return out


def _account(allocated: int, split: blocks.DeviceBlocks) -> str:
    listed = split.held_bytes + split.other_bytes
    if listed == allocated:
        return ("Every allocated block is accounted for: the storages above, plus the blocks "
                "listed as not held by a visible tensor")
    return (f"The allocator's blocks add up to {with_bytes(listed)}: memory was allocated or "
            "freed by another thread while the report ran")


def _order(device: str) -> tuple[bool, str, int]:
    dev = torch.device(device)
    return (dev.type != "cpu", dev.type, dev.index or 0)


def totals(rows: list[TensorRow], want: Optional[torch.device], scoped: bool,
           split: Optional[dict[str, blocks.DeviceBlocks]] = None,
           allocated: Optional[dict[str, int]] = None) -> list[DeviceTotal]:
    """One DeviceTotal per device with rows (and per CUDA device holding memory)."""
    split = split or {}
    if allocated is None:
        allocated = cuda_allocated()
    names: list[str] = []
    for r in rows:
        if r.device not in names:
            names.append(r.device)
    for dev in allocated:                 # CUDA devices with memory but no tensor found
        if allocated[dev] and dev not in names and (
                want is None or device_matches(want, torch.device(dev))):
            names.append(dev)
    names.sort(key=_order)
    out = []
    for dev in names:
        mine = [r for r in rows if r.device == dev]
        owners = [r for r in mine if r.storage_id is not None and r.alias_of is None]
        found = sum(r.bytes for r in owners)
        if dev in allocated and dev in split:
            held = split[dev]
            out.append(DeviceTotal(dev, len(mine), len(owners), found, held.held_bytes,
                                   allocated[dev], _account(allocated[dev], held),
                                   held.other_bytes, held.awaiting_bytes))
        elif dev in allocated:
            rounded = sum(-(-r.bytes // CUDA_BLOCK_BYTES) * CUDA_BLOCK_BYTES for r in owners)
            out.append(DeviceTotal(dev, len(mine), len(owners), found, rounded, allocated[dev],
                                   explain(allocated[dev], rounded, scoped)))
        else:
            out.append(DeviceTotal(dev, len(mine), len(owners), found))
    return out
