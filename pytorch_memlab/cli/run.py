"""``python -m pytorch_memlab run``: profile a script or module without
editing it.

``run`` registers each ``-f FUNC`` before the program starts (see
``find_functions`` for how), runs the program as ``__main__`` with its own
``sys.argv``, and when it ends, however it ends, prints the tables and writes
``-o`` / ``--html``.  Its exit status is the program's: the code of a
``SystemExit``, 1 after an uncaught exception (whose traceback is printed),
130 after ``KeyboardInterrupt``.  Without ``-f``, every function defined in
the script (or ``-m`` module) is profiled.
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import traceback
import types
from typing import Any, Optional, Sequence
from ..common.paths import cannot_write
from .command import CommandError, Verb, column_option, device_option, option, output_option
from .device_arg import check_device, note_cpu
from .program import Program
from .stdout import print_tables


# ---- running -----------------------------------------------------------------------

def _exit_status(code: Any) -> int:
    """What the interpreter makes of ``SystemExit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _print_traceback(exc: BaseException) -> None:
    """The traceback from the program's own frames on, as Python prints it:
    without the wrappers ``run`` put around the profiled functions, nor the
    signal handler that raised a Ctrl-C's KeyboardInterrupt (``signals``)."""
    from ..line_profiler import signals
    from ..line_profiler.wrapping import is_wrapper_code
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    kept = []
    while tb is not None:
        code = tb.tb_frame.f_code
        if not is_wrapper_code(code) and code.co_filename != signals.__file__:
            kept.append(tb)
        tb = tb.tb_next
    shown: Optional[types.TracebackType] = None
    for old in reversed(kept):
        shown = types.TracebackType(shown, old.tb_frame, old.tb_lasti, old.tb_lineno)
    traceback.print_exception(type(exc), exc, shown)


def _join_threads() -> None:
    """Wait for the program's non-daemon threads, as the interpreter would."""
    while True:
        others = [t for t in threading.enumerate()
                  if t is not threading.current_thread() and not t.daemon and t.is_alive()]
        if not others:
            return
        for thread in others:
            thread.join()


_finished_mains: list[types.ModuleType] = []   # keep the program's globals alive


def execute(program: Program, profiler: Any) -> tuple[int, Optional[BaseException]]:
    """Run the program as __main__ with the profiler on: (status, exception)."""
    main = types.ModuleType("__main__")
    main.__dict__.update(program.globals)
    saved = (sys.argv, sys.path[0] if sys.path else None, sys.modules.get("__main__"))
    sys.argv = list(program.argv)
    if program.path0 is not None and sys.path:
        sys.path[0] = program.path0
    sys.modules["__main__"] = main
    status: int = 0
    error: Optional[BaseException] = None
    try:   # the tracer is on during profiled calls (see Registrar.install)
        try:
            exec(program.code, main.__dict__)
        finally:
            _join_threads()
    except SystemExit as exc:
        status = _exit_status(exc.code)
    except KeyboardInterrupt as exc:
        status, error = 130, exc
    except BaseException as exc:   # noqa: B902 -- the program's own error, reported below
        status, error = 1, exc
    finally:
        if error is not None:   # while the tracer still follows the live allocations
            profiler._note_exception(error)
        # off even if a profiled call still runs (a daemon thread, a coroutine
        # never finished): what runs after the program runs unprofiled
        profiler._shutdown()
        _finished_mains.append(main)
        sys.argv = saved[0]
        if saved[1] is not None and program.path0 is not None:
            sys.path[0] = saved[1]
        if saved[2] is not None:
            sys.modules["__main__"] = saved[2]
    if error is not None:
        _print_traceback(error)
    return status, error


def _check_output(path: Optional[str], allowed: Sequence[str], option: str) -> None:
    """Before the program runs: a file name we can write, of a kind we write."""
    if path is None:
        return
    ext = os.path.splitext(path)[1].lower()
    if ext not in allowed:
        raise CommandError(f"{option} {path!r}: the file name must end in {' or '.join(allowed)}")
    _check_writable(path, option)


