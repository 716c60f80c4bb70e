"""``python -m pytorch_memlab view``: print a saved profile, convert it, or
write its HTML report."""
from __future__ import annotations

import argparse
import os
import sys
from .program import USAGE_ERROR
from .run import _write_html
from .stdout import print_tables


# ---- view --------------------------------------------------------------------------

def view_command(args: argparse.Namespace) -> int:
    if os.path.isdir(args.profile):
        from ..distributed import view_ranks
        return view_ranks(args.profile, args.output)
    if not os.path.exists(args.profile):
        print(f"pytorch_memlab view: error: {args.profile}: no such file", file=sys.stderr)
        return USAGE_ERROR
    from ..records.saved import load
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
        print_tables(saved.print_stats)
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
        return USAGE_ERROR
    print(f"pytorch_memlab: wrote {args.output}", file=sys.stderr)
    return 0
