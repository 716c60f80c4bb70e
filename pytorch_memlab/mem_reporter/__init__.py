"""MemReporter: which tensors hold the memory right now.

A report lists tensors found from five sources, in this order:

1. the model's parameters (each followed by its ``.grad``) and buffers,
2. the state of every optimizer given to :meth:`MemReporter.add_optimizer`,
3. the ``outputs=`` tensors, then the tensors their autograd graph saved for
   backward (``AddmmBackward0.mat1``),
4. the variables of the frames that called ``report()`` (``activations``,
   ``xs[0]``; ``common.frames``, shared with the OOM post-mortem),
5. every other tensor the garbage collector knows of, numbered per type
   (``Tensor0``, ``Parameter0``, ...), each followed by its ``.grad``.

Each row's ``kind`` is one of the peak's kinds (``kinds.names``): parameter,
buffer, gradient, optimizer_state, saved_for_backward, and other for a tensor
with no role (an output, a variable, one the collector knows): a report
belongs to no call, so never input or temporary (``rows.MEMREPORTER_KINDS``).

Rows of the last three sources whose CPU storage was allocated on a line of
a function an enabled profiler reads name that line too: ``x (step:12)``
(``sites``).

On a CUDA device, the allocator's own blocks (``torch.cuda.memory._snapshot()``) are
matched against the storages found: every other active block is listed with its size,
stream, kind (workspace, saved_for_backward or other) and, where it can be known,
what it is (see ``blocks``), so that the blocks add up to
``torch.cuda.memory_allocated()`` exactly.

Rows are then grouped per device (cpu, cuda:0, cuda:1, ...) and, within a
device, per storage in the order storages were first met.

Bytes are exact: each storage (``untyped_storage().nbytes()``) is charged once,
to the first row that uses it; later rows on the same storage (views, tied
weights, a saved tensor that is a parameter) cost 0 bytes and name their owner
as ``name(->owner)`` in verbose mode.

The reporter holds only weak references to the model and optimizers, and a
report holds no tensor: strong references live only while ``report()`` runs.

The package, one file per concern: ``reporter`` (MemReporter: what to name, the
walk, the report), ``collect`` (tensors into rows, storages charged once),
``rows`` (TensorRow, DeviceTotal), ``report`` (MemReport and its printed
table), ``sites`` (the line that allocated a storage),
``allocator`` (per-device totals against ``torch.cuda.memory_allocated``) and
``blocks`` (the caching allocator's blocks).
"""
from .blocks import BlockRow
from .reporter import MemReporter
from .report import MemReport
from .rows import DeviceTotal, TensorRow

__all__ = ["MemReporter", "MemReport", "TensorRow", "DeviceTotal", "BlockRow"]
