"""What the tables say about calls: the mark on a line that grows every call,
the note under a function whose first call's peak differs from the later
calls', and the column groups of ``by_call`` ("first call", "later calls")."""
from __future__ import annotations

from typing import Optional, Sequence

from ..common.sizes import readable_size
from ..records.columns import PEAK_COLUMN, peak_column
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
    than 10% and 1 MiB, saying how much of that was alive before the calls
    began (where the record knows: ``start_level``) and naming the lines whose
    peaks differ most for the rest; else ""."""
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
    starts = _starts(record, column)
    if starts is not None:
        return _split_note(record, first, later, starts, most)
    named = _named(record.lines, column, most)
    sign = "+" if change > 0 else ""
    note = (f"note: on {record.device} the first call's peak ({readable_size(first)}) differs "
            f"from the later {record.calls - 1} calls' ({readable_size(later)}) by "
            f"{sign}{readable_size(change)}")
    if named:
        note += f"; lines that differ most, first call less later: {named}"
    return note + ".  " + _SHOWS


_SHOWS = "print_stats(by_call=True) shows both."


def _starts(record: FunctionRecord, column: str) -> Optional[tuple[int, int]]:
    """(level when the first call began, when the later call that reached the
    peak began): only for the active bytes' peak, which that level underlies."""
    known = record.start_level or {}
    first, later = known.get("first_call"), known.get("later_calls")
    if column != PEAK_COLUMN or first is None or later is None:
        return None
    return first, later


def _named(lines: Sequence[LineRecord], column: str, most: int,
           starts: Optional[tuple[int, int]] = None) -> str:
    """The lines whose peaks differ most between the first call and the later
    calls, as "12 (+1.00M)": first call less later; with ``starts``, later
    calls less first, each counted from its call's start."""
    base_a, base_b = starts or (0, 0)
    sign = 1 if starts is None else -1
    differing = []
    for line in lines:
        a = (line.first_call or {}).get(column)
        b = (line.later_calls or {}).get(column)
        if a is not None and b is not None and a - base_a != b - base_b:
            d = sign * ((a - base_a) - (b - base_b))
            differing.append((abs(d), d, line.lineno))
        elif a is not None and b is None and a != base_a:
            differing.append((abs(a - base_a), sign * (a - base_a), line.lineno))
    differing.sort(key=lambda d: (-d[0], d[2]))
    return ", ".join(f"{lineno} ({'+' if d >= 0 else ''}{readable_size(d)})"
                     for _, d, lineno in differing[:most])


def _more(size: int) -> str:
    return f"{readable_size(abs(size))} {'more' if size > 0 else 'less'}"


_LEFT = "what earlier calls left alive, such as optimizer state, caches or a leak"


def _split_note(record: FunctionRecord, first: int, later: int, starts: tuple[int, int],
                most: int) -> str:
    """The note of a record that knows what was alive when its calls began:
    the later calls' peak against the first's, split into that and what the
    lines made; lines are named only for their part."""
    change, before = later - first, starts[1] - starts[0]
    made = change - before
    note = (f"note: on {record.device} the later {(record.calls or 0) - 1} calls' peak "
            f"({readable_size(later)}) is {readable_size(abs(change))} "
            f"{'higher' if change > 0 else 'lower'} than the first call's "
            f"({readable_size(first)})")
    if made == 0:
        return (f"{note}: all of it was alive before the call began ({_more(before)} than "
                f"before the first call: {_LEFT}); the lines made no difference.  {_SHOWS}")
    if before == 0:
        note += ": as much was alive before each call began; the lines made the difference"
    else:
        note += (f": {_more(before)} was alive before the call began ({_LEFT}), and the "
                 f"lines made {_more(made)}")
    named = _named(record.lines, PEAK_COLUMN, most, starts)
    if named:
        note += f"; lines that differ most, later calls less first, each from its call's start: {named}"
    return f"{note}.  {_SHOWS}"


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
