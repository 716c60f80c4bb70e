"""A profile as the JSON document ``LineProfiler.save`` writes, and back.

Schema version 7 (``SCHEMA_VERSION``)::

    {
      "format": "pytorch_memlab.line_profile",
      "schema_version": 7,
      "pytorch_memlab_version": "1.0.0",
      "torch_version": "2.13.0+cpu",
      "python_version": "3.11.9",
      "created": "2025-06-01T12:00:00+00:00",       # UTC, ISO 8601
      "devices": ["cpu"],                            # column groups, in order
      "columns": ["active_bytes.all.peak", "reserved_bytes.all.peak"],
      "column_meanings": {                           # every column of the file
        "active_bytes.all.peak": {"kind": "peak", "unit": "bytes"},
        "reserved_bytes.all.peak": {"kind": "peak", "unit": "bytes"}},
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
            "reserved_bytes.all.peak": 1310720, "held_at_peak": 262144,
            "raised": null}],
         "peak": {"bytes": 1310720, "lineno": 13, "call": 1,   # optional, see below
                  "before_call": 1048576, "other_threads": 0,
                  "by_kind": {"parameter": 1048576, "temporary": 262144},
                  "before_call_by_kind": {"parameter": 1048576},
                  "other_threads_by_kind": {},
                  "lines_by_kind": {"13": {"temporary": 262144}},
                  "by_module": {"linear": 262144},
                  "modules_by_kind": {"linear": {"temporary": 262144}}},
         "start_level": {"first_call": 1048576,        # optional, see below
                         "later_calls": 1048576},
         "curve": [[13, 786432, 2097152, 1310720],    # optional, see below
                   [21, 786432, 2097152, 1048576, "Net.block"]],
         "curve_of": {"choice": "peak", "call": 2, "calls": 3, "line_events": 2,
                      "merged": 1}}],
      "timeline": [                                  # profile_every only, else []
        {"call": 1, "device": "cpu", "active_bytes": 1048576,
         "reserved_bytes": 1048576}],
      "run": {"argv": ["train.py", "--epochs", "1"], "module": null,   # `run` only, else null
              "exit_status": 0}
    }

Every source line of a function is listed; a line that never ran has count 0
and null figures.  ``net_growth`` is the sum over executions of the change in
``active_bytes.all.current``; each column is aggregated by the kind its
memory source declares for it (include/memlab/source.h): peaks ("*.peak") by
the max of per-execution peaks, counters ("*.allocated"/"*.freed") by sums,
levels (the rest) by the max of end-of-line values.  Bytes are exact integers.  ``raised``
names the exception that left the function through that line.  The record of
the innermost function an out-of-memory error escaped also has a
``"postmortem"`` object (its keys: ``pytorch_memlab/line_profiler/postmortem.py``).  A reader
accepts any file whose schema_version is not newer than its own and ignores
keys it does not know (keeping them, as a torchrun rank's ``"rank"`` or the
``"pytest_peaks"`` of a file ``pytest --memlab-save`` wrote); a change of
meaning bumps the version.

``column_meanings`` (new in version 2) says what each column of the file
(``columns`` and any other a function record has) measures, as the memory
source declared it when the profile was taken: ``kind`` is "level", "peak" or
"counter" (how lines were aggregated, above) and ``unit`` "bytes" or "count"
(how a report shows the figure).  A report reads it and never asks the native
boundary.  A version 1 file has no such key: its meanings are derived once, at
load, from each column's name by torch's naming rule
(``records.meanings.torch_meaning``), which is what version 1 meant; so is a
column a version 2 file leaves out.  The CSV has no slot for them and is
read the same way.

Figures per call (new in version 3), once a call of the function ended: the
function record has ``"calls"`` (the outermost calls it ran in) and each line
``"first_call"`` and ``"later_calls"``, the figures of the first call alone
and of the calls after it (``{<each column>, "net_growth", "count"}``, null
figures where the line did not run in them); after 3 or more calls a line that
ran has ``"growth_per_call"``: the least, over the calls after the first, of
what the line made in the call and still holds (callfigures.h says when it
is read and how frees are charged) when that was positive in each of them,
else 0.  Older files have none of these
keys, and read as not recorded.
``curve`` and ``curve_of`` (new in version 3; ``records.curve``): the line
events of one call of the function on that device, in order, each
``[lineno, active bytes at the line's end, reserved bytes at its end, peak
active bytes inside it]`` plus the callee's qualname for a line of a nested
profiled call; ``curve_of`` says which call (``choice``: "peak", "first",
"last" or a call number) and how many line events each point holds
(``merged``).  A record without a curve has neither key; older files load
with no curve.
``held_at_peak`` and ``peak`` (new in version 4): each line's
``held_at_peak`` is the bytes made while it ran (its callees included) and
still alive when the function reached its highest level (``peak.bytes``, in
its call ``peak.call``, while ``peak.lineno`` ran); ``before_call`` were
alive before that call began, ``other_threads`` made by other threads during
it (or by other code while it was suspended at a ``yield`` or ``await``).
The lines' figures, ``before_call`` and ``other_threads`` sum to
``peak.bytes``.  A source that is polled cannot tell: its lines have
``"held_at_peak": null`` and the record no ``peak``.  Older files have
neither key.  Also new in version 4, a ``"postmortem"`` may have
``"live_by_line"`` (the allocated bytes at the failure by the line that made
them; see ``pytorch_memlab/line_profiler/postmortem.py``); older post-mortems load and print
without it.
``start_level`` (new in version 5), once a call of the function ended: the
active bytes (``active_bytes.all.current``) when its first call began
(``first_call``), and when the later call began that reached the later
calls' highest ``active_bytes.all.peak`` (``later_calls``, the earliest such
call); null where not known (no later call yet, a first call forgotten by a
``profile_every`` print, a profile that did not record active bytes' peak).
A first call's peak and the later calls' differ by what was alive when they
began (state a first call made and kept, such as an optimizer's) and by what
their lines made; these tell the two apart.  Older files have no such key,
and read as not recorded.
Kinds at the peak (new in version 6; ``pytorch_memlab.kinds``): ``by_kind``
says what ``peak.bytes`` is made of, ``{kind: bytes}`` with only the kinds
present, in this order: "parameter", "buffer", "gradient",
"optimizer_state", "saved_for_backward" (kept by autograd for the backward
pass), "temporary" (made during the call, none of those), "input" (alive
before the call, none of those), "workspace", "other" (made by other threads
during the call, none of those); it sums to ``peak.bytes``.
``before_call_by_kind`` and ``other_threads_by_kind`` split ``before_call``
and ``other_threads`` the same way, and ``lines_by_kind`` each line's
``held_at_peak`` (keyed by the line number as a string, lines holding
nothing left out): together they are ``by_kind``.  ``by_module`` splits
what the lines hold by the module that made it, ``{qualified name: bytes}``
("(no module)": outside every module), summing to the lines' held bytes;
``by_module_stopped_at``, where present, lists the names among them that
were charged with what their own modules made inside a compiled or
checkpointed region (largest first; new in version 7, files without it load).
Where the kinds, or the modules, could not be told exactly the peak has
``"by_kind_missing"`` (or ``"by_module_missing"``: why) instead.  Older
files, and version 5 (which added no peak key), have none of these keys.
``modules_by_kind`` (new in version 7) splits each ``by_module`` name's
bytes by kind (``{name: {kind: bytes}}``, kinds present only, in
``by_kind``'s order); per kind, the modules sum to the lines.  It is absent
where ``by_kind`` or ``by_module`` is, and from older files.
"""
from __future__ import annotations

