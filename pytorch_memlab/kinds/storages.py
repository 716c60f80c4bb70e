"""Which blocks tensors are, and telling the tracers of the profilers with a
call running what they are.  Blocks are named by their storage's address,
which is the allocator's block on the CPU and for CUDA's caching allocator (a
storage is one block); a CUDA block's bytes are the storage's rounded up to
the allocator's 512."""
from __future__ import annotations

from typing import Iterable, Optional

import torch

from ..sources import native
from .names import code_of

CUDA_BLOCK_BYTES = 512

# {device: the tracers that take tags}: those of the profilers with a call
# running (replaced, not mutated: ``follow``)
by_device: dict[str, list[native.Tracer]] = {}


def follow(tracers: dict[str, list[native.Tracer]]) -> None:
    global by_device
    by_device = tracers


# {device: ([addresses], [bytes])}: the blocks of some storages
Blocks = dict[str, tuple[list[int], list[int]]]
Block = tuple[str, int, int]        # (device, address, bytes)


def blocks_of(tensors: Iterable[Optional[torch.Tensor]]) -> Blocks:
    """The blocks of ``tensors``' storages, by device: those the memory
    source counts; not memory a storage only wraps (numpy arrays, mapped
    files, DLPack imports), nor on the CPU a block made before the source
    that Python could not reach then (DDP's gradient buckets, held by its
    C++ reducer): no figure holds them."""
    groups: Blocks = {}
    for t in tensors:
        block = block_of(t)
        if block is not None:
            ptrs, sizes = groups.setdefault(block[0], ([], []))
            ptrs.append(block[1])
            sizes.append(block[2])
    return groups


def block_of(t: Optional[torch.Tensor]) -> Optional[Block]:
    """The block of ``t``'s storage, or None (see blocks_of)."""
    if t is None:
        return None
    try:
        storage = t.untyped_storage()
        if not storage.resizable() or (t.device.type == "cpu" and "cpu" in by_device
                                       and not native.cpu_counts(storage)):
            return None
        ptr, nbytes = storage.data_ptr(), int(storage.nbytes())
    except Exception:       # wrappers, subclasses and meta tensors: no storage
        return None
    if ptr == 0 or nbytes <= 0:
        return None
    if t.is_cuda:
        nbytes = -(-nbytes // CUDA_BLOCK_BYTES) * CUDA_BLOCK_BYTES
    return str(t.device), ptr, nbytes


def tag_blocks(kind: Optional[str], blocks: Blocks, only_from: Optional[str] = "",
               back: bool = True) -> None:
    """Tag ``blocks`` as ``kind`` (None: untagged) in every profiler with a
    call running; ``only_from``: only blocks of that kind now (None: untagged
    ones; "": any); ``back``: at the peaks since they were made too, else
    from now on."""
    number = code_of(kind) if kind is not None else 0
    old = -1 if only_from == "" else code_of(only_from) if only_from is not None else 0
    for device, (ptrs, sizes) in blocks.items():
        for tracer in by_device.get(device, ()):
            native.tag_blocks(tracer, number, ptrs, sizes, old, back)


def tag_one(number: int, block: Block, old: int, back: bool) -> None:
    """tag_blocks of one block, by kind numbers: the saved-tensor hooks' path."""
    for tracer in by_device.get(block[0], ()):
        native.tag_blocks(tracer, number, (block[1],), (block[2],), old, back)
