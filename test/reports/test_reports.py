"""Reporters read what a column is from the profile: a saved JSON records each column's kind and unit
(``column_meanings``, schema version 2), an older file gets them by torch's
naming rule at load, a report shows a figure by the unit the document gives,
and viewing a saved profile never reaches the native boundary."""
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import MiB

from pytorch_memlab import load
from pytorch_memlab.html_report import render_report
from pytorch_memlab.records.document import SCHEMA_VERSION, from_document

ROOT = Path(__file__).resolve().parents[2]


def text_of(obj):
    out = io.StringIO()
    obj.print_stats(stream=out)
    return out.getvalue()


def _doc(columns, meanings=None, version=SCHEMA_VERSION, rank=None):
    """A one-function document whose one line has ``MiB`` in every column."""
    line = {"lineno": 3, "code": "x = f()", "count": 1, "net_growth": 0,
            **{c: MiB for c in columns}, "raised": None}
    doc = {"format": "pytorch_memlab.line_profile", "schema_version": version,
           "devices": ["cpu"], "columns": list(columns),
           "functions": [{"qualname": "f", "filename": "f.py", "first_line": 2,
                          "device": "cpu", "columns": list(columns), "lines": [line]}],
           "timeline": [], "run": None}
    if meanings is not None:
        doc["column_meanings"] = meanings
    if rank is not None:
        doc["rank"] = {"rank": rank, "world_size": 2, "local_rank": rank, "host": "h",
                       "run_id": "r"}
    return doc


def _figures(text, code="x = f()"):
    """The cells before count and line number of the row showing ``code``."""
    row = next(r for r in text.splitlines() if r.rstrip().endswith(code))
    return row.split()[:-5]


# ---- a report reads the unit from the document, not from the name -------------------

def test_report_shows_the_unit_the_document_gives_not_the_one_the_name_says(tmp_path):
    # by torch's naming, num_alloc_retries counts and active_bytes.all.peak is bytes;
    # this document says the opposite of both, and the reports follow the document
    columns = ["num_alloc_retries", "active_bytes.all.peak"]
    meanings = {"num_alloc_retries": {"kind": "level", "unit": "bytes"},
                "active_bytes.all.peak": {"kind": "peak", "unit": "count"}}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_doc(columns, meanings)))
    saved = load(path)
    assert _figures(text_of(saved)) == ["1.00M", str(MiB), "0.00B"]
    page = render_report(path)
    assert "<span>1.00M</span>" in page and f"<span>{MiB}</span>" in page
    notebook = saved._repr_html_()
    assert ">1.00M</td>" in notebook and f">{MiB}</td>" in notebook


def test_rank_table_shows_the_unit_the_documents_give():
    from pytorch_memlab.reports.rank_table import RankTextReport, merge
    meanings = {"num_alloc_retries": {"kind": "level", "unit": "bytes"}}
    docs = [_doc(["num_alloc_retries"], meanings, rank=r) for r in (0, 1)]
    text = RankTextReport().render(merge(docs))
    # rank 0, rank 1 (figure and growth each), then the spread
    assert _figures(text) == ["1.00M", "0.00B", "1.00M", "0.00B", "0.00B", "0.00B"]


def test_an_old_file_gets_meanings_by_the_naming_rule():
    columns = ["num_alloc_retries", "active_bytes.all.peak", "allocation.all.allocated"]
    profile = from_document(_doc(columns, version=1), "old")
    assert {c: (m.kind, m.unit) for c, m in profile.meanings.items()} == {
        "num_alloc_retries": ("level", "count"),
        "active_bytes.all.peak": ("peak", "bytes"),
        "allocation.all.allocated": ("counter", "count")}


@pytest.mark.parametrize("meanings, message", [
    ([], r"column_meanings: it is a list"),
    ({"a": "bytes"}, r"column_meanings\['a'\]: it is a str"),
    ({"a": {"kind": "peak"}}, r"column_meanings\['a'\]: 'unit' is missing"),
    ({"a": {"kind": "max", "unit": "bytes"}}, r"'kind' is 'max'; expected 'level'"),
    ({"a": {"kind": "peak", "unit": "MiB"}}, r"'unit' is 'MiB'; expected 'bytes'"),
])
def test_bad_column_meanings_name_the_file_and_the_column(tmp_path, meanings, message):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_doc(["a"], meanings)))
    with pytest.raises(ValueError, match=message) as info:
        load(path)
    assert str(path) in str(info.value)


# ---- viewing never reaches the native boundary --------------------------------------

