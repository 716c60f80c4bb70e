"""Command line: ``python -m pytorch_memlab demo | run | view | info | diff``.

The verbs are the commands of ``pytorch_memlab.cli``; this module checks
that what a verb needs is installed (one line and exit 1 if not), runs it,
and turns its error into one line and its exit status.  ``view`` and
``diff`` work without torch."""
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
    from pytorch_memlab.cli import CommandError, parse
    command, args = parse(list(sys.argv[1:] if argv is None else argv))
    if not _ready(torch=command.needs_torch):
        return 1
    try:
        return command.run(args)
    except CommandError as exc:     # the one place a verb's error becomes its status
        print(f"pytorch_memlab {command.name}: error: {exc}", file=sys.stderr)
        return exc.status


if __name__ == "__main__":
    sys.exit(main())
