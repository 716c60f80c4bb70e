"""The install as a newcomer does it, in fresh virtual environments made from a
clean clone of this checkout's HEAD (commit first): README's quick start as
printed, the sdist round trip, and what a build without the shim says.

Slow (a torch install and three package builds; about 2-3 minutes with a warm
pip cache).  One venv serves the whole module: the quick start makes it, the
later tests uninstall pytorch_memlab from it and install it again some other
way.  pip resolves torch offline through its configured find-links; the
constraint below pins the torch the rest of the suite uses (the README
command itself says only `torch`).
"""
import glob
import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH_PIN = os.environ.get("MEMLAB_TEST_TORCH", "torch==2.13.0")


def sh(command, cwd, env, timeout=900):
    return subprocess.run(command, shell=True, cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, executable="/bin/bash")


def quick_start_command():
    """The first bash block under README's '## Quick start', as printed."""
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("## Quick start"):]
    return re.search(r"```bash\n(.*?)\n```", section, re.S).group(1)


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """(clone dir, env with the fresh venv first on PATH, venv python)."""
    top = tmp_path_factory.mktemp("fresh")
    clone = top / "pytorch_memlab"
    subprocess.run(["git", "clone", "-q", REPO, str(clone)], check=True, timeout=120)
    venv = top / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True, timeout=300)
    constraints = top / "constraints.txt"
    constraints.write_text(f"{TORCH_PIN}\n")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PIP_CONSTRAINT")}
    env["PATH"] = f"{venv}/bin:{env.get('PATH', '')}"
    env["PIP_CONSTRAINT"] = str(constraints)
    return clone, env, str(venv / "bin" / "python")


