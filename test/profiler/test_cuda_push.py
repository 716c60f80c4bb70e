"""The CUDA push path: the allocator's trace tracker instead of
poll-and-reset.  The choice tests run anywhere the shim loads; the rest need a
GPU and compare every figure with torch's own counters."""
import gc
import os
import warnings

import pytest
from helpers import MiB, run_script

torch = pytest.importorskip("torch")

from pytorch_memlab import LineProfiler, sources  # noqa: E402
from pytorch_memlab.sources import choice, native  # noqa: E402
from pytorch_memlab.line_profiler import DEFAULT_COLUMNS  # noqa: E402
from pytorch_memlab.records.columns import GROWTH_FIELD  # noqa: E402

shim, _shim_error = native.load_shim()
needs_shim = pytest.mark.skipif(shim is None, reason=f"no torch shim ({_shim_error})")
DEFAULTS = DEFAULT_COLUMNS + (GROWTH_FIELD,)
PUSHED = ("active_bytes.all.current", "active_bytes.all.peak",
          "reserved_bytes.all.current", "reserved_bytes.all.peak")
COUNTED = ("active_bytes.all.current", "active_bytes.all.peak",
           "allocated_bytes.all.allocated", "allocated_bytes.all.freed",
           "allocation.all.allocated", "allocation.all.freed",
           "reserved_bytes.all.current", "reserved_bytes.all.peak")
THREAD_COLUMNS = ("active_bytes.all.peak", "allocated_bytes.all.allocated",
                  "allocated_bytes.all.freed", "allocation.all.allocated",
                  "allocation.all.freed")


@pytest.fixture
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(choice, "_warned_resets", False)


# ---- which source a profiler gets (no GPU needed) --------------------------

@needs_shim
def test_push_fields_are_memory_stats_keys():
    if shim.cuda_push_unavailable() is not None and not hasattr(shim, "cuda_push_source"):
        with pytest.raises(RuntimeError, match="no CUDA push source"):
            shim.fields("cuda_push")
        return
    assert shim.fields("cuda_push") == PUSHED
    assert shim.fields("cuda_push_counted") == COUNTED
    assert set(COUNTED) <= set(shim.fields("cuda"))
    assert shim.path("cuda_push") == shim.path("cuda_push_counted") == "push"


@needs_shim
def test_per_thread_columns_choose_the_counted_push_source(fresh_warnings):
    """allocated / freed columns are pushed per thread by the counted source;
    the default columns keep the plain one (cheaper per allocation)."""
    source = sources.get_source("cuda", THREAD_COLUMNS + (GROWTH_FIELD,))
    if shim.cuda_push_unavailable() is None:
        assert source is shim.cuda_push_counted_source
        assert sources.get_source("cuda", DEFAULTS) is shim.cuda_push_source
    else:
        assert source is shim.cuda_source


@needs_shim
def test_default_columns_choose_push_when_the_tracker_can(fresh_warnings):
    why = shim.cuda_push_unavailable()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        source = sources.get_source("cuda", DEFAULTS)
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
        first = sources.get_source("cuda", columns)
        second = sources.get_source("cuda", columns)
    assert first is second is shim.cuda_source
    assert len(caught) == 1 and "active_bytes.all.peak" in str(caught[0].message)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sources.get_source("cuda", ("num_ooms", GROWTH_FIELD))  # no peak column
    assert caught == []


@needs_shim
def test_cuda_malloc_async_backend_polls(tmp_path):
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="backend:cudaMallocAsync")
    out, _ = run_script(tmp_path, """\
        import torch
        from pytorch_memlab import info
        from pytorch_memlab.sources import native
        shim, _ = native.load_shim()
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


@pytest.mark.cuda
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
        choice._warned_resets = False
        polled = run(("active_bytes.all.peak", "num_ooms"))
    assert polled[0] < plain[0]


# ---- per-line figures against an instrumented unprofiled twin ---------------

def make_function(name, statements, tmp_path):
    """A function whose body is `statements`, one per line, from a real file
    (so the profiler sees its source); statement i is on line i + 4."""
    body = "".join(f"    {line}\n" for line in statements)
    path = tmp_path / f"{name}.py"
    path.write_text(f"import torch\n\ndef {name}(keep):\n{body}")
    namespace = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace[name]


def levels():
    stats = torch.cuda.memory_stats(0)
    return stats["active_bytes.all.current"], stats["reserved_bytes.all.current"]


def reference(statements):
    """Per statement, run unprofiled: (active peak, reserved peak, active
    level after), relative to the levels at the start, from torch's own
    counters (peaks reset before each statement: this is the reference run,
    so resetting here is what we want)."""
    namespace = {"torch": torch, "keep": []}
    active0, reserved0 = levels()
    rows = []
    for line in statements:
        torch.cuda.reset_peak_memory_stats(0)
        exec(line, namespace)
        stats = torch.cuda.memory_stats(0)
        rows.append((stats["active_bytes.all.peak"] - active0,
                     stats["reserved_bytes.all.peak"] - reserved0,
                     stats["active_bytes.all.current"] - active0))
    namespace.clear()
    return rows


def profiled(func):
    assert sources.get_source("cuda", DEFAULTS) is shim.cuda_push_source
    keep = []
    prof = LineProfiler(func, device="cuda:0")
    with prof:
        func(keep)
    lines = {line["lineno"]: line for line in prof.stats()[0]["lines"] if line["count"]}
    del keep
    return lines


def check_against_reference(name, statements, tmp_path):
    func = make_function(name, statements, tmp_path)
    settle()
    expected = reference(statements)
    settle()
    active0, reserved0 = levels()
    lines = profiled(func)
    got = [(lines[i + 4]["active_bytes.all.peak"] - active0,
            lines[i + 4]["reserved_bytes.all.peak"] - reserved0)
           for i in range(len(statements))]
    assert got == [(a, r) for a, r, _ in expected]
    level = 0
    for i, (_, _, after) in enumerate(expected):
        level += lines[i + 4]["net_growth"]
        assert level == after, statements[i]
    assert expected[-1][0] > 0                      # the reference saw the bytes
    settle()


SEED = ["linear1 = torch.nn.Linear(100, 100).cuda()",
        "linear2 = torch.nn.Linear(100, 100).cuda()",
        "linear3 = torch.nn.Linear(100, 100).cuda()"]

SIDE_STREAM = [
    "side = torch.cuda.Stream()",
    "x = torch.ones(1 << 18, device='cuda')",
    "tmp = torch.empty(3 << 20, dtype=torch.uint8, device='cuda'); del tmp",
    "side.wait_stream(torch.cuda.current_stream())",
    "with torch.cuda.stream(side): y = x * 2",
    "x.record_stream(side)",
    "del x",
    "torch.cuda.synchronize()",
    "z = torch.empty(1 << 18, device='cuda')",
    "big = torch.empty(30 << 20, dtype=torch.uint8, device='cuda'); del big",
    "keep.append((y, z))",
]


@pytest.mark.cuda
@needs_shim
def test_seed_example_lines_match_torch(tmp_path):
    check_against_reference("seed", SEED, tmp_path)


@pytest.mark.cuda
@needs_shim
def test_side_stream_record_stream_lines_match_torch(tmp_path):
    check_against_reference("side_stream", SIDE_STREAM, tmp_path)
