"""The CUDA push path: the allocator's trace tracker instead of
poll-and-reset.  The choice tests run anywhere the shim loads; the rest need a
GPU and compare every figure with torch's own counters."""
import gc
import os
import random
import sys
import threading
import time
import warnings

import pytest
from conftest import requires_cuda
from helpers import line_of, run_script

torch = pytest.importorskip("torch")

from pytorch_memlab import LineProfiler, _sources  # noqa: E402
from pytorch_memlab.line_profiler import DEFAULT_COLUMNS  # noqa: E402
from pytorch_memlab.line_profiler._columns import GROWTH_FIELD  # noqa: E402

shim, _shim_error = _sources._load_shim()
needs_shim = pytest.mark.skipif(shim is None, reason=f"no torch shim ({_shim_error})")
MiB = 1 << 20
DEFAULTS = DEFAULT_COLUMNS + (GROWTH_FIELD,)
PUSHED = tuple(f"{family}.all.{metric}"
               for family in ("active_bytes", "allocated_bytes", "reserved_bytes")
               for metric in ("allocated", "current", "freed", "peak"))


@pytest.fixture
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(_sources, "_warned_resets", False)


# ---- which source a profiler gets (no GPU needed) --------------------------

@needs_shim
def test_push_fields_are_memory_stats_keys():
    if shim.cuda_push_unavailable() is not None and not hasattr(shim, "cuda_push_source"):
        with pytest.raises(RuntimeError, match="no CUDA push source"):
            shim.fields("cuda_push")
        return
    assert shim.fields("cuda_push") == PUSHED
    assert set(PUSHED) <= set(shim.fields("cuda"))
    assert shim.path("cuda_push") == "push"


@needs_shim
def test_default_columns_choose_push_when_the_tracker_can(fresh_warnings):
    why = shim.cuda_push_unavailable()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        source = _sources.get_source("cuda", DEFAULTS)
    entry = __import__("pytorch_memlab").info()["sources"]["cuda"]
    if why is None:
        assert source is shim.cuda_push_source
        assert caught == []
        assert entry["path"] == "push" and entry["why"] is None
    else:
        # CPU torch, or a shim built without the CUDA headers: polled, and
        # the user is told once that their peaks will be reset.
        assert source is shim.cuda_source
        assert [str(w.message).count("resets the device's peak") for w in caught] == [1]
        assert entry["path"] == "poll" and why in entry["why"]


@needs_shim
def test_other_columns_poll_and_warn_once(fresh_warnings):
    columns = ("active_bytes.all.peak", "num_ooms", GROWTH_FIELD)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = _sources.get_source("cuda", columns)
        second = _sources.get_source("cuda", columns)
    assert first is second is shim.cuda_source
    assert len(caught) == 1 and "active_bytes.all.peak" in str(caught[0].message)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _sources.get_source("cuda", ("num_ooms", GROWTH_FIELD))  # no peak column
    assert caught == []


@needs_shim
def test_cuda_malloc_async_backend_polls(tmp_path):
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="backend:cudaMallocAsync")
    out, _ = run_script(tmp_path, """\
        import torch
        from pytorch_memlab import _sources, info
        shim, _ = _sources._load_shim()
        print(shim.cuda_push_unavailable())
        print(info()["sources"]["cuda"]["path"])
        """, env=env)
    why, path = out.splitlines()
    assert path == "poll"
    if getattr(shim, "cuda_push_source", None) is not None:
        assert "cudaMallocAsync" in why          # a CUDA build: the backend decides
    else:
        assert "built without the CUDA trace tracker" in why


# ---- on the device -----------------------------------------------------------

def settle():
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


def peaks():
    stats = torch.cuda.memory_stats(0)
    return {key: value for key, value in stats.items() if key.endswith(".peak")}


def workload():
    big = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")
    small = torch.ones(1000, device="cuda")
    del big
    twice = small * 2
    tmp = torch.empty(8 * MiB, dtype=torch.uint8, device="cuda")
    del tmp
    return twice


