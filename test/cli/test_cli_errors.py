"""What a user of ``python -m pytorch_memlab`` sees when something is off:
bad input is one line on stderr and status 2, nothing else printed before
it; a closed stdout or a Ctrl-C shows none of pytorch_memlab's own frames."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")

from test_cli import ROOT, memlab, write  # noqa: E402

from pytorch_memlab import load  # noqa: E402

no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="the error is for no CUDA")


def one_line_error(proc, message):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize("argv, message", [
    (["demo", "-d", "bogus"], "pytorch_memlab demo: error: -d 'bogus': expected cpu, cuda or "
                              "cuda:N"),
    (["demo", "-d", "all"], "-d 'all': expected cpu, cuda or cuda:N"),
    pytest.param(["demo", "-d", "cuda"], "-d 'cuda': CUDA is not available here; pass -d cpu",
                 marks=no_cuda),
    pytest.param(["run", "-d", "cuda:1", "quiet.py"],
                 "-d 'cuda:1': CUDA is not available here; pass -d cpu", marks=no_cuda),
    # the file is named alone: no note on the CPU fallback before it
    (["run", "nosuch.py"], "pytorch_memlab run: error: can't open file 'nosuch.py'"),
])
def test_bad_input_is_one_line_and_nothing_before_it(tmp_path, argv, message):
    write(tmp_path, "quiet.py", "def f():\n    pass\n")
    one_line_error(memlab(tmp_path, *argv), message)


def test_a_missing_function_comes_before_any_note(tmp_path):
    write(tmp_path, "quiet.py", "def f():\n    pass\n")
    proc = memlab(tmp_path, "run", "-f", "nosuch", "quiet.py")
    assert proc.returncode == 2
    assert proc.stderr.startswith("pytorch_memlab run: error: -f nosuch: no function 'nosuch'")
    assert "CUDA" not in proc.stderr


@pytest.mark.parametrize("argv, named", [
    (["only_module_level.py"], "only_module_level.py"),
    (["-m", "only_module_level"], "-m only_module_level"),
])
def test_a_program_without_functions_asks_for_f_and_does_not_run(tmp_path, argv, named):
    write(tmp_path, "only_module_level.py", "import torch\nx = torch.empty(8)\n"
                                            "open('ran', 'w').close()\n")
    proc = memlab(tmp_path, "run", "-d", "cpu", *argv)
    one_line_error(proc, f"{named} defines no function, and module-level code is not "
                         "profiled: name the functions to profile with -f FUNC")
    assert "add_function" not in proc.stderr
    assert not (tmp_path / "ran").exists()


def test_demo_into_a_closed_pipe_is_quiet(tmp_path):
    # `demo | head -1`, made certain: the reader is gone before demo prints
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        f'"{sys.executable}" -m pytorch_memlab demo -d cpu | true; exit ${{PIPESTATUS[0]}}',
        shell=True, executable="/bin/bash", cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""


CTRL_C = """\
import os
import signal
import time

import torch

def work():
    kept = torch.empty(1024)
    os.kill(os.getpid(), signal.SIGINT)   # the user's Ctrl-C
    time.sleep(30)
    return kept

if __name__ == "__main__":
    work()
"""


def test_ctrl_c_traceback_ends_in_the_users_frame(tmp_path):
    path = write(tmp_path, "stopped.py", CTRL_C)
    proc = memlab(tmp_path, "run", "-d", "cpu", "-o", "p.json", "stopped.py")
    assert proc.returncode == 130, proc.stderr
    traceback = proc.stderr[:proc.stderr.index("KeyboardInterrupt\n")]
    assert "pytorch_memlab" not in traceback, proc.stderr
    frames = [line for line in traceback.splitlines() if line.startswith("  File ")]
    assert frames[-1] == f'  File "{path}", line 9, in work'
    assert [f["qualname"] for f in load(tmp_path / "p.json").to_dict()["functions"]] \
        == ["work"]


def test_curve_of_a_csv_says_csv_keeps_none(tmp_path):
    write(tmp_path, "quiet.py", "def f():\n    pass\nf()\n")
    assert memlab(tmp_path, "run", "-d", "cpu", "-o", "p.csv", "quiet.py").returncode == 0
    one_line_error(memlab(tmp_path, "view", "--curve", "p.csv"),
                   "--curve p.csv: a CSV profile keeps no curves, only each line's figures; "
                   "view the profile saved as .json")
