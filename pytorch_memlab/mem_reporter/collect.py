"""Turning the tensors a report finds into rows: named ones first (the model,
the optimizers, ``outputs=`` and what their autograd graph saved, the
variables of the calling frames), then every other live tensor; each storage
charged once, to its first row."""
from __future__ import annotations

from collections import deque
from typing import Any, Callable, Iterator, Optional

import torch

from ..common.frames import caller_frames, frame_tensors
from ..common.tensors import StorageKey, grad_of, is_tensor, storage_of
from ..kinds.names import GRADIENT, OTHER, SAVED_FOR_BACKWARD
from ..sources import native
from .rows import TensorRow

# Components of each sparse layout and of a jagged nested tensor, as (row
# suffix, accessor); an accessor giving None (no lengths) gives no row.
_Part = tuple[str, Callable[[torch.Tensor], Optional[torch.Tensor]]]
_COMPRESSED_ROWS: tuple[_Part, ...] = (("crow_indices", lambda t: t.crow_indices()),
                                       ("col_indices", lambda t: t.col_indices()),
                                       ("values", lambda t: t.values()))
_COMPRESSED_COLS: tuple[_Part, ...] = (("ccol_indices", lambda t: t.ccol_indices()),
                                       ("row_indices", lambda t: t.row_indices()),
                                       ("values", lambda t: t.values()))
_SPARSE_PARTS: dict[torch.layout, tuple[_Part, ...]] = {
    torch.sparse_coo: (("indices", lambda t: t._indices()), ("values", lambda t: t._values())),
    torch.sparse_csr: _COMPRESSED_ROWS, torch.sparse_bsr: _COMPRESSED_ROWS,
    torch.sparse_csc: _COMPRESSED_COLS, torch.sparse_bsc: _COMPRESSED_COLS,
}
if hasattr(torch, "jagged"):
    # the tensors it holds (a wrapper subclass: no storage of its own)
    _SPARSE_PARTS[torch.jagged] = (("values", lambda t: getattr(t, "_values")),
                                   ("offsets", lambda t: getattr(t, "_offsets")),
                                   ("lengths", lambda t: getattr(t, "_lengths")))


def _shape_of(t: torch.Tensor) -> tuple[int, ...]:
    """t's shape; -1 marks a ragged dimension of a nested tensor (strided nested
    tensors have no ``shape`` at all, jagged ones a symbolic size).  Read with
    ``size(dim)``, which makes no tensor: ``_nested_tensor_size()`` would make
    one that the nested tensor keeps alive, for the walk to find as a tensor
    of its own."""
    out = []
    for dim in range(t.dim()):
        try:
            out.append(int(t.size(dim)))
        except Exception:   # irregular (strided nested) or symbolic (jagged)
            out.append(-1)
    return tuple(out)


