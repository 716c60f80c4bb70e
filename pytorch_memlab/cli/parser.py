"""The command line's grammar: argparse parsers of ``run`` and ``view``."""
from __future__ import annotations

import argparse
from typing import Any, Sequence


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
