"""A peak's kinds (``record["peak"]``) from the tracer's figures: the bytes
each tagged kind held in each place of the peak (before the call, each line,
other threads), the untagged rest of that place being its own kind (input,
temporary, other).  Every place's kinds sum to that place's bytes, so
``by_kind`` sums to the peak; a rest below zero would be a wrong number, and
the kinds are then left out with the reason."""
from __future__ import annotations

from typing import Any, Optional, Sequence

from .names import INPUT, KINDS, OTHER, TAGGED, TEMPORARY

KindBytes = dict[str, int]
# (before's tagged bytes, other threads', {lineno: a line's}), each in TAGGED order
TaggedPlaces = tuple[tuple[int, ...], tuple[int, ...], dict[int, tuple[int, ...]]]


def _place(total: int, tagged: Sequence[int], rest: str) -> Optional[KindBytes]:
    """A place's kinds, in KINDS order, zeros left out; None when the tagged
    bytes exceed the place."""
    kinds = {name: size for name, size in zip(TAGGED, tagged)}
    kinds[rest] = total - sum(tagged)
    if kinds[rest] < 0:
        return None
    return {k: kinds[k] for k in KINDS if kinds.get(k)}


def summed(parts: Sequence[KindBytes]) -> KindBytes:
    """Parts' kinds added together, in KINDS order."""
    total: dict[str, int] = {}
    for part in parts:
        for kind, size in part.items():
            total[kind] = total.get(kind, 0) + size
    return {k: total[k] for k in KINDS if total.get(k)}


def peak_kinds(before: int, other: int, held: dict[int, int], tagged: TaggedPlaces,
               missing: Optional[str]) -> dict[str, Any]:
    """The kind keys of ``record["peak"]`` (see ``records.document``):
    ``by_kind``, ``before_call_by_kind``, ``other_threads_by_kind`` and
    ``lines_by_kind`` ({lineno: kinds} of each line holding bytes), or
    ``by_kind_missing`` (why not) alone."""
    if missing is not None:
        return {"by_kind_missing": missing}
    kbefore, kother, klines = tagged
    zero = (0,) * len(TAGGED)
    first = _place(before, kbefore, INPUT)
    threads = _place(other, kother, OTHER)
    by_line: dict[int, KindBytes] = {}
    exact = first is not None and threads is not None
    for lineno in sorted(set(held) | set(klines)):
        kinds = _place(held.get(lineno, 0), klines.get(lineno, zero), TEMPORARY)
        exact = exact and kinds is not None
        if kinds:
            by_line[lineno] = kinds
    if first is None or threads is None or not exact:
        return {"by_kind_missing": "more bytes were tagged than a part of the peak holds "
                                   "(a storage the memory source does not count)"}
    return {"by_kind": summed([first, threads, *by_line.values()]),
            "before_call_by_kind": first, "other_threads_by_kind": threads,
            "lines_by_kind": by_line}
