"""LineProfiler.save / pytorch_memlab.load: JSON and CSV round trips print and
display exactly what the live profiler did; to_dataframe; the timeline of
profile_every."""
import io
import json
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")

import pytorch_memlab  # noqa: E402
from pytorch_memlab import LineProfiler, load, profile_every  # noqa: E402
from pytorch_memlab.line_profiler import SCHEMA_VERSION, SavedProfile  # noqa: E402

from helpers import MiB, code_line  # noqa: E402
COLUMNS = ("active_bytes.all.peak", "reserved_bytes.all.peak", "allocation.all.allocated",
           "active_bytes.all.current")


# the CSV's cells of what was alive at the peak (schema version 4), then its
# kinds and modules as one cell of JSON (version 6)
PEAK = ("held_at_peak", "peak.bytes", "peak.lineno", "peak.call", "peak.before_call",
        "peak.other_threads")
START = ("start_level.first_call", "start_level.later_calls")
KINDS = ("peak.kinds",)

def work():
    x = torch.empty(262144)
    y = torch.empty(524288)
    del x
    return y


def helper(n):
    t = torch.ones(n)
    return t.sum()


def never_called():
    return 1


def failing():
    x = torch.empty(1024)
    raise ValueError(f"failing with {x.numel()}")


def text_of(obj, **kwargs):
    out = io.StringIO()
    obj.print_stats(stream=out, **kwargs)
    return out.getvalue()


@pytest.fixture
def prof():
    profiler = LineProfiler(work, helper, never_called, failing, device="cpu", columns=COLUMNS)
    with pytest.raises(ValueError), profiler:   # the exception leaves the profiler
        work()
        work()
        helper(1000)
        failing()
    yield profiler
    profiler.disable()


def _no_curve(records):
    """The records as dicts without the curve, which a CSV does not carry."""
    return [{k: v for k, v in r.to_dict().items() if k not in ("curve", "curve_of")}
            for r in records]


@pytest.mark.parametrize("ext", ["json", "csv"])
def test_round_trip_prints_and_displays_identically(prof, tmp_path, ext):
    path = tmp_path / f"profile.{ext}"
    prof.save(path)
    saved = load(path)
    assert isinstance(saved, SavedProfile)
    assert text_of(saved) == text_of(prof)
    assert repr(saved) == repr(prof.display())
    assert str(saved) == str(prof.display())
    if ext == "json":
        assert saved._repr_html_() == prof.display()._repr_html_()
        assert saved.display()._repr_html_() == prof.display()._repr_html_()
        assert saved.stats() == prof.stats()
    else:   # the CSV carries no curve: the rest is the same
        assert "<svg" not in saved._repr_html_()
        assert _no_curve(saved.stats()) == _no_curve(prof.stats())
    # the same selections as the live profiler
    assert text_of(saved, func="helper") == text_of(prof, func=helper)
    assert text_of(saved, func=work) == text_of(prof, func=work)
    assert text_of(saved, columns=["reserved_bytes.all.peak"]) == \
        text_of(prof, columns=["reserved_bytes.all.peak"])
    assert _no_curve(saved.stats([work, "helper"], COLUMNS[:1])) == \
        _no_curve(prof.stats([work, helper], COLUMNS[:1]))
    with pytest.raises(ValueError, match="not a function of this profile"):
        saved.stats("nope")
    with pytest.raises(ValueError, match="was not recorded"):
        saved.stats(columns=["segment.all.peak"])


def test_text_is_the_live_text_with_the_raised_line(prof, tmp_path):
    prof.save(tmp_path / "p.json")
    text = text_of(load(tmp_path / "p.json"))
    assert "## work" in text and "## helper" in text and "## failing" in text
    assert "<-- ValueError raised here" in text
    assert "(not run while profiling: never_called)" in text


