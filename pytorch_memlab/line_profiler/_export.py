"""Saved profiles: ``LineProfiler.save`` writes them, ``pytorch_memlab.load``
reads them back into a ``SavedProfile`` that prints and displays exactly like
the live profiler.

JSON, schema version 1 (``SCHEMA_VERSION``)::

    {
      "format": "pytorch_memlab.line_profile",
      "schema_version": 1,
      "pytorch_memlab_version": "1.0.0",
      "torch_version": "2.13.0+cpu",
      "python_version": "3.11.9",
      "created": "2025-06-01T12:00:00+00:00",       # UTC, ISO 8601
      "devices": ["cpu"],                            # column groups, in order
      "columns": ["active_bytes.all.peak", "reserved_bytes.all.peak"],
      "functions": [                                 # one per function and device
        {"qualname": "Net.forward", "filename": "/src/train.py", "first_line": 12,
         "device": "cpu",
         "columns": ["active_bytes.all.peak", "reserved_bytes.all.peak"],
         "lines": [
           {"lineno": 12, "code": "    def forward(self, x):", "count": 0,
            "net_growth": null, "active_bytes.all.peak": null,
            "reserved_bytes.all.peak": null, "raised": null},
           {"lineno": 13, "code": "        h = self.linear(x)", "count": 3,
            "net_growth": 786432, "active_bytes.all.peak": 1310720,
            "reserved_bytes.all.peak": 1310720, "raised": null}]}],
      "timeline": [                                  # profile_every only, else []
        {"call": 1, "device": "cpu", "active_bytes": 1048576,
         "reserved_bytes": 1048576}],
      "run": {"argv": ["train.py", "--epochs", "1"], "module": null,   # `run` only, else null
              "exit_status": 0}
    }

Every source line of a function is listed; a line that never ran has count 0
and null figures.  ``net_growth`` is the sum over executions of the change in
``active_bytes.all.current``; each column is aggregated as the tracer does
("*.peak": max of per-execution peaks; "*.allocated"/"*.freed": sums; other
fields: max of end-of-line values).  Bytes are exact integers.  ``raised``
names the exception that left the function through that line.  The record of
the innermost function an out-of-memory error escaped also has a
``"postmortem"`` object (its keys: ``pytorch_memlab/_postmortem.py``).  A reader
accepts any file whose schema_version is not newer than its own and ignores
keys it does not know; a change of meaning bumps the version.

CSV: one row per source line of every function and device, with the header
``qualname, filename, first_line, device, lineno, count, net_growth,
<columns...>, raised, code``; an empty cell is a null.  It has no versions or
timeline; ``load`` reads it too.
"""
from __future__ import annotations

import csv
import io
import json
import os
import platform
import sys
from datetime import datetime, timezone
from typing import IO, TYPE_CHECKING, Any, Optional, Sequence, Union

from ._columns import ColumnsArg, pick_columns
from ._display import ProfileDisplay
from ._functions import resolve_function
from ._stats import FunctionRecord, LineRecord

if TYPE_CHECKING:
    import pandas

FORMAT = "pytorch_memlab.line_profile"
SCHEMA_VERSION = 1
FORMATS = {".json": "json", ".csv": "csv"}
_RECORD_KEYS = ("qualname", "filename", "first_line", "device")
_LINE_KEYS = ("lineno", "count", "net_growth")
PathArg = Union[str, "os.PathLike[str]"]


def _versions() -> dict[str, str]:
    import torch

    from .. import __version__
    return {"pytorch_memlab_version": __version__, "torch_version": str(torch.__version__),
            "python_version": platform.python_version()}


def export_data(records: Sequence[FunctionRecord], columns: Sequence[str],
                devices: Sequence[str], timeline: Sequence[dict[str, Any]],
                run: Optional[dict[str, Any]] = None) -> dict[str, Any]:
    """The JSON document (see the module docstring) for these records."""
    data: dict[str, Any] = {"format": FORMAT, "schema_version": SCHEMA_VERSION}
    data.update(_versions())
    data["created"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    data["devices"] = list(devices)
    data["columns"] = list(columns)
    data["functions"] = [dict(r, lines=[dict(line) for line in r["lines"]]) for r in records]
    data["timeline"] = [dict(row) for row in timeline]
    data["run"] = run
    return data


# ---- writing -----------------------------------------------------------------

def format_of(path: PathArg, format: Optional[str] = None) -> str:
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


def csv_header(columns: Sequence[str]) -> list[str]:
    return list(_RECORD_KEYS) + list(_LINE_KEYS) + list(columns) + ["raised", "code"]


def _all_columns(data: dict[str, Any]) -> list[str]:
    names = list(data.get("columns") or [])
    for record in data["functions"]:
        names += [c for c in record["columns"] if c not in names]
    return names


def write_csv(data: dict[str, Any], out: IO[str]) -> None:
    writer = csv.writer(out, lineterminator="\n")
    columns = _all_columns(data)
    writer.writerow(csv_header(columns))
    for record in data["functions"]:
        for line in record["lines"]:
            values = ([record[k] for k in _RECORD_KEYS] + [line[k] for k in _LINE_KEYS]
                      + [line.get(c) for c in columns] + [line["raised"], line["code"]])
            writer.writerow(["" if v is None else v for v in values])


def _json_list(items: Sequence[Any], indent: str, item: Any) -> str:
    if not items:
        return "[]"
    inner = indent + " "
    return "[\n" + ",\n".join(inner + item(x, inner) for x in items) + "\n" + indent + "]"


def _json_record(record: dict[str, Any], indent: str) -> str:
    inner = indent + " "
    parts = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in record.items() if k != "lines"]
    parts.append('"lines": ' + _json_list(record["lines"], inner,
                                         lambda line, _: json.dumps(line)))
    return "{\n" + ",\n".join(inner + p for p in parts) + "\n" + indent + "}"


