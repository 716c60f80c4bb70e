"""Every ```python block of README.md runs as printed, each in a fresh
interpreter; where a block is followed directly by an output block, the
output must match (torch 2.13 on CPU is what the README shows)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

README = Path(__file__).resolve().parent.parent / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.S | re.M)
OUTPUT_SHOWN_FOR = "2.13."          # the torch the README's outputs came from


def blocks():
    text = README.read_text()
    found = list(FENCE.finditer(text))
    for i, m in enumerate(found):
        if m.group(1) != "python":
            continue
        expected = None
        if i + 1 < len(found) and found[i + 1].group(1) == "":
            between = text[m.end():found[i + 1].start()]
            if len(between) < 400:      # "prints", "Output (...):" and the like
                expected = found[i + 1].group(2)
        line = text.count("\n", 0, m.start()) + 1
        yield pytest.param(m.group(2), expected, id=f"README.md:{line}")


def normalise(text):
    return [line.rstrip() for line in text.strip("\n").splitlines()]


@pytest.mark.parametrize("code, expected", list(blocks()))
def test_readme_block(tmp_path, code, expected):
    script = tmp_path / "block.py"
    script.write_text(code)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         cwd=tmp_path, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    if expected is not None and torch.__version__.startswith(OUTPUT_SHOWN_FOR) \
            and not torch.cuda.is_available():
        assert normalise(out.stdout) == normalise(expected)


def test_readme_has_python_blocks():
    assert len(list(blocks())) >= 10