def test_json_schema(prof, tmp_path):
    path = tmp_path / "p.json"
    prof.save(path)
    data = json.loads(path.read_text())
    assert data["format"] == "pytorch_memlab.line_profile"
    assert data["schema_version"] == SCHEMA_VERSION == 7
    assert data["torch_version"] == str(torch.__version__)
    assert data["pytorch_memlab_version"] == pytorch_memlab.__version__
    assert data["python_version"] == "%d.%d.%d" % sys.version_info[:3]
    assert data["devices"] == ["cpu"]
    assert data["columns"] == list(COLUMNS)
    assert data["timeline"] == [] and data["run"] is None
    by_name = {f["qualname"]: f for f in data["functions"]}
    assert set(by_name) == {"work", "helper", "never_called", "failing"}
    record = by_name["work"]
    assert record["filename"] == __file__
    assert record["first_line"] == work.__code__.co_firstlineno
    assert record["device"] == "cpu" and record["columns"] == list(COLUMNS)
    lines = {line["code"].strip(): line for line in record["lines"]}
    assert set(lines["def work():"]) == {"lineno", "code", "count", "net_growth", "raised",
                                         *COLUMNS, "first_call", "later_calls",
                                         "held_at_peak"}
    assert set(record["peak"]) == {"bytes", "lineno", "call", "before_call", "other_threads",
                                   "by_kind", "before_call_by_kind", "other_threads_by_kind",
                                   "lines_by_kind", "by_module", "modules_by_kind"}
    first = lines["x = torch.empty(262144)"]
    assert first["count"] == 2 and first["net_growth"] == 2 * MiB
    assert first["allocation.all.allocated"] == 2            # a counter: summed
    assert lines["def work():"]["count"] == 0
    assert lines["def work():"]["active_bytes.all.peak"] is None
    raised = [line for line in by_name["failing"]["lines"] if line["raised"]]
    assert [line["raised"] for line in raised] == ["ValueError"]
    saved = load(path)
    assert saved.torch_version == str(torch.__version__)
    assert saved.columns == COLUMNS and saved.devices == ["cpu"]


def test_csv_layout(prof, tmp_path):
    path = tmp_path / "p.csv"
    prof.save(path)
    rows = path.read_text().splitlines()
    per_call = ["calls", "growth_per_call"] + [f"{part}.{key}" for part in
                                               ("first_call", "later_calls")
                                               for key in ("count", "net_growth", *COLUMNS)]
    assert rows[0] == ('"qualname",filename,first_line,device,lineno,count,net_growth,'
                       + ",".join(COLUMNS + tuple(per_call) + PEAK + START + KINDS) + ",raised,code")
    lines = sum(len(r["lines"]) for r in prof.stats())
    assert lines == len(rows) - 2 and rows[-1] == f"#end,{lines}"
    assert any(row.startswith("work,") and row.endswith(",,    del x") for row in rows)


def test_format_override_and_bad_extension(prof, tmp_path):
    prof.save(tmp_path / "p.data", format="json")
    assert text_of(load(tmp_path / "p.data")) == text_of(prof)
    with pytest.raises(ValueError, match=r"\.json or \.csv"):
        prof.save(tmp_path / "p.txt")
    with pytest.raises(ValueError, match="format="):
        prof.save(tmp_path / "p.json", format="xml")


def test_load_rejects_other_files(tmp_path):
    (tmp_path / "other.json").write_text('{"hello": 1}')
    with pytest.raises(ValueError, match="not a pytorch_memlab line profile"):
        load(tmp_path / "other.json")
    (tmp_path / "newer.json").write_text(json.dumps(
        {"format": "pytorch_memlab.line_profile", "schema_version": SCHEMA_VERSION + 1,
         "functions": []}))
    with pytest.raises(ValueError, match="newer"):
        load(tmp_path / "newer.json")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(ValueError, match="not JSON"):
        load(tmp_path / "broken.json")
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ValueError, match="not a pytorch_memlab CSV profile"):
        load(tmp_path / "other.csv")


def _document(**changes):
    """A valid one-function, one-line document with ``changes`` applied."""
    line = {"lineno": 3, "code": "x = 1", "count": 1, "net_growth": 0,
            "active_bytes.all.peak": 8, "raised": None}
    function = {"qualname": "f", "filename": "f.py", "first_line": 2, "device": "cpu",
                "columns": ["active_bytes.all.peak"], "lines": [line]}
    doc = {"format": "pytorch_memlab.line_profile", "schema_version": 1,
           "columns": ["active_bytes.all.peak"], "functions": [function], "timeline": []}
    for where, value in changes.items():
        target = {"doc": doc, "function": function, "line": line}[where.split("__")[0]]
        key = where.split("__")[1]
        if value is KeyError:
            del target[key]
        else:
            target[key] = value
    return json.dumps(doc)


