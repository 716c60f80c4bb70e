"""The one boundary to native code: nothing else in the package imports the
tracer extension (``_tracer``) or the torch shim (``_torchshim``).

Where memory readings come from: the compiled torch shim, or a slow fallback.

``get_source(kind)`` returns what the tracer samples for ``kind`` ("cuda" or
"cpu"): the shim's PyCapsule when ``pytorch_memlab._torchshim`` loads (fast,
C++ over c10), else a Python object with the interface documented in
``_tracer.pyi``.  The shim is built against the torch installed at build time;
after a torch upgrade it may fail to load, and we fall back with one warning.
Set ``PYTORCH_MEMLAB_REQUIRE_SHIM=1`` to make a missing shim an ImportError.
"""
from __future__ import annotations

import importlib
import os
import warnings
from types import ModuleType
from typing import Any, Iterable, Optional, Sequence

from pytorch_memlab import _tracer
from pytorch_memlab._install import rebuild_command
from pytorch_memlab._tracer import Tracer
from pytorch_memlab.records.meanings import Field
from pytorch_memlab.records.meanings import torch_meaning as _torch_meaning

# The line-event mechanism in use: "monitoring" (3.12+) or "settrace".
MECHANISM: str = _tracer.MECHANISM

__all__ = ["MECHANISM", "Field", "Tracer", "field_meaning", "field_table", "get_source",
           "install_thread_hook", "is_compiled", "prepare", "sample", "source_fields"]


def is_compiled(source: Any) -> bool:
    """Is ``source`` one of the shim's sources (a capsule the tracer reads in
    C), rather than a Python object with ``sample()``?"""
    return type(source).__name__ == "PyCapsule"


def install_thread_hook() -> None:
    """settrace: hook the calling thread (threads that existed before enable())."""
    _tracer.install_thread_hook()

REQUIRE_SHIM_ENV = "PYTORCH_MEMLAB_REQUIRE_SHIM"
KINDS = ("cuda", "cpu")

_NO_CUDA = "CUDA is not available: no CUDA device, or a CPU-only torch"

# Per-pool keys come and go with torch.cuda.MemPool objects: not a fixed
# column, so neither the shim nor the fallback offers them.
_DYNAMIC_PREFIX = "reserved_bytes_by_private_pools."

# (shim module, None) or (None, why it did not load); None until first asked.
_shim_state: Optional[tuple[Optional[ModuleType], Optional[BaseException]]] = None
_warned = False
_warned_resets = False


def _import_shim() -> ModuleType:
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


def _load_shim() -> tuple[Optional[ModuleType], Optional[BaseException]]:
    global _shim_state
    if _shim_state is None:
        try:
            _shim_state = (_import_shim(), None)
        except Exception as exc:  # ImportError, undefined symbol after a torch upgrade...
            _shim_state = (None, exc)
    return _shim_state


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown source kind {kind!r}; expected one of {KINDS}")


def _shim_capsule(kind: str) -> tuple[Any, Optional[BaseException]]:
    """(capsule, None) or (None, why there is none)."""
    shim, error = _load_shim()
    if shim is None:
        return None, error
    capsule = getattr(shim, f"{kind}_source", None)
    if capsule is None:
        return None, ImportError(
            f"pytorch_memlab._torchshim has no {kind} source "
            "(built against a torch older than 2.9?)")
    return capsule, None


def _warn_fallback(error: Optional[BaseException]) -> None:
    global _warned
    if _warned:
        return
    _warned = True
    warnings.warn(
        f"pytorch_memlab: the compiled torch shim is unavailable ({error}); reading "
        "CUDA memory through torch._C._cuda_memoryStats instead, which is much slower "
        f"per profiled line.  Rebuild it against the installed torch: {rebuild_command()}",
        RuntimeWarning, stacklevel=3)


