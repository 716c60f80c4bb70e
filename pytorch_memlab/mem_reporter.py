"""MemReporter: which tensors hold the memory right now.

A report lists tensors found from four sources, in this order:

1. the model's parameters (each followed by its ``.grad``) and buffers,
2. the state of every optimizer given to :meth:`MemReporter.add_optimizer`,
3. the ``outputs=`` tensors, then the tensors their autograd graph saved for
   backward (``AddmmBackward0.mat1``),
4. every other tensor the garbage collector knows of, numbered per type
   (``Tensor0``, ``Parameter0``, ...), each followed by its ``.grad``.

On a CUDA device, the allocator's own blocks (``torch.cuda.memory._snapshot()``) are
matched against the storages found: every other active block is listed with its size,
stream and, where it can be known, what it is (see ``_blocks``), so that the blocks
add up to ``torch.cuda.memory_allocated()`` exactly.

Rows are then grouped per device (cpu, cuda:0, cuda:1, ...) and, within a
device, per storage in the order storages were first met.

Bytes are exact: each storage (``untyped_storage().nbytes()``) is charged once,
to the first row that uses it; later rows on the same storage (views, tied
weights, a saved tensor that is a parameter) cost 0 bytes and name their owner
as ``name(->owner)`` in verbose mode.

The reporter holds only weak references to the model and optimizers, and a
report holds no tensor: strong references live only while ``report()`` runs.
"""
from __future__ import annotations

import functools
import gc
import json
import sys
import weakref
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple, Union

import torch

from . import _blocks
from ._blocks import BlockRow, DeviceBlocks

__all__ = ["MemReporter", "MemReport", "TensorRow", "DeviceTotal", "BlockRow"]

# The CUDA caching allocator hands out blocks in multiples of this many bytes.
CUDA_BLOCK_BYTES = 512

# Components of each sparse layout, as (row suffix, accessor).
_SPARSE_PARTS: Dict[torch.layout, Tuple[Tuple[str, Callable[[torch.Tensor], torch.Tensor]], ...]] = {
    torch.sparse_coo: (("indices", lambda t: t._indices()), ("values", lambda t: t._values())),
    torch.sparse_csr: (("crow_indices", lambda t: t.crow_indices()),
                       ("col_indices", lambda t: t.col_indices()),
                       ("values", lambda t: t.values())),
    torch.sparse_bsr: (("crow_indices", lambda t: t.crow_indices()),
                       ("col_indices", lambda t: t.col_indices()),
                       ("values", lambda t: t.values())),
    torch.sparse_csc: (("ccol_indices", lambda t: t.ccol_indices()),
                       ("row_indices", lambda t: t.row_indices()),
                       ("values", lambda t: t.values())),
    torch.sparse_bsc: (("ccol_indices", lambda t: t.ccol_indices()),
                       ("row_indices", lambda t: t.row_indices()),
                       ("values", lambda t: t.values())),
}

DeviceLike = Union[None, str, int, torch.device]


# --------------------------------------------------------------------------- result


@dataclass(frozen=True)
class TensorRow:
    """One tensor (or one component of a sparse tensor) in a report."""

    name: str
    device: str
    dtype: str                       # "float32", not "torch.float32"
    shape: Tuple[int, ...]
    numel: int
    bytes: int                       # bytes charged here: the storage size on its first row, else 0
    storage_bytes: int               # untyped_storage().nbytes(), on every row of the storage
    storage_id: Optional[int]        # storage number within this report; None: no storage
    kind: str                        # param, buffer, grad, optimizer, output, saved, tensor
    alias_of: Optional[str] = None   # owner row's name when the storage was already counted

    def display_name(self, verbose: bool) -> str:
        if verbose and self.alias_of is not None:
            return f"{self.name}(->{self.alias_of})"
        return self.name


@dataclass(frozen=True)
class DeviceTotal:
    """Totals of one device; the allocator fields are set for CUDA devices only."""

    device: str
    tensors: int                          # rows on this device
    storages: int                         # distinct storages
    bytes: int                            # exact sum of storage sizes
    block_bytes: Optional[int] = None     # allocator blocks backing those storages
    allocator_bytes: Optional[int] = None  # torch.cuda.memory_allocated(device)
    note: Optional[str] = None            # one line explaining allocator_bytes - block_bytes
    other_block_bytes: Optional[int] = None    # allocated blocks no found tensor holds
    awaiting_free_bytes: Optional[int] = None  # freed blocks another stream still uses


