"""Wraps a function so that a profiler is on exactly while calls to it run.

Keeping the hook on only inside profiled calls is what keeps unrelated code at
full speed (on Python <= 3.11 the trace hook slows the whole thread).  When an
outermost profiled call of a thread returns or raises, ``after_call`` runs
after the profiler has committed its lines.
"""
from __future__ import annotations

import ast
import builtins
import functools
import inspect
import linecache
import sys
import types
from typing import Any, Callable, Optional

from ..sources import native
from ..common.callables import resolve_function
from .profiler import LineProfiler

# Runs after each outermost call of a thread, with the exception that escaped.
AfterCall = Callable[[Optional[BaseException]], None]


def _enter(profiler: LineProfiler, code: Optional[types.CodeType] = None) -> None:
    profiler._enter_call(code)   # code: counted, to tell when its lines were not traced
    if native.MECHANISM == "settrace":
        native.install_thread_hook()   # threads that existed before enable()


def _leave(profiler: LineProfiler, exc: Optional[BaseException],
           after_call: Optional[AfterCall]) -> None:
    if isinstance(exc, GeneratorExit):   # a generator closed early: no error
        exc = None
    if exc is not None and profiler._in_outermost_call():
        # the outermost call of this thread, noted before _exit_call may
        # switch the tracer off: it still follows the live allocations
        profiler._note_exception(exc)
    outermost = profiler._exit_call()   # commits the lines before any printing
    if outermost and after_call is not None:
        after_call(exc)


# The function other tools see: a one-line call of our wrapper, compiled at
# the profiled function's first line and file, with its code among the
# constants.  memory_profiler reads ``__code__`` (not ``__wrapped__``), takes
# that file's lines from there on and traces the code objects in its
# constants: so it profiles the user's function, not our wrapper.
_FACES = {
    "plain": "def f(*args, **kwargs):\n    return _call(*args, **kwargs)\n",
    "generator": "def f(*args, **kwargs):\n    return (yield from _call(*args, **kwargs))\n",
    "async": "async def f(*args, **kwargs):\n    return await _call(*args, **kwargs)\n",
}
_face_codes: dict[tuple[int, str], tuple[types.CodeType, types.CodeType]] = {}


def _face_code(code: types.CodeType, kind: str) -> types.CodeType:
    cached = _face_codes.get((id(code), kind))
    if cached is not None and cached[0] is code:
        return cached[1]
    text = linecache.getline(code.co_filename, code.co_firstlineno).rstrip().encode()
    start, end = len(text) - len(text.lstrip()), len(text)   # the whole line: no carets
    tree = ast.parse(_FACES[kind])
    for node in ast.walk(tree):
        if "lineno" in node._attributes:
            node.lineno = node.end_lineno = code.co_firstlineno  # type: ignore[attr-defined]
            node.col_offset, node.end_col_offset = start, end  # type: ignore[attr-defined]
    module = compile(tree, code.co_filename, "exec", dont_inherit=True)
    face = next(c for c in module.co_consts if isinstance(c, types.CodeType))
    face = face.replace(co_name=code.co_name, co_consts=face.co_consts + (code,))
    if sys.version_info >= (3, 11):
        face = face.replace(co_qualname=code.co_qualname)
    _face_codes[(id(code), kind)] = (code, face)
    return face


def is_wrapper_code(code: types.CodeType) -> bool:
    """A frame of ours between a profiled function and its caller (a face or
    a wrapper), which a traceback shown for the user can leave out."""
    return code.co_filename == __file__ or any(
        face is code for _, face in list(_face_codes.values()))


def _face(call: Callable[..., Any], func: Callable[..., Any], code: types.CodeType,
          kind: str) -> Callable[..., Any]:
    face = types.FunctionType(_face_code(code, kind),
                              {"_call": call, "__builtins__": builtins}, code.co_name)
    return functools.wraps(func)(face)


