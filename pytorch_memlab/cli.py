"""``python -m pytorch_memlab run`` and ``view``: profile a script or module
without editing it, and turn a saved profile into a report.

``run`` registers each ``-f FUNC`` before the program starts (see
``_codefind`` for how), runs the program as ``__main__`` with its own
``sys.argv``, and when it ends, however it ends, prints the tables and writes
``-o`` / ``--html``.  Its exit status is the program's: the code of a
``SystemExit``, 1 after an uncaught exception (whose traceback is printed),
130 after ``KeyboardInterrupt``.  Without ``-f``, every function defined in
the script (or ``-m`` module) is profiled.
"""
from __future__ import annotations

import argparse
import builtins
import importlib.machinery
import os
import sys
import threading
import traceback
import types
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from . import _codefind

USAGE_ERROR = 2


class RunError(Exception):
    """A problem found before the program starts: message and exit status."""

    def __init__(self, message: str, status: int = USAGE_ERROR) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class FuncSpec:
    """One ``-f``: a qualname in the main program, a file or a module."""
    raw: str
    kind: str                   # "main", "path" or "module"
    where: Optional[str]        # absolute path or module name
    qualname: str


def parse_func(raw: str) -> FuncSpec:
    where, sep, qualname = raw.rpartition(":")
    if not sep:
        return FuncSpec(raw, "main", None, raw)
    if not where or not qualname or qualname.startswith("\\"):
        raise RunError(f"-f {raw!r}: expected QUALNAME, path.py:QUALNAME or module:QUALNAME")
    if where.endswith((".py", ".pyw")) or "/" in where or os.sep in where:
        return FuncSpec(raw, "path", os.path.abspath(where), qualname)
    return FuncSpec(raw, "module", where, qualname)


# ---- the program to run ----------------------------------------------------------

@dataclass
class Program:
    """The script or ``-m`` module, compiled, with what it runs under."""
    code: types.CodeType
    argv: list[str]
    globals: dict[str, Any]
    path0: Optional[str]        # sys.path[0] while it runs (None: leave it)
    filename: str
    module: Optional[str]       # the -m name

    @classmethod
    def script(cls, path: str, args: Sequence[str]) -> "Program":
        filename = os.path.abspath(path)
        try:
            code = _codefind.compile_file(filename)
        except OSError as exc:
            raise RunError(f"can't open file {path!r}: {exc.strerror or exc}") from None
        except (SyntaxError, ValueError) as exc:
            text = "".join(traceback.format_exception_only(type(exc), exc)).rstrip()
            raise RunError(text, 1) from None
        env = {"__name__": "__main__", "__file__": filename, "__builtins__": builtins,
               "__package__": None, "__spec__": None, "__cached__": None, "__doc__": None,
               "__loader__": importlib.machinery.SourceFileLoader("__main__", filename)}
        return cls(code, [path] + list(args), env, os.path.dirname(filename), filename, None)

    @classmethod
    def module_main(cls, name: str, args: Sequence[str]) -> "Program":
        try:
            code, spec = _codefind.module_source_code(name)
            if spec.submodule_search_locations is not None:     # a package: its __main__
                name = name + ".__main__"
                code, spec = _codefind.module_source_code(name)
        except ImportError as exc:
            raise RunError(f"-m {name}: {exc}", 1) from None
        env = {"__name__": "__main__", "__file__": spec.origin, "__builtins__": builtins,
               "__package__": spec.parent, "__spec__": spec, "__loader__": spec.loader,
               "__cached__": spec.cached, "__doc__": None}
        return cls(code, [spec.origin or name] + list(args), env, None,
                   spec.origin or name, name)


# ---- registering the functions ---------------------------------------------------

