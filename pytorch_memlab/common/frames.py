"""Tensors named by the variables that hold them in running frames.

The out-of-memory post-mortem (over the traceback's frames) and MemReporter
(over its caller's frames) name a tensor the same way: a local variable
holding it (``x``), a module held in one (``model.0.weight``, its parameters
and buffers), or an item of a short list or tuple held in one (``xs[0]``).
Frames of pytorch_memlab itself are skipped: their variables are ours.
"""
from __future__ import annotations

import inspect
import os
import sys
import types
from typing import Iterable, Iterator, Sequence, cast

import torch

from .tensors import is_tensor

__all__ = ["FrameTensor", "caller_frames", "frame_tensors", "is_own_frame"]

_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_MAX_ITEMS = 64     # a longer list is a dataset or a cache, not a variable's parts
# Before 3.13 a function frame's ``f_locals`` is a snapshot dict cached on the
# frame: it would keep every tensor read there alive after the function
# ``del``s it, until the frame ends.  Emptied after reading (CPython refills
# it on the next read, and a Python trace function's trampoline refills it
# before writing it back), except in a frame being traced (a debugger's
# prompt may be running there, writing the dict back when it returns).
_SNAPSHOT_LOCALS = sys.version_info < (3, 13)

# (name, tensor, frame, variable): the variable is the local that holds it
FrameTensor = tuple[str, torch.Tensor, types.FrameType, str]


def is_own_frame(frame: types.FrameType) -> bool:
    """Is ``frame`` running pytorch_memlab's own code?"""
    return os.path.abspath(frame.f_code.co_filename).startswith(_OWN_DIR)


def caller_frames() -> list[types.FrameType]:
    """The frames calling into pytorch_memlab now, innermost first."""
    frames = []
    frame = sys._getframe(1)
    while frame is not None:
        if not is_own_frame(frame):
            frames.append(frame)
        frame = frame.f_back    # type: ignore[assignment]  # None at the outermost
    return frames


def _held(var: str, value: object) -> list[tuple[str, torch.Tensor]]:
    """Tested with ``type()``, as ``is_tensor`` does: ``isinstance`` runs code
    (a dead ``weakref.proxy`` raises).  A module whose walk raises names nothing."""
    if is_tensor(value):
        return [(var, cast(torch.Tensor, value))]
    kind = type(value)
    try:
        if issubclass(kind, torch.nn.Module):
            module = cast(torch.nn.Module, value)
            found = [(f"{var}.{n}", p) for n, p in module.named_parameters()]
            return found + [(f"{var}.{n}", b) for n, b in module.named_buffers()]
        if issubclass(kind, (list, tuple)):
            items = cast(Sequence[object], value)
            if len(items) <= _MAX_ITEMS:
                return [(f"{var}[{i}]", cast(torch.Tensor, v)) for i, v in enumerate(items)
                        if is_tensor(v)]
    except Exception:
        return []
    return []


def frame_tensors(frames: Iterable[types.FrameType]) -> Iterator[FrameTensor]:
    """Each tensor the frames' variables hold, in frame order; within a frame
    the variables that are tensors first, then modules' and lists' tensors,
    each in variable order.  A tensor held by several names comes once per
    name."""
    for frame in frames:
        snapshot = (_SNAPSHOT_LOCALS and frame.f_trace is None
                    and bool(frame.f_code.co_flags & inspect.CO_OPTIMIZED))
        variables = frame.f_locals
        try:
            items = list(variables.items())
        finally:
            if snapshot:
                variables.clear()
        if variables is not frame.f_globals and frame.f_code.co_name == "<module>":
            # A module's code inside an inlined comprehension (3.13): its
            # f_locals holds the comprehension's variables, not the module's.
            seen = {var for var, _ in items}
            items += [(var, value) for var, value in frame.f_globals.items() if var not in seen]
        del variables
        items.sort(key=lambda item: not is_tensor(item[1]))     # stable
        for var, value in items:
            for name, tensor in _held(var, value):
                yield name, tensor, frame, var
        del items
