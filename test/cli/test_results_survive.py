"""Results that survive and errors that read right: a torchrun rank
stopped by a signal writes its profile, the merged table when gathering over
the process group fails, a truncated CSV is refused, and a marked pytest test
without torch says so in one line.  Through real processes (torchrun, pytest)."""
import os
import subprocess
import sys
from importlib import metadata

import pytest

from helpers import MiB, saved_line

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
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

    from pytorch_memlab.reports.saved_profile import load
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
    from pytorch_memlab.reports.saved_profile import load
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
    from pytorch_memlab.reports.saved_profile import load
    rows = csv_text.splitlines(True)
    assert rows[0].startswith('"qualname",') and rows[-1] == "#end,5\n"
    old = rows[0][len('"qualname"'):]
    (tmp_path / "old.csv").write_text("qualname" + old + "".join(rows[1:-1]))
    assert _lines(load(tmp_path / "old.csv")) == _lines(load(tmp_path / "p.json"))


# ---- torchrun: a rank stopped by SIGTERM, a gather that fails ------------------------

def _needs_gloo():
    torch = pytest.importorskip("torch")
    pytest.importorskip("pytorch_memlab._torchshim")
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    return torch


# Rank 1 fails while rank 0 sleeps in its step, standing in for a collective
# that never completes (NCCL's do not fail fast): torchrun then stops rank 0
# with SIGTERM.  --own-before / --own-after: rank 0 installs a SIGTERM handler
# of its own before / after profiling began (the script runs after it began,
# so "before" means from a sitecustomize-like module imported by -m run... here
# simply: --own-before installs it at import, under `run` that is already
# profiling; the decorator case below installs it before the first @profile).
TRAIN = """\
import os
import signal
import sys
import time
import torch
import torch.distributed as dist


def own_handler(signum, frame):
    with open(f"own{os.environ['RANK']}.txt", "w") as f:
        f.write(signal.Signals(signum).name)
    sys.exit(7)


def train_step(rank):
    x = torch.zeros(1024, 1024 * (rank + 1), dtype=torch.uint8)   # MARK
    if "--hang" in sys.argv and rank == 0:
        open("sleeping", "w").close()
        for _ in range(1200): time.sleep(0.1)   # short sleeps: see STEP   # HANG
    return int(x.sum())


def main():
    dist.init_process_group("gloo")
    rank = int(os.environ["RANK"])
    if "--own" in sys.argv:
        signal.signal(signal.SIGTERM, own_handler)
    if "--hang" in sys.argv and rank == 1:
        train_step(rank)
        deadline = time.monotonic() + 60
        while not os.path.exists("sleeping") and time.monotonic() < deadline:
            time.sleep(0.05)
        raise RuntimeError("rank 1 fails")
    for _ in range(2):
        train_step(rank)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""


def torchrun(cwd, *args, env=None):
    environ = _env(PYTHONUNBUFFERED="1", CUDA_VISIBLE_DEVICES="", **(env or {}))
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node",
                           "2", "--standalone", *map(str, args)],
                          cwd=cwd, capture_output=True, text=True, env=environ, timeout=300)


def memlab(cwd, *args):
    return subprocess.run([sys.executable, "-m", "pytorch_memlab", *map(str, args)],
                          cwd=cwd, capture_output=True, text=True, env=_env(), timeout=120)


def rank_doc(folder, rank):
    import json
    return json.loads((folder / f"rank{rank}.json").read_text())


def _check_stopped_rank0(tmp_path, out, status):
    assert out.returncode != 0
    assert "rank 1 fails" in out.stderr
    doc = rank_doc(tmp_path / "prof", 0)
    assert saved_line(doc, "train_step", "# HANG")["raised"] == "SIGTERM", out.stderr[-3000:]
    assert saved_line(doc, "train_step", "# MARK")["net_growth"] == MiB
    assert rank_doc(tmp_path / "prof", 1)["run"]["exit_status"] == 1
    view = memlab(tmp_path, "view", "prof/")
    assert view.returncode == 0, view.stderr
    assert f"# 2 of 2 ranks: rank 0 (exit {status}), rank 1 (exit 1)" in view.stdout
    assert "<-- SIGTERM raised here" in view.stdout
    assert doc["run"]["exit_status"] == status
    return doc


def test_rank_stopped_by_sigterm_writes_its_profile(tmp_path):
    _needs_gloo()
    (tmp_path / "train.py").write_text(TRAIN)
    out = torchrun(tmp_path, "-m", "pytorch_memlab", "run", "-f", "train_step", "-o", "prof/",
                   "train.py", "--hang")
    _check_stopped_rank0(tmp_path, out, 128 + 15)
    # the default action followed: rank 0 ended by the signal itself
    assert "exitcode  : -15" in out.stderr, out.stderr[-3000:]


def test_rank_with_its_own_sigterm_handler_writes_and_runs_it(tmp_path):
    _needs_gloo()
    (tmp_path / "train.py").write_text(TRAIN)
    out = torchrun(tmp_path, "-m", "pytorch_memlab", "run", "-f", "train_step", "-o", "prof/",
                   "train.py", "--hang", "--own")
    _check_stopped_rank0(tmp_path, out, 7)     # the status its handler chose
    assert (tmp_path / "own0.txt").read_text() == "SIGTERM"     # the program's handler ran


DECORATED = """\
import os
import signal
import sys
import time
import torch
import torch.distributed as dist


