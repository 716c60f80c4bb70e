"""Typed face of the torch shim (src/torchshim/module.cpp): the allocator
statistics sources as PyCapsules for the tracer, plus control-path helpers.
Import torch before this module (libc10 must be loaded).

``kind`` is "cuda", "cuda_push", "cuda_push_counted" or "cpu"; any other is a
ValueError, and a kind this torch build cannot serve a RuntimeError.
"""
from typing import Literal, Sequence

from pytorch_memlab._tracer import Capsule

# PyCapsules named "pytorch_memlab.memlab_source" holding a
# ``const memlab_source *`` (include/memlab/source.h).  The CUDA ones are
# absent when the shim was built for a torch without them.
cuda_source: Capsule
cuda_push_source: Capsule
cuda_push_counted_source: Capsule
cpu_source: Capsule

ABI_VERSION: int
"""MEMLAB_SOURCE_ABI_VERSION the shim was built with."""
TORCH_VERSION: str
"""torch.__version__ the shim was compiled against ("unknown" if not given)."""
TORCH_CXX11_ABI: int
"""torch's _GLIBCXX_USE_CXX11_ABI at build time (1, 0; -1 if not given)."""

def prepare(kind: str, device: int, /) -> None:
    """Make the source ready (for "cpu": install the counting allocator)."""

def sample(kind: str, device: int, /) -> tuple[int, ...]:
    """One reading, in fields(kind) order."""

def reset_peaks(kind: str, device: int, /) -> None:
    """Set every *.peak field to its *.current."""

def path(kind: str, /) -> Literal["push", "poll"]:
    """How the tracer reads the source: per-thread readers ("push") or
    sample and reset peaks ("poll")."""

def open_reader(kind: str, device: int, /) -> int:
    """A push source's reader register, or -1."""

def close_reader(kind: str, device: int, reader: int, /) -> None:
    """Give the register back."""

def read(kind: str, device: int, reader: int, /) -> tuple[int, ...]:
    """The reader's reading, in fields(kind) order: peaks since its last read,
    counters of this thread."""

def cuda_push_unavailable() -> str | None:
    """Why the CUDA trace tracker cannot serve (build, backend), or None."""

def seed_cpu(storages: Sequence[int], /) -> tuple[int, int] | None:
    """Count the CPU storages made before the counting wrapper (the
    ``UntypedStorage._cdata`` of each, kept alive by the caller) as live,
    and their later frees exactly.  Only the first call after
    ``prepare("cpu", 0)`` counts: (storages, bytes) counted; then None."""

def cpu_seeded() -> bool:
    """``seed_cpu()`` has run since the counting wrapper was installed."""

def cpu_counts(storage: int, /) -> bool:
    """Does the CPU source count this storage's block (its
    ``UntypedStorage._cdata``, kept alive by the caller): made through the
    counting wrapper, or seeded?"""

def _pause_next_cpu_block(ns: int, /) -> None:
    """Tests only: the next CPU block counted waits ``ns`` nanoseconds between
    its count and its push to the tracer."""

def _cpu_block_paused() -> bool:
    """Tests only: a block is waiting (see ``_pause_next_cpu_block``)."""

def fields(kind: str, /) -> tuple[str, ...]:
    """Field names of the source."""
