"""What Courtesy moves: its arguments checked, then the tensors of the scope
(with their grads and view bases), the movable ones grouped by storage."""
from __future__ import annotations

from collections.abc import Iterable as _IterableABC
from collections.abc import Mapping
from typing import Iterable, Optional, Union

import torch

from ..common.devices import DeviceSpec, cuda_index
from ..common.tensors import StorageKey, grad_of, storage_of
from ..sources import native

DEFAULT_THRESHOLD = 64 * 1024 * 1024
"""Bytes a device may still hold after ``yield_memory()`` before a warning."""

Scope = Union[torch.Tensor, torch.nn.Module, torch.optim.Optimizer,
              Iterable[Union[torch.Tensor, torch.nn.Module, torch.optim.Optimizer]]]

_SCOPE_TYPES = (torch.Tensor, torch.nn.Module, torch.optim.Optimizer)
# classes whose __torch_dispatch__ means "no subclass dispatch"
# (torch 2.0 spells the C base _TensorBase)
_PLAIN_OWNERS = tuple(c for c in (torch.Tensor, getattr(torch._C, "TensorBase", None),
                                  getattr(torch._C, "_TensorBase", None)) if c is not None)
# private, torch >= 2.1: how many owners a StorageImpl has; None where missing
_storage_use_count = getattr(torch._C, "_storage_Use_Count", None)
_DEVICE_HELP = "None (every CUDA device), 'cuda', 'cuda:N', an int N or torch.device('cuda', N)"
_SCOPE_HELP = ("pass None (every live tensor), a torch.nn.Module, a torch.optim.Optimizer, "
               "a torch.Tensor, or an iterable of those")


# --- arguments -----------------------------------------------------------

def parse_device(device: Optional[DeviceSpec]) -> Optional[torch.device]:
    """The CUDA device to yield, or None for all of them."""
    if device is None:
        return None
    index = cuda_index(device, "Courtesy(device=...)", _DEVICE_HELP)
    return torch.device("cuda") if index is None else torch.device("cuda", index)


def parse_scope(tensors: Optional[Scope]) -> Optional[list[object]]:
    """The roots to search for tensors, or None to search every live object."""
    if tensors is None:
        return None
    if isinstance(tensors, _SCOPE_TYPES):
        return [tensors]
    if isinstance(tensors, (str, bytes, Mapping)) or not isinstance(tensors, _IterableABC):
        hint = " (a state_dict holds detached copies: pass the module itself)" \
            if isinstance(tensors, Mapping) else ""
        raise TypeError(f"Courtesy(tensors=...): got {type(tensors).__name__}{hint}; {_SCOPE_HELP}")
    roots = list(tensors)
    for i, item in enumerate(roots):
        if not isinstance(item, _SCOPE_TYPES):
            raise TypeError(f"Courtesy(tensors=...): item {i} is {type(item).__name__}; "
                            f"{_SCOPE_HELP}")
    return roots


def parse_threshold(threshold: Optional[float]) -> Optional[int]:
    if threshold is None:
        return None
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
        raise TypeError(f"Courtesy(threshold=...): got {type(threshold).__name__}; "
                        "pass a number of bytes, or None to never warn")
    if not threshold >= 0:  # also rejects NaN
        raise ValueError(f"Courtesy(threshold={threshold!r}): pass a number of bytes >= 0, "
                         "or None to never warn")
    return int(threshold)


# --- finding tensors -----------------------------------------------------

_plain_types: dict[type, bool] = {}


def _is_plain_type(cls: type) -> bool:
    """False for tensor subclasses with their own __torch_dispatch__ (FakeTensor, DTensor)."""
    plain = _plain_types.get(cls)
    if plain is None:
        owner = next((k for k in cls.__mro__ if "__torch_dispatch__" in vars(k)), None)
        plain = owner is None or owner in _PLAIN_OWNERS
        _plain_types[cls] = plain
    return plain


def _is_movable(t: torch.Tensor) -> bool:
    """A dense strided tensor with an ordinary storage that set_data can swap."""
    return (_is_plain_type(type(t)) and t.layout == torch.strided
            and not t.is_quantized and not t.is_nested)


def held_elsewhere(storage: torch.UntypedStorage) -> bool:
    """Whether anything besides this one handle still owns storage."""
    if _storage_use_count is None:
        return False
    return bool(_storage_use_count(storage._cdata) > 1)


def roots_tensors(roots: Optional[list[object]]) -> list[torch.Tensor]:
    """Tensors directly reachable from the roots (or every live tensor)."""
    if roots is None:
        return native.instances_of(torch.Tensor)
    found = []
    visited = set()
    pending: list[object] = list(roots)
    while pending:
        obj = pending.pop()
        if id(obj) in visited:
            continue
        visited.add(id(obj))
        if isinstance(obj, torch.Tensor):
            found.append(obj)
        elif isinstance(obj, torch.nn.Module):
            found.extend(obj.parameters())
            found.extend(obj.buffers())
        elif isinstance(obj, torch.optim.Optimizer):
            for group in obj.param_groups:
                found.extend(group["params"])
            pending.extend(obj.state.values())
        elif isinstance(obj, dict):  # optimizer state
            pending.extend(obj.values())
        elif isinstance(obj, (list, tuple)):
            pending.extend(obj)
    return found


def collect(roots: Optional[list[object]]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Tensors of the scope, with their grads and view bases.

    Returns (movable, other): other holds the sparse, quantized, nested and
    subclass tensors, which stay where they are.
    """
    seen: dict[int, torch.Tensor] = {}
    pending = roots_tensors(roots)
    while pending:
        t = pending.pop()
        if id(t) in seen:
            continue
        seen[id(t)] = t
        if not _is_movable(t):
            continue
        for extra in (grad_of(t), t._base):
            if extra is not None:
                pending.append(extra)
    movable = [t for t in seen.values() if _is_movable(t)]
    other = [t for t in seen.values() if not _is_movable(t)]
    return movable, other


def group_by_storage(tensors: Iterable[torch.Tensor]) -> dict[StorageKey, list[torch.Tensor]]:
    """Tensors per storage (keyed by device and address); empty storages, and
    wrappers that give none (functorch), are left out."""
    groups: dict[StorageKey, list[torch.Tensor]] = {}
    for t in tensors:
        found = storage_of(t)
        if found is not None and found[1] > 0:
            groups.setdefault(found[0], []).append(t)
    return groups
