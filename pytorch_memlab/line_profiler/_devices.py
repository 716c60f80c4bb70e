"""Which devices a profiler reads, and the process-wide target GPU.

A profiler created with ``device=None`` *follows the target*: it reads the GPU
chosen by ``set_target_gpu`` (else the current CUDA device), and moves when the
target moves, even in the middle of a profiled function.  Every other device
choice is fixed.
"""
from __future__ import annotations

import sys
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Protocol, Sequence, Union

import torch

DeviceArg = Union[None, str, int, torch.device, Sequence[Union[str, int, torch.device]]]

CPU_NOTE = ("pytorch_memlab: CUDA is not available, profiling CPU tensor memory instead "
            "(pass device='cpu' to say so and silence this note)")


@dataclass(frozen=True)
class DeviceSlot:
    """One device a profiler reads.  ``index is None``: the CUDA target GPU."""
    kind: str                  # "cpu" or "cuda"
    index: Optional[int]

    @property
    def follows_target(self) -> bool:
        return self.index is None


class Follower(Protocol):
    def _retarget(self, index: int) -> None: ...


_target: Optional[int] = None
_followers: "weakref.WeakSet[Any]" = weakref.WeakSet()
_noted_cpu = False


def _cuda_count() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _cuda_index(spec: Union[str, int, torch.device], what: str) -> Optional[int]:
    """The CUDA index ``spec`` names; None for a bare 'cuda'.  ValueError else."""
    if isinstance(spec, bool):
        raise TypeError(f"{what}: expected a GPU index, not {spec!r}")
    if isinstance(spec, int):
        index: Optional[int] = spec
    else:
        try:
            dev = torch.device(spec)
        except (RuntimeError, TypeError) as exc:
            raise ValueError(f"{what}: {spec!r} is not a device "
                             "(use 'cpu', 'cuda', 'cuda:N', N or 'all')") from exc
        if dev.type != "cuda":
            raise ValueError(f"{what}: {spec!r} is not a CUDA device")
        index = dev.index
    if index is not None and index < 0:
        raise ValueError(f"{what}: GPU index must be >= 0, not {index}")
    count = _cuda_count()
    if index is not None and count and index >= count:
        raise ValueError(f"{what}: GPU {index} does not exist ({count} visible)")
    return index


def _one(spec: Union[str, int, torch.device]) -> list[DeviceSlot]:
    if isinstance(spec, str) and spec == "all":
        count = _cuda_count()
        return [DeviceSlot("cuda", i) for i in range(count)]
    if (isinstance(spec, str) and spec == "cpu") or (
            isinstance(spec, torch.device) and spec.type == "cpu"):
        return [DeviceSlot("cpu", 0)]
    index = _cuda_index(spec, "device")
    if not torch.cuda.is_available():
        raise ValueError(f"device={spec!r} but CUDA is not available; "
                         "use device='cpu' to profile CPU tensor memory")
    return [DeviceSlot("cuda", index)]


def resolve_devices(device: DeviceArg, target_gpu: Optional[int]) -> tuple[list[DeviceSlot], bool]:
    """(slots, fell_back_to_cpu).  ``device`` wins over the legacy ``target_gpu``."""
    if device is None and target_gpu is not None:
        device = target_gpu
    if device is None or (isinstance(device, str) and device == "all"):
        if not torch.cuda.is_available():
            return [DeviceSlot("cpu", 0)], True
        if device is None:
            return [DeviceSlot("cuda", None)], False
    specs = [device] if isinstance(device, (str, int, torch.device)) else list(device)
    slots: list[DeviceSlot] = []
    for spec in specs:
        for slot in _one(spec):
            if slot not in slots:
                slots.append(slot)
    if not slots:
        raise ValueError(f"device={device!r} names no device")
    return slots, False


def note_cpu_fallback() -> None:
    """Say once per process, on stderr, that CPU memory is profiled instead."""
    global _noted_cpu
    if not _noted_cpu:
        _noted_cpu = True
        print(CPU_NOTE, file=sys.stderr)


def label(slot: DeviceSlot, index: int) -> str:
    return "cpu" if slot.kind == "cpu" else f"cuda:{index}"


# ---- the target GPU ------------------------------------------------------------

def current_target() -> int:
    """The GPU that following profilers read now."""
    if _target is not None:
        return _target
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.current_device()
    return 0


def add_follower(profiler: Follower) -> None:
    _followers.add(profiler)


def _move_followers() -> None:
    index = current_target()
    for follower in list(_followers):
        follower._retarget(index)


def set_target_gpu(gpu: Union[int, str, torch.device]) -> None:
    """Make profilers that follow the target (``device=None``, the default and
    ``profile``'s) read GPU ``gpu`` from the next line on.  Takes an index, a
    ``'cuda:N'`` string or a ``torch.device``; works inside profiled functions.
    Profilers created with an explicit device are not affected."""
    global _target
    index = _cuda_index(gpu, "set_target_gpu")
    if index is None:
        raise ValueError("set_target_gpu: name a GPU index, e.g. 1 or 'cuda:1'")
    _target = index
    _move_followers()


def reset_target_gpu() -> None:
    """Forget ``set_target_gpu``: following profilers read the current CUDA device."""
    global _target
    _target = None
    _move_followers()


@contextmanager
def target_gpu(gpu: Union[int, str, torch.device]) -> Iterator[int]:
    """``with target_gpu(1): ...`` -- ``set_target_gpu(1)`` for the block, then
    whatever the target was before."""
    global _target
    previous = _target
    set_target_gpu(gpu)
    try:
        yield _target if _target is not None else current_target()
    finally:
        _target = previous
        _move_followers()
