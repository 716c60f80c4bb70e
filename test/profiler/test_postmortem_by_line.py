"""The out-of-memory post-mortem's "live at the failure, by the line that
allocated it": real CPU tensors through the counting allocator, a
real allocation failure (2**62 bytes), exact bytes.  The parts must add up to
the allocated bytes the post-mortem reports, read at the same moment."""
import json
import threading

import pytest
from helpers import MiB, by_line, line_of

torch = pytest.importorskip("torch")

from pytorch_memlab import LineProfiler, load  # noqa: E402
from pytorch_memlab.line_profiler import postmortem  # noqa: E402
from pytorch_memlab.line_profiler.timeline import read_totals  # noqa: E402
from pytorch_memlab.reports.postmortem_text import format_postmortem  # noqa: E402

TOO_MUCH = 1 << 62


def u8(n):
    return torch.empty(n, dtype=torch.uint8)


def two_lines_then_fail():
    a = u8(4 * MiB)                  # A
    b = u8(2 * MiB)                  # B
    c = u8(TOO_MUCH)                 # fails
    return a, b, c


def caller(hold):
    kept = u8(MiB) if hold else None
    return kept, two_lines_then_fail()


def fail_under(prof, run):
    """Run ``run()`` under ``prof``; the allocator's active bytes read in the handler."""
    try:
        with prof:
            run()
    except RuntimeError as exc:
        assert postmortem.is_oom(exc)
        return read_totals("cpu", 0)[0]
    raise AssertionError("no allocation failure")


def test_the_parts_are_before_the_call_and_each_line():
    befores = []
    for hold in (False, True):
        prof = LineProfiler(two_lines_then_fail, device="cpu")
        active = fail_under(prof, lambda: caller(hold))
        pm = prof.stats()[0]["postmortem"]
        assert pm["allocated_bytes"] == active
        live, lines = by_line(pm)
        assert lines == {line_of(two_lines_then_fail, "# A"): 4 * MiB,
                         line_of(two_lines_then_fail, "# B"): 2 * MiB}
        assert live["call"] == 1
        assert (live["other_threads"], live["after_call"]) == (0, 0)
        assert live["before_call"] == active - 6 * MiB
        befores.append(live["before_call"])
    assert befores[1] - befores[0] == MiB          # the caller's tensor
    a, b = line_of(two_lines_then_fail, "# A"), line_of(two_lines_then_fail, "# B")
    before = f"{befores[1] / MiB:.2f}M before the call"
    items = sorted([(f"4.00M line {a}", 4 * MiB), (f"2.00M line {b}", 2 * MiB),
                    (before, befores[1])], key=lambda p: -p[1])
    text = repr(prof.display())
    assert ("\n  live at the failure (call 1), by the line that allocated it:\n    "
            + ", ".join(i[0] for i in items) + "\n  largest live tensors on cpu:\n") in text


def fails_on_the_second_call(keep):
    a = u8(4 * MiB)                  # kept across calls
    keep.append(a)
    if len(keep) == 2:
        b = u8(2 * MiB)              # second call only
        return b, u8(TOO_MUCH)
    return None


def test_it_is_the_failing_call_and_earlier_calls_are_before_it():
    keep = []
    prof = LineProfiler(fails_on_the_second_call, device="cpu")
    fail_under(prof, lambda: [fails_on_the_second_call(keep) for _ in range(2)])
    live, lines = by_line(prof.stats()[0]["postmortem"])
    assert live["call"] == 2
    assert lines == {line_of(fails_on_the_second_call, "# kept"): 4 * MiB,
                     line_of(fails_on_the_second_call, "# second call only"): 2 * MiB}
    assert live["before_call"] >= 4 * MiB            # the first call's tensor
    del keep


def helper_allocates():
    return u8(3 * MiB)


def inner_fails():
    t = helper_allocates()           # an unprofiled callee
    return t, u8(TOO_MUCH)


def outer_calls():
    a = u8(MiB)                      # outer's own
    return a, inner_fails()


def test_nested_the_innermost_function_and_its_callers_bytes_before():
    prof = LineProfiler(outer_calls, inner_fails, device="cpu")
    active = fail_under(prof, outer_calls)
    records = {r["qualname"]: r for r in prof.stats()}
    assert "postmortem" not in records["outer_calls"]
    live, lines = by_line(records["inner_fails"]["postmortem"])
    assert lines == {line_of(inner_fails, "# an unprofiled callee"): 3 * MiB}
    assert live["before_call"] == active - 3 * MiB    # outer's MiB among them


def test_bytes_made_after_the_call_are_named_so():
    def reraises_the_same():
        try:
            two_lines_then_fail()
        except RuntimeError:
            late = u8(3 * MiB)       # made after the failing call ended
            reraises_the_same.late = late
            raise

    prof = LineProfiler(two_lines_then_fail, device="cpu")
    fail_under(prof, reraises_the_same)
    live, lines = by_line(prof.stats()[0]["postmortem"])
    assert live["after_call"] == 3 * MiB
    assert sum(lines.values()) == 6 * MiB and live["other_threads"] == 0
    assert "3.00M after the call" in repr(prof.display())
    del reraises_the_same.late


def fails_while_another_thread_holds(entered, made):
    a = u8(MiB)                      # own
    entered.set()
    made.wait(30)
    return a, u8(TOO_MUCH)


