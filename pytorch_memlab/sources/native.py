"""The one boundary to native code: nothing else in the package imports the
tracer extension (``_tracer``) or the torch shim (``_torchshim``).

This module only loads them and wraps their calls, typed; it decides
nothing.  Which source a profiler reads is decided in ``choice.py``; the
slow CUDA source used without the shim is ``cuda_fallback.py``.
"""
from __future__ import annotations

import importlib
from types import CodeType, ModuleType
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence, TypeVar

from pytorch_memlab import _tracer
from pytorch_memlab._tracer import ProfiledCall, Tracer
from pytorch_memlab.records.meanings import Field

if TYPE_CHECKING:
    from pytorch_memlab._tracer import Capsule, Source

# The line-event mechanism in use: "monitoring" (3.12+) or "settrace".
MECHANISM: str = _tracer.MECHANISM

_T = TypeVar("_T")

# The kinds of device a profiler reads.
KINDS = ("cuda", "cpu")

__all__ = ["KINDS", "MECHANISM", "ProfiledCall", "Tracer", "allocated_at", "check_kind",
           "cpu_counts", "cpu_seeded", "cuda_push_unavailable", "field_table", "import_shim",
           "install_thread_hook", "instances_of", "load_shim", "live_kinds", "peaks_by_kind", "prepare",
           "sample", "seed_cpu", "set_module", "tag_blocks",
           "shim_capsule", "shim_fields", "shim_path"]


def allocated_at(kind: str, device: int, ptr: int) -> Optional[tuple[CodeType, int]]:
    """(code, lineno) of the profiled line that allocated the live block at
    ``ptr`` of a ``kind`` device, as an enabled profiler recorded it, or None
    (only sources that push their allocations record them: the CPU's)."""
    return _tracer.allocated_at(kind, device, ptr)


def tag_blocks(tracer: Tracer, kind: int, ptrs: Sequence[int], sizes: Sequence[int],
               only_from: int = -1, back: bool = True) -> int:
    """Tag the live blocks at ``ptrs`` (``sizes``: their bytes, for a block
    made before the tracer was enabled) as kind number ``kind``, see
    _tracer.pyi; the number whose kind changed."""
    return _tracer.tag_blocks(tracer, kind, ptrs, sizes, only_from, back)


def peaks_by_kind(tracer: Tracer) -> tuple[list[tuple[CodeType, Any]], Optional[str],
                                           Optional[str]]:
    """Each function's peak with its tagged kinds and modules (see
    _tracer.pyi), why the kinds are not exact and why the modules are not
    (None: they are)."""
    return _tracer.peaks_by_kind(tracer)


def live_kinds(tracer: Tracer, code: CodeType) -> Optional[tuple[tuple[tuple[int, ...], ...],
                                                                   dict[int, int]]]:
    """The tagged kinds of what is alive now around ``code``'s latest call,
    (before, during, other threads, after) each in kind order, and what each
    module made during it (see _tracer.pyi); None where not known."""
    return _tracer.live_kinds(tracer, code)


def set_module(number: int) -> None:
    """The calling thread runs module ``number`` (0: none) from now on."""
    _tracer.set_module(number)


def instances_of(cls: type[_T]) -> list[_T]:
    """The objects the garbage collector tracks whose type is ``cls`` or a
    subclass of it, as ``issubclass(type(obj), cls)`` tells (no object's
    code runs)."""
    return _tracer.instances_of(cls)


def install_thread_hook() -> None:
    """settrace: hook the calling thread (threads that existed before enable())."""
    _tracer.install_thread_hook()


def field_table(source: Source) -> tuple[Field, ...]:
    """Every field of ``source`` (a capsule or a Python source), with its kind
    and unit, as the source declares them."""
    return tuple(Field(*row) for row in _tracer.field_table(source))


def check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown source kind {kind!r}; expected one of {KINDS}")


# ---- the torch shim ------------------------------------------------------------

# (shim module, None) or (None, why it did not load); None until first asked.
_shim_state: Optional[tuple[Optional[ModuleType], Optional[BaseException]]] = None


