"""Courtesy: lend the GPU to someone else for a while.

``Courtesy.yield_memory()`` copies CUDA tensors to host memory and hands their
device memory back to the driver; ``restore()`` copies them back.  The same
Python tensor objects stay valid throughout: a model keeps its parameters, an
optimizer keeps its state, and a view keeps sharing memory with its base.

How a tensor moves
------------------
Tensors are moved per *storage*, not per tensor: every tensor reachable from
the scope is grouped by the address of its storage, each storage is copied
once, and every tensor of the group is re-pointed at the copy with the same
offset, sizes and strides.  Views and tied weights therefore keep sharing one
storage, and nothing doubles on the way back.

Re-pointing uses ``tensor.data = alias`` (``set_data``), which swaps the
storage under the same ``TensorImpl`` and keeps Python identity,
``requires_grad``, ``.grad`` and the autograd history.  ``tensor.set_()`` cannot
do this: it refuses a storage on another device.

What is not moved
-----------------
Only tensors that Python can reach are moved: a tensor autograd saved for
backward after Python dropped it, or a tensor held only by C++ (DDP gradient
buckets, CUDA-graph pools, extension state), keeps its device memory.  So do
sparse, quantized and nested tensors and tensor subclasses.  When the device
still holds more than ``threshold`` bytes after yielding, a warning says so.

The package: ``lender`` (the Courtesy class: yield, restore, the warning),
``scope`` (its arguments, and which tensors of the scope can move, grouped by
storage) and ``storage_moves`` (copying a storage and re-pointing its tensors).
"""
from .lender import Courtesy
from .scope import DEFAULT_THRESHOLD

__all__ = ["Courtesy", "DEFAULT_THRESHOLD"]
