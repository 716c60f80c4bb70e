"""Command line: ``python -m pytorch_memlab demo | run | view | info``.

The verbs live in ``pytorch_memlab.cli``; this module checks that what a verb
needs is installed (one line and exit 1 if not) and dispatches.  ``demo`` and
``info`` are imported only when asked for: they import torch, and ``view``
works without it."""
from __future__ import annotations

import sys
from typing import Optional


def _ready(torch: bool) -> bool:
    """False, after one line on stderr, if torch or the compiled tracer is missing."""
    from pytorch_memlab._install import missing_requirement
    problem = missing_requirement(torch)
    if problem is not None:
        print(f"python -m pytorch_memlab: {problem}", file=sys.stderr)
    return problem is None


def main(argv: Optional[list[str]] = None) -> int:
    from pytorch_memlab.cli.parser import build_parser, parse_run
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, run = build_parser()
    if argv and argv[0] == "run":
        if not _ready(torch=True):
            return 1
        from pytorch_memlab.cli.run import run_command
        return run_command(parse_run(parser, run, argv))
    args = parser.parse_args(argv)
    if not _ready(torch=args.command != "view"):
        return 1
    if args.command == "demo":
        from pytorch_memlab.cli.demo import demo_command
        return demo_command(args)
    if args.command == "info":
        from pytorch_memlab.cli.info import info_command
        return info_command(args)
    from pytorch_memlab.cli.view import view_command
    return view_command(args)


if __name__ == "__main__":
    sys.exit(main())
