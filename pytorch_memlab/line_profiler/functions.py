"""From what a user passes (function, method, Module, wrapped function) to the
Python function whose code objects we register."""
from __future__ import annotations

import functools
import types
from typing import Any, Iterable, Iterator

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


class FunctionEntry:
    """A registered function and every code object it has had.

    Registered by code object alone (``LineProfiler.add_code``: the function
    does not exist yet, e.g. a script's function before the script runs),
    ``func`` is None and the entry has that one code object.
    """

    def __init__(self, func: types.FunctionType | None,
                 code: types.CodeType | None = None, qualname: str | None = None) -> None:
        self.func = func
        self._qualname = qualname
        first = func.__code__ if func is not None else code
        assert first is not None
        self.codes: list[types.CodeType] = [first]
        self.compiled = False   # registered through a torch.compile wrapper

    @property
    def qualname(self) -> str:
        if self.func is not None:
            return self.func.__qualname__
        return self._qualname or code_qualname(self.codes[0])

    @property
    def name(self) -> str:
        return self.func.__name__ if self.func is not None else self.codes[0].co_name

    @property
    def current_code(self) -> types.CodeType:
        return self.func.__code__ if self.func is not None else self.codes[0]

    def has_code(self, code: types.CodeType) -> bool:
        """Is ``code`` one of ours?  By identity (see ``CodesByIdentity``)."""
        return any(code is mine for mine in self.codes)

    def new_code(self) -> types.CodeType | None:
        """The function's code if it was replaced since the last look."""
        code = self.current_code
        if self.has_code(code):
            return None
        self.codes.append(code)
        return code


class CodesByIdentity:
    """A set of code objects that tests membership by identity.  Code objects
    compare equal when only their file differs (the same function in two
    files, two copies of a model's ``forward``), yet each is its own function."""

    def __init__(self, codes: Iterable[types.CodeType]) -> None:
        self._codes = {id(code): code for code in codes}   # holding them keeps ids valid

    def __contains__(self, code: object) -> bool:
        return id(code) in self._codes

    def __len__(self) -> int:
        return len(self._codes)

    def __iter__(self) -> Iterator[types.CodeType]:
        return iter(self._codes.values())


def code_qualname(code: types.CodeType) -> str:
    """``co_qualname`` (3.11+), else the bare name."""
    return getattr(code, "co_qualname", code.co_name)
