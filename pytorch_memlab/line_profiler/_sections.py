"""Groups per-device records of one function into a section to render, and
says what each column of a section is."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from ._stats import FunctionRecord, LineRecord, ran
from ..common.sizes import format_value, readable_size

GROWTH = "net_growth"
GROWTH_TITLE = ("active_bytes", "net growth")


@dataclass
class Section:
    qualname: str
    filename: str
    first_line: int
    records: list[FunctionRecord]        # one per device, same lines

    @property
    def devices(self) -> list[str]:
        return [r["device"] for r in self.records]

    @property
    def columns(self) -> list[str]:
        """Figures of each device group, in order: requested columns, then growth."""
        return self.records[0]["columns"] + [GROWTH]

    @property
    def postmortem(self) -> Optional[dict]:
        """The out-of-memory post-mortem of this function, if one escaped it."""
        return next((r["postmortem"] for r in self.records if "postmortem" in r), None)

    def rows(self) -> list[tuple[LineRecord, list[LineRecord]]]:
        """(first device's line, every device's line) for each source line."""
        per_device = [r["lines"] for r in self.records]
        return [(lines[0], list(lines)) for lines in zip(*per_device)]


def sections(records: Sequence[FunctionRecord]) -> tuple[list[Section], list[str]]:
    """(sections of functions that ran, qualnames of those that did not)."""
    grouped: dict[tuple[str, int, str], Section] = {}
    for record in records:
        key = (record["filename"], record["first_line"], record["qualname"])
        if key not in grouped:
            grouped[key] = Section(record["qualname"], record["filename"],
                                   record["first_line"], [])
        grouped[key].records.append(record)
    shown = [s for s in grouped.values() if any(ran(r) for r in s.records)]
    idle = [s.qualname for s in grouped.values() if not any(ran(r) for r in s.records)]
    return shown, list(dict.fromkeys(idle))


def title(column: str) -> tuple[str, str]:
    """Two header rows: the field's family and the rest of its name."""
    if column == GROWTH:
        return GROWTH_TITLE
    family, _, rest = column.partition(".")
    return family, rest


def cell(column: str, value: Optional[int]) -> str:
    if value is None:
        return ""
    return readable_size(value) if column == GROWTH else format_value(column, value)


def count_cell(line: LineRecord) -> str:
    return "" if line["net_growth"] is None else str(line["count"])


def raised_note(line: LineRecord) -> str:
    return f"<-- {line['raised']} raised here" if line["raised"] else ""


NOTHING_REGISTERED = ("No function is registered with this profiler: pass functions to "
                      "LineProfiler(...) or call add_function(func).")


def idle_note(idle: Sequence[str], any_shown: bool) -> str:
    if not idle:
        return "" if any_shown else NOTHING_REGISTERED
    if any_shown:
        return f"(not run while profiling: {', '.join(idle)})"
    return ("No profiled function ran while the profiler was enabled "
            f"(registered: {', '.join(idle)}).")
