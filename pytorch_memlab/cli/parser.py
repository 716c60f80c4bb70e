"""The command line's grammar: one argparse parser, a subparser per verb."""
from __future__ import annotations

import argparse
from typing import Any, Sequence


def build_parser() -> tuple[argparse.ArgumentParser, argparse.ArgumentParser]:
    """(the whole parser, its ``run`` subparser)."""
    parser = argparse.ArgumentParser(prog="python -m pytorch_memlab",
                                     description="Per-line memory profiling for PyTorch.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="profile a training step of a small built-in model")
    demo.add_argument("-d", "--device", default=None,
                      help="'cpu', 'cuda' or 'cuda:N' (default: CUDA if available, else CPU)")
    run = add_run_parser(commands)
    add_view_parser(commands)
    commands.add_parser("info", help="which memory source and reading path each device uses")
    return parser, run


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
    # As with ``python``, whatever follows the script (or -m MODULE) is the
    # program's own, options included: hence the two REMAINDERs.  Checked to
    # split alike on the argparse of 3.11, 3.12 and 3.13 (test_cli.py).
    run.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE",
                     help="run a module as `python -m MODULE` does")
    run.add_argument("program", nargs=argparse.REMAINDER, metavar="script.py [args...]",
                     help="the script to run, and its arguments")
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
    """``argv`` starts with "run".  Sets ``args.module`` (a name or None),
    ``args.script`` (a path or None) and ``args.args`` (the program's)."""
    args = parser.parse_args(argv)
    program: list[str] = args.program
    if program[:1] == ["--"]:   # `run [options] -- -odd.py`: REMAINDER keeps the "--"
        program = program[1:]
    if args.module is not None:
        if not args.module:
            run.error("-m needs a MODULE")
        # ``-mpkg a``: argparse gives -m only its attached value; the rest is the program's
        args.module, args.script, args.args = args.module[0], None, args.module[1:] + program
    elif program:
        args.script, args.args = program[0], program[1:]
    else:
        run.error("name one script, or -m MODULE")
    return args