def dumps_json(data: dict[str, Any]) -> str:
    """The document, one line per source line and per timeline row (diffable)."""
    parts = []
    for key, value in data.items():
        if key == "functions":
            text = _json_list(value, " ", _json_record)
        elif key == "timeline":
            text = _json_list(value, " ", lambda row, _: json.dumps(row))
        else:
            text = json.dumps(value)
        parts.append(f" {json.dumps(key)}: {text}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def save_data(data: dict[str, Any], path: PathArg, format: Optional[str] = None) -> None:
    kind = format_of(path, format)
    with open(path, "w", encoding="utf-8", newline="") as out:
        if kind == "json":
            out.write(dumps_json(data))
        else:
            write_csv(data, out)


# ---- reading -----------------------------------------------------------------

def _int_or_none(text: str) -> Optional[int]:
    return None if text == "" else int(text)


def read_csv(text: str) -> dict[str, Any]:
    rows = csv.reader(io.StringIO(text, newline=""))
    header = next(rows, None)
    if header is None or header[:len(_RECORD_KEYS)] != list(_RECORD_KEYS) \
            or header[-2:] != ["raised", "code"]:
        raise ValueError("not a pytorch_memlab CSV profile: the header should be "
                         + ", ".join(csv_header(["<columns...>"])))
    columns = header[len(_RECORD_KEYS) + len(_LINE_KEYS):-2]
    functions: list[dict[str, Any]] = []
    devices: list[str] = []
    for row in rows:
        qualname, filename, first_line, device = row[:4]
        key = (qualname, filename, int(first_line), device)
        if not functions or tuple(functions[-1][k] for k in _RECORD_KEYS) != key:
            functions.append(dict(zip(_RECORD_KEYS, key), columns=list(columns), lines=[]))
            if device not in devices:
                devices.append(device)
        numbers = [_int_or_none(v) for v in row[4:-2]]
        line: LineRecord = {"lineno": numbers[0], "code": row[-1], "count": numbers[1],
                            "net_growth": numbers[2]}
        line.update(zip(columns, numbers[3:]))
        line["raised"] = row[-2] or None
        functions[-1]["lines"].append(line)
    return {"format": FORMAT, "schema_version": SCHEMA_VERSION, "devices": devices,
            "columns": list(columns), "functions": functions, "timeline": [], "run": None}


def check_data(data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{where} is not a pytorch_memlab line profile "
                         f"(no \"format\": {FORMAT!r})")
    version = data.get("schema_version")
    if not isinstance(version, int) or version < 1:
        raise ValueError(f"{where}: bad schema_version {version!r}")
    if version > SCHEMA_VERSION:
        raise ValueError(f"{where} has schema version {version}, newer than this "
                         f"pytorch_memlab reads ({SCHEMA_VERSION}); upgrade pytorch_memlab")
    for record in data.get("functions", []):
        missing = [k for k in _RECORD_KEYS + ("columns", "lines") if k not in record]
        if missing:
            raise ValueError(f"{where}: a function record lacks {', '.join(missing)}")
    return data


def load(path: PathArg) -> "SavedProfile":
    """Read a profile written by ``LineProfiler.save`` (or ``python -m
    pytorch_memlab run -o``): JSON, or CSV by its ``.csv`` extension."""
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    name = os.fspath(path)
    if name.lower().endswith(".csv"):
        return SavedProfile(read_csv(text))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{name} is not JSON ({exc}); pytorch_memlab.load reads the "
                         ".json and .csv files LineProfiler.save writes") from None
    return SavedProfile(check_data(data, name))


# ---- tables ------------------------------------------------------------------