class MemReport:
    """The result of :meth:`MemReporter.report`: rows grouped per device and per storage.

    ``str(report)`` is the printed table; ``to_dicts()`` / ``to_json()`` give the same
    data without formatting.
    """

    def __init__(self, rows: List[TensorRow], devices: List[DeviceTotal],
                 verbose: bool = False, skipped: int = 0,
                 blocks: Optional[List[BlockRow]] = None) -> None:
        self.rows = rows
        self.devices = devices
        self.blocks = list(blocks or [])   # CUDA blocks no found tensor holds
        self.verbose = verbose
        self.skipped = skipped  # objects that raised while being inspected

    @property
    def total_bytes(self) -> int:
        return sum(d.bytes for d in self.devices)

    def rows_on(self, device: DeviceLike) -> List[TensorRow]:
        want = _parse_device(device)
        return [r for r in self.rows if want is None or _device_matches(want, torch.device(r.device))]

    def row(self, name: str) -> TensorRow:
        """The row called ``name``; KeyError if there is none."""
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(name)

    def to_dicts(self) -> List[Dict[str, Any]]:
        out = []
        for r in self.rows:
            d = asdict(r)
            d["shape"] = list(r.shape)
            out.append(d)
        return out

    def to_json(self, **dumps_kwargs: Any) -> str:
        return json.dumps({"devices": [asdict(d) for d in self.devices],
                           "rows": self.to_dicts(),
                           "blocks": [asdict(b) for b in self.blocks],
                           "skipped": self.skipped}, **dumps_kwargs)

    def format(self, verbose: Optional[bool] = None) -> str:
        return _format(self, self.verbose if verbose is None else verbose)

    def __str__(self) -> str:
        return self.format()

    def __repr__(self) -> str:
        return (f"<MemReport: {len(self.rows)} rows on {len(self.devices)} device(s), "
                f"{self.total_bytes} bytes>")


