"""The source text of a profiled code object, line by line."""
from __future__ import annotations

import inspect
import linecache
import types
from typing import Iterable


def source_lines(code: types.CodeType, seen: Iterable[int]) -> list[tuple[int, str]]:
    """(lineno, text) for every line of the function, decorators included.

    Falls back on the lines that ran (text from linecache, possibly empty)
    when the source cannot be found (code typed at a prompt, exec'd strings).
    """
    try:
        lines, first = inspect.getsourcelines(code)
    except (OSError, TypeError):
        lines, first = [], 0
    if lines and not _plausible(code, lines):
        lines, first = [], 0
    # a pseudo-file's lines are read only where its text is the function's
    cached = bool(lines) or not _pseudo(code.co_filename)
    rows = [(first + i, text.rstrip("\r\n").expandtabs()) for i, text in enumerate(lines)]
    known = {lineno for lineno, _ in rows}
    extra = sorted(set(seen) - known)
    for lineno in extra:
        text = linecache.getline(code.co_filename, lineno) if cached else ""
        text = text.rstrip("\r\n").expandtabs()
        rows.append((lineno, text))
    if extra:
        rows.sort()
    return rows


def _plausible(code: types.CodeType, lines: list[str]) -> bool:
    """Is ``lines`` this function's source?  A pseudo-file (``<string>``) may
    hold another text in linecache: from 3.13 the interpreter keeps the
    program of ``python -c`` there (pytest-xdist's workers are started so),
    and an ``exec()``'d function shares its name."""
    name = code.co_name
    if not _pseudo(code.co_filename) or name.startswith("<"):
        return True
    return any(f"def {name}" in line for line in lines)


def _pseudo(filename: str) -> bool:
    """``<string>``, ``<stdin>``: a name for source that is no file."""
    return filename.startswith("<") and filename.endswith(">")
