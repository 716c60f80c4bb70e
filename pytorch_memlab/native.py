"""The one boundary to native code: nothing else in the package imports the
tracer extension (``_tracer``) or the torch shim (``_torchshim``).

This module only loads them and wraps their calls, typed.  Which source a
profiler reads is decided in ``sources.py``; the slow CUDA source used
without the shim is ``cuda_fallback.py``.
"""
from __future__ import annotations

import importlib
from types import CodeType, ModuleType
from typing import Any, Optional, Sequence, TypeVar

from pytorch_memlab import _tracer
from pytorch_memlab._tracer import ProfiledCall, Tracer
from pytorch_memlab.records.meanings import Field

# The line-event mechanism in use: "monitoring" (3.12+) or "settrace".
MECHANISM: str = _tracer.MECHANISM

_T = TypeVar("_T")

# The kinds of device a profiler reads.
KINDS = ("cuda", "cpu")

__all__ = ["KINDS", "MECHANISM", "ProfiledCall", "Tracer", "allocated_at", "check_kind", "cuda_push_unavailable",
           "field_table", "import_shim", "install_thread_hook", "instances_of", "is_compiled",
           "load_shim", "prepare", "sample", "settle_blocks", "shim_capsule", "shim_fields"]


def allocated_at(kind: str, device: int, ptr: int) -> Optional[tuple[CodeType, int]]:
    """(code, lineno) of the profiled line that allocated the live block at
    ``ptr`` of a ``kind`` device, as an enabled profiler recorded it, or None
    (only sources that push their allocations record them: the CPU's)."""
    return _tracer.allocated_at(kind, device, ptr)


def is_compiled(source: Any) -> bool:
    """Is ``source`` one of the shim's sources (a capsule the tracer reads in
    C), rather than a Python object with ``sample()``?"""
    return type(source).__name__ == "PyCapsule"


def instances_of(cls: type[_T]) -> list[_T]:
    """The objects the garbage collector tracks whose type is ``cls`` or a
    subclass of it, as ``issubclass(type(obj), cls)`` tells (no object's
    code runs)."""
    return _tracer.instances_of(cls)


def install_thread_hook() -> None:
    """settrace: hook the calling thread (threads that existed before enable())."""
    _tracer.install_thread_hook()


def field_table(source: Any) -> tuple[Field, ...]:
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


def shim_capsule(kind: str) -> tuple[Any, Optional[BaseException]]:
    """(the shim's ``kind`` source, a capsule; None) or (None, why there is
    none).  ``kind`` is a shim kind: "cuda", "cpu", "cuda_push",
    "cuda_push_counted"."""
    shim, error = load_shim()
    if shim is None:
        return None, error
    capsule = getattr(shim, f"{kind}_source", None)
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


def sample(kind: str, device: int) -> Sequence[int]:
    """One reading of the shim's ``kind`` source, its fields in order
    (``sources.source_fields``); needs the shim."""
    return tuple(import_shim().sample(kind, device))


def settle_blocks(kind: str, device: int) -> None:
    """Bring the size of a CUDA block that has none yet (its size comes at the
    device's next allocator event or read) to the tracers following blocks:
    one reading of the push source.  Nothing to do on the CPU."""
    if kind == "cuda":
        import_shim().sample("cuda_push", device)


def prepare(kind: str, device: int) -> None:
    """Attach the shim's counting to ``kind`` now.  For "cpu", the first time
    in a process: install the CPU allocator's counting wrapper, then count the
    CPU tensor storages alive now (those MemReporter finds) as live, so that
    levels and peaks start from what the program holds whichever function is
    profiled first, and their frees are counted exactly.  Storages Python
    cannot reach (held only by C++) stay uncounted."""
    shim = import_shim()
    shim.prepare(kind, device)
    if kind == "cpu" and not shim.cpu_seeded():
        from .mem_reporter.collect import cpu_storages
        storages = cpu_storages()        # kept alive until seed_cpu returns
        shim.seed_cpu([s._cdata for s in storages])
        del storages
