"""Courtesy: lend the GPU to someone else for a while.

``Courtesy.yield_memory()`` copies CUDA tensors to host memory and hands their
device memory back to the driver; ``restore()`` copies them back.  The same
Python tensor objects stay valid throughout: a model keeps its parameters, an
optimizer keeps its state, and a view keeps sharing memory with its base.

How a tensor moves
------------------
Tensors are moved per *storage*, not per tensor: every tensor reachable from
the scope is grouped by the address of its storage, each storage is copied
once, and every tensor of the group is re-pointed at the copy with the same
offset, sizes and strides.  Views and tied weights therefore keep sharing one
storage, and nothing doubles on the way back.

Re-pointing uses ``tensor.data = alias`` (``set_data``), which swaps the
storage under the same ``TensorImpl`` and keeps Python identity,
``requires_grad``, ``.grad`` and the autograd history.  ``tensor.set_()`` cannot
do this: it refuses a storage on another device.

What is not moved
-----------------
Only tensors that Python can reach are moved: a tensor autograd saved for
backward after Python dropped it, or a tensor held only by C++ (DDP gradient
buckets, CUDA-graph pools, extension state), keeps its device memory.  So do
sparse, quantized and nested tensors and tensor subclasses.  When the device
still holds more than ``threshold`` bytes after yielding, a warning says so.
"""
from __future__ import annotations

import gc
import warnings
from collections.abc import Iterable as _IterableABC
from collections.abc import Mapping
from types import TracebackType
from typing import Callable, Dict, Iterable, List, Optional, Tuple, Type, Union

import torch

__all__ = ["Courtesy", "DEFAULT_THRESHOLD"]

DEFAULT_THRESHOLD = 64 * 1024 * 1024
"""Bytes a device may still hold after ``yield_memory()`` before a warning."""

DeviceLike = Union[str, int, torch.device]
Scope = Union[torch.Tensor, torch.nn.Module, torch.optim.Optimizer,
              Iterable[Union[torch.Tensor, torch.nn.Module, torch.optim.Optimizer]]]

_SCOPE_TYPES = (torch.Tensor, torch.nn.Module, torch.optim.Optimizer)
# classes whose __torch_dispatch__ means "no subclass dispatch"
# (torch 2.0 spells the C base _TensorBase)
_PLAIN_OWNERS = tuple(c for c in (torch.Tensor, getattr(torch._C, "TensorBase", None),
                                  getattr(torch._C, "_TensorBase", None)) if c is not None)
# private, torch >= 2.1: how many owners a StorageImpl has; None where missing
_storage_use_count = getattr(torch._C, "_storage_Use_Count", None)
_DEVICE_HELP = ("pass None (every CUDA device), 'cuda', 'cuda:N', an int N "
                "or torch.device('cuda', N)")
_SCOPE_HELP = ("pass None (every live tensor), a torch.nn.Module, a torch.optim.Optimizer, "
               "a torch.Tensor, or an iterable of those")


# --- argument checking ---------------------------------------------------

def _parse_device(device: Optional[DeviceLike]) -> Optional[torch.device]:
    """The CUDA device to yield, or None for all of them."""
    if device is None:
        return None
    if isinstance(device, bool) or not isinstance(device, (str, int, torch.device)):
        raise TypeError(f"Courtesy(device=...): got {type(device).__name__}; {_DEVICE_HELP}")
    if isinstance(device, int):
        if device < 0:
            raise ValueError(f"Courtesy(device={device}): negative index; {_DEVICE_HELP}")
        parsed = torch.device("cuda", device)
    else:
        try:
            parsed = torch.device(device)
        except (RuntimeError, ValueError) as exc:
            raise ValueError(f"Courtesy(device={device!r}): {exc}; {_DEVICE_HELP}") from None
    if parsed.type != "cuda":
        raise ValueError(f"Courtesy(device={device!r}): Courtesy moves CUDA memory only; "
                         f"{_DEVICE_HELP}")
    if parsed.index is not None and torch.cuda.is_available() \
            and parsed.index >= torch.cuda.device_count():
        raise ValueError(f"Courtesy(device={device!r}): only {torch.cuda.device_count()} "
                         f"CUDA device(s) visible")
    return parsed


