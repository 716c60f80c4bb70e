"""A profile read back from disk: ``pytorch_memlab.load`` gives a
``SavedProfile`` that prints and displays exactly like the live profiler."""
from __future__ import annotations

import sys
from typing import IO, TYPE_CHECKING, Any, Optional

from ..records.columns import pick_columns
from ..records.document import all_columns, to_document
from ..records.model import FunctionRecord, Profile
from ..records.saved import PathArg, read, save
from ..records.selection import selects
from .display import ProfileDisplay

if TYPE_CHECKING:
    import pandas


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
        shown = pick_columns(columns, self.columns)
        records = [r for r in self.profile.functions if selects(func, r.qualname, r.filename)]
        if func is not None and not records:
            names = ", ".join(dict.fromkeys(r.qualname for r in self.profile.functions))
            raise ValueError(f"{func!r} is not a function of this profile (saved: {names})")
        return [r.project(shown) for r in records]

    def display(self, func: Any = None, columns: Any = None,
                by_call: bool = False, hide_unrun: bool = False) -> ProfileDisplay:
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
        from ..records.dataframe import dataframe
        return dataframe(self.stats(func, columns))

    def to_dict(self) -> dict[str, Any]:
        """The document as read, in the current JSON schema of
        ``records.document`` (a version 1 file gains its ``column_meanings``)."""
        return to_document(self.profile)

    def save(self, path: PathArg, format: Optional[str] = None) -> None:
        """Write it again, as JSON or CSV (by extension, or ``format``)."""
        save(self.profile, path, format)
