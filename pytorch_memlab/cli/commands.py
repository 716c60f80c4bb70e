"""The verbs of ``python -m pytorch_memlab``: ``COMMANDS``, the list the parser
and the dispatch are made from.  Each verb's ``Command`` lives beside its
work, in its own module (``demo``, ``run``, ``view``, ``info``, ``diff``),
whose heavy imports wait until it runs: ``demo``, ``run`` and ``info``
import torch then; ``view`` and ``diff`` work without it."""
from __future__ import annotations

from .command import Command
from .demo import DemoCommand
from .diff import DiffCommand
from .info import InfoCommand
from .run import RunCommand
from .view import ViewCommand

COMMANDS: tuple[Command, ...] = (DemoCommand(), RunCommand(), ViewCommand(), InfoCommand(),
                                 DiffCommand())
