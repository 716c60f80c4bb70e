"""The pytest CI gate: --memlab-save, then --memlab-compare with
--memlab-fail-on-increase, in one process and under xdist."""
import json
import os
from importlib import metadata
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
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
    assert data["format"] == "pytorch_memlab.pytest_peaks"
    small = data["tests"]["test_gate.py::test_small"]
    assert small["peak"] == 1 << 20 and small["device"] == "cpu"
    assert small["profile"]["format"] == "pytorch_memlab.line_profile"

    pytester.makepyfile(test_gate=TESTS.format(size=3 << 18) + '''
def test_new():
    pass
''')                                                                   # 3 MiB
    second = run("--memlab-compare", str(saved), "--memlab-fail-on-increase", "1MiB", *workers)
    out = second.stdout.str()
    assert second.ret == 1, out
    second.assert_outcomes(passed=2, failed=1)
    assert "peak grew from 1.00M to 3.00M (+2.00M, +200.0%)" in out
    assert "test_small: peak 1.00M -> 3.00M (+2.00M, +200.0%)" in out
    assert "test_gate.py::test_new is not in" in out
    loose = run("--memlab-compare", str(saved), "--memlab-fail-on-increase", "250%", *workers)
    assert loose.ret == 0, loose.stdout.str()


def test_bad_input(run, pytester):
    pytester.makepyfile(test_gate=TESTS.format(size=1024))
    other = pytester.path / "other.json"
    other.write_text(json.dumps({"format": "something else"}))
    result = run("--memlab-compare", str(other), "--memlab-fail-on-increase", "1MiB")
    assert result.ret == 4 and "not a file written by --memlab-save" in result.stderr.str()
    result = run("--memlab-compare", str(other), "--memlab-fail-on-increase", "lots")
    assert result.ret == 4 and "--memlab-fail-on-increase 'lots'" in result.stderr.str()
