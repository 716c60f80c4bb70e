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
node (``backward.recomputes``).

Blocks are named by their storage's address, which is the allocator's block
on the CPU and for CUDA's caching allocator (a storage is one block); a CUDA
block's bytes are the storage's rounded up to the allocator's 512.
"""
from __future__ import annotations

import os
import threading
import weakref
from typing import TYPE_CHECKING, Any, Iterable, Optional

import torch

from ..common.tensors import grad_of
from ..sources import native
from . import backward
from .modules import number_of, stop
from .names import code_of

if TYPE_CHECKING:
    from torch.utils.hooks import RemovableHandle

    from ..line_profiler.tracers import TracerSet

CUDA_BLOCK_BYTES = 512
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


# {device: the tracers of _sets that follow it}: replaced with _sets
_by_device: dict[str, list[native.Tracer]] = {}


def _running(sets: tuple["TracerSet", ...]) -> None:
    """_sets is ``sets`` from now on (_lock held)."""
    global _sets, _by_device
    by_device: dict[str, list[native.Tracer]] = {}
    for tracers in sets:
        for where, tracer in zip(tracers.labels(), tracers.tracers):
            by_device.setdefault(where, []).append(tracer)
    _sets, _by_device = sets, by_device


# {device: ([addresses], [bytes])}: the blocks of some storages
Blocks = dict[str, tuple[list[int], list[int]]]


def blocks_of(tensors: Iterable[Optional[torch.Tensor]]) -> Blocks:
    """The blocks of ``tensors``' storages, by device: those the memory
    source counts; not memory a storage only wraps (numpy arrays, mapped
    files, DLPack imports), nor on the CPU a block made before the source
    that Python could not reach then (DDP's gradient buckets, held by its
    C++ reducer): no figure holds them."""
    groups: Blocks = {}
    for t in tensors:
        block = block_of(t)
        if block is not None:
            ptrs, sizes = groups.setdefault(block[0], ([], []))
            ptrs.append(block[1])
            sizes.append(block[2])
    return groups


def block_of(t: Optional[torch.Tensor]) -> Optional[tuple[str, int, int]]:
    """(device, address, bytes) of the block of ``t``'s storage, or None (see
    blocks_of)."""
    if t is None:
        return None
    try:
        storage = t.untyped_storage()
        if not storage.resizable() or (t.device.type == "cpu"
                                       and not native.cpu_counts(storage)):
            return None
        ptr, nbytes = storage.data_ptr(), int(storage.nbytes())
    except Exception:       # wrappers, subclasses and meta tensors: no storage
        return None
    if ptr == 0 or nbytes <= 0:
        return None
    if t.is_cuda:
        nbytes = -(-nbytes // CUDA_BLOCK_BYTES) * CUDA_BLOCK_BYTES
    return str(t.device), ptr, nbytes


def tag_blocks(kind: Optional[str], blocks: Blocks, only_from: Optional[str] = "",
               back: bool = True) -> None:
    """Tag ``blocks`` as ``kind`` (None: untagged) in every profiler with a
    call running; ``only_from``: only blocks of that kind now (None: untagged
    ones; "": any); ``back``: at the peaks since they were made too, else
    from now on."""
    number = code_of(kind) if kind is not None else 0
    old = -1 if only_from == "" else code_of(only_from) if only_from is not None else 0
    for device, (ptrs, sizes) in blocks.items():
        for tracer in _by_device.get(device, ()):
            native.tag_blocks(tracer, number, ptrs, sizes, old, back)


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


# ---- saved for backward -----------------------------------------------------------

# {(device, address): times saved and not yet unpacked}: one storage is often
# kept by two nodes (a Linear's input is the ReLU's output before it)
_saved: dict[tuple[str, int], int] = {}


SAVED = code_of("saved_for_backward")


def _tag_one(number: int, block: tuple[str, int, int], old: int, back: bool) -> None:
    """tag_blocks of one block, by kind numbers: the saved-tensor hooks' path."""
    for tracer in _by_device.get(block[0], ()):
        native.tag_blocks(tracer, number, (block[1],), (block[2],), old, back)


