"""The code column of a function whose source is no file: an ``exec()``'d
function's ``<string>`` may name another text in linecache (from 3.13 the
interpreter keeps a ``python -c`` program there, and pytest-xdist starts its
workers so): that text is not the function's, and is not shown."""
import io
import linecache

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")
from pytorch_memlab import LineProfiler  # noqa: E402

MADE = "def made(n):\n    kept = torch.empty(n)\n    return kept\n"
OTHER = "import sys\nprint('another program')\nsys.exit(0)\n"


@pytest.fixture
def foreign_string_source():
    saved = linecache.cache.get("<string>")
    linecache.cache["<string>"] = (len(OTHER), None, OTHER.splitlines(True), "<string>")
    yield
    if saved is None:
        linecache.cache.pop("<string>", None)
    else:
        linecache.cache["<string>"] = saved


def test_an_exec_function_shows_no_other_programs_lines(foreign_string_source):
    namespace = {"torch": torch}
    exec(compile(MADE, "<string>", "exec"), namespace)
    made = namespace["made"]
    prof = LineProfiler(made, device="cpu")
    with prof:
        made(256)
    (record,) = prof.stats(made)
    assert [line["code"] for line in record["lines"]] == ["", ""]
    out = io.StringIO()
    prof.print_stats(stream=out)
    assert "note: the source of made (<string>) is not available" in out.getvalue()
    assert "another program" not in out.getvalue()
