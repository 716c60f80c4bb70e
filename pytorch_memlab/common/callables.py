"""From what a user passes (function, method, Module, wrapped function,
compiled module) to the Python function behind it: one rule for the
profiler that registers its code and for a ``func=`` that selects it."""
from __future__ import annotations

import functools
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
        elif _is_compiled_module(obj):
            obj = obj._orig_mod
        elif isinstance(obj, torch.nn.Module):
            obj = type(obj).forward
        elif isinstance(obj, type) and issubclass(obj, torch.nn.Module):
            obj = getattr(obj, "forward")
        elif getattr(obj, "__wrapped__", None) is not None:
            obj = obj.__wrapped__
        else:
            break
    if isinstance(obj, functools.partial):
        raise TypeError(f"cannot profile {original!r}: a functools.partial has no code of "
                        "its own; profile the function it calls (its .func) and call the "
                        "partial as before")
    if not isinstance(obj, types.FunctionType):
        raise TypeError(f"cannot profile {original!r}: it has no Python code "
                        "(pass a function, a method or a torch.nn.Module)")
    return obj


def _is_compiled_module(obj: Any) -> bool:
    """torch.compile(module): a wrapper Module whose forward is dynamo's."""
    return (isinstance(obj, torch.nn.Module) and type(obj).__name__ == "OptimizedModule"
            and isinstance(getattr(obj, "_orig_mod", None), torch.nn.Module))


def compiled_by_dynamo(obj: Any) -> bool:
    """Is ``obj``, or anything it wraps, made by ``torch.compile``?  Its
    frames then run as compiled graphs, never line by line."""
    for _ in range(_MAX_UNWRAP):
        if _is_compiled_module(obj) or \
                getattr(obj, "_torchdynamo_orig_callable", None) is not None:
            return True
        inner = getattr(obj, "__func__", None) or getattr(obj, "__wrapped__", None)
        if inner is None:
            return False
        obj = inner
    return False
