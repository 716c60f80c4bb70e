"""Two profiles compared line by line: ``pytorch_memlab.diff(old, new)`` and
``python -m pytorch_memlab diff OLD NEW``.

Functions are matched by qualname and device.  Lines are matched by their
code text, aligned like a text diff (the longest common subsequence of the
two functions' stripped lines, ``common.align``), so a line inserted or
deleted does not shift the match; identical texts pair in order.  A
function's peak is the highest figure of its peak column over its lines.

Its change is blamed from the breakdown both records carry (``peak``: what
was alive before the call and in other threads, and each line's
``held_at_peak``): each part's change, an inserted line's whole held bytes.
The largest increase is the line whose held_at_peak grew most, unless what was
alive before the call grew by at least half of all the parts that grew: then
the growth is before the call and no line is blamed.  Without a breakdown on
both sides, the largest increase is the line whose peak figure grew most.
A peak that did not grow blames no line."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

from ..common.align import align
from ..common.sizes import parse_size, readable_size
from .columns import peak_column
from .model import HELD, FunctionRecord, LineRecord, Profile
from .ranks import ranks_profile, split_rank_device

ProfileLike = Any   # a Profile, a SavedProfile / LineProfiler, or a path
Figures = tuple[Optional[int], Optional[int], Optional[int]]   # old, new, change


@dataclass
class LineDiff:
    """One aligned line: ``old`` or ``new`` is None where it has no partner
    (tested with "is not None": a record is a Mapping, whose truth counts its keys)."""

    old: Optional[LineRecord]
    new: Optional[LineRecord]

    @property
    def code(self) -> str:
        shown = self.new if self.new is not None else self.old
        return shown.code  # type: ignore[union-attr]

    def change(self, column: str) -> Optional[int]:
        a = self.old.figure(column) if self.old is not None else None
        b = self.new.figure(column) if self.new is not None else None
        return _change(a, b)

    def figures(self, columns: Sequence[str]) -> list[Figures]:
        """(old, new, change) per column."""
        old, new = self.old, self.new
        olds = [old.figure(c) for c in columns] if old is not None else [None] * len(columns)
        news = [new.figure(c) for c in columns] if new is not None else [None] * len(columns)
        return [(a, b, _change(a, b)) for a, b in zip(olds, news)]


def _change(old: Optional[int], new: Optional[int]) -> Optional[int]:
    """None where neither side has a figure; a missing one counts as 0."""
    return None if old is None and new is None else (new or 0) - (old or 0)


@dataclass
class PeakBlame:
    """The change of a function's peak bytes, part by part; the parts sum to it."""

    total: int
    before_call: int                      # what was alive before the call began
    other_threads: int
    lines: list[tuple[LineDiff, int]]     # each aligned line's change of held_at_peak

    @property
    def grown(self) -> int:
        """All that grew: the sum of the parts that grew."""
        parts = [self.before_call, self.other_threads] + [c for _, c in self.lines]
        return sum(p for p in parts if p > 0)

    @property
    def before(self) -> bool:
        """The growth is before the call: at least half of all that grew."""
        return self.before_call > 0 and 2 * self.before_call >= self.grown

    def largest(self) -> Optional[LineRecord]:
        """The new line whose held_at_peak grew most, unless the peak did not
        grow, the growth is before the call or no line grew."""
        grown = [(change, line.new) for line, change in self.lines
                 if change > 0 and line.new is not None]
        if self.total <= 0 or self.before or not grown:
            return None
        return max(grown, key=lambda pair: pair[0])[1]


@dataclass
class FunctionDiff:
    qualname: str
    device: str
    columns: list[str]
    lines: list[LineDiff]
    old_peak: Optional[int]
    new_peak: Optional[int]
    peak_line: Optional[int] = None      # new line number of the largest increase
    blame: Optional[PeakBlame] = None    # None: a side has no breakdown of its peak
    no_blame: str = ""                   # then, why, and how the line was chosen
    held: bool = False                   # a side's lines carry held_at_peak

    @property
    def peak_change(self) -> int:
        return (self.new_peak or 0) - (self.old_peak or 0)

    @property
    def peak_percent(self) -> Optional[float]:
        return 100.0 * self.peak_change / self.old_peak if self.old_peak else None

    def summary(self) -> str:
        sign = "+" if self.peak_change >= 0 else ""
        pct = self.peak_percent
        where = (", before the call" if self.blame and self.blame.before
                 else f", line {self.peak_line}" if self.peak_line is not None else "")
        rel = f", {sign}{pct:.1f}%" if pct is not None else ""
        return (f"{self.qualname}: peak {readable_size(self.old_peak or 0)} -> "
                f"{readable_size(self.new_peak or 0)} ({sign}{readable_size(self.peak_change)}"
                f"{rel}){where}")