def _parse_scope(tensors: Optional[Scope]) -> Optional[List[object]]:
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


def _parse_threshold(threshold: Optional[float]) -> Optional[int]:
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

_plain_types: Dict[type, bool] = {}


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


def _held_elsewhere(storage: torch.UntypedStorage) -> bool:
    """Whether anything besides this one handle still owns storage."""
    if _storage_use_count is None:
        return False
    return _storage_use_count(storage._cdata) > 1


def _roots_tensors(roots: Optional[List[object]]) -> List[torch.Tensor]:
    """Tensors directly reachable from the roots (or every live tensor)."""
    if roots is None:
        # type(), not isinstance(): isinstance() reads __class__, which proxies
        # and deprecated aliases (torch.distributed.reduce_op) turn into code
        return [obj for obj in gc.get_objects() if issubclass(type(obj), torch.Tensor)]
    found = []
    visited = set()
    pending: List[object] = list(roots)
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


def _collect(roots: Optional[List[object]]) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
    """Tensors of the scope, with their grads and view bases.

    Returns (movable, other): other holds the sparse, quantized, nested and
    subclass tensors, which stay where they are.
    """
    seen: Dict[int, torch.Tensor] = {}
    pending = _roots_tensors(roots)
    while pending:
        t = pending.pop()
        if id(t) in seen:
            continue
        seen[id(t)] = t
        if not _is_movable(t):
            continue
        # .grad of a non-leaf that does not retain it only warns
        grad = t.grad if (t.is_leaf or t.retains_grad) else None
        for extra in (grad, t._base):
            if extra is not None:
                pending.append(extra)
    movable = [t for t in seen.values() if _is_movable(t)]
    other = [t for t in seen.values() if not _is_movable(t)]
    return movable, other


def _group_by_storage(tensors: Iterable[torch.Tensor]
                      ) -> Dict[Tuple[torch.device, int], List[torch.Tensor]]:
    """Tensors keyed by (device, storage address); empty storages are left out."""
    groups: Dict[Tuple[torch.device, int], List[torch.Tensor]] = {}
    for t in tensors:
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # functorch wrappers and the like
            continue
        if storage.nbytes() == 0:
            continue
        groups.setdefault((t.device, storage.data_ptr()), []).append(t)
    return groups


# --- moving storages -----------------------------------------------------

def _copy_storage(storage: torch.UntypedStorage, device: torch.device) -> torch.UntypedStorage:
    """A copy of the whole storage on device."""
    raw = torch.empty(0, dtype=torch.uint8, device=storage.device)
    with torch.no_grad():
        raw.set_(storage)
    return raw.to(device, copy=True).untyped_storage()


def _repoint(tensors: Iterable[torch.Tensor], storage: torch.UntypedStorage) -> None:
    """Make every tensor a window on storage at its own offset, sizes and strides.

    ``t.data = alias`` keeps the tensor object, its autograd metadata and its
    grad; it also works across devices, where ``t.set_()`` refuses.
    """
    for t in tensors:
        with torch.inference_mode(t.is_inference()):
            alias = torch.empty(0, dtype=t.dtype, device=storage.device)
            alias.set_(storage, t.storage_offset(), t.size(), t.stride())
        t.data = alias


def _move_group(tensors: List[torch.Tensor], device: torch.device) -> torch.UntypedStorage:
    """Copy the storage the tensors share to device and re-point them; returns the copy."""
    copy = _copy_storage(tensors[0].untyped_storage(), device)
    _repoint(tensors, copy)
    return copy


# a group that was moved out: its tensors, the storage they left (Owned until the
# yield is complete, so that a failure can put them back without a copy), the host copy
_Moved = Tuple[List[torch.Tensor], torch.UntypedStorage, torch.UntypedStorage]


def _safe(wanted: Callable[[torch.Tensor], bool], t: torch.Tensor) -> bool:
    """wanted(t), False where an exotic subclass cannot even say its device."""
    try:
        return bool(wanted(t))
    except Exception:
        return False


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} B" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return f"{n:.2f} GiB"  # pragma: no cover


