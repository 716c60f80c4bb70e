"""``pytorch_memlab.info()``: which memory source and reading path each
device kind uses, what the shim was built against, and why a fallback was
chosen.  Never initialises CUDA."""
from __future__ import annotations

from typing import Any

from pytorch_memlab import native, sources

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
        capsule, why = native.shim_capsule(kind)
        if kind == "cuda" and capsule is not None and shim is not None:
            push, why_not = sources.cuda_push_choice(DEFAULT_COLUMNS + (GROWTH_FIELD,))
            if push is not None:
                entry = {"source": "shim", "path": "push", "why": None,
                         "note": _CUDA_OTHER_COLUMNS}
            else:
                entry = {"source": "shim", "path": "poll",
                         "why": f"{why_not}; getDeviceStats is polled and the device's "
                                "peak statistics are reset at every line event"}
        elif capsule is not None and shim is not None:
            entry = {"source": "shim", "path": shim.path(kind), "why": None}
        elif kind == "cuda":
            entry = {"source": "python fallback", "path": "poll",
                     "why": f"the compiled shim is unavailable ({why}); "
                            "torch._C._cuda_memoryStats is polled"}
        else:
            entry = {"source": None, "path": None,
                     "why": f"CPU profiling needs the compiled shim ({why})"}
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
