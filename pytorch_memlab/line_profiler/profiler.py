"""LineProfiler: registered functions, the device tracers, and their results."""
from __future__ import annotations

import sys
import threading
import types
from typing import IO, TYPE_CHECKING, Any, Callable, Optional, Union

from .. import sources
from ..common.callables import compiled_by_dynamo, resolve_function
from ..common.devices import DeviceArg, add_follower, note_cpu_fallback, resolve_devices
from ..kinds import tagging
from ..records.columns import ColumnsArg, normalize_columns, pick_columns
from ..records.curve import DEFAULT_CURVE, CurveArg, check_curve
from ..records.meanings import Field
from ..records.model import VERSION_KEYS, FunctionRecord, Profile, TimelineRow
from ..records.selection import selects
from ..reports.display import ProfileDisplay, untraced_note
from ..sources import native
from . import postmortem
from .functions import CodesByIdentity, FunctionEntry
from .timeline import Timeline
from .tracer_tables import Raised, build_records
from .tracers import LiveTuple, TracerSet

if TYPE_CHECKING:
    import os

    import pandas

# Between decorated calls: with PyEval_SetTrace (<= 3.11, or forced) the hook
# slows the whole thread, so it is switched off when the last call returns.
# With sys.monitoring a tracer left on costs nothing on unregistered code,
# while switching it off and on around each call makes CPython re-instrument
# every code object that runs afterwards, so there it stays on until
# disable() or interpreter exit (all tracers share one tool id).
PARK_BETWEEN_CALLS = native.MECHANISM == "monitoring"