def test_another_threads_bytes_are_other_threads():
    entered, made = threading.Event(), threading.Event()
    held_by_thread = []

    def other():
        entered.wait(30)             # during the call
        held_by_thread.append(u8(8 * MiB))
        made.set()

    worker = threading.Thread(target=other)
    worker.start()
    prof = LineProfiler(fails_while_another_thread_holds, device="cpu")
    fail_under(prof, lambda: fails_while_another_thread_holds(entered, made))
    worker.join()
    live, lines = by_line(prof.stats()[0]["postmortem"])
    assert live["other_threads"] == 8 * MiB
    assert lines == {line_of(fails_while_another_thread_holds, "# own"): MiB}
    assert "8.00M other threads" in repr(prof.display())
    del held_by_thread


def test_saved_and_loaded_and_older_post_mortems_print_without_it(tmp_path):
    prof = LineProfiler(two_lines_then_fail, device="cpu")
    fail_under(prof, lambda: caller(True))
    prof.save(tmp_path / "oom.json")
    saved = load(tmp_path / "oom.json")
    assert saved.stats()[0]["postmortem"] == prof.stats()[0]["postmortem"]
    assert repr(saved) == repr(prof.display())
    doc = json.loads((tmp_path / "oom.json").read_text())
    assert doc["schema_version"] == 7              # live_by_line is new in version 4
    doc["schema_version"] = 3                      # as a version 3 writer left it
    for f in doc["functions"]:
        del f["postmortem"]["live_by_line"], f["peak"]
        for line in f["lines"]:
            del line["held_at_peak"]
    (tmp_path / "old.json").write_text(json.dumps(doc))
    old = load(tmp_path / "old.json")
    older = old.stats()[0]["postmortem"]
    assert "live_by_line" not in older
    assert older == {k: v for k, v in prof.stats()[0]["postmortem"].items()
                     if k != "live_by_line"}
    text = repr(old)
    assert "Out of memory (RuntimeError) in two_lines_then_fail on cpu" in text
    assert "live at the failure" not in text and "largest live tensors on cpu:" in text


def test_at_most_five_items_the_rest_summed():
    pm = {"error": "RuntimeError", "device": "cpu", "when": "after the error",
          "requested_bytes": None, "allocated_bytes": 28 * MiB, "reserved_bytes": None,
          "free_bytes": None, "total_bytes": None, "fragmentation_bytes": None,
          "largest_free_block_bytes": None, "tensors": [], "hints": [],
          "live_by_line": {"bytes": 28 * MiB, "call": 3, "before_call": 7 * MiB,
                           "other_threads": 0, "after_call": 0,
                           "lines": [{"lineno": n, "bytes": (n - 9) * MiB}
                                     for n in range(10, 16)]}}
    assert ("  live at the failure (call 3), by the line that allocated it:\n"
            "    7.00M before the call, 6.00M line 15, 5.00M line 14, 4.00M line 13, "
            "6.00M 3 more\n") in format_postmortem(pm, "f")


def test_no_breakdown_where_it_would_not_add_up(monkeypatch):
    figures = {"when": "after the error", "device": "cpu", "allocated_bytes": 10}
    assert postmortem._live_by_line(lambda d: (10, 1, 4, 0, 0, {5: 6}), figures)["bytes"] == 10
    assert postmortem._live_by_line(lambda d: (11, 1, 5, 0, 0, {5: 6}), figures) is None
    assert postmortem._live_by_line(lambda d: None, figures) is None
    # CUDA's observer read the figures inside the failing allocation; the
    # breakdown, read in the handler, is of that moment only if the
    # allocator's allocated bytes have not moved since (the device run checks
    # this end to end: test_held_at_peak_cuda)
    inside = dict(figures, when="at the failing allocation", device="cuda:0")
    now = {}
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda index: {
        "allocated_bytes.all.current": now["allocated"]})
    now["allocated"] = 10
    assert postmortem._live_by_line(lambda d: (10, 1, 4, 0, 0, {5: 6}), inside)["bytes"] == 10
    now["allocated"] = 8                                         # freed while unwinding
    assert postmortem._live_by_line(lambda d: (8, 1, 2, 0, 0, {5: 6}), inside) is None


def test_the_tracer_method():
    prof = LineProfiler(two_lines_then_fail, device="cpu")
    (tracer,) = prof._tracers.tracers
    code = two_lines_then_fail.__code__
    with pytest.raises(TypeError, match="live_by_line\\(\\) takes a code object, not function"):
        tracer.live_by_line(two_lines_then_fail)
    with pytest.raises(ValueError, match="not registered"):
        tracer.live_by_line(caller.__code__)
    assert tracer.live_by_line(code) is None                  # disabled
    prof.enable()
    try:
        assert tracer.live_by_line(code) is None              # no call yet
        try:
            caller(True)
        except RuntimeError:
            total, call, before, other, after, lines = tracer.live_by_line(code)
            assert total == read_totals("cpu", 0)[0]
            assert (call, other, after) == (1, 0, 0)
            assert lines == {line_of(two_lines_then_fail, "# A"): 4 * MiB,
                             line_of(two_lines_then_fail, "# B"): 2 * MiB}
            assert before == total - 6 * MiB
    finally:
        prof.disable()
    assert tracer.live_by_line(code) is None                  # blocks no longer followed
    prof.enable()
    try:
        assert tracer.live_by_line(code) is None              # no call in this enable()
    finally:
        prof.disable()
