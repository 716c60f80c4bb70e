"""What the training-framework callbacks share (``pytorch_memlab.lightning``,
``pytorch_memlab.transformers``): one ``LineProfiler`` over a training loop.

The framework owns the loop; its callback calls ``StepProfiler`` at the fit's
start, after each training step, at the end and on an error.  After each step
the profiler's figures are taken and forgotten (``LineProfiler._rotate``), so
that step's peak is known on its own, and folded (``step_fold``) into the
figures of the whole fit and of the current ``every_n_steps`` window: each
step is one call of the functions that ran in it, with the calls counted, the
first call apart from the later ones, the growth per call, and the peak of
the step that reached the highest.  The tables, the saved files and the HTML
report are made from the folded records with the package's own reporters;
under DDP the ranks' files and the merged table go through
``distributed.RankReporter``, as under torchrun.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from typing import IO, Any, Callable, NamedTuple, Optional, Sequence, Union

import torch

from ..common.devices import DeviceArg
from ..line_profiler.distributed import RankEnv, RankReporter
from ..line_profiler.profiler import LineProfiler
from ..records.model import FunctionRecord, Profile
from ..records.step_fold import Key, fold, key, renumber

PathArg = Union[str, "os.PathLike[str]"]
ACTIVE = "active_bytes.all.peak"
RESERVED = "reserved_bytes.all.peak"


class StepPeak(NamedTuple):
    """The peaks of live (active) and reserved bytes while the profiled
    functions ran in one training step, as their tables show them (the max
    over their lines)."""
    active_bytes: int
    reserved_bytes: int


def check_path(value: Optional[PathArg], argument: str, endings: Sequence[str],
               owner: str) -> Optional[str]:
    """``save=`` / ``html=``: None, or a path whose name ends in one of ``endings``."""
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{owner}: {argument} must be a path (str or os.PathLike) ending in "
                        f"{' or '.join(endings)}, or None; got {type(value).__name__}")
    path = os.fspath(value)
    if os.path.splitext(path)[1].lower() not in endings:
        raise ValueError(f"{owner}: {argument}={path!r}: the file name must end in "
                         f"{' or '.join(endings)}")
    return path


def check_every(value: Optional[int], owner: str) -> Optional[int]:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{owner}: every_n_steps must be an int >= 1 (print the tables "
                         f"every that many training steps) or None; got {value!r}")
    return value


FunctionsArg = Sequence[Union[str, Callable[..., Any], torch.nn.Module]]


class CallbackOptions:
    """The arguments both callbacks take, checked once when the callback is made."""

    def __init__(self, owner: str, functions: Union[FunctionsArg, str, Callable[..., Any]],
                 device: DeviceArg, every_n_steps: Optional[int], save: Optional[PathArg],
                 html: Optional[PathArg]) -> None:
        if isinstance(functions, (str, torch.nn.Module)) or callable(functions):
            functions = [functions]
        self.functions = list(functions)
        self.device = device
        self.every_n_steps = check_every(every_n_steps, owner)
        # distributed, save is a folder: its name is checked when the fit starts
        self.save = None if save is None else os.fspath(save)
        self.html = check_path(html, "html", (".html", ".htm"), owner)

    def resolve(self, owner: str, model: Any, holder: str) -> list[Callable[..., Any]]:
        """The callables to profile: each item as given, a string as the method
        of ``model`` it names (``holder`` says what ``model`` is, for errors)."""
        found: list[Callable[..., Any]] = []
        for item in self.functions:
            if isinstance(item, str):
                method = getattr(model, item, None)
                if not callable(method):
                    raise ValueError(f"{owner}: functions: {type(model).__name__} has no "
                                     f"method {item!r}; give a method name of {holder}, "
                                     "or a function, method or module")
                found.append(method)
            elif callable(item):
                found.append(item)
            else:
                raise TypeError(f"{owner}: functions: got {type(item).__name__}; expected "
                                f"method names of {holder}, functions, methods or modules")
        return found

    def _rank(self, owner: str, world_size: int, rank: int,
              local_rank: int) -> Optional[RankEnv]:
        """This process's rank in a distributed fit, else None (and then
        ``save`` must name a .json or .csv file)."""
        if world_size > 1:
            return RankEnv(rank, world_size, local_rank,
                           os.environ.get("TORCHELASTIC_RUN_ID", ""))
        check_path(self.save, "save", (".json", ".csv"), owner)
        return None

    def start(self, owner: str, world: tuple[int, int, int], device: DeviceArg,
              step_function: Callable[..., Any], functions: Sequence[Callable[..., Any]],
              framework: Sequence[str]) -> "StepProfiler":
        """The fit starts: profile it, on this callback's device if it names
        one.  ``world``: (world size, rank, local rank) as the framework
        tells them; ``framework``: its packages, whose functions' tables leave
        out the lines that never ran (a docstring, the branches of other
        setups)."""
        rank = self._rank(owner, *world)
        return StepProfiler(owner, self.device if self.device is not None else device,
                            step_function, functions, self.every_n_steps, self.save,
                            self.html, rank, framework=framework)


class StepProfiler:
    """One fit (``fit()``, ``train()``) profiled: made at its start, told about
    each step's end, finished or failed once."""

    def __init__(self, owner: str, device: DeviceArg, step_function: Callable[..., Any],
                 functions: Sequence[Callable[..., Any]], every_n_steps: Optional[int],
                 save: Optional[str], html: Optional[str], rank: Optional[RankEnv],
                 out: Optional[IO[str]] = None, framework: Sequence[str] = ()) -> None:
        self.owner = owner                 # "MemlabCallback", for messages
        self.rank = rank                   # under DDP: this process's rank
        self.every_n_steps = every_n_steps
        self.save, self.html = save, html
        self.out = out
        if rank is not None and save is not None and os.path.splitext(save)[1]:
            raise ValueError(f"{owner}: save={save!r}: under DDP save names a folder, "
                             "where each rank writes rank<R>.json")
        self.profiler = LineProfiler(device=device)
        self.profiler.add_function(step_function)
        for func in functions:
            self.profiler.add_function(func)
        self._meanings = self.profiler._meanings()
        self.framework_tables = {entry.qualname for entry in self.profiler._entries
                                 if entry.func is not None
                                 and entry.func.__module__.split(".")[0] in framework}
        self.fit: dict[Key, FunctionRecord] = {}       # every step so far
        self._calls: dict[Key, int] = {}               # each function's calls so far
        self.window: dict[Key, FunctionRecord] = {}    # since the last every_n table
        self.steps = 0
        self.window_start = 1
        self.peaks: list[StepPeak] = []                # one per step, in order
        # with each of peaks: the kinds at the highest peak of a profiled function
        # in that step ({kind: bytes}; {} where not known)
        self.kinds: list[dict[str, int]] = []
        self.done = False
        self.loose_postmortem: Optional[dict[str, Any]] = None   # see fail()
        self.profiler.enable()

    # ---- during the fit ------------------------------------------------------

    def _take(self) -> list[FunctionRecord]:
        """The figures since the last take, which the profiler then forgets."""
        records = []
        for record in self.profiler._rotate():
            before = self._calls.get(key(record), 0)
            records.append(renumber(record, before))
            self._calls[key(record)] = record.calls or before
        fold(self.fit, records, self._meanings)
        fold(self.window, records, self._meanings)
        return records

    def _step_peak(self, records: Sequence[FunctionRecord]) -> Optional[StepPeak]:
        """The highest line figures of every profiled function in one step, on
        the first device (the one training runs on); None if none ran."""
        device = self.profiler.devices[0]
        lines = [line for record in records if record.device == device
                 for line in record.lines if line.ran]
        if not lines:
            return None
        return StepPeak(max(line.figures.get(ACTIVE) or 0 for line in lines),
                        max(line.figures.get(RESERVED) or 0 for line in lines))

    def _step_kinds(self, records: Sequence[FunctionRecord]) -> dict[str, int]:
        """``by_kind`` of the highest peak of the profiled functions in one
        step, on the first device; {} where none is known."""
        device = self.profiler.devices[0]
        peaks = [r.peak for r in records
                 if r.device == device and r.peak is not None and r.peak.get("by_kind")]
        return dict(max(peaks, key=lambda p: p["bytes"])["by_kind"]) if peaks else {}

    def end_step(self) -> Optional[StepPeak]:
        """A training step ended: its peak (None if no profiled function ran,
        or once the fit ended), and every ``every_n_steps`` the tables of
        those steps."""
        if self.done:
            return None
        self.profiler._record_execution()      # the timeline: memory after each step
        records = self._take()
        peak = self._step_peak(records)
        self.steps += 1
        if peak is not None:
            self.peaks.append(peak)
            self.kinds.append(self._step_kinds(records))
        if self.every_n_steps is not None and self.steps % self.every_n_steps == 0:
            if self.rank is None or self.rank.rank == 0:
                self._print(self.window, f"training steps {self.window_start}-{self.steps}")
            self.window = {}
            self.window_start = self.steps + 1
        return peak

    # ---- the end ---------------------------------------------------------------

    def profile(self) -> Profile:
        """The whole fit so far, as ``LineProfiler.save`` would write it."""
        return dataclasses.replace(self.profiler.to_profile(), functions=list(self.fit.values()))

    def _print(self, records: dict[Key, FunctionRecord], what: str) -> None:
        from ..reports.base import reporter_for
        out = self.out if self.out is not None else sys.stdout
        profile = dataclasses.replace(self.profile(), functions=list(records.values()))
        where = "" if self.rank is None else f", rank {self.rank.rank}"
        out.write(f"# pytorch_memlab {self.owner}: {what}{where}\n\n")
        out.write(reporter_for("text", hide_unrun=self.framework_tables).render(profile)
                  + "\n")
        out.flush()

    def _write_files(self) -> None:
        from ..html_report import write_report
        from ..records.saved import save
        profile = self.profile()
        if self.save is not None:
            save(profile, self.save)
            print(f"pytorch_memlab: wrote {self.save}", file=sys.stderr)
        if self.html is not None:
            # as printed: the framework's methods without their unrun lines
            write_report(profile, self.html, hide_unrun=self.framework_tables)
            print(f"pytorch_memlab: wrote {self.html}", file=sys.stderr)

    def _write_ranks_html(self, docs: list[dict[str, Any]]) -> None:
        if self.html is not None:
            from ..html_report import write_ranks_report
            write_ranks_report(docs, self.html)
            print(f"pytorch_memlab: wrote {self.html}", file=sys.stderr)

    def _print_loose_postmortem(self) -> None:
        if self.loose_postmortem is not None:
            from ..reports.postmortem_text import format_postmortem
            out = self.out if self.out is not None else sys.stdout
            out.write(format_postmortem(self.loose_postmortem,
                                        "the fit, outside the profiled functions") + "\n")
            out.flush()

    def _end(self, error: Optional[BaseException]) -> None:
        self.done = True
        self.profiler.disable()
        self._take()
        if self.rank is None:
            self._write_files()          # the files first: printing may fail
            what = f"{self.steps} training step{'s' * (self.steps != 1)}"
            if error is not None:
                what += f", then {type(error).__name__} in step {self.steps + 1}"
            self._print(self.fit, what)
            self._print_loose_postmortem()
            return
        self._print_loose_postmortem()
        from ..records.document import to_document
        reporter = RankReporter(self.rank, self.save, lambda: to_document(self.profile()),
                                self._write_ranks_html)
        sys.stdout.flush()
        reporter.finish(failed=error is not None)

    def finish(self) -> None:
        """The fit ended: files, then the tables (under DDP, rank 0's merged one)."""
        if not self.done:
            self._end(None)

    def fail(self, exc: BaseException) -> None:
        """An exception escapes the fit: mark the lines it left by and, for an
        out-of-memory error, keep its post-mortem (read now, while the
        traceback's frames still hold the tensors); then as ``finish``.  An
        out-of-memory error that passed through no profiled function gets its
        post-mortem printed after the tables, as the fit's (not saved: the
        files keep a post-mortem on the record of the function it escaped)."""
        if self.done:
            return
        from ..line_profiler import postmortem
        self.profiler._note_exception(exc)
        if self.profiler._postmortem is None:
            self.loose_postmortem = postmortem.capture(exc)
        self._end(exc)
