"""Two profiles compared line by line: ``pytorch_memlab.diff(old, new)`` and
``python -m pytorch_memlab diff OLD NEW``.

Functions are matched by qualname and device.  Lines are matched by their
code text, aligned like a text diff (the longest common subsequence of the
two functions' stripped lines), so a line inserted or deleted does not shift
the match; identical texts pair in order.  A function's peak is the highest
figure of its peak column over its lines."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence, Union

from .common.sizes import parse_size, readable_size
from .records.model import GROWTH, FunctionRecord, LineRecord, Profile
from .reports.calls import peak_column

ProfileLike = Any   # a Profile, a SavedProfile / LineProfiler, or a path


@dataclass
class LineDiff:
    old: Optional[LineRecord]
    new: Optional[LineRecord]

    @property
    def code(self) -> str:
        return (self.new or self.old).code  # type: ignore[union-attr]

    def change(self, column: str) -> Optional[int]:
        a = self.old.figure(column) if self.old else None
        b = self.new.figure(column) if self.new else None
        if a is None and b is None:
            return None
        return (b or 0) - (a or 0)


@dataclass
class FunctionDiff:
    qualname: str
    device: str
    columns: list[str]
    lines: list[LineDiff]
    old_peak: Optional[int]
    new_peak: Optional[int]
    peak_line: Optional[int] = None      # new line number of the largest increase

    @property
    def peak_change(self) -> int:
        return (self.new_peak or 0) - (self.old_peak or 0)

    @property
    def peak_percent(self) -> Optional[float]:
        return 100.0 * self.peak_change / self.old_peak if self.old_peak else None

    def summary(self) -> str:
        sign = "+" if self.peak_change >= 0 else ""
        pct = self.peak_percent
        where = f", line {self.peak_line}" if self.peak_line is not None else ""
        rel = f", {sign}{pct:.1f}%" if pct is not None else ""
        return (f"{self.qualname}: peak {readable_size(self.old_peak or 0)} -> "
                f"{readable_size(self.new_peak or 0)} ({sign}{readable_size(self.peak_change)}"
                f"{rel}){where}")


@dataclass
class ProfileDiff:
    functions: list[FunctionDiff] = field(default_factory=list)


def _profile(obj: ProfileLike, what: str) -> Profile:
    if isinstance(obj, Profile):
        return obj
    if isinstance(obj, (str, os.PathLike)):
        path = os.fspath(obj)
        if os.path.isdir(path):
            return _rank_folder(path, what)
        if not os.path.exists(path):
            raise ValueError(f"{what}: {path}: no such file")
        from .records.saved import read
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
    """A folder of rank<R>.json files: each rank's functions, device "rankR:<device>"
    (so a rank is compared with the same rank of the other run)."""
    from .distributed import read_rank_dir
    from .records.document import from_document
    try:
        docs = read_rank_dir(path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{what}: {' '.join(str(exc).split())} (a folder must hold the "
                         "rank<R>.json files of `run -o DIR/` under torchrun)") from None
    functions: list[FunctionRecord] = []
    columns: list[str] = []
    for doc in docs:
        rank = doc["rank"]["rank"]         # read_rank_dir checked that "rank" is a dict
        profile = from_document(doc, path)
        columns += [c for c in profile.columns if c not in columns]
        for record in profile.functions:
            record.device = f"rank{rank}:{record.device}"
            functions.append(record)
    return Profile(functions, columns, list(dict.fromkeys(r.device for r in functions)))


def align(old: Sequence[str], new: Sequence[str]) -> list[tuple[Optional[int], Optional[int]]]:
    """Pairs of indexes (None: no partner) matching equal texts in order, by
    the longest common subsequence."""
    n, m = len(old), len(new)
    table = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            table[i][j] = (table[i + 1][j + 1] + 1 if old[i] == new[j]
                           else max(table[i + 1][j], table[i][j + 1]))
    pairs: list[tuple[Optional[int], Optional[int]]] = []
    i = j = 0
    while i < n and j < m:
        if old[i] == new[j]:
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif table[i + 1][j] >= table[i][j + 1]:
            pairs.append((i, None))
            i += 1
        else:
            pairs.append((None, j))
            j += 1
    pairs += [(k, None) for k in range(i, n)] + [(None, k) for k in range(j, m)]
    return pairs


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
                        _peak(old, column), _peak(new, column))
    if column is not None:
        grown = [(line.change(column) or 0, line) for line in lines if line.new is not None]
        best = max(grown, key=lambda pair: pair[0], default=None)
        if best is not None and best[0] > 0:
            diff.peak_line = best[1].new.lineno  # type: ignore[union-attr]
    return diff


def diff(old: ProfileLike, new: ProfileLike,
         columns: Optional[Sequence[str]] = None) -> ProfileDiff:
    """Compare two profiles (``Profile``, ``load()``'s result, a LineProfiler,
    or a path to a .json / .csv / rank folder).  ValueError when they share no
    function (by qualname and device) or a column asked for is in neither."""
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
    out = ProfileDiff()
    for record in b.functions:
        match = olds.get((record.qualname, record.device))
        if match is not None:
            out.functions.append(_function_diff(match, record, shared))
    if not out.functions:
        raise ValueError("the profiles have no function in common (matched by qualname and "
                         f"device; OLD has {', '.join(sorted({r.qualname for r in a.functions})) or 'none'}"
                         f", NEW {', '.join(sorted({r.qualname for r in b.functions})) or 'none'})")
    return out


def signed(value: Optional[int]) -> str:
    """A change as the tables write it: ``+16.00M``, ``-2.00M``, blank when 0."""
    if not value:
        return ""
    return ("+" if value > 0 else "") + readable_size(value)


@dataclass
class DiffRow:
    """One aligned line of a function's diff, as both views show it."""
    line: LineDiff
    lineno: str                  # the new line number, "-N" for a deleted old line N
    figures: list[tuple[Optional[int], Optional[int], Optional[int]]]   # (old, new, change)
    largest: bool                # the largest increase of the function's peak column


