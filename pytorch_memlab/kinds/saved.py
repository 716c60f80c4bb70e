"""Autograd's saved-tensor hooks, pushed for the forward of a thread's
outermost module while a profiled call runs: the pack hook tags each block
autograd keeps as ``saved_for_backward``, until autograd lets go of it.
Pushed only where the thread's stack is empty, so hooks of the program's own
(checkpointing's, ``save_on_cpu``) stay the ones autograd calls; not for a
whole profiled call, since torch.func's grad, vjp and jacrev refuse to run
while any are on the stack."""
from __future__ import annotations

import threading
from typing import Any, Optional

import torch

from . import storages
from .names import code_of

SAVED = code_of("saved_for_backward")
# {(device, address): how many of what autograd keeps hold it}: one storage is
# often kept by two nodes (a Linear's input is the ReLU's output before it)
_saved: dict[tuple[str, int], int] = {}
_saved_lock = threading.RLock()     # RLock: a _Saved may be let go of inside


class _Saved:
    """What autograd keeps where our pack hook ran: the tensor (detached: the
    graph would hold the tensor that holds the graph), its version then, and
    its block if tagged.  Autograd lets go of it once the node that kept it
    has run, or with the graph: then, with no other keeping it, a block
    still alive is no longer saved (from then on; at the peaks before, it
    was)."""
    __slots__ = ("tensor", "version", "block")

    def __init__(self, t: torch.Tensor, block: Optional[storages.Block]) -> None:
        self.tensor, self.version, self.block = t.detach(), t._version, block

    def __del__(self) -> None:
        block = self.block
        if block is None:
            return
        key = block[:2]
        with _saved_lock:
            left = _saved.pop(key, 0) - 1
            if left > 0:
                _saved[key] = left
        if left <= 0 and storages.by_device:
            storages.tag_one(0, block, SAVED, False)


def _pack(t: torch.Tensor) -> _Saved:
    running = storages.by_device and not torch.compiler.is_compiling()
    block = storages.block_of(t) if running else None
    if block is not None:
        key = block[:2]
        with _saved_lock:
            _saved[key] = _saved.get(key, 0) + 1
        storages.tag_one(SAVED, block, 0, True)     # untagged blocks only
    return _Saved(t, block)


def _unpack(saved: _Saved) -> torch.Tensor:
    t = saved.tensor
    if t._version != saved.version:
        # autograd checks this itself only where no hooks are on
        raise RuntimeError(
            "one of the variables needed for gradient computation has been modified by an "
            f"inplace operation: [{t.type()} {list(t.shape)}] is at version {t._version}; "
            f"expected version {saved.version} instead (told by pytorch_memlab's "
            "saved-tensor hooks, which check what autograd checks without them)")
    return t


_hooks = torch._C._autograd
# where torch cannot say what is on top of the stack (before 2.8): ours are
# pushed and popped as if the stack were ours
_top_of = getattr(_hooks, "_top_saved_tensors_default_hooks", None)


def top_is(pack: Any) -> bool:
    """Is ``pack`` the pack hook on top of this thread's stack (None: the
    stack is empty)?"""
    if _top_of is None:
        return True
    top = _top_of(True)         # True: also while dynamo traces
    return top is None if pack is None else top is not None and top[0] is pack


def push() -> bool:
    """Our pack hook on this thread's stack, where the stack is empty: hooks
    of the user's own (``save_on_cpu``, offloading) or checkpointing's stay
    the ones autograd calls; False where none was pushed, or autograd refuses
    hooks now (functorch transforms)."""
    if not top_is(None):
        return False
    try:
        _hooks._push_saved_tensors_default_hooks(_pack, _unpack)
    except RuntimeError:
        return False
    return True


def pop() -> None:
    """Ours off the top of this thread's stack, if they are on top."""
    if top_is(_pack):
        _hooks._pop_saved_tensors_default_hooks()