@dataclass
class OneSide:
    """A rank, device or function that one profile has and the other lacks."""

    side: str       # the profile that has it: "OLD" or "NEW"
    kind: str       # "rank", "device" or "function"
    name: str       # "rank 1", "device cuda:0", "function f (train.py:12) on cpu"

    def text(self) -> str:
        return f"only in {self.side}: {self.name}"


@dataclass
class ProfileDiff:
    functions: list[FunctionDiff] = field(default_factory=list)
    one_side: list[OneSide] = field(default_factory=list)

    @property
    def missing_from_new(self) -> list[OneSide]:
        """What OLD measured and NEW does not (a gate fails on it)."""
        return [item for item in self.one_side if item.side == "OLD"]


def _profile(obj: ProfileLike, what: str) -> Profile:
    if isinstance(obj, Profile):
        return obj
    if isinstance(obj, (str, os.PathLike)):
        path = os.fspath(obj)
        if os.path.isdir(path):
            return _rank_folder(path, what)
        if not os.path.exists(path):
            raise ValueError(f"{what}: {path}: no such file")
        from .saved import read
        try:
            return read(path)
        except (OSError, ValueError) as exc:
            raise ValueError(f"{what}: {path}: not a saved profile (a .json or .csv written "
                             f"by save() or `run -o`): {' '.join(str(exc).split())}") from None
    profile = getattr(obj, "profile", None)
    if isinstance(profile, Profile):
        return profile
    if hasattr(obj, "to_profile"):
        result: Profile = obj.to_profile()
        return result
    raise TypeError(f"{what}: expected a profile, a loaded profile, a LineProfiler or a path, "
                    f"not {type(obj).__name__}")


