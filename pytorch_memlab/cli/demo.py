"""``python -m pytorch_memlab demo``: profile one training step of a small
MLP (``demo_step.py``, imported when the verb runs: it needs torch), on the
current CUDA device if there is one, else on the CPU."""
from __future__ import annotations

import argparse

from .command import Verb, device_option


class DemoCommand(Verb):
    name = "demo"
    help = "profile a training step of a small built-in model"
    needs_torch = True
    options = (device_option("'cpu', 'cuda' or 'cuda:N' (default: CUDA if available, else CPU)"),)

    def run(self, args: argparse.Namespace) -> int:
        from .demo_step import run_demo
        from .device_arg import check_device
        device, _ = check_device(args.device, allow_all=False)
        run_demo(device)
        return 0
