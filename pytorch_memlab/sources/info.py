"""``pytorch_memlab.info()``: which memory source and reading path each
device kind uses, what the shim was built against, and why a fallback was
chosen.  Never initialises CUDA."""
from __future__ import annotations

from typing import Any

from . import native
from .choice import choose

_CUDA_OTHER_COLUMNS = ("active_bytes.all.current/peak, reserved_bytes.all.current/peak, "
                       "and per thread allocated_bytes.all.allocated/freed and "
                       "allocation.all.allocated/freed are pushed; other columns are "
                       "polled from getDeviceStats, resetting the device's peaks at every line")


def info() -> dict[str, Any]:
    """A dict: torch version, tracer mechanism, shim state and, per kind
    ("cuda", "cpu"), the source ("shim" / "python fallback" / None), the path
    of the default columns ("push" / "poll") and, for CUDA, why it polls
    (or which columns still poll when it pushes)."""
    import torch

    from pytorch_memlab.records.columns import DEFAULT_COLUMNS, GROWTH_FIELD
    shim, error = native.load_shim()
    result: dict[str, Any] = {
        "torch": torch.__version__,
        "mechanism": native.MECHANISM,
        "shim": None if shim is None else getattr(shim, "__file__", "loaded"),
        "shim_error": None if error is None else str(error),
        "built_against": None if shim is None else getattr(shim, "TORCH_VERSION", None),
        "sources": {},
    }
    for kind in native.KINDS:
        choice = choose(kind, DEFAULT_COLUMNS + (GROWTH_FIELD,))
        entry: dict[str, Any] = {"source": choice.origin, "path": choice.path, "why": choice.why}
        if choice.path == "push" and kind == "cuda":
            entry["note"] = _CUDA_OTHER_COLUMNS
        elif choice.path == "poll" and choice.origin == "shim":
            entry["why"] = (f"{choice.why}; getDeviceStats is polled and the device's "
                            "peak statistics are reset at every line event")
        elif choice.origin == "python fallback":
            entry["why"] = f"{choice.why}; torch._C._cuda_memoryStats is polled"
        result["sources"][kind] = entry
    return result


def format_info(data: dict[str, Any]) -> str:
    lines = [f"torch {data['torch']}, tracer mechanism {data['mechanism']}",
             f"shim: {data['shim'] or 'not loaded: ' + str(data['shim_error'])}"]
    if data["built_against"]:
        lines.append(f"shim built against torch {data['built_against']}")
    for kind, entry in data["sources"].items():
        text = f"{kind}: source {entry['source']}, path {entry['path']}"
        if entry["why"]:
            text += f" ({entry['why']})"
        if entry.get("note"):
            text += f"; {entry['note']}"
        lines.append(text)
    return "\n".join(lines)
