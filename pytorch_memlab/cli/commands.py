"""The verbs of ``python -m pytorch_memlab``, one ``Command`` each, and
``COMMANDS``, the list the parser and the dispatch are made from.  A verb's
work lives in its own module (``demo``, ``run``, ``view``, ``info``),
imported only when it runs: ``demo``, ``run`` and ``info`` import torch, and
``view`` works without it."""
from __future__ import annotations

import argparse

from .command import Command


class Verb:
    """What a verb does not declare: no options, nothing to complete."""

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        pass

    def complete(self, parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
        pass


class DemoCommand(Verb):
    name = "demo"
    help = "profile a training step of a small built-in model"
    needs_torch = True

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("-d", "--device", default=None,
                            help="'cpu', 'cuda' or 'cuda:N' (default: CUDA if available, "
                                 "else CPU)")

    def run(self, args: argparse.Namespace) -> int:
        from .demo import run_demo
        run_demo(args.device)
        return 0


class RunCommand(Verb):
    name = "run"
    help = "profile a script or module without editing it"
    needs_torch = True

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.usage = ("python -m pytorch_memlab run [-f FUNC]... [-d DEVICE] [-c COLUMN]... "
                        "[-o OUT] [--html OUT.html] (script.py | -m module) [args...]")
        parser.description = (
            "Run a Python script (or module) as __main__ with the line profiler on for the "
            "functions named by -f (default: every function the script defines); print the "
            "tables when it ends and write them to -o / --html. Exits with the program's "
            "status.")
        parser.add_argument("-f", "--function", action="append", metavar="FUNC",
                            help="a function to profile: QUALNAME (in the script), "
                                 "path.py:QUALNAME or module:QUALNAME, e.g. "
                                 "train.py:Net.forward (repeatable)")
        parser.add_argument("-d", "--device", default=None,
                            help="'cpu', 'cuda', 'cuda:N' or 'all' (default: the current GPU, "
                                 "else CPU)")
        parser.add_argument("-c", "--column", action="append", metavar="COLUMN",
                            help="a memory_stats() field to record, e.g. active_bytes.all.peak "
                                 "(repeatable or comma-separated; default: active and reserved "
                                 "peaks)")
        parser.add_argument("-o", "--output", metavar="OUT",
                            help="write the profile to OUT: .json (read back with "
                                 "pytorch_memlab.load or `view`) or .csv")
        parser.add_argument("--html", metavar="OUT.html", help="write the HTML report to OUT.html")
        # As with ``python``, whatever follows the script (or -m MODULE) is the
        # program's own, options included: hence the two REMAINDERs.  Checked to
        # split alike on the argparse of 3.11, 3.12 and 3.13 (test_cli.py).
        parser.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE",
                            help="run a module as `python -m MODULE` does")
        parser.add_argument("program", nargs=argparse.REMAINDER, metavar="script.py [args...]",
                            help="the script to run, and its arguments")

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
        from .run import run_program
        return run_program(args)


class ViewCommand(Verb):
    name = "view"
    help = "print a saved profile, or write its HTML report"
    needs_torch = False

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.description = ("Print the tables of a profile saved as JSON or CSV, or with -o "
                              "write the HTML report (.html) or convert it (.json, .csv).")
        parser.add_argument("profile", help="a .json or .csv file written by `run -o` or "
                                            "LineProfiler.save, or the folder of rank<R>.json "
                                            "files written under torchrun")
        parser.add_argument("-o", "--output", metavar="OUT",
                            help="report.html, or a .json / .csv")
        parser.add_argument("--by-call", action="store_true",
                            help="print the first call's figures and the later calls' "
                                 "side by side")
        parser.add_argument("--hide-unrun", action="store_true",
                            help="leave out the lines that never ran (tables and HTML report)")
        parser.add_argument("--curve", action="store_true",
                            help="print each function's memory curve of one call as a text "
                                 "chart (at most 60 rows) instead of the tables")

    def run(self, args: argparse.Namespace) -> int:
        from .view import view
        return view(args.profile, args.output, args.hide_unrun, args.curve, args.by_call)


class InfoCommand(Verb):
    name = "info"
    help = "which memory source and reading path each device uses"
    needs_torch = True

    def run(self, args: argparse.Namespace) -> int:
        from ..source_info import format_info, info
        print(format_info(info()))
        return 0


COMMANDS: tuple[Command, ...] = (DemoCommand(), RunCommand(), ViewCommand(), InfoCommand())


class DiffCommand(Verb):
    name = "diff"
    help = "compare two saved profiles line by line"
    needs_torch = False

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.description = ("Compare two profiles (.json, .csv, or folders of rank files): "
                              "per function (by qualname and device) each line's old, new "
                              "and change, lines matched by their code text.")
        parser.add_argument("old", help="the earlier profile")
        parser.add_argument("new", help="the later profile")
        parser.add_argument("-c", "--column", action="append", metavar="COLUMN",
                            help="a column to compare (repeatable; default: all)")
        parser.add_argument("-o", "--output", metavar="OUT.html",
                            help="also write the comparison as HTML")
        parser.add_argument("--fail-over", metavar="SIZE|PCT",
                            help="exit 1 when a function's peak grew by more than this "
                                 "(e.g. 16MiB or 5%%)")

    def run(self, args: argparse.Namespace) -> int:
        from .diff import run_diff
        return run_diff(args)


COMMANDS = COMMANDS + (DiffCommand(),)
