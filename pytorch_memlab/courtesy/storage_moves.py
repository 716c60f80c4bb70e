"""Moving one storage: copy it whole to another device, then re-point every
tensor that used it at the copy, keeping each tensor object."""
from __future__ import annotations

from typing import Iterable

import torch


def copy_storage(storage: torch.UntypedStorage, device: torch.device) -> torch.UntypedStorage:
    """A copy of the whole storage on device."""
    raw = torch.empty(0, dtype=torch.uint8, device=storage.device)
    with torch.no_grad():
        raw.set_(storage)
    return raw.to(device, copy=True).untyped_storage()


def repoint(tensors: Iterable[torch.Tensor], storage: torch.UntypedStorage) -> None:
    """Make every tensor a window on storage at its own offset, sizes and strides.

    ``t.data = alias`` keeps the tensor object, its autograd metadata and its
    grad; it also works across devices, where ``t.set_()`` refuses.
    """
    for t in tensors:
        with torch.inference_mode(t.is_inference()):
            alias = torch.empty(0, dtype=t.dtype, device=storage.device)
            alias.set_(storage, t.storage_offset(), t.size(), t.stride())
        t.data = alias


def move_group(tensors: list[torch.Tensor], device: torch.device) -> torch.UntypedStorage:
    """Copy the storage the tensors share to device and re-point them; returns the copy."""
    copy = copy_storage(tensors[0].untyped_storage(), device)
    repoint(tensors, copy)
    return copy


# a group that was moved out: its tensors, the storage they left (Owned until the
# yield is complete, so that a failure can put them back without a copy), the host copy
Moved = tuple[list[torch.Tensor], torch.UntypedStorage, torch.UntypedStorage]
