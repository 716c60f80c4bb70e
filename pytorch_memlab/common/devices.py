"""Which device an argument names, and the process-wide target GPU.

Every tool reads its ``device=`` argument here: :func:`parse_device` turns one
spelling (``'cpu'``, ``'cuda'``, ``'cuda:N'``, an int N meaning ``cuda:N``, a
``torch.device``) into a ``torch.device`` or raises one TypeError/ValueError
naming the argument and what it accepts.  The line profiler's list of devices
(:func:`resolve_devices`), MemReporter's filter and Courtesy's CUDA device are
built on it.

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

DeviceSpec = Union[str, int, torch.device]
DeviceArg = Union[None, DeviceSpec, Sequence[DeviceSpec]]

PROFILER_DEVICES = ("None (the target GPU, else CPU), 'cpu', 'cuda', 'cuda:N', an int N, "
                    "a torch.device, 'all', or a list of those")
GPU_FORMS = "a GPU index N, 'cuda:N' or torch.device('cuda', N)"

CPU_NOTE = ("pytorch_memlab: CUDA is not available, profiling CPU tensor memory instead "
            "(pass device='cpu' to say so and silence this note)")


def _shown(value: object) -> str:
    """How a bad argument is named in an error: its type, and its value when short."""
    text = repr(value)
    kind = type(value).__name__
    return f"{kind} {text}" if len(text) <= 40 and "object at 0x" not in text else kind


def parse_device(spec: object, what: str, accepted: str) -> torch.device:
    """The device ``spec`` names: 'cpu', 'cuda', 'cuda:N', any torch device
    string, an int N (``cuda:N``) or a torch.device.

    TypeError/ValueError naming ``what`` (the argument) and ``accepted``.
    """
    if isinstance(spec, torch.device):
        return spec
    if isinstance(spec, bool) or not isinstance(spec, (str, int)):
        raise TypeError(f"{what}: got {_shown(spec)}; expected {accepted}")
    if isinstance(spec, int):
        if spec < 0:
            raise ValueError(f"{what}: GPU index must be >= 0, not {spec}; expected {accepted}")
        return torch.device("cuda", spec)
    try:
        return torch.device(spec)
    except (RuntimeError, ValueError) as exc:
        raise ValueError(f"{what}: unknown device {spec!r} ({exc}); expected {accepted}") from None


def device_matches(want: torch.device, dev: torch.device) -> bool:
    """Is ``dev`` one of the devices ``want`` names?  'cuda' without an index
    names every CUDA device."""
    return want.type == dev.type and (want.index is None or want.index == dev.index)


def cuda_in_use() -> bool:
    """Is CUDA there and already initialised (so reading it starts nothing)?"""
    return torch.cuda.is_available() and bool(torch.cuda.is_initialized())  # type: ignore[no-untyped-call]


def cuda_count() -> int:
    """Visible CUDA devices; 0 without CUDA (never initialises it otherwise)."""
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def cuda_index(spec: object, what: str, accepted: str = GPU_FORMS) -> Optional[int]:
    """The CUDA index ``spec`` names (None for a bare 'cuda'); ValueError for
    another device type, or an index beyond the visible GPUs when CUDA is there."""
    dev = parse_device(spec, what, accepted)
    if dev.type != "cuda":
        shown = repr(str(spec) if isinstance(spec, torch.device) else spec)
        raise ValueError(f"{what}: {shown} is not a CUDA device; expected {accepted}")
    count = cuda_count()
    if dev.index is not None and count and dev.index >= count:
        raise ValueError(f"{what}: GPU {dev.index} does not exist ({count} visible); "
                         f"expected {accepted}")
    return dev.index


# ---- the line profiler's devices ---------------------------------------------------

@dataclass(frozen=True)
class DeviceSlot:
    """One device a profiler reads.  ``index is None``: the CUDA target GPU."""
    kind: str                  # "cpu" or "cuda"
    index: Optional[int]

    @property
    def follows_target(self) -> bool:
        return self.index is None


def _one(spec: object) -> list[DeviceSlot]:
    if isinstance(spec, str) and spec == "all":
        return [DeviceSlot("cuda", i) for i in range(cuda_count())]
    dev = parse_device(spec, "device", PROFILER_DEVICES)
    if dev.type == "cpu":
        return [DeviceSlot("cpu", 0)]
    index = cuda_index(spec, "device", PROFILER_DEVICES)
    if not torch.cuda.is_available():
        raise ValueError(f"device={spec!r} but CUDA is not available; "
                         "use device='cpu' to profile CPU tensor memory")
    return [DeviceSlot("cuda", index)]


def resolve_devices(device: object, target_gpu: Optional[int]) -> tuple[list[DeviceSlot], bool]:
    """(slots, fell_back_to_cpu).  ``device`` wins over the legacy ``target_gpu``."""
    if device is None and target_gpu is not None:
        device = target_gpu
    if device is None or (isinstance(device, str) and device == "all"):
        if not torch.cuda.is_available():
            return [DeviceSlot("cpu", 0)], True
        if device is None:
            return [DeviceSlot("cuda", None)], False
    if isinstance(device, (str, int, torch.device)):
        specs: list[object] = [device]
    elif isinstance(device, (list, tuple)):
        specs = list(device)
    else:
        raise TypeError(f"device: got {_shown(device)}; expected {PROFILER_DEVICES}")
    slots: list[DeviceSlot] = []
    for spec in specs:
        for slot in _one(spec):
            if slot not in slots:
                slots.append(slot)
    if not slots:
        raise ValueError(f"device={device!r} names no device; expected {PROFILER_DEVICES}")
    return slots, False


_noted_cpu = False


def note_cpu_fallback() -> None:
    """Say once per process, on stderr, that CPU memory is profiled instead."""
    global _noted_cpu
    if not _noted_cpu:
        _noted_cpu = True
        print(CPU_NOTE, file=sys.stderr)


def label(slot: DeviceSlot, index: int) -> str:
    return "cpu" if slot.kind == "cpu" else f"cuda:{index}"


# ---- the target GPU ------------------------------------------------------------

class Follower(Protocol):
    def _retarget(self, index: int) -> None: ...


_target: Optional[int] = None
_followers: "weakref.WeakSet[Any]" = weakref.WeakSet()


def current_target() -> int:
    """The GPU that following profilers read now."""
    if _target is not None:
        return _target
    if cuda_in_use():
        return torch.cuda.current_device()
    return 0


def add_follower(profiler: Follower) -> None:
    _followers.add(profiler)


def _move_followers() -> None:
    index = current_target()
    for follower in list(_followers):
        follower._retarget(index)


def _target_index(gpu: object) -> int:
    what = f"set_target_gpu({gpu!r})"
    index = cuda_index(gpu, what)
    if index is None:
        raise ValueError(f"{what}: name one GPU; expected {GPU_FORMS}, e.g. 1 or 'cuda:1'")
    if not torch.cuda.is_available():
        raise ValueError(f"{what}: CUDA is not available, so there is no GPU to target; "
                         f"expected {GPU_FORMS} of a visible GPU")
    return index


def set_target_gpu(gpu: DeviceSpec) -> None:
    """Make profilers that follow the target (``device=None``, the default and
    ``profile``'s) read GPU ``gpu`` from the next line on.  Takes an index, a
    ``'cuda:N'`` string or a ``torch.device`` of a visible GPU; works inside
    profiled functions.  Profilers created with an explicit device are not
    affected."""
    global _target
    _target = _target_index(gpu)
    _move_followers()


def reset_target_gpu() -> None:
    """Forget ``set_target_gpu``: following profilers read the current CUDA device."""
    global _target
    _target = None
    _move_followers()


@contextmanager
def target_gpu(gpu: DeviceSpec) -> Iterator[int]:
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