from typing import Any, Optional, Sequence

from .curve import CurveInfo, CurvePoint
from .meanings import KINDS, UNITS, Field, torch_meaning
from .model import (GROWTH, HELD, PEAK_KEYS, START_KEYS, VERSION_KEYS, FunctionRecord,
                    LineRecord, Profile, TimelineRow)
from .peak_document import read_peak, show_value

FORMAT = "pytorch_memlab.line_profile"
SCHEMA_VERSION = 7
RECORD_KEYS = ("qualname", "filename", "first_line", "device")
_LINE_KEYS = ("lineno", "code", "count", GROWTH, "raised")
_KNOWN = {"format", "schema_version", "created", "devices", "columns", "column_meanings",
          "functions", "timeline", "run", *VERSION_KEYS}


def all_columns(columns: Sequence[str], functions: Sequence[FunctionRecord]) -> list[str]:
    """``columns``, then any other column a function record has, in order."""
    names = list(columns)
    for record in functions:
        names += [c for c in record.columns if c not in names]
    return names


def meanings_of(columns: Sequence[str],
                recorded: Optional[dict[str, Field]] = None) -> dict[str, Field]:
    """Kind and unit of each of ``columns``: the ``recorded`` one, else by
    torch's naming rule (a file that recorded none)."""
    known = recorded or {}
    return {c: known.get(c) or torch_meaning(c) for c in columns}


