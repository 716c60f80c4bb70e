"""What a column measures: its kind and unit, as a saved profile records them.

Torch-free on purpose: loading and viewing a saved profile read the meanings
the file recorded (``column_meanings``, schema version 2) and never import the
native boundary; only for a file that does not record them (schema version 1,
a CSV) are they derived, once at load, by torch's naming rule below.
"""
from __future__ import annotations

from typing import NamedTuple

KINDS = ("level", "peak", "counter")
UNITS = ("bytes", "count")


class Field(NamedTuple):
    """What a source's field is, as its source declares it
    (``memlab_field`` in include/memlab/source.h)."""

    name: str       # e.g. "active_bytes.all.peak"
    kind: str       # "level", "peak" (highest level since the last reading) or "counter"
    unit: str       # "bytes" or "count"


def torch_meaning(key: str) -> Field:
    """torch.cuda.memory_stats() says what a key measures only through its
    name: "<family>[.<pool>].<metric>" with metric current / peak /
    allocated / freed, bytes when the family ends in "_bytes", plus scalars
    (counts, except max_split_size).  The rule for the fallback source, which
    has no contract to read, and for files that recorded no meanings."""
    family, _, _ = key.partition(".")
    metric = key.rsplit(".", 1)[-1] if "." in key else ""
    kind = {"peak": "peak", "allocated": "counter", "freed": "counter"}.get(metric, "level")
    unit = "bytes" if family.endswith("_bytes") or key == "max_split_size" else "count"
    return Field(key, kind, unit)
