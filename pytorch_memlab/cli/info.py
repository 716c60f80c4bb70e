"""`python -m pytorch_memlab info`: print which memory source and reading
path each kind of device uses (``pytorch_memlab.info()``)."""
from __future__ import annotations

import argparse


def info_command(args: argparse.Namespace) -> int:
    from ..source_info import format_info, info
    print(format_info(info()))
    return 0