class Collector:
    """Turns tensors into rows; holds strong references only until release()."""

    def __init__(self) -> None:
        self.rows: list[TensorRow] = []
        self.skipped = 0
        self._keep: list[object] = []            # Owned: keeps every id() below valid.
        self._seen: set[int] = set()             # id() of tensor objects already listed
        self.storages: dict[StorageKey, tuple[int, str]] = {}   # key -> (storage id, owner name)
        self._sort: list[tuple[float, int]] = []   # per row: (storage order, row order)
        self._type_count: dict[str, int] = {}

    def release(self) -> None:
        self._keep.clear()
        self._seen.clear()

    def kept_tensors(self) -> Iterator[torch.Tensor]:
        for obj in self._keep:
            if is_tensor(obj):
                yield obj  # type: ignore[misc]
            elif isinstance(obj, list):
                yield from (o for o in obj if is_tensor(o))

    def storage_ptrs(self) -> dict[str, list[int]]:
        """Addresses of the storages found, per device."""
        out: dict[str, list[int]] = {}
        for device, ptr in self.storages:
            if device != "impl":
                out.setdefault(device, []).append(ptr)
        return out

    def seen(self, t: object) -> bool:
        return id(t) in self._seen

    def hold(self, obj: object) -> None:
        self._keep.append(obj)

    def anonymous_name(self, t: torch.Tensor) -> str:
        kind = type(t).__name__
        n = self._type_count.get(kind, 0)
        self._type_count[kind] = n + 1
        return f"{kind}{n}"

    def add(self, t: torch.Tensor, name: str, kind: str, repeat: bool = False) -> None:
        """List t (then its .grad). repeat=True lists an already seen object again under a
        second name (tied weights), without its grad."""
        if id(t) in self._seen:
            if repeat:
                self._rows_for(t, name, kind)
            return
        self._seen.add(id(t))
        self._keep.append(t)
        self._rows_for(t, name, kind)
        grad = grad_of(t)
        if grad is not None:
            self.add(grad, f"{name}.grad", GRADIENT)

    def _rows_for(self, t: torch.Tensor, name: str, kind: str) -> None:
        try:
            parts = _SPARSE_PARTS.get(t.layout)
            if parts is None:
                self._row(t, name, kind)
                return
            for suffix, get in parts:
                part = get(t)
                if part is None:
                    continue
                self._keep.append(part)
                self._seen.add(id(part))
                self._row(part, f"{name}.{suffix}", kind)
        except Exception:
            self.skipped += 1

    def _row(self, t: torch.Tensor, name: str, kind: str) -> None:
        device = str(t.device)
        dtype = str(t.dtype).replace("torch.", "")
        shape = _shape_of(t)
        numel = int(t.numel())
        found = storage_of(t)
        order = len(self.rows)
        if found is None:
            row = TensorRow(name, device, dtype, shape, numel, 0, 0, None, kind)
            self._sort.append((len(self.storages) - 0.5, order))   # after the last storage
        else:
            key, nbytes = found
            owner = self.storages.get(key)
            if owner is None:
                sid = len(self.storages)
                self.storages[key] = (sid, name)
                row = TensorRow(name, device, dtype, shape, numel, nbytes, nbytes, sid, kind)
            else:
                sid, owner_name = owner
                row = TensorRow(name, device, dtype, shape, numel, 0, nbytes, sid, kind,
                                alias_of=owner_name)
            self._sort.append((sid, order))
        self.rows.append(row)

    def sorted_rows(self) -> list[TensorRow]:
        """Rows per device (cpu, then cuda by index, then the rest), then per storage."""
        def key(i: int) -> tuple[Any, ...]:
            dev = torch.device(self.rows[i].device)
            return (dev.type != "cpu", dev.type, -1 if dev.index is None else dev.index,
                    self._sort[i])
        return [self.rows[i] for i in sorted(range(len(self.rows)), key=key)]


def iter_outputs(outputs: Any) -> Iterator[torch.Tensor]:
    """Tensors in a tensor / list / tuple / dict nest (e.g. a loss, or a model's outputs)."""
    stack = [outputs]
    while stack:
        item = stack.pop()
        if is_tensor(item):
            yield item
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
        elif item is not None:
            raise TypeError(f"outputs= takes a tensor or a list/tuple/dict of tensors "
                            f"(e.g. the loss), got {type(item).__name__}")


def _saved_attrs(node: Any) -> list[str]:
    """Attributes of an autograd node that hold what it saved for backward."""
    if hasattr(node, "_forward_cls"):      # a custom autograd.Function: its ctx
        try:
            return ["saved_tensors"] + list(vars(node))
        except TypeError:
            return ["saved_tensors"]
    return [a for a in dir(node) if a.startswith("_saved_")]


def _add_saved(col: Collector, node: Any, label: str) -> None:
    for attr in _saved_attrs(node):
        try:
            value = getattr(node, attr)
        except RuntimeError:
            # freed by backward() (no memory left), or modified in place since (then the
            # storage belongs to a live tensor found elsewhere)
            continue
        except Exception:
            col.skipped += 1
            continue
        short = attr[len("_saved_"):] if attr.startswith("_saved_") else attr
        if is_tensor(value):
            col.add(value, f"{label}.{short}", SAVED_FOR_BACKWARD)
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                if is_tensor(item):
                    col.add(item, f"{label}.{short}[{i}]", SAVED_FOR_BACKWARD)


