"""MemReporter itself: what to name (a model, its optimizers, a forward's
outputs), the walk in that order, and the report."""
from __future__ import annotations

import gc
import sys
import weakref
from itertools import chain
from typing import Any, Callable, Optional

import torch

from ..common.devices import DeviceSpec, device_matches
from ..common.tensors import is_tensor
from ..kinds.names import BUFFER, OPTIMIZER_STATE, PARAMETER
from . import allocator, blocks
from .collect import Collector, iter_outputs, walk_frames, walk_gc, walk_graph
from .report import MemReport
from .rows import parse_filter
from .sites import add_sites


def _weak(obj: Any) -> Callable[[], Any]:
    try:
        return weakref.ref(obj)
    except TypeError:   # not weak-referenceable: hold it (the user asked us to name it)
        return lambda: obj


class MemReporter:
    """Reports the tensors that hold memory, named after a model and its optimizers.

    Args:
        model: a ``torch.nn.Module`` whose parameter and buffer names are used (held by
            weak reference: keep it alive yourself).
        pre_collect: run ``gc.collect()`` before each report, so tensors in unreachable
            reference cycles (garbage not yet collected) are freed instead of listed.
        record_history: on CUDA, start recording the Python stack of every allocation
            (``torch.cuda.memory._record_memory_history``), so that blocks no tensor
            explains name the line that allocated them.  No effect without CUDA.
    """

    def __init__(self, model: Optional[torch.nn.Module] = None, pre_collect: bool = False,
                 record_history: bool = False) -> None:
        if model is not None and not isinstance(model, torch.nn.Module):
            raise TypeError(f"MemReporter(model=...) takes a torch.nn.Module or None, got "
                            f"{type(model).__name__}; pass the model whose parameters should be "
                            f"named, e.g. MemReporter(net)")
        self._model = _weak(model) if model is not None else (lambda: None)
        self._optimizers: list[Callable[[], Any]] = []
        self.pre_collect = pre_collect
        if record_history:
            blocks.start_recording()

    def add_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Name the optimizer's state tensors ``<OptimizerClass>.<param name>.<state key>``."""
        if not (hasattr(optimizer, "state") and hasattr(optimizer, "param_groups")):
            raise TypeError(f"add_optimizer() takes a torch.optim.Optimizer, got "
                            f"{type(optimizer).__name__}")
        self._optimizers.append(_weak(optimizer))

    def report(self, verbose: bool = False, device: Optional[DeviceSpec] = None,
               module: Optional[torch.nn.Module] = None, outputs: Any = None,
               print_report: bool = True) -> MemReport:
        """Find the tensors, print the table (unless ``print_report=False``) and return it.

        Args:
            verbose: also list rows whose storage was already counted, as ``name(->owner)``.
            device: only this device: 'cpu', 'cuda' (every CUDA device), 'cuda:1', an int
                (a CUDA index) or a torch.device.
            module: only this module's parameters, their grads, its buffers and the
                optimizer state of its parameters (names come from the model when the
                module is part of it). Other tensors are not walked.
            outputs: a forward pass's result (a tensor or a nest of them, e.g. the loss):
                tensors its autograd graph saved for backward are listed as
                ``NodeName.attr``, e.g. ``AddmmBackward0.mat1``.
            print_report: print ``str(result)`` to stdout (the old tool's behaviour).
        """
        want = parse_filter(device, "report(device=...)")
        out_tensors = list(iter_outputs(outputs))
        if module is not None and not isinstance(module, torch.nn.Module):
            raise TypeError(f"report(module=...) takes a torch.nn.Module, got {type(module).__name__}")
        if self.pre_collect:
            gc.collect()
        col = Collector()
        split: dict[str, blocks.DeviceBlocks] = {}
        allocated: Optional[dict[str, int]] = None
        try:
            self._walk(col, module, out_tensors)
            rows = add_sites([r for r in col.sorted_rows()
                              if want is None or device_matches(want, torch.device(r.device))],
                             col.storages)
            skipped = col.skipped
            if module is None:   # a scoped report leaves the rest of the device out
                split = allocator.split_blocks(col, want, walk_graph=not out_tensors)
                allocated = allocator.cuda_allocated()   # read while the found tensors are held
        finally:
            col.release()
            del out_tensors
        result = MemReport(rows, allocator.totals(rows, want, module is not None, split, allocated),
                           verbose, skipped, [b for d in split.values() for b in d.other])
        if print_report:
            print(result, file=sys.stdout)
        return result

    def _walk(self, col: Collector, module: Optional[torch.nn.Module],
              outputs: list[torch.Tensor]) -> None:
        model = self._model()
        source = model if model is not None else module
        scope: Optional[set[int]] = None
        if module is not None:
            scope = {id(t) for t in chain(module.parameters(), module.buffers())}
            if model is not None and not any(m is module for m in model.modules()):
                source = module
        names: dict[int, str] = {}     # id(param) -> its first name; ids stay valid (col holds)
        if source is not None:
            for name, p in source.named_parameters(remove_duplicate=False):
                if scope is None or id(p) in scope:
                    names.setdefault(id(p), name)
                    col.add(p, name, PARAMETER, repeat=True)
            for name, b in source.named_buffers(remove_duplicate=False):
                if scope is None or id(b) in scope:
                    col.add(b, name, BUFFER, repeat=True)
        self._walk_optimizers(col, names, scope)
        if outputs:
            walk_graph(col, outputs)
        if scope is None:
            walk_frames(col)
            walk_gc(col)

    def _walk_optimizers(self, col: Collector, names: dict[int, str],
                         scope: Optional[set[int]]) -> None:
        per_class: dict[str, int] = {}
        for ref in self._optimizers:
            opt = ref()
            if opt is None:
                continue
            cls = type(opt).__name__
            n = per_class.get(cls, 0)
            per_class[cls] = n + 1
            label = cls if n == 0 else f"{cls}[{n}]"
            params = [p for group in opt.param_groups for p in group["params"]]
            for i, p in enumerate(params):
                if scope is not None and id(p) not in scope:
                    continue
                pname = names.get(id(p))
                if pname is None:
                    pname = f"params[{i}]"
                    if scope is None:
                        col.add(p, f"{label}.{pname}", PARAMETER)
                state = opt.state.get(p, {})
                for key, value in state.items():
                    if is_tensor(value):
                        col.add(value, f"{label}.{pname}.{key}", OPTIMIZER_STATE)