def import_shim() -> ModuleType:
    """The shim, loaded against the running torch; ImportError if it cannot be."""
    import torch  # libc10 must be loaded, its allocators registered
    shim = importlib.import_module("pytorch_memlab._torchshim")
    _check_built_for(shim, torch)
    return shim


def _check_built_for(shim: ModuleType, torch: ModuleType) -> None:
    """ImportError unless the shim was compiled against this very torch."""
    built = (getattr(shim, "TORCH_VERSION", "unknown"), getattr(shim, "TORCH_CXX11_ABI", -1))
    running = (str(torch.__version__), int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))))
    if built != running:
        raise ImportError(
            f"it was built against torch {built[0]} (C++11 ABI {built[1]}), "
            f"this is torch {running[0]} (C++11 ABI {running[1]})")


def load_shim() -> tuple[Optional[ModuleType], Optional[BaseException]]:
    """(the shim, None) or (None, why it did not load): tried once per process."""
    global _shim_state
    if _shim_state is None:
        try:
            _shim_state = (import_shim(), None)
        except Exception as exc:  # ImportError, undefined symbol after a torch upgrade...
            _shim_state = (None, exc)
    return _shim_state


# The shim's sources by name: the polled CUDA one, the CPU one, and the two
# CUDA push ones (the counted one also reads the stats at every allocation).
_CAPSULES = {"cuda": "cuda_source", "cpu": "cpu_source", "cuda_push": "cuda_push_source",
             "cuda_push_counted": "cuda_push_counted_source"}


def shim_capsule(kind: str) -> tuple[Optional[Capsule], Optional[BaseException]]:
    """(the shim's ``kind`` source, a capsule; None) or (None, why there is
    none).  ``kind`` is a key of ``_CAPSULES``."""
    shim, error = load_shim()
    if shim is None:
        return None, error
    capsule: Optional[Capsule] = getattr(shim, _CAPSULES[kind], None)
    if capsule is None:
        return None, ImportError(
            f"pytorch_memlab._torchshim has no {kind} source "
            "(built against a torch older than 2.9?)")
    return capsule, None


def shim_fields(kind: str) -> tuple[str, ...]:
    """The field names of the shim's ``kind`` source; needs the shim."""
    return tuple(import_shim().fields(kind))


def cuda_push_unavailable() -> Optional[str]:
    """Why the shim's CUDA push source cannot serve (None: it can); needs
    the shim."""
    shim = import_shim()
    if not hasattr(shim, "cuda_push_unavailable"):
        return "the shim has no CUDA push source"
    why: Optional[str] = shim.cuda_push_unavailable()
    return why


def shim_path(kind: str) -> str:
    """How the tracer reads the shim's ``kind`` source: "push" or "poll"."""
    path: str = import_shim().path(kind)
    return path


def sample(kind: str, device: int) -> Sequence[int]:
    """One reading of the shim's ``kind`` source, its fields in order; needs
    the shim."""
    return tuple(import_shim().sample(kind, device))


def prepare(kind: str, device: int) -> None:
    """Attach the shim's counting to ``kind`` now (for "cpu": install the CPU
    allocator's counting wrapper)."""
    import_shim().prepare(kind, device)


def cpu_seeded() -> bool:
    """Has the CPU source counted the storages that were alive before it?"""
    return bool(import_shim().cpu_seeded())


def cpu_counts(storage: Any) -> bool:
    """Does the CPU source count ``storage``'s block (a CPU
    ``UntypedStorage``, alive while this runs)?  Not one made before it that
    Python could not reach then (held by C++ only), nor memory no allocator
    made."""
    global _cpu_counts
    if _cpu_counts is None:       # once: the saved-tensor hooks ask per block
        _cpu_counts = import_shim().cpu_counts
    return bool(_cpu_counts(storage._cdata))


_cpu_counts: Optional[Callable[[int], bool]] = None


def seed_cpu(storages: Sequence[Any]) -> None:
    """Count ``storages`` (CPU ``UntypedStorage`` objects, alive while this
    runs) as live blocks of the CPU source, so that their frees are counted
    exactly."""
    import_shim().seed_cpu([s._cdata for s in storages])
