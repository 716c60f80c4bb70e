"""``python -m pytorch_memlab run`` / ``view`` / ``demo`` end to end, on CPU
scripts in temporary directories, each in a fresh interpreter (the grammar
and its errors: test_cli_usage.py, test_cli_errors.py)."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")

from pytorch_memlab import load  # noqa: E402
from pytorch_memlab.common.sizes import readable_size  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

TRAIN = """\
import sys
import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(256, 256)

    def forward(self, x):
        h = self.linear(x)
        return h.relu()

def main():
    def step(net, x):
        y = net(x)
        return y.sum()
    net = Net()
    for _ in range(3):
        step(net, torch.randn(64, 256))
    print("ARGV", sys.argv, __name__, __file__ == sys.argv[0] or __file__)
    if "--fail" in sys.argv:
        raise RuntimeError("boom from the script")
    if "--exit" in sys.argv:
        sys.exit(int(sys.argv[-1]))
    if "--exit-text" in sys.argv:
        sys.exit("leaving with a message")
    if "--interrupt" in sys.argv:
        raise KeyboardInterrupt

if __name__ == "__main__":
    main()
"""


def write(directory, name, text):
    path = Path(directory) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def memlab(cwd, *args, timeout=300):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
    return subprocess.run([sys.executable, "-m", "pytorch_memlab", *map(str, args)],
                          cwd=cwd, capture_output=True, text=True, env=env, timeout=timeout)


@pytest.fixture
def train(tmp_path):
    write(tmp_path, "train.py", TRAIN)
    return tmp_path


def titles(text):
    return [line[3:] for line in text.splitlines() if line.startswith("## ")]


def test_run_profiles_named_functions_and_writes_outputs(train):
    out = memlab(train, "run", "-d", "cpu", "-f", "train.py:Net.forward", "-f", "main.step",
                 "-o", "prof.json", "--html", "report.html", "train.py", "a", "--b", "-o", "x")
    assert out.returncode == 0, out.stderr
    # the script's own argv (our -o stays ours, its -o is its own) and __name__
    assert "ARGV ['train.py', 'a', '--b', '-o', 'x'] __main__" in out.stdout
    assert titles(out.stdout) == ["Net.forward", "main.<locals>.step"]
    assert "return h.relu()" in out.stdout
    assert "wrote prof.json" in out.stderr and "wrote report.html" in out.stderr
    assert not (train / "x").exists()
    saved = load(train / "prof.json")
    assert saved.run == {"argv": ["train.py", "a", "--b", "-o", "x"], "module": None,
                         "exit_status": 0}
    (forward,) = saved.stats("Net.forward")
    assert forward["filename"] == str(train / "train.py")
    counts = {line["code"].strip(): line["count"] for line in forward["lines"]}
    assert counts["h = self.linear(x)"] == 3
    # the printed table is what the saved profile prints
    view = memlab(train, "view", "prof.json")
    assert view.returncode == 0, view.stderr
    assert view.stdout in out.stdout
    html = (train / "report.html").read_text()
    assert "<table" in html and "Net.forward" in html


def test_without_f_every_function_of_the_script(train):
    out = memlab(train, "run", "-d", "cpu", "train.py")
    assert out.returncode == 0, out.stderr
    assert titles(out.stdout) == ["Net.__init__", "Net.forward", "main", "main.<locals>.step"]


@pytest.mark.parametrize("args, status, stderr", [
    (["--exit", "3"], 3, ""),
    (["--exit", "0"], 0, ""),
    (["--exit-text"], 1, "leaving with a message"),
    (["--fail"], 1, "RuntimeError: boom from the script"),
    (["--interrupt"], 130, "KeyboardInterrupt"),
])
def test_exit_status_is_the_scripts_and_results_are_written(train, args, status, stderr):
    out = memlab(train, "run", "-d", "cpu", "-f", "Net.forward", "-f", "main",
                 "-o", "prof.json", "train.py", *args)
    assert out.returncode == status, out.stderr
    assert stderr in out.stderr
    assert titles(out.stdout) == ["Net.forward", "main"]
    saved = load(train / "prof.json")
    assert saved.run["exit_status"] == status
    if "--fail" in args:
        # the traceback starts at the script, as `python train.py` prints it
        assert out.stderr.startswith("Traceback (most recent call last):\n"
                                     f'  File "{train / "train.py"}", line ')
        assert "cli.py" not in out.stderr
        assert "wrapping.py" not in out.stderr      # nor run's wrapper of main
        assert out.stderr.count(", in main\n") == 1
        (main,) = saved.stats("main")
        raised = [line["code"].strip() for line in main["lines"] if line["raised"]]
        assert raised == ['raise RuntimeError("boom from the script")']
        assert "<-- RuntimeError raised here" in out.stdout


def test_missing_function_names_what_was_looked_up(train):
    out = memlab(train, "run", "-d", "cpu", "-f", "train.py:Net.forwrd", "-o", "prof.json",
                 "train.py")
    assert out.returncode == 2
    assert "ARGV" not in out.stdout                     # the script never ran
    assert not (train / "prof.json").exists()
    assert "no function 'Net.forwrd' in " + str(train / "train.py") in out.stderr
    assert "did you mean 'Net.forward'?" in out.stderr
    assert "Net.__init__, Net.forward, main, main.<locals>.step" in out.stderr

    out = memlab(train, "run", "-f", "nosuchmodule:f", "train.py")
    assert out.returncode == 2 and "no module named 'nosuchmodule'" in out.stderr
    out = memlab(train, "run", "-f", "other.py:f", "train.py")
    assert out.returncode == 2 and "can't open file" in out.stderr
    assert str(train / "other.py") in out.stderr
    out = memlab(train, "run", "missing.py")
    assert out.returncode == 2 and "can't open file 'missing.py'" in out.stderr
    out = memlab(train, "run", "-o", "prof.txt", "train.py")
    assert out.returncode == 2 and ".json or .csv" in out.stderr
    out = memlab(train, "run", "-d", "cpu", "-c", "active_bytes.all.peek", "train.py")
    assert out.returncode == 2 and "unknown column 'active_bytes.all.peek'" in out.stderr
    out = memlab(train, "run", "-d", "cpu")
    assert out.returncode == 2 and "name one script, or -m MODULE" in out.stderr


def test_columns_and_csv(train):
    out = memlab(train, "run", "-d", "cpu", "-f", "Net.forward",
                 "-c", "active_bytes.all.peak,allocation.all.allocated", "-c",
                 "reserved_bytes.all.current", "-o", "prof.csv", "train.py")
    assert out.returncode == 0, out.stderr
    header = (train / "prof.csv").read_text().splitlines()[0]
    assert ("net_growth,active_bytes.all.peak,allocation.all.allocated,"
            "reserved_bytes.all.current,calls,growth_per_call,") in header
    assert header.endswith(",raised,code")
    assert load(train / "prof.csv").columns == (
        "active_bytes.all.peak", "allocation.all.allocated", "reserved_bytes.all.current")


PKG_MODELS = """\
import torch

