"""Telling the tracer which blocks are which, while a profiled call runs.

Nothing is registered on the user's objects: global hooks, on only while a
profiler has a call running (``begin`` / ``end``), see every module and
optimizer.  The outermost module call of a thread tags its parameters,
buffers and gradients, and pushes a saved-tensors hook pair whose pack hook
tags each tensor autograd saves (returning it detached, which is what autograd
keeps anyway) until that module returns, unless the program's own pair is
on top (checkpointing's, ``save_on_cpu``); an optimizer's step tags its
parameters, gradients and state before and after (a closure may run the
backward inside ``step()``).  ``end`` tags the gradients and optimizer state
alive then.  A tag reaches back: a block tagged
now counts as that kind at every peak of the call it was alive at.

A region whose modules are not followed is charged to its outermost module
seen (``modules.stop``): a compiled module (its modules run inside the
compiled code), a module activation checkpointing recomputes in a backward
node (``backward.recomputes``).  Which blocks are tagged: ``storages``; the
saved-tensor hooks: ``saved``.
"""
from __future__ import annotations

import os
import threading
import weakref
from typing import TYPE_CHECKING, Any, Iterable, Optional

import torch

from ..common.tensors import grad_of
from ..sources import native
from . import backward, saved, storages
from .storages import blocks_of, tag_blocks
from .modules import number_of, stop

if TYPE_CHECKING:
    from torch.utils.hooks import RemovableHandle

    from ..line_profiler.tracers import TracerSet

# PYTORCH_MEMLAB_KINDS=0: no hooks, no kinds, no modules (the peaks then say
# the bytes tagged so far only: none)
ENABLED = os.environ.get("PYTORCH_MEMLAB_KINDS", "1") != "0"

_lock = threading.Lock()
_sets: tuple["TracerSet", ...] = ()        # profilers with a call running (replaced, not mutated)
_handles: list["RemovableHandle"] = []     # the hooks that start things
_post: Optional["RemovableHandle"] = None  # the module post hook: stays while a thread needs it
_pushed = 0                                 # threads inside a module our pre hook saw
_local = threading.local()                  # .modules, .numbers: this thread's modules
                                            # our pre hook saw; .pushed: saved hooks too
# seen since the first call began: an outermost module's parameters, buffers and
# gradients are tagged when first seen (a tag stays with its block); an
# optimizer's state when its count of tensors changes
_roots: "weakref.WeakSet[torch.nn.Module]" = weakref.WeakSet()
_optimizers: "weakref.WeakKeyDictionary[torch.optim.Optimizer, int]" = \
    weakref.WeakKeyDictionary()


def _running(sets: tuple["TracerSet", ...]) -> None:
    """_sets is ``sets`` from now on (_lock held)."""
    global _sets
    by_device: dict[str, list[native.Tracer]] = {}
    for tracers in sets:
        for where, tracer in zip(tracers.labels(), tracers.tracers):
            by_device.setdefault(where, []).append(tracer)
    _sets = sets
    storages.follow(by_device)


def tag(kind: Optional[str], tensors: Iterable[Optional[torch.Tensor]],
        only_from: Optional[str] = "", back: bool = True) -> None:
    """``tag_blocks`` of ``tensors``' storages."""
    if _sets:
        tag_blocks(kind, blocks_of(tensors), only_from, back)


def _compiling() -> bool:
    return bool(torch.compiler.is_compiling())


def _module_state(module: torch.nn.Module) -> None:
    params = list(module.parameters())
    tag("parameter", params)
    tag("buffer", module.buffers())
    tag("gradient", (grad_of(p) for p in params))


