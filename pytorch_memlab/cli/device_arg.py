"""``-d DEVICE`` of ``run`` and ``demo``: checked before anything runs, so a
bad one is one line naming ``-d`` and what it accepts, never torch's
traceback (an unknown device type, CUDA asked for where there is none)."""
from __future__ import annotations

import re
import sys
from typing import Optional

from .command import CommandError

CPU_NOTE = ("pytorch_memlab: CUDA is not available, profiling CPU tensor memory instead "
            "(pass -d cpu to say so and silence this note)")


def accepted(allow_all: bool) -> str:
    return "cpu, cuda, cuda:N or all" if allow_all else "cpu, cuda or cuda:N"


def check_device(device: Optional[str], allow_all: bool) -> tuple[Optional[str], bool]:
    """(the device to profile, fell back to the CPU).  None: the current GPU.
    Left out (or ``all``) without CUDA: ``'cpu'``, fell back (``CPU_NOTE``
    is for the caller to print once nothing else can fail)."""
    import torch
    if device is not None and re.fullmatch(r"cpu|cuda|cuda:\d+|all" if allow_all
                                           else r"cpu|cuda|cuda:\d+", device) is None:
        raise CommandError(f"-d {device!r}: expected {accepted(allow_all)}")
    if device == "cpu":
        return device, False
    if not torch.cuda.is_available():
        if device is None or device == "all":
            return "cpu", True
        raise CommandError(f"-d {device!r}: CUDA is not available here; pass -d cpu to "
                           "profile CPU tensor memory")
    if device is not None and device.startswith("cuda:"):
        from ..common.devices import cuda_index
        try:
            cuda_index(device, f"-d {device!r}", accepted(allow_all))
        except ValueError as exc:
            raise CommandError(str(exc)) from None
    return device, False


def note_cpu() -> None:
    print(CPU_NOTE, file=sys.stderr)
