"""pytorch_memlab: per-line memory accounting for PyTorch.

Public names are imported lazily so that ``import pytorch_memlab`` stays cheap
and works where only the C tracer is built (the tracer tests on Pythons that
have no torch).
"""
from importlib import import_module
from typing import Any

__version__ = "1.0.0.dev0"

# public name -> module that defines it
_EXPORTS = {
    "LineProfiler": "pytorch_memlab.line_profiler",
    "profile": "pytorch_memlab.line_profiler",
    "profile_every": "pytorch_memlab.line_profiler",
    "set_target_gpu": "pytorch_memlab.line_profiler",
    "reset_target_gpu": "pytorch_memlab.line_profiler",
    "target_gpu": "pytorch_memlab.line_profiler",
    "clear_global_line_profiler": "pytorch_memlab.line_profiler",
    "load": "pytorch_memlab.line_profiler",
    "MemReporter": "pytorch_memlab.mem_reporter",
    "Courtesy": "pytorch_memlab.courtesy",
    "info": "pytorch_memlab.sources.info",
    "diff": "pytorch_memlab.records.diff",
}

__all__ = sorted(_EXPORTS) + ["load_ipython_extension"]


def _require(torch: bool = True) -> None:
    """ImportError in one line if torch or the compiled tracer is missing."""
    from pytorch_memlab._install import missing_requirement
    problem = missing_requirement(torch)
    if problem is not None:
        raise ImportError(problem)


def __getattr__(name: str) -> Any:
    if name == "_tracer":  # `from pytorch_memlab import _tracer` before it is loaded
        _require(torch=False)
        return import_module("pytorch_memlab._tracer")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pytorch_memlab' has no attribute {name!r}")
    _require()
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext pytorch_memlab``: registers %mlrun / %%mlrun."""
    from pytorch_memlab.integrations.magics import load_ipython_extension as load
    load(ipython)
