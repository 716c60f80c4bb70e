"""What a verb of ``python -m pytorch_memlab`` is: a ``Command`` (its name,
its arguments, what it runs), and the one error a verb reports."""
from __future__ import annotations

import argparse
from typing import Protocol

USAGE_ERROR = 2


class CommandError(Exception):
    """A verb's error, printed as one line on stderr (``pytorch_memlab VERB:
    error: ...``); the exit status is ``status`` (2: bad usage)."""

    def __init__(self, message: str, status: int = USAGE_ERROR) -> None:
        super().__init__(message)
        self.status = status


class Command(Protocol):
    name: str
    help: str
    needs_torch: bool      # False: runs where torch is not installed

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Declare the verb's options on its subparser."""

    def complete(self, parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
        """What argparse cannot say: fill in ``args``, or ``parser.error()``."""

    def run(self, args: argparse.Namespace) -> int:
        """The exit status; raises CommandError for a verb's error."""