def run(columns=None):
    settle()
    if columns is None:
        out = workload()
    else:
        with LineProfiler(workload, device="cuda:0", columns=columns):
            out = workload()
    torch.cuda.synchronize()
    result = (torch.cuda.max_memory_allocated(0), peaks())
    del out
    return result


@requires_cuda
def test_user_peak_statistics_survive_profiling():
    run()                                  # warm up: CUDA context, kernels
    plain = run()
    profiled = run(DEFAULT_COLUMNS)
    assert plain[0] >= 64 * MiB
    assert profiled == plain
    # The comparison is sensitive: a polled *.peak column (num_ooms is not
    # pushed) resets the peaks at every line, and the 64 MiB block, freed
    # before the function ends, is lost from max_memory_allocated().
    with pytest.warns(RuntimeWarning, match="resets the device's peak"):
        _sources._warned_resets = False
        polled = run(("active_bytes.all.peak", "num_ooms"))
    assert polled[0] < plain[0]


def cuda_work():
    a = torch.empty(1 << 20, device="cuda")  # 4 MiB
    b = torch.empty(1 << 18, device="cuda")  # 1 MiB
    del a  # free a
    return b  # keep b


PUSH_KEYS = ["active_bytes.all.peak", "reserved_bytes.all.peak", "allocated_bytes.all.peak",
             "active_bytes.all.allocated", "active_bytes.all.freed",
             "allocated_bytes.all.allocated", "allocated_bytes.all.freed",
             "reserved_bytes.all.allocated", "reserved_bytes.all.freed",
             "active_bytes.all.current", "reserved_bytes.all.current"]


def profile_lines(func, keys):
    assert _sources.get_source("cuda", list(keys) + [GROWTH_FIELD]) is shim.cuda_push_source
    gc.collect()
    torch.cuda.synchronize()
    prof = LineProfiler(func, device="cuda:0", columns=keys)
    torch.cuda.init()
    before = torch.cuda.memory_stats(0)
    with prof:
        kept = func()
    torch.cuda.synchronize()
    after = torch.cuda.memory_stats(0)
    lines = [line for line in prof.stats()[0]["lines"] if line["count"]]
    return lines, before, after, kept


def assert_totals_match(lines, before, after):
    for key in PUSH_KEYS:
        if key.endswith((".allocated", ".freed")):
            assert sum(line[key] for line in lines) == after[key] - before[key], key
    last = lines[-1]
    for key in ("active_bytes.all.current", "reserved_bytes.all.current"):
        assert last[key] == after[key], key
    assert sum(line["net_growth"] for line in lines) == (
        after["active_bytes.all.current"] - before["active_bytes.all.current"])


@requires_cuda
@needs_shim
def test_push_figures_match_memory_stats():
    lines, before, after, kept = profile_lines(cuda_work, PUSH_KEYS)
    assert [line["count"] for line in lines] == [1, 1, 1, 1]
    assert_totals_match(lines, before, after)
    base = before["active_bytes.all.current"]
    assert lines[0]["active_bytes.all.peak"] - base == 4 * MiB
    assert lines[1]["active_bytes.all.peak"] - base == 5 * MiB
    assert lines[0]["allocated_bytes.all.allocated"] == 4 * MiB
    assert lines[2]["allocated_bytes.all.freed"] == 4 * MiB
    assert lines[2]["active_bytes.all.freed"] == 4 * MiB
    assert lines[2]["net_growth"] == -4 * MiB
    del kept


def side_stream_work():
    side = torch.cuda.Stream()
    x = torch.ones(1 << 18, device="cuda")                        # 1 MiB
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = x * 2                                                 # 1 MiB on side
    x.record_stream(side)
    del x                                                         # freed, still active
    torch.cuda.synchronize()
    z = torch.empty(1 << 18, device="cuda")                       # completes x's free
    return y, z


