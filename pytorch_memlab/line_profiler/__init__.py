"""The line profiler's Python face over the C tracer (pytorch_memlab._tracer)
and the memory sources (``pytorch_memlab.sources``, whose ``native.py`` is
the boundary to both)."""
from ..common.devices import reset_target_gpu, set_target_gpu, target_gpu
from ..common.sizes import readable_size
from ..records.document import SCHEMA_VERSION
from ..reports.saved_profile import SavedProfile, load
from ..records.columns import DEFAULT_COLUMNS
from .decorators import clear_global_line_profiler, global_line_profiler, profile, profile_every
from .profiler import LineProfiler

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
