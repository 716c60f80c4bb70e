"""Printing the tables to a stdout whose reader may have left (``| head``,
``| tee`` stopped by Ctrl-C): that is no error of the profiler's."""
from __future__ import annotations

import os
import sys
from typing import Callable


def print_tables(write: Callable[[], None]) -> None:
    """Run ``write`` (which prints to stdout) and flush; a closed pipe ends it
    quietly."""
    try:
        write()
        sys.stdout.flush()
    except BrokenPipeError:
        # Point stdout at devnull so the interpreter's last flush at exit does
        # not raise the same error again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
