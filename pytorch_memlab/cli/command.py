"""What a verb of ``python -m pytorch_memlab`` is: a ``Command`` (its name,
its arguments, what it runs), the one error a verb reports, and what the
verbs share: ``Verb``, a command made of declarations (its options as data,
``option``), and the options two verbs take alike."""
from __future__ import annotations

import argparse
from typing import Any, NamedTuple, Optional, Protocol

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


class Option(NamedTuple):
    """One ``parser.add_argument(*flags, **settings)``."""
    flags: tuple[str, ...]
    settings: dict[str, Any]


def option(*flags: str, **settings: Any) -> Option:
    return Option(flags, settings)


def device_option(accepted: str) -> Option:
    return option("-d", "--device", default=None, help=accepted)


def column_option(help: str) -> Option:
    return option("-c", "--column", action="append", metavar="COLUMN", help=help)


def output_option(metavar: str, help: str) -> Option:
    return option("-o", "--output", metavar=metavar, help=help)


class Verb:
    """A verb made of declarations: its subparser's usage, description and
    options; nothing to complete unless it says so."""
    usage: Optional[str] = None
    description: Optional[str] = None
    options: tuple[Option, ...] = ()

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        if self.usage is not None:
            parser.usage = self.usage
        if self.description is not None:
            parser.description = self.description
        for flags, settings in self.options:
            parser.add_argument(*flags, **settings)

    def complete(self, parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
        pass
