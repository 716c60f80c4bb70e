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
