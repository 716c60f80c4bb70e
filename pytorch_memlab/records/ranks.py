"""The rank files of a run under ``torchrun``: ``OUT/rank<R>.json``, one
saved-profile document per rank with its ``"rank"`` entry, written whole
through a temporary file; a folder of them read back as documents, or as
one profile whose devices say their rank."""
from __future__ import annotations

import glob
import os
import re
from typing import Any, Optional

from .model import FunctionRecord, Profile

_RANK_FILE = re.compile(r"rank(\d+)\.json$")


def rank_path(out_dir: str, rank: int) -> str:
    return os.path.join(out_dir, f"rank{rank}.json")


def write_rank_file(doc: dict[str, Any], out_dir: str) -> str:
    """Write this rank's document to ``out_dir/rank<R>.json`` atomically."""
    from ..common.files import write_replacing
    from .json_file import dumps
    os.makedirs(out_dir, exist_ok=True)
    path = rank_path(out_dir, doc["rank"]["rank"])
    text = dumps(doc)

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8") as out:
            out.write(text)

    write_replacing(path, write)
    return path


def read_rank_dir(out_dir: str, run_id: Optional[str] = None) -> list[dict[str, Any]]:
    """The rank documents in ``out_dir`` (only this ``run_id``'s, if given)."""
    import json

    from .document import from_document
    if not os.path.isdir(out_dir):
        raise OSError(f"{out_dir}: no such folder")
    docs = []
    for path in sorted(glob.glob(os.path.join(out_dir, "rank*.json"))):
        if not _RANK_FILE.search(os.path.basename(path)):
            continue
        with open(path, encoding="utf-8") as f:
            try:
                doc = json.load(f)
                from_document(doc, path)   # checks it
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path} is not JSON ({exc})") from None
        if not isinstance(doc.get("rank"), dict):
            raise ValueError(f"{path} has no \"rank\" entry: not written by a torchrun rank")
        if run_id is None or doc["rank"].get("run_id") == run_id:
            docs.append(doc)
    if not docs:
        raise ValueError(f"{out_dir} holds no rank<R>.json profile")
    return docs


def ranks_profile(path: str) -> Profile:
    """A folder of rank<R>.json files as one profile: each rank's functions,
    device "rankR:<device>" (so that a rank is compared with the same rank
    of another run)."""
    from .document import from_document
    functions: list[FunctionRecord] = []
    columns: list[str] = []
    for doc in read_rank_dir(path):
        rank = doc["rank"]["rank"]         # read_rank_dir checked that "rank" is a dict
        profile = from_document(doc, path)
        columns += [c for c in profile.columns if c not in columns]
        for record in profile.functions:
            record.device = f"rank{rank}:{record.device}"     # read back by split_rank_device
            functions.append(record)
    return Profile(functions, columns, list(dict.fromkeys(r.device for r in functions)))


_RANK_DEVICE = re.compile(r"rank(\d+):(.*)")


def split_rank_device(device: str) -> tuple[Optional[int], str]:
    """(rank, device) of a ``ranks_profile`` device "rankR:<device>", else
    (None, device)."""
    match = _RANK_DEVICE.fullmatch(device)
    return (int(match.group(1)), match.group(2)) if match else (None, device)