def readable_size(num_bytes: float) -> str:
    """1536 -> '1.50 KiB'."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(num_bytes) < 1024:
            return f"{int(num_bytes)} B" if unit == "B" else f"{num_bytes:.2f} {unit}"
        num_bytes /= 1024
    return f"{num_bytes:.2f} TiB"


def _format(report: MemReport, verbose: bool) -> str:
    shown = [r for r in report.rows if verbose or r.alias_of is None]
    name_w = min(60, max([len(r.display_name(verbose)) for r in shown] + [24])) + 2
    fmt = "{:<%d}{:<10}{:<9}{:>14}{:>11}{:>9}" % name_w
    width = name_w + 53
    rule = "-" * width
    lines = [fmt.format("Element type", "Kind", "DType", "Size", "Used MEM", "Storage"), rule]
    if not report.devices:
        lines += ["No tensors found", rule]
    for total in report.devices:
        lines.append(f"Storage on {total.device}")
        hidden = 0
        for r in report.rows:
            if r.device != total.device:
                continue
            if r.alias_of is not None and not verbose:
                hidden += 1
                continue
            storage = "-" if r.storage_id is None else f"#{r.storage_id}"
            lines.append(fmt.format(r.display_name(verbose), r.kind, r.dtype,
                                    str(r.shape), readable_size(r.bytes), storage))
        lines.append(rule)
        summary = (f"Total Tensors: {total.tensors}  Storages: {total.storages}  "
                   f"Used Memory: {readable_size(total.bytes)} ({total.bytes:,} bytes)")
        if hidden:
            summary += f"  [{hidden} rows sharing a storage above; verbose=True lists them]"
        lines.append(summary)
        if total.other_block_bytes is not None:
            lines += _block_lines(report, total, rule)
        elif total.allocator_bytes is not None and total.block_bytes is not None:
            lines.append(f"Allocated on {total.device} (torch.cuda.memory_allocated): "
                         f"{readable_size(total.allocator_bytes)} ({total.allocator_bytes:,} bytes)")
            lines.append(f"Found storages in {CUDA_BLOCK_BYTES}-byte blocks: "
                         f"{readable_size(total.block_bytes)} ({total.block_bytes:,} bytes)")
            lines.append(str(total.note))
        lines.append(rule)
    if report.skipped:
        lines.append(f"{report.skipped} object(s) raised while being inspected and are not listed")
    return "\n".join(lines)


def _sized(num_bytes: int) -> str:
    return f"{readable_size(num_bytes)} ({num_bytes:,} bytes)"


def _block_lines(report: MemReport, total: DeviceTotal, rule: str) -> List[str]:
    """The allocator's blocks on a CUDA device: those no found tensor holds, then
    the sum that makes up torch.cuda.memory_allocated."""
    lines = []
    mine = [b for b in report.blocks if b.device == total.device]
    if mine:
        lines.append(rule)
        lines.append(f"Allocator blocks not held by a visible tensor on {total.device}")
        lines.append("{:>6}  {:>12}  {:<14}  {}".format("Blocks", "Size each", "Stream", "What"))
        for count, b in _blocks.grouped(mine):
            what = [b.label] if b.label else []
            if b.allocated_at:
                what.append(f"allocated at {b.allocated_at}")
            text = "; ".join(what) or "unknown (MemReporter(record_history=True) names its line)"
            lines.append("{:>6}  {:>12}  {:<14}  {}".format(
                count, readable_size(b.size), _blocks.stream_name(b.stream), text))
        lines.append(rule)
    allocated = total.allocator_bytes or 0
    held, other = total.block_bytes or 0, total.other_block_bytes or 0
    lines.append(f"Allocated on {total.device} (torch.cuda.memory_allocated): {_sized(allocated)}")
    lines.append(f"  = blocks backing the storages above:      {_sized(held)}")
    lines.append(f"  + blocks not held by a visible tensor:    {_sized(other)}")
    if total.awaiting_free_bytes:
        lines.append(f"Freed blocks still used by another stream (not allocated): "
                     f"{_sized(total.awaiting_free_bytes)}")
    lines.append(str(total.note))
    return lines


# --------------------------------------------------------------------------- walk


def _is_tensor(obj: object) -> bool:
    # type() never runs user code: isinstance() would read obj.__class__, which raises
    # on a dead weakref.proxy (and can run any __getattr__).
    try:
        return issubclass(type(obj), torch.Tensor)
    except Exception:
        return False


def _grad_of(t: torch.Tensor) -> Optional[torch.Tensor]:
    """``t.grad`` without the non-leaf warning; None where there is none or it raises."""
    try:
        if not (t.is_leaf or t.retains_grad):
            return None
        grad = t.grad
    except Exception:
        return None
    return grad if _is_tensor(grad) else None


def _shape_of(t: torch.Tensor) -> Tuple[int, ...]:
    """t's shape; -1 marks a ragged dimension of a nested tensor (strided nested
    tensors have no ``shape`` at all, jagged ones a symbolic size)."""
    if t.is_nested and t.layout == torch.strided:
        sizes = t._nested_tensor_size().tolist()
        inner = [col[0] if len(set(col)) == 1 else -1 for col in zip(*sizes)]
        return (len(sizes), *inner) if sizes else (0,)
    out = []
    for s in t.shape:
        try:
            out.append(int(s))
        except Exception:   # a jagged dimension (SymInt)
            out.append(-1)
    return tuple(out)


def _storage_of(t: torch.Tensor) -> Optional[Tuple[Any, int]]:
    """(identity key, nbytes) of t's storage, or None for a tensor without one
    (meta tensors have a nominal size but hold no memory)."""
    if t.device.type == "meta":
        return None
    try:
        storage = t.untyped_storage()
        nbytes = int(storage.nbytes())
        ptr = storage.data_ptr()
        # Same memory is the same storage; empty and meta storages have no address.
        key = (str(t.device), ptr) if ptr else ("impl", storage._cdata)
    except Exception:
        return None
    return key, nbytes


class _Collector:
    """Turns tensors into rows; holds strong references only until release()."""

    def __init__(self) -> None:
        self.rows: List[TensorRow] = []
        self.skipped = 0
        self._keep: List[object] = []            # Owned: keeps every id() below valid.
        self._seen: set = set()                  # id() of tensor objects already listed
        self._storages: Dict[Any, Tuple[int, str]] = {}   # key -> (storage id, owner name)
        self._sort: List[Tuple[float, int]] = []   # per row: (storage order, row order)
        self._type_count: Dict[str, int] = {}

    def release(self) -> None:
        self._keep.clear()
        self._seen.clear()

    def kept_tensors(self) -> Iterator[torch.Tensor]:
        for obj in self._keep:
            if _is_tensor(obj):
                yield obj  # type: ignore[misc]
            elif isinstance(obj, list):
                yield from (o for o in obj if _is_tensor(o))

    def storage_ptrs(self) -> Dict[str, List[int]]:
        """Addresses of the storages found, per device."""
        out: Dict[str, List[int]] = {}
        for key in self._storages:
            if key[0] != "impl":
                out.setdefault(key[0], []).append(key[1])
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
        grad = _grad_of(t)
        if grad is not None:
            self.add(grad, f"{name}.grad", "grad")

    def _rows_for(self, t: torch.Tensor, name: str, kind: str) -> None:
        try:
            parts = _SPARSE_PARTS.get(t.layout)
            if parts is None:
                self._row(t, name, kind)
                return
            for suffix, get in parts:
                part = get(t)
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
        found = _storage_of(t)
        order = len(self.rows)
        if found is None:
            row = TensorRow(name, device, dtype, shape, numel, 0, 0, None, kind)
            self._sort.append((len(self._storages) - 0.5, order))   # after the last storage
        else:
            key, nbytes = found
            owner = self._storages.get(key)
            if owner is None:
                sid = len(self._storages)
                self._storages[key] = (sid, name)
                row = TensorRow(name, device, dtype, shape, numel, nbytes, nbytes, sid, kind)
            else:
                sid, owner_name = owner
                row = TensorRow(name, device, dtype, shape, numel, 0, nbytes, sid, kind,
                                alias_of=owner_name)
            self._sort.append((sid, order))
        self.rows.append(row)

    def sorted_rows(self) -> List[TensorRow]:
        """Rows per device (cpu, then cuda by index, then the rest), then per storage."""
        def key(i: int) -> Tuple[Any, ...]:
            dev = torch.device(self.rows[i].device)
            return (dev.type != "cpu", dev.type, -1 if dev.index is None else dev.index,
                    self._sort[i])
        return [self.rows[i] for i in sorted(range(len(self.rows)), key=key)]


def _iter_outputs(outputs: Any) -> Iterator[torch.Tensor]:
    """Tensors in a tensor / list / tuple / dict nest (e.g. a loss, or a model's outputs)."""
    stack = [outputs]
    while stack:
        item = stack.pop()
        if _is_tensor(item):
            yield item
        elif isinstance(item, dict):
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, (list, tuple)):
            stack.extend(reversed(item))
        elif item is not None:
            raise TypeError(f"outputs= takes a tensor or a list/tuple/dict of tensors "
                            f"(e.g. the loss), got {type(item).__name__}")


