"""Which source the tracer reads for a kind of device: the policy.

``get_source(kind, columns)`` returns what the tracer samples for ``kind``
("cuda" or "cpu"): one of the compiled torch shim's sources (a PyCapsule,
C++ over c10; for CUDA the push source when it serves every column, else
the polled one), or, without the shim, the slow ``CudaFallbackSource``
(``cuda_fallback.py``) with one warning.  The shim is built against the
torch installed at build time; after a torch upgrade it may fail to load.
Set ``PYTORCH_MEMLAB_REQUIRE_SHIM=1`` to make a missing shim an ImportError.
Loading the shim and every call into it go through ``native.py``.
"""
from __future__ import annotations

import os
import warnings
from typing import Any, Iterable, Optional

from pytorch_memlab import native
from pytorch_memlab._install import rebuild_command
from pytorch_memlab.cuda_fallback import CudaFallbackSource
from pytorch_memlab.records.meanings import Field
from pytorch_memlab.records.meanings import torch_meaning as _torch_meaning

__all__ = ["REQUIRE_SHIM_ENV", "cuda_push_choice", "field_meaning", "field_table",
           "get_source", "source_fields"]

REQUIRE_SHIM_ENV = "PYTORCH_MEMLAB_REQUIRE_SHIM"

_warned = False
_warned_resets = False


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
    shim, error = native.load_shim()
    if shim is None:
        return None, f"the compiled shim is unavailable ({error})"
    why = native.cuda_push_unavailable()
    if why is not None or native.shim_capsule("cuda_push")[0] is None:
        return None, why or "the shim has no CUDA push source"
    wanted = set(native.shim_fields("cuda") if columns is None else columns)
    # The plain one first: the counted one reads the stats at every allocation.
    pushed: set[str] = set()
    for kind in ("cuda_push", "cuda_push_counted"):
        capsule, _ = native.shim_capsule(kind)
        if capsule is None:
            continue
        fields = set(native.shim_fields(kind))
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


def _no_cpu_source(error: Optional[BaseException]) -> RuntimeError:
    return RuntimeError(
        "CPU memory profiling needs the compiled torch shim "
        f"(pytorch_memlab._torchshim), which is unavailable ({error}); rebuild it "
        f"against the installed torch: {rebuild_command()}")


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
    native.check_kind(kind)
    if kind == "cuda" and columns is not None:
        columns = tuple(columns)
        push, why = cuda_push_choice(columns)
        if push is not None:
            return push
        _warn_resets(columns, why)
    capsule, error = native.shim_capsule(kind)
    if capsule is not None:
        return capsule
    if os.environ.get(REQUIRE_SHIM_ENV) == "1":
        raise ImportError(
            f"{REQUIRE_SHIM_ENV}=1 but the compiled torch shim is unavailable ({error}); "
            f"rebuild it against the installed torch: {rebuild_command()}") from error
    if kind == "cpu":
        raise _no_cpu_source(error) from error
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
    native.check_kind(kind)
    capsule, error = native.shim_capsule(kind)
    if capsule is not None:
        return native.field_table(capsule)
    if kind == "cpu":
        raise _no_cpu_source(error) from error
    return native.field_table(CudaFallbackSource())


_meanings: Optional[dict[str, Field]] = None


def field_meaning(column: str) -> Field:
    """Kind and unit of ``column``: as the shim's sources declare it, or,
    for a field no loaded source describes (a saved profile viewed without
    torch), as torch names it."""
    global _meanings
    if _meanings is None:
        _meanings = {}
        for kind in native.KINDS:
            if native.shim_capsule(kind)[0] is not None:
                _meanings.update((f.name, f) for f in field_table(kind))
    return _meanings.get(column) or _torch_meaning(column)
