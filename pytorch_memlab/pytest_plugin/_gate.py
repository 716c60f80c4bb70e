"""The CI gate: ``--memlab-save FILE`` writes every profiled test's peak and
table to one JSON file; ``--memlab-compare FILE --memlab-fail-on-increase
SIZE|PCT`` fails a test whose peak grew by more than that against FILE, with
the diff of its table.  Works under xdist: the peaks and tables travel in the
test reports' user_properties to the controller, which writes the file."""
from __future__ import annotations

import json
from typing import Any, Optional

import pytest

FORMAT = "pytorch_memlab.pytest_peaks"
VERSION = 1
DOC_PROPERTY = "memlab_profile"       # the test's profile document (JSON-able)


def parse_increase(text: Optional[str]) -> Optional[tuple[str, float]]:
    if text is None:
        return None
    from ..diffing import parse_threshold
    try:
        return parse_threshold(text, "--memlab-fail-on-increase")
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def read_baseline(path: str) -> dict[str, Any]:
    """{nodeid: {"peak", "device", "profile"}}; UsageError naming the file."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as exc:
        raise pytest.UsageError(f"--memlab-compare {path}: cannot read it ({exc})") from None
    except ValueError:
        raise pytest.UsageError(f"--memlab-compare {path}: not JSON; expected a file written "
                                "by --memlab-save") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise pytest.UsageError(f"--memlab-compare {path}: not a file written by "
                                f"--memlab-save (no \"format\": {FORMAT!r})")
    if not isinstance(data.get("version"), int) or data["version"] > VERSION:
        raise pytest.UsageError(f"--memlab-compare {path}: version {data.get('version')!r} is "
                                f"newer than this pytorch_memlab reads ({VERSION}); upgrade it")
    tests = data.get("tests")
    if not isinstance(tests, dict):
        raise pytest.UsageError(f"--memlab-compare {path}: 'tests' is not an object")
    return tests


def write_saved(path: str, tests: dict[str, Any]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"format": FORMAT, "version": VERSION, "tests": tests}, f, indent=1,
                  sort_keys=True)


def increase_failure(nodeid: str, old: dict[str, Any], peak: int,
                     doc: dict[str, Any], threshold: tuple[str, float],
                     text: str) -> Optional[str]:
    """The failure message when ``peak`` grew over ``threshold``, else None."""
    from ..common.sizes import readable_size
    old_peak = int(old.get("peak", 0))
    grown = peak - old_peak
    kind, limit = threshold
    if kind == "bytes":
        failed = grown > limit
    else:
        failed = old_peak > 0 and 100.0 * grown / old_peak > limit or old_peak == 0 and grown > 0
    if not failed:
        return None
    pct = f", {100.0 * grown / old_peak:+.1f}%" if old_peak else ""
    head = (f"memlab: the test's peak grew from {readable_size(old_peak)} to "
            f"{readable_size(peak)} (+{readable_size(grown)}{pct}), over "
            f"--memlab-fail-on-increase {text}")
    try:
        from ..diffing import diff, render_text
        from ..records.document import from_document
        table = render_text(diff(from_document(old["profile"], "the saved profile"),
                                 from_document(doc, "this run")))
    except (KeyError, ValueError, TypeError) as exc:
        table = f"(no table diff: {exc})"
    return head + "\n\n" + table