def _saved_attrs(node: Any) -> List[str]:
    """Attributes of an autograd node that hold what it saved for backward."""
    if hasattr(node, "_forward_cls"):      # a custom autograd.Function: its ctx
        try:
            return ["saved_tensors"] + list(vars(node))
        except TypeError:
            return ["saved_tensors"]
    return [a for a in dir(node) if a.startswith("_saved_")]


def _add_saved(col: _Collector, node: Any, label: str) -> None:
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
        if _is_tensor(value):
            col.add(value, f"{label}.{short}", "saved")
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                if _is_tensor(item):
                    col.add(item, f"{label}.{short}[{i}]", "saved")


def _walk_graph(col: _Collector, tensors: List[torch.Tensor]) -> None:
    """Lists the outputs (``output``, ``output[i]``), then the tensors saved by every
    node reachable from their grad_fn, breadth first, as ``NodeName.attr``; the k-th
    further node of one type is ``NodeName[k]``."""
    for i, t in enumerate(tensors):
        col.add(t, "output" if len(tensors) == 1 else f"output[{i}]", "output")
    queue = deque(t.grad_fn for t in tensors if t.grad_fn is not None)
    visited: set = set()
    per_type: Dict[str, int] = {}
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


def _walk_gc(col: _Collector) -> None:
    """Every other tensor Python can see; a tensor that is another's .grad is listed
    under that owner's name."""
    tensors = [o for o in gc.get_objects() if _is_tensor(o)]
    col.hold(tensors)
    grad_ids = set()
    for t in tensors:
        grad = _grad_of(t)
        if grad is not None:
            col.hold(grad)
            grad_ids.add(id(grad))
    for t in tensors:
        if not col.seen(t) and id(t) not in grad_ids:
            col.add(t, col.anonymous_name(t), "tensor")
    for t in tensors:                     # grads whose owner was never listed (cycles)
        if not col.seen(t):
            col.add(t, col.anonymous_name(t), "tensor")


# --------------------------------------------------------------------------- devices