@pytest.mark.parametrize("changes, message", [
    ({"doc__functions": None}, r"the document: 'functions' is null; expected a list"),
    ({"function__lines": "x"}, r"functions\[0\]: 'lines' is a str .*expected a list"),
    ({"function__first_line": "2"}, r"functions\[0\]: 'first_line' is a str"),
    ({"line__count": KeyError}, r"functions\[0\]\.lines\[0\]: 'count' is missing"),
    ({"line__code": KeyError}, r"functions\[0\]\.lines\[0\]: 'code' is missing"),
    ({"line__active_bytes.all.peak": "8"},
     r"lines\[0\]: 'active_bytes.all.peak' is a str .*expected an integer or null"),
    ({"doc__timeline": [{"call": 1}]}, r"timeline\[0\]: 'device' is missing"),
])
def test_load_names_file_and_field_of_a_bad_document(tmp_path, changes, message):
    path = tmp_path / "bad.json"
    path.write_text(_document(**changes))
    with pytest.raises(ValueError, match=message) as info:
        load(path)
    assert str(info.value).startswith(str(path))
    assert load(_write(tmp_path / "good.json", _document())).stats()[0]["lines"][0]["count"] == 1


def _write(path, text):
    path.write_text(text)
    return path


def test_load_of_binary_garbage_names_the_file(tmp_path):
    path = tmp_path / "garbage.json"
    path.write_bytes(b"\xff\xfe\x00\x81 not text")
    with pytest.raises(ValueError, match="is not a text file") as info:
        load(path)
    assert str(path) in str(info.value)


def test_load_of_a_bad_csv_number_names_file_and_row(prof, tmp_path):
    prof.save(tmp_path / "p.csv")
    rows = (tmp_path / "p.csv").read_text().splitlines()
    cells = rows[2].split(",")
    cells[5] = "many"                    # the count of the second line
    rows[2] = ",".join(cells)
    (tmp_path / "p.csv").write_text("\n".join(rows) + "\n")
    with pytest.raises(ValueError, match=r"p\.csv, row 3: count is 'many'; expected an integer"):
        load(tmp_path / "p.csv")
    rows[2] = "f,f.py"
    (tmp_path / "p.csv").write_text("\n".join(rows) + "\n")
    with pytest.raises(ValueError, match=r"p\.csv, row 3: 2 cells"):
        load(tmp_path / "p.csv")


@pytest.mark.parametrize("drop", ["lineno", "count"])
def test_load_of_a_csv_header_without_lineno_or_count_names_the_file(prof, tmp_path, drop):
    # The header keeps its first and last cells but lacks a number column: one
    # ValueError naming the file and the header it expects, not an IndexError.
    prof.save(tmp_path / "p.csv")
    rows = [line.split(",") for line in (tmp_path / "p.csv").read_text().splitlines()]
    at = rows[0].index(drop)
    text = "\n".join(",".join(r[:at] + r[at + 1:]) for r in rows) + "\n"
    (tmp_path / "cut.csv").write_text(text)
    with pytest.raises(ValueError, match=r"cut\.csv is not a pytorch_memlab CSV profile: "
                                         r"the header should be .*lineno, count, net_growth"):
        load(tmp_path / "cut.csv")


