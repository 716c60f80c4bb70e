"""The command line's grammar, made from ``COMMANDS``: one argparse parser, a
subparser per verb."""
from __future__ import annotations

import argparse
from typing import Sequence

from .command import Command
from .commands import COMMANDS


def build_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """(the whole parser, each verb's subparser by name)."""
    parser = argparse.ArgumentParser(prog="python -m pytorch_memlab",
                                     description="Per-line memory profiling for PyTorch.")
    verbs = parser.add_subparsers(dest="command", required=True)
    subparsers = {}
    for command in COMMANDS:
        sub = verbs.add_parser(command.name, help=command.help)
        command.add_arguments(sub)
        subparsers[command.name] = sub
    return parser, subparsers


def parse(argv: Sequence[str]) -> tuple[Command, argparse.Namespace]:
    """The verb ``argv`` names and its arguments; a usage error exits 2 with
    argparse's message."""
    parser, subparsers = build_parser()
    args = parser.parse_args(argv)
    command = next(c for c in COMMANDS if c.name == args.command)
    command.complete(subparsers[command.name], args)
    return command, args
