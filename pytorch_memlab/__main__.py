"""Command line: ``python -m pytorch_memlab demo``."""
import argparse
import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytorch_memlab",
                                     description="Per-line memory profiling for PyTorch.")
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="profile a training step of a small built-in model")
    demo.add_argument("-d", "--device", default=None,
                      help="'cpu', 'cuda' or 'cuda:N' (default: CUDA if available, else CPU)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from pytorch_memlab._demo import run_demo
        run_demo(args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
