"""One C tracer per device a profiler reads, driven together."""
from __future__ import annotations

import types
from typing import Optional, Sequence

import torch

from .. import sources
from ..kinds import tagging
from ..mem_reporter.collect import cpu_storages
from ..sources import native
from ..records.columns import GROWTH_FIELD, check_columns
from ..records.curve import PEAK_FIELD, RESERVED_FIELD, CurveArg
from ..common.devices import DeviceSlot, current_target, label

# [(code, {lineno: (count, net_growth, values in column order)}), ...] in
# registration order: look-alike code objects (the same source in two files)
# compare equal, so a tracer's tables are told apart by identity, not by key
LineTable = dict[int, tuple[int, int, tuple[int, ...]]]
TracerStats = list[tuple[types.CodeType, LineTable]]
# Per outermost call (native Tracer.call_stats): (calls, first kept, {lineno: (first,
# later, least growth of one later call or None before the third call)}, (level when
# the first call began, (per column: when the later call that reached its highest began)))
Figures = tuple[int, int, tuple[int, ...]]
CallStarts = tuple[Optional[int], tuple[Optional[int], ...]]
CallTable = tuple[int, bool,
                  dict[int, tuple[Optional[Figures], Optional[Figures], Optional[int]]],
                  CallStarts]
CallStats = list[tuple[types.CodeType, CallTable]]
# [(code, (points, merged, call, calls, line events)), ...]: each function's
# kept curve; a point (lineno, active, reserved, peak, callee code or None)
CurvePoints = list[tuple[int, int, int, int, Optional[types.CodeType]]]
TracerCurves = list[tuple[types.CodeType, tuple[CurvePoints, int, int, int, int]]]
# [(code, (bytes, lineno, call, before_call, other_threads, {lineno: held}, before's
# tagged kinds, other threads', {lineno: a line's}, {module: bytes}, {module: its
# tagged kinds}) or None)], why
# there is no breakdown (None: there is), why its kinds and why its modules are not
# exact: native peaks_by_kind()
PeakTuple = tuple[int, int, int, int, int, dict[int, int], tuple[int, ...], tuple[int, ...],
                  dict[int, tuple[int, ...]], dict[int, int], dict[int, tuple[int, ...]]]
TracerPeaks = tuple[list[tuple[types.CodeType, Optional[PeakTuple]]], Optional[str],
                    Optional[str], Optional[str]]
# (bytes, call, before_call, other_threads, after_call, {lineno: live}): native
# Tracer.live_by_line(), what is alive now around a function's latest call; then
# native.live_kinds() beside it, or None
LiveKinds = Optional[tuple[tuple[tuple[int, ...], ...], dict[int, int]]]
LiveTuple = tuple[int, int, int, int, int, dict[int, int], LiveKinds]


class TracerSet:
    """The tracers of one profiler, in the order of its device slots."""

    def __init__(self, slots: Sequence[DeviceSlot], columns: tuple[str, ...],
                 curve: CurveArg = None) -> None:
        self.slots = list(slots)
        self.tracers: list[native.Tracer] = []
        for slot in self.slots:
            fields = sources.source_fields(slot.kind)
            where = f"the {slot.kind} memory source"
            check_columns(columns, fields, where)
            check_columns((GROWTH_FIELD,), fields, where)
            index = current_target() if slot.follows_target else slot.index
            assert index is not None
            # a curve reads its own fields whatever the columns: recorded
            # after them, so the columns keep their places in the tables
            extra = () if curve is None else tuple(
                f for f in (RESERVED_FIELD, PEAK_FIELD) if f not in columns and f in fields)
            read = tuple(columns) + extra
            pick = (RESERVED_FIELD if RESERVED_FIELD in read else None,
                    PEAK_FIELD if PEAK_FIELD in read else None)
            source = sources.get_source(slot.kind, read + (GROWTH_FIELD,))
            self.tracers.append(native.Tracer(source, index, read, growth_field=GROWTH_FIELD,
                                               curve=curve, curve_columns=pick))

    @property
    def enabled(self) -> bool:
        return any(t.enabled for t in self.tracers)

    def labels(self) -> list[str]:
        return [label(s, t.device) for s, t in zip(self.slots, self.tracers)]

    def readings(self) -> list[tuple[str, str, int]]:
        """(label, kind, device index) per tracer, for reading totals."""
        return [(label(s, t.device), s.kind, t.device) for s, t in zip(self.slots, self.tracers)]

    def add_code(self, code: types.CodeType) -> None:
        for tracer in self.tracers:
            tracer.add_code(code)

    def enable(self) -> None:
        """All or nothing: a device that cannot be read disables the others."""
        try:
            for slot, tracer in zip(self.slots, self.tracers):
                if slot.kind == "cpu":
                    # the first CPU profile: count the storages alive now too
                    sources.prepare("cpu", tracer.device, cpu_storages)
                if slot.kind == "cuda":
                    torch.cuda.init()  # type: ignore[no-untyped-call]  # torch: unannotated; the allocator's stats exist only after it
                    if slot.follows_target and tracer.device != current_target():
                        tracer.set_device(current_target())
                tracer.enable()
        except BaseException:
            self.disable()
            raise

    def disable(self) -> None:
        for tracer in self.tracers:
            tracer.disable()

    def clear(self, keep_calls: bool = False) -> None:
        for tracer in self.tracers:
            tracer.clear(keep_calls=keep_calls)

    def retarget(self, index: int) -> None:
        """The target GPU moved: following tracers read ``index`` from now on."""
        for slot, tracer in zip(self.slots, self.tracers):
            if slot.follows_target and tracer.device != index:
                tracer.set_device(index)

    def stats(self) -> list[TracerStats]:
        return [tracer.stats() for tracer in self.tracers]

    def call_stats(self) -> list[CallStats]:
        return [tracer.call_stats() for tracer in self.tracers]
    def curves(self) -> list[TracerCurves]:
        return [tracer.curves() for tracer in self.tracers]

    def peaks(self) -> list[TracerPeaks]:
        found = []
        for tracer in self.tracers:
            peaks, kinds_missing, modules_missing = native.peaks_by_kind(tracer)
            found.append((peaks, tracer.peak_unavailable, kinds_missing, modules_missing))
        return found

    def live_by_line(self, code: types.CodeType, device: str) -> Optional[LiveTuple]:
        """What is alive now on ``device`` (a label) around the latest call
        of ``code``; None where its tracer cannot tell (a polled source,
        memory ran out, the device changed, disabled)."""
        for slot, where, tracer in zip(self.slots, self.labels(), self.tracers):
            if where == device and tracer.peak_unavailable is None:
                sources.settle_blocks(slot.kind, tracer.device)
                found = tracer.live_by_line(code)
                if found is None:
                    return None
                kinds = native.live_kinds(tracer, code) if tagging.ENABLED else None
                return (*found, kinds)
        return None
