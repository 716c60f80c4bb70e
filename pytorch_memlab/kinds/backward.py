"""Which module's backward makes each block: as torch's ModTracker does, a
module's forward leaves hooks in the graph it builds, on its outputs (their
first gradient is ready: its backward begins) and on its inputs (the first
of theirs is: it has ended), and the thread that runs the backward
charges what it makes to the innermost module whose backward runs.  Hooks go
on tensors the forward made (not leaves: never on the user's tensors or
parameters), so they go with the graph; the thread's modules are dropped
when the backward ends.  A module whose inputs are leaves (the first layer)
ends with the backward pass."""
from __future__ import annotations

import threading
from typing import Any, Iterator

import torch

from ..sources import native

# .modules: (forward depth, number) of the modules whose backward runs, the
# deepest last: an outer module and its last layer share an output, whose
# hooks run in the order they were registered (the layer's first)
_local = threading.local()


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


def _graph_tensors(value: Any) -> list[torch.Tensor]:
    """The tensors of ``value`` a backward pass reaches through: made by the
    graph, not leaves."""
    return [t for t in _tensors(value) if t.requires_grad and t.grad_fn is not None]


def _stack() -> list[tuple[int, int]]:
    found: list[tuple[int, int]] = _local.__dict__.setdefault("modules", [])
    return found


def _ended() -> None:
    _stack().clear()
    native.set_module(0)


def forget() -> None:
    """This thread runs no module's backward (one that raised left its
    modules here: the end-of-backward callback never ran)."""
    _stack().clear()


def _begins(depth: int, number: int) -> None:
    stack = _stack()
    if (depth, number) in stack:
        return                          # another of its outputs
    if not stack:
        # the whole backward pass ends: its modules with it
        torch.autograd.Variable._execution_engine.queue_callback(_ended)
    at = len(stack)
    while at > 0 and stack[at - 1][0] > depth:
        at -= 1
    stack.insert(at, (depth, number))
    native.set_module(stack[-1][1])


def _ends(depth: int, number: int) -> None:
    stack = _stack()
    if (depth, number) in stack:
        del stack[len(stack) - 1 - stack[::-1].index((depth, number))]
    native.set_module(stack[-1][1] if stack else 0)


def current() -> int:
    """The number of the module whose backward this thread runs now (0: none)."""
    stack = _stack()
    return stack[-1][1] if stack else 0


def recomputes(number: int) -> None:
    """Activation checkpointing recomputes module ``number`` inside the
    backward node running now: it is charged with the recomputation and,
    until that node has run, with the node's backward (use_reentrant=True
    runs the region's whole backward there)."""
    stack = _stack()
    depth = stack[-1][0] + 1 if stack else 1
    _begins(depth, number)
    node = torch._C._current_autograd_node()
    if node is not None:
        node.register_hook(lambda grad_inputs, grad_outputs: _ends(depth, number))


def watch(depth: int, number: int, inputs: Any, outputs: Any) -> None:
    """A module (``number``, ``depth`` modules deep in the forward) ran from
    ``inputs`` to ``outputs``: charge its backward to it.  No-op where no
    gradient flows."""
    if not torch.is_grad_enabled():
        return
    outs = _graph_tensors(outputs)
    if not outs:
        return
    # plain tensor hooks that hold nothing but two numbers: no cycle through
    # the tensors (torch's "all" multi-grad hook holds their nodes), and cheap
    for t in outs:
        t.register_hook(lambda grad: _begins(depth, number))  # type: ignore[no-untyped-call]  # torch: unannotated
    for t in _graph_tensors(inputs):
        t.register_hook(lambda grad: _ends(depth, number))  # type: ignore[no-untyped-call]  # torch: unannotated