def _parse_device(device: DeviceLike) -> Optional[torch.device]:
    if device is None or isinstance(device, torch.device):
        return device
    if isinstance(device, bool) or not isinstance(device, (str, int)):
        raise TypeError(f"device= takes None, a str such as 'cuda:0', an int or a torch.device; "
                        f"got {type(device).__name__}")
    try:
        return torch.device("cuda", device) if isinstance(device, int) else torch.device(device)
    except (RuntimeError, ValueError) as exc:
        raise ValueError(f"unknown device {device!r}: expected e.g. 'cpu', 'cuda' or 'cuda:0' "
                         f"({exc})") from None


def _device_matches(want: torch.device, dev: torch.device) -> bool:
    # 'cuda' without an index matches every CUDA device
    return want.type == dev.type and (want.index is None or want.index == dev.index)


def _cuda_allocated() -> Dict[str, int]:
    """torch.cuda.memory_allocated per device, without initialising CUDA."""
    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return {}
    return {f"cuda:{i}": torch.cuda.memory_allocated(i) for i in range(torch.cuda.device_count())}


def _explain(allocated: int, blocks: int, scoped: bool) -> str:
    diff = allocated - blocks
    if diff == 0:
        return ("Matches the allocator: every allocated block belongs to a storage listed above "
                f"(sizes rounded up to {CUDA_BLOCK_BYTES} bytes as the caching allocator does)")
    if diff > 0:
        where = ("this report is scoped by module=, the rest of the device is not listed"
                 if scoped else
                 "tensors held only by C++ (the autograd graph: pass outputs=; cuBLAS/cuDNN "
                 "workspaces; extensions)")
        return f"Allocator holds {readable_size(diff)} more than found: {where}"
    return (f"Found {readable_size(-diff)} more than the allocator counts: storages from outside "
            "the caching allocator (DLPack/from_blob imports, another allocator)")


def _graph_ptrs(col: _Collector) -> Dict[Tuple[str, int], str]:
    """(device, address) -> name of the storages saved for backward by the
    graphs behind the tensors found (outputs= not given)."""
    roots = []
    for t in col.kept_tensors():
        try:
            if t.grad_fn is not None:
                roots.append(t)
        except Exception:
            continue
    ghost = _Collector()
    try:
        _walk_graph(ghost, roots)
        return {key: name for key, (_, name) in ghost._storages.items() if key[0] != "impl"}
    finally:
        ghost.release()


def _split_blocks(col: _Collector, want: Optional[torch.device],
                  walk_graph: bool) -> Dict[str, DeviceBlocks]:
    """Each CUDA device's allocated blocks, split by the storages found."""
    segments = _blocks.snapshot_segments()
    if segments is None:
        return {}
    ptrs = col.storage_ptrs()
    devices = {f"cuda:{int(seg.get('device', 0))}" for seg in segments}
    devices |= {d for d in ptrs if d.startswith("cuda")}
    graph: List[Dict[Tuple[str, int], str]] = []

    def graph_of(device: str) -> Callable[[], Dict[int, str]]:
        def get() -> Dict[int, str]:
            if not walk_graph:
                return {}
            if not graph:
                graph.append(_graph_ptrs(col))
            return {ptr: name for (dev, ptr), name in graph[0].items() if dev == device}
        return get

    out: Dict[str, DeviceBlocks] = {}
    for device in sorted(devices):
        if want is not None and not _device_matches(want, torch.device(device)):
            continue
        index = torch.device(device).index or 0
        out[device] = _blocks.split_blocks(segments, device, ptrs.get(device, []),
                                           graph_of(device),
                                           functools.partial(_blocks.workspace_labels, index))
    return out


def _account(allocated: int, blocks: DeviceBlocks) -> str:
    listed = blocks.held_bytes + blocks.other_bytes
    if listed == allocated:
        return ("Every allocated block is accounted for: the storages above, plus the blocks "
                "listed as not held by a visible tensor")
    return (f"The allocator's blocks add up to {_sized(listed)}: memory was allocated or freed "
            "by another thread while the report ran")