@requires_cuda
@needs_shim
def test_side_stream_record_stream_figures():
    lines, before, after, kept = profile_lines(side_stream_work, PUSH_KEYS)
    assert_totals_match(lines, before, after)
    by_code = {line["code"].strip().split(" ")[0]: line for line in lines}
    del_x, z_line = by_code["del"], by_code["z"]
    assert del_x["allocated_bytes.all.freed"] == MiB
    assert del_x["active_bytes.all.freed"] == 0          # in use on `side`
    assert z_line["active_bytes.all.freed"] == MiB        # FREE_COMPLETED at the next malloc
    assert z_line["allocated_bytes.all.allocated"] == MiB
    del kept


def tracked_equals_allocator():
    stats = torch.cuda.memory_stats(0)
    return shim.cuda_tracked(0) == (stats["active_bytes.all.current"],
                                    stats["allocated_bytes.all.current"],
                                    stats["reserved_bytes.all.current"])


def mixed_workload(rng, steps):
    """Random allocations, frees, empty_cache() and side-stream frees with
    record_stream; the tracker must agree with the allocator after each."""
    side = torch.cuda.Stream()
    live = []
    mismatches = []
    for step in range(steps):
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
        if not tracked_equals_allocator():
            mismatches.append((step, shim.cuda_tracked(0)))
    live.clear()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    if not tracked_equals_allocator():
        mismatches.append(("end", shim.cuda_tracked(0)))
    return mismatches


@requires_cuda
@needs_shim
def test_tracker_current_bytes_equal_the_allocators():
    torch.cuda.init()
    shim.prepare("cuda_push", 0)
    keep = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")  # a start level
    reader = shim.open_reader("cuda_push", 0)
    assert reader >= 0
    try:
        assert tracked_equals_allocator()
        assert mixed_workload(random.Random(11), 400) == []
    finally:
        shim.close_reader("cuda_push", 0, reader)
    with pytest.raises(RuntimeError, match="does not follow"):
        shim.cuda_tracked(0)
    # Disarmed meanwhile: reopening re-synchronises from getDeviceStats.
    more = torch.empty(5 << 20, dtype=torch.uint8, device="cuda")
    del keep
    reader = shim.open_reader("cuda_push", 0)
    try:
        assert tracked_equals_allocator()
        assert mixed_workload(random.Random(12), 200) == []
    finally:
        shim.close_reader("cuda_push", 0, reader)
    del more


@requires_cuda
@needs_shim
def test_tracker_with_expandable_segments(tmp_path):
    """SEGMENT_MAP / SEGMENT_UNMAP instead of SEGMENT_ALLOC / SEGMENT_FREE."""
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    here = os.path.dirname(os.path.abspath(__file__))
    out, _ = run_script(tmp_path, f"""\
        import random, sys
        sys.path.insert(0, {here!r})
        import torch
        import test_cuda_push as t
        torch.cuda.init()
        t.shim.prepare("cuda_push", 0)
        reader = t.shim.open_reader("cuda_push", 0)
        print(t.tracked_equals_allocator(), t.mixed_workload(random.Random(5), 300))
        """, env=env)
    assert out.split() == ["True", "[]"]


@requires_cuda
@needs_shim
def test_reader_peak_and_thread_counters():
    torch.cuda.init()
    shim.prepare("cuda_push", 0)
    fields = shim.fields("cuda_push")
    reader = shim.open_reader("cuda_push", 0)
    try:
        start = dict(zip(fields, shim.read("cuda_push", 0, reader)))
        tmp = torch.empty(16 * MiB, dtype=torch.uint8, device="cuda")
        del tmp
        now = dict(zip(fields, shim.read("cuda_push", 0, reader)))
        stats = torch.cuda.memory_stats(0)
        assert now["active_bytes.all.peak"] == start["active_bytes.all.current"] + 16 * MiB
        assert now["allocated_bytes.all.allocated"] - start["allocated_bytes.all.allocated"] \
            == 16 * MiB
        assert now["allocated_bytes.all.freed"] - start["allocated_bytes.all.freed"] == 16 * MiB
        assert now["active_bytes.all.current"] == stats["active_bytes.all.current"]
        # Rearmed at the current level by the read.
        again = dict(zip(fields, shim.read("cuda_push", 0, reader)))
        assert again["active_bytes.all.peak"] == stats["active_bytes.all.current"]
    finally:
        shim.close_reader("cuda_push", 0, reader)


