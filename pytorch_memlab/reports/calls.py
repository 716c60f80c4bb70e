"""What the tables say about calls: the mark on a line that grows every call,
the note under a function whose first call's peak differs from the later
calls', and the column groups of ``by_call`` ("first call", "later calls")."""
from __future__ import annotations

from typing import Optional, Sequence

from ..common.sizes import readable_size
from ..records.columns import peak_column
from ..records.model import GROWTH, FunctionRecord, LineRecord

# A first call whose peak differs from the later calls' by more than both of
# these gets a note under its table.
NOTE_RATIO = 0.10
NOTE_BYTES = 1 << 20
FIRST, LATER = "first call", "later calls"
PARTS = ((FIRST, "first_call"), (LATER, "later_calls"))
COUNT = "count"


def grows_note(lines: Sequence[LineRecord]) -> str:
    """``<-- grows every call (+1.00M)`` for a line (one record per device)
    whose growth per call is positive on some device, else ""."""
    growth = max((line.growth_per_call or 0 for line in lines), default=0)
    return f"<-- grows every call (+{readable_size(growth)})" if growth > 0 else ""


def growing_lines(record: FunctionRecord) -> list[LineRecord]:
    """The lines of ``record`` that grow every call, largest first."""
    grown = [line for line in record.lines if (line.growth_per_call or 0) > 0]
    return sorted(grown, key=lambda line: -(line.growth_per_call or 0))


def _peak(lines: Sequence[LineRecord], part: str, column: str) -> Optional[int]:
    values = [v for v in ((getattr(line, part) or {}).get(column) for line in lines)
              if v is not None]
    return max(values) if values else None


def first_call_note(record: FunctionRecord, most: int = 3) -> str:
    """One note when the first call's peak and the later calls' differ by more
    than 10% and 1 MiB, naming the lines whose peaks differ most; else ""."""
    column = peak_column(record.columns)
    if column is None or not record.calls or record.calls < 2:
        return ""
    first, later = _peak(record.lines, "first_call", column), \
        _peak(record.lines, "later_calls", column)
    if first is None or later is None:
        return ""
    change = first - later
    if abs(change) <= NOTE_BYTES or abs(change) <= NOTE_RATIO * max(abs(later), 1):
        return ""
    differing = []
    for line in record.lines:
        a = (line.first_call or {}).get(column)
        b = (line.later_calls or {}).get(column)
        if a is not None and b is not None and a != b:
            differing.append((abs(a - b), a - b, line.lineno))
        elif a is not None and b is None:
            differing.append((abs(a), a, line.lineno))
    differing.sort(key=lambda d: (-d[0], d[2]))
    named = ", ".join(f"{lineno} ({'+' if d >= 0 else ''}{readable_size(d)})"
                      for _, d, lineno in differing[:most])
    sign = "+" if change > 0 else ""
    note = (f"note: on {record.device} the first call's peak ({readable_size(first)}) differs "
            f"from the later {record.calls - 1} calls' ({readable_size(later)}) by "
            f"{sign}{readable_size(change)}")
    if named:
        note += f"; lines that differ most, first call less later: {named}"
    return note + ".  print_stats(by_call=True) shows both."


def part_figure(line: LineRecord, part: str, column: str) -> Optional[int]:
    """A line's figure of ``column`` (or growth, or count) in one call group;
    None where not recorded."""
    figures: Optional[dict[str, Optional[int]]] = getattr(line, part)
    if figures is None:
        return None
    value = figures.get(GROWTH if column == GROWTH else column)
    if column == COUNT and not value:
        return None
    return value
