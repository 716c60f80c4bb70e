"""The memory curve of one call: recorded by the C tracer, carried
into stats(), the JSON file and load(), printed by `view --curve`; plus the
tables' hide_unrun and their spacing.

The tracer tests use the manual C source (exact readings set from Python);
the profiler tests the real CPU allocator with tensors of known sizes."""
import json
import re
import subprocess
import sys

import pytest
from helpers import MiB, line_of

from pytorch_memlab import _testsource, _tracer

ts = _testsource


def tracer(*functions, curve="peak"):
    t = _tracer.Tracer(ts.manual_source, 0, ["bytes.peak", "bytes.current"],
                       growth_field="bytes.current", curve=curve,
                       curve_columns=("bytes.current", "bytes.peak"))
    for f in functions:
        t.add_code(f.__code__)
    return t


def traced(call, *functions, curve="peak"):
    """A tracer of ``functions`` (curve=``curve``) that was on while call()
    ran, the manual source reset first."""
    ts.manual_reset()
    t = tracer(*functions, curve=curve)
    t.enable()
    try:
        call()
    finally:
        t.disable()
    return t


def curves(t):
    return {code.co_name: found for code, found in t.curves()}


# ---- the tracer, with the manual source ---------------------------------------------

def five_levels():
    ts.manual_alloc(100)
    ts.manual_alloc(300)
    ts.manual_alloc(-100)
    ts.manual_alloc(200); ts.manual_alloc(-250)
    return 0


def test_five_line_events_equal_their_levels_event_for_event():
    t = traced(five_levels, five_levels)
    points, merged, call, calls, events = curves(t)["five_levels"]
    first = line_of(five_levels, "manual_alloc(100)")
    # (line, active at its end, reserved at its end, peak inside it, callee):
    # the manual source's peak is reset at each reading to the level then
    assert points == [
        (first, 100, 100, 100, None),
        (first + 1, 400, 400, 400, None),
        (first + 2, 300, 300, 400, None),
        (first + 3, 250, 250, 500, None),
        (first + 4, 250, 250, 250, None),
    ]
    assert (merged, call, calls, events) == (1, 1, 1, 5)


def inner(n):
    ts.manual_alloc(n)
    ts.manual_alloc(-n)


def outer(n):
    ts.manual_alloc(10)
    inner(n)
    ts.manual_alloc(-10)


def test_a_nested_call_is_a_span_of_its_lines_inside_the_caller():
    t = traced(lambda: outer(5), outer, inner)
    found = curves(t)
    points = found["outer"][0]
    top = line_of(outer, "manual_alloc(10)")
    low = line_of(inner, "manual_alloc(n)")
    assert [(p[0], p[4].co_name if p[4] else None) for p in points] == [
        (top, None), (low, "inner"), (low + 1, "inner"), (top + 1, None), (top + 2, None)]
    assert [p[1] for p in points] == [10, 15, 10, 10, 0]
    # the caller's line holds its callee's peak
    assert points[3][3] == 15
    # and the callee keeps its own curve, with no callee marks
    assert [(p[0], p[1], p[4]) for p in found["inner"][0]] == [(low, 15, None), (low + 1, 10, None)]


@pytest.mark.parametrize("choice, expected_call", [("peak", 2), ("first", 1), ("last", 3),
                                                   (2, 2), (3, 3)],
                         ids=["peak", "first", "last", "n2", "n3"])
def test_which_call_is_kept(choice, expected_call):
    t = traced(lambda: [inner(n) for n in (10, 30, 20)], inner, curve=choice)
    points, _, call, calls, _ = curves(t)["inner"]
    assert (call, calls) == (expected_call, 3)
    assert points[0][1] == (10, 30, 20)[expected_call - 1]


def test_a_higher_peak_replaces_the_kept_call_and_a_lower_does_not():
    ts.manual_reset()
    t = tracer(inner)
    t.enable()
    inner(30)
    assert curves(t)["inner"][0][0][1] == 30
    inner(50)
    inner(40)
    t.disable()
    assert curves(t)["inner"][2] == 2


def test_a_recursive_call_is_one_outermost_call():
    def rec(k):
        ts.manual_alloc(1)
        if k:
            rec(k - 1)
        ts.manual_alloc(-1)

    t = traced(lambda: rec(3), rec)
    points, _, call, calls, events = curves(t)["rec"]
    assert (call, calls, events) == (1, 1, len(points)) and events == 4 * 3 + 3
    assert max(p[1] for p in points) == 4


def spiky(n, at):
    for i in range(n):
        if i == at:
            ts.manual_alloc(7777); ts.manual_alloc(-7777)
    return 0


