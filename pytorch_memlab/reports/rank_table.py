"""One table for the profiles of several ranks (``torchrun``): per source line,
a column group per rank, or past ``MAX_RANK_GROUPS`` ranks the min, the max and
the rank holding the max, then the spread (max - min) of every figure, so a
rank that allocates more than the others stands out.

Each rank's document is the saved-profile JSON of ``records.document`` with a ``rank``
entry added: ``{"rank": R, "world_size": W, "local_rank": L, "host": ...,
"run_id": ...}``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from ..records.document import from_document
from ..records.meanings import Field
from ..records.model import GROWTH, LineRecord, column_unit
from ..records.ranks import rank_path
from .sections import Figure, Row, Table, cell, raised_note
from .text_table import section_text

MAX_RANK_GROUPS = 4


@dataclass
class RankedFunction:
    qualname: str
    filename: str
    first_line: int
    columns: list[str]
    # lineno -> rank -> line record
    lines: dict[int, dict[int, LineRecord]] = field(default_factory=dict)
    code: dict[int, str] = field(default_factory=dict)


@dataclass
class RankedProfile:
    """The merged view: ``ranks`` that reported, ``missing`` ones (and why)."""
    world_size: int
    ranks: list[int]
    devices: dict[int, str]
    exit_status: dict[int, Optional[int]]
    functions: list[RankedFunction]
    missing: dict[int, str]
    meanings: dict[str, Field] = field(default_factory=dict)   # as the ranks' files say

    def unit(self, column: str) -> str:
        return column_unit(column, self.meanings)


def rank_of(doc: dict[str, Any]) -> int:
    info = doc.get("rank")
    if not isinstance(info, dict) or not isinstance(info.get("rank"), int):
        raise ValueError("not a rank's profile: no \"rank\" entry (written by "
                         "`torchrun ... -m pytorch_memlab run -o DIR/`)")
    return int(info["rank"])


def merge(docs: Sequence[dict[str, Any]], world_size: Optional[int] = None,
          missing: Optional[dict[int, str]] = None) -> RankedProfile:
    """Merge rank documents; ranks below the world size that sent nothing are
    listed in ``missing`` (with the reason given, else "sent nothing")."""
    by_rank = {rank_of(doc): doc for doc in docs}
    size = max([world_size or 0] + [int(d["rank"].get("world_size") or 0) for d in docs]
               + [r + 1 for r in by_rank])
    why = dict(missing or {})
    absent = {r: why.get(r, "sent nothing") for r in range(size) if r not in by_rank}
    functions: dict[tuple[str, int, str], RankedFunction] = {}
    devices, status = {}, {}
    meanings: dict[str, Field] = {}
    for rank in sorted(by_rank):
        doc = by_rank[rank]
        devices[rank] = ", ".join(doc.get("devices") or [])
        status[rank] = (doc.get("run") or {}).get("exit_status")
        profile = from_document(doc, f"rank {rank}'s profile")
        for column, meaning in profile.meanings.items():
            meanings.setdefault(column, meaning)
        for record in profile.functions:
            merged = functions.get(record.key)
            if merged is None:
                merged = functions[record.key] = RankedFunction(
                    record.qualname, record.filename, record.first_line, list(record.columns))
            for line in record.lines:
                merged.code.setdefault(line.lineno, line.code)
                merged.lines.setdefault(line.lineno, {})[rank] = line
    return RankedProfile(size, sorted(by_rank), devices, status, list(functions.values()),
                         absent, meanings)


def _ran(function: RankedFunction) -> bool:
    return any(line.ran for per_rank in function.lines.values() for line in per_rank.values())


def _values(per_rank: dict[int, LineRecord], column: str) -> dict[int, int]:
    values = {r: line.figure(column) for r, line in per_rank.items()}
    return {r: v for r, v in values.items() if v is not None}


def _count(per_rank: dict[int, LineRecord], ranks: Sequence[int]) -> str:
    counts = [per_rank[r].count if r in per_rank else 0 for r in ranks]
    if not any(per_rank[r].ran for r in ranks if r in per_rank):
        return ""
    if len(set(counts)) == 1:
        return str(counts[0])
    return "/".join(str(c) for c in counts)


def _notes(per_rank: dict[int, LineRecord]) -> str:
    raised: dict[str, list[str]] = {}
    for rank, line in sorted(per_rank.items()):
        if line.raised:
            raised.setdefault(raised_note(line.raised), []).append(str(rank))
    return "   ".join(f"{note} on rank {', '.join(r)}" for note, r in raised.items())


def _groups(profile: RankedProfile) -> list[tuple[str, str]]:
    """(group label, kind) in order: kind is a rank number, "min", "max", "argmax",
    or "spread"."""
    if len(profile.ranks) <= MAX_RANK_GROUPS:
        groups = [(f"rank {r} ({profile.devices[r]})", str(r)) for r in profile.ranks]
    else:
        groups = [("min over ranks", "min"), ("max over ranks", "max"),
                  ("rank with the max", "argmax")]
    if len(profile.ranks) > 1:
        groups.append(("spread: max - min", "spread"))
    return groups


def _figure(kind: str, column: str, unit: str, per_rank: dict[int, LineRecord]) -> str:
    values = _values(per_rank, column)
    if kind.isdigit():
        return cell(values.get(int(kind)), unit)
    if not values:
        return ""
    top = max(values.values())
    if kind == "min":
        return cell(min(values.values()), unit)
    if kind == "max":
        return cell(top, unit)
    if kind == "argmax":
        return str(min(r for r, v in values.items() if v == top))
    return cell(top - min(values.values()), unit)     # spread


def _table(function: RankedFunction, profile: RankedProfile) -> Table:
    """The function's section, a column group per rank (or per statistic)."""
    columns = function.columns + [GROWTH]
    units = [profile.unit(c) for c in columns]
    groups = _groups(profile)
    rows = []
    for lineno in sorted(function.lines):
        per_rank = function.lines[lineno]
        figures = [Figure(label, column, c, None, _figure(kind, column, units[c], per_rank))
                   for label, kind in groups for c, column in enumerate(columns)]
        rows.append(Row(lineno, function.code[lineno], _count(per_rank, profile.ranks),
                        _notes(per_rank), any(line.ran for line in per_rank.values()),
                        figures))
    return Table(function.qualname, function.filename, function.first_line,
                 [label for label, _ in groups], columns, rows)


