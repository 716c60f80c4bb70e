"""How a figure is written: binary sizes for byte fields, plain integers else."""
from __future__ import annotations

_SUFFIXES = ("B", "K", "M", "G", "T", "P")


def readable_size(num_bytes: int) -> str:
    """``40960 -> '40.00K'``, ``2097152 -> '2.00M'``, ``0 -> '0.00B'``.

    Binary units (K = 1024 bytes), two decimals, a leading '-' when negative.
    """
    sign = "-" if num_bytes < 0 else ""
    value = float(abs(num_bytes))
    for suffix in _SUFFIXES[:-1]:
        if value < 1024:
            return f"{sign}{value:.2f}{suffix}"
        value /= 1024
    return f"{sign}{value:.2f}{_SUFFIXES[-1]}"


def is_bytes_field(field: str) -> bool:
    """Does this memory_stats() field count bytes (rather than blocks or events)?"""
    return "bytes" in field.split(".", 1)[0] or field == "max_split_size"


def format_value(field: str, value: int) -> str:
    return readable_size(value) if is_bytes_field(field) else str(value)
