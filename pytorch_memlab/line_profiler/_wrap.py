"""Wraps a function so that a profiler is on exactly while calls to it run.

Keeping the hook on only inside profiled calls is what keeps unrelated code at
full speed (on Python <= 3.11 the trace hook slows the whole thread).  When an
outermost profiled call of a thread returns or raises, ``after_call`` runs
after the profiler has committed its lines.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Optional

from .. import _tracer
from .profiler import LineProfiler

# Runs after each outermost call of a thread, with the exception that escaped.
AfterCall = Callable[[Optional[BaseException]], None]


def _enter(profiler: LineProfiler) -> None:
    profiler._enter_call()
    if _tracer.MECHANISM == "settrace":
        _tracer.install_thread_hook()   # threads that existed before enable()


def _leave(profiler: LineProfiler, exc: Optional[BaseException],
           after_call: Optional[AfterCall]) -> None:
    if isinstance(exc, GeneratorExit):   # a generator closed early: no error
        exc = None
    outermost = profiler._exit_call()   # commits the lines before any printing
    if outermost:
        if exc is not None:
            profiler._note_exception(exc)
        if after_call is not None:
            after_call(exc)


def wrap(func: Callable[..., Any], profiler: LineProfiler,
         after_call: Optional[AfterCall] = None) -> Callable[..., Any]:
    """A wrapper of ``func`` (plain, generator or coroutine function) that turns
    ``profiler`` on around each call."""
    def finish(exc: Optional[BaseException]) -> None:
        _leave(profiler, exc, after_call)

    if inspect.isgeneratorfunction(func):
        @functools.wraps(func)
        def gen_wrapper(*args: Any, **kwargs: Any) -> Any:
            _enter(profiler)
            exc: Optional[BaseException] = None
            try:
                return (yield from func(*args, **kwargs))
            except BaseException as e:
                exc = e
                raise
            finally:
                finish(exc)
        return gen_wrapper

    if inspect.iscoroutinefunction(func):
        @functools.wraps(func)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            _enter(profiler)
            exc: Optional[BaseException] = None
            try:
                return await func(*args, **kwargs)
            except BaseException as e:
                exc = e
                raise
            finally:
                finish(exc)
        return async_wrapper

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _enter(profiler)
        exc: Optional[BaseException] = None
        try:
            return func(*args, **kwargs)
        except BaseException as e:
            exc = e
            raise
        finally:
            finish(exc)
    return wrapper


def wrap_any(obj: Any, profiler: LineProfiler, after_call: Optional[AfterCall] = None) -> Any:
    """``wrap`` that keeps a staticmethod / classmethod what it was."""
    if isinstance(obj, (staticmethod, classmethod)):
        return type(obj)(wrap(obj.__func__, profiler, after_call))
    return wrap(obj, profiler, after_call)
