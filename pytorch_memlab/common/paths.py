"""Whether a file can be written where the user named it: asked before the
work whose result it would hold (``run -o``, ``%mlrun -T``), so that a bad
path is reported before, not after, the program ran."""
from __future__ import annotations

import os


def cannot_write(path: str) -> bool:
    """True if ``path`` is a folder, its folder is missing or not writable, or
    it exists and is not writable."""
    folder = os.path.dirname(os.path.abspath(path))
    return (os.path.isdir(path) or not os.path.isdir(folder) or not os.access(folder, os.W_OK)
            or (os.path.exists(path) and not os.access(path, os.W_OK)))
