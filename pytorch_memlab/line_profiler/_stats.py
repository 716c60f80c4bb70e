"""Turns tracer tables into plain Python data: one record per function and device.

A record::

    {"qualname": "train_step", "filename": "/path/train.py", "first_line": 12,
     "device": "cuda:0", "columns": ["active_bytes.all.peak", ...],
     "lines": [{"lineno": 12, "code": "def train_step(x):", "count": 0,
                "net_growth": None, "active_bytes.all.peak": None, ...,
                "raised": None}, ...]}

Every source line of the function is listed.  A line that never ran has
count 0 and None for every figure.  ``raised`` names the exception that
escaped the profiler through that line (e.g. "OutOfMemoryError"), else None.
The record of the innermost function an out-of-memory error passed through
also has ``"postmortem"``: what held the memory then (see ``_postmortem``).
"""
from __future__ import annotations

import types
from typing import Any, Optional, Sequence, TypedDict

from ._functions import FunctionEntry
from ._source import source_lines
from ._tracerset import TracerStats

LineRecord = dict[str, Any]   # lineno, code, count, net_growth, each column, raised


class _Record(TypedDict):
    qualname: str
    filename: str
    first_line: int
    device: str
    columns: list[str]
    lines: list[LineRecord]


class FunctionRecord(_Record, total=False):
    postmortem: dict[str, Any]   # only where an out-of-memory error escaped (_postmortem)


Raised = dict[types.CodeType, dict[int, str]]


def _lines(code: types.CodeType, table: dict[int, tuple[int, int, tuple[int, ...]]],
           recorded: Sequence[str], shown: Sequence[str],
           raised: dict[int, str]) -> list[LineRecord]:
    position = {name: recorded.index(name) for name in shown}
    rows: list[LineRecord] = []
    for lineno, text in source_lines(code, list(table) + list(raised)):
        row: LineRecord = {"lineno": lineno, "code": text}
        figures: Optional[tuple[int, int, tuple[int, ...]]] = table.get(lineno)
        row["count"] = figures[0] if figures else 0
        row["net_growth"] = figures[1] if figures else None
        for name in shown:
            row[name] = figures[2][position[name]] if figures else None
        row["raised"] = raised.get(lineno)
        rows.append(row)
    return rows


def build_records(entries: Sequence[FunctionEntry], labels: Sequence[str],
                  per_device: Sequence[TracerStats], recorded: Sequence[str],
                  shown: Sequence[str], raised: Raised) -> list[FunctionRecord]:
    """Records for every code object of ``entries``: the current one always,
    earlier ones (before ``__code__`` was replaced) only if they have figures."""
    records: list[FunctionRecord] = []
    for entry in entries:
        for code in entry.codes:
            tables = [stats.get(code, {}) for stats in per_device]
            current = code is entry.current_code
            if not current and not any(tables) and code not in raised:
                continue
            for device, table in zip(labels, tables):
                records.append(FunctionRecord(
                    qualname=entry.qualname, filename=code.co_filename,
                    first_line=code.co_firstlineno, device=device, columns=list(shown),
                    lines=_lines(code, table, recorded, shown, raised.get(code, {}))))
    return records


def ran(record: FunctionRecord) -> bool:
    return any(line["net_growth"] is not None for line in record["lines"])
