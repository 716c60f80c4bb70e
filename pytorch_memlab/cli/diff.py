"""``python -m pytorch_memlab diff OLD NEW``: needs no torch."""
from __future__ import annotations

import argparse
import gc
import os
import sys

from .command import CommandError, Verb, column_option, option, output_option
from .stdout import print_tables


def run_diff(args: argparse.Namespace) -> int:
    # Two large profiles make some 10^5 objects and no garbage: the cycle
    # collector's passes over them took a quarter of the command's time
    # (bench/bench_diff.py).  Anything left for it is collected after.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _run_diff(args)
    finally:
        if enabled:
            gc.enable()


def _run_diff(args: argparse.Namespace) -> int:
    from ..records.diff import diff, exceeded, parse_threshold
    from ..reports.diff_html import render_diff_html
    from ..reports.diff_text import render_diff_text
    threshold = None
    try:
        if args.fail_over is not None:
            threshold = parse_threshold(args.fail_over, "--fail-over")
        columns = [c.strip() for v in args.column or [] for c in v.split(",") if c.strip()]
        result = diff(args.old, args.new, columns or None)
    except (ValueError, TypeError) as exc:
        raise CommandError(" ".join(str(exc).split())) from None
    if args.output is not None:
        if os.path.splitext(args.output)[1].lower() not in (".html", ".htm"):
            raise CommandError(f"-o {args.output!r}: the file name must end in .html")
        try:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(render_diff_html(result))
        except OSError as exc:
            raise CommandError(f"could not write {args.output}: {exc}") from None
        print(f"pytorch_memlab: wrote {args.output}", file=sys.stderr)
    text = render_diff_text(result)
    print_tables(lambda: print(text, end=""))
    if threshold is not None:
        grown = exceeded(result, threshold)
        for fd in grown:
            print(f"pytorch_memlab diff: {fd.qualname} grew over --fail-over {args.fail_over}",
                  file=sys.stderr)
        # what NEW no longer measures cannot be held under the threshold
        gone = result.missing_from_new
        for item in gone:
            print(f"pytorch_memlab diff: {item.name} is missing from NEW "
                  f"(--fail-over {args.fail_over})", file=sys.stderr)
        return 1 if grown or gone else 0
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
        return run_diff(args)
