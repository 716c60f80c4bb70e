"""The Courtesy class: yield a device's tensors to host memory, restore them,
and warn about what could not move."""
from __future__ import annotations

import gc
import warnings
from types import TracebackType
from typing import Callable, Optional, Type

import torch

from ..common.devices import DeviceSpec, cuda_in_use
from ..common.sizes import readable_size
from .scope import (DEFAULT_THRESHOLD, Scope, collect, group_by_storage, held_elsewhere,
                    parse_device, parse_scope, parse_threshold)
from .storage_moves import Moved, move_group, repoint


def _safe(wanted: Callable[[torch.Tensor], bool], t: torch.Tensor) -> bool:
    """wanted(t), False where an exotic subclass cannot even say its device."""
    try:
        return bool(wanted(t))
    except Exception:
        return False


def _leftover_message(held: list[tuple[int, int]], threshold: int, stuck: int, skipped: int,
                      scoped: bool) -> str:
    """The warning for devices that still hold memory after yield_memory()."""
    where = ", ".join(f"cuda:{i} {readable_size(n)}" for i, n in held)
    notes = []
    if stuck:
        notes.append(f"{readable_size(stuck)} in storages that something besides the moved "
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
            f"(threshold {readable_size(threshold)}). Not movable: " + "; ".join(notes) + ".")


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

    def __init__(self, device: Optional[DeviceSpec] = None, tensors: Optional[Scope] = None,
                 threshold: Optional[float] = DEFAULT_THRESHOLD) -> None:
        self._device = parse_device(device)
        self._roots = parse_scope(tensors)
        self._threshold = parse_threshold(threshold)
        # host storage address -> (host storage, device it came from).
        # Owned: holding the host copy keeps its address unique until restore().
        self._moved: dict[int, tuple[torch.UntypedStorage, torch.device]] = {}

    def __repr__(self) -> str:
        scope = "all tensors" if self._roots is None else f"{len(self._roots)} root(s)"
        return (f"Courtesy(device={self._device}, {scope}, "
                f"yielded={readable_size(self.yielded_bytes)})")

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
        tensors, _ = collect(self._roots)
        groups: dict[int, list[torch.Tensor]] = {}
        for (where, address), members in group_by_storage(tensors).items():
            if where == "cpu" and address in self._moved:
                groups[address] = members
        del tensors
        moved = 0
        for address, members in groups.items():
            host, device = self._moved[address]
            try:
                move_group(members, device)
            except torch.cuda.OutOfMemoryError as exc:
                raise torch.cuda.OutOfMemoryError(
                    f"Courtesy.restore(): no room on {device} for {readable_size(host.nbytes())}; "
                    f"{readable_size(self.yielded_bytes)} still parked in host memory, "
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
        tensors, others = collect(self._roots)
        groups = group_by_storage(t for t in tensors if wanted(t))
        skipped = sum(1 for t in others if _safe(wanted, t))
        del tensors, others
        for device in {members[0].device for members in groups.values()}:
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
    def _move_out(groups: list[list[torch.Tensor]]) -> tuple[list[Moved], int]:
        """Move each group to host memory; all or nothing.

        Returns the moved groups and the bytes of groups left in place because
        something out of reach still uses their storage.
        """
        moved: list[Moved] = []
        stuck = 0
        current: Optional[tuple[list[torch.Tensor], torch.UntypedStorage]] = None
        try:
            for members in groups:
                current = (members, members[0].untyped_storage())
                host = move_group(members, torch.device("cpu"))
                members, old = current
                current = None
                if held_elsewhere(old):
                    # moving would free nothing and split the aliasing: put it back
                    repoint(members, old)
                    stuck += old.nbytes()
                    continue
                moved.append((members, old, host))
        except BaseException:
            undo = [(m, o) for m, o, _ in moved] + ([current] if current is not None else [])
            for members, old in undo:
                repoint(members, old)
            raise
        return moved, stuck

    def _release(self, skipped: int, stuck: int) -> None:
        """Hand cached blocks back to the driver; warn about what stayed."""
        if not cuda_in_use():
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