def _pack(t: torch.Tensor) -> torch.Tensor:
    block = block_of(t) if _sets and not _compiling() else None
    if block is not None:
        key = block[:2]
        with _lock:
            _saved[key] = _saved.get(key, 0) + 1
        _tag_one(SAVED, block, 0, True)     # untagged blocks only
    return t.detach()       # not t: the graph would hold the tensor that holds the graph


def _unpack(t: torch.Tensor) -> torch.Tensor:
    # the node that kept it runs its backward now, and autograd lets go of it
    # after: once every node that kept it has run, a block still alive is no
    # longer saved (from then on: at the peaks before, it was)
    block = block_of(t) if not _compiling() else None
    if block is None:
        return t
    key = block[:2]                       # numbers only: the hook must not keep t alive
    with _lock:
        left = _saved.pop(key, 0) - 1
        if left > 0:
            _saved[key] = left
    if left <= 0:
        node = torch._C._current_autograd_node()
        if node is None:
            _released(block)
        else:
            node.register_hook(lambda grad_inputs, grad_outputs: _released(block))
    return t


def _released(block: tuple[str, int, int]) -> None:
    if _sets:
        _tag_one(0, block, SAVED, False)


_hooks = torch._C._autograd


def _top_is(pack: Any) -> bool:
    """Is ``pack`` the pack hook on top of this thread's stack (None: the
    stack is empty)?  True where torch cannot tell and the stack is ours."""
    top_of = getattr(_hooks, "_top_saved_tensors_default_hooks", None)
    if top_of is None:
        return pack is None
    top = top_of(True)         # True: also while dynamo traces
    return top is None if pack is None else top is not None and top[0] is pack


def _push_saved() -> bool:
    """Our pack hook on this thread's stack, where the stack is empty: hooks
    of the user's own (``save_on_cpu``, offloading) stay the ones autograd
    calls, and ours already there need no second; False where none was
    pushed, or autograd refuses hooks now (functorch transforms)."""
    if not _top_is(None):
        return False
    try:
        _hooks._push_saved_tensors_default_hooks(_pack, _unpack)
    except RuntimeError:
        return False
    return True


def _pop_saved() -> bool:
    """Ours off the top of this thread's stack, if they are on top."""
    if not _top_is(_pack):
        return False
    _hooks._pop_saved_tensors_default_hooks()
    return True


def call_begins() -> None:
    """A profiled call (a decorated call or a generator's step, a ``with``
    block of a profiler) begins on this thread: what autograd saves outside
    every module is told too, until the matching ``call_ends`` (the two
    nest on one thread; not across an ``await``, where other tasks run)."""
    depth = _local.__dict__.get("calls", 0)
    _local.calls = depth + 1
    if depth == 0:
        _local.call_pushed = bool(_sets) and not _compiling() and _push_saved()


def call_ends() -> None:
    depth = _local.__dict__.get("calls", 0) - 1
    if depth < 0:
        return
    _local.calls = depth
    if depth == 0 and _local.__dict__.pop("call_pushed", False):
        _pop_saved()


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
        _local.region = module
        stop(number)
    if not modules:
        if not recomputed and module not in _roots:
            _roots.add(module)
            _module_state(module)
        if type(module).__name__ == "OptimizedModule":
            # its guards would see our hooks: it keeps what it compiled with
            _local.pushed, _local.lent = False, _pop_saved()
        else:
            _local.pushed, _local.lent = _push_saved(), False
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
            _pop_saved()
            _local.pushed = False
        if getattr(_local, "lent", False):
            _push_saved()           # the call's own, back after the compiled model
            _local.lent = False
        global _pushed
        with _lock:
            _pushed -= 1
            _drop_post_hook()


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
        _saved.clear()
        _drop_post_hook()


def hooks_on() -> bool:
    """Is any of our global hooks registered now?"""
    return bool(_handles) or _post is not None
