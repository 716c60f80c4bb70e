"""Compiling a program so that each function ``run`` profiles is wrapped as
it is created, the way ``@profile`` wraps it: the tracer is on only while a
profiled call runs, and code outside them runs with no trace hook (on Python
<= 3.11 a hook slows every frame of its thread).

The source is compiled again with one more decorator, innermost, on each
``def`` to profile: ``wrap_created``, which hands the new function to the
decorator's own wrapper (``line_profiler.wrapping``).  The decorator is
evaluated where the ``def`` stands, so the function's own code object is
the one the plain compile makes (same lines, same ``co_firstlineno``: the
decorator is given the ``def``'s line, or comes after the ones there), and
it is that code object which is registered.
"""
from __future__ import annotations

import ast
import inspect
import types
from typing import Any, Optional, Union

from ..line_profiler.profiler import LineProfiler
from ..line_profiler.wrapping import wrap

# A def is told apart by its name and first line (a decorator's line when it
# has decorators): no two defs of one file share both.
Key = tuple[str, int]

# What the compiled program calls: found through __import__, a builtin, so
# that no name has to be put in the program's namespaces.
_HERE = __name__
_active: Optional[LineProfiler] = None
_codes: dict[int, types.CodeType] = {}     # id -> code (held: ids stay valid)


def key(code: types.CodeType) -> Key:
    return code.co_name, code.co_firstlineno


def can_wrap(code: types.CodeType) -> bool:
    """The wrapper drives plain, generator and coroutine functions; an async
    generator's body would run outside it (see ``wrapping.wrap``)."""
    return not code.co_flags & inspect.CO_ASYNC_GENERATOR


class _Decorate(ast.NodeTransformer):
    def __init__(self, keys: set[Key]) -> None:
        self.keys = keys
        self.done: set[Key] = set()

    def _def(self, node: Union[ast.FunctionDef, ast.AsyncFunctionDef]) -> Any:
        self.generic_visit(node)
        first = node.decorator_list[0].lineno if node.decorator_list else node.lineno
        if (node.name, first) in self.keys:
            self.done.add((node.name, first))
            node.decorator_list.append(_decorator(node))
        return node

    visit_FunctionDef = _def
    visit_AsyncFunctionDef = _def


def _decorator(node: ast.AST) -> ast.expr:
    """``__import__(_HERE, fromlist=("wrap_created",)).wrap_created`` at the def's line."""
    call = ast.Call(func=ast.Name("__import__", ast.Load()), args=[ast.Constant(_HERE)],
                    keywords=[ast.keyword("fromlist", ast.Tuple([ast.Constant("wrap_created")],
                                                                ast.Load()))])
    expr = ast.Attribute(call, "wrap_created", ast.Load())
    line, col = node.lineno, node.col_offset   # type: ignore[attr-defined]
    for part in ast.walk(expr):
        if "lineno" in part._attributes:
            part.lineno = part.end_lineno = line  # type: ignore[attr-defined]
            part.col_offset, part.end_col_offset = col, col + 3  # type: ignore[attr-defined]
    return expr


def compile_wrapped(source: Union[str, bytes], filename: str,
                    keys: set[Key]) -> Optional[types.CodeType]:
    """``source`` compiled with the defs of ``keys`` wrapped as they are
    created; None when one of them is not found (the caller then runs the
    plain code with the hook on throughout)."""
    try:
        tree = ast.parse(source, filename)
    except (SyntaxError, ValueError):
        return None
    decorate = _Decorate(keys)
    tree = decorate.visit(tree)
    if decorate.done != keys:
        return None
    code: types.CodeType = compile(tree, filename, "exec", dont_inherit=True)
    return code


def activate(profiler: LineProfiler) -> None:
    """From now on ``wrap_created`` wraps the registered functions for ``profiler``."""
    global _active
    _active = profiler


def deactivate() -> None:
    """Functions created from now on (the program's atexit code) stay plain."""
    global _active
    _active = None


def add(code: types.CodeType) -> None:
    _codes[id(code)] = code


def wrap_created(func: Any) -> Any:
    """The decorator the compiled program applies to each def of ``keys``."""
    profiler = _active
    code = getattr(func, "__code__", None)
    if profiler is None or code is None or _codes.get(id(code)) is not code:
        return func
    return wrap(func, profiler)
