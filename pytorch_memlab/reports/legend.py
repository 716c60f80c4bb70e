"""What each column of a table means, in words (the HTML report's legend)."""
from __future__ import annotations

from typing import Sequence

from ..records.meanings import Field
from ..records.model import GROWTH, HELD

# torch.cuda.memory_stats() families (the CPU source uses the same names).
FAMILIES = {
    "active_bytes": "bytes of live tensors (blocks in use, or freed but still used by a stream)",
    "allocated_bytes": "bytes of blocks handed out to tensors",
    "requested_bytes": "bytes tensors asked for (before rounding to blocks)",
    "reserved_bytes": "bytes the allocator holds from the device (in use or cached)",
    "inactive_split_bytes": "bytes of cached blocks split off a larger one (fragmentation)",
    "allocation": "number of blocks handed out",
    "active": "number of blocks in use",
    "segment": "number of segments reserved from the device",
    "inactive_split": "number of inactive split blocks",
}
POOLS = {"all": "", "small_pool": " (small pool, blocks < 1 MiB)",
         "large_pool": " (large pool)"}
KIND_WORDS = {
    "peak": "the highest value reached while the line ran; over its executions, the maximum",
    "level": "the value when the line ended; over its executions, the maximum",
    "counter": "the amount added while the line ran; over its executions, the sum",
}
HELD_WORDS = ("bytes allocated while the line ran (its callees included) and still alive "
              "when the function reached its peak; with what was alive before that call "
              "and what other threads made, the lines' figures add up to the peak (blank: "
              "the line never ran, or its memory source cannot tell); bytes")
UNIT_NOTE = ("Sizes are binary: B = bytes, K = KiB (1,024 B), M = MiB (1,048,576 B), "
             "G = GiB, T = TiB; hover a figure for its exact bytes.")


def describe_column(column: str, meaning: Field) -> str:
    """One sentence: what the figure is, how lines aggregate it, its unit."""
    if column == GROWTH:
        return ("active bytes at the line's end minus at its start, summed over its "
                "executions (which line keeps memory); bytes")
    if column == HELD:
        return HELD_WORDS
    parts = column.split(".")
    what = FAMILIES.get(parts[0], parts[0].replace("_", " "))
    pool = POOLS.get(parts[1], "") if len(parts) > 2 else ""
    unit = "bytes" if meaning.unit == "bytes" else "a count"
    return f"{what}{pool}: {KIND_WORDS.get(meaning.kind, meaning.kind)}; {unit}"


def legend_rows(columns: Sequence[str], meanings: Sequence[Field],
                held: bool = False) -> list[tuple[str, str]]:
    """(name, description) for each column, held at peak (``held``: the
    tables show it), net growth, count and line: the tables' order."""
    rows = [(c, describe_column(c, m)) for c, m in zip(columns, meanings)]
    if held:
        rows.append(("held at peak", HELD_WORDS))
    rows.append(("active_bytes net growth", describe_column(GROWTH, meanings[0]
                                                            if meanings else Field("", "", ""))))
    rows.append(("count", "how many times the line ran (0 or blank: never)"))
    rows.append(("line", "the line's number in its file"))
    return rows
