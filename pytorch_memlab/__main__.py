"""Command line: ``python -m pytorch_memlab demo | run | view | info``."""
import argparse
import sys
from typing import List, Optional


def _parser() -> "tuple[argparse.ArgumentParser, argparse.ArgumentParser]":
    from pytorch_memlab.cli import add_run_parser, add_view_parser
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


def _ready(torch: bool) -> bool:
    """False, after one line on stderr, if torch or the compiled tracer is missing."""
    from pytorch_memlab._install import missing_requirement
    problem = missing_requirement(torch)
    if problem is not None:
        print(f"python -m pytorch_memlab: {problem}", file=sys.stderr)
    return problem is None


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, run = _parser()
    if argv and argv[0] == "run":
        if not _ready(torch=True):
            return 1
        from pytorch_memlab.cli import parse_run, run_command
        return run_command(parse_run(parser, run, argv))
    args = parser.parse_args(argv)
    if not _ready(torch=args.command != "view"):
        return 1
    if args.command == "demo":
        from pytorch_memlab._demo import run_demo
        run_demo(args.device)
    elif args.command == "info":
        from pytorch_memlab._info import format_info, info
        print(format_info(info()))
    elif args.command == "view":
        from pytorch_memlab.cli import view_command
        return view_command(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