def cuda_push_choice(columns: Optional[Iterable[str]] = None) -> tuple[Any, Optional[str]]:
    """(the shim's CUDA push capsule, None) when a profiler reading
    ``columns`` (all of them when None) can use the allocator's trace
    tracker, else (None, why not)."""
    shim, error = _load_shim()
    if shim is None:
        return None, f"the compiled shim is unavailable ({error})"
    why = shim.cuda_push_unavailable() if hasattr(shim, "cuda_push_unavailable") else \
        "the shim has no CUDA push source"
    if why is not None or getattr(shim, "cuda_push_source", None) is None:
        return None, why or "the shim has no CUDA push source"
    wanted = set(shim.fields("cuda") if columns is None else columns)
    # The plain one first: the counted one reads the stats at every allocation.
    pushed: set[str] = set()
    for kind in ("cuda_push", "cuda_push_counted"):
        capsule = getattr(shim, kind + "_source", None)
        if capsule is None:
            continue
        fields = set(shim.fields(kind))
        if wanted <= fields:
            return capsule, None
        pushed |= fields
    missing = sorted(wanted - pushed)
    return None, (f"column(s) {', '.join(missing)} are not pushed (only "
                  f"{', '.join(sorted(pushed))} are)")


def _warn_resets(columns: Optional[Iterable[str]], why: Optional[str]) -> None:
    """Once per process: polling a *.peak column resets the user's peaks."""
    global _warned_resets
    peaks = [c for c in columns or () if field_meaning(c).kind == "peak"]
    if _warned_resets or not peaks:
        return
    _warned_resets = True
    warnings.warn(
        f"pytorch_memlab: CUDA column(s) {', '.join(peaks)} are polled ({why}); polling "
        "resets the device's peak statistics at every profiled line, so "
        "torch.cuda.max_memory_allocated() and every *.peak of torch.cuda.memory_stats() "
        "will not be your program's own while profiling",
        RuntimeWarning, stacklevel=3)


def get_source(kind: str, columns: Optional[Iterable[str]] = None) -> Any:
    """The source for ``kind`` ("cuda" or "cpu"): a shim capsule, or a fallback.

    ``columns`` (with the growth field) are what a profiler will read: for
    "cuda", the push source (the allocator's trace tracker, nothing reset)
    serves them when it tracks them all; else the polled source, which resets
    the device's peaks at every line (one warning per process when a *.peak
    column is read that way).

    Without the shim: ImportError if PYTORCH_MEMLAB_REQUIRE_SHIM=1; for "cpu",
    RuntimeError (CPU tensors cannot be counted without it); for "cuda", a
    ``CudaFallbackSource`` and one warning per process.
    """
    _check_kind(kind)
    if kind == "cuda" and columns is not None:
        columns = tuple(columns)
        push, why = cuda_push_choice(columns)
        if push is not None:
            return push
        _warn_resets(columns, why)
    capsule, error = _shim_capsule(kind)
    if capsule is not None:
        return capsule
    if os.environ.get(REQUIRE_SHIM_ENV) == "1":
        raise ImportError(
            f"{REQUIRE_SHIM_ENV}=1 but the compiled torch shim is unavailable ({error}); "
            f"rebuild it against the installed torch: {rebuild_command()}") from error
    if kind == "cpu":
        raise RuntimeError(
            "CPU memory profiling needs the compiled torch shim "
            f"(pytorch_memlab._torchshim), which is unavailable ({error}); rebuild it "
            f"against the installed torch: {rebuild_command()}") from error
    _warn_fallback(error)
    return CudaFallbackSource()


def source_fields(kind: str) -> tuple[str, ...]:
    """Field (column) names ``get_source(kind)`` offers.  Never warns; without
    the shim, RuntimeError where there is nothing to read (CPU; CUDA on a
    machine without it)."""
    return tuple(field.name for field in field_table(kind))


def field_table(kind: str) -> tuple[Field, ...]:
    """Every field of ``kind``'s source, with its kind and unit, as the
    source declares them."""
    _check_kind(kind)
    capsule, error = _shim_capsule(kind)
    if capsule is not None:
        source: Any = capsule
    elif kind == "cpu":
        raise RuntimeError(
            "CPU memory profiling needs the compiled torch shim "
            f"(pytorch_memlab._torchshim), which is unavailable ({error}); rebuild it "
            f"against the installed torch: {rebuild_command()}") from error
    else:
        source = CudaFallbackSource()
    return tuple(Field(*row) for row in _tracer.field_table(source))


