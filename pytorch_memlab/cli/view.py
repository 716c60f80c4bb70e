"""``python -m pytorch_memlab view``: print a saved profile or a folder of
rank files, convert a profile, or write its HTML report.  Needs no torch."""
from __future__ import annotations

import argparse
import os
import sys
from typing import Optional

from .command import CommandError, Verb, option, output_option
from .stdout import print_tables


def view(path: str, output: Optional[str], hide_unrun: bool = False,
         curve: bool = False, by_call: bool = False) -> int:
    if os.path.isdir(path):
        return _view_ranks(path, output)
    if not os.path.exists(path):
        raise CommandError(f"{path}: no such file")
    from ..reports.saved_profile import load
    try:
        saved = load(path)
    except (OSError, ValueError, TypeError, KeyError) as exc:  # UnicodeDecodeError is a ValueError
        # One line, never a traceback: a file that is not a profile is a usage error.
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise CommandError(f"{path}: not a saved profile (expected a .json or .csv written by "
                           f"`run -o` or save()): {reason}") from None
    if output is None:
        if curve and path.lower().endswith(".csv"):
            raise CommandError(f"--curve {path}: a CSV profile keeps no curves, only each "
                               "line's figures; view the profile saved as .json")
        if curve:
            from ..reports.curve_text import curve_charts
            print_tables(lambda: print(curve_charts(saved.profile)))
        else:
            print_tables(lambda: saved.print_stats(by_call=by_call, hide_unrun=hide_unrun))
        return 0
    ext = os.path.splitext(output)[1].lower()
    if ext not in (".html", ".htm", ".json", ".csv"):
        raise CommandError(f"-o {output!r}: the file name must end in .html, .json or .csv")
    try:
        if ext in (".html", ".htm"):
            from ..html_report import write_report
            write_report(saved.to_dict(), output, hide_unrun=hide_unrun)
        else:
            saved.save(output)
    except OSError as exc:
        raise CommandError(f"could not write {output}: {exc}") from None
    print(f"pytorch_memlab: wrote {output}", file=sys.stderr)
    return 0


def _view_ranks(folder: str, output: Optional[str]) -> int:
    """A folder of rank<R>.json files written under torchrun: the merged table,
    or with -o the per-rank HTML report."""
    from ..records.ranks import read_rank_dir
    from ..reports.rank_table import merged_text
    try:
        docs = read_rank_dir(folder)
    except (OSError, ValueError) as exc:
        raise CommandError(str(exc)) from None
    if output is None:
        text = merged_text(docs, folder)
        print_tables(lambda: print(text))
        return 0
    if os.path.splitext(output)[1].lower() not in (".html", ".htm"):
        raise CommandError(f"-o {output!r}: a folder of rank profiles becomes an .html report")
    from ..html_report import write_ranks_report
    try:
        write_ranks_report(docs, output)
    except OSError as exc:
        raise CommandError(f"could not write {output}: {exc}") from None
    print(f"pytorch_memlab: wrote {output}", file=sys.stderr)
    return 0


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
        return view(args.profile, args.output, args.hide_unrun, args.curve, args.by_call)