@requires_cuda
def test_seed_example_figures_match_unprofiled_levels(tmp_path):
    """The README's seed example: each line's active peak is the level
    torch itself reports after that line in an unprofiled run."""
    out, _ = run_script(tmp_path, """\
        import torch
        from pytorch_memlab import LineProfiler

        def func():
            linear1 = torch.nn.Linear(100, 100).cuda()
            linear2 = torch.nn.Linear(100, 100).cuda()
            linear3 = torch.nn.Linear(100, 100).cuda()

        torch.cuda.init()
        levels = []
        linear1 = torch.nn.Linear(100, 100).cuda()
        levels.append(torch.cuda.memory_stats()["active_bytes.all.current"])
        linear2 = torch.nn.Linear(100, 100).cuda()
        levels.append(torch.cuda.memory_stats()["active_bytes.all.current"])
        linear3 = torch.nn.Linear(100, 100).cuda()
        levels.append(torch.cuda.memory_stats()["active_bytes.all.current"])
        del linear1, linear2, linear3
        torch.cuda.empty_cache()
        prof = LineProfiler(func, device="cuda:0")
        with prof:
            func()
        lines = [l for l in prof.stats()[0]["lines"] if l["count"]]
        print(levels)
        print([l["active_bytes.all.peak"] for l in lines][-3:])
        print(torch.cuda.max_memory_allocated())
        """)
    levels, profiled, max_allocated = out.splitlines()
    assert levels == profiled
    assert int(max_allocated) == eval(levels)[-1]   # never reset: the whole run's peak


def cuda_keep_and_temp(ready, proceed):
    ready.set()  # before
    proceed.wait(30)  # wait
    # The sleeps hand the GIL to the spinning thread in the middle of the line.
    x = (torch.empty(524288, device="cuda"), time.sleep(0.02), torch.empty(262144, device="cuda"), time.sleep(0.02))[2]  # keep 1 MiB, 2 MiB temporary
    return x  # done


def cuda_spin(until):
    n = 0  # start
    while not until.is_set():
        n += 1  # spin
    return n  # done


THREAD_COLUMNS = ["active_bytes.all.peak", "active_bytes.all.allocated",
                  "active_bytes.all.freed"]


def cuda_row(prof, func, text):
    lineno = line_of(func, text)
    for record in prof.stats(func):
        if record["device"].startswith("cuda"):
            return next(line for line in record["lines"] if line["lineno"] == lineno)
    raise AssertionError(func)


@requires_cuda
@needs_shim
def test_thread_line_exact_while_main_thread_profiled():
    """Issue 11's thread case on the GPU: one profiler, two threads; each
    line's allocated / freed are its own thread's."""
    torch.cuda.init()
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    prof = LineProfiler(cuda_keep_and_temp, cuda_spin, device="cuda:0",
                        columns=THREAD_COLUMNS)
    ready, proceed, done = threading.Event(), threading.Event(), threading.Event()
    kept = []

    def worker():
        kept.append(cuda_keep_and_temp(ready, proceed))
        done.set()

    try:
        with prof:
            t = threading.Thread(target=worker)
            t.start()
            ready.wait(30)
            proceed.set()
            cuda_spin(done)
            t.join()
    finally:
        sys.setswitchinterval(old)
    base = cuda_row(prof, cuda_keep_and_temp, "# wait")["active_bytes.all.peak"]
    line = cuda_row(prof, cuda_keep_and_temp, "# keep 1 MiB")
    assert line["count"] == 1
    assert line["active_bytes.all.peak"] - base == 3 * MiB
    assert line["active_bytes.all.allocated"] == 3 * MiB
    assert line["active_bytes.all.freed"] == 2 * MiB
    assert line["net_growth"] == MiB
    spun = [line for rec in prof.stats(cuda_spin) if rec["device"].startswith("cuda")
            for line in rec["lines"] if line["count"]]
    assert spun and all((line["active_bytes.all.allocated"], line["active_bytes.all.freed"])
                        == (0, 0) for line in spun)
