"""A profile on disk: ``LineProfiler.save`` writes it, ``pytorch_memlab.load``
reads it back into a ``SavedProfile`` that prints and displays exactly like
the live profiler."""
from __future__ import annotations

import os
import sys
from typing import IO, TYPE_CHECKING, Any, Optional, Union

from . import csv_file, json_file
from .document import all_columns, to_document
from .model import FunctionRecord, Profile
from .selection import selects

if TYPE_CHECKING:
    import pandas

    from ..reports.display import ProfileDisplay

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


def load(path: PathArg) -> "SavedProfile":
    """Read a profile written by ``LineProfiler.save`` (or ``python -m
    pytorch_memlab run -o``): JSON, or CSV by its ``.csv`` extension."""
    return SavedProfile(read(path))


class SavedProfile:
    """A profile read back by ``pytorch_memlab.load``: ``print_stats``,
    ``display``, ``stats`` and ``to_dataframe`` behave as the live
    ``LineProfiler``'s did; ``repr`` is the text table and notebooks show the
    HTML one.  ``timeline``, ``run`` and the ``*_version`` attributes are what
    the file recorded."""

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self.columns: tuple[str, ...] = tuple(all_columns(profile.columns, profile.functions))
        self.devices: list[str] = list(profile.devices)
        self.timeline = list(profile.timeline)
        self.run: Optional[dict[str, Any]] = profile.run
        self.schema_version: int = profile.schema_version
        self.pytorch_memlab_version = profile.versions.get("pytorch_memlab_version")
        self.torch_version = profile.versions.get("torch_version")
        self.created: Optional[str] = profile.created

    def stats(self, func: Any = None, columns: Any = None) -> list[FunctionRecord]:
        """The saved records (``func``: a qualname, its last part, a function,
        or a list of these; ``columns``: a subset of the saved columns)."""
        from .columns import pick_columns
        shown = pick_columns(columns, self.columns)
        records = [r for r in self.profile.functions if selects(func, r.qualname, r.filename)]
        if func is not None and not records:
            names = ", ".join(dict.fromkeys(r.qualname for r in self.profile.functions))
            raise ValueError(f"{func!r} is not a function of this profile (saved: {names})")
        return [r.project(shown) for r in records]

    def display(self, func: Any = None, columns: Any = None,
                by_call: bool = False, hide_unrun: bool = False) -> "ProfileDisplay":
        from ..reports.display import ProfileDisplay
        return ProfileDisplay(self.profile.select(self.stats(func, columns)), by_call,
                              hide_unrun)

    def print_stats(self, func: Any = None, columns: Any = None,
                    stream: Optional[IO[str]] = None, by_call: bool = False,
                    hide_unrun: bool = False) -> None:
        out = stream if stream is not None else sys.stdout
        out.write(repr(self.display(func, columns, by_call, hide_unrun)) + "\n")
        out.flush()

    def __repr__(self) -> str:
        return repr(self.display())

    __str__ = __repr__

    def _repr_html_(self) -> str:
        return self.display()._repr_html_()

    def to_dataframe(self, func: Any = None, columns: Any = None) -> "pandas.DataFrame":
        from .dataframe import dataframe
        return dataframe(self.stats(func, columns))

    def to_dict(self) -> dict[str, Any]:
        """The document as read, in the current JSON schema of
        ``records.document`` (a version 1 file gains its ``column_meanings``)."""
        return to_document(self.profile)

    def save(self, path: PathArg, format: Optional[str] = None) -> None:
        """Write it again, as JSON or CSV (by extension, or ``format``)."""
        save(self.profile, path, format)
