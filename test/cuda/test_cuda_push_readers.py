"""The CUDA push source's readers on the device: a reader's peaks against
torch's own after a random workload, and per-thread allocated / freed (the
counted push source); skipped without CUDA."""
import functools
import os
import random

import pytest
from helpers import (TEST_DIRS, MiB, keep_and_temp, line_figures, run_script, spin,
                     worker_against_main)

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.cuda

from pytorch_memlab import LineProfiler, sources  # noqa: E402
from test_cuda_push import (SIDE_STREAM, THREAD_COLUMNS, make_function, needs_shim, run,  # noqa: E402
                            settle, shim)


# ---- a reader's peaks against torch's own after a random workload ----------

def mixed_workload(rng, steps):
    """Random allocations, frees, empty_cache() and side-stream frees with
    record_stream."""
    side = torch.cuda.Stream()
    live = []
    for _ in range(steps):
        op = rng.random()
        if op < 0.45 or not live:
            size = rng.choice([1, 512, 4096, 1 << 20, (1 << 20) + 1, 3 << 20, 25 << 20])
            live.append(torch.empty(size, dtype=torch.uint8, device="cuda"))
        elif op < 0.75:
            live.pop(rng.randrange(len(live)))
        elif op < 0.9:
            t = live.pop(rng.randrange(len(live)))
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                t.add_(1)
            t.record_stream(side)
            del t
        elif op < 0.95:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        else:
            torch.cuda.synchronize()
    live.clear()


def reader_matches_torch(seed, steps, chunks):
    """Read a push reader every `steps` random steps; torch's own peaks, reset
    at the same points (by this test, not by the profiler), must agree."""
    torch.cuda.init()
    shim.prepare("cuda_push", 0)
    fields = shim.fields("cuda_push")
    rng = random.Random(seed)
    torch.cuda.reset_peak_memory_stats(0)
    reader = shim.open_reader("cuda_push", 0)
    assert reader >= 0
    bad = []
    try:
        for chunk in range(chunks):
            mixed_workload(rng, steps)
            got = dict(zip(fields, shim.read("cuda_push", 0, reader)))
            stats = torch.cuda.memory_stats(0)
            torch.cuda.reset_peak_memory_stats(0)
            for key in fields:
                if got[key] != stats[key]:
                    bad.append((chunk, key, got[key], stats[key]))
    finally:
        shim.close_reader("cuda_push", 0, reader)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return bad


@needs_shim
def test_reader_peaks_equal_torchs_after_mixed_workload():
    assert reader_matches_torch(11, 40, 10) == []


@needs_shim
def test_reader_peaks_with_expandable_segments(tmp_path):
    """SEGMENT_MAP / SEGMENT_UNMAP instead of SEGMENT_ALLOC / SEGMENT_FREE."""
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    out, _ = run_script(tmp_path, f"""\
        import sys
        sys.path[:0] = {TEST_DIRS!r}
        import test_cuda_push_readers as t
        print(t.reader_matches_torch(5, 40, 8))
        """, env=env)
    assert out.split() == ["[]"]


def keep_on_cuda(ready, proceed):
    return keep_and_temp(ready, proceed, functools.partial(torch.empty, device="cuda"))


@needs_shim
def test_thread_line_peak_while_main_thread_profiled():
    """Two threads on one profiler: the worker's line sees its 3 MiB peak
    although the main thread reads the same device all the while (under
    poll-and-reset the main thread's resets hid it)."""
    torch.cuda.init()
    prof = LineProfiler(keep_and_temp, spin, device="cuda:0")
    with prof:
        worker_against_main(keep_on_cuda, spin)
    base = line_figures(prof, keep_and_temp, "# wait")["active_bytes.all.peak"]
    line = line_figures(prof, keep_and_temp, "# keep 1 MiB")
    assert line["count"] == 1
    assert line["active_bytes.all.peak"] - base == 3 * MiB
    assert line["net_growth"] == MiB


# ---- per-thread allocated / freed (the counted push source) -----------------

