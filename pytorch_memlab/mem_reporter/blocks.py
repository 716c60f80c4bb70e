"""The CUDA caching allocator's blocks, for MemReporter: which of them back a
storage the report found, and what the others are.

``torch.cuda.memory._snapshot()`` lists every segment the allocator holds and
the blocks it is split into, with history recording or without.  A block in
state ``active_allocated`` is what ``torch.cuda.memory_allocated()`` counts
(its rounded ``size``); ``active_awaiting_free`` is a block already freed by
its tensor but still in use by another stream (``record_stream``), counted by
``active_bytes`` only.  A block backs a found storage when the storage's
address falls inside it.  Every other active block is listed, labelled where
its origin can be known:

- saved for backward by an autograd graph reachable from a visible tensor
  (when ``outputs=`` was not given; with it, those tensors are named rows),
- a private pool (CUDA graphs, ``torch.cuda.MemPool``): the segment's pool id,
- a cuBLAS / cuBLASLt workspace: a block whose requested size is torch's
  workspace size (``torch.backends.cuda.cublas_workspace_size()`` where it
  exists, else ``CUBLAS_WORKSPACE_CONFIG`` / ``CUBLASLT_WORKSPACE_SIZE`` and
  torch's defaults),
- with ``record_history=True``: the Python line that allocated it.
"""
from __future__ import annotations

import bisect
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import torch

from ..common.devices import cuda_in_use
from ..kinds.names import OTHER, SAVED_FOR_BACKWARD, WORKSPACE

__all__ = ["BlockRow", "DeviceBlocks", "snapshot_segments", "split_blocks", "start_recording"]

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep   # the package
DEFAULT_POOL = (0, 0)


@dataclass(frozen=True)
class BlockRow:
    """One active allocator block that no found tensor holds."""

    device: str
    address: int
    size: int                      # block bytes, what memory_allocated counts
    requested_size: int            # bytes asked for (size is rounded up)
    stream: int                    # the CUDA stream it was allocated on (0: default)
    state: str                     # active_allocated / active_awaiting_free
    label: Optional[str] = None    # what it is, where that can be known
    allocated_at: Optional[str] = None   # "file.py:12 (func)" with recorded history
    kind: str = OTHER              # workspace, saved_for_backward or other (rows.MEMREPORTER_KINDS)

    @property
    def counted(self) -> bool:
        """Part of torch.cuda.memory_allocated()?"""
        return self.state == "active_allocated"


@dataclass
class DeviceBlocks:
    """The allocator's view of one device, split by the report's storages."""

    held_bytes: int = 0             # active_allocated blocks backing a found storage
    held_blocks: int = 0
    other: list[BlockRow] = field(default_factory=list)   # every other active block

    @property
    def other_bytes(self) -> int:
        return sum(b.size for b in self.other if b.counted)

    @property
    def awaiting_bytes(self) -> int:
        return sum(b.size for b in self.other if not b.counted)


def start_recording() -> None:
    """Record, for each live block, the Python stack that allocated it."""
    if not torch.cuda.is_available():
        return
    torch.cuda.init()  # type: ignore[no-untyped-call]  # history is switched on per existing device allocator
    torch.cuda.memory._record_memory_history(enabled="state", context="state", stacks="python")


def _user_frame(frames: list[dict[str, Any]]) -> Optional[str]:
    """The innermost frame outside torch and pytorch_memlab, as 'file:line (name)'."""
    for frame in frames or ():
        filename = str(frame.get("filename", ""))
        if not filename or filename.startswith(("<", "??")):
            continue
        path = os.path.abspath(filename)
        if path.startswith(_TORCH_DIR) or path.startswith(_OWN_DIR):
            continue
        return f"{os.path.basename(filename)}:{frame.get('line')} ({frame.get('name')})"
    return None


# ---------------------------------------------------------------- workspaces

def _env_cublas_size(major: int) -> int:
    """torch's cuBLAS workspace size from CUBLAS_WORKSPACE_CONFIG (':SIZE_KiB:COUNT'
    pairs), else its default: 32 MiB on compute capability 9.x/10.x/12.x, else
    2 x 4 MiB + 8 x 16 KiB."""
    config = os.environ.get("CUBLAS_WORKSPACE_CONFIG", "")
    pairs = re.findall(r":([0-9]+):([0-9]+)", config)
    if pairs:
        return sum(int(size) * 1024 * int(count) for size, count in pairs)
    return 4096 * 8 * 1024 if major in (9, 10, 12) else 4096 * 1024 * 2 + 16 * 1024 * 8


def _env_cublaslt_size() -> int:
    try:
        return int(os.environ.get("CUBLASLT_WORKSPACE_SIZE", "1024")) * 1024
    except ValueError:
        return 1024 * 1024


