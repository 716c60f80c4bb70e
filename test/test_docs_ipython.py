"""The manual's IPython sessions (```ipython blocks with ``In [n]:``
prompts) run as printed: a page's sessions in one IPython shell, in order,
each cell at its own execution count; an ``Out[n]:`` line in a session and
an output block right after one must be what the shell printed (where no GPU
is present, as for the python blocks: test_readme.py).  A block without
prompts is a sketch and is not run."""
import json
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("IPython")

from test_readme import FENCE, OUTPUT_COMPARED, PAGES, ROOT, _expected_after, \
    _name, normalise  # noqa: E402

PROMPT = re.compile(r"^In \[(\d+)\]: ?(.*)$")
MORE = re.compile(r"^   \.\.\.: ?(.*)$")
OUT = re.compile(r"^Out\[\d+\]: ")
CELL_MARK = "\x00cell "

# Runs the cells (a JSON list of [count, code]) in one shell; a marker line
# before each cell's output.
DRIVER = f"""\
import json, sys
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
for count, code in json.loads(sys.argv[1]):
    print({CELL_MARK!r} + str(count), flush=True)
    shell.execution_count = count
    result = shell.run_cell(code, store_history=True)
    if not result.success:
        sys.exit(f"In [{{count}}] failed: {{result.error_before_exec or result.error_in_exec!r}}")
"""


def cells_of(block):
    """[(count, code)] and the ``Out[n]:`` lines of one session block."""
    cells, outs = [], []
    for line in block.splitlines():
        prompt, more = PROMPT.match(line), MORE.match(line)
        if prompt:
            cells.append((int(prompt.group(1)), [prompt.group(2)]))
        elif more and cells:
            cells[-1][1].append(more.group(1))
        elif OUT.match(line):
            outs.append(line.rstrip())
    return [(n, "\n".join(code).strip("\n")) for n, code in cells], outs


def sessions():
    for page in PAGES:
        text = page.read_text()
        found = list(FENCE.finditer(text))
        parts = []
        for i, m in enumerate(found):
            if m.group(1) != "ipython" or not PROMPT.search(m.group(2).splitlines()[0]):
                continue
            cells, outs = cells_of(m.group(2))
            parts.append((cells, outs, _expected_after(text, found, i)))
        if parts:
            yield pytest.param(parts, id=_name(page))


@pytest.mark.parametrize("parts", list(sessions()))
def test_ipython_sessions(tmp_path, parts):
    cells = [cell for part in parts for cell in part[0]]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(cells)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = {}
    for chunk in proc.stdout.split(CELL_MARK)[1:]:
        count, _, out = chunk.partition("\n")
        printed[int(count)] = out
    if not OUTPUT_COMPARED:
        return
    for part_cells, outs, expected in parts:
        text = "".join(printed[n] for n, _ in part_cells)
        got_outs = [line.rstrip() for line in text.splitlines() if OUT.match(line)]
        assert got_outs == outs
        if expected is not None:
            shown = "\n".join(line for line in text.splitlines() if not OUT.match(line))
            assert normalise(shown) == normalise(expected)