class Registrar:
    """Resolves every ``-f`` to code objects and registers them, now or at import."""

    def __init__(self, profiler: Any, program: Program) -> None:
        self.profiler = profiler
        self.program = program
        self.main_tree = list(_codefind.iter_codes(program.code))
        self.by_name: dict[str, list[str]] = {}
        self.by_path: dict[str, list[str]] = {}
        self.pending: list[FuncSpec] = []       # registered at import time
        self.hook: Optional[_codefind.ImportHook] = None

    def register(self, qualname: str, code: types.CodeType) -> None:
        self.profiler.add_code(code, qualname=qualname)

    def _register_found(self, spec: FuncSpec, tree: Sequence[tuple[str, types.CodeType]],
                        where: str) -> None:
        found = _codefind.match(tree, spec.qualname)
        if not found:
            raise RunError(f"-f {spec.raw}: " + _codefind.not_found(spec.qualname, where, tree))
        for qualname, code in found:
            self.register(qualname, code)

    def _is_main(self, spec: FuncSpec) -> bool:
        if spec.kind == "main":
            return True
        if spec.kind == "path":
            return os.path.realpath(spec.where or "") == os.path.realpath(self.program.filename)
        return spec.where == self.program.module

    def add(self, spec: FuncSpec) -> None:
        if self._is_main(spec):
            self._register_found(spec, self.main_tree, self.program.filename)
        elif spec.kind == "path":
            self._add_path(spec)
        else:
            self._add_module(spec)

    def add_all_main(self) -> None:
        for qualname, code in self.main_tree:
            if _codefind.is_function_code(code):
                self.register(qualname, code)

    def _add_path(self, spec: FuncSpec) -> None:
        assert spec.where is not None
        loaded = _codefind.loaded_module_for(spec.where)
        if loaded is not None:
            self._register_found(spec, _codefind.loaded_codes(loaded), spec.where)
            return
        try:
            tree = list(_codefind.iter_codes(_codefind.compile_file(spec.where)))
        except OSError as exc:
            raise RunError(f"-f {spec.raw}: can't open file {spec.where!r}: "
                           f"{exc.strerror or exc}") from None
        except (SyntaxError, ValueError) as exc:
            raise RunError(f"-f {spec.raw}: {spec.where} does not compile: {exc}") from None
        if not _codefind.match(tree, spec.qualname):
            raise RunError(f"-f {spec.raw}: " + _codefind.not_found(spec.qualname, spec.where,
                                                                    tree))
        self.by_path.setdefault(os.path.realpath(spec.where), []).append(spec.qualname)
        self.pending.append(spec)

    def _add_module(self, spec: FuncSpec) -> None:
        name = spec.where
        assert name is not None
        if name not in sys.modules:
            try:
                code, _ = _codefind.module_source_code(name)   # may import its parents
            except ImportError as exc:
                raise RunError(f"-f {spec.raw}: {exc}") from None
            if name not in sys.modules:
                tree = list(_codefind.iter_codes(code))
                if not _codefind.match(tree, spec.qualname):
                    raise RunError(f"-f {spec.raw}: " + _codefind.not_found(
                        spec.qualname, f"module {name} ({code.co_filename})", tree))
                self.by_name.setdefault(name, []).append(spec.qualname)
                self.pending.append(spec)
                return
        module = sys.modules[name]
        self._register_found(spec, _codefind.loaded_codes(module),
                             f"module {name} ({getattr(module, '__file__', 'built-in')})")

    def install(self) -> None:
        if self.by_name or self.by_path:
            self.hook = _codefind.ImportHook(self.by_name, self.by_path, self.register,
                                             lambda text: print(f"pytorch_memlab run: {text}",
                                                                file=sys.stderr))
            self.hook.install()

    def uninstall(self) -> None:
        if self.hook is not None:
            self.hook.uninstall()

    def never_imported(self) -> list[str]:
        done = self.hook.done if self.hook is not None else set()
        missing = []
        for spec in self.pending:
            key = spec.where if spec.kind == "module" else os.path.realpath(spec.where or "")
            if key not in done:
                missing.append(spec.raw)
        return missing


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
    """The traceback from the program's own frames on, as Python prints it."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb)


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
    profiler.enable()
    try:
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
        profiler.disable()
        _finished_mains.append(main)
        sys.argv = saved[0]
        if saved[1] is not None and program.path0 is not None:
            sys.path[0] = saved[1]
        if saved[2] is not None:
            sys.modules["__main__"] = saved[2]
    if error is not None:
        profiler._note_exception(error)
        _print_traceback(error)
    return status, error


def _check_output(path: Optional[str], allowed: Sequence[str], option: str) -> None:
    if path is None:
        return
    ext = os.path.splitext(path)[1].lower()
    if ext not in allowed:
        raise RunError(f"{option} {path!r}: the file name must end in {' or '.join(allowed)}")


def _columns(values: Optional[Sequence[str]]) -> Optional[list[str]]:
    if not values:
        return None
    return [name.strip() for value in values for name in value.split(",") if name.strip()]


def run_command(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except RunError as exc:
        print(f"pytorch_memlab run: error: {exc}", file=sys.stderr)
        return exc.status


def _run(args: argparse.Namespace) -> int:
    from .distributed import rank_env
    ranked = rank_env()
    if ranked is None:
        _check_output(args.output, (".json", ".csv"), "-o")
    else:    # torchrun: -o names the folder of rank<R>.json files
        args.output = args.output or os.environ.get("PYTORCH_MEMLAB_OUT")
        if args.output and os.path.splitext(args.output)[1].lower() in (".json", ".csv"):
            raise RunError(f"-o {args.output!r}: under torchrun -o names a folder, where "
                           "each rank writes rank<R>.json")
        if args.device is None:
            args.device = ranked.device()
    _check_output(args.html, (".html", ".htm"), "--html")
    if args.module is not None:
        program = Program.module_main(args.module, args.args)
    else:
        program = Program.script(args.script, args.args)
    specs = [parse_func(raw) for raw in args.function or []]

    from .line_profiler import LineProfiler
    try:
        profiler = LineProfiler(device=args.device, columns=_columns(args.column))
    except (ValueError, TypeError) as exc:
        raise RunError(str(exc)) from None
    registrar = Registrar(profiler, program)
    if specs:
        for spec in specs:
            registrar.add(spec)
    else:
        registrar.add_all_main()

    reporter = None
    if ranked is not None:
        from .distributed import RankReporter
        status = None
        reporter = RankReporter(ranked, args.output,
                                lambda: _document(profiler, program, status),
                                lambda docs: _write_ranks_html(docs, args.html))
        reporter.install()
    registrar.install()
    try:
        status, _ = execute(program, profiler)
    finally:
        registrar.uninstall()
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
        from .html_report import write_ranks_report
        write_ranks_report(docs, path)
        print(f"pytorch_memlab: wrote {path}", file=sys.stderr)


def _report(profiler: Any, program: Program, status: int, args: argparse.Namespace) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    profiler.print_stats()
    if args.output is None and args.html is None:
        return
    from .records.document import from_document
    from .records.saved import save
    data = from_document(_document(profiler, program, status), "the profile")
    for path, write in ((args.output, save), (args.html, _write_html)):
        if path is None:
            continue
        try:
            write(data, path)
        except OSError as exc:
            print(f"pytorch_memlab run: could not write {path}: {exc}", file=sys.stderr)
        else:
            print(f"pytorch_memlab: wrote {path}", file=sys.stderr)


def _write_html(data: Any, path: str) -> None:
    from .html_report import write_report
    write_report(data, path)


# ---- view --------------------------------------------------------------------------

def view_command(args: argparse.Namespace) -> int:
    if os.path.isdir(args.profile):
        from .distributed import view_ranks
        return view_ranks(args.profile, args.output)
    from .line_profiler import load
    try:
        saved = load(args.profile)
    except (OSError, ValueError, TypeError, KeyError) as exc:  # UnicodeDecodeError is a ValueError
        # One line, never a traceback: a file that is not a profile is a usage error.
        reason = " ".join(str(exc).split()) or type(exc).__name__
        print(f"pytorch_memlab view: error: {args.profile}: not a saved profile "
              f"(expected a .json or .csv written by `run -o` or save()): {reason}",
              file=sys.stderr)
        return USAGE_ERROR
    if args.output is None:
        saved.print_stats()
        return 0
    ext = os.path.splitext(args.output)[1].lower()
    try:
        if ext in (".html", ".htm"):
            _write_html(saved.to_dict(), args.output)
        elif ext in (".json", ".csv"):
            saved.save(args.output)
        else:
            print(f"pytorch_memlab view: error: -o {args.output!r}: the file name must end "
                  "in .html, .json or .csv", file=sys.stderr)
            return USAGE_ERROR
    except OSError as exc:
        print(f"pytorch_memlab view: error: could not write {args.output}: {exc}",
              file=sys.stderr)
        return 1
    print(f"pytorch_memlab: wrote {args.output}", file=sys.stderr)
    return 0


# ---- the command line --------------------------------------------------------------

# run's options that take a value: their value is never the script
_VALUE_OPTIONS = {"-f", "--function", "-d", "--device", "-c", "--column", "-o", "--output",
                  "--html"}


def split_run_argv(tokens: Sequence[str]) -> tuple[list[str], list[str]]:
    """(run's own options up to the script or ``-m MODULE``, the program's
    arguments): everything after the script belongs to the program, as with
    ``python script.py ...``."""
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token == "--":   # the script follows, even if its name starts with "-"
            return list(tokens[:i + 2]), list(tokens[i + 2:])
        if token == "-m":
            return list(tokens[:i + 2]), list(tokens[i + 2:])
        if token.startswith("-m") and not token.startswith("--"):
            return list(tokens[:i + 1]), list(tokens[i + 1:])
        if token == "-" or not token.startswith("-"):
            return list(tokens[:i + 1]), list(tokens[i + 1:])
        i += 2 if token in _VALUE_OPTIONS else 1
    return list(tokens), []


def add_run_parser(commands: Any) -> argparse.ArgumentParser:
    run: argparse.ArgumentParser = commands.add_parser(
        "run", help="profile a script or module without editing it",
        usage="python -m pytorch_memlab run [-f FUNC]... [-d DEVICE] [-c COLUMN]... "
              "[-o OUT] [--html OUT.html] (script.py | -m module) [args...]",
        description="Run a Python script (or module) as __main__ with the line profiler on "
                    "for the functions named by -f (default: every function the script "
                    "defines); print the tables when it ends and write them to -o / --html. "
                    "Exits with the program's status.")
    run.add_argument("-f", "--function", action="append", metavar="FUNC",
                     help="a function to profile: QUALNAME (in the script), path.py:QUALNAME "
                          "or module:QUALNAME, e.g. train.py:Net.forward (repeatable)")
    run.add_argument("-d", "--device", default=None,
                     help="'cpu', 'cuda', 'cuda:N' or 'all' (default: the current GPU, "
                          "else CPU)")
    run.add_argument("-c", "--column", action="append", metavar="COLUMN",
                     help="a memory_stats() field to record, e.g. active_bytes.all.peak "
                          "(repeatable or comma-separated; default: active and reserved peaks)")
    run.add_argument("-o", "--output", metavar="OUT",
                     help="write the profile to OUT: .json (read back with pytorch_memlab.load "
                          "or `view`) or .csv")
    run.add_argument("--html", metavar="OUT.html", help="write the HTML report to OUT.html")
    run.add_argument("-m", dest="module", metavar="MODULE",
                     help="run a module as `python -m MODULE` does")
    run.add_argument("script", nargs="?", help="the script to run")
    return run


def add_view_parser(commands: Any) -> argparse.ArgumentParser:
    view: argparse.ArgumentParser = commands.add_parser(
        "view", help="print a saved profile, or write its HTML report",
        description="Print the tables of a profile saved as JSON or CSV, or with -o write "
                    "the HTML report (.html) or convert it (.json, .csv).")
    view.add_argument("profile", help="a .json or .csv file written by `run -o` or "
                                      "LineProfiler.save, or the folder of rank<R>.json "
                                      "files written under torchrun")
    view.add_argument("-o", "--output", metavar="OUT", help="report.html, or a .json / .csv")
    return view


def parse_run(parser: argparse.ArgumentParser, run: argparse.ArgumentParser,
              argv: Sequence[str]) -> argparse.Namespace:
    """``argv`` starts with "run"."""
    own, program_args = split_run_argv(argv[1:])
    args = parser.parse_args([argv[0]] + own)
    if (args.script is None) == (args.module is None):
        run.error("name one script, or -m MODULE")
    args.args = program_args
    return args
