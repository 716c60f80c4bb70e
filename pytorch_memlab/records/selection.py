"""Which functions a ``func=`` argument names: one rule for the live profiler
and for a saved profile."""
from __future__ import annotations

import os
import types
from typing import Any, Collection


def selects(selector: Any, qualname: str, filename: str,
            codes: Collection[types.CodeType] = ()) -> bool:
    """Does ``selector`` name this function?  None names every function; a
    string names a qualname or its last part; a function (method, Module...)
    names the function it resolves to: by code object where the caller knows
    them (a closure made again has a new function but the same code), else by
    qualname and file; a list, tuple or set names any of its items."""
    if selector is None:
        return True
    if isinstance(selector, (list, tuple, set)):
        return any(selects(s, qualname, filename, codes) for s in selector)
    if isinstance(selector, str):
        return selector in (qualname, qualname.rsplit(".", 1)[-1])
    from ..common.callables import resolve_function   # imports torch: only for a function
    try:
        func = resolve_function(selector)
    except TypeError:
        return False
    if codes:   # by identity: the same source in two files gives equal codes
        return any(func.__code__ is code for code in codes)
    return (func.__qualname__ == qualname
            and os.path.abspath(func.__code__.co_filename) == os.path.abspath(filename))
