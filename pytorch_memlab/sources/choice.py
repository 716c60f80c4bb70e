"""Which source the tracer reads for a kind of device: the policy.

``choose(kind, columns)`` decides once, and says what it decided as one
``SourceChoice``: the source (one of the compiled torch shim's sources, a
PyCapsule, C++ over c10; or, without the shim, the slow
``CudaFallbackSource``), whether the tracer is pushed each allocation or
polls at each line, and why it is not the fast path.  ``get_source`` acts
on that choice: the warnings, and the errors where there is nothing to
read.  The shim is built against the torch installed at build time; after a
torch upgrade it may fail to load.  Set ``PYTORCH_MEMLAB_REQUIRE_SHIM=1`` to
make a missing shim an ImportError.  Loading the shim and every call into
it go through ``native.py``.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal, Optional, Sequence

from pytorch_memlab._install import rebuild_command
from pytorch_memlab.records.meanings import Field
from pytorch_memlab.records.meanings import torch_meaning as _torch_meaning

from . import native
from .cuda_fallback import CudaFallbackSource

if TYPE_CHECKING:
    from pytorch_memlab._tracer import Source

__all__ = ["REQUIRE_SHIM_ENV", "SourceChoice", "accept", "choose", "cuda_push_choice", "field_meaning",
           "field_table", "get_source", "prepare", "settle_blocks", "source_fields"]

REQUIRE_SHIM_ENV = "PYTORCH_MEMLAB_REQUIRE_SHIM"

Origin = Literal["shim", "python fallback"]
Path = Literal["push", "poll"]


@dataclass(frozen=True)
class SourceChoice:
    """What a profiler reads for one kind of device, decided once."""

    kind: str                   # "cuda" or "cpu"
    source: Optional[Source]    # None: nothing can read this kind here
    origin: Optional[Origin]    # the compiled shim, or the Python fallback
    path: Optional[Path]        # pushed at each allocation, or polled at each line
    why: Optional[str]          # why not the fast path (push through the shim); None when it is
    error: Optional[BaseException] = None   # why the shim did not load, if it did not

    @property
    def compiled(self) -> bool:
        """Does the tracer read this source in C (a shim capsule)?"""
        return self.origin == "shim"


_warned = False
_warned_resets = False
# A warning names the line that called get_source() or accept(): the warning
# helper, _accept, then get_source or accept, then that caller.
_CALLER = 4


def _warn_fallback(error: Optional[BaseException]) -> None:
    global _warned
    if _warned:
        return
    _warned = True
    warnings.warn(
        f"pytorch_memlab: the compiled torch shim is unavailable ({error}); reading "
        "CUDA memory through torch._C._cuda_memoryStats instead, which is much slower "
        f"per profiled line.  Rebuild it against the installed torch: {rebuild_command()}",
        RuntimeWarning, stacklevel=_CALLER)


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


def choose(kind: str, columns: Optional[Iterable[str]] = None) -> SourceChoice:
    """The source for ``kind`` ("cuda" or "cpu"), decided without a warning
    or an error.

    ``columns`` (with the growth field) are what a profiler will read: for
    "cuda", the push source (the allocator's trace tracker, nothing reset)
    serves them when it tracks them all; else the polled source.  Without
    the shim: for "cuda", ``CudaFallbackSource``; for "cpu", no source.
    """
    native.check_kind(kind)
    why: Optional[str] = None
    if kind == "cuda" and columns is not None:
        push, why = cuda_push_choice(columns)
        if push is not None:
            return SourceChoice(kind, push, "shim", "push", None)
    capsule, error = native.shim_capsule(kind)
    if capsule is not None:
        path: Path = "push" if native.shim_path(kind) == "push" else "poll"
        return SourceChoice(kind, capsule, "shim", path, why)
    if kind == "cpu":
        return SourceChoice(kind, None, None, None,
                            f"CPU profiling needs the compiled shim ({error})", error)
    return SourceChoice(kind, CudaFallbackSource(), "python fallback", "poll",
                        f"the compiled shim is unavailable ({error})", error)


def _warn_resets(columns: Sequence[str], why: Optional[str]) -> None:
    """Once per process: polling a *.peak column resets the user's peaks."""
    global _warned_resets
    peaks = [c for c in columns if field_meaning(c).kind == "peak"]
    if _warned_resets or not peaks:
        return
    _warned_resets = True
    warnings.warn(
        f"pytorch_memlab: CUDA column(s) {', '.join(peaks)} are polled ({why}); polling "
        "resets the device's peak statistics at every profiled line, so "
        "torch.cuda.max_memory_allocated() and every *.peak of torch.cuda.memory_stats() "
        "will not be your program's own while profiling",
        RuntimeWarning, stacklevel=_CALLER)


def _no_cpu_source(error: Optional[BaseException]) -> RuntimeError:
    return RuntimeError(
        "CPU memory profiling needs the compiled torch shim "
        f"(pytorch_memlab._torchshim), which is unavailable ({error}); rebuild it "
        f"against the installed torch: {rebuild_command()}")


def get_source(kind: str, columns: Optional[Iterable[str]] = None) -> Source:
    """The source ``choose(kind, columns)`` picks (``accept``)."""
    wanted = None if columns is None else tuple(columns)
    return _accept(choose(kind, wanted), wanted)


def accept(choice: SourceChoice, columns: Optional[Sequence[str]] = None) -> Source:
    """``choice.source``, with what the choice means for the user reading
    ``columns`` (``_accept``)."""
    return _accept(choice, columns)


def _accept(choice: SourceChoice, columns: Optional[Sequence[str]]) -> Source:
    """``choice.source``, with what the choice means for the user reading
    ``columns``: one warning per process when a *.peak column is polled
    (polling resets the device's peaks at every line); without the shim,
    ImportError if PYTORCH_MEMLAB_REQUIRE_SHIM=1, RuntimeError for "cpu"
    (CPU tensors cannot be counted without it), and for "cuda" one warning
    per process about the slow fallback.
    """
    if columns is not None and choice.path == "poll":
        _warn_resets(columns, choice.why)
    if choice.origin == "shim":
        assert choice.source is not None
        return choice.source
    if os.environ.get(REQUIRE_SHIM_ENV) == "1":
        raise ImportError(
            f"{REQUIRE_SHIM_ENV}=1 but the compiled torch shim is unavailable "
            f"({choice.error}); rebuild it against the installed torch: "
            f"{rebuild_command()}") from choice.error
    if choice.source is None:
        raise _no_cpu_source(choice.error) from choice.error
    _warn_fallback(choice.error)
    return choice.source


def prepare(kind: str, device: int, storages: Callable[[], Sequence[Any]]) -> None:
    """Attach the shim's counting to ``kind`` now.  For "cpu", the first time
    in a process, also count the CPU tensor storages ``storages()`` returns
    (those alive now that Python reaches) as live, so that levels and peaks
    start from what the program holds whichever function is profiled first,
    and their frees are counted exactly.  Storages Python cannot reach (held
    only by C++) stay uncounted."""
    native.prepare(kind, device)
    if kind == "cpu" and not native.cpu_seeded():
        live = storages()            # kept alive until seed_cpu returns
        native.seed_cpu(live)
        del live


def settle_blocks(kind: str, device: int) -> None:
    """Bring the size of a CUDA block that has none yet (its size comes at the
    device's next allocator event or read) to the tracers following blocks:
    one reading of the push source.  Nothing to do on the CPU."""
    if kind == "cuda":
        native.sample("cuda_push", device)


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