def summary(profile: RankedProfile) -> str:
    parts = []
    for rank in profile.ranks:
        status = profile.exit_status.get(rank)
        parts.append(f"rank {rank}" + ("" if status in (None, 0) else f" (exit {status})"))
    text = (f"# {len(profile.ranks)} of {profile.world_size} ranks: {', '.join(parts)}")
    for rank, why in sorted(profile.missing.items()):
        text += f"\n# missing: rank {rank} ({why})"
    return text + "\n"


class RankTextReport:
    """The merged table of several ranks (a ``Reporter[RankedProfile]``): each
    function's section is the text report's, a column group per rank."""

    def render(self, profile: RankedProfile) -> str:
        shown = [f for f in profile.functions if _ran(f)]
        idle = [f.qualname for f in profile.functions if not _ran(f)]
        parts = [summary(profile)] + [section_text(_table(f, profile)) for f in shown]
        if idle:
            parts.append(f"(not run on any rank: {', '.join(dict.fromkeys(idle))})\n")
        return "\n".join(parts)


def render_ranks_text(profile: RankedProfile) -> str:
    """``RankTextReport``'s table of ``profile``."""
    return RankTextReport().render(profile)


def merged_text(docs: list[dict[str, Any]], out_dir: Optional[str] = None,
                world_size: Optional[int] = None) -> str:
    """The merged table of the rank documents ``docs`` read from ``out_dir``,
    naming the rank files missing from a world of ``world_size``."""
    where = out_dir or "the output folder"
    present = {d["rank"]["rank"] for d in docs}
    size = max([world_size or 0] + [int(d["rank"].get("world_size") or 0) for d in docs])
    missing = {r: f"no {rank_path(where, r)}" for r in range(size) if r not in present}
    return RankTextReport().render(merge(docs, world_size, missing))
