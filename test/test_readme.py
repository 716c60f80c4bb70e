"""Every ```python block of README.md runs as printed, each in a fresh
interpreter; where a block is followed directly by an output block, the
output must match wherever no GPU is present, on every torch the suite runs
with (2.13 CPU-only on 3.11, the ordinary CUDA-built wheel run on CPU on 3.12
and 3.13): the figures are bytes of CPU tensors, which depend on shapes and
dtypes only, not on the torch version.  With a GPU the examples pick it and
print other figures, so there only that each block runs is checked; the same
where a training framework's output is shown for another version of it than
the one installed.  How long training took is not compared."""
import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

README = Path(__file__).resolve().parent.parent / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)
OUTPUT_COMPARED = not torch.cuda.is_available()   # the README shows CPU runs


def blocks():
    text = README.read_text()
    found = list(FENCE.finditer(text))
    for i, m in enumerate(found):
        if m.group(1) != "python" or _marker(text, m):
            continue
        expected = _expected_after(text, found, i)
        if expected is not None and _other_version(text[m.end():found[i + 1].start()]):
            expected = None
        line = text.count("\n", 0, m.start()) + 1
        yield pytest.param(m.group(2), expected, id=f"README.md:{line}",
                           marks=_needs(text, m))


NEEDS = re.compile(r"<!-- readme-test: needs ([\w. ]+) -->\n\n?$")


def _needs(text, m):
    """``<!-- readme-test: needs MODULE... -->`` just before a block: skipped
    where one of those optional packages is not installed (the training
    frameworks are installed in the 3.11 environment only)."""
    found = NEEDS.search(text[max(0, m.start() - 80):m.start()])
    missing = [name for name in (found.group(1).split() if found else ())
               if importlib.util.find_spec(name) is None]
    return [pytest.mark.skip(reason=f"needs {', '.join(missing)}")] if missing else []


MARKER = re.compile(r"<!-- readme-test: (file (\S+)|run(?:, exits (\d+))?) -->\n\n?$")
ROOT = README.parent


def _marker(text, m):
    """The ``<!-- readme-test: file NAME -->`` / ``run`` comment just before a block."""
    return MARKER.search(text[max(0, m.start() - 80):m.start()])


def _expected_after(text, found, i):
    """The output block right after block i, if any: at most a short phrase
    ("prints", "Output (...):" and the like) stands between them."""
    if i + 1 < len(found) and found[i + 1].group(1) == "":
        if len(text[found[i].end():found[i + 1].start()]) < 400:
            return found[i + 1].group(2)
    return None


# "prints (torch 2.13, Lightning 2.6, CPU)": a framework's source lines and
# its own tensors are in its output, so that is compared where the version
# named is installed (major.minor), and elsewhere only run
VERSIONS = re.compile(r"\b(Lightning|transformers) (\d+\.\d+)\b")


def _other_version(phrase):
    """The framework named in ``phrase`` with another version installed, or None."""
    for name, wanted in VERSIONS.findall(phrase):
        try:
            installed = importlib.metadata.version(name.lower())
        except importlib.metadata.PackageNotFoundError:
            continue              # the block is skipped (needs)
        if ".".join(installed.split(".")[:2]) != wanted:
            return f"{name} {installed}"
    return None


# the Trainer's closing log: how long training took
TIMINGS = re.compile(r"'(train_runtime|train_samples_per_second|train_steps_per_second)': "
                     r"'[\d.]+'")


def normalise(text):
    return [TIMINGS.sub(r"'\1': '...'", line.rstrip())
            for line in text.strip("\n").splitlines()]


@pytest.mark.parametrize("code, expected", list(blocks()))
def test_readme_block(tmp_path, code, expected):
    script = tmp_path / "block.py"
    script.write_text(code)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         cwd=tmp_path, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    if expected is not None and OUTPUT_COMPARED:
        assert normalise(out.stdout) == normalise(expected)


def test_readme_shell_blocks(tmp_path):
    """The blocks marked for it: ``file NAME`` blocks are written to NAME, and
    ``run`` blocks run in order with bash in that folder, each matching the
    output block after it (the torchrun and the across-runs sections); ``run,
    exits N`` expects exit status N (diff's --fail-over)."""
    text = README.read_text()
    found = list(FENCE.finditer(text))
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
               PYTHONPATH=os.pathsep.join([str(ROOT)] + [p for p in
                                          [os.environ.get("PYTHONPATH")] if p]))
    ran = 0
    for i, m in enumerate(found):
        marker = _marker(text, m)
        if marker is None:
            continue
        if marker.group(2):
            (tmp_path / marker.group(2)).write_text(m.group(2))
            continue
        out = subprocess.run(["bash", "-c", m.group(2)], capture_output=True, text=True,
                             cwd=tmp_path, env=env, timeout=300)
        assert out.returncode == int(marker.group(3) or 0), out.stderr
        expected = _expected_after(text, found, i)
        if expected is not None and OUTPUT_COMPARED:
            assert normalise(out.stdout) == normalise(expected)
        ran += 1
    assert ran >= 6


def test_how_it_works_names_every_module():
    """README's "How it works" stays the map of the package: each module is
    named there (mem_reporter/, courtesy/ and integrations/pytest_plugin/ by
    folder)."""
    text = README.read_text()
    section = text[text.index("## How it works"):]
    section = section[:section.index("\n## ", 1)]
    package = ROOT / "pytorch_memlab"
    by_folder = ("mem_reporter/", "courtesy/", "integrations/pytest_plugin/")
    missing = [str(path.relative_to(package)) for path in sorted(package.rglob("*.py"))
               if path.name not in ("__init__.py", "__main__.py")
               and not path.relative_to(package).as_posix().startswith(by_folder)
               and f"`{path.name}`" not in section]
    assert not missing, f"README's How it works does not name {missing}"
