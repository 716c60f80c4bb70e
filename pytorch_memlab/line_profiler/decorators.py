"""``profile``, ``profile_every`` and the global profilers behind them.

``profile`` registers functions with one global LineProfiler per (columns,
device) choice; its tables print at interpreter exit (figures are the max over
all runs), and also as soon as an exception (KeyboardInterrupt, CUDA OOM...)
escapes a profiled function.  ``profile_every(n)`` gives each function its own
profiler and prints (then forgets) its figures every n calls.
"""
from __future__ import annotations

import atexit
import sys
import threading
from typing import Any, Callable, Optional

from ..records.columns import ColumnsArg, normalize_columns
from ..common.devices import DeviceArg, resolve_devices
from .wrapping import wrap_any
from .distributed import decorator_reporter, rank_device
from .profiler import LineProfiler

_lock = threading.Lock()
_global: dict[tuple[Any, ...], LineProfiler] = {}
_unprinted: set[int] = set()       # id() of global profilers run since last printed
_atexit_registered = False


def _global_profiler(columns: ColumnsArg, device: DeviceArg) -> LineProfiler:
    """The shared profiler for this choice of columns and devices."""
    global _atexit_registered
    device = _rank_default(device)
    cols = normalize_columns(columns)
    slots, _ = resolve_devices(device, None)
    key = (cols, tuple(slots))
    with _lock:
        profiler = _global.get(key)
        if profiler is None:
            profiler = _global[key] = LineProfiler(device=device, columns=cols)
        if not _atexit_registered:
            _atexit_registered = True
            atexit.register(_print_at_exit)
    decorator_reporter(lambda: list(_global.values()))
    return profiler


def _rank_default(device: DeviceArg) -> DeviceArg:
    """Under torchrun each rank profiles its own device (LOCAL_RANK's GPU)."""
    return rank_device() if device is None else device


def _print(profiler: LineProfiler) -> None:
    _unprinted.discard(id(profiler))
    profiler.print_stats(stream=sys.stdout)


def _print_at_exit() -> None:
    reporter = decorator_reporter(lambda: list(_global.values()))
    if reporter is not None:     # torchrun: files, and one merged table on rank 0
        reporter.finish(failed=hasattr(sys, "last_value"))
        return
    for profiler in list(_global.values()):
        profiler._shutdown()    # no hook or tool id left for the rest of the exit
        if id(profiler) in _unprinted:
            try:
                _print(profiler)
            except Exception as exc:  # never a traceback from atexit
                print(f"pytorch_memlab: could not print the profile: {exc!r}",
                      file=sys.stderr)


def profile(func: Any = None, columns: ColumnsArg = None, *,
            device: DeviceArg = None) -> Any:
    """Profile ``func`` line by line; print the table when the interpreter exits
    (or when an exception escapes ``func``).

    Use bare (``@profile``) or with options (``@profile(columns=[...],
    device='cpu')``).  Works on functions, methods (``forward`` included),
    staticmethods, classmethods, generator and async functions.
    """
    if func is not None and not callable(func) and not isinstance(func, (staticmethod, classmethod)):
        func, columns = None, func      # @profile(("active_bytes.all.peak",))
    if device is not None:
        resolve_devices(device, None)   # a bad device= fails here, not at decoration

    def decorate(target: Any) -> Any:
        profiler = _global_profiler(columns, device)
        profiler.add_function(target)

        def after_call(exc: Optional[BaseException]) -> None:
            reporter = decorator_reporter(lambda: list(_global.values()))
            if exc is None:
                _unprinted.add(id(profiler))
            elif reporter is not None:
                reporter.write_file()     # now: the exception may kill the rank
            else:
                _print(profiler)

        def after_step() -> None:    # a generator yielded: its figures so far count
            _unprinted.add(id(profiler))

        return wrap_any(target, profiler, after_call, after_step)

    return decorate if func is None else decorate(func)


def profile_every(output_interval: int = 1, enable: bool = True,
                  columns: ColumnsArg = None, *, device: DeviceArg = None) -> Callable[[Any], Any]:
    """Print ``func``'s table every ``output_interval`` calls, with the figures
    of those calls only.  ``enable=False`` returns functions untouched.

    The decorated function's ``line_profiler`` also records, after every call,
    each device's active and reserved bytes (its ``timeline``), which
    ``line_profiler.save(...)`` writes and the HTML report draws."""
    if not isinstance(output_interval, int) or isinstance(output_interval, bool):
        raise TypeError(f"profile_every: output_interval must be an int >= 1 (print every "
                        f"that many calls), not {type(output_interval).__name__} "
                        f"{output_interval!r}")
    if output_interval < 1:
        raise ValueError(f"profile_every: output_interval must be an int >= 1 (print every "
                         f"that many calls), not {output_interval}")
    if device is not None:
        resolve_devices(device, None)   # a bad device= fails here, not at decoration

    def decorate(target: Any) -> Any:
        if not enable:
            return target
        profiler = LineProfiler(target, device=device, columns=columns)
        calls = [0]

        def after_call(exc: Optional[BaseException]) -> None:
            calls[0] += 1
            profiler._record_execution()
            if exc is not None or calls[0] % output_interval == 0:
                profiler.print_stats(stream=sys.stdout)
                profiler._rotate()

        wrapped = wrap_any(target, profiler, after_call)
        if not isinstance(wrapped, (staticmethod, classmethod)):
            wrapped.line_profiler = profiler
        return wrapped

    return decorate


def clear_global_line_profiler() -> None:
    """Forget the figures ``profile`` has gathered so far (functions stay profiled)."""
    with _lock:
        for profiler in _global.values():
            profiler.clear()
        _unprinted.clear()


def global_line_profiler(columns: ColumnsArg = None,
                         device: DeviceArg = None) -> Optional[LineProfiler]:
    """The profiler ``profile(columns=..., device=...)`` uses, if it exists yet."""
    slots, _ = resolve_devices(_rank_default(device), None)
    return _global.get((normalize_columns(columns), tuple(slots)))
