"""The verbs of ``python -m pytorch_memlab``, one ``Command`` each, and
``COMMANDS``, the list the parser and the dispatch are made from.  A verb
declares its options as data (``options``), made by the few option makers
below where two verbs share a flag.  A verb's work lives in its own module
(``demo``, ``run``, ``view``, ``info``, ``diff``), imported only when it runs:
``demo``, ``run`` and ``info`` import torch; ``view`` and ``diff`` work
without it."""
from __future__ import annotations

import argparse
from typing import Any, NamedTuple, Optional

from .command import Command


class Option(NamedTuple):
    """One ``parser.add_argument(*flags, **settings)``."""
    flags: tuple[str, ...]
    settings: dict[str, Any]


def option(*flags: str, **settings: Any) -> Option:
    return Option(flags, settings)


def device_option(accepted: str) -> Option:
    return option("-d", "--device", default=None, help=accepted)


def column_option(help: str) -> Option:
    return option("-c", "--column", action="append", metavar="COLUMN", help=help)


def output_option(metavar: str, help: str) -> Option:
    return option("-o", "--output", metavar=metavar, help=help)


class Verb:
    """A verb made of declarations: its subparser's usage, description and
    options; nothing to complete unless it says so."""
    usage: Optional[str] = None
    description: Optional[str] = None
    options: tuple[Option, ...] = ()

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        if self.usage is not None:
            parser.usage = self.usage
        if self.description is not None:
            parser.description = self.description
        for flags, settings in self.options:
            parser.add_argument(*flags, **settings)

    def complete(self, parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
        pass


class DemoCommand(Verb):
    name = "demo"
    help = "profile a training step of a small built-in model"
    needs_torch = True
    options = (device_option("'cpu', 'cuda' or 'cuda:N' (default: CUDA if available, else CPU)"),)

    def run(self, args: argparse.Namespace) -> int:
        from .demo import run_demo
        from .device_arg import check_device
        device, _ = check_device(args.device, allow_all=False)
        run_demo(device)
        return 0


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
        from .run import run_program
        return run_program(args)


class ViewCommand(Verb):
    name = "view"
    help = "print a saved profile, or write its HTML report"
    needs_torch = False
    description = ("Print the tables of a profile saved as JSON or CSV, or with -o write the "
                   "HTML report (.html) or convert it (.json, .csv).")
    options = (
        option("profile", help="a .json or .csv file written by `run -o` or LineProfiler.save, "
                               "or the folder of rank<R>.json files written under torchrun"),
        output_option("OUT", "report.html, or a .json / .csv"),
        option("--by-call", action="store_true",
               help="print the first call's figures and the later calls' side by side"),
        option("--hide-unrun", action="store_true",
               help="leave out the lines that never ran (tables and HTML report)"),
        option("--curve", action="store_true",
               help="print each function's memory curve of one call as a text chart (at most "
                    "60 rows) instead of the tables"),
    )

    def run(self, args: argparse.Namespace) -> int:
        from .view import view
        return view(args.profile, args.output, args.hide_unrun, args.curve, args.by_call)


class InfoCommand(Verb):
    name = "info"
    help = "which memory source and reading path each device uses"
    needs_torch = True

    def run(self, args: argparse.Namespace) -> int:
        from ..sources.info import format_info, info
        print(format_info(info()))
        return 0


class DiffCommand(Verb):
    name = "diff"
    help = "compare two saved profiles line by line"
    needs_torch = False
    description = ("Compare two profiles (.json, .csv, or folders of rank files): per function "
                   "(by qualname and device) each line's old, new and change, lines matched by "
                   "their code text.")
    options = (
        option("old", help="the earlier profile"),
        option("new", help="the later profile"),
        column_option("a column to compare (repeatable; default: all)"),
        output_option("OUT.html", "also write the comparison as HTML"),
        option("--fail-over", metavar="SIZE|PCT",
               help="exit 1 when a function's peak grew by more than this (e.g. 16MiB, 5%%, 0), "
                    "or a rank, device or function of OLD is missing from NEW"),
    )

    def run(self, args: argparse.Namespace) -> int:
        from .diff import run_diff
        return run_diff(args)


COMMANDS: tuple[Command, ...] = (DemoCommand(), RunCommand(), ViewCommand(), InfoCommand(),
                                 DiffCommand())
