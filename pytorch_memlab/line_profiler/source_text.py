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
    rows = [(first + i, text.rstrip("\r\n").expandtabs()) for i, text in enumerate(lines)]
    known = {lineno for lineno, _ in rows}
    extra = sorted(set(seen) - known)
    for lineno in extra:
        text = linecache.getline(code.co_filename, lineno).rstrip("\r\n").expandtabs()
        rows.append((lineno, text))
    if extra:
        rows.sort()
    return rows