def _check_writable(path: str, option: str) -> None:
    if cannot_write(path):
        raise CommandError(f"{option} {path}: cannot write there (no such folder, or no "
                       "permission)")


def _columns(values: Optional[Sequence[str]]) -> Optional[list[str]]:
    if not values:
        return None
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def run_program(args: argparse.Namespace) -> int:
    """``run``: the program's exit status; CommandError for bad usage."""
    from ..line_profiler.distributed import rank_env
    ranked = rank_env()
    if ranked is None:
        _check_output(args.output, (".json", ".csv"), "-o")
    else:    # torchrun: -o names the folder of rank<R>.json files
        args.output = args.output or os.environ.get("PYTORCH_MEMLAB_OUT")
        if args.output and os.path.splitext(args.output)[1].lower() in (".json", ".csv"):
            raise CommandError(f"-o {args.output!r}: under torchrun -o names a folder, where "
                           "each rank writes rank<R>.json")
        if args.device is None:
            args.device = ranked.device()
    _check_output(args.html, (".html", ".htm"), "--html")
    args.device, fell_back = check_device(args.device, allow_all=True)
    if args.module is not None:
        program = Program.module_main(args.module, args.args)
    else:
        program = Program.script(args.script, args.args)
    from .register import Registrar, parse_func   # wraps functions: imports the profiler
    specs = [parse_func(raw) for raw in args.function or []]

    from ..line_profiler import LineProfiler
    try:
        profiler = LineProfiler(device=args.device, columns=_columns(args.column))
    except (ValueError, TypeError) as exc:
        raise CommandError(str(exc)) from None
    registrar = Registrar(profiler, program)
    if specs:
        for spec in specs:
            registrar.add(spec)
    elif not registrar.add_all_main():
        what = f"-m {program.module}" if program.module is not None else program.argv[0]
        raise CommandError(f"{what} defines no function, and module-level code is not "
                           "profiled: name the functions to profile with -f FUNC")

    reporter = None
    ending: dict[str, Optional[int]] = {"status": None}   # the status the files record
    if ranked is not None:
        from ..line_profiler.distributed import RankReporter
        reporter = RankReporter(ranked, args.output,
                                lambda: _document(profiler, program, ending["status"]),
                                lambda docs: _write_ranks_html(docs, args.html))
        reporter.install()

    def write_stopped(signum: int, frame: Optional[types.FrameType]) -> None:
        """SIGTERM / SIGINT: the files now, the line that was running marked."""
        from ..line_profiler.signals import signal_name
        profiler._note_stop(frame, signal_name(signum))
        ending["status"] = 128 + signum      # as a shell reports a signal's end
        if reporter is not None:
            reporter.write_file()
        else:
            _write_files(profiler, program, ending["status"], args, quiet=True)

    from ..line_profiler.signals import StopWriter
    stop_writer = StopWriter(write_stopped, lambda: [profiler._lock])
    if ranked is not None or args.output is not None or args.html is not None:
        stop_writer.install()
    if fell_back:     # the one note, once every usage error had its chance
        note_cpu()
    registrar.install()
    try:
        status, _ = execute(program, profiler)
    finally:
        registrar.uninstall()
        stop_writer.uninstall()
    ending["status"] = status
    for raw in registrar.never_imported():
        print(f"pytorch_memlab run: -f {raw}: its module was never imported, "
              "so nothing of it was profiled", file=sys.stderr)
    if reporter is not None:
        sys.stdout.flush()
        reporter.finish(failed=status != 0)
        return status
    _report(profiler, program, status, args)
    return status


def _document(profiler: Any, program: Program, status: Optional[int]) -> dict[str, Any]:
    data: dict[str, Any] = profiler.to_dict()
    data["run"] = {"argv": list(program.argv), "module": program.module,
                   "exit_status": status}
    return data


