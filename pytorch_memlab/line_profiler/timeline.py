"""Memory after each call of a ``profile_every`` function: the timeline.

After every outermost call, one reading per device the profiler reads:
``{"call": n, "device": "cuda:0", "active_bytes": ..., "reserved_bytes": ...}``
(the allocator's ``active_bytes.all.current`` and ``reserved_bytes.all.current``;
on the CPU, live and held CPU tensor bytes).  A reading is one call into the
torch shim (or the Python fallback source), microseconds.  Only the last
``TIMELINE_LIMIT`` rows are kept, so memory stays bounded however long the
program runs.
"""
from __future__ import annotations

import warnings
from collections import deque
from typing import TYPE_CHECKING, Callable, Optional, Sequence, cast

from .. import sources
from ..sources import native
from ..records.model import TimelineRow

if TYPE_CHECKING:
    from .._tracer import PythonSource

TIMELINE_LIMIT = 10_000
ACTIVE_FIELD = "active_bytes.all.current"
RESERVED_FIELD = "reserved_bytes.all.current"

Reader = Callable[[int], tuple[int, int]]
_readers: dict[str, Reader] = {}


def _make_reader(kind: str) -> Reader:
    choice = sources.choose(kind)
    source = sources.accept(choice)
    if choice.compiled:
        sample: Callable[[int], Sequence[int]] = lambda device: native.sample(kind, device)
        fields = list(sources.source_fields(kind))
    else:
        source = cast("PythonSource", source)
        sample = source.sample
        fields = list(source.fields)
    active, reserved = fields.index(ACTIVE_FIELD), fields.index(RESERVED_FIELD)

    def read(device: int) -> tuple[int, int]:
        values = sample(device)
        return int(values[active]), int(values[reserved])
    return read


def read_totals(kind: str, device: int) -> tuple[int, int]:
    """(active bytes, reserved bytes) of ``device`` now."""
    reader = _readers.get(kind)
    if reader is None:
        reader = _readers[kind] = _make_reader(kind)
    return reader(device)


class Timeline:
    """The readings after each call, oldest first, at most ``limit`` rows."""

    def __init__(self, limit: int = TIMELINE_LIMIT) -> None:
        self._rows: deque[TimelineRow] = deque(maxlen=limit)
        self._calls = 0
        self._failed: Optional[BaseException] = None

    def record(self, devices: Sequence[tuple[str, str, int]]) -> None:
        """One row per (label, kind, index); never raises into the caller."""
        self._calls += 1
        for label, kind, index in devices:
            try:
                active, reserved = read_totals(kind, index)
            except Exception as exc:   # a device that cannot be read: say so once
                if self._failed is None:
                    self._failed = exc
                    warnings.warn(f"pytorch_memlab: no timeline for {label}: {exc}",
                                  RuntimeWarning, stacklevel=2)
                continue
            self._rows.append({"call": self._calls, "device": label,
                               "active_bytes": active, "reserved_bytes": reserved})

    def rows(self) -> list[TimelineRow]:
        return [TimelineRow(**row) for row in self._rows]

    def clear(self) -> None:
        self._rows.clear()
        self._calls = 0
