"""Issue 25, results that survive and errors that read right: a torchrun rank
stopped by a signal writes its profile, the merged table when gathering over
the process group fails, a truncated CSV is refused, and a marked pytest test
without torch says so in one line.  Through real processes (torchrun, pytest)."""
import os
import subprocess
import sys
from importlib import metadata

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLUGIN = "pytorch_memlab.pytest_plugin"


def _env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.update(extra)
    return env


# ---- a marked pytest test without torch ---------------------------------------------

NO_TORCH_CONFTEST = '''
import sys
sys.modules["torch"] = None      # torch unimportable, as in an environment without it
'''

MARKED_TESTS = '''
import pytest

@pytest.mark.memlab_limit("10MB")
def test_marked():
    pass

def test_plain():
    pass
'''


def _pytest_without_torch(tmp_path, *args):
    (tmp_path / "conftest.py").write_text(NO_TORCH_CONFTEST)
    (tmp_path / "test_marked.py").write_text(MARKED_TESTS)
    installed = any(ep.value == PLUGIN for ep in metadata.entry_points(group="pytest11")) \
        if sys.version_info >= (3, 10) else False
    plugin = [] if installed else ["-p", PLUGIN]
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *plugin, *args, "test_marked.py"], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=300)


def test_marked_test_without_torch_fails_in_one_line(tmp_path):
    proc = _pytest_without_torch(tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "1 passed, 1 error" in out, out
    assert ("test_marked.py::test_marked: pytorch_memlab measures tensor memory, which needs "
            "torch: import torch failed (") in out, out
    assert "Traceback" not in out and "_measure.py" not in out and "_runtime.py" not in out, out


def test_memlab_option_without_torch_is_a_usage_error(tmp_path):
    proc = _pytest_without_torch(tmp_path, "--memlab")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out     # pytest's exit status for a usage error
    assert "ERROR: --memlab measures tensor memory, which needs torch: import torch failed (" \
        in proc.stderr, out
    assert "Traceback" not in out, out


# ---- a truncated CSV ----------------------------------------------------------------

DOC = {
    "format": "pytorch_memlab.line_profile", "schema_version": 1,
    "devices": ["cpu"], "columns": ["active_bytes.all.peak"],
    "functions": [{
        "qualname": "work", "filename": "/src/w.py", "first_line": 1, "device": "cpu",
        "columns": ["active_bytes.all.peak"],
        "lines": [{"lineno": n, "code": f"    x{n} = 'a, \"b\"'", "count": 1,
                   "net_growth": 1024 * n, "active_bytes.all.peak": 4096 * n,
                   "raised": None} for n in range(1, 6)]}],
    "timeline": [], "run": None}


@pytest.fixture
def csv_text(tmp_path):
    import json

    from pytorch_memlab.records.saved import load
    (tmp_path / "p.json").write_text(json.dumps(DOC))
    load(tmp_path / "p.json").save(tmp_path / "p.csv")
    return (tmp_path / "p.csv").read_text()


def _lines(saved):
    return [(r.qualname, [(l.lineno, l.count, l.net_growth, l.raised, l.code) for l in r.lines])
            for r in saved.stats()]


def _cuts(text):
    """The file cut at each row boundary and inside each row's last cell."""
    ends = [i + 1 for i, c in enumerate(text) if c == "\n"][:-1]   # not the whole file
    yield from ((f"after row {k + 1}", text[:end]) for k, end in enumerate(ends))
    yield from ((f"inside row {k + 2}", text[:end - 2]) for k, end in enumerate(ends[1:]))
    yield "inside the last cell", text[:-2]


def test_truncated_csv_is_refused_by_load_and_view(csv_text, tmp_path):
    from pytorch_memlab.records.saved import load
    assert _lines(load(tmp_path / "p.csv")) == _lines(load(tmp_path / "p.json"))
    for how, text in _cuts(csv_text):
        if text.count("\n") < 1:
            continue            # not even the header: refused as not a profile
        (tmp_path / "cut.csv").write_text(text)
        with pytest.raises(ValueError, match=r"cut\.csv is cut short \(truncated\?\)"):
            load(tmp_path / "cut.csv")
            pytest.fail(f"cut {how}: loaded")
    (tmp_path / "cut.csv").write_text(csv_text[:-3])
    proc = subprocess.run([sys.executable, "-m", "pytorch_memlab", "view", "cut.csv"],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("pytorch_memlab view: error: cut.csv: ") and "cut short" in line


def test_csv_written_before_the_closing_row_still_loads(csv_text, tmp_path):
    from pytorch_memlab.records.saved import load
    rows = csv_text.splitlines(True)
    assert rows[0].startswith('"qualname",') and rows[-1] == "#end,5\n"
    old = rows[0][len('"qualname"'):]
    (tmp_path / "old.csv").write_text("qualname" + old + "".join(rows[1:-1]))
    assert _lines(load(tmp_path / "old.csv")) == _lines(load(tmp_path / "p.json"))
