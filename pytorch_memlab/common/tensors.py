"""Finding tensors, and telling their storages apart.

MemReporter (which lists them), Courtesy (which moves them) and the
out-of-memory post-mortem (which names the largest) all find tensors the same
way: the objects the garbage collector tracks, tested with ``type()`` (never
``isinstance``, which reads ``__class__`` and so runs code: a dead
``weakref.proxy`` raises, a deprecated alias warns); a tensor's ``.grad``
without the non-leaf warning; its storage named by the memory it holds.
"""
from __future__ import annotations

from typing import Optional

import torch

__all__ = ["is_tensor", "grad_of", "storage_of", "StorageKey"]

# (device, address); ("impl", id of the C storage) for a storage without an address
StorageKey = tuple[str, int]


def is_tensor(obj: object) -> bool:
    """Is ``obj`` a torch.Tensor (or subclass)?  Never runs user code."""
    try:
        return issubclass(type(obj), torch.Tensor)
    except Exception:
        return False


def grad_of(t: torch.Tensor) -> Optional[torch.Tensor]:
    """``t.grad`` without the non-leaf warning; None where there is none or it raises."""
    try:
        if not (t.is_leaf or t.retains_grad):
            return None
        grad = t.grad
    except Exception:
        return None
    return grad if is_tensor(grad) else None


def storage_of(t: torch.Tensor) -> Optional[tuple[StorageKey, int]]:
    """(identity key, nbytes) of t's storage, or None for a tensor without one.

    The key is ``(device, address)``: the same memory is the same storage,
    whichever Python object wraps it.  A storage without an address (empty)
    is keyed by its C object.  Meta tensors have a nominal size but hold no
    memory, and wrappers (functorch, some subclasses) refuse to give a
    storage: both give None.
    """
    if t.device.type == "meta":
        return None
    try:
        storage = t.untyped_storage()
        nbytes = int(storage.nbytes())
        ptr = storage.data_ptr()
        key: StorageKey = (str(t.device), ptr) if ptr else ("impl", int(storage._cdata))
    except Exception:
        return None
    return key, nbytes
