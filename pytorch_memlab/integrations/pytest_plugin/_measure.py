"""One test call under a LineProfiler: the baseline before it, the figures of
its lines (and of its callees'), and what is still alive after it.

Imported only when a test is measured: this is where torch comes in.
"""
from __future__ import annotations

import gc
import types
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence

import torch

from ...line_profiler import LineProfiler
from ...records.model import FunctionRecord
from ...line_profiler.timeline import read_totals

PEAK = "active_bytes.all.peak"


def resolve_device(device: Optional[str]) -> str:
    """'cpu' or 'cuda:N'; None is the current CUDA device, else the CPU.
    The caller has checked that CUDA is there when ``device`` names it."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        return f"cuda:{torch.cuda.current_device()}"
    return device


def count_cpu_from_now() -> None:
    """Install the CPU allocator's counting wrapper (once per process) before
    the test's fixtures run, so that what they allocate is counted as live
    at the start (memory allocated before the wrapper is never counted)."""
    from ... import sources
    from ...mem_reporter.collect import cpu_storages
    sources.get_source("cpu")           # RuntimeError naming the fix without the shim
    sources.prepare("cpu", 0, cpu_storages)


def _kind_index(label: str) -> tuple[str, int]:
    return ("cpu", 0) if label == "cpu" else ("cuda", int(label.split(":")[1]))


def module_functions(module: Optional[types.ModuleType]) -> list[Any]:
    """Functions and methods defined in ``module``: the test's helpers, so that
    a peak reached inside one shows that helper's lines too."""
    if module is None:
        return []
    found: list[Any] = []
    for obj in list(vars(module).values()):
        if getattr(obj, "__module__", None) != module.__name__:
            continue
        if isinstance(obj, types.FunctionType):
            found.append(obj)
        elif isinstance(obj, type):
            for attr in list(vars(obj).values()):
                if isinstance(attr, (staticmethod, classmethod)):
                    attr = attr.__func__
                if isinstance(attr, types.FunctionType):
                    found.append(attr)
    return found


@dataclass
class DeviceResult:
    """What one device saw during the test."""
    device: str
    baseline: int                      # live bytes when the test started
    peak: int                          # highest live bytes during it, above baseline
    after: Optional[int]               # live bytes after return and gc.collect()
    test_records: list[FunctionRecord]   # the test function's table on this device
    callee_records: list[FunctionRecord]  # the other profiled functions that ran
    # The callees again, each call of theirs a call of its own (see Measured)
    per_call_records: list[FunctionRecord]

    @property
    def growth(self) -> int:
        return 0 if self.after is None else self.after - self.baseline


def record_peak(record: FunctionRecord) -> Optional[int]:
    values = [line[PEAK] for line in record["lines"] if line["count"] and line[PEAK] is not None]
    return max(values) if values else None


class Measured:
    """Profiles ``test`` (and ``callees``) on ``devices`` for one call."""

    def __init__(self, test: Any, callees: Iterable[Any], devices: Sequence[str],
                 collect: bool) -> None:
        self.test = test
        self.devices = list(dict.fromkeys(devices))
        self.collect = collect          # gc.collect() around the call (leak check)
        self.profiler = LineProfiler(test, device=self.devices)
        # Under the test's profiler every callee call is part of the test's
        # one call, so no callee line could show growth per call; a leak check
        # (collect) profiles the callees once more on their own, where each of
        # their outermost calls is a call.
        self.per_call = LineProfiler(device=self.devices) if collect else None
        for func in callees:
            # (the module's functions include the test itself: not a callee)
            own = func is test or getattr(func, "__code__", None) is getattr(test, "__code__", 0)
            for profiler in (self.profiler, None if own else self.per_call):
                try:
                    if profiler is not None:
                        profiler.add_function(func)
                except TypeError:       # no Python code (a C function, a builtin)
                    continue
        self.baselines: dict[str, int] = {}
        self.after: dict[str, int] = {}

    def start(self) -> None:
        if self.collect:
            gc.collect()
        self.profiler.enable()
        if self.per_call is not None:
            self.per_call.enable()
        # after enable(): CUDA's allocator has statistics only once initialised
        self.baselines = {d: read_totals(*_kind_index(d))[0] for d in self.devices}

    def stop(self, exc: Optional[BaseException]) -> None:
        if self.per_call is not None:
            self.per_call.disable()
        self.profiler.__exit__(type(exc) if exc else None, exc, None)
        if self.collect and exc is None:
            gc.collect()
            self.after = {d: read_totals(*_kind_index(d))[0] for d in self.devices}

    def result(self, device: str) -> DeviceResult:
        label = self.profiler.devices[self.devices.index(device)]
        records = [r for r in self.profiler.stats() if r["device"] == label]
        mine = [r for r in self.profiler.stats(self.test) if r["device"] == label]
        keys = self.own_keys()
        others = [r for r in records if (r["filename"], r["first_line"]) not in keys
                  and record_peak(r) is not None]
        top = max([p for p in map(record_peak, mine) if p is not None], default=None)
        baseline = self.baselines.get(device, 0)
        peak = 0 if top is None else max(0, top - baseline)
        per_call = [] if self.per_call is None else [
            r for r in self.per_call.stats() if r["device"] == label and record_peak(r) is not None]
        return DeviceResult(device, baseline, peak, self.after.get(device), mine, others,
                            per_call)

    def own_keys(self) -> set[tuple[str, int]]:
        """(filename, first_line) of the test function's records."""
        return {(r["filename"], r["first_line"]) for r in self.profiler.stats(self.test)}

    def to_dict(self) -> dict[str, Any]:
        return self.profiler.to_dict()

    def test_dict(self, nodeid: str) -> dict[str, Any]:
        """The document --memlab-save keeps: each function named for the test."""
        from ._gate import named_document
        return named_document(nodeid, self.profiler.to_profile(), self.own_keys())