_meanings: Optional[dict[str, Field]] = None


def field_meaning(column: str) -> Field:
    """Kind and unit of ``column``: as the shim's sources declare it, or,
    for a field no loaded source describes (a saved profile viewed without
    torch), as torch names it."""
    global _meanings
    if _meanings is None:
        _meanings = {}
        for kind in ("cuda", "cpu"):
            if _shim_capsule(kind)[0] is not None:
                _meanings.update((f.name, f) for f in field_table(kind))
    return _meanings.get(column) or _torch_meaning(column)


def _flatten(stats: dict[str, Any]) -> dict[str, int]:
    """Flatten a nested stats dict the way torch.cuda.memory_stats() does:
    dotted keys, tuple keys joined with "_", sorted."""
    items: list[tuple[str, int]] = []

    def walk(prefix: str, obj: Any) -> None:
        if isinstance(obj, dict):
            if prefix:
                prefix += "."
            for key, value in obj.items():
                if isinstance(key, tuple):
                    key = "_".join(str(part) for part in key)
                walk(prefix + str(key), value)
        else:
            items.append((prefix, obj))

    walk("", stats)
    items.sort()
    return dict(items)


class CudaFallbackSource:
    """Reads the CUDA caching allocator through ``torch._C._cuda_memoryStats``
    (tens of µs per sample, against well under 1 µs for the shim).

    Its fields are the keys of ``torch.cuda.memory_stats()`` on this torch:
    asking for them initialises CUDA, and without CUDA is a RuntimeError.
    Their kinds and units follow torch's naming (``_torch_meaning``).
    """

    name = "cuda"

    def __init__(self) -> None:
        self._fields: Optional[tuple[str, ...]] = None

    @property
    def fields(self) -> tuple[str, ...]:
        if self._fields is None:
            import torch
            if not torch.cuda.is_available():
                raise RuntimeError(_NO_CUDA)
            torch.cuda.init()  # type: ignore[no-untyped-call]  # torch: unannotated
            keys = _flatten(torch._C._cuda_memoryStats(torch.cuda.current_device()))
            self._fields = tuple(k for k in keys if not k.startswith(_DYNAMIC_PREFIX))
        return self._fields

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(_torch_meaning(name).kind for name in self.fields)

    @property
    def units(self) -> tuple[str, ...]:
        return tuple(_torch_meaning(name).unit for name in self.fields)

    def prepare(self, device: int) -> None:
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError(_NO_CUDA)
        torch.cuda.init()  # type: ignore[no-untyped-call]  # torch: unannotated
        count = torch.cuda.device_count()
        if not 0 <= device < count:
            raise RuntimeError(f"CUDA device {device} does not exist ({count} visible)")

    def sample(self, device: int) -> list[int]:
        import torch
        flat = _flatten(torch._C._cuda_memoryStats(device))
        return [int(flat.get(name, 0)) for name in self.fields]

    def reset_peaks(self, device: int) -> None:
        import torch
        torch.cuda.reset_peak_memory_stats(device)


def sample(kind: str, device: int) -> Sequence[int]:
    """One reading of the shim's ``kind`` source, its fields in order
    (``source_fields``); needs the shim."""
    return tuple(_import_shim().sample(kind, device))


def prepare(kind: str, device: int) -> None:
    """Attach the shim's counting to ``kind`` now.  For "cpu", the first time
    in a process: install the CPU allocator's counting wrapper, then count the
    CPU tensor storages alive now (those MemReporter finds) as live, so that
    levels and peaks start from what the program holds whichever function is
    profiled first, and their frees are counted exactly.  Storages Python
    cannot reach (held only by C++) stay uncounted."""
    shim = _import_shim()
    shim.prepare(kind, device)
    if kind == "cpu" and not shim.cpu_seeded():
        from .mem_reporter.collect import cpu_storages
        storages = cpu_storages()        # kept alive until seed_cpu returns
        shim.seed_cpu([s._cdata for s in storages])
        del storages