class LineProfiler:
    """Per-line memory of the registered functions, on one or more devices.

    ``device``: 'cpu', 'cuda', 'cuda:N', N, a torch.device, 'all' (every visible
    GPU), or a list of these.  None (the default) reads the target GPU (see
    ``set_target_gpu``) and follows it; without CUDA it reads CPU tensor memory
    and says so once on stderr.  ``target_gpu=N`` is the old spelling of
    ``device=N``.  ``columns``: fields of ``torch.cuda.memory_stats()`` to record
    (default active and reserved bytes' peaks); count and net growth of active
    bytes are always recorded.  ``curve``: which call's line-by-line memory
    curve each function keeps (``record["curve"]``, drawn by the HTML report
    and ``display()``): "peak" (default: the call that reached the function's
    peak), "first", "last", a call number N >= 1, or None for none.

        with LineProfiler(func, device="cpu") as prof:
            func()
        prof.print_stats()
    """

    def __init__(self, *functions: Callable[..., Any], target_gpu: Optional[int] = None,
                 device: DeviceArg = None, columns: ColumnsArg = None,
                 curve: CurveArg = DEFAULT_CURVE) -> None:
        self.columns = normalize_columns(columns)
        self.curve = check_curve(curve)
        slots, self._fell_back = resolve_devices(device, target_gpu)
        self._tracers = TracerSet(slots, self.columns, self.curve)
        self._entries: list[FunctionEntry] = []
        self._raised: Raised = {}  # by id(code): see tracer_tables.Raised
        self._stopped: set[tuple[int, int]] = set()   # (id(code), line) marked by a signal
        self._lock = threading.RLock()
        self._calls = 0            # decorated calls running now, all threads
        self._depth = threading.local()   # .value: decorated calls on this thread
        self._explicit = False     # enable() was called by the user
        self._timeline = Timeline()   # filled by profile_every, one row per call
        self._printed: Optional[list[FunctionRecord]] = None   # see _rotate
        self._postmortem: Optional[tuple[types.CodeType, dict[str, Any]]] = None   # last OOM
        self._shut_down = False    # interpreter exit: decorated calls stay unprofiled
        self._called: dict[int, int] = {}   # decorated calls, per id(code)
        if any(slot.follows_target for slot in slots):
            add_follower(self)
        for func in functions:
            self.add_function(func)

    # ---- registration ------------------------------------------------------------

    def add_function(self, func: Callable[..., Any]) -> None:
        """Profile ``func``: a function, method (bound or not), staticmethod,
        classmethod, ``torch.nn.Module`` (its ``forward``) or a
        ``functools.wraps`` wrapper (the wrapped function)."""
        target = resolve_function(func)
        compiled = compiled_by_dynamo(func)
        with self._lock:
            # one code object is one record: a closure re-created (and
            # decorated) on each call of its outer function is registered once.
            # By identity: the same source in two files (two copies of a
            # model) compiles to equal code objects, two functions all the same.
            for entry in self._entries:
                if entry.func is target or entry.has_code(target.__code__):
                    entry.compiled |= compiled
                    return
            entry = FunctionEntry(target)
            entry.compiled = compiled
            self._entries.append(entry)
            self._tracers.add_code(target.__code__)

    def add_code(self, code: types.CodeType, qualname: Optional[str] = None) -> None:
        """Profile the function that will be made from ``code``, before it
        exists: ``python -m pytorch_memlab run`` compiles a script, finds a
        function's code object among the constants and registers it here, so
        the function is profiled from its first call.  Its table is named
        ``qualname`` (default: ``co_qualname`` on 3.11+, the bare name before)."""
        if not isinstance(code, types.CodeType):
            raise TypeError(f"add_code takes a code object, not {type(code).__name__}")
        with self._lock:
            if any(entry.has_code(code) for entry in self._entries):
                return
            self._entries.append(FunctionEntry(None, code, qualname))
            self._tracers.add_code(code)

    def _refresh_codes(self) -> None:
        """Register code objects that replaced a function's ``__code__``."""
        for entry in self._entries:
            code = entry.new_code()
            if code is not None:
                self._tracers.add_code(code)

    @property
    def functions(self) -> list[types.FunctionType]:
        """The registered functions (not those registered by code object)."""
        return [entry.func for entry in self._entries if entry.func is not None]

    @property
    def devices(self) -> list[str]:
        """'cpu' / 'cuda:N' per column group; a following profiler's moves."""
        return self._tracers.labels()

    @property
    def enabled(self) -> bool:
        return self._tracers.enabled

    # ---- control -----------------------------------------------------------------

    def _start(self) -> None:
        self._refresh_codes()
        if self._fell_back:
            note_cpu_fallback()
        self._tracers.enable()
        postmortem.watch_cuda()   # reads an OOM's figures inside the failing allocation

    def enable(self) -> None:
        """Start profiling, in this thread and threads started from now on
        (on Python >= 3.12: every thread)."""
        with self._lock:
            self._start()
            self._explicit = True
            tagging.begin(self._tracers)

    def disable(self) -> None:
        """Stop profiling; lines still running are committed and no hook is
        left.  While a decorated call runs (``profile``) it stays on until the
        call returns."""
        with self._lock:
            self._explicit = False
            if self._calls == 0:
                tagging.end(self._tracers)
                self._tracers.disable()

    def __enter__(self) -> "LineProfiler":
        self.enable()
        return self

    def __exit__(self, exc_type: Any, exc: Optional[BaseException], tb: Any) -> None:
        if exc is not None:   # first: the tracer still follows the live allocations
            self._note_exception(exc)
        self.disable()

    def clear(self) -> None:
        """Forget every figure (functions stay registered)."""
        with self._lock:
            self._tracers.clear()
            self._raised.clear()
            self._stopped.clear()
            self._timeline.clear()
            self._called.clear()
            self._printed = None
            self._postmortem = None

    def _rotate(self) -> list[FunctionRecord]:
        """``profile_every`` printed a table: forget its figures but keep them
        for ``save`` until the next call runs, and keep the timeline.  Returns
        them (the training callbacks fold each step's into the fit's)."""
        with self._lock:
            records = self._printed = self.stats()
            self._tracers.clear(keep_calls=True)   # lines that grow every call stay known
            self._raised.clear()
            self._stopped.clear()
            self._postmortem = None
            self._called.clear()
            return records

    def _record_execution(self) -> None:
        """Append each device's active and reserved bytes to the timeline."""
        self._timeline.record(self._tracers.readings())

    @property
    def timeline(self) -> list[TimelineRow]:
        """Memory after each call of a ``profile_every`` function (see
        ``timeline``); empty for other profilers."""
        return self._timeline.rows()

    # Decorated calls turn the profiler on while any of them runs (any thread);
    # between calls it is switched off or stays on (see PARK_BETWEEN_CALLS).
    def _enter_call(self, code: Optional[types.CodeType] = None) -> None:
        with self._lock:
            if code is not None:
                self._called[id(code)] = self._called.get(id(code), 0) + 1
            if self._calls == 0 and not self.enabled and not self._shut_down:
                self._start()
            if self._calls == 0 and self.enabled:
                tagging.begin(self._tracers)
            self._calls += 1
        self._depth.value = getattr(self._depth, "value", 0) + 1

    def _in_outermost_call(self) -> bool:
        """Is the decorated call running on this thread its outermost one?"""
        return bool(getattr(self._depth, "value", 0) == 1)

    def _exit_call(self) -> bool:
        """True when this ends the outermost decorated call of this thread."""
        self._depth.value -= 1
        with self._lock:
            self._calls -= 1
            if self._calls == 0 and not self._explicit:
                tagging.end(self._tracers)
                if not PARK_BETWEEN_CALLS:
                    self._tracers.disable()
        return bool(self._depth.value == 0)

    def _shutdown(self) -> None:
        """Interpreter exit: off even if a decorated call is still running (a
        coroutine never finished), committing its open lines; a generator
        closed later in the exit runs unprofiled (imports fail by then)."""
        with self._lock:
            self._shut_down = True
            self._explicit = False
            tagging.end(self._tracers)
            self._tracers.disable()

    def _retarget(self, index: int) -> None:
        with self._lock:
            self._tracers.retarget(index)

    def _note_exception(self, exc: BaseException) -> None:
        """Mark, in every profiled frame it went through, the line ``exc`` left by;
        for an out-of-memory error, also keep its post-mortem (``postmortem``),
        read now, while the traceback's frames still hold the tensors."""
        codes = CodesByIdentity(code for entry in self._entries for code in entry.codes)
        failed_in = postmortem.innermost(exc, codes)
        if failed_in is not None and not postmortem.noted_before(exc, self):
            code = failed_in

            def live(device: str) -> Optional[LiveTuple]:
                return self._tracers.live_by_line(code, device)

            found = postmortem.capture(exc, live)
            if found is not None:
                self._postmortem = (failed_in, found)
        tb = exc.__traceback__
        while tb is not None:
            code = tb.tb_frame.f_code
            if code in codes:
                # a signal's mark stays: the exception is its handler's doing
                marks = self._raised.setdefault(id(code), {})
                if (id(code), tb.tb_lineno) not in self._stopped:
                    marks[tb.tb_lineno] = type(exc).__name__
            tb = tb.tb_next

    def _note_stop(self, frame: Optional[types.FrameType], name: str) -> None:
        """Mark, in every profiled frame of the stack that ``frame`` tops, the
        line that was running when ``name`` (a signal) stopped the program."""
        codes = CodesByIdentity(code for entry in self._entries for code in entry.codes)
        with self._lock:
            while frame is not None:
                if frame.f_code in codes and frame.f_lineno is not None:
                    self._raised.setdefault(id(frame.f_code), {})[frame.f_lineno] = name
                    self._stopped.add((id(frame.f_code), frame.f_lineno))
                frame = frame.f_back

    # ---- results -----------------------------------------------------------------

    def _selected(self, func: Any) -> list[FunctionEntry]:
        return [e for e in self._entries if selects(func, e.qualname, e.codes[0].co_filename,
                                                    e.codes)]

    def stats(self, func: Any = None, columns: ColumnsArg = None) -> list[FunctionRecord]:
        """One record per function and device (``records.model``; each reads
        as the documented dict, ``to_dict()`` gives it)."""
        return self._stats(func, columns, curves=True)

    def _stats(self, func: Any, columns: ColumnsArg, curves: bool) -> list[FunctionRecord]:
        """``stats``; ``curves=False`` leaves each record's curve out: a report
        that draws none need not pay for turning every point into a list."""
        with self._lock:
            self._refresh_codes()
            shown = pick_columns(columns, self.columns)
            entries = self._selected(func)
            if func is not None and not entries:
                raise ValueError(f"{func!r} is not a function of this profiler "
                                 f"(registered: {', '.join(e.qualname for e in self._entries)})")
            records = build_records(entries, self._tracers.labels(), self._tracers.stats(),
                                    self.columns, shown, self._raised,
                                    self._tracers.call_stats(),
                                    self._tracers.curves() if curves else (), self.curve,
                                    self._tracers.peaks())
            return postmortem.attach(records, self._postmortem)

    def _untraced_notes(self, entries: list[FunctionEntry],
                        records: list[FunctionRecord]) -> list[str]:
        """Why a function that ran, or was compiled, has no traced line."""
        traced = {(r.filename, r.first_line) for r in records if r.ran}
        notes = []
        for entry in entries:
            code = entry.codes[0]
            if (code.co_filename, code.co_firstlineno) in traced:
                continue
            calls = sum(self._called.get(id(c), 0) for c in entry.codes)
            if entry.compiled or calls:
                notes.append(untraced_note(entry.qualname, calls, entry.compiled))
        return notes

    def _meanings(self) -> dict[str, Field]:
        """Each recorded column's kind and unit, as its source declares them."""
        return {c: sources.field_meaning(c) for c in self.columns}

    def display(self, func: Any = None, columns: ColumnsArg = None,
                by_call: bool = False, hide_unrun: bool = False) -> ProfileDisplay:
        """A table of ``func`` (a function, a qualname, a list of them; None: all):
        HTML in notebooks (each function's curve above its table, built when
        first drawn), text with ``print``/``repr``.  ``by_call``: the first
        call's figures and the later calls' side by side; ``hide_unrun``:
        leave out the lines that never ran."""
        def profile(curves: bool) -> Profile:
            records = self._stats(func, columns, curves)
            with self._lock:
                notes = self._untraced_notes(self._selected(func), records)
            return Profile(records, list(self.columns), self.devices, notes=notes,
                           meanings=self._meanings())
        return ProfileDisplay(profile(False), by_call, hide_unrun, drawn=lambda: profile(True))

    def print_stats(self, func: Any = None, columns: ColumnsArg = None,
                    stream: Optional[IO[str]] = None, by_call: bool = False,
                    hide_unrun: bool = False) -> None:
        """Write the text table to ``stream`` (default: sys.stdout), then a
        blank line to keep tables apart; ``by_call`` and ``hide_unrun`` as
        for ``display``."""
        out = stream if stream is not None else sys.stdout
        out.write(repr(self.display(func, columns, by_call, hide_unrun)) + "\n")
        out.flush()

    # ---- export ------------------------------------------------------------------

    def _export_records(self) -> list[FunctionRecord]:
        records = self.stats()
        if self._printed is not None and not any(r.ran for r in records):
            return self._printed
        return records

    def to_profile(self) -> Profile:
        """Everything ``save`` writes, as one record (``records.model``)."""
        import platform
        from datetime import datetime, timezone

        import torch

        from .. import __version__
        versions = dict(zip(VERSION_KEYS, (__version__, str(torch.__version__),
                                           platform.python_version())))
        return Profile(self._export_records(), list(self.columns), self.devices,
                       self.timeline, versions=versions,
                       created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                       meanings=self._meanings())

    def to_dict(self) -> dict[str, Any]:
        """Everything ``save`` writes to JSON (the schema: ``records.document``)."""
        from ..records.document import to_document
        return to_document(self.to_profile())

    def save(self, path: Union[str, "os.PathLike[str]"], format: Optional[str] = None) -> None:
        """Write every function's figures, all recorded columns, to ``path``:
        JSON (``.json``, versioned schema, read back by ``pytorch_memlab.load``)
        or CSV (``.csv``, one row per source line); ``format`` ("json" or
        "csv") overrides the extension.  A ``profile_every`` function's
        profiler saves the figures since its last table, or that table's if no
        call ran since.  HTML: ``pytorch_memlab.html_report``."""
        from ..records import saved
        saved.save(self.to_profile(), path, format)

    def to_dataframe(self, func: Any = None, columns: ColumnsArg = None) -> "pandas.DataFrame":
        """One row per (function, device, source line); needs pandas."""
        from ..records.dataframe import dataframe
        return dataframe(self.stats(func, columns))
