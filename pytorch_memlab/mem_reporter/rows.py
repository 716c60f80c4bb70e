"""What a report holds: one row per tensor and totals per device (no
tensor, only figures and names); ``report.py``'s ``MemReport`` groups them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from ..common.devices import DeviceSpec, parse_device
from ..kinds.names import (BUFFER, GRADIENT, OPTIMIZER_STATE, OTHER, PARAMETER,
                           SAVED_FOR_BACKWARD, WORKSPACE)

# The peak's kinds a report's rows and blocks can be.  A report belongs to no
# call, so a tensor with no role (an output, a variable, one the garbage
# collector knows) is ``other``, never ``input`` or ``temporary``, which say
# where a call found a block; only allocator blocks are ``workspace``.
MEMREPORTER_KINDS = (PARAMETER, BUFFER, GRADIENT, OPTIMIZER_STATE, SAVED_FOR_BACKWARD,
                     WORKSPACE, OTHER)

REPORT_DEVICES = ("None (every device), a str such as 'cpu', 'cuda' (every CUDA device) or "
                  "'cuda:0', an int (a CUDA index) or a torch.device")


def parse_filter(device: Optional[DeviceSpec], what: str) -> Optional[torch.device]:
    """The device a report is narrowed to; None for every device."""
    return None if device is None else parse_device(device, what, REPORT_DEVICES)


@dataclass(frozen=True)
class TensorRow:
    """One tensor (or one component of a sparse tensor) in a report."""

    name: str
    device: str
    dtype: str                       # "float32", not "torch.float32"
    shape: tuple[int, ...]
    numel: int
    bytes: int                       # bytes charged here: the storage size on its first row, else 0
    storage_bytes: int               # untyped_storage().nbytes(), on every row of the storage
    storage_id: Optional[int]        # storage number within this report; None: no storage
    kind: str                        # one of MEMREPORTER_KINDS (kinds.names' names)
    alias_of: Optional[str] = None   # owner row's name when the storage was already counted
    allocated_at: Optional[str] = None   # "step:12": the profiled line that allocated it

    def display_name(self, verbose: bool) -> str:
        name = self.name
        if verbose and self.alias_of is not None:
            name = f"{name}(->{self.alias_of})"
        return name if self.allocated_at is None else f"{name} ({self.allocated_at})"


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