def wrap(func: Callable[..., Any], profiler: LineProfiler,
         after_call: Optional[AfterCall] = None,
         after_step: Optional[Callable[[], None]] = None) -> Callable[..., Any]:
    """A wrapper of ``func`` (plain, generator or coroutine function) that turns
    ``profiler`` on around each call; for a generator, around each step (see
    ``_wrap_generator``), ``after_step`` running after each outermost one that
    yields."""
    code = resolve_function(func).__code__
    if inspect.isgeneratorfunction(func):
        return _face(_wrap_generator(func, profiler, after_call, after_step, code), func,
                     code, "generator")
    if inspect.iscoroutinefunction(func):
        profiled = _ProfiledCall(profiler, code, after_call)

        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            with profiled:
                return await func(*args, **kwargs)
        return _face(async_wrapper, func, code, "async")
    return _plain(func, profiler, code, after_call)


def _plain(func: Callable[..., Any], profiler: LineProfiler, code: types.CodeType,
           after_call: Optional[AfterCall]) -> Callable[..., Any]:
    """A C callable (``native.ProfiledCall``): no Python frame of ours per
    call, so a recursive function reaches the depth it reaches unprofiled.
    Its ``__code__`` is the face's, for the tools that read it."""
    def enter() -> None:
        _enter(profiler, code)

    def leave(exc: Optional[BaseException]) -> None:
        _leave(profiler, exc, after_call)

    call = native.ProfiledCall(func, enter, leave)
    functools.update_wrapper(call, func)
    call.__code__ = _face_code(code, "plain")
    return call


class _ProfiledCall:
    """``with`` it around a call: the profiler is on (``_enter``) while the
    call runs and off (``_leave``, with the exception that escaped) after.  A
    class rather than a generator-based context manager, so that no frame of
    ours joins the traceback of an exception the call raises; it keeps no
    per-call state, so one serves every call of a function, recursive ones
    included."""
    __slots__ = ("profiler", "code", "after_call")

    def __init__(self, profiler: LineProfiler, code: types.CodeType,
                 after_call: Optional[AfterCall]) -> None:
        self.profiler, self.code, self.after_call = profiler, code, after_call

    def __enter__(self) -> None:
        _enter(self.profiler, self.code)

    def __exit__(self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[types.TracebackType]) -> None:
        _leave(self.profiler, exc, self.after_call)


def _wrap_generator(func: Callable[..., Any], profiler: LineProfiler,
                    after_call: Optional[AfterCall],
                    after_step: Optional[Callable[[], None]],
                    code: types.CodeType) -> Callable[..., Any]:
    """The profiler is on while the generator runs, not while it is suspended:
    a generator left suspended (never exhausted, alive at exit) must not keep
    the hook on for the rest of the program.  ``yield from`` would keep it on,
    so the steps (send / throw / close) are driven here, as PEP 380 does."""
    def step(method: Callable[..., Any], arg: Any, last: bool = False,
             first: bool = False) -> Any:
        _enter(profiler, code if first else None)
        try:
            value = method(arg)
        except StopIteration:
            _leave(profiler, None, after_call)
            raise
        except BaseException as exc:
            _leave(profiler, exc, after_call)
            raise
        if last:
            _leave(profiler, None, after_call)
        elif profiler._exit_call() and after_step is not None:
            after_step()
        return value

    @functools.wraps(func)
    def gen_wrapper(*args: Any, **kwargs: Any) -> Any:
        gen = func(*args, **kwargs)
        method, arg, first = gen.send, None, True
        while True:
            try:
                value = step(method, arg, first=first)
                first = False
            except StopIteration as stop:
                return stop.value
            try:
                method, arg = gen.send, (yield value)
            except GeneratorExit:
                step(lambda _: gen.close(), None, last=True)   # finally blocks run profiled
                raise
            except BaseException as exc:
                method, arg = gen.throw, exc
    return gen_wrapper


def wrap_any(obj: Any, profiler: LineProfiler, after_call: Optional[AfterCall] = None,
             after_step: Optional[Callable[[], None]] = None) -> Any:
    """``wrap`` that keeps a staticmethod / classmethod what it was."""
    if isinstance(obj, (staticmethod, classmethod)):
        return type(obj)(wrap(obj.__func__, profiler, after_call, after_step))
    return wrap(obj, profiler, after_call, after_step)