def workspace_labels(device_index: int) -> dict[int, str]:
    """{requested size: label} for the cuBLAS and cuBLASLt workspaces of a device."""
    getter = getattr(torch._C, "_cuda_getCublasWorkspaceSize", None)
    lt_getter = getattr(torch._C, "_cuda_getCublasLtWorkspaceSize", None)
    try:
        major = torch.cuda.get_device_capability(device_index)[0]
    except Exception:
        major = 0
    try:
        cublas = int(getter()) if getter is not None else _env_cublas_size(major)
    except Exception:
        cublas = _env_cublas_size(major)
    try:
        lt = int(lt_getter()) if lt_getter is not None else _env_cublaslt_size()
    except Exception:
        lt = _env_cublaslt_size()
    if cublas == lt:
        return {cublas: "cuBLAS/cuBLASLt workspace (by its size)"}
    return {cublas: "cuBLAS workspace (by its size)", lt: "cuBLASLt workspace (by its size)"}


# ---------------------------------------------------------------- reading

def snapshot_segments() -> Optional[list[dict[str, Any]]]:
    """The allocator's segments on every device, or None where CUDA is not in use."""
    if not cuda_in_use():
        return None
    return list(torch.cuda.memory._snapshot().get("segments", []))


def _saved_name(block: dict[str, Any], graph: dict[int, str]) -> Optional[str]:
    """The saved tensor whose storage lies in the block, if any."""
    address, size = int(block["address"]), int(block["size"])
    return next((name for ptr, name in graph.items() if address <= ptr < address + size), None)


def _kind(block: dict[str, Any], graph: dict[int, str], workspaces: dict[int, str]) -> str:
    """The block's kind, by what _label can tell of it."""
    if _saved_name(block, graph) is not None:
        return SAVED_FOR_BACKWARD
    return WORKSPACE if int(block.get("requested_size", -1)) in workspaces else OTHER


def _label(block: dict[str, Any], segment: dict[str, Any], graph: dict[int, str],
           workspaces: dict[int, str]) -> Optional[str]:
    saved = _saved_name(block, graph)
    parts = []
    if saved is not None:
        parts.append(f"saved for backward ({saved}); pass outputs= to name it")
    pool = tuple(segment.get("segment_pool_id") or DEFAULT_POOL)
    if pool != DEFAULT_POOL:
        parts.append(f"private pool {pool} (CUDA graph or MemPool)")
    if saved is None and int(block.get("requested_size", -1)) in workspaces:
        parts.append(workspaces[int(block["requested_size"])])
    if block.get("state") == "active_awaiting_free":
        parts.append("freed, waiting for another stream to finish with it")
    return "; ".join(parts) or None


def split_blocks(segments: list[dict[str, Any]], device: str, storage_ptrs: list[int],
                 graph: Callable[[], dict[int, str]],
                 workspaces: Callable[[], dict[int, str]]) -> DeviceBlocks:
    """Split ``device``'s active blocks into those that back one of
    ``storage_ptrs`` and the rest (labelled).  ``graph`` and ``workspaces``
    are asked only when some block is left over."""
    index = torch.device(device).index or 0
    mine: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for segment in segments:
        if int(segment.get("device", 0)) != index:
            continue
        address = int(segment.get("address", 0))
        for block in segment.get("blocks", ()):
            # blocks tile their segment in address order; older torch may omit "address"
            block = dict(block, address=int(block.get("address", address)))
            address = block["address"] + int(block["size"])
            if block.get("state") in ("active_allocated", "active_awaiting_free"):
                mine.append((block, segment))
    mine.sort(key=lambda pair: int(pair[0]["address"]))
    starts = [int(b["address"]) for b, _ in mine]
    held = [False] * len(mine)
    for ptr in storage_ptrs:
        i = bisect.bisect_right(starts, ptr) - 1
        if i >= 0 and ptr < starts[i] + int(mine[i][0]["size"]):
            held[i] = True
    result = DeviceBlocks()
    left = [pair for pair, h in zip(mine, held) if not h]
    for (block, _), h in zip(mine, held):
        if h and block["state"] == "active_allocated":
            result.held_bytes += int(block["size"])
            result.held_blocks += 1
    if not left:
        return result
    graph_ptrs, labels = graph(), workspaces()
    for block, segment in left:
        result.other.append(BlockRow(
            device=device, address=int(block["address"]), size=int(block["size"]),
            requested_size=int(block.get("requested_size", block["size"])),
            stream=int(segment.get("stream", 0)), state=str(block["state"]),
            label=_label(block, segment, graph_ptrs, labels),
            allocated_at=_user_frame(block.get("frames", [])),
            kind=_kind(block, graph_ptrs, labels)))
    result.other.sort(key=lambda b: (-b.size, b.address))
    return result


def stream_name(stream: int) -> str:
    return "default" if stream == 0 else hex(stream)


def grouped(rows: list[BlockRow]) -> list[tuple[int, BlockRow]]:
    """(count, first row) per run of blocks alike in size, stream, state, label
    and origin; largest total first."""
    groups: dict[tuple[Any, ...], list[BlockRow]] = {}
    for row in rows:
        key = (row.size, row.stream, row.state, row.kind, row.label, row.allocated_at)
        groups.setdefault(key, []).append(row)
    out = [(len(g), g[0]) for g in groups.values()]
    out.sort(key=lambda pair: -pair[0] * pair[1].size)
    return out