def to_document(profile: Profile) -> dict[str, Any]:
    """The JSON document of ``profile`` (see the module docstring), in this
    version's schema whatever version it was read from."""
    data: dict[str, Any] = {"format": FORMAT, "schema_version": SCHEMA_VERSION}
    data.update((k, profile.versions[k]) for k in VERSION_KEYS if k in profile.versions)
    if profile.created is not None:
        data["created"] = profile.created
    data["devices"] = list(profile.devices)
    data["columns"] = list(profile.columns)
    data["column_meanings"] = {
        c: {"kind": m.kind, "unit": m.unit}
        for c, m in meanings_of(all_columns(profile.columns, profile.functions),
                                profile.meanings).items()}
    data["functions"] = [record.to_dict() for record in profile.functions]
    data["timeline"] = [dict(row) for row in profile.timeline]
    data["run"] = profile.run
    data.update(profile.extra)
    return data


# ---- reading, with one error naming the file and the place --------------------

_MISSING = object()


class _Reader:
    """Checks one document; every error names ``where`` and the field."""

    def __init__(self, where: str) -> None:
        self.where = where

    def fail(self, place: str, problem: str) -> ValueError:
        return ValueError(f"{self.where}: {place}: {problem}")

    def typed(self, obj: dict[str, Any], key: str, kind: Any, place: str,
              accepted: str, optional: bool = False) -> Any:
        value = obj.get(key, _MISSING)
        if type(value) is kind or (value is None and optional):   # the common case, fast
            return value
        if key not in obj:
            raise self.fail(place, f"{key!r} is missing; expected {accepted}")
        value = obj[key]
        if value is None and optional:
            return None
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise self.fail(place, f"{key!r} is {show_value(value)}; expected {accepted}")
        return value

    def names(self, obj: dict[str, Any], key: str, place: str) -> list[str]:
        values = self.typed(obj, key, list, place, "a list of column names")
        if not all(isinstance(v, str) for v in values):
            raise self.fail(place, f"{key!r} holds a non-string; expected column names")
        return list(values)

    def line(self, obj: Any, columns: Sequence[str], place: str) -> LineRecord:
        if not isinstance(obj, dict):
            raise self.fail(place, f"a line is {show_value(obj)}; expected an object")
        typed = self.typed
        figures = {c: typed(obj, c, int, place, "an integer or null", optional=True)
                   for c in columns if c in obj}
        has_held = HELD in obj
        return LineRecord(
            lineno=typed(obj, "lineno", int, place, "an integer"),
            code=typed(obj, "code", str, place, "a string"),
            count=typed(obj, "count", int, place, "an integer"),
            net_growth=typed(obj, GROWTH, int, place, "an integer or null", optional=True),
            figures=figures,
            raised=typed(obj, "raised", str, place, "a string or null", optional=True)
            if "raised" in obj else None,
            first_call=self.calls_part(obj, "first_call", columns, place)
            if "first_call" in obj else None,
            later_calls=self.calls_part(obj, "later_calls", columns, place)
            if "later_calls" in obj else None,
            growth_per_call=typed(obj, "growth_per_call", int, place, "an integer or null",
                                  optional=True) if "growth_per_call" in obj else None,
            held_at_peak=typed(obj, HELD, int, place, "an integer or null", optional=True)
            if has_held else None,
            has_held=has_held)

    def calls_part(self, obj: dict[str, Any], key: str, columns: Sequence[str],
                   place: str) -> Optional[dict[str, Optional[int]]]:
        """A line's "first_call" / "later_calls": {columns, net_growth, count}."""
        part = obj.get(key)
        if part is None:
            return None
        where = f"{place}.{key}"
        if not isinstance(part, dict):
            raise self.fail(where, f"it is {show_value(part)}; expected an object")
        out: dict[str, Optional[int]] = {
            c: self.typed(part, c, int, where, "an integer or null", optional=True)
            for c in columns if c in part}
        out[GROWTH] = self.typed(part, GROWTH, int, where, "an integer or null", optional=True)
        out["count"] = self.typed(part, "count", int, where, "an integer")
        return out

    def function(self, obj: Any, place: str) -> FunctionRecord:
        if not isinstance(obj, dict):
            raise self.fail(place, f"a function is {show_value(obj)}; expected an object")
        columns = self.names(obj, "columns", place)
        lines = self.typed(obj, "lines", list, place, "a list of lines")
        postmortem = obj.get("postmortem")
        if postmortem is not None and not isinstance(postmortem, dict):
            raise self.fail(place, f"'postmortem' is {show_value(postmortem)}; expected an object")
        return FunctionRecord(
            qualname=self.typed(obj, "qualname", str, place, "a string"),
            filename=self.typed(obj, "filename", str, place, "a string"),
            first_line=self.typed(obj, "first_line", int, place, "an integer"),
            device=self.typed(obj, "device", str, place, "a string"),
            columns=columns,
            lines=[self.line(line, columns, f"{place}.lines[{i}]")
                   for i, line in enumerate(lines)],
            postmortem=postmortem,
            calls=self.typed(obj, "calls", int, place, "an integer or null", optional=True)
            if "calls" in obj else None,
            curve=self.curve(obj["curve"], f"{place}.curve") if "curve" in obj else None,
            curve_of=self.curve_of(obj.get("curve_of"), f"{place}.curve_of")
            if "curve" in obj else None,
            peak=self.peak(obj["peak"], f"{place}.peak") if obj.get("peak") is not None
            else None,
            start_level=self.start_level(obj["start_level"], f"{place}.start_level")
            if obj.get("start_level") is not None else None)

    def peak(self, obj: Any, place: str) -> dict[str, Any]:
        return read_peak(self, obj, place)

    def start_level(self, obj: Any, place: str) -> dict[str, Optional[int]]:
        if not isinstance(obj, dict):
            raise self.fail(place, f"it is {show_value(obj)}; expected an object with "
                            + ", ".join(START_KEYS))
        return {key: self.typed(obj, key, int, place, "an integer or null", optional=True)
                for key in START_KEYS}

    def curve(self, obj: Any, place: str) -> list[CurvePoint]:
        accepted = "[lineno, active, reserved, line_peak] (integers), then a callee's qualname"
        if not isinstance(obj, list):
            raise self.fail(place, f"it is {show_value(obj)}; expected a list of points")
        for i, point in enumerate(obj):
            ints = point[:4] if isinstance(point, list) else []
            if (len(ints) != 4 or len(point) > 5
                    or not all(isinstance(v, int) and not isinstance(v, bool) for v in ints)
                    or (len(point) == 5 and not isinstance(point[4], str))):
                raise self.fail(f"{place}[{i}]", f"it is {show_value(point)}; expected {accepted}")
        return [list(point) for point in obj]

    def curve_of(self, obj: Any, place: str) -> CurveInfo:
        if not isinstance(obj, dict):
            raise self.fail(place, f"it is {show_value(obj)}; expected an object")
        choice = obj.get("choice")
        if not isinstance(choice, (str, int)):
            raise self.fail(place, f"'choice' is {show_value(choice)}; expected \"peak\", "
                            "\"first\", \"last\" or a call number")
        return CurveInfo(choice=choice,
                         call=self.typed(obj, "call", int, place, "an integer"),
                         calls=self.typed(obj, "calls", int, place, "an integer"),
                         line_events=self.typed(obj, "line_events", int, place, "an integer"),
                         merged=self.typed(obj, "merged", int, place, "an integer"))

    def meanings(self, obj: Any) -> dict[str, Field]:
        if not isinstance(obj, dict):
            raise self.fail("column_meanings", f"it is {show_value(obj)}; expected an object "
                            "of column names")
        out = {}
        for column, meaning in obj.items():
            place = f"column_meanings[{column!r}]"
            if not isinstance(meaning, dict):
                raise self.fail(place, f"it is {show_value(meaning)}; expected "
                                "{\"kind\": ..., \"unit\": ...}")
            kind = self.typed(meaning, "kind", str, place, " or ".join(map(repr, KINDS)))
            unit = self.typed(meaning, "unit", str, place, " or ".join(map(repr, UNITS)))
            if kind not in KINDS:
                raise self.fail(place, f"'kind' is {kind!r}; expected "
                                + " or ".join(map(repr, KINDS)))
            if unit not in UNITS:
                raise self.fail(place, f"'unit' is {unit!r}; expected "
                                + " or ".join(map(repr, UNITS)))
            out[column] = Field(column, kind, unit)
        return out

    def timeline(self, rows: Any) -> list[TimelineRow]:
        if not isinstance(rows, list):
            raise self.fail("timeline", f"it is {show_value(rows)}; expected a list")
        out: list[TimelineRow] = []
        for i, row in enumerate(rows):
            place = f"timeline[{i}]"
            if not isinstance(row, dict):
                raise self.fail(place, f"a row is {show_value(row)}; expected an object")
            out.append(TimelineRow(
                call=self.typed(row, "call", int, place, "an integer"),
                device=self.typed(row, "device", str, place, "a string"),
                active_bytes=self.typed(row, "active_bytes", int, place, "an integer"),
                reserved_bytes=self.typed(row, "reserved_bytes", int, place, "an integer")))
        return out