def _optimizer_state(opt: torch.optim.Optimizer) -> None:
    """Its gradients; its parameters when first seen; its state when first
    seen and whenever its count of tensors changed (Adam's first step)."""
    params = [p for group in opt.param_groups for p in group["params"]]
    known = _optimizers.get(opt)
    if known is None:
        tag("parameter", params)
    tag("gradient", (grad_of(p) for p in params))
    state = [v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    if known != len(state):
        tag("optimizer_state", state)
        _optimizers[opt] = len(state)


# ---- module hooks -----------------------------------------------------------------

def _module_pre(module: torch.nn.Module, args: Any) -> None:
    if not _sets or _compiling() or getattr(_local, "region", None) is not None:
        return              # inside a region: its outermost module is charged
    global _pushed
    modules: list[Any] = _local.__dict__.setdefault("modules", [])
    numbers: list[int] = _local.__dict__.setdefault("numbers", [])
    number = number_of(module, modules[-1] if modules else None)
    # a module called with none of ours running on the thread inside a
    # backward node: activation checkpointing recomputes it
    recomputed = not modules and torch._C._current_autograd_node() is not None
    if recomputed or type(module).__name__ == "OptimizedModule":
        inner = getattr(module, "_orig_mod", None)
        if not modules and not recomputed and isinstance(inner, torch.nn.Module):
            # a compiled model reads as the model it compiled (as its name does)
            number = number_of(inner, None)
        _local.region = module
        stop(number)
    if not modules:
        if not recomputed and module not in _roots:
            _roots.add(module)
            _module_state(module)
        # a compiled model's guards would see our hooks: it keeps what it compiled with
        _local.pushed = type(module).__name__ != "OptimizedModule" and saved.push()
        with _lock:
            _pushed += 1
    numbers.append(number)
    modules.append(module)
    if recomputed:
        backward.recomputes(number)
    else:
        native.set_module(number)


def _module_post(module: torch.nn.Module, args: Any, output: Any) -> None:
    if _compiling():
        return            # traced into compiled code: nothing to follow
    modules: list[Any] = getattr(_local, "modules", [])
    if not modules or modules[-1] is not module:
        return            # entered before our pre hook was on (or after it went)
    modules.pop()
    numbers: list[int] = _local.numbers
    recomputed = getattr(_local, "region", None) is module and \
        torch._C._current_autograd_node() is not None
    if getattr(_local, "region", None) is module:
        _local.region = None
    if _sets and not recomputed:
        backward.watch(len(numbers), numbers[-1], args, output)
    numbers.pop()
    native.set_module(numbers[-1] if numbers else backward.current())
    if not modules:
        if getattr(_local, "pushed", False):
            saved.pop()
            _local.pushed = False
        global _pushed
        with _lock:
            _pushed -= 1
            _drop_post_hook()


def _forget_thread() -> None:
    """A profiled call begins with none running (_lock held): what this
    thread still says of modules dates from a forward left without our post
    hook (torch runs it on Exception, not on KeyboardInterrupt) or a backward
    that raised: dropped, with our saved-tensor hooks if they are on top."""
    global _pushed
    if getattr(_local, "modules", None):
        _local.modules.clear()
        _local.numbers.clear()
        if getattr(_local, "pushed", False):
            saved.pop()
        _local.pushed = False
        _pushed = max(0, _pushed - 1)
    _local.region = None
    backward.forget()       # a backward that raised never reached its end
    native.set_module(0)


def _drop_post_hook() -> None:
    """The post hook goes once no profiler runs a call and no thread is
    still inside a module our pre hook saw (_lock held): it pops what that
    pushed (the module number, the saved-tensors hooks)."""
    global _post
    if not _sets and _pushed == 0 and _post is not None:
        _post.remove()
        _post = None


# ---- optimizer hooks ----------------------------------------------------------------

def _optimizer_pre(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    # once per optimizer: a tag reaches back, so what step() leaves alive is
    # told after it; before it only what it may free in its first step
    if _sets and not _compiling() and opt not in _optimizers:
        _optimizer_state(opt)


def _optimizer_post(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
    # gradients too: a closure (Lightning's) runs the backward inside step()
    if _sets and not _compiling():
        _optimizer_state(opt)


# ---- on and off ---------------------------------------------------------------------

def begin(tracers: "TracerSet") -> None:
    """A profiler's call begins: its tracers take tags, the hooks are on."""
    global _post
    if not ENABLED:
        return
    with _lock:
        if any(t is tracers for t in _sets):
            return
        if not _sets:
            _forget_thread()
        _running(_sets + (tracers,))
        if _handles:
            return
        from torch.nn.modules import module as nn_module
        from torch.optim import optimizer as optim_module
        _handles.extend([
            nn_module.register_module_forward_pre_hook(_module_pre),
            optim_module.register_optimizer_step_pre_hook(_optimizer_pre),
            optim_module.register_optimizer_step_post_hook(_optimizer_post)])
        if _post is None:
            _post = nn_module.register_module_forward_hook(_module_post, always_call=True)


def end(tracers: "TracerSet") -> None:
    """A profiler's last call ended (its tracers still attached): the
    gradients and optimizer state alive now are tagged, then it takes no more
    tags; the last one out takes the hooks off."""
    if not any(t is tracers for t in _sets):
        return
    for root in list(_roots):
        tag("gradient", (grad_of(p) for p in root.parameters()))
    for opt in list(_optimizers):
        _optimizer_state(opt)
    with _lock:
        _running(tuple(t for t in _sets if t is not tracers))
        if _sets:
            return
        for handle in _handles:
            handle.remove()
        _handles.clear()
        _roots.clear()
        _optimizers.clear()
        _drop_post_hook()


def hooks_on() -> bool:
    """Is any of our global hooks registered now?"""
    return bool(_handles) or _post is not None
