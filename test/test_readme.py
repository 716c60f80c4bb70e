"""Every ```python block of the manual (README.md, CONTRIBUTING.md and each
page of docs/) runs as printed, each in a fresh interpreter; where a block is
followed directly by an output block, the output must match wherever no GPU
is present, on every torch the suite runs with (2.13 CPU-only on 3.11, the
ordinary CUDA-built wheel run on CPU on 3.12 and 3.13): the figures are bytes
of CPU tensors, which depend on shapes and dtypes only, not on the torch
version.  With a GPU the examples pick it and print other figures, so there
only that each block runs is checked; the same where a training framework's
output is shown for another version of it than the one installed.  How long
training took is not compared."""
import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, ROOT / "CONTRIBUTING.md"] + sorted(DOCS.glob("*.md"))
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)
OUTPUT_COMPARED = not torch.cuda.is_available()   # the manual shows CPU runs


def _name(page):
    return page.relative_to(ROOT).as_posix()


def blocks():
    for page in PAGES:
        text = page.read_text()
        found = list(FENCE.finditer(text))
        for i, m in enumerate(found):
            if m.group(1) != "python" or _marker(text, m):
                continue
            expected = _expected_after(text, found, i)
            if expected is not None and _other_version(text[m.end():found[i + 1].start()]):
                expected = None
            line = text.count("\n", 0, m.start()) + 1
            yield pytest.param(m.group(2), expected, id=f"{_name(page)}:{line}",
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


RUN_MARKER = re.compile(r"^<!-- readme-test: run", re.M)     # on its own line
SHELL_PAGES = [page for page in PAGES if RUN_MARKER.search(page.read_text())]


def test_shell_samples_are_found():
    """The pages that show shell runs (torchrun, across calls and runs): a
    marker the pattern no longer reads would leave them untested."""
    assert {"docs/torchrun.md", "docs/across-calls.md"} <= {_name(p) for p in SHELL_PAGES}


@pytest.mark.parametrize("page", SHELL_PAGES, ids=_name)
def test_readme_shell_blocks(tmp_path, page):
    """The blocks of one page marked for it: ``file NAME`` blocks are written
    to NAME, and ``run`` blocks run in order with bash in that folder, each
    matching the output block after it; ``run, exits N`` expects exit status N
    (diff's --fail-over)."""
    text = page.read_text()
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
    assert ran == len(RUN_MARKER.findall(text))    # none left unread by MARKER


LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_readme_is_a_front_page():
    """README says what, how to install, one quick start and where to read on:
    the manual's pages hold the rest."""
    lines = README.read_text().count("\n")
    assert lines <= 400, f"README.md has {lines} lines; move the detail to a page of docs/"


def test_readme_links_point_to_files():
    """README's relative links (mkdocs checks the pages' own links, not
    README's) name files that exist, and every page of docs/ is one of them."""
    for page in (README, ROOT / "CONTRIBUTING.md"):
        targets = [t.split("#")[0] for t in LINK.findall(page.read_text())
                   if "://" not in t and not t.startswith("#")]
        missing = [t for t in targets if not (ROOT / t).exists()]
        assert not missing, f"{_name(page)} links to missing files: {missing}"
    linked = {Path(t.split("#")[0]) for t in LINK.findall(README.read_text())}
    unlinked = [p.name for p in DOCS.glob("*.md") if p.relative_to(ROOT) not in linked]
    assert not unlinked, f"README.md links to no docs page {unlinked}"


def test_architecture_names_every_folder():
    """docs/architecture.md stays the map of the code by its folders (files
    are described by their docstrings): each package and native source folder
    is named there."""
    text = (DOCS / "architecture.md").read_text()
    folders = sorted(p.parent for p in (ROOT / "pytorch_memlab").rglob("__init__.py"))
    folders = [f for f in folders if f != ROOT / "pytorch_memlab"]
    folders += sorted(p for p in (ROOT / "src").iterdir() if p.is_dir())
    folders += sorted(p for p in (ROOT / "include").iterdir() if p.is_dir())
    missing = [_name(f) for f in folders if f"`{_name(f)}/`" not in text]
    assert not missing, f"docs/architecture.md does not name {missing}"
