"""From what a user passes (function, method, Module, wrapped function) to the
Python function whose code objects we register."""
from __future__ import annotations

import types
from typing import Any

import torch

_MAX_UNWRAP = 100


def resolve_function(obj: Any) -> types.FunctionType:
    """The plain function behind ``obj``.

    Bound methods and static/class methods give their ``__func__``; a
    ``torch.nn.Module`` instance or subclass gives its ``forward``; functions
    wrapped with ``functools.wraps`` (our own decorators included) give the
    innermost ``__wrapped__``.  TypeError for anything without Python code.
    """
    original = obj
    for _ in range(_MAX_UNWRAP):
        if isinstance(obj, (staticmethod, classmethod, types.MethodType)):
            obj = obj.__func__
        elif isinstance(obj, torch.nn.Module):
            obj = type(obj).forward
        elif isinstance(obj, type) and issubclass(obj, torch.nn.Module):
            obj = getattr(obj, "forward")
        elif getattr(obj, "__wrapped__", None) is not None:
            obj = obj.__wrapped__
        else:
            break
    if not isinstance(obj, types.FunctionType):
        raise TypeError(f"cannot profile {original!r}: it has no Python code "
                        "(pass a function, a method or a torch.nn.Module)")
    return obj


class FunctionEntry:
    """A registered function and every code object it has had."""

    def __init__(self, func: types.FunctionType) -> None:
        self.func = func
        self.codes: list[types.CodeType] = [func.__code__]

    @property
    def qualname(self) -> str:
        return self.func.__qualname__

    def new_code(self) -> types.CodeType | None:
        """The function's code if it was replaced since the last look."""
        code = self.func.__code__
        if code in self.codes:
            return None
        self.codes.append(code)
        return code

    def matches(self, selector: Any) -> bool:
        """Is this the function ``selector`` names (a qualname or a callable)?"""
        if isinstance(selector, str):
            return self.qualname == selector or self.func.__name__ == selector
        try:
            return resolve_function(selector) is self.func
        except TypeError:
            return False


def matches_any(entry: FunctionEntry, selectors: Any) -> bool:
    """``selectors`` is None (all), one selector, or a list/tuple of them."""
    if selectors is None:
        return True
    if isinstance(selectors, (list, tuple, set)):
        return any(entry.matches(s) for s in selectors)
    return entry.matches(selectors)

