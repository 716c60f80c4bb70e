"""Push-based accounting on CPU: a line's peak is read from its own
thread's peak register and its allocated / freed columns count only what its
own thread did, so concurrent readers never reset or steal each other's bytes,
and the allocator's own peak statistics are never reset by profiling."""
import random
import sys
import threading

import pytest
from helpers import MiB, keep_and_temp, line_figures, spin, worker_against_main

torch = pytest.importorskip("torch")
shim = pytest.importorskip("pytorch_memlab._torchshim")

from pytorch_memlab import LineProfiler  # noqa: E402

PEAK = "active_bytes.all.peak"
ALLOC = "active_bytes.all.allocated"
FREED = "active_bytes.all.freed"
COLUMNS = [PEAK, ALLOC, FREED]


def keep_on_cpu(ready, proceed):
    return keep_and_temp(ready, proceed, torch.empty)


def check_worker_line(prof):
    base = line_figures(prof, keep_and_temp, "# wait")[PEAK]
    line = line_figures(prof, keep_and_temp, "# keep 1 MiB")
    assert line["count"] == 1
    assert line[PEAK] - base == 3 * MiB
    assert line[ALLOC] == 3 * MiB
    assert line[FREED] == 2 * MiB
    assert line["net_growth"] == MiB


def check_spin_took_nothing(prof):
    """The spinning thread allocated nothing: none of A's bytes on its lines."""
    lines = [line for rec in prof.stats(spin) if rec["device"] == "cpu"
             for line in rec["lines"] if line["count"]]
    assert len(lines) == 4
    for line in lines:
        assert (line[ALLOC], line[FREED]) == (0, 0), line


def test_thread_line_exact_while_main_thread_profiled():
    """The issue's case: one profiler, two threads."""
    prof = LineProfiler(keep_and_temp, spin, device="cpu", columns=COLUMNS)
    with prof:
        worker_against_main(keep_on_cpu, spin)
    check_worker_line(prof)
    check_spin_took_nothing(prof)


def test_two_profilers_on_two_threads_each_exact():
    prof_a = LineProfiler(keep_and_temp, device="cpu", columns=COLUMNS)
    prof_b = LineProfiler(spin, device="cpu", columns=COLUMNS)

    def work(ready, proceed):
        with prof_a:
            return keep_on_cpu(ready, proceed)

    def main(done):
        with prof_b:
            return spin(done)
    worker_against_main(work, main)
    check_worker_line(prof_a)
    check_spin_took_nothing(prof_b)


def churn(seed):
    rng = random.Random(seed)
    live = []
    for _ in range(200):
        if live and rng.random() < 0.45:
            live.pop(rng.randrange(len(live)))
        else:
            live.append(torch.empty(rng.randrange(1, 50_000)))
    n = len(live)
    live.clear()  # free the rest inside a profiled line
    return n


def churn_allocations(seed):
    """(allocations, bytes) that churn(seed) makes: float32, 4 bytes an element."""
    rng = random.Random(seed)
    live, sizes = 0, []
    for _ in range(200):
        if live and rng.random() < 0.45:
            rng.randrange(live)
            live -= 1
        else:
            sizes.append(rng.randrange(1, 50_000))
            live += 1
    return len(sizes), 4 * sum(sizes)


def test_counters_equal_allocators_own_after_random_run():
    """Per-line allocated / freed summed over the run equal the counting
    allocator's own totals over the same run (one thread)."""
    cols = [ALLOC, FREED, "allocation.all.allocated", "allocation.all.freed"]
    prof = LineProfiler(churn, device="cpu", columns=cols)
    shim.prepare("cpu", 0)
    names = shim.fields("cpu")
    before = dict(zip(names, shim.sample("cpu", 0)))
    with prof:
        churn(7)
    after = dict(zip(names, shim.sample("cpu", 0)))
    lines = next(r for r in prof.stats(churn) if r["device"] == "cpu")["lines"]
    for col in cols:
        assert sum(line[col] or 0 for line in lines) == after[col] - before[col], col
    count, nbytes = churn_allocations(7)
    assert [after[col] - before[col] for col in cols] == [nbytes, nbytes, count, count]


def test_profiling_leaves_users_peak_alone():
    """The allocator's global peak (what a user would read) is not reset."""
    shim.prepare("cpu", 0)
    names = shim.fields("cpu")
    big = torch.empty(4 * MiB)   # 16 MiB, freed at once: raises the global peak
    del big
    peak_before = dict(zip(names, shim.sample("cpu", 0)))[PEAK]
    prof = LineProfiler(churn, device="cpu")
    with prof:
        churn(3)
    assert dict(zip(names, shim.sample("cpu", 0)))[PEAK] == peak_before


def test_info_names_source_and_path():
    import pytorch_memlab
    data = pytorch_memlab.info()
    assert data["torch"] == torch.__version__
    assert data["sources"]["cpu"] == {"source": "shim", "path": "push", "why": None}
    assert data["sources"]["cuda"]["path"] in ("push", "poll")
    assert shim.path("cpu") == "push"


def test_info_command_prints_paths():
    import subprocess
    out = subprocess.run([sys.executable, "-m", "pytorch_memlab", "info"],
                         capture_output=True, text=True, check=True).stdout
    assert "cpu: source shim, path push" in out
    assert f"torch {torch.__version__}" in out


def hold_at_barrier(barrier):
    x = torch.empty(262144)  # 1 MiB, held while every thread is here
    barrier.wait(60)  # all in profiled code at once
    return x.numel()  # done


def test_more_threads_than_registers_lose_no_reading():
    # The CPU source has 64 peak registers; the threads beyond them are polled
    # (source.h's contract) instead of recording only failed readings.
    n = 66
    barrier = threading.Barrier(n)
    prof = LineProfiler(hold_at_barrier, device="cpu", columns=COLUMNS)
    with prof:
        threads = [threading.Thread(target=hold_at_barrier, args=(barrier,)) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert all(tracer.sample_errors == 0 for tracer in prof._tracers.tracers)
    line = line_figures(prof, hold_at_barrier, "# all in profiled code at once")
    assert line["count"] == n
    # every thread held its 1 MiB while all were at the barrier
    assert line[PEAK] >= n * MiB
    assert line_figures(prof, hold_at_barrier, "# 1 MiB")["count"] == n
