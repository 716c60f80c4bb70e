"""The pytest CI gate: --memlab-save, then --memlab-compare with
--memlab-fail-on-increase, in one process and under xdist; the saved file is
a line profile that ``python -m pytorch_memlab view`` and ``diff`` read."""
import json
import os
import sys
from importlib import metadata
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
MODULE = "pytorch_memlab.pytest_plugin"
PLUGIN = [] if any(ep.value == MODULE for ep in metadata.entry_points(group="pytest11")) \
    else ["-p", MODULE]

TESTS = '''
import torch

def test_small():
    x = torch.empty({size})
    assert x.numel() == {size}

def test_other():
    y = torch.empty(1024)
    assert y.numel() == 1024
'''


@pytest.fixture
def run(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    monkeypatch.delenv("CI", raising=False)

    def go(*args):
        return pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider",
                                             "--memlab-device", "cpu", *args)
    return go


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_save_then_a_grown_test_fails_with_the_diff(run, pytester, workers):
    if workers:
        pytest.importorskip("xdist")
    pytester.makepyfile(test_gate=TESTS.format(size=1 << 18))      # 1 MiB
    saved = pytester.path / "peaks.json"
    first = run("--memlab-save", str(saved), *workers)
    assert first.ret == 0, first.stdout.str()
    data = json.loads(saved.read_text())
    assert data["format"] == "pytorch_memlab.line_profile"
    assert data["pytest_peaks"]["test_gate.py::test_small"] == {"peak": 1 << 20, "device": "cpu"}
    assert [f["qualname"] for f in data["functions"]] == ["test_gate.py::test_other",
                                                          "test_gate.py::test_small"]

    pytester.makepyfile(test_gate=TESTS.format(size=3 << 18) + '''
def test_new():
    pass
''')                                                                   # 3 MiB
    second = run("--memlab-compare", str(saved), "--memlab-fail-on-increase", "1MiB", *workers)
    out = second.stdout.str()
    assert second.ret == 1, out
    second.assert_outcomes(passed=2, failed=1)
    assert "peak grew from 1.00M to 3.00M (+2.00M, +200.0%)" in out
    assert "test_gate.py::test_small: peak 1.00M -> 3.00M (+2.00M, +200.0%)" in out
    assert "test_gate.py::test_new is not in" in out
    loose = run("--memlab-compare", str(saved), "--memlab-fail-on-increase", "250%", *workers)
    assert loose.ret == 0, loose.stdout.str()


def test_bad_input(run, pytester):
    pytester.makepyfile(test_gate=TESTS.format(size=1024))
    other = pytester.path / "other.json"
    other.write_text(json.dumps({"format": "something else"}))
    result = run("--memlab-compare", str(other), "--memlab-fail-on-increase", "1MiB")
    assert result.ret == 4 and "not a file written by --memlab-save" in result.stderr.str()
    other.write_text(json.dumps({"format": "pytorch_memlab.line_profile", "schema_version": 4,
                                 "functions": []}))
    result = run("--memlab-compare", str(other), "--memlab-fail-on-increase", "1MiB")
    assert result.ret == 4 and "a line profile without 'pytest_peaks'" in result.stderr.str()
    result = run("--memlab-compare", str(other), "--memlab-fail-on-increase", "lots")
    assert result.ret == 4 and "--memlab-fail-on-increase 'lots'" in result.stderr.str()


HELPED = '''
import pytest
import torch

def helper(n):
    return torch.empty(n)

def unused():
    return torch.empty(1)

@pytest.mark.parametrize("n", [1 << 16, 1 << 17])
def test_sized(n):
    assert torch.empty(n).numel() == n

@pytest.mark.memlab_limit("1 GiB")
def test_helped():
    assert helper({size}).numel() == {size}
'''


def test_saved_file_is_a_profile_view_and_diff_read(run, pytester):
    """Each test is a function named by its node id (parametrized ones
    apart); a function a test called that ran is "<node id> > <qualname>"."""
    pytester.makepyfile(test_gate=HELPED.format(size=1 << 18))
    old, new = pytester.path / "old.json", pytester.path / "new.json"
    assert run("--memlab-save", str(old)).ret == 0
    pytester.makepyfile(test_gate=HELPED.format(size=1 << 19))
    assert run("--memlab-save", str(new)).ret == 0
    names = ["test_gate.py::test_helped", "test_gate.py::test_helped > helper",
             "test_gate.py::test_sized[131072]", "test_gate.py::test_sized[65536]"]
    functions = json.loads(old.read_text())["functions"]
    assert [f["qualname"] for f in functions] == names
    # the test's curve names the callee's line events by the callee's saved name
    assert {p[4] for p in functions[0]["curve"] if len(p) > 4} == {names[1]}

    view = pytester.run(sys.executable, "-m", "pytorch_memlab", "view", str(old))
    assert view.ret == 0, view.stderr.str()
    out = view.stdout.str()
    assert [line[3:] for line in out.splitlines() if line.startswith("## ")] == names
    words = " ".join(out.split())     # the tables' rows, spaces collapsed
    assert "512.00K 512.00K 512.00K 0.00B 1 12 assert torch.empty(n).numel() == n" in words
    assert "1.00M 1.00M 1.00M 1.00M 1 5 return torch.empty(n)" in words

    diff = pytester.run(sys.executable, "-m", "pytorch_memlab", "diff", str(old), str(new))
    assert diff.ret == 0, diff.stderr.str()
    out = diff.stdout.str()
    assert "test_gate.py::test_helped > helper: peak 1.00M -> 2.00M (+1.00M, +100.0%)" in out
    assert "test_gate.py::test_sized[65536]: peak 256.00K -> 256.00K (+0.00B, +0.0%)" in out
