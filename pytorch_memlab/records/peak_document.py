"""A function's ``peak`` object of the JSON document, read back and checked
(``records.document`` has the schema): its figures (``PEAK_KEYS``), since
version 6 its kinds and modules, since version 7 its modules' kinds."""
from __future__ import annotations

from typing import Any, Protocol

from ..kinds import names as block_kinds
from .model import PEAK_KEYS

# A peak's {kind: bytes} keys (version 6); "lines_by_kind" holds one per line.
KIND_KEYS = ("by_kind", "before_call_by_kind", "other_threads_by_kind")
# Why the kinds, or the modules, are not known exactly (version 6).
MISSING_KEYS = ("by_kind_missing", "by_module_missing")


class Reader(Protocol):
    def fail(self, place: str, problem: str) -> ValueError: ...

    def typed(self, obj: dict[str, Any], key: str, kind: Any, place: str,
              accepted: str, optional: bool = False) -> Any: ...


def show_value(value: Any) -> str:
    return "null" if value is None else f"a {type(value).__name__} ({str(value)[:40]!r})"


def _sizes(read: Reader, obj: Any, place: str, names: Any, what: str) -> dict[str, int]:
    """{name: bytes}, each name accepted by ``names``."""
    if (not isinstance(obj, dict) or not all(isinstance(k, str) and names(k) for k in obj)
            or not all(type(v) is int for v in obj.values())):
        raise read.fail(place, f"it is {show_value(obj)}; expected {what}")
    return dict(obj)


def _kinds(read: Reader, obj: Any, place: str) -> dict[str, int]:
    return _sizes(read, obj, place, lambda k: k in block_kinds.KINDS,
                  f"{{kind: bytes}} with kinds among {', '.join(block_kinds.KINDS)}")


def read_peak(read: Reader, obj: Any, place: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise read.fail(place, f"it is {show_value(obj)}; expected an object with "
                        + ", ".join(PEAK_KEYS))
    peak: dict[str, Any] = {key: read.typed(obj, key, int, place, "an integer")
                            for key in PEAK_KEYS}
    for key in KIND_KEYS:
        if key in obj:
            peak[key] = _kinds(read, obj[key], f"{place}.{key}")
    if "lines_by_kind" in obj:
        lines = obj["lines_by_kind"]
        where = f"{place}.lines_by_kind"
        if not isinstance(lines, dict) or not all(str(k).isdigit() for k in lines):
            raise read.fail(where, f"it is {show_value(lines)}; expected an object keyed by "
                            "line numbers")
        peak["lines_by_kind"] = {int(k): _kinds(read, v, f"{where}.{k}")
                                 for k, v in lines.items()}
    if "by_module" in obj:
        peak["by_module"] = _sizes(read, obj["by_module"], f"{place}.by_module",
                                   lambda k: True, "{module name: bytes}")
    if "modules_by_kind" in obj:
        modules = obj["modules_by_kind"]
        where = f"{place}.modules_by_kind"
        if not isinstance(modules, dict):
            raise read.fail(where, f"it is {show_value(modules)}; expected an object keyed by "
                            "module names")
        peak["modules_by_kind"] = {name: _kinds(read, v, f"{where}.{name}")
                                   for name, v in modules.items()}
    if "by_module_stopped_at" in obj:
        at = obj["by_module_stopped_at"]
        if not isinstance(at, list) or not all(isinstance(name, str) for name in at):
            raise read.fail(f"{place}.by_module_stopped_at",
                            f"it is {show_value(at)}; expected a list of module names")
        peak["by_module_stopped_at"] = list(at)
    for key in MISSING_KEYS:
        if key in obj:
            peak[key] = read.typed(obj, key, str, place, "a string")
    return peak