def diff_columns(fd: FunctionDiff) -> list[str]:
    return fd.columns + [GROWTH]


def diff_rows(fd: FunctionDiff) -> list[DiffRow]:
    rows = []
    for line in fd.lines:
        figures = [(line.old.figure(c) if line.old else None,
                    line.new.figure(c) if line.new else None, line.change(c))
                   for c in diff_columns(fd)]
        lineno = str(line.new.lineno) if line.new else f"-{line.old.lineno}"  # type: ignore[union-attr]
        largest = line.new is not None and line.new.lineno == fd.peak_line
        rows.append(DiffRow(line, lineno, figures, largest))
    return rows


def render_text(result: ProfileDiff) -> str:
    out: list[str] = []
    for fd in result.functions:
        head = []
        for c in diff_columns(fd):
            head += [f"old {c}", f"new {c}", "change"]
        rows = [head + ["line", "code"]]
        for row in diff_rows(fd):
            cells = []
            for a, b, change in row.figures:
                cells += ["" if a is None else readable_size(a),
                          "" if b is None else readable_size(b), signed(change)]
            mark = "   <-- largest increase" if row.largest else ""
            rows.append(cells + [row.lineno, row.line.code + mark])
        widths = [max(len(r[k]) for r in rows) for k in range(len(head) + 1)]
        out.append(f"## {fd.qualname} ({fd.device})\n")
        for r in rows:
            out.append("  ".join(v.rjust(w) for v, w in zip(r, widths)) + "  " + r[-1])
        out.append("")
    out += [fd.summary() for fd in result.functions]
    return "\n".join(line.rstrip() for line in out) + "\n"


def render_html(result: ProfileDiff) -> str:
    from .reports.diff_html import render_diff_html
    return render_diff_html(result)


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
        raise ValueError(f"{what} {text!r}: expected a size (e.g. 16MiB, 512 KB) or a "
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