def _leftover_message(held: List[Tuple[int, int]], threshold: int, stuck: int, skipped: int,
                      scoped: bool) -> str:
    """The warning for devices that still hold memory after yield_memory()."""
    where = ", ".join(f"cuda:{i} {_fmt_bytes(n)}" for i, n in held)
    notes = []
    if stuck:
        notes.append(f"{_fmt_bytes(stuck)} in storages that something besides the moved "
                     "tensors still uses (left in place)")
    notes += [
        "tensors autograd saved for backward that Python no longer references "
        "(finish backward() or drop the graph before yielding)",
        "tensors referenced only from C++ (DDP gradient buckets, CUDA-graph pools, "
        "extension state)",
    ]
    if scoped:
        notes.append("tensors outside the tensors= scope")
    if skipped:
        notes.append(f"{skipped} sparse, quantized, nested or subclass tensor(s)")
    return (f"Courtesy.yield_memory(): still allocated after yielding: {where} "
            f"(threshold {_fmt_bytes(threshold)}). Not movable: " + "; ".join(notes) + ".")


# --- the public face -----------------------------------------------------

class Courtesy:
    """Move CUDA tensors to host memory and back, keeping the same tensor objects.

    Args:
        device: the CUDA device to free: None (every CUDA device), ``'cuda'``
            (the current one at ``yield_memory()`` time), ``'cuda:N'``, ``N``
            or ``torch.device('cuda', N)``.
        tensors: what to move: None (every tensor Python can reach, found by a
            walk of the garbage collector), or a Module, an Optimizer, a
            Tensor, or an iterable of those.  Grads, view bases and optimizer
            state come along.
        threshold: warn after ``yield_memory()`` when a device still has more
            than this many bytes allocated; None never warns.

    Without CUDA, ``yield_memory()`` and ``restore()`` do nothing and return 0.
    Yield between training steps, not while an autograd graph is alive.
    Tensors captured by CUDA graphs (``torch.compile(mode="reduce-overhead")``)
    must not be moved: a replay would use the old addresses.
    """

    def __init__(self, device: Optional[DeviceLike] = None, tensors: Optional[Scope] = None,
                 threshold: Optional[float] = DEFAULT_THRESHOLD) -> None:
        self._device = _parse_device(device)
        self._roots = _parse_scope(tensors)
        self._threshold = _parse_threshold(threshold)
        # host storage address -> (host storage, device it came from).
        # Owned: holding the host copy keeps its address unique until restore().
        self._moved: Dict[int, Tuple[torch.UntypedStorage, torch.device]] = {}

    def __repr__(self) -> str:
        scope = "all tensors" if self._roots is None else f"{len(self._roots)} root(s)"
        return (f"Courtesy(device={self._device}, {scope}, "
                f"yielded={_fmt_bytes(self.yielded_bytes)})")

    @property
    def yielded_bytes(self) -> int:
        """Bytes currently parked in host memory by this Courtesy."""
        return sum(host.nbytes() for host, _ in self._moved.values())

    def yield_memory(self) -> int:
        """Move the scope's CUDA tensors to host memory; returns the bytes moved.

        Releases the freed device memory (``torch.cuda.empty_cache()``) and
        warns when a device still holds more than ``threshold`` bytes.  A
        second call moves what appeared since the first.
        """
        return self._yield()

    def restore(self) -> int:
        """Move every tensor parked by ``yield_memory()`` back; returns the bytes moved.

        Harmless without a prior ``yield_memory()`` or when called twice.  If
        the device is out of memory, the error says so and what was not yet
        moved stays parked: call ``restore()`` again later.
        """
        if not self._moved:
            return 0
        tensors, _ = _collect(self._roots)
        groups: Dict[int, List[torch.Tensor]] = {}
        for (device, address), members in _group_by_storage(tensors).items():
            if device.type == "cpu" and address in self._moved:
                groups[address] = members
        del tensors
        moved = 0
        for address, members in groups.items():
            host, device = self._moved[address]
            try:
                _move_group(members, device)
            except torch.cuda.OutOfMemoryError as exc:
                raise torch.cuda.OutOfMemoryError(
                    f"Courtesy.restore(): no room on {device} for {_fmt_bytes(host.nbytes())}; "
                    f"{_fmt_bytes(self.yielded_bytes)} still parked in host memory, "
                    f"call restore() again once the device has room. {exc}") from exc
            del self._moved[address]  # one group at a time, so a failed restore() resumes
            moved += host.nbytes()
        # host copies no reachable tensor uses any more: drop them
        self._moved.clear()
        return moved

    def __enter__(self) -> "Courtesy":
        self._yield()
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self.restore()

    # -- internals --

    def _source_filter(self) -> Optional[Callable[[torch.Tensor], bool]]:
        """Which tensors to move, or None when there is nothing to do (no CUDA)."""
        if not torch.cuda.is_available():
            return None
        if self._device is None:
            return lambda t: t.is_cuda
        if self._device.index is None:
            # asked only of CUDA tensors, so current_device() never starts CUDA needlessly
            return lambda t: t.is_cuda and t.device.index == torch.cuda.current_device()
        target = self._device
        return lambda t: t.device == target

    def _device_index(self) -> int:
        assert self._device is not None
        if self._device.index is None:
            return torch.cuda.current_device()
        return self._device.index

    def _yield(self) -> int:
        wanted = self._source_filter()
        if wanted is None:
            return 0
        gc.collect()  # dead cycles holding device tensors: free them, do not copy them
        tensors, others = _collect(self._roots)
        groups = _group_by_storage(t for t in tensors if wanted(t))
        skipped = sum(1 for t in others if _safe(wanted, t))
        del tensors, others
        for device in {device for device, _ in groups}:
            if device.type == "cuda":
                torch.cuda.synchronize(device)  # other streams may still use them
        moved, stuck = self._move_out(list(groups.values()))
        del groups
        # comprehensions, so that no local name keeps a device storage alive
        self._moved.update({host.data_ptr(): (host, old.device) for _, old, host in moved})
        total = sum(host.nbytes() for _, _, host in moved)
        del moved  # the last owners of the device storages
        self._release(skipped, stuck)
        return total

    @staticmethod
    def _move_out(groups: List[List[torch.Tensor]]) -> Tuple[List[_Moved], int]:
        """Move each group to host memory; all or nothing.

        Returns the moved groups and the bytes of groups left in place because
        something out of reach still uses their storage.
        """
        moved: List[_Moved] = []
        stuck = 0
        current: Optional[Tuple[List[torch.Tensor], torch.UntypedStorage]] = None
        try:
            for members in groups:
                current = (members, members[0].untyped_storage())
                host = _move_group(members, torch.device("cpu"))
                members, old = current
                current = None
                if _held_elsewhere(old):
                    # moving would free nothing and split the aliasing: put it back
                    _repoint(members, old)
                    stuck += old.nbytes()
                    continue
                moved.append((members, old, host))
        except BaseException:
            undo = [(m, o) for m, o, _ in moved] + ([current] if current is not None else [])
            for members, old in undo:
                _repoint(members, old)
            raise
        return moved, stuck

    def _release(self, skipped: int, stuck: int) -> None:
        """Hand cached blocks back to the driver; warn about what stayed."""
        if not torch.cuda.is_available() or not torch.cuda.is_initialized():
            return
        clear_workspaces = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
        if clear_workspaces is not None:  # cuBLAS workspaces count as allocated memory
            clear_workspaces()
        torch.cuda.empty_cache()
        if self._threshold is None:
            return
        if self._device is None:
            indices = list(range(torch.cuda.device_count()))
        else:
            indices = [self._device_index()]
        held = [(i, torch.cuda.memory_allocated(i)) for i in indices]
        held = [(i, n) for i, n in held if n > self._threshold]
        if not held:
            return
        # stacklevel: _release, _yield, yield_memory or __enter__, the caller
        warnings.warn(_leftover_message(held, self._threshold, stuck, skipped,
                                        scoped=self._roots is not None),
                      UserWarning, stacklevel=4)
