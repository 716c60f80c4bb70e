"""What was alive at the peak, on CUDA: skipped without a GPU, run
on the device.  Figures are whole allocator blocks, as active_bytes counts
them; every breakdown is checked to sum to the peak its table shows.  Prints
the figures it checks."""
import pytest

from helpers import MiB, line_figures, line_of

torch = pytest.importorskip("torch")

from pytorch_memlab import LineProfiler  # noqa: E402

pytestmark = pytest.mark.cuda
PEAK = "active_bytes.all.peak"


def breakdown(prof, func):
    """(record["peak"], {lineno: held}) of ``func``, checked: the parts sum to
    the peak, which is the highest peak its table shows."""
    torch.cuda.synchronize()
    record = prof.stats(func)[0]
    peak = record["peak"]
    held = {line["lineno"]: line["held_at_peak"] for line in record["lines"]
            if line["held_at_peak"]}
    print(func.__name__, peak, held)
    assert sum(held.values()) + peak["before_call"] + peak["other_threads"] == peak["bytes"]
    assert peak["bytes"] == max(line[PEAK] for line in record["lines"] if line[PEAK] is not None)
    return peak, held


def u8(n):
    return torch.empty(n, dtype=torch.uint8, device="cuda")


def issue_case():
    a = u8(4 * MiB)                  # A: kept
    b = u8(16 * MiB)                 # B: a temporary
    del b; c = u8(2 * MiB)           # C
    return a, c


def caller():
    kept = u8(MiB)
    return kept, issue_case()


def test_cuda_issue_case_in_blocks():
    torch.cuda.empty_cache()         # fresh segments: each block is its request
    prof = LineProfiler(issue_case, device="cuda")
    with prof:
        caller()
    peak, held = breakdown(prof, issue_case)
    assert peak["lineno"] == line_of(issue_case, "# B") and peak["call"] == 1
    assert held == {line_of(issue_case, "# A"): 4 * MiB, line_of(issue_case, "# B"): 16 * MiB}
    assert peak["other_threads"] == 0
    text = repr(prof.display())
    assert f"\npeak {peak['bytes'] / MiB:.2f}M on line {line_of(issue_case, '# B')} (call 1): " \
        in text


def test_cuda_an_unsplit_block_counts_whole():
    """A request served by a cached block too big to split counts as the
    whole block, as active_bytes does (not the requested size)."""
    torch.cuda.empty_cache()
    spare = u8(20 * MiB - 512 * 1024)            # then freed: a cached 20 MiB block
    del spare

    def take():
        x = u8(19 * MiB)                          # remainder 1 MiB: not split
        return x

    active = "active_bytes.all.current"
    prof = LineProfiler(take, device="cuda")
    with prof:
        before = torch.cuda.memory_stats()[active]
        x = take()
        block = torch.cuda.memory_stats()[active] - before
    peak, held = breakdown(prof, take)
    del x
    print("requested", 19 * MiB, "block", block)
    assert block == 20 * MiB
    assert held == {line_of(take, "# remainder"): block}


def outer():
    a = u8(MiB)                      # outer first
    b = inner()                      # outer calls
    return a, b


def inner():
    t = u8(8 * MiB)                  # inner temporary
    del t
    return u8(2 * MiB)


def test_cuda_nested_and_recursive():
    torch.cuda.empty_cache()
    prof = LineProfiler(outer, inner, device="cuda")
    with prof:
        outer()
    peak, held = breakdown(prof, outer)
    assert held == {line_of(outer, "# outer first"): MiB, line_of(outer, "# outer calls"): 8 * MiB}
    inner_peak, inner_held = breakdown(prof, inner)
    assert inner_held == {line_of(inner, "# inner temporary"): 8 * MiB}
    assert inner_peak["before_call"] == peak["before_call"] + MiB


def train_step(model, optimizer, x):
    out = model(x)                                  # forward
    loss = out.float().square().mean()
    loss.backward()                                 # backward
    optimizer.step()                                # step
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