_WATCH = """
import atexit, runpy, sys
def report():
    seen = sorted(m for m in ("pytorch_memlab.sources.native", "pytorch_memlab._tracer",
                              "pytorch_memlab._torchshim", "torch") if m in sys.modules)
    print("IMPORTED:" + ",".join(seen), file=sys.stderr)
atexit.register(report)
sys.argv[0] = "pytorch_memlab"
runpy.run_module("pytorch_memlab", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("extra", [[], ["-o", "r.html"], ["-o", "r.csv"]])
def test_view_of_a_saved_profile_never_imports_native(tmp_path, extra):
    meanings = {"active_bytes.all.peak": {"kind": "peak", "unit": "bytes"}}
    (tmp_path / "p.json").write_text(json.dumps(_doc(["active_bytes.all.peak"], meanings)))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", _WATCH, "view", "p.json", *extra],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "IMPORTED:\n" in proc.stderr, proc.stderr
    if not extra:
        assert "1.00M" in proc.stdout


def test_loading_and_rendering_never_import_native(tmp_path):
    (tmp_path / "p.json").write_text(json.dumps(_doc(["active_bytes.all.peak"], version=1)))
    code = ("import sys\n"
            "from pytorch_memlab.reports.saved_profile import load\n"
            "from pytorch_memlab.html_report import render_report\n"
            "saved = load('p.json')\n"
            "text = repr(saved) + saved._repr_html_() + render_report(saved)\n"
            "assert '1.00M' in text\n"
            "print('pytorch_memlab.sources.native' in sys.modules)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "False\n"


# ---- the live profiler records them ---------------------------------------------------

COLUMNS = ("active_bytes.all.peak", "allocation.all.allocated", "allocation.all.current")


def _curve_html(page):
    """The notebook's caption and SVG of the one curve in ``page``."""
    start = page.index('<p style="font-family:monospace;font-size:12px;color:#666')
    return page[start:page.index("</svg>", start) + len("</svg>")]


def _curve_div(page):
    """The report's div of the one curve in ``page``."""
    start = page.index('<div class="curve">')
    return page[start:page.index("</script></div>", start) + len("</script></div>")]


@pytest.fixture
def saved_pair(tmp_path):
    """(the saved profile, the same document written as schema version 1)."""
    torch = pytest.importorskip("torch")
    from pytorch_memlab import LineProfiler

    def work():
        x = torch.empty(262144)
        y = torch.empty(524288)
        del x
        return y

    with LineProfiler(work, device="cpu", columns=COLUMNS) as prof:
        work()
    prof.save(tmp_path / "new.json")
    doc = json.loads((tmp_path / "new.json").read_text())
    old = dict(doc, schema_version=1)
    del old["column_meanings"]
    old["functions"] = [{k: v for k, v in f.items() if k not in ("curve", "curve_of")}
                        for f in doc["functions"]]   # curves are new in version 3
    (tmp_path / "old.json").write_text(json.dumps(old))
    return prof, tmp_path / "new.json", tmp_path / "old.json"


def test_a_saved_json_records_each_columns_kind_and_unit(saved_pair):
    from pytorch_memlab import sources
    _, new, _ = saved_pair
    doc = json.loads(new.read_text())
    assert doc["schema_version"] == SCHEMA_VERSION == 7
    assert list(doc) == ["format", "schema_version", "pytorch_memlab_version",
                         "torch_version", "python_version", "created", "devices", "columns",
                         "column_meanings", "functions", "timeline", "run"]
    assert doc["column_meanings"] == {
        "active_bytes.all.peak": {"kind": "peak", "unit": "bytes"},
        "allocation.all.allocated": {"kind": "counter", "unit": "count"},
        "allocation.all.current": {"kind": "level", "unit": "count"}}
    for column, meaning in doc["column_meanings"].items():   # as the source declares it
        assert (meaning["kind"], meaning["unit"]) == sources.field_meaning(column)[1:]


def test_an_old_version_file_loads_and_prints_identically(saved_pair):
    prof, new, old = saved_pair
    assert load(old).schema_version == 1
    assert text_of(load(old)) == text_of(load(new)) == text_of(prof)
    # without the curve (version 3) the pages are the same
    assert load(old)._repr_html_() == load(new).display()._repr_html_().replace(
        _curve_html(load(new).display()._repr_html_()), "")
    assert render_report(old) == render_report(new).replace(_curve_div(render_report(new)), "")
    assert load(old).profile.meanings == load(new).profile.meanings
    # saved again, it is a current document with the meanings
    assert load(old).to_dict()["column_meanings"] == json.loads(new.read_text())[
        "column_meanings"]


def test_a_csv_carries_no_meanings_and_reads_them_by_name(saved_pair, tmp_path):
    prof, new, _ = saved_pair
    prof.save(tmp_path / "p.csv")
    assert "column_meanings" not in (tmp_path / "p.csv").read_text()
    assert load(tmp_path / "p.csv").profile.meanings == load(new).profile.meanings
    assert text_of(load(tmp_path / "p.csv")) == text_of(load(new))


def test_every_renderer_is_a_reporter():
    from pytorch_memlab.reports.base import reporter_for
    from pytorch_memlab.reports.html_page import HtmlReport
    from pytorch_memlab.reports.notebook import NotebookReport
    from pytorch_memlab.reports.text_table import TextReport
    assert type(reporter_for("text")) is TextReport
    assert type(reporter_for("notebook")) is NotebookReport
    assert type(reporter_for("html", title_text="t")) is HtmlReport
    with pytest.raises(ValueError, match="format='pdf'"):
        reporter_for("pdf")
