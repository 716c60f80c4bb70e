"""The line profiler's Python face over the C tracer (pytorch_memlab._tracer)
and the memory sources (``pytorch_memlab.sources``, whose ``native.py`` is
the boundary to both)."""
from importlib import import_module
from typing import Any

from ..common.devices import reset_target_gpu, set_target_gpu, target_gpu
from ..records.columns import DEFAULT_COLUMNS
from .decorators import clear_global_line_profiler, global_line_profiler, profile, profile_every
from .profiler import LineProfiler

# Imported when first asked for: profiling needs none of them.
_LATER = {"readable_size": "pytorch_memlab.common.sizes",
          "SCHEMA_VERSION": "pytorch_memlab.records.document",
          "SavedProfile": "pytorch_memlab.reports.saved_profile",
          "load": "pytorch_memlab.reports.saved_profile"}

__all__ = [
    "DEFAULT_COLUMNS",
    "LineProfiler",
    "SCHEMA_VERSION",
    "SavedProfile",
    "clear_global_line_profiler",
    "global_line_profiler",
    "load",
    "profile",
    "profile_every",
    "readable_size",
    "reset_target_gpu",
    "set_target_gpu",
    "target_gpu",
]


def __getattr__(name: str) -> Any:
    module = _LATER.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