def test_a_300000_event_call_keeps_at_most_the_limit_and_its_true_maximum():
    t = traced(lambda: spiky(150_000, 91_234), spiky)
    points, merged, _, _, events = curves(t)["spiky"]
    # for + if per iteration, the spike, the loop's end, the return
    assert events == 2 * 150_000 + 3
    assert len(points) <= _tracer.CURVE_MAX_POINTS == 100_000
    assert merged == 4 and len(points) == -(-events // merged)
    assert max(p[3] for p in points) == 7777
    assert max(p[1] for p in points) == 0   # each line ends where it began


def test_curve_none_records_nothing():
    t = traced(five_levels, five_levels, curve=None)
    assert t.curves() == []


@pytest.mark.parametrize("bad", ["biggest", 0, -1, 1.5, True],
                         ids=["word", "zero", "neg", "float", "bool"])
def test_a_bad_choice_is_refused_naming_curve(bad):
    with pytest.raises(ValueError, match="curve must be"):
        tracer(five_levels, curve=bad)


def test_curve_columns_must_be_columns():
    with pytest.raises(ValueError, match="curve_columns.*bytes.freed"):
        _tracer.Tracer(ts.manual_source, 0, ["bytes.peak"], growth_field="bytes.current",
                       curve="peak", curve_columns=("bytes.freed", None))


def test_clear_forgets_the_curves():
    t = traced(five_levels, five_levels)
    t.clear()
    assert t.curves() == []


# ---- the profiler, with CPU tensors -------------------------------------------------

torch_only = pytest.mark.skipif("torch" not in sys.modules and
                                __import__("importlib").util.find_spec("torch") is None,
                                reason="needs torch")


def five_tensors():
    import torch
    a = torch.empty(MiB // 4)
    b = torch.empty(MiB // 2)
    del a
    c = torch.ones(MiB)
    return b, c


def nested_caller():
    import torch
    x = torch.empty(MiB // 4)
    y = nested_callee()
    del x
    return y


def nested_callee():
    import torch
    z = torch.empty(MiB // 2)
    return z


@pytest.fixture
def cpu():
    pytest.importorskip("torch")
    pytest.importorskip("pytorch_memlab._torchshim")
    from pytorch_memlab import LineProfiler
    from pytorch_memlab.sources import native
    return LineProfiler, native


def active_now(native):
    from pytorch_memlab import sources
    return native.sample("cpu", 0)[sources.source_fields("cpu").index("active_bytes.all.current")]


def test_cpu_five_events_equal_the_tensor_sizes(cpu):
    LineProfiler, native = cpu
    prof = LineProfiler(five_tensors, device="cpu")
    with prof:
        base = active_now(native)
        result = five_tensors()
    del result
    record = prof.stats()[0]
    first = line_of(five_tensors, "a = torch.empty")
    expected = [(first, 1 * MiB, 1 * MiB), (first + 1, 3 * MiB, 3 * MiB),
                (first + 2, 2 * MiB, 3 * MiB), (first + 3, 6 * MiB, 6 * MiB),
                (first + 4, 6 * MiB, 6 * MiB)]
    # the `import torch` line first: nothing allocated
    assert record["curve"][0] == [first - 1, base, base, base]
    assert [(p[0], p[1] - base, p[3] - base) for p in record["curve"][1:]] == expected
    # the CPU allocator caches nothing: reserved is active
    assert all(p[2] == p[1] for p in record["curve"])
    assert record["curve_of"] == {"choice": "peak", "call": 1, "calls": 1, "line_events": 6,
                                  "merged": 1}
    # the curve's peak is the table's
    assert max(p[3] for p in record["curve"]) == max(
        line["active_bytes.all.peak"] or 0 for line in record["lines"])


def test_cpu_nested_span_names_the_callee(cpu, tmp_path):
    LineProfiler, _ = cpu
    prof = LineProfiler(nested_caller, nested_callee, device="cpu",
                        columns=["allocation.all.current"])
    with prof:
        nested_caller()
    by_name = {r["qualname"]: r for r in prof.stats()}
    points = by_name["nested_caller"]["curve"]
    callee = [p for p in points if len(p) == 5]
    low = line_of(nested_callee, "z = torch.empty")
    assert [(p[0], p[4]) for p in callee] == [(low - 1, "nested_callee"), (low, "nested_callee"),
                                              (low + 1, "nested_callee")]
    assert callee[1][1] - points[1][1] == 2 * MiB   # z on top of x
    # the curve reads its own fields although the table shows another column
    assert by_name["nested_caller"]["columns"] == ["allocation.all.current"]

    # JSON keeps it, load() reads it back; the CSV does not carry it
    from pytorch_memlab import load
    prof.save(tmp_path / "p.json")
    data = json.loads((tmp_path / "p.json").read_text())
    assert data["schema_version"] == 7
    loaded = {r["qualname"]: r for r in load(tmp_path / "p.json").stats()}
    assert loaded["nested_caller"]["curve"] == points
    assert loaded["nested_caller"]["curve_of"] == by_name["nested_caller"]["curve_of"]
    prof.save(tmp_path / "p.csv")
    header = (tmp_path / "p.csv").read_text().splitlines()[0]
    assert "lineno" in header and "curve" not in header
    assert all("curve" not in r for r in load(tmp_path / "p.csv").stats())

    # a file of schema version 2 (no curve) still loads, with no curve
    for record in data["functions"]:
        record.pop("curve")
        record.pop("curve_of")
    data["schema_version"] = 2
    (tmp_path / "old.json").write_text(json.dumps(data))
    assert all(r.get("curve") is None for r in load(tmp_path / "old.json").stats())


def test_cpu_curve_none_records_nothing(cpu):
    LineProfiler, _ = cpu
    prof = LineProfiler(five_tensors, device="cpu", curve=None)
    with prof:
        five_tensors()
    assert "curve" not in prof.stats()[0]


def test_profiler_refuses_a_bad_curve_naming_it(cpu):
    LineProfiler, _ = cpu
    with pytest.raises(ValueError, match=r"curve='biggest': expected \"peak\""):
        LineProfiler(five_tensors, device="cpu", curve="biggest")


def documented(x):
    """A docstring
    of three lines.
    """
    if x:
        y = x + 1
    else:
        y = x - 1
    return y


def test_hide_unrun_leaves_out_lines_that_never_ran(cpu):
    LineProfiler, _ = cpu
    prof = LineProfiler(documented, device="cpu")
    with prof:
        documented(1)
    shown = repr(prof.display(hide_unrun=True))
    full = repr(prof.display())
    for text in ("A docstring", "y = x - 1", "def documented"):
        assert text in full and text not in shown
    for text in ("y = x + 1", "return y"):
        assert text in shown
    html = prof.display(hide_unrun=True)._repr_html_()
    assert "A docstring" not in html and "y = x + 1" in html
    from pytorch_memlab.html_report import render_report
    page = render_report(prof.to_profile(), hide_unrun=True)
    # def, the docstring's three lines, `else:` and the branch not taken
    assert "A docstring" not in page and "6 lines that never ran not shown" in page


def test_one_blank_line_between_text_tables(cpu):
    LineProfiler, _ = cpu
    prof = LineProfiler(five_tensors, documented, device="cpu")
    with prof:
        five_tensors()
        documented(0)
    text = repr(prof.display())
    before, after = text.split("## documented")
    # the table, its peak's breakdown, one blank line
    assert re.search(r"return b, c\n\npeak [^\n]+\n\n$", before)
    assert not before.endswith("\n\n\n")


def test_view_hide_unrun_leaves_out_lines_that_never_ran(cpu, tmp_path):
    LineProfiler, _ = cpu
    prof = LineProfiler(documented, device="cpu")
    with prof:
        documented(1)
    prof.save(tmp_path / "p.json")

    def view(*flags):
        out = subprocess.run([sys.executable, "-m", "pytorch_memlab", "view", *flags,
                              str(tmp_path / "p.json")], capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout

    full, shown = view(), view("--hide-unrun")
    for text in ("A docstring", "y = x - 1", "def documented"):
        assert text in full and text not in shown
    for text in ("y = x + 1", "return y"):
        assert text in shown


def test_view_curve_prints_at_most_60_rows(cpu, tmp_path):
    LineProfiler, _ = cpu

    def many(n):
        import torch
        for i in range(n):
            t = torch.empty(256 * (i % 7))
        return 0

    prof = LineProfiler(many, device="cpu")
    with prof:
        many(500)
    prof.save(tmp_path / "p.json")
    out = subprocess.run([sys.executable, "-m", "pytorch_memlab", "view", "--curve",
                          str(tmp_path / "p.json")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].startswith("## test_view_curve_prints_at_most_60_rows.<locals>.many  (cpu: "
                               "call 1 of 1, the one that reached the peak; 1,003 line events")
    rows = [line for line in lines[3:] if line.strip()]
    assert len(rows) == 60
    assert sum("<- peak" in row for row in rows) == 1
    # the rows cover the events in order, 1 to the last
    assert rows[0].split()[0].startswith("1-") and rows[-1].split()[0].endswith("-1003")
