"""Files written whole or not at all."""
from __future__ import annotations

import itertools
import os
from typing import Callable

# next() is one C call: no signal handler, no other thread, runs inside it
_serial = itertools.count()


def write_replacing(path: str, write: Callable[[str], None]) -> None:
    """``write(tmp)`` to a temporary file beside ``path``, then rename it over
    ``path``: a process killed while writing (SIGKILL after a SIGTERM) leaves
    the old file or the new one.  Each call writes a temporary file of its own
    (process id and a serial number): two writers at once, the signal watcher
    and the program's end, would otherwise write into one file and rename it
    twice.  The extension stays last, as it tells ``write`` the format."""
    root, ext = os.path.splitext(path)
    tmp = f"{root}.{os.getpid()}-{next(_serial)}.tmp{ext}"
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
