"""Memory sizes as people write them in markers: "64 MiB", "1.5 GB", 4096.

KB, MB and GB are decimal (1000, 1000**2, 1000**3 bytes), as in SI and the
IEC standard; KiB, MiB and GiB are binary (1024, 1024**2, 1024**3).  Units are
matched without regard to case ("mib" is MiB); a bare number in a string is
refused because it is ambiguous, while an int is a count of bytes.
"""
from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Any

UNITS = {
    "b": 1,
    "kb": 1000, "mb": 1000 ** 2, "gb": 1000 ** 3,
    "kib": 1024, "mib": 1024 ** 2, "gib": 1024 ** 3,
}
ACCEPTED = "an int (bytes) or a string like '512 B', '64 KB', '64 KiB', '1.5 MB', '1.5 MiB', " \
           "'2 GB' or '2 GiB' (KB/MB/GB = 1000**n bytes, KiB/MiB/GiB = 1024**n)"
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]+)\s*$")


def parse_size(value: Any, what: str) -> int:
    """Bytes in ``value``; ValueError/TypeError naming ``what`` and the forms accepted."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"{what}: expected {ACCEPTED}, not {type(value).__name__} {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{what}: {value} is negative; expected {ACCEPTED}")
        return value
    match = _SIZE.match(value)
    if match is None:
        raise ValueError(f"{what}: {value!r} is not a size; expected {ACCEPTED}")
    number, unit = match.groups()
    factor = UNITS.get(unit.lower())
    if factor is None:
        raise ValueError(f"{what}: unknown unit {unit!r} in {value!r}; expected {ACCEPTED}")
    try:
        size = Decimal(number) * factor
    except InvalidOperation as exc:   # pragma: no cover - the regex admits only decimals
        raise ValueError(f"{what}: {value!r} is not a size; expected {ACCEPTED}") from exc
    if size != size.to_integral_value():
        raise ValueError(f"{what}: {value!r} is not a whole number of bytes ({size} B)")
    return int(size)


def describe(size: int) -> str:
    """``3145728 -> '3.00 MiB (3,145,728 bytes)'``: binary units, as the tables."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            text = f"{size} B" if unit == "B" else f"{value:.2f} {unit}"
            break
        value /= 1024
    return text if unit == "B" else f"{text} ({size:,} bytes)"
