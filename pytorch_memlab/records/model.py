"""The one record model: a profile holds functions, a function holds lines.

The live profiler (``LineProfiler.stats()``), a saved profile (``load``), the
text and HTML tables, the HTML report, the CLI and the pytest plugin all read
these records.  Each record also reads as the plain dict the API has always
documented (``record["lines"]``, ``line["active_bytes.all.peak"]``,
``line.get(column)``), so code written against that keeps working; ``to_dict``
gives the dict itself, which is what the JSON file holds.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, TypedDict

from .curve import CurveInfo, CurvePoint
from .meanings import Field, torch_meaning

# Net growth of active bytes: always recorded, shown after the chosen columns.
GROWTH = "net_growth"
# A line's figures per call (schema version 3), present once known.
CALL_KEYS = ("first_call", "later_calls", "growth_per_call")
# Bytes made while the line ran and still alive at its function's peak
# (schema version 4): a figure of every line of a push-source profile, shown
# after the columns; None where the source could not tell (polled).
HELD = "held_at_peak"
# What a function's record["peak"] holds (schema version 4).
PEAK_KEYS = ("bytes", "lineno", "call", "before_call", "other_threads")
# What a function's record["start_level"] holds (schema version 5): the active
# bytes when the first call began, and when the later call began that reached
# the later calls' highest active_bytes.all.peak.
START_KEYS = ("first_call", "later_calls")


class _ReadsAsDict(Mapping[str, Any]):
    """Read-only dict access to a record's documented keys, in their order."""

    def _keys(self) -> tuple[str, ...]:
        raise NotImplementedError

    def _value(self, key: str) -> Any:
        return getattr(self, key)

    def __getitem__(self, key: str) -> Any:
        if key not in self._keys():
            raise KeyError(key)
        return self._value(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def __repr__(self) -> str:   # as the documented dict prints
        return repr(dict(self.items()))


@dataclass(eq=False, repr=False)
class LineRecord(_ReadsAsDict):
    """One source line of one function on one device."""

    lineno: int
    code: str
    count: int = 0                    # executions; 0 for a line that never ran
    net_growth: Optional[int] = None  # summed change of active bytes; None: never ran
    figures: dict[str, Optional[int]] = field(default_factory=dict)   # column -> figure
    raised: Optional[str] = None      # the exception that left the function here
    # The first outermost call alone, and the calls after it ({each column,
    # "net_growth", "count"}), once a call ended; None: not recorded.
    first_call: Optional[dict[str, Optional[int]]] = None
    later_calls: Optional[dict[str, Optional[int]]] = None
    # After 3 or more calls, a line that ran: the least growth of the line one
    # call after the first kept, when each kept some, else 0.  None: not known.
    growth_per_call: Optional[int] = None
    # HELD: bytes it made still alive at the function's peak; None: not known.
    # has_held: the record carries the key (a profile of schema version >= 4),
    # even where the figure is None (a polled source).
    held_at_peak: Optional[int] = None
    has_held: bool = False

    @property
    def ran(self) -> bool:
        return self.net_growth is not None

    def figure(self, column: str) -> Optional[int]:
        """A column's figure, or net growth for ``GROWTH``, held bytes for ``HELD``."""
        if column == HELD:
            return self.held_at_peak
        return self.net_growth if column == GROWTH else self.figures.get(column)

    def _keys(self) -> tuple[str, ...]:
        extra = tuple(k for k in CALL_KEYS if getattr(self, k) is not None)
        held = (HELD,) if self.has_held else ()
        return ("lineno", "code", "count", GROWTH, *self.figures, *held, "raised") + extra

    def _value(self, key: str) -> Any:
        if key in self.figures:
            return self.figures[key]
        return getattr(self, key)

    def project(self, columns: Sequence[str]) -> LineRecord:
        """The same line with only ``columns`` (a missing one reads None)."""
        def part(calls: Optional[dict[str, Optional[int]]]) -> Optional[dict[str, Optional[int]]]:
            if calls is None:
                return None
            return {**{name: calls.get(name) for name in columns},
                    GROWTH: calls.get(GROWTH), "count": calls.get("count")}
        return LineRecord(self.lineno, self.code, self.count, self.net_growth,
                          {name: self.figures.get(name) for name in columns}, self.raised,
                          part(self.first_call), part(self.later_calls), self.growth_per_call,
                          self.held_at_peak, self.has_held)

    def to_dict(self) -> dict[str, Any]:
        data = dict(self.items())
        for key in ("first_call", "later_calls"):
            if key in data:
                data[key] = dict(data[key])
        return data


@dataclass(eq=False, repr=False)
class FunctionRecord(_ReadsAsDict):
    """Every source line of one function, as measured on one device."""

    qualname: str
    filename: str
    first_line: int
    device: str                       # 'cpu', 'cuda:N'
    columns: list[str]                # the figures each line has, in order
    lines: list[LineRecord]
    postmortem: Optional[dict[str, Any]] = None   # where an out-of-memory error escaped
    calls: Optional[int] = None       # outermost calls it ran in; None: not recorded
    curve: Optional[list[CurvePoint]] = None      # one call's line events (records.curve)
    curve_of: Optional[CurveInfo] = None          # which call that is, how it was kept
    # What was alive at its peak (PEAK_KEYS; its lines' HELD are the rest);
    # None: not known.  peak_missing: why not, for a live profile (not saved).
    peak: Optional[dict[str, Any]] = None
    peak_missing: Optional[str] = None
    # START_KEYS, each None where not known; None: none known.
    start_level: Optional[dict[str, Optional[int]]] = None

    @property
    def ran(self) -> bool:
        return any(line.ran for line in self.lines)

    @property
    def has_held(self) -> bool:
        """Its lines carry HELD (a figure, or None where it is not known)."""
        return any(line.has_held for line in self.lines)

    @property
    def key(self) -> tuple[str, int, str]:
        """Identifies the function across devices and ranks."""
        return (self.filename, self.first_line, self.qualname)

    def _keys(self) -> tuple[str, ...]:
        keys: tuple[str, ...] = ("qualname", "filename", "first_line", "device", "columns",
                                 "lines")
        if self.postmortem is not None:
            keys += ("postmortem",)
        if self.calls is not None:
            keys += ("calls",)
        if self.curve is not None:
            keys += ("curve", "curve_of")
        if self.peak is not None:
            keys += ("peak",)
        if self.start_level is not None:
            keys += ("start_level",)
        return keys

    def project(self, columns: Sequence[str]) -> FunctionRecord:
        """The same function with only ``columns``."""
        return FunctionRecord(self.qualname, self.filename, self.first_line, self.device,
                              list(columns), [line.project(columns) for line in self.lines],
                              self.postmortem, self.calls, self.curve, self.curve_of,
                              self.peak, self.peak_missing,
                              None if self.start_level is None else dict(self.start_level))

    def to_dict(self) -> dict[str, Any]:
        data = dict(self.items())
        data["columns"] = list(self.columns)
        data["lines"] = [line.to_dict() for line in self.lines]
        if self.curve is not None:
            data["curve"] = [list(point) for point in self.curve]
            data["curve_of"] = dict(self.curve_of or {})
        if self.peak is not None:
            data["peak"] = dict(self.peak)
            if "lines_by_kind" in self.peak:    # as JSON keys them
                data["peak"]["lines_by_kind"] = {str(lineno): dict(kinds) for lineno, kinds
                                                 in self.peak["lines_by_kind"].items()}
            if "modules_by_kind" in self.peak:
                data["peak"]["modules_by_kind"] = {name: dict(kinds) for name, kinds
                                                   in self.peak["modules_by_kind"].items()}
        if self.start_level is not None:
            data["start_level"] = dict(self.start_level)
        return data


class TimelineRow(TypedDict):
    """A device's memory after one call of a ``profile_every`` function."""

    call: int
    device: str
    active_bytes: int
    reserved_bytes: int


def column_unit(column: str, meanings: Mapping[str, Field]) -> str:
    """"bytes" or "count": net growth is in bytes, a column as ``meanings``
    record it, else as torch names it."""
    if column in (GROWTH, HELD):
        return "bytes"
    return (meanings.get(column) or torch_meaning(column)).unit


# The versions a saved profile records, in the order the file lists them.
VERSION_KEYS = ("pytorch_memlab_version", "torch_version", "python_version")


@dataclass(eq=False)
class Profile:
    """A whole profile: what ``LineProfiler.save`` writes and ``load`` reads."""

    functions: list[FunctionRecord]
    columns: list[str]                # every recorded column, in order
    devices: list[str]                # column groups, in order
    timeline: list[TimelineRow] = field(default_factory=list)
    run: Optional[dict[str, Any]] = None    # `python -m pytorch_memlab run`: argv, status
    versions: dict[str, str] = field(default_factory=dict)   # VERSION_KEYS that are known
    created: Optional[str] = None     # UTC, ISO 8601
    schema_version: int = 1           # the version a file was read from (writing: the current)
    extra: dict[str, Any] = field(default_factory=dict)   # keys kept as read (a rank's "rank")
    notes: list[str] = field(default_factory=list)   # shown under the tables, never saved
    # column -> its kind and unit: as the source declared them (the live
    # profiler asks the native boundary once), as the file recorded them, or
    # for a file that recorded none, by torch's naming rule when it was read
    meanings: dict[str, Field] = field(default_factory=dict)

    def meaning(self, column: str) -> Field:
        """Kind and unit of ``column``: the recorded one; for a column none was
        recorded for (a profile built by hand), torch's naming rule."""
        return self.meanings.get(column) or torch_meaning(column)

    def unit(self, column: str) -> str:
        """"bytes" or "count"; net growth and held bytes are in bytes."""
        return column_unit(column, self.meanings)

    def select(self, functions: Sequence[FunctionRecord]) -> Profile:
        """The same profile showing only ``functions``."""
        return Profile(list(functions), self.columns, self.devices, self.timeline, self.run,
                       self.versions, self.created, self.schema_version, self.extra,
                       self.notes, self.meanings)