def from_document(data: Any, where: str) -> Profile:
    """The profile a JSON document holds; ValueError naming ``where`` and the
    first field that is not as the schema says."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{where} is not a pytorch_memlab line profile "
                         f"(no \"format\": {FORMAT!r}); load reads the .json and .csv "
                         "files LineProfiler.save writes")
    version = data.get("schema_version")
    if not isinstance(version, int) or version < 1:
        raise ValueError(f"{where}: bad schema_version {version!r}; expected an integer >= 1")
    if version > SCHEMA_VERSION:
        raise ValueError(f"{where} has schema version {version}, newer than this "
                         f"pytorch_memlab reads ({SCHEMA_VERSION}); upgrade pytorch_memlab")
    read = _Reader(where)
    functions = [read.function(f, f"functions[{i}]")
                 for i, f in enumerate(read.typed(data, "functions", list, "the document",
                                                  "a list of function records"))]
    columns = read.names(data, "columns", "the document") if data.get("columns") is not None \
        else []
    devices = data.get("devices")
    if devices is None:
        devices = list(dict.fromkeys(r.device for r in functions))
    elif not isinstance(devices, list) or not all(isinstance(d, str) for d in devices):
        raise read.fail("devices", f"it is {show_value(devices)}; expected a list of device names")
    run: Optional[dict[str, Any]] = data.get("run")
    if run is not None and not isinstance(run, dict):
        raise read.fail("run", f"it is {show_value(run)}; expected an object or null")
    recorded = read.meanings(data["column_meanings"]) if "column_meanings" in data else {}
    meanings = {**recorded, **meanings_of(all_columns(columns, functions), recorded)}
    return Profile(
        functions=functions, columns=columns, devices=list(devices), meanings=meanings,
        timeline=read.timeline(data.get("timeline") or []), run=run,
        versions={k: str(data[k]) for k in VERSION_KEYS if data.get(k) is not None},
        created=data.get("created"), schema_version=version,
        extra={k: v for k, v in data.items() if k not in _KNOWN})