def own_handler(signum, frame):
    with open(f"own{os.environ['RANK']}.txt", "w") as f:
        f.write(signal.Signals(signum).name)
    sys.exit(7)


signal.signal(signal.SIGTERM, own_handler)     # before profiling begins

from pytorch_memlab import profile


@profile
def train_step(rank):
    x = torch.zeros(1024, 1024 * (rank + 1), dtype=torch.uint8)   # MARK
    if rank == 0:
        open("sleeping", "w").close()
        for _ in range(1200): time.sleep(0.1)   # short sleeps: see STEP   # HANG
    return int(x.sum())


dist.init_process_group("gloo")
rank = dist.get_rank()
if rank == 1:
    train_step(rank)
    deadline = time.monotonic() + 60
    while not os.path.exists("sleeping") and time.monotonic() < deadline:
        time.sleep(0.05)
    raise RuntimeError("rank 1 fails")
train_step(rank)
"""


def test_decorated_rank_stopped_by_sigterm_writes_and_chains(tmp_path):
    _needs_gloo()
    (tmp_path / "deco.py").write_text(DECORATED)
    out = torchrun(tmp_path, "deco.py", env={"PYTORCH_MEMLAB_OUT": "prof/"})
    assert out.returncode != 0
    doc = rank_doc(tmp_path / "prof", 0)
    assert saved_line(doc, "train_step", "# HANG")["raised"] == "SIGTERM", out.stderr[-3000:]
    assert (tmp_path / "own0.txt").read_text() == "SIGTERM"
    assert "# 2 of 2 ranks" in memlab(tmp_path, "view", "prof/").stdout


NO_NUMPY = 'raise ModuleNotFoundError("numpy is made unimportable here", name="numpy")\n'


def test_gather_without_numpy_falls_back_to_the_rank_files(tmp_path):
    _needs_gloo()
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "nonumpy" / "numpy").mkdir(parents=True)
    (tmp_path / "nonumpy" / "numpy" / "__init__.py").write_text(NO_NUMPY)
    out = torchrun(tmp_path, "-m", "pytorch_memlab", "run", "-f", "train_step", "-o", "prof/",
                   "train.py", env={"PYTHONPATH": os.pathsep.join(
                       [str(tmp_path / "nonumpy"), ROOT])})
    assert out.returncode == 0, out.stderr[-3000:]
    assert ("pytorch_memlab: rank 0: could not gather the profiles over the process group: "
            "RuntimeError('Numpy is not available'); rank 0 merges the rank files instead"
            ) in out.stderr, out.stderr[-3000:]
    assert "pytorch_memlab: rank 0: the table below merges the rank files in prof/" in out.stderr
    assert out.stdout.count("# 2 of 2 ranks: rank 0, rank 1") == 1
    assert out.stdout.count("## train_step") == 1
    merged = out.stdout[out.stdout.index("# 2 of 2 ranks"):].strip()
    assert memlab(tmp_path, "view", "prof/").stdout.strip() == merged
