"""A peak's kinds (``record["peak"]``) from the tracer's figures: the bytes
each tagged kind held in each place of the peak (before the call, each line,
other threads), the untagged rest of that place being its own kind (input,
temporary, other).  Every place's kinds sum to that place's bytes, so
``by_kind`` sums to the peak; a rest below zero would be a wrong number, and
the kinds are then left out with the reason."""
from __future__ import annotations

from typing import Any, Optional, Sequence

from .modules import name_of, stopped_among
from .names import INPUT, KINDS, NO_MODULE, OTHER, TAGGED, TEMPORARY

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


def peak_modules(made: int, modules: dict[int, int], missing: Optional[str]) -> dict[str, Any]:
    """``record["peak"]["by_module"]``: of the ``made`` bytes the call's lines
    hold at the peak, what each module made while it was the innermost one
    running on its thread, by name (``modules.NO_MODULE``: outside every
    module), summing to ``made``, and ``by_module_stopped_at``, the names
    among them charged with what a compiled or checkpointed region's modules
    made, largest first (left out when none); or ``by_module_missing`` (why
    not) alone."""
    if missing is not None:
        return {"by_module_missing": missing}
    by_name: dict[str, int] = {}
    for number, size in modules.items():
        name = name_of(number)
        by_name[name] = by_name.get(name, 0) + size
    rest = made - sum(by_name.values())
    if rest < 0 or any(size < 0 for size in by_name.values()):
        return {"by_module_missing": "the modules hold more than the lines"}
    if rest:
        by_name[NO_MODULE] = rest
    out: dict[str, Any] = {"by_module": {name: size for name, size in by_name.items() if size}}
    # where attribution stopped: a compiled or checkpointed region's own
    # modules are charged to these
    held = [number for number, size in modules.items() if size > 0]
    stopped = {name_of(number) for number in stopped_among(held)}
    at = sorted((name for name in out["by_module"] if name in stopped),
                key=lambda name: -out["by_module"][name])
    if at:
        out["by_module_stopped_at"] = at
    return out


def module_kinds(peak: dict[str, Any], tagged: dict[int, tuple[int, ...]]) -> dict[str, Any]:
    """``record["peak"]["modules_by_kind"]``: each ``by_module`` name's bytes
    by kind, ``{name: {kind: bytes}}`` (``tagged``: the tracer's tagged bytes
    of each module number, summed by name as ``by_module`` is; a module's
    untagged rest is temporary, as its bytes were made during the call), in
    ``by_module``'s order; ``modules.NO_MODULE``'s are the lines' kinds less
    the modules'.  Empty where ``by_kind`` or ``by_module`` is missing, or
    where the two disagree (a kind the modules hold more of than the lines)."""
    by_module, lines = peak.get("by_module"), peak.get("lines_by_kind")
    if by_module is None or lines is None:
        return {}
    zero = (0,) * len(TAGGED)
    by_name: dict[str, tuple[int, ...]] = {}
    for number, sizes in tagged.items():
        name = name_of(number)
        by_name[name] = tuple(a + b for a, b in zip(by_name.get(name, zero), sizes))
    if not set(by_name) <= set(by_module) - {NO_MODULE}:
        return {}
    out: dict[str, KindBytes] = {}
    for name, size in by_module.items():
        if name != NO_MODULE:
            place = _place(size, by_name.get(name, zero), TEMPORARY)
            if place is None:
                return {}
            out[name] = place
    rest = summed(list(lines.values()))
    for place in out.values():
        for kind, size in place.items():
            rest[kind] = rest.get(kind, 0) - size
    if (any(size < 0 for size in rest.values())
            or sum(rest.values()) != by_module.get(NO_MODULE, 0)):
        return {}
    if by_module.get(NO_MODULE):
        out[NO_MODULE] = {k: rest[k] for k in KINDS if rest.get(k)}
    return {"modules_by_kind": {name: out[name] for name in by_module}}


def live_kinds(before: int, during: int, other: int, after: int,
               tagged: tuple[tuple[int, ...], ...], modules: dict[int, int]) -> dict[str, Any]:
    """The out-of-memory post-mortem's ``live_by_line`` kinds: ``by_kind``
    of what is alive at the failure (before the call: input; made during it:
    temporary; by other threads or after it: other) and ``by_module`` of what
    the call made; a key that cannot be exact is left out."""
    out: dict[str, Any] = {}
    places = [_place(size, kinds, rest) for size, kinds, rest in
              zip((before, during, other, after), tagged, (INPUT, TEMPORARY, OTHER, OTHER))]
    if all(p is not None for p in places):
        out["by_kind"] = summed([p for p in places if p is not None])
    out.update({k: v for k, v in peak_modules(during, modules, None).items()
                if k == "by_module"})
    return out