def _pandas() -> Any:
    try:
        import pandas
    except ImportError as exc:
        raise ImportError("to_dataframe() needs pandas, which is not installed: "
                          "pip install pandas") from exc
    return pandas


def records_dataframe(records: Sequence[FunctionRecord]) -> "pandas.DataFrame":
    """One row per (function, device, source line); nullable integer figures."""
    pandas = _pandas()
    columns: list[str] = []
    for record in records:
        columns += [c for c in record["columns"] if c not in columns]
    header = csv_header(columns)
    rows = [[record[k] for k in _RECORD_KEYS] + [line[k] for k in _LINE_KEYS]
            + [line.get(c) for c in columns] + [line["raised"], line["code"]]
            for record in records for line in record["lines"]]
    frame = pandas.DataFrame(rows, columns=header)
    numeric = ["first_line"] + list(_LINE_KEYS) + columns
    return frame.astype({name: "Int64" for name in numeric})


def _matches(record: FunctionRecord, selector: Any) -> bool:
    if selector is None:
        return True
    if isinstance(selector, (list, tuple, set)):
        return any(_matches(record, s) for s in selector)
    qualname = record["qualname"]
    if isinstance(selector, str):
        return selector in (qualname, qualname.rsplit(".", 1)[-1])
    try:
        func = resolve_function(selector)
    except TypeError:
        return False
    return (func.__qualname__ == qualname
            and os.path.abspath(func.__code__.co_filename) == os.path.abspath(record["filename"]))


def _project(record: FunctionRecord, shown: Sequence[str]) -> FunctionRecord:
    lines = []
    for line in record["lines"]:
        row: LineRecord = {k: line[k] for k in ("lineno", "code", "count", "net_growth")}
        for name in shown:
            row[name] = line.get(name)
        row["raised"] = line.get("raised")
        lines.append(row)
    out = FunctionRecord(qualname=record["qualname"], filename=record["filename"],
                         first_line=record["first_line"], device=record["device"],
                         columns=list(shown), lines=lines)
    if "postmortem" in record:
        out["postmortem"] = record["postmortem"]
    return out


class SavedProfile:
    """A profile read back by ``pytorch_memlab.load``: ``print_stats``,
    ``display``, ``stats`` and ``to_dataframe`` behave as the live
    ``LineProfiler``'s did; ``repr`` is the text table and notebooks show the
    HTML one.  ``timeline``, ``run`` and the ``*_version`` attributes are what
    the file recorded."""

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data
        self.columns: tuple[str, ...] = tuple(_all_columns(data))
        self.devices: list[str] = list(data.get("devices") or
                                       dict.fromkeys(r["device"] for r in data["functions"]))
        self.timeline: list[dict[str, Any]] = list(data.get("timeline") or [])
        self.run: Optional[dict[str, Any]] = data.get("run")
        self.schema_version: int = data["schema_version"]
        self.pytorch_memlab_version: Optional[str] = data.get("pytorch_memlab_version")
        self.torch_version: Optional[str] = data.get("torch_version")
        self.created: Optional[str] = data.get("created")

    def stats(self, func: Any = None, columns: ColumnsArg = None) -> list[FunctionRecord]:
        """The saved records (``func``: a qualname, its last part, a function,
        or a list of these; ``columns``: a subset of the saved columns)."""
        shown = pick_columns(columns, self.columns)
        records = [r for r in self._data["functions"] if _matches(r, func)]
        if func is not None and not records:
            names = ", ".join(dict.fromkeys(r["qualname"] for r in self._data["functions"]))
            raise ValueError(f"{func!r} is not a function of this profile (saved: {names})")
        return [_project(r, shown) for r in records]

    def display(self, func: Any = None, columns: ColumnsArg = None) -> ProfileDisplay:
        return ProfileDisplay(self.stats(func, columns))

    def print_stats(self, func: Any = None, columns: ColumnsArg = None,
                    stream: Optional[IO[str]] = None) -> None:
        out = stream if stream is not None else sys.stdout
        out.write(repr(self.display(func, columns)) + "\n")
        out.flush()

    def __repr__(self) -> str:
        return repr(self.display())

    __str__ = __repr__

    def _repr_html_(self) -> str:
        return self.display()._repr_html_()

    def to_dataframe(self, func: Any = None, columns: ColumnsArg = None) -> "pandas.DataFrame":
        return records_dataframe(self.stats(func, columns))

    def to_dict(self) -> dict[str, Any]:
        """The document as read (JSON schema of ``_export``)."""
        return json.loads(json.dumps(self._data))

    def save(self, path: PathArg, format: Optional[str] = None) -> None:
        """Write it again, as JSON or CSV (by extension, or ``format``)."""
        save_data(self._data, path, format)