def walk_graph(col: Collector, tensors: list[torch.Tensor]) -> None:
    """Lists the outputs (``output``, ``output[i]``; kind other: no role in the
    model's memory, their name says what they are), then the tensors saved by every
    node reachable from their grad_fn, breadth first, as ``NodeName.attr``; the k-th
    further node of one type is ``NodeName[k]``."""
    for i, t in enumerate(tensors):
        col.add(t, "output" if len(tensors) == 1 else f"output[{i}]", OTHER)
    queue = deque(t.grad_fn for t in tensors if t.grad_fn is not None)
    visited: set[int] = set()
    per_type: dict[str, int] = {}
    while queue:
        node = queue.popleft()
        if id(node) in visited:
            continue
        visited.add(id(node))
        col.hold(node)                   # keeps id(node) unique until release()
        try:
            base = node.name()
        except Exception:
            base = type(node).__name__
        n = per_type.get(base, 0)
        per_type[base] = n + 1
        _add_saved(col, node, base if n == 0 else f"{base}[{n}]")
        try:
            queue.extend(nxt for nxt, _ in node.next_functions if nxt is not None)
        except Exception:
            col.skipped += 1


def walk_frames(col: Collector) -> None:
    """The tensors held by variables of the frames calling the report, named
    after them (``activations``, ``xs[0]``, ``net.0.weight``); one already
    listed (a parameter, an output) keeps its name.  A tensor held by two
    variables gets a row per variable (the second as an alias of the first);
    a module's parameters and list items are named once."""
    mine: set[int] = set()        # found here: a second variable lists it again
    for name, tensor, _, var in frame_tensors(caller_frames()):
        if not col.seen(tensor):
            mine.add(id(tensor))
            col.add(tensor, name, OTHER)
        elif id(tensor) in mine and name == var:
            col.add(tensor, name, OTHER, repeat=True)


def walk_gc(col: Collector) -> None:
    """Every other tensor Python can see; a tensor that is another's .grad is listed
    under that owner's name."""
    tensors = native.instances_of(torch.Tensor)
    col.hold(tensors)
    grad_ids = set()
    for t in tensors:
        grad = grad_of(t)
        if grad is not None:
            col.hold(grad)
            grad_ids.add(id(grad))
    for t in tensors:
        if not col.seen(t) and id(t) not in grad_ids:
            col.add(t, col.anonymous_name(t), OTHER)
    for t in tensors:                     # grads whose owner was never listed (cycles)
        if not col.seen(t):
            col.add(t, col.anonymous_name(t), OTHER)


def graph_roots(col: Collector) -> list[torch.Tensor]:
    """The tensors found that have an autograd graph behind them."""
    roots = []
    for t in col.kept_tensors():
        try:
            if t.grad_fn is not None:
                roots.append(t)
        except Exception:   # a tensor subclass whose grad_fn cannot be read
            continue
    return roots


def graph_ptrs(col: Collector) -> dict[tuple[str, int], str]:
    """(device, address) -> name of the storages saved for backward by the
    graphs behind the tensors found (outputs= not given)."""
    ghost = Collector()
    try:
        walk_graph(ghost, graph_roots(col))
        out: dict[tuple[str, int], str] = {}
        for (device, ptr), (_, name) in ghost.storages.items():
            if device != "impl":
                out[(device, ptr)] = name
        return out
    finally:
        ghost.release()


def cpu_storages() -> list[torch.UntypedStorage]:
    """The distinct storages of the CPU tensors a report finds (every live
    tensor, grads and sparse parts, and what autograd saved behind them):
    what the CPU counting wrapper counts as live when it starts."""
    col = Collector()
    ghost = Collector()
    try:
        walk_gc(col)
        walk_graph(ghost, graph_roots(col))
        found: dict[int, torch.UntypedStorage] = {}
        for t in [*col.kept_tensors(), *ghost.kept_tensors()]:
            try:
                if t.device.type != "cpu" or t.layout != torch.strided:
                    continue
                storage = t.untyped_storage()
                found.setdefault(int(storage._cdata), storage)
            except Exception:
                continue
        return list(found.values())
    finally:
        col.release()
        ghost.release()