def _totals(rows: List[TensorRow], want: Optional[torch.device], scoped: bool,
            blocks: Optional[Dict[str, DeviceBlocks]] = None,
            allocated: Optional[Dict[str, int]] = None) -> List[DeviceTotal]:
    blocks = blocks or {}
    if allocated is None:
        allocated = _cuda_allocated()
    names = []
    for r in rows:
        if r.device not in names:
            names.append(r.device)
    for dev in allocated:                 # CUDA devices with memory but no tensor found
        if allocated[dev] and dev not in names and (want is None or _device_matches(want, torch.device(dev))):
            names.append(dev)
    names.sort(key=lambda d: (torch.device(d).type != "cpu", torch.device(d).type,
                              torch.device(d).index or 0))
    totals = []
    for dev in names:
        mine = [r for r in rows if r.device == dev]
        owners = [r for r in mine if r.storage_id is not None and r.alias_of is None]
        found = sum(r.bytes for r in owners)
        if dev in allocated and dev in blocks:
            split = blocks[dev]
            totals.append(DeviceTotal(dev, len(mine), len(owners), found, split.held_bytes,
                                      allocated[dev], _account(allocated[dev], split),
                                      split.other_bytes, split.awaiting_bytes))
        elif dev in allocated:
            rounded = sum(-(-r.bytes // CUDA_BLOCK_BYTES) * CUDA_BLOCK_BYTES for r in owners)
            totals.append(DeviceTotal(dev, len(mine), len(owners), found, rounded, allocated[dev],
                                      _explain(allocated[dev], rounded, scoped)))
        else:
            totals.append(DeviceTotal(dev, len(mine), len(owners), found))
    return totals


# --------------------------------------------------------------------------- reporter


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
        self._optimizers: List[Callable[[], Any]] = []
        self.pre_collect = pre_collect
        if record_history:
            _blocks.start_recording()

    def add_optimizer(self, optimizer: torch.optim.Optimizer) -> None:
        """Name the optimizer's state tensors ``<OptimizerClass>.<param name>.<state key>``."""
        if not (hasattr(optimizer, "state") and hasattr(optimizer, "param_groups")):
            raise TypeError(f"add_optimizer() takes a torch.optim.Optimizer, got "
                            f"{type(optimizer).__name__}")
        self._optimizers.append(_weak(optimizer))

    def report(self, verbose: bool = False, device: DeviceLike = None,
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
        want = _parse_device(device)
        out_tensors = list(_iter_outputs(outputs))
        if module is not None and not isinstance(module, torch.nn.Module):
            raise TypeError(f"report(module=...) takes a torch.nn.Module, got {type(module).__name__}")
        if self.pre_collect:
            gc.collect()
        col = _Collector()
        blocks: Dict[str, DeviceBlocks] = {}
        allocated: Optional[Dict[str, int]] = None
        try:
            self._walk(col, module, out_tensors)
            rows = [r for r in col.sorted_rows()
                    if want is None or _device_matches(want, torch.device(r.device))]
            skipped = col.skipped
            if module is None:   # a scoped report leaves the rest of the device out
                blocks = _split_blocks(col, want, walk_graph=not out_tensors)
                allocated = _cuda_allocated()   # read while the found tensors are held
        finally:
            col.release()
            del out_tensors
        result = MemReport(rows, _totals(rows, want, module is not None, blocks, allocated),
                           verbose, skipped, [b for d in blocks.values() for b in d.other])
        if print_report:
            print(result, file=sys.stdout)
        return result

    def _walk(self, col: _Collector, module: Optional[torch.nn.Module],
              outputs: List[torch.Tensor]) -> None:
        model = self._model()
        source = model if model is not None else module
        scope: Optional[set] = None
        if module is not None:
            scope = {id(t) for t in _chain(module.parameters(), module.buffers())}
            if model is not None and not any(m is module for m in model.modules()):
                source = module
        names: Dict[int, str] = {}     # id(param) -> its first name; ids stay valid (col holds)
        if source is not None:
            for name, p in source.named_parameters(remove_duplicate=False):
                if scope is None or id(p) in scope:
                    names.setdefault(id(p), name)
                    col.add(p, name, "param", repeat=True)
            for name, b in source.named_buffers(remove_duplicate=False):
                if scope is None or id(b) in scope:
                    col.add(b, name, "buffer", repeat=True)
        self._walk_optimizers(col, names, scope)
        if outputs:
            _walk_graph(col, outputs)
        if scope is None:
            _walk_gc(col)

    def _walk_optimizers(self, col: _Collector, names: Dict[int, str], scope: Optional[set]) -> None:
        per_class: Dict[str, int] = {}
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
                        col.add(p, f"{label}.{pname}", "param")
                state = opt.state.get(p, {})
                for key, value in state.items():
                    if _is_tensor(value):
                        col.add(value, f"{label}.{pname}.{key}", "optimizer")


def _chain(*iterables: Iterable[Any]) -> Iterator[Any]:
    for it in iterables:
        yield from it