def _rank_folder(path: str, what: str) -> Profile:
    try:
        return ranks_profile(path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{what}: {' '.join(str(exc).split())} (a folder must hold the "
                         "rank<R>.json files of `run -o DIR/` under torchrun)") from None


def _where(device: str) -> str:
    rank, name = split_rank_device(device)
    return name if rank is None else f"{name} of rank {rank}"


def _devices(profile: Profile) -> list[str]:
    return list(dict.fromkeys(list(profile.devices) + [r.device for r in profile.functions]))


def _one_side(a: Profile, b: Profile) -> list[OneSide]:
    """Each rank, device or function one profile has and the other lacks,
    named once: a rank's devices and functions, a device's functions, not again."""
    out: list[OneSide] = []
    for side, this, other in (("OLD", a, b), ("NEW", b, a)):
        theirs = _devices(other)
        their_ranks = {split_rank_device(d)[0] for d in theirs}
        their_functions = {(r.qualname, r.device) for r in other.functions}
        ranks: list[int] = []
        for device in _devices(this):
            rank = split_rank_device(device)[0]
            if device in theirs or rank in ranks:
                continue
            if rank is not None and rank not in their_ranks:
                ranks.append(rank)
                out.append(OneSide(side, "rank", f"rank {rank}"))
            else:
                out.append(OneSide(side, "device", f"device {_where(device)}"))
        out += [OneSide(side, "function", f"function {r.qualname} "
                        f"({os.path.basename(r.filename)}:{r.first_line}) on {_where(r.device)}")
                for r in this.functions
                if r.device in theirs and (r.qualname, r.device) not in their_functions]
    return out


def _peak(record: FunctionRecord, column: Optional[str]) -> Optional[int]:
    if column is None:
        return None
    values = [line.figure(column) for line in record.lines]
    known = [v for v in values if v is not None]
    return max(known) if known else None


def _function_diff(old: FunctionRecord, new: FunctionRecord,
                   columns: Sequence[str]) -> FunctionDiff:
    pairs = align([line.code.strip() for line in old.lines],
                  [line.code.strip() for line in new.lines])
    lines = [LineDiff(old.lines[i] if i is not None else None,
                      new.lines[j] if j is not None else None) for i, j in pairs]
    column = peak_column(columns)
    diff = FunctionDiff(new.qualname, new.device, list(columns), lines,
                        _peak(old, column), _peak(new, column),
                        held=old.has_held or new.has_held)
    if old.peak is not None and new.peak is not None:
        diff.blame = PeakBlame(new.peak["bytes"] - old.peak["bytes"],
                               new.peak["before_call"] - old.peak["before_call"],
                               new.peak["other_threads"] - old.peak["other_threads"],
                               [(line, line.change(HELD) or 0) for line in lines])
        largest = diff.blame.largest()
        diff.peak_line = largest.lineno if largest else None
        return diff
    lacking = " and ".join(side for side, r in (("OLD", old), ("NEW", new)) if r.peak is None)
    diff.no_blame = (f"{lacking} without a breakdown of the peak (held_at_peak: a file older "
                     "than schema version 4, or a polled source): ")
    if column is None:
        diff.no_blame += "no line is marked"
        return diff
    diff.no_blame += f"the line marked is the one whose {column} grew most"
    grown = [(line.change(column) or 0, line) for line in lines if line.new is not None]
    best = max(grown, key=lambda pair: pair[0], default=None)
    if best is not None and best[0] > 0 and diff.peak_change > 0:
        diff.peak_line = best[1].new.lineno  # type: ignore[union-attr]
    return diff


def diff(old: ProfileLike, new: ProfileLike,
         columns: Optional[Sequence[str]] = None) -> ProfileDiff:
    """Compare two profiles (``Profile``, ``load()``'s result, a LineProfiler,
    or a path to a .json / .csv / rank folder): the functions both have, and
    (``one_side``) each rank, device or function only one has.  ValueError when
    they share no function (by qualname and device) or a column asked for is
    in neither."""
    a, b = _profile(old, "OLD"), _profile(new, "NEW")
    shared = [c for c in (columns or b.columns) if c in a.columns or c in b.columns]
    if columns:
        missing = [c for c in columns if c not in shared]
        if missing:
            raise ValueError(f"-c {missing[0]}: not a column of either profile (they have: "
                             f"{', '.join(dict.fromkeys(a.columns + b.columns))})")
    if not set(a.devices) & set(b.devices):
        raise ValueError(f"the profiles share no device (OLD: {', '.join(a.devices) or 'none'}; "
                         f"NEW: {', '.join(b.devices) or 'none'})")
    olds = {(r.qualname, r.device): r for r in a.functions}
    out = ProfileDiff(one_side=_one_side(a, b))
    for record in b.functions:
        match = olds.get((record.qualname, record.device))
        if match is not None:
            out.functions.append(_function_diff(match, record, shared))
    if not out.functions:
        raise ValueError("the profiles have no function in common (matched by qualname and "
                         f"device; OLD has {', '.join(sorted({r.qualname for r in a.functions})) or 'none'}"
                         f", NEW {', '.join(sorted({r.qualname for r in b.functions})) or 'none'})")
    return out


def parse_threshold(text: str, what: str) -> tuple[str, float]:
    """("percent", p) for "5%", else ("bytes", n) for a size like "16MiB"."""
    value = text.strip()
    if value.endswith("%"):
        try:
            number = float(value[:-1])
        except ValueError:
            number = -1.0
        if number < 0:
            raise ValueError(f"{what} {text!r}: expected a size (e.g. 16MiB) or a "
                             "percentage (e.g. 5%)")
        return "percent", number
    try:
        return "bytes", float(parse_size(value, what))
    except (TypeError, ValueError):
        raise ValueError(f"{what} {text!r}: expected a size (e.g. 16MiB, 512 KB, 0) or a "
                         "percentage (e.g. 5%)") from None


def over(fd: FunctionDiff, threshold: tuple[str, float]) -> bool:
    kind, limit = threshold
    if kind == "bytes":
        return fd.peak_change > limit
    pct = fd.peak_percent
    return pct is not None and pct > limit


def exceeded(result: ProfileDiff, threshold: Union[str, tuple[str, float]]) -> list[FunctionDiff]:
    parsed = parse_threshold(threshold, "--fail-over") if isinstance(threshold, str) \
        else threshold
    return [fd for fd in result.functions if over(fd, parsed)]
