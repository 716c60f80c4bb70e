"""LineProfiler's results: columns, stats() data, exceptions and hooks, and
the printed output (real CPU tensors through the counting allocator)."""
import inspect

import pytest
from helpers import MiB, line_figures, run_script

torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")

from pytorch_memlab import LineProfiler  # noqa: E402
from test_line_profiler import (MONITORING, PEAK, assert_no_hook, grow_then_free, one_mib,  # noqa: E402
                                outer_calls, prof_factory)


# ---- columns ----------------------------------------------------------------------

def test_bad_column_lists_valid_ones():
    with pytest.raises(ValueError) as info:
        LineProfiler(one_mib, device="cpu", columns=["active_bytes.all.peek"])
    msg = str(info.value)
    assert "'active_bytes.all.peek'" in msg
    assert "Did you mean 'active_bytes.all.peak'?" in msg
    for field in ("active_bytes.all.current", "reserved_bytes.all.freed",
                  "allocation.all.allocated"):
        assert field in msg


def test_display_needs_recorded_column(prof_factory):
    prof = prof_factory(one_mib)
    with pytest.raises(ValueError, match="was not recorded"):
        prof.display(columns=["allocation.all.current"])
    assert prof.stats(columns=PEAK)[0]["columns"] == [PEAK]


def test_columns_accept_one_string_and_tuples(prof_factory):
    assert prof_factory(columns=PEAK).columns == (PEAK,)
    assert prof_factory(columns=(PEAK, "active_bytes.all.current")).columns == (
        PEAK, "active_bytes.all.current")


# ---- stats() data -----------------------------------------------------------------

def test_stats_shape(prof_factory):
    prof = prof_factory(grow_then_free, outer_calls)
    with prof:
        grow_then_free()
    records = prof.stats()
    assert [r["qualname"] for r in records] == ["grow_then_free", "outer_calls"]
    record = records[0]
    # a function that ran keeps the curve of one call
    assert set(record) == {"qualname", "filename", "first_line", "device", "columns", "lines",
                           "calls", "start_level", "curve", "curve_of", "peak"}
    assert record["filename"] == grow_then_free.__code__.co_filename   # test_line_profiler.py
    assert record["first_line"] == grow_then_free.__code__.co_firstlineno
    assert record["device"] == "cpu"
    assert record["columns"] == [PEAK, "reserved_bytes.all.peak"]
    source, start = inspect.getsourcelines(grow_then_free)
    assert [line["lineno"] for line in record["lines"]] == list(range(start, start + len(source)))
    assert [line["code"] for line in record["lines"]] == [s.rstrip("\n") for s in source]
    for line in record["lines"]:
        assert set(line) == {"lineno", "code", "count", "net_growth", PEAK,
                             "reserved_bytes.all.peak", "raised", "first_call", "later_calls",
                             "held_at_peak"}
    header = record["lines"][0]                  # the def line never runs
    assert header["count"] == 0 and header["net_growth"] is None and header[PEAK] is None
    assert all(line["count"] == 0 for line in records[1]["lines"])   # never called
    assert prof.stats("outer_calls")[0]["qualname"] == "outer_calls"
    with pytest.raises(ValueError, match="not a function of this profiler"):
        prof.stats(one_mib)


def test_clear(prof_factory):
    prof = prof_factory(one_mib)
    with prof:
        one_mib()
    prof.clear()
    assert all(line["count"] == 0 for line in prof.stats()[0]["lines"])
    assert "No profiled function ran" in repr(prof.display())


# ---- exceptions and hooks ---------------------------------------------------------------

def raises_midway():
    x = torch.empty(262144)  # before
    raise KeyError("boom")  # raise here


def test_exception_in_context_manager_commits_and_leaves_no_hook(prof_factory):
    prof = prof_factory(raises_midway)
    with pytest.raises(KeyError):
        with prof:
            if MONITORING:
                assert prof._tracers.tracers[0].tool_id >= 0
            raises_midway()
    assert_no_hook(prof)
    assert line_figures(prof, raises_midway, "# before")["net_growth"] == MiB
    assert line_figures(prof, raises_midway, "# raise here")["raised"] == "KeyError"
    assert "<-- KeyError raised here" in repr(prof.display())


def test_enable_disable_no_hook(prof_factory):
    prof = prof_factory(one_mib)
    prof.enable()
    assert prof.enabled
    one_mib()
    prof.disable()
    assert_no_hook(prof)
    assert line_figures(prof, one_mib, "# 1 MiB")["count"] == 1


# ---- output --------------------------------------------------------------------------

def test_html_has_bars_and_no_script(prof_factory):
    prof = prof_factory(grow_then_free)
    with prof:
        grow_then_free()
    page = prof.display()._repr_html_()
    assert page.count("<table") == 1
    assert "linear-gradient" in page and "<script" not in page
    assert "grow_then_free" in page and "del x  # free one" in page


def test_text_layout_in_fresh_process(tmp_path):
    out, err = run_script(tmp_path, """\
        import torch
        from pytorch_memlab import LineProfiler

        def work():
            x = torch.empty(262144)
            y = torch.empty(524288)
            del x
            return y

        with LineProfiler(work, device="cpu") as prof:
            work()
        prof.print_stats()
        """)
    assert err == ""
    lines = out.splitlines()
    assert lines[0] == "## work"
    assert lines[1] == ""
    assert "cpu" in lines[2] and set(lines[2]) <= set("─ cpu")
    assert lines[3].split() == ["active_bytes", "reserved_bytes", "held", "at", "active_bytes",
                                "count", "line", "code"]
    assert lines[4].split() == ["all.peak", "all.peak", "peak", "net", "growth"]
    body = [line.split() for line in lines[5:]]
    assert body[0] == ["4", "def", "work():"]                     # never runs: blanks
    assert body[1][:6] == ["1.00M", "1.00M", "1.00M", "1.00M", "1", "5"]
    assert body[2][:6] == ["3.00M", "3.00M", "2.00M", "2.00M", "1", "6"]
    assert body[3][:6] == ["3.00M", "3.00M", "0.00B", "-1.00M", "1", "7"]
    assert body[4][:6] == ["2.00M", "2.00M", "0.00B", "0.00B", "1", "8"]
    assert lines[11] == "peak 3.00M on line 6 (call 1): 2.00M line 6, 1.00M line 5"
    code_at = lines[3].index("code")
    assert lines[7][code_at:] == "    y = torch.empty(524288)"


def test_default_device_without_cuda_notes_once(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("the note is for machines without CUDA")
    out, err = run_script(tmp_path, """\
        import torch
        from pytorch_memlab import LineProfiler

        def work():
            return torch.empty(262144)

        for _ in range(2):
            prof = LineProfiler(work)
            with prof:
                work()
        print(prof.devices)
        """)
    assert err.count("\n") == 1 and "CUDA is not available" in err and "device='cpu'" in err
    assert out.strip() == "['cpu']"


def test_explicit_cuda_without_cuda_is_an_error():
    if torch.cuda.is_available():
        pytest.skip("needs a machine without CUDA")
    with pytest.raises(ValueError, match="CUDA is not available"):
        LineProfiler(device="cuda:0")
    assert LineProfiler(device="all").devices == ["cpu"]


def test_device_spellings(prof_factory):
    for spec in ("cpu", torch.device("cpu"), ["cpu", "cpu"]):
        assert prof_factory(device=spec).devices == ["cpu"]
    with pytest.raises(ValueError):
        prof_factory(device="tpu")
