"""A profile on disk: ``LineProfiler.save`` writes it (``save``), ``read``
reads it back as a ``Profile`` (``pytorch_memlab.load`` wraps that in a
``SavedProfile``, ``reports/saved_profile.py``)."""
from __future__ import annotations

import os
from typing import Optional, Union

from . import csv_file, json_file
from .document import all_columns, to_document
from .model import Profile

PathArg = Union[str, "os.PathLike[str]"]
FORMATS = {".json": "json", ".csv": "csv"}


def format_of(path: PathArg, format: Optional[str] = None) -> str:
    """'json' or 'csv': ``format`` if given, else from the file name."""
    if format is not None:
        if format not in FORMATS.values():
            raise ValueError(f"format={format!r}: expected 'json' or 'csv'")
        return format
    ext = os.path.splitext(os.fspath(path))[1].lower()
    if ext not in FORMATS:
        raise ValueError(f"cannot tell the format of {os.fspath(path)!r} from its extension: "
                         "name it .json or .csv, or pass format='json' / 'csv' "
                         "(the HTML report: pytorch_memlab.html_report.write_report)")
    return FORMATS[ext]


def save(profile: Profile, path: PathArg, format: Optional[str] = None) -> None:
    kind = format_of(path, format)
    with open(path, "w", encoding="utf-8", newline="") as out:
        if kind == "json":
            out.write(json_file.dumps(to_document(profile)))
        else:
            csv_file.write(profile, all_columns(profile.columns, profile.functions), out)


def read(path: PathArg) -> Profile:
    """The profile in ``path``: JSON, or CSV by its ``.csv`` extension.
    ValueError naming the file (and the field or row) for anything else."""
    name = os.fspath(path)
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{name} is not a text file (byte {exc.start} is not UTF-8); "
                         "pytorch_memlab.load reads the .json and .csv files "
                         "LineProfiler.save writes") from None
    if name.lower().endswith(".csv"):
        return csv_file.loads(text, name)
    return json_file.loads(text, name)