@needs_shim
def test_thread_allocated_and_freed_are_the_threads_own():
    """The worker's line allocates 3 MiB and frees 2 MiB while the main thread
    allocates and frees 512 KiB blocks on profiled lines all the while: each
    line counts its own thread's bytes only (polled cumulative counters gave
    each line the other thread's bytes too)."""
    torch.cuda.init()
    settle()
    prof = LineProfiler(keep_and_temp, cuda_churn, device="cuda:0",
                        columns=THREAD_COLUMNS)
    with prof:
        _, churned = worker_against_main(keep_on_cuda, cuda_churn)
    line = line_figures(prof, keep_and_temp, "# keep 1 MiB")
    assert line["count"] == 1
    assert line["allocated_bytes.all.allocated"] == 3 * MiB
    assert line["allocated_bytes.all.freed"] == 2 * MiB
    assert line["allocation.all.allocated"] == 2
    assert line["allocation.all.freed"] == 1
    assert churned > 0
    churn = line_figures(prof, cuda_churn, "# churn")
    assert churn["count"] == churned
    # counters sum over the runs: one 512 KiB block each, never the worker's
    assert churn["allocated_bytes.all.allocated"] == churned * 512 * 1024
    assert churn["allocated_bytes.all.freed"] == churned * 512 * 1024
    assert churn["allocation.all.allocated"] == churned


def cuda_churn(until):
    n = 0  # start
    while not until.is_set() or n == 0:
        n += 1; x = torch.empty(131072, device="cuda"); del x  # churn
    return n  # done


def counted_reference(statements):
    """Per statement, torch's own allocated / freed bytes and counts."""
    namespace = {"torch": torch, "keep": []}
    rows = []
    for line in statements:
        before = torch.cuda.memory_stats(0)
        exec(line, namespace)
        after = torch.cuda.memory_stats(0)
        rows.append(tuple(after[k] - before[k] for k in THREAD_COLUMNS[1:]))
    namespace.clear()
    return rows


@needs_shim
def test_counted_lines_match_torch_on_one_thread(tmp_path):
    """One thread: each line's allocated / freed figures equal the deltas of
    torch's own cumulative counters, through a side stream and record_stream."""
    func = make_function("counted", SIDE_STREAM, tmp_path)
    settle()
    expected = counted_reference(SIDE_STREAM)
    settle()
    assert sources.get_source("cuda", THREAD_COLUMNS) is shim.cuda_push_counted_source
    keep = []
    prof = LineProfiler(func, device="cuda:0", columns=THREAD_COLUMNS)
    with prof:
        func(keep)
    del keep
    lines = {line["lineno"]: line for line in prof.stats()[0]["lines"] if line["count"]}
    got = [tuple(lines[i + 4][k] for k in THREAD_COLUMNS[1:]) for i in range(len(SIDE_STREAM))]
    assert got == expected
    assert sum(row[0] for row in expected) > 30 * MiB   # the reference saw the bytes
    settle()


@needs_shim
def test_counted_reader_sums_equal_torchs_after_mixed_workload():
    """A counted reader's totals equal torch's cumulative counters' growth over
    a random workload run by its own thread alone."""
    torch.cuda.init()
    shim.prepare("cuda_push_counted", 0)
    fields = shim.fields("cuda_push_counted")
    rng = random.Random(7)
    before = torch.cuda.memory_stats(0)
    reader = shim.open_reader("cuda_push_counted", 0)
    assert reader >= 0
    try:
        mixed_workload(rng, 300)
        got = dict(zip(fields, shim.read("cuda_push_counted", 0, reader)))
        after = torch.cuda.memory_stats(0)
    finally:
        shim.close_reader("cuda_push_counted", 0, reader)
    for key in THREAD_COLUMNS[1:]:
        assert got[key] == after[key] - before[key], key
    assert got["allocated_bytes.all.allocated"] > 0


def test_user_peak_statistics_survive_counted_profiling():
    assert run(THREAD_COLUMNS) == run()