def _write_ranks_html(docs: list[dict[str, Any]], path: Optional[str]) -> None:
    if path is not None:
        from ..html_report import write_ranks_report
        write_ranks_report(docs, path)
        print(f"pytorch_memlab: wrote {path}", file=sys.stderr)


def _report(profiler: Any, program: Program, status: int, args: argparse.Namespace) -> None:
    """The files first, then the tables: a reader that left (``| head``) or a
    Ctrl-C that stopped it must not cost the files."""
    _write_files(profiler, program, status, args)
    sys.stderr.flush()
    if profiler.stats():     # none: every -f's module went unimported, as said above
        print_tables(profiler.print_stats)


def _write_files(profiler: Any, program: Program, status: Optional[int],
                 args: argparse.Namespace, quiet: bool = False) -> None:
    if args.output is not None or args.html is not None:
        from ..records.document import from_document
        from ..records.saved import save
        data = from_document(_document(profiler, program, status), "the profile")
        for path, write in ((args.output, save), (args.html, _write_html)):
            if path is None:
                continue
            try:
                _replace(write, data, path)
            except OSError as exc:
                print(f"pytorch_memlab run: could not write {path}: {exc}", file=sys.stderr)
            else:
                if not quiet:
                    print(f"pytorch_memlab: wrote {path}", file=sys.stderr)


def _replace(write: Any, data: Any, path: str) -> None:
    """``write(data, path)`` through a temporary file of its own (``write_replacing``)."""
    from ..common.files import write_replacing
    write_replacing(path, lambda tmp: write(data, tmp))


def _write_html(data: Any, path: str) -> None:
    from ..html_report import write_report
    write_report(data, path)


class RunCommand(Verb):
    name = "run"
    help = "profile a script or module without editing it"
    needs_torch = True
    usage = ("python -m pytorch_memlab run [-f FUNC]... [-d DEVICE] [-c COLUMN]... "
             "[-o OUT] [--html OUT.html] (script.py | -m module) [args...]")
    description = (
        "Run a Python script (or module) as __main__ with the line profiler on for the "
        "functions named by -f (default: every function the script defines); print the "
        "tables when it ends and write them to -o / --html. Exits with the program's "
        "status.")
    options = (
        option("-f", "--function", action="append", metavar="FUNC",
               help="a function to profile: QUALNAME (in the script), path.py:QUALNAME or "
                    "module:QUALNAME, e.g. train.py:Net.forward (repeatable)"),
        device_option("'cpu', 'cuda', 'cuda:N' or 'all' (default: the current GPU, else CPU)"),
        column_option("a memory_stats() field to record, e.g. active_bytes.all.peak "
                      "(repeatable or comma-separated; default: active and reserved peaks)"),
        output_option("OUT", "write the profile to OUT: .json (read back with "
                             "pytorch_memlab.load or `view`) or .csv"),
        option("--html", metavar="OUT.html", help="write the HTML report to OUT.html"),
        # As with ``python``, whatever follows the script (or -m MODULE) is the
        # program's own, options included: hence the two REMAINDERs.  Checked to
        # split alike on the argparse of 3.11, 3.12 and 3.13 (test_cli.py).
        option("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE",
               help="run a module as `python -m MODULE` does"),
        option("program", nargs=argparse.REMAINDER, metavar="script.py [args...]",
               help="the script to run, and its arguments"),
    )

    def complete(self, parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
        """Sets ``args.module`` (a name or None), ``args.script`` (a path or
        None) and ``args.args`` (the program's)."""
        program: list[str] = args.program
        if program[:1] == ["--"]:   # `run [options] -- -odd.py`: REMAINDER keeps the "--"
            program = program[1:]
        if args.module is not None:
            if not args.module:
                parser.error("-m needs a MODULE")
            # ``-mpkg a``: argparse gives -m only its attached value; the rest is the program's
            args.module, args.script, args.args = args.module[0], None, args.module[1:] + program
        elif program:
            args.script, args.args = program[0], program[1:]
        else:
            parser.error("name one script, or -m MODULE")

    def run(self, args: argparse.Namespace) -> int:
        return run_program(args)
