"""The slow CUDA source: what the tracer reads when the compiled torch shim
is unavailable (a torch upgraded since the build).  A Python source
(``PythonSource`` in ``_tracer.pyi``); ``choice.choose`` decides when it is
used."""
from __future__ import annotations

from typing import Any, Optional

from pytorch_memlab.records.meanings import torch_meaning

NO_CUDA = "CUDA is not available: no CUDA device, or a CPU-only torch"

# Per-pool keys come and go with torch.cuda.MemPool objects: not a fixed
# column, so neither the shim nor the fallback offers them.
DYNAMIC_PREFIX = "reserved_bytes_by_private_pools."


def flatten_stats(stats: dict[str, Any]) -> dict[str, int]:
    """Flatten a nested stats dict the way torch.cuda.memory_stats() does:
    dotted keys, tuple keys joined with "_", sorted."""
    items: list[tuple[str, int]] = []

    def walk(prefix: str, obj: Any) -> None:
        if isinstance(obj, dict):
            if prefix:
                prefix += "."
            for key, value in obj.items():
                if isinstance(key, tuple):
                    key = "_".join(str(part) for part in key)
                walk(prefix + str(key), value)
        else:
            items.append((prefix, obj))

    walk("", stats)
    items.sort()
    return dict(items)


class CudaFallbackSource:
    """Reads the CUDA caching allocator through ``torch._C._cuda_memoryStats``
    (tens of µs per sample, against well under 1 µs for the shim).

    Its fields are the keys of ``torch.cuda.memory_stats()`` on this torch:
    asking for them initialises CUDA, and without CUDA is a RuntimeError.
    Their kinds and units follow torch's naming (``torch_meaning``).
    """

    name = "cuda"

    def __init__(self) -> None:
        self._fields: Optional[tuple[str, ...]] = None

    @property
    def fields(self) -> tuple[str, ...]:
        if self._fields is None:
            import torch
            if not torch.cuda.is_available():
                raise RuntimeError(NO_CUDA)
            torch.cuda.init()  # type: ignore[no-untyped-call]  # torch: unannotated
            keys = flatten_stats(torch._C._cuda_memoryStats(torch.cuda.current_device()))
            self._fields = tuple(k for k in keys if not k.startswith(DYNAMIC_PREFIX))
        return self._fields

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(torch_meaning(name).kind for name in self.fields)

    @property
    def units(self) -> tuple[str, ...]:
        return tuple(torch_meaning(name).unit for name in self.fields)

    def prepare(self, device: int) -> None:
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError(NO_CUDA)
        torch.cuda.init()  # type: ignore[no-untyped-call]  # torch: unannotated
        count = torch.cuda.device_count()
        if not 0 <= device < count:
            raise RuntimeError(f"CUDA device {device} does not exist ({count} visible)")

    def sample(self, device: int) -> list[int]:
        import torch
        flat = flatten_stats(torch._C._cuda_memoryStats(device))
        return [int(flat.get(name, 0)) for name in self.fields]

    def reset_peaks(self, device: int) -> None:
        import torch
        torch.cuda.reset_peak_memory_stats(device)