def make(n):
    t = torch.zeros(n)
    return t + 1

class Box:
    @staticmethod
    def build(n):
        return torch.ones(n)

def unused():
    return 0
"""

PKG_MAIN = """\
import sys
from pkg import models

def go():
    a = models.make(1000)
    b = models.Box.build(2000)
    return a, b

go()
print("MAIN", sys.argv[1:], __name__, __package__)
"""


def test_module_and_other_files_are_hooked_at_import(tmp_path):
    write(tmp_path, "pkg/__init__.py", "")
    write(tmp_path, "pkg/models.py", PKG_MODELS)
    write(tmp_path, "pkg/__main__.py", PKG_MAIN)
    out = memlab(tmp_path, "run", "-d", "cpu", "-f", "pkg.models:make",
                 "-f", "pkg/models.py:Box.build", "-f", "go", "-f", "pkg.models:unused",
                 "-o", "p.json", "-m", "pkg", "x", "--y")
    assert out.returncode == 0, out.stderr
    assert "MAIN ['x', '--y'] __main__ pkg" in out.stdout
    assert titles(out.stdout) == ["go", "make", "Box.build"]   # imported ones later
    assert "(not run while profiling: unused)" in out.stdout
    saved = load(tmp_path / "p.json")
    assert saved.run["module"] == "pkg.__main__"
    assert saved.run["argv"][0] == str(tmp_path / "pkg" / "__main__.py")

    out = memlab(tmp_path, "run", "-f", "pkg.models:nope", "-m", "pkg")
    assert out.returncode == 2
    assert "no function 'nope' in module pkg.models" in out.stderr
    assert "make, Box.build, unused" in out.stderr


def test_a_module_imported_already_and_a_file_never_imported(tmp_path):
    write(tmp_path, "pkg/__init__.py", "")
    write(tmp_path, "pkg/models.py", PKG_MODELS)
    write(tmp_path, "use.py", """\
        import torch
        import torch.nn.functional as F
        F.relu(torch.ones(10))
        """)
    out = memlab(tmp_path, "run", "-d", "cpu", "-f", "torch.nn.functional:relu",
                 "-f", "pkg/models.py:make", "use.py")
    assert out.returncode == 0, out.stderr
    assert titles(out.stdout) == ["relu"]
    assert "-f pkg/models.py:make: its module was never imported" in out.stderr


def test_threads_finish_before_the_tables(tmp_path):
    write(tmp_path, "threads.py", """\
        import threading, time
        import torch

        def work():
            time.sleep(0.2)
            return torch.empty(1024)

        threading.Thread(target=work).start()
        """)
    out = memlab(tmp_path, "run", "-d", "cpu", "-f", "work", "threads.py")
    assert out.returncode == 0, out.stderr
    assert "      1" in out.stdout and titles(out.stdout) == ["work"]


def test_view_writes_html_and_converts(train):
    assert memlab(train, "run", "-d", "cpu", "-f", "Net.forward", "-o", "p.json",
                  "train.py").returncode == 0
    out = memlab(train, "view", "p.json", "-o", "report.html")
    assert out.returncode == 0, out.stderr
    assert (train / "report.html").read_text().startswith("<!DOCTYPE html>")
    assert memlab(train, "view", "p.json", "-o", "p.csv").returncode == 0
    assert memlab(train, "view", "p.csv").stdout == memlab(train, "view", "p.json").stdout
    out = memlab(train, "view", "p.json", "-o", "p.txt")
    assert out.returncode == 2 and ".html, .json or .csv" in out.stderr
    out = memlab(train, "view", "train.py")
    assert out.returncode == 2 and "not JSON" in out.stderr


def test_view_works_without_torch(train):
    # torch made unimportable in the viewing process: the same tables, the
    # HTML report, and torch never imported
    assert memlab(train, "run", "-d", "cpu", "-f", "main.step", "-o", "p.json",
                  "train.py").returncode == 0
    with_torch = memlab(train, "view", "p.json")
    blocked = ("import runpy, sys; sys.modules['torch'] = None; "
               "sys.argv[0] = 'pytorch_memlab'; "
               "runpy.run_module('pytorch_memlab', run_name='__main__', alter_sys=True)")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for extra in ([], ["-o", "r.html"]):
        proc = subprocess.run([sys.executable, "-c", blocked, "view", "p.json", *extra],
                              cwd=train, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        if not extra:
            assert proc.stdout == with_torch.stdout and "## main.<locals>.step" in proc.stdout
    assert (train / "r.html").read_text().startswith("<!DOCTYPE html>")


def test_demo_still_runs(tmp_path):
    out = memlab(tmp_path, "demo", "-d", "cpu")
    assert out.returncode == 0, out.stderr
    assert "## train_step" in out.stdout
    assert "# type:" not in out.stdout      # the code column shows the demo's code only
    # net growth and count over 3 Adam steps of the demo's 1024-4096-1024 MLP:
    # zero_grad frees the grads of steps 1 and 2; the first step() makes exp_avg
    # and exp_avg_sq (and 4 step counters of 4 bytes)
    params = (1024 * 4096 + 4096 + 4096 * 1024 + 1024) * 4

    def growth_and_count(code):
        # after the peak columns and the bytes held at the peak
        return next(line.split()[3:5] for line in out.stdout.splitlines() if line.endswith(code))
    assert growth_and_count("zero_grad(set_to_none=True)") == [readable_size(-2 * params), "3"]
    assert growth_and_count("optimizer.step()") == [readable_size(2 * params + 4 * 4), "3"]
