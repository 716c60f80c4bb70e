"""Which figures a profiler records, and the error for a name it cannot."""
from __future__ import annotations

import difflib
from typing import Iterable, Optional, Sequence, Union

DEFAULT_COLUMNS: tuple[str, ...] = ("active_bytes.all.peak", "reserved_bytes.all.peak")

# Net growth is always measured on this field (live tensor bytes).
GROWTH_FIELD = "active_bytes.all.current"

# The column a function's peak is read from when it is shown.
PEAK_COLUMN = "active_bytes.all.peak"

ColumnsArg = Optional[Union[str, Iterable[str]]]


def normalize_columns(columns: ColumnsArg) -> tuple[str, ...]:
    """None -> the defaults; one name or any iterable of names -> a tuple
    without duplicates, in the order given."""
    if columns is None:
        return DEFAULT_COLUMNS
    names = [columns] if isinstance(columns, str) else list(columns)
    for name in names:
        if not isinstance(name, str):
            raise TypeError(f"a column is a str such as 'active_bytes.all.peak', "
                            f"not {type(name).__name__}")
    if not names:
        raise ValueError("columns is empty: name at least one field, "
                         f"e.g. {DEFAULT_COLUMNS[0]!r}")
    return tuple(dict.fromkeys(names))


def _grouped(fields: Sequence[str]) -> str:
    """One line per family (the name without its last part), names in full."""
    groups: dict[str, list[str]] = {}
    for field in sorted(fields):
        groups.setdefault(field.rsplit(".", 1)[0], []).append(field)
    return "\n".join("  " + ", ".join(names) for names in groups.values())


def unknown_column_error(name: str, fields: Sequence[str], where: str) -> ValueError:
    close = difflib.get_close_matches(name, fields, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return ValueError(f"unknown column {name!r} for {where}.{hint} "
                      f"Valid columns are:\n{_grouped(fields)}")


def check_columns(columns: Sequence[str], fields: Sequence[str], where: str) -> None:
    """ValueError naming the valid fields if any column is not one of them."""
    known = set(fields)
    for name in columns:
        if name not in known:
            raise unknown_column_error(name, fields, where)


def pick_columns(requested: ColumnsArg, recorded: tuple[str, ...]) -> tuple[str, ...]:
    """The columns to show: all recorded ones by default, else a subset."""
    if requested is None:
        return recorded
    wanted = normalize_columns(requested)
    for name in wanted:
        if name not in recorded:
            raise ValueError(
                f"column {name!r} was not recorded; this profiler records "
                f"{', '.join(recorded)}. Pass columns=[...] when creating the "
                "LineProfiler (or to profile(...)) to record it.")
    return wanted


def peak_column(columns: Sequence[str]) -> Optional[str]:
    """The column a function's peak is read from: active bytes' peak if shown,
    else the first shown ``*bytes*.peak`` column."""
    if PEAK_COLUMN in columns:
        return PEAK_COLUMN
    return next((c for c in columns if "bytes" in c and c.endswith(".peak")), None)
