"""What a report holds: one row per tensor, totals per device, and the
:class:`MemReport` that groups them (no tensor, only figures and names)."""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Optional

import torch

from ..common.devices import DeviceSpec, device_matches, parse_device
from ..reports.base import Reporter
from .blocks import BlockRow
from .table_text import MemReportText

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
    kind: str                        # param, buffer, grad, optimizer, output, saved, tensor
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


class MemReport:
    """The result of :meth:`MemReporter.report`: rows grouped per device and per storage.

    ``str(report)`` is the printed table; ``to_dicts()`` / ``to_json()`` give the same
    data without formatting.
    """

    def __init__(self, rows: list[TensorRow], devices: list[DeviceTotal],
                 verbose: bool = False, skipped: int = 0,
                 blocks: Optional[list[BlockRow]] = None) -> None:
        self.rows = rows
        self.devices = devices
        self.blocks = list(blocks or [])   # CUDA blocks no found tensor holds
        self.verbose = verbose
        self.skipped = skipped  # objects that raised while being inspected

    @property
    def total_bytes(self) -> int:
        return sum(d.bytes for d in self.devices)

    def rows_on(self, device: Optional[DeviceSpec]) -> list[TensorRow]:
        want = parse_filter(device, "rows_on(device=...)")
        return [r for r in self.rows if want is None or device_matches(want, torch.device(r.device))]

    def row(self, name: str) -> TensorRow:
        """The row called ``name``; KeyError if there is none."""
        for r in self.rows:
            if r.name == name:
                return r
        raise KeyError(name)

    def to_dicts(self) -> list[dict[str, Any]]:
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
        reporter: Reporter[MemReport] = MemReportText(
            self.verbose if verbose is None else verbose)
        return reporter.render(self)

    def __str__(self) -> str:
        return self.format()

    def __repr__(self) -> str:
        return (f"<MemReport: {len(self.rows)} rows on {len(self.devices)} device(s), "
                f"{self.total_bytes} bytes>")
