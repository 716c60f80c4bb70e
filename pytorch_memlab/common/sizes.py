"""How a byte count is written, and read back from what people type.

One style for every table and message of the package: the line table's
``40.00K`` / ``2.00M`` (binary units, K = 1024 bytes, two decimals, no space).
Where the exact figure matters it follows in parentheses:
``4.00M (4,194,304 bytes)``.

One exception, on purpose: the pytest plugin's failure messages compare a
figure with a budget the user wrote in ``KiB``/``MiB``/``MB`` (``"16 MiB"``),
so they state the figure in the same IEC units (``33.00 MiB (34,603,008
bytes)``), see :func:`iec_size`; the tables under those messages keep the
line-table style.

No torch here: the pytest plugin parses its markers before torch is loaded.
"""
from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Union

__all__ = ["readable_size", "with_bytes", "iec_size", "axis_ticks", "parse_size",
           "SIZE_FORMS"]

_SUFFIXES = ("B", "K", "M", "G", "T", "P")
# (the bound a value stays under, the unit's size, its suffix), the last unit
# left out: it takes every larger value.  A division by a power of two is
# exact, so one division gives what dividing by 1024 step by step would.
_STEPS = tuple((1024.0 ** (k + 1), 1024.0 ** k, suffix)
               for k, suffix in enumerate(_SUFFIXES[:-1]))
_LAST_STEP = 1024.0 ** (len(_SUFFIXES) - 1)


def readable_size(num_bytes: Union[int, float]) -> str:
    """``40960 -> '40.00K'``, ``2097152 -> '2.00M'``, ``0 -> '0.00B'``.

    Binary units (K = 1024 bytes), two decimals, a leading '-' when negative.
    """
    sign = "-" if num_bytes < 0 else ""
    value = float(abs(num_bytes))
    for bound, unit, suffix in _STEPS:
        if value < bound:
            return f"{sign}{value / unit:.2f}{suffix}"
    return f"{sign}{value / _LAST_STEP:.2f}{_SUFFIXES[-1]}"


def with_bytes(num_bytes: int) -> str:
    """``4194304 -> '4.00M (4,194,304 bytes)'``: readable, then exact."""
    return f"{readable_size(num_bytes)} ({num_bytes:,} bytes)"


def iec_size(num_bytes: int) -> str:
    """``3145728 -> '3.00 MiB (3,145,728 bytes)'``, ``24 -> '24 B'``.

    Only for the pytest plugin's messages, which set a figure beside a budget
    written by the user in IEC units (see the module's docstring).
    """
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            break
        value /= 1024
    if unit == "B":
        return f"{num_bytes} B"
    return f"{value:.2f} {unit} ({num_bytes:,} bytes)"


def axis_ticks(top: int, most: int = 5) -> list[tuple[int, str]]:
    """Round ticks from 0 up to at least ``top`` bytes, at most ``most`` + 1
    of them, labelled in the unit of the largest: ``(bytes, "1.5 GiB")``."""
    unit, name = 1, "B"
    for size, label in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if top >= size:
            unit, name = size, label
            break
    span = max(top, 1) / unit
    step = 1.0
    for scale in (10.0 ** k for k in range(-2, 8)):
        for nice in (1, 2, 2.5, 5):
            if span / (nice * scale) <= most:
                step = nice * scale
                break
        else:
            continue
        break
    if name == "B":
        step = max(1.0, round(step))
    ticks, k = [], 0
    while True:
        value = k * step
        ticks.append((round(value * unit), f"{value:g} {name}"))
        if value >= span:
            return ticks
        k += 1


# ---------------------------------------------------------------- reading

_UNITS = {
    "b": 1,
    "kb": 1000, "mb": 1000 ** 2, "gb": 1000 ** 3,
    "kib": 1024, "mib": 1024 ** 2, "gib": 1024 ** 3,
}
SIZE_FORMS = ("an int (bytes) or a string like '512 B', '64 KB', '64 KiB', '1.5 MB', "
              "'1.5 MiB', '2 GB' or '2 GiB' (KB/MB/GB = 1000**n bytes, KiB/MiB/GiB = 1024**n), "
              "or '0'")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]*)\s*$")


def parse_size(value: object, what: str) -> int:
    """Bytes in ``value`` ("64 MiB", "1.5 GB", 4096); TypeError/ValueError
    naming ``what`` and the forms accepted.

    KB, MB and GB are decimal (SI and IEC), KiB, MiB and GiB binary; units
    match without regard to case.  A bare number in a string is refused as
    ambiguous, but zero, the same in every unit; an int is a count of bytes.
    """
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"{what}: expected {SIZE_FORMS}, not {type(value).__name__} {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{what}: {value} is negative; expected {SIZE_FORMS}")
        return value
    match = _SIZE.match(value)
    if match is None:
        raise ValueError(f"{what}: {value!r} is not a size; expected {SIZE_FORMS}")
    number, unit = match.groups()
    if not unit:
        if Decimal(number) == 0:
            return 0
        raise ValueError(f"{what}: {value!r} is not a size (no unit); expected {SIZE_FORMS}")
    factor = _UNITS.get(unit.lower())
    if factor is None:
        raise ValueError(f"{what}: unknown unit {unit!r} in {value!r}; expected {SIZE_FORMS}")
    try:
        size = Decimal(number) * factor
    except InvalidOperation as exc:   # pragma: no cover - the regex admits only decimals
        raise ValueError(f"{what}: {value!r} is not a size; expected {SIZE_FORMS}") from exc
    if size != size.to_integral_value():
        raise ValueError(f"{what}: {value!r} is not a whole number of bytes ({size} B)")
    return int(size)