def traced_breakdown(snapshot, func):
    """The allocator's own account (memory history over one call, replayed):
    bytes made on each line of ``func`` and alive at the highest level of
    the blocks made meanwhile; a block made with no Python frame (autograd's
    device thread) under None.  Requested sizes, rounded up to the 512-byte
    unit of a block."""
    live, level, best, at_best = {}, 0, -1, {}
    for event in snapshot["device_traces"][torch.cuda.current_device()]:
        if event["action"] == "alloc":
            lines = [f["line"] for f in event.get("frames", []) if f["name"] == func.__name__]
            live[event["addr"]] = (-(-event["size"] // 512) * 512, lines[0] if lines else None)
            level += live[event["addr"]][0]
        elif event["action"] == "free_completed" and event["addr"] in live:
            level -= live.pop(event["addr"])[0]
        if level > best:
            best, at_best = level, dict(live)
    by_line = {}
    for size, line in at_best.values():
        by_line[line] = by_line.get(line, 0) + size
    return by_line


def test_cuda_mlp_adam_step():
    """backward's peak holds the forward line's saved activation, the model
    output kept for square's backward (2 MiB); what backward makes (on
    autograd's device thread, which runs no Python) is charged to its line;
    the first call's optimizer.step() line holds the Adam state it made.
    Unlike on the CPU, the CUDA peak comes after ReLU's backward, once its
    8 MiB output was freed: the allocator's own trace (memory history)
    showed that moment, with the same parts."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 64)).cuda()
    optimizer = torch.optim.Adam(model.parameters())
    x = torch.randn(8192, 64, device="cuda")
    torch.cuda.empty_cache()         # fresh segments: blocks close to their requests
    prof = LineProfiler(train_step, device="cuda")
    torch.cuda.memory._record_memory_history(max_entries=100_000)
    try:
        with prof:
            train_step(model, optimizer, x)
        torch.cuda.synchronize()
        snapshot = torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    peak, held = breakdown(prof, train_step)
    params = sum(p.numel() * 4 for p in model.parameters())
    backward = line_of(train_step, "# backward")
    assert peak["other_threads"] == 0
    assert peak["lineno"] == backward
    assert held.get(line_of(train_step, "# forward"), 0) >= 2 * MiB   # the model output
    # line by line, as the allocator's own trace has it (whole blocks hold
    # at most an unsplit remainder, under 1 MiB, more than their requests)
    traced = traced_breakdown(snapshot, train_step)
    traced[backward] = traced.get(backward, 0) + traced.pop(None, 0)
    print("traced", traced)
    assert traced.keys() == held.keys()
    assert all(0 <= held[line] - traced[line] < MiB for line in held)
    assert peak["before_call"] >= params
    grew = line_figures(prof, train_step, "# step")
    assert grew["net_growth"] >= 2 * params      # exp_avg, exp_avg_sq


def encoder_step(layer, optimizer, x):
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = layer(x)                                # forward
    loss = y.float().square().mean()
    loss.backward()                                 # backward
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


def test_cuda_bf16_transformer_encoder_step_sums_to_its_peak():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=256, nhead=8, dim_feedforward=1024,
                                             batch_first=True).cuda()
    optimizer = torch.optim.AdamW(layer.parameters())
    x = torch.randn(32, 128, 256, device="cuda")
    prof = LineProfiler(encoder_step, device="cuda")
    with prof:
        for _ in range(3):
            encoder_step(layer, optimizer, x)
    peak, held = breakdown(prof, encoder_step)
    assert peak["other_threads"] == 0
    assert held.get(line_of(encoder_step, "# forward"), 0) > 0
    prof.print_stats()


def test_cuda_polled_columns_leave_the_cells_empty_and_say_why():
    prof = LineProfiler(issue_case, device="cuda",
                        columns=("active_bytes.all.peak", "inactive_split_bytes.all.peak"))
    with prof:
        caller()
    record = prof.stats()[0]
    assert "peak" not in record
    assert all(line["held_at_peak"] is None for line in record["lines"])
    text = repr(prof.display())
    assert "held at peak: not known, its memory source does not report allocations one by one" \
        in text


def two_lines_then_fail():
    a = u8(4 * MiB)                  # A
    b = u8(2 * MiB)                  # B
    c = u8(1 << 50)                  # fails: 1 PiB
    return a, b, c


def test_cuda_oom_postmortem_live_by_line():
    """The post-mortem's "live at the failure, by the line that allocated
    it": read in the handler, of the moment the observer read (the allocated
    bytes unchanged), in whole blocks, summing to the allocated bytes."""
    torch.cuda.empty_cache()
    kept = u8(MiB)                                         # alive before the call
    before = torch.cuda.memory_allocated()
    prof = LineProfiler(two_lines_then_fail, device="cuda")
    with pytest.raises(torch.OutOfMemoryError):
        with prof:
            two_lines_then_fail()
    # a and b were freed with the failing frame: add them back
    allocated = before + 6 * MiB
    pm = prof.stats()[0]["postmortem"]
    print(pm)
    assert pm["when"] == "at the failing allocation"
    assert pm["allocated_bytes"] == allocated
    live = pm["live_by_line"]
    lines = {row["lineno"]: row["bytes"] for row in live["lines"]}
    assert lines == {line_of(two_lines_then_fail, "# A"): 4 * MiB,
                     line_of(two_lines_then_fail, "# B"): 2 * MiB}
    assert live["bytes"] == allocated
    assert (live["other_threads"], live["after_call"]) == (0, 0)
    assert live["before_call"] == before >= MiB
    assert "live at the failure (call 1), by the line that allocated it:" in repr(prof.display())
    del kept


def reports_inside():
    from pytorch_memlab import MemReporter
    batch = u8(3 * MiB)                                    # batch line
    result = MemReporter().report(print_report=False, verbose=True)
    return result, batch


def test_cuda_mem_reporter_names_the_allocating_line():
    with LineProfiler(reports_inside, device="cuda"):
        result, batch = reports_inside()
    sites = {r.name: r.allocated_at for r in result.rows}
    assert sites["batch"] == f"reports_inside:{line_of(reports_inside, '# batch line')}"
