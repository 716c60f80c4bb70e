"""The CI gate: ``--memlab-save FILE`` writes every profiled test's table and
peak to one line-profile JSON file, each test a function named by its node
id, so ``python -m pytorch_memlab view`` and ``diff`` read it; ``--memlab-compare
FILE --memlab-fail-on-increase SIZE|PCT`` fails a test whose peak grew by more
than that against FILE, with the diff of its table.  Works under xdist: the
peaks and tables travel in the test reports' user_properties to the
controller, which writes the file."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

import pytest

from ...records.document import SCHEMA_VERSION, from_document, to_document
from ...records.model import FunctionRecord, Profile

DOC_PROPERTY = "memlab_profile"       # the test's profile document (JSON-able)
# The file's own key beside the line profile's: {node id: {"peak", "device"}},
# the peak above what was live when the test started (what the gate compares).
PEAKS_KEY = "pytest_peaks"
# A function the test called is saved as "<node id> > <its qualname>".
CALLEE = " > "


def parse_increase(text: Optional[str]) -> Optional[tuple[str, float]]:
    if text is None:
        return None
    from ...records.diff import parse_threshold
    try:
        return parse_threshold(text, "--memlab-fail-on-increase")
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None


def named_document(nodeid: str, profile: Profile, own: set[tuple[str, int]]) -> dict[str, Any]:
    """The test's profile as a document, its functions named for the test:
    the test function (``own``: its (filename, first_line)) as ``nodeid``,
    a function it called and that ran as "<nodeid> > <qualname>", so that the
    tests of one file stay apart (view and diff tell functions apart by
    qualname; parametrized tests share theirs)."""
    names: dict[str, str] = {}
    kept: list[FunctionRecord] = []
    for record in profile.functions:
        if (record.filename, record.first_line) in own:
            names[record.qualname] = nodeid
        elif record.ran:
            names[record.qualname] = f"{nodeid}{CALLEE}{record.qualname}"
        else:
            continue
        kept.append(record)
    renamed = [replace(record, qualname=names[record.qualname], curve=None if record.curve is None
                       else [p[:4] + [names.get(p[4], p[4])] if len(p) > 4 else p
                             for p in record.curve])
               for record in kept]
    return to_document(profile.select(renamed))


def read_baseline(path: str) -> dict[str, tuple[int, Profile]]:
    """{nodeid: (peak, the test's functions)}; UsageError naming the file."""
    from ...records.saved import read
    try:
        profile = read(path)
    except OSError as exc:
        raise pytest.UsageError(f"--memlab-compare {path}: cannot read it ({exc})") from None
    except ValueError as exc:
        raise pytest.UsageError(f"--memlab-compare {path}: not a file written by --memlab-save "
                                f"({' '.join(str(exc).split())})") from None
    peaks = profile.extra.get(PEAKS_KEY)
    if not isinstance(peaks, dict):
        raise pytest.UsageError(f"--memlab-compare {path}: not a file written by --memlab-save "
                                f"(a line profile without {PEAKS_KEY!r})")
    out = {}
    for nodeid, entry in peaks.items():
        peak = entry.get("peak") if isinstance(entry, dict) else None
        if not isinstance(peak, int) or isinstance(peak, bool):
            raise pytest.UsageError(f"--memlab-compare {path}: {PEAKS_KEY}[{nodeid!r}] has no "
                                    "integer 'peak'")
        records = [r for r in profile.functions
                   if r.qualname == nodeid or r.qualname.startswith(nodeid + CALLEE)]
        out[nodeid] = (peak, profile.select(records))
    return out


def saved_profile(tests: dict[str, Any]) -> Profile:
    """One profile of ``tests`` ({nodeid: {"peak", "device", "profile"}}), in
    node id order, their peaks under ``PEAKS_KEY``."""
    order = sorted(tests)
    parts = [from_document(tests[nodeid]["profile"], nodeid) for nodeid in order]
    meanings = {}
    for part in parts:
        meanings.update(part.meanings)
    return Profile(
        functions=[record for part in parts for record in part.functions],
        columns=list(dict.fromkeys(c for part in parts for c in part.columns)),
        devices=list(dict.fromkeys(d for part in parts for d in part.devices)),
        versions=parts[0].versions if parts else {},
        created=parts[0].created if parts else None, schema_version=SCHEMA_VERSION,
        meanings=meanings,
        extra={PEAKS_KEY: {nodeid: {"peak": tests[nodeid]["peak"],
                                    "device": tests[nodeid]["device"]} for nodeid in order}})


def write_saved(path: str, tests: dict[str, Any]) -> None:
    from ...records.saved import save
    save(saved_profile(tests), path, "json")


def increase_failure(old: tuple[int, Profile], peak: int, doc: dict[str, Any],
                     threshold: tuple[str, float], text: str) -> Optional[str]:
    """The failure message when ``peak`` grew over ``threshold``, else None."""
    from ...common.sizes import readable_size
    old_peak, old_profile = old
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
        from ...records.diff import diff
        from ...reports.diff_text import render_diff_text
        table = render_diff_text(diff(old_profile, from_document(doc, "this run")))
    except (KeyError, ValueError, TypeError) as exc:
        table = f"(no table diff: {exc})"
    return head + "\n\n" + table
