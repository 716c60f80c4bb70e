"""Install-related messages, fast: the rebuild command for each way of
installing (PEP 610 direct_url.json), one clear line when torch or the
compiled tracer is missing, and the shim refused under another torch."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from pytorch_memlab import _install

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_py(code, cwd=REPO, **env):
    full_env = dict(os.environ, PYTHONPATH=REPO, **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=cwd,
                          env=full_env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("info, expected", [
    ({"url": "file:///home/me/pytorch_memlab", "dir_info": {"editable": True}},
     "cd /home/me/pytorch_memlab && python -m pip install --no-build-isolation -e ."),
    ({"url": "file:///home/me/pytorch%20memlab", "dir_info": {}},
     "python -m pip install --no-build-isolation --force-reinstall --no-deps "
     "/home/me/pytorch memlab"),
    ({"url": "file:///tmp/pytorch_memlab-1.0.0.dev0-cp311-cp311-linux_x86_64.whl",
      "archive_info": {}},
     "python -m pip install --no-build-isolation --force-reinstall --no-deps "
     "/path/to/pytorch_memlab-checkout"),
])
def test_rebuild_command_follows_direct_url(monkeypatch, info, expected):
    monkeypatch.setattr(_install, "_direct_url", lambda: info)
    monkeypatch.setattr(_install, "_installed_here", lambda info, path: True)
    assert _install.rebuild_command() == expected



def this_checkout_fix():
    """The fix for this checkout: built in place, or installed from it with -e (make check)."""
    info = _install._direct_url()
    if info and info.get("dir_info", {}).get("editable") and _install._installed_here(
            info, _install._local_path(info["url"])):
        return f"cd {REPO} && python -m pip install --no-build-isolation -e ."
    return f"cd {REPO} && python setup.py build_ext --inplace"


def test_source_tree_rebuild_command():
    proc = run_py("from pytorch_memlab import _install; print(_install.rebuild_command())")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == this_checkout_fix()


def test_other_installed_copy_is_not_this_one(monkeypatch):
    # pip installed some other folder; this copy is run from its checkout
    info = {"url": "file:///elsewhere/pytorch_memlab", "dir_info": {"editable": True}}
    monkeypatch.setattr(_install, "_direct_url", lambda: info)
    assert _install.rebuild_command() == f"cd {REPO} && python setup.py build_ext --inplace"


def test_without_torch_one_clear_line():
    # sys.modules["torch"] = None is how Python spells "not importable"
    proc = run_py("""
        import sys
        sys.modules["torch"] = None
        from pytorch_memlab import LineProfiler
    """)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last == ("ImportError: pytorch_memlab needs torch, which is not installed: "
                    "install torch first (CPU-only build: pip install torch "
                    "--index-url https://download.pytorch.org/whl/cpu)")


def _uncompiled_tree(tmp_path):
    """A copy of the checkout with no compiled extension in it."""
    tree = tmp_path / "checkout"
    shutil.copytree(REPO, tree, ignore=shutil.ignore_patterns(
        "*.so", "__pycache__", ".git", "build", ".venv*", "*.egg-info"))
    return tree


# An editable install of another checkout (as `make check` makes) adds a meta
# path finder that would lend the uncompiled tree that checkout's extensions:
# leave it out, so the tree is seen as a newcomer's fresh clone.
WITHOUT_EDITABLE = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path "
                    "if not getattr(f, '__module__', '').startswith('__editable__')]; ")


def test_source_tree_without_tracer_says_how_to_build(tmp_path):
    tree = _uncompiled_tree(tmp_path)
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    want = (f"pytorch_memlab's C extension _tracer is not compiled in {tree}/pytorch_memlab "
            f"(a source tree?); build it: cd {tree} && python setup.py build_ext --inplace")
    api = subprocess.run([sys.executable, "-c",
                          WITHOUT_EDITABLE + "from pytorch_memlab import LineProfiler"],
                         cwd=tree, env=env, capture_output=True, text=True, timeout=120)
    assert api.returncode == 1
    assert api.stderr.strip().splitlines()[-1] == f"ImportError: {want}"
    demo = subprocess.run([sys.executable, "-c", WITHOUT_EDITABLE +
                           "import runpy; sys.argv = ['pytorch_memlab', 'demo']; "
                           "runpy.run_module('pytorch_memlab', run_name='__main__', alter_sys=True)"],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=120)
    assert demo.returncode == 1
    assert demo.stderr.strip() == f"python -m pytorch_memlab: {want}"


MISMATCH = """
    import warnings
    import torch
    real = str(torch.__version__)
    torch.__version__ = "{fake}"
    from pytorch_memlab import sources
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        src = sources.get_source("cuda")
    print(type(src).__name__)
    for w in caught:
        print("WARNING", w.message)
    try:
        sources.get_source("cpu")
    except RuntimeError as exc:
        print("CPU", exc)
    else:
        print("CPU shim")
"""


def test_shim_refused_under_another_torch():
    pytest.importorskip("pytorch_memlab._torchshim")
    import torch
    proc = run_py(MISMATCH.format(fake="2.14.1"))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "CudaFallbackSource"
    warnings_ = [line for line in lines if line.startswith("WARNING")]
    assert len(warnings_) == 1, lines
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    why = (f"it was built against torch {torch.__version__} (C++11 ABI {abi}), "
           f"this is torch 2.14.1 (C++11 ABI {abi})")
    fix = this_checkout_fix()
    assert why in warnings_[0] and warnings_[0].endswith(fix)
    assert lines[-1].startswith("CPU CPU memory profiling needs") and why in lines[-1]


def test_shim_used_under_its_own_torch():
    pytest.importorskip("pytorch_memlab._torchshim")
    import torch
    proc = run_py(MISMATCH.format(fake=str(torch.__version__)))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["PyCapsule", "CPU shim"]
