"""What a decorated function's profiler does between calls.

With PyEval_SetTrace (Python <= 3.11, or forced) the hook slows the whole
thread (8x on unrelated code, measured), so it is switched off when the last
decorated call returns.  With sys.monitoring (3.12+) the opposite holds: a
tracer left on costs nothing on unregistered code, while switching it off and
on around each call makes CPython re-instrument every code object that runs
afterwards (+75 us per call with 300 unrelated functions a step, measured on
3.12).  So there the profiler stays on, "parked", until disabled or the
interpreter exits.  Each enabled tracer holds one sys.monitoring tool id and
only ids 2-5 are free for tools, so when an enable runs out of ids the idle
parked profilers are switched off and the enable is retried.
"""
from __future__ import annotations

import threading
import weakref
from typing import Protocol

from .. import _tracer

PARK_BETWEEN_CALLS = _tracer.MECHANISM == "monitoring"


class Parkable(Protocol):
    def _stop_if_idle(self) -> None: ...


_lock = threading.Lock()
_parked: "weakref.WeakSet[Parkable]" = weakref.WeakSet()


def park(profiler: Parkable) -> None:
    with _lock:
        _parked.add(profiler)


def unpark(profiler: Parkable) -> None:
    with _lock:
        _parked.discard(profiler)


def release_idle(keep: Parkable) -> bool:
    """Switch off every idle parked profiler but ``keep``; True if any was."""
    with _lock:
        others = [p for p in _parked if p is not keep]
        for p in others:
            _parked.discard(p)
    for p in others:
        p._stop_if_idle()
    return bool(others)