def test_load_of_a_deeply_nested_json_names_the_file(tmp_path):
    path = _write(tmp_path / "deep.json", "[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match=r"deep\.json is not JSON \(nested too deeply"):
        load(path)


def test_resaving_a_loaded_profile(prof, tmp_path):
    prof.save(tmp_path / "a.json")
    load(tmp_path / "a.json").save(tmp_path / "b.csv")
    load(tmp_path / "b.csv").save(tmp_path / "c.json")
    assert text_of(load(tmp_path / "c.json")) == text_of(prof)


def test_to_dataframe(prof, tmp_path):
    pandas = pytest.importorskip("pandas")
    live = prof.to_dataframe()
    prof.save(tmp_path / "p.json")
    prof.save(tmp_path / "p.csv")
    pandas.testing.assert_frame_equal(live, load(tmp_path / "p.json").to_dataframe())
    pandas.testing.assert_frame_equal(live, load(tmp_path / "p.csv").to_dataframe())
    per_call = ["calls", "growth_per_call"] + [f"{part}.{key}" for part in
                                               ("first_call", "later_calls")
                                               for key in ("count", "net_growth", *COLUMNS)]
    assert list(live.columns) == ["qualname", "filename", "first_line", "device", "lineno",
                                  "count", "net_growth", *COLUMNS, *per_call, *PEAK, *START, *KINDS,
                                  "raised",
                                  "code"]
    assert str(live["net_growth"].dtype) == "Int64"
    row = live[(live.qualname == "work") & live.code.str.contains("del x")].iloc[0]
    assert row["net_growth"] == -2 * MiB and row["count"] == 2
    assert live[live.qualname == "never_called"]["net_growth"].isna().all()
    one = prof.to_dataframe(helper, columns="active_bytes.all.peak")
    assert set(one.qualname) == {"helper"} and "reserved_bytes.all.peak" not in one.columns


def test_to_dataframe_without_pandas(prof, tmp_path, monkeypatch):
    prof.save(tmp_path / "p.json")
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match="needs pandas.*pip install pandas"):
        prof.to_dataframe()
    with pytest.raises(ImportError, match="needs pandas"):
        load(tmp_path / "p.json").to_dataframe()


def test_profile_every_timeline_and_save(tmp_path, capsys):
    @profile_every(2, device="cpu")
    def step(n):
        keep.append(torch.empty(n))
        return len(keep)

    keep = []
    for i in range(5):
        step(262144)
    profiler = step.line_profiler
    timeline = profiler.timeline
    assert [row["call"] for row in timeline] == [1, 2, 3, 4, 5]
    assert {row["device"] for row in timeline} == {"cpu"}
    # each call keeps 1 MiB more alive
    growth = [b["active_bytes"] - a["active_bytes"] for a, b in zip(timeline, timeline[1:])]
    assert growth == [MiB] * 4
    assert all(row["reserved_bytes"] == row["active_bytes"] for row in timeline)   # CPU caches nothing

    # 5 calls, tables after 2 and 4: the 5th call's figures are pending
    profiler.save(tmp_path / "pending.json")
    saved = load(tmp_path / "pending.json")
    assert saved.timeline == timeline
    line = code_line(saved.stats()[0], "torch.empty")
    assert line["count"] == 1
    step(262144)            # the 6th call prints the table of calls 5 and 6
    capsys.readouterr()
    profiler.save(tmp_path / "printed.json")   # nothing ran since: the printed table
    line = code_line(load(tmp_path / "printed.json").stats()[0], "torch.empty")
    assert line["count"] == 2
    profiler.clear()
    assert profiler.timeline == []


def test_add_code_registers_before_the_function_exists(tmp_path):
    source = textwrap.dedent("""\
        import torch

        def later(n):
            t = torch.empty(n)
            return t
        """)
    path = tmp_path / "later_mod.py"
    path.write_text(source)
    code = compile(source, str(path), "exec")
    inner = next(c for c in code.co_consts if hasattr(c, "co_name") and c.co_name == "later")
    profiler = LineProfiler(device="cpu")
    profiler.add_code(inner)
    profiler.add_code(inner)            # twice: one entry
    namespace = {}
    with profiler:
        exec(code, namespace)
        namespace["later"](262144)
    (record,) = profiler.stats()
    assert record["qualname"] == "later"
    assert [line["count"] for line in record["lines"]] == [0, 1, 1]
    assert profiler.functions == []
    assert profiler.stats(namespace["later"]) == [record]
    with pytest.raises(TypeError):
        profiler.add_code(lambda: None)


def test_load_is_exported_lazily():
    code = "import pytorch_memlab, sys; print('load' in dir(pytorch_memlab), pytorch_memlab.load)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("True <function load")
