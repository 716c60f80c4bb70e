"""The JSON file: one line per source line and per timeline row, so that two
saved profiles diff line by line."""
from __future__ import annotations

import json
from typing import Any, Callable, Sequence

from .document import from_document
from .model import Profile


def _list(items: Sequence[Any], indent: str, item: Callable[[Any, str], str]) -> str:
    if not items:
        return "[]"
    inner = indent + " "
    return "[\n" + ",\n".join(inner + item(x, inner) for x in items) + "\n" + indent + "]"


def _function(record: dict[str, Any], indent: str) -> str:
    inner = indent + " "
    parts = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in record.items() if k != "lines"]
    parts.append('"lines": ' + _list(record["lines"], inner, lambda line, _: json.dumps(line)))
    return "{\n" + ",\n".join(inner + p for p in parts) + "\n" + indent + "}"


def dumps(document: dict[str, Any]) -> str:
    """The document's text (see ``records.document`` for the schema)."""
    parts = []
    for key, value in document.items():
        if key == "functions":
            text = _list(value, " ", _function)
        elif key == "timeline":
            text = _list(value, " ", lambda row, _: json.dumps(row))
        else:
            text = json.dumps(value)
        parts.append(f" {json.dumps(key)}: {text}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def loads(text: str, where: str) -> Profile:
    """The profile a JSON text holds; ValueError naming ``where``."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where} is not JSON ({exc}); pytorch_memlab.load reads the "
                         ".json and .csv files LineProfiler.save writes") from None
    except RecursionError:
        # json's decoder recurses once per nesting level; no saved profile nests deeply
        raise ValueError(f"{where} is not JSON (nested too deeply to be a saved profile); "
                         "pytorch_memlab.load reads the .json and .csv files "
                         "LineProfiler.save writes") from None
    return from_document(data, where)
