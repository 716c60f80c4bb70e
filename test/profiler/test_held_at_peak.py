"""What was alive at each function's peak, by the line that made it:
real CPU tensors through the counting allocator, exact bytes.  The cases
whose figures are the same in whole CUDA blocks run on the GPU too, where one
is present (marked cuda)."""
import threading

import pytest

from helpers import MiB, checked_peak, line_of

torch = pytest.importorskip("torch")
from pytorch_memlab import LineProfiler, load  # noqa: E402

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]

PEAK = "active_bytes.all.peak"


def breakdown(prof, func):
    """(record["peak"], {lineno: held}) of ``func``, checked: the parts sum to
    the peak, which is the highest peak its table shows."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return checked_peak(prof.stats(func)[0], PEAK)


def u8(n, device="cpu"):
    return torch.empty(n, dtype=torch.uint8, device=device)


@pytest.fixture(params=DEVICES)
def device(request):
    if request.param == "cuda":
        torch.cuda.empty_cache()       # whole blocks of exactly the sizes asked
    return request.param


def issue_case():
    a = u8(4 * MiB)                  # A: kept
    b = u8(16 * MiB)                 # B: a temporary
    del b; c = u8(2 * MiB)           # C: frees B, makes 2 MiB
    return a, c


def caller(hold):
    kept = u8(MiB) if hold else None
    result = issue_case()
    return kept, result


def test_the_issue_case_peak_is_before_call_plus_a_plus_b():
    befores = []
    for hold in (False, True):
        prof = LineProfiler(issue_case, device="cpu")
        with prof:
            caller(hold)
        peak, held = breakdown(prof, issue_case)
        assert peak["lineno"] == line_of(issue_case, "# B") and peak["call"] == 1
        assert held == {line_of(issue_case, "# A"): 4 * MiB, line_of(issue_case, "# B"): 16 * MiB}
        assert peak["other_threads"] == 0
        assert peak["bytes"] - peak["before_call"] == 20 * MiB
        befores.append(peak["before_call"])
    assert befores[1] - befores[0] == MiB        # the caller's tensor: before the call
    text = repr(prof.display())
    b, a = line_of(issue_case, "# B"), line_of(issue_case, "# A")
    before = f"{peak['before_call'] / MiB:.2f}M before the call"
    parts = sorted([("16.00M line %d" % b, 16 * MiB), ("4.00M line %d" % a, 4 * MiB),
                    (before, peak["before_call"])], key=lambda p: -p[1])
    assert (f"\npeak {peak['bytes'] / MiB:.2f}M on line {b} (call 1): "
            + ", ".join(p[0] for p in parts) + "\n") in text


def test_saved_profiles_keep_it_and_old_files_load(tmp_path):
    prof = LineProfiler(issue_case, device="cpu")
    with prof:
        caller(True)
    live = prof.stats()[0]
    for name in ("p.json", "p.csv"):
        prof.save(tmp_path / name)
        saved = load(tmp_path / name).stats()[0]
        assert saved["peak"] == live["peak"]
        assert [l["held_at_peak"] for l in saved["lines"]] == \
            [l["held_at_peak"] for l in live["lines"]]
    import json
    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["schema_version"] == 7
    doc["schema_version"] = 3                     # as a version 3 writer left it
    for f in doc["functions"]:
        del f["peak"]
        for line in f["lines"]:
            del line["held_at_peak"]
    (tmp_path / "old.json").write_text(json.dumps(doc))
    old = load(tmp_path / "old.json")
    record = old.stats()[0]
    assert "peak" not in record and "held_at_peak" not in record["lines"][1]
    assert "held at" not in repr(old) and "\npeak " not in repr(old)


def inner():
    t = u8(8 * MiB)                  # inner temporary
    del t
    return u8(2 * MiB)               # inner kept


def outer():
    a = u8(MiB)                      # outer first
    b = inner()                      # outer calls
    return a, b


def test_a_callees_bytes_count_on_the_callers_calling_line():
    prof = LineProfiler(outer, inner, device="cpu")
    with prof:
        outer()
    peak, held = breakdown(prof, outer)
    assert peak["lineno"] == line_of(outer, "# outer calls")
    assert held == {line_of(outer, "# outer first"): MiB, line_of(outer, "# outer calls"): 8 * MiB}
    inner_peak, inner_held = breakdown(prof, inner)
    assert inner_held == {line_of(inner, "# inner temporary"): 8 * MiB}
    assert inner_peak["bytes"] == peak["bytes"]
    assert inner_peak["before_call"] == peak["before_call"] + MiB   # outer's tensor


def recursive(n, device):
    x = u8(MiB, device)              # each level
    if n:
        return [x] + recursive(n - 1, device)   # recurse
    return [x]


def test_recursion_counts_on_the_outermost_frames_calling_line(device):
    prof = LineProfiler(recursive, device=device)
    with prof:
        recursive(3, device)
    peak, held = breakdown(prof, recursive)
    assert held == {line_of(recursive, "# each level"): MiB,
                    line_of(recursive, "# recurse"): 3 * MiB}


def generator(device):
    a = u8(2 * MiB, device)          # before the first yield
    yield 1
    b = u8(8 * MiB, device)          # resumed
    del b
    yield a


def test_a_generator_call_spans_its_yields(device):
    prof = LineProfiler(generator, device=device)
    with prof:
        assert list(generator(device))[0] == 1
    peak, held = breakdown(prof, generator)
    # what it made before the yield is its own line's, not "before the call"
    assert peak["lineno"] == line_of(generator, "# resumed") and peak["call"] == 1
    assert held == {line_of(generator, "# before the first yield"): 2 * MiB,
                    line_of(generator, "# resumed"): 8 * MiB}
    assert prof.stats(generator)[0]["calls"] == 1


def allocate_then_fail(device):
    t = u8(8 * MiB, device)
    raise ValueError(t.numel())


def raises(device):
    a = u8(4 * MiB, device)          # kept
    allocate_then_fail(device)       # the peak, then the exception


def test_an_exception_inside_the_peak_line(device):
    prof = LineProfiler(raises, device=device)
    with prof:
        with pytest.raises(ValueError):
            raises(device)
    peak, held = breakdown(prof, raises)
    assert peak["lineno"] == line_of(raises, "# the peak")
    assert held == {line_of(raises, "# kept"): 4 * MiB, line_of(raises, "# the peak"): 8 * MiB}


def waits_for_the_other_thread(entered, made, go_on, device):
    a = u8(MiB, device)              # own
    entered.set()
    made.wait(30)                    # wait
    b = u8(2 * MiB, device)          # after
    go_on.set()
    return a, b


def test_another_threads_bytes_are_other_threads(device):
    entered, made, go_on = threading.Event(), threading.Event(), threading.Event()
    held_by_thread = []

    def other():
        entered.wait(30)             # allocate during the call, not before it
        held_by_thread.append(u8(8 * MiB, device))
        made.set()
        go_on.wait(30)

    prof = LineProfiler(waits_for_the_other_thread, device=device)
    with prof:
        worker = threading.Thread(target=other)
        worker.start()
        waits_for_the_other_thread(entered, made, go_on, device)
        worker.join()
    peak, held = breakdown(prof, waits_for_the_other_thread)
    assert peak["other_threads"] == 8 * MiB
    assert peak["lineno"] == line_of(waits_for_the_other_thread, "# after")
    assert held == {line_of(waits_for_the_other_thread, "# own"): MiB,
                    line_of(waits_for_the_other_thread, "# after"): 2 * MiB}


def train_step(model, optimizer, x):
    out = model(x)                                  # forward
    loss = out.square().mean()
    loss.backward()                                 # backward
    optimizer.step()                                # step
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


def mlp(width):
    return torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.ReLU(),
                               torch.nn.Linear(4 * width, width))


def test_backward_peak_holds_the_forward_lines_activations():
    torch.manual_seed(0)
    model = mlp(64)
    optimizer = torch.optim.Adam(model.parameters())
    x = torch.randn(8192, 64)                       # 8192 x 256 activations: 8 MiB each
    prof = LineProfiler(train_step, device="cpu")
    with prof:
        for _ in range(2):
            train_step(model, optimizer, x)
    peak, held = breakdown(prof, train_step)
    assert peak["lineno"] == line_of(train_step, "# backward")
    # saved for backward: ReLU's output (8 MiB, also the second Linear's
    # input) and the model's output (2 MiB, for square's backward)
    assert held[line_of(train_step, "# forward")] == 10 * MiB
    params = sum(p.numel() * 4 for p in model.parameters())
    assert peak["before_call"] >= params


def test_the_first_steps_adam_state_is_held_on_the_step_line():
    torch.manual_seed(0)
    model = mlp(256)
    optimizer = torch.optim.Adam(model.parameters())
    x = torch.randn(4, 256)                         # tiny activations: the state dominates
    prof = LineProfiler(train_step, device="cpu")
    with prof:
        train_step(model, optimizer, x)
    peak, held = breakdown(prof, train_step)
    params = sum(p.numel() * 4 for p in model.parameters())
    assert peak["lineno"] == line_of(train_step, "# step")
    assert held[line_of(train_step, "# step")] >= 2 * params       # exp_avg, exp_avg_sq
    assert held[line_of(train_step, "# backward")] >= params       # the grads


class PolledSource:
    """A Python source: polled, it reports no allocation by itself."""
    name = "py"
    fields = ("n.current",)
    kinds = ("level",)

    def prepare(self, device):
        pass

    def sample(self, device):
        return (0,)

    def reset_peaks(self, device):
        pass


def polled_work():
    return u8(MiB)


def test_a_polled_source_has_no_breakdown_and_says_why():
    from pytorch_memlab import _tracer
    from pytorch_memlab.records.model import FunctionRecord, LineRecord
    from pytorch_memlab.reports.peak_text import peak_notes
    tracer = _tracer.Tracer(PolledSource(), 0, ("n.current",))
    tracer.add_code(polled_work.__code__)
    tracer.enable()
    polled_work()
    tracer.disable()
    assert tracer.peaks() == [(polled_work.__code__, None)]
    why = tracer.peak_unavailable
    assert "one by one" in why
    line = LineRecord(2, "return u8(MiB)", 1, 0, {}, held_at_peak=None, has_held=True)
    record = FunctionRecord("polled_work", "f.py", 1, "cpu", [], [line], peak_missing=why)
    assert peak_notes([record]) == [f"held at peak: not known, {why}"]
    assert "held_at_peak" in line and line["held_at_peak"] is None


def test_host_memory_follows_live_blocks_not_events():
    """The followed blocks' table (the host memory following costs) is as
    large after 100,000 calls as after 1,000: it follows the live blocks."""
    import gc

    def churn(n):
        for _ in range(n):
            t = u8(64)
            del t

    prof = LineProfiler(churn, device="cpu")
    (tracer,) = prof._tracers.tracers
    kept = []
    with prof:
        churn(1000)
        gc.collect()
        after_few = tracer.followed_blocks
        churn(100_000)
        gc.collect()
        after_many = tracer.followed_blocks
        kept = [u8(64) for _ in range(5000)]                 # live blocks do count
        more_live = tracer.followed_blocks
    assert after_many == after_few, (after_few, after_many)
    assert more_live[0] >= after_few[0] + 5000 and more_live[1] > after_few[1]
    assert tracer.followed_blocks == (0, 0)                  # disabled: forgotten
    peak, held = breakdown(prof, churn)
    assert peak["bytes"] - peak["before_call"] <= 2 * 64
    del kept
