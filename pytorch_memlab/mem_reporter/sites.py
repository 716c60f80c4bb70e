"""Where a tensor was allocated, when a profiler saw it happen.

While a ``LineProfiler`` reads a device whose source reports blocks one by
one (the CPU, CUDA's caching allocator), its tracer follows every live block
by the profiled line that allocated it (the innermost profiled function
running then).  A report asks it about the storages it found and adds the
answer to the rows that are not model state: ``activations (step:12)``.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

from ..sources import native
from ..common.tensors import StorageKey
from ..kinds.names import OTHER, SAVED_FOR_BACKWARD
from .rows import TensorRow

__all__ = ["SITED_KINDS", "add_sites"]

# Parameters, grads, buffers and optimizer state are named by what owns them.
SITED_KINDS = (OTHER, SAVED_FOR_BACKWARD)


def _site(key: StorageKey) -> Optional[str]:
    device, ptr = key                   # ("cpu", ptr), ("cuda:1", ptr), ("impl", id)
    kind, _, index = device.partition(":")
    if kind not in native.KINDS:
        return None
    found = native.allocated_at(kind, int(index or 0), ptr)
    if found is None:
        return None
    code, line = found
    return f"{getattr(code, 'co_qualname', code.co_name)}:{line}"


def add_sites(rows: list[TensorRow], storages: dict[StorageKey, tuple[int, str]]) -> list[TensorRow]:
    """``rows`` with ``allocated_at`` set where a profiler recorded the line
    that allocated their storage (``storages``: key -> (storage id, owner))."""
    wanted = {r.storage_id for r in rows if r.kind in SITED_KINDS and r.storage_id is not None}
    sites: dict[int, str] = {}
    for key, (sid, _) in storages.items():
        if sid in wanted:
            site = _site(key)
            if site is not None:
                sites[sid] = site
    return [dataclasses.replace(r, allocated_at=sites[r.storage_id])
            if r.kind in SITED_KINDS and r.storage_id in sites else r for r in rows]
