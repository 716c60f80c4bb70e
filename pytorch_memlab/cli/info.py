"""``python -m pytorch_memlab info``: which memory source and reading path
each device kind uses (``sources/info.py``, imported when the verb runs)."""
from __future__ import annotations

import argparse

from .command import Verb


class InfoCommand(Verb):
    name = "info"
    help = "which memory source and reading path each device uses"
    needs_torch = True

    def run(self, args: argparse.Namespace) -> int:
        from ..sources.info import format_info, info
        print(format_info(info()))
        return 0