def test_quick_start_as_printed(fresh):
    clone, env, _ = fresh
    command = quick_start_command()
    assert command.startswith('python3 -m pip install torch "setuptools>=77" wheel && ')
    proc = sh(command, cwd=clone, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "pytorch_memlab" in proc.stdout
    # the demo ran from the checkout's folder, on the extensions built there
    assert glob.glob(str(clone / "pytorch_memlab" / "_tracer*.so"))
    assert glob.glob(str(clone / "pytorch_memlab" / "_torchshim*.so"))
    assert glob.glob(str(clone / "pytorch_memlab" / "_testsource*.so"))  # a checkout: tests run


def test_sdist_round_trip(fresh, tmp_path):
    clone, env, python = fresh
    dist = tmp_path / "dist"
    built = sh(f"{sys.executable} -m build --sdist --outdir {dist} .", cwd=clone, env=env)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (sdist,) = glob.glob(str(dist / "*.tar.gz"))
    listing = subprocess.run(["tar", "tzf", sdist], capture_output=True, text=True,
                             check=True).stdout
    for member in ("include/memlab/source.h", "src/tracer/codemap.h",
                   "src/torchshim/shim.h", "src/torchshim/module.cpp", "LICENSE",
                   "README.md", "pytorch_memlab/py.typed", "pytorch_memlab/_tracer.pyi"):
        assert f"/{member}\n" in listing, member
    proc = sh(f"python3 -m pip uninstall -y pytorch-memlab && "
              f"python3 -m pip install --no-build-isolation --no-deps {sdist}",
              cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    check = sh(f"{python} -c 'import pytorch_memlab._tracer, torch, pytorch_memlab._torchshim "
               f"as s; print(s.TORCH_VERSION == torch.__version__, s.__file__)'",
               cwd=tmp_path, env=env)
    assert check.returncode == 0, check.stderr
    ok, where = check.stdout.split()
    assert ok == "True" and "site-packages" in where
    # the tracer's test source is for checkouts only: no wheel ships it
    assert not glob.glob(os.path.join(os.path.dirname(where), "_testsource*"))


def test_isolated_build_stops_and_tracer_only_build_says_how(fresh, tmp_path):
    clone, env, python = fresh
    isolated = sh(f"python3 -m pip uninstall -y pytorch-memlab && "
                  f"python3 -m pip install --no-deps {clone}", cwd=tmp_path, env=env)
    assert isolated.returncode != 0
    assert "--no-build-isolation" in isolated.stderr + isolated.stdout
    assert "MEMLAB_NO_TORCHSHIM=1" in isolated.stderr + isolated.stdout

    # a tracer-only build, on purpose: installs, and names the fix at first use
    tracer_only = sh(f"MEMLAB_NO_TORCHSHIM=1 python3 -m pip install --no-deps "
                     f"--no-build-isolation {clone}", cwd=tmp_path, env=env)
    assert tracer_only.returncode == 0, tracer_only.stderr[-3000:]
    first_use = sh(f"{python} -c 'from pytorch_memlab import sources; "
                   f"sources.get_source(\"cpu\")'", cwd=tmp_path, env=env)
    assert first_use.returncode == 1
    fix = (f"python -m pip install --no-build-isolation --force-reinstall --no-deps "
           f"{clone}")
    last = first_use.stderr.strip().splitlines()[-1]
    assert last.startswith("RuntimeError: CPU memory profiling needs") and last.endswith(fix)

    # and that command, as printed, fixes it
    fixed = sh(fix, cwd=tmp_path, env=env)
    assert fixed.returncode == 0, fixed.stderr[-3000:]
    works = sh(f"{python} -c 'from pytorch_memlab import sources; "
               f"print(type(sources.get_source(\"cpu\")).__name__)'", cwd=tmp_path, env=env)
    assert works.stdout.strip() == "PyCapsule", works.stderr


def install_commands():
    """The first bash block under README's '## Install', as printed, one command."""
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        text = f.read()
    section = text[text.index("## Install"):]
    block = re.search(r"```bash\n(.*?)\n```", section, re.S).group(1)
    return " && ".join(line for line in block.splitlines() if line.strip())


def test_install_as_printed_over_the_old_setuptools_of_a_fresh_venv(fresh, tmp_path):
    """A fresh venv of Python 3.11 or older comes with setuptools 65.5, which
    cannot read pyproject.toml's `license`; next to a torch that does not ask for a
    newer one (older releases asked for setuptools only on 3.12+), a plain
    `pip install setuptools` keeps it.  README's Install commands still work."""
    import ensurepip
    bundled = glob.glob(os.path.join(os.path.dirname(ensurepip.__file__), "_bundled",
                                     "setuptools-*.whl"))
    if not bundled:
        pytest.skip("this Python's venvs come without setuptools: pip installs the newest")
    clone, env, python = fresh
    torch = sh("python3 -m pip install torch", cwd=tmp_path, env=env)   # if run alone
    assert torch.returncode == 0, torch.stdout[-3000:] + torch.stderr[-3000:]
    purelib = sh(f"{python} -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])'",
                 cwd=tmp_path, env=env).stdout.strip()
    (metadata,) = glob.glob(os.path.join(purelib, "torch-*.dist-info", "METADATA"))
    with open(metadata, encoding="utf-8") as f:
        original = f.read()
    older = re.sub(r"(?m)^Requires-Dist: setuptools\b.*$",
                   'Requires-Dist: setuptools ; python_version >= "3.12"', original)
    try:
        with open(metadata, "w", encoding="utf-8") as f:
            f.write(older)
        old = sh(f"python3 -m pip uninstall -y pytorch-memlab && "
                 f"python3 -m pip install --force-reinstall --no-deps {bundled[0]}",
                 cwd=tmp_path, env=env)
        assert old.returncode == 0, old.stdout[-3000:] + old.stderr[-3000:]
        proc = sh(install_commands(), cwd=clone, env=env)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        check = sh(f"{python} -c 'import pytorch_memlab._torchshim, setuptools; "
                   f"print(setuptools.__version__)'", cwd=tmp_path, env=env)
        assert check.returncode == 0, check.stderr
        assert int(check.stdout.split(".")[0]) >= 77
    finally:
        with open(metadata, "w", encoding="utf-8") as f:
            f.write(original)
