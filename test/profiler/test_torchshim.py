"""The torch shim (src/torchshim/) and its Python face: pytorch_memlab.sources:
native (the boundary), choice (which source a profiler reads) and cuda_fallback.

CPU tests run everywhere torch does; CUDA tests skip without a GPU.  Tests
that could abort the process (a bad allocator wrapper trips internal asserts
in oneDNN) run in a subprocess.
"""
import os
import subprocess
import sys
import textwrap
import threading

import pytest

torch = pytest.importorskip("torch")

from pytorch_memlab import sources  # noqa: E402
from pytorch_memlab.sources import cuda_fallback  # noqa: E402
from pytorch_memlab.records.meanings import torch_meaning  # noqa: E402

shim = pytest.importorskip("pytorch_memlab._torchshim")

from helpers import MiB  # noqa: E402


def cpu_reading() -> dict:
    return dict(zip(shim.fields("cpu"), shim.sample("cpu", 0)))


def delta(after: dict, before: dict) -> dict:
    return {k: after[k] - before[k] for k in after}


# --------------------------------------------------------------------------
# CPU source


@pytest.fixture
def cpu_source():
    shim.prepare("cpu", 0)  # installs the counting allocator once per process
    return shim.cpu_source


def test_cpu_fields_declare_their_kind_and_unit():
    table = sources.field_table("cpu")
    assert tuple(f.name for f in table) == shim.fields("cpu")
    assert len(set(table)) == 12
    meaning = {f.name: (f.kind, f.unit) for f in table}
    assert meaning["active_bytes.all.peak"] == ("peak", "bytes")
    assert meaning["active_bytes.all.allocated"] == ("counter", "bytes")
    assert meaning["allocation.all.freed"] == ("counter", "count")
    assert meaning["allocation.all.current"] == ("level", "count")
    assert meaning["reserved_bytes.all.current"] == ("level", "bytes")
    tracer = pytest.importorskip("pytorch_memlab._tracer")
    assert tracer.source_info(shim.cpu_source) == ("cpu", shim.fields("cpu"))


def test_cpu_exact_bytes(cpu_source):
    shim.reset_peaks("cpu", 0)
    before = cpu_reading()
    assert before["active_bytes.all.peak"] == before["active_bytes.all.current"]

    x = torch.empty(MiB // 4, dtype=torch.float32)  # exactly 1 MiB
    during = delta(cpu_reading(), before)
    assert during["active_bytes.all.current"] == MiB
    assert during["active_bytes.all.allocated"] == MiB
    assert during["active_bytes.all.peak"] == MiB
    assert during["active_bytes.all.freed"] == 0
    assert during["allocation.all.current"] == 1
    assert during["allocation.all.allocated"] == 1
    # reserved == active on CPU: nothing is cached.
    for metric in ("current", "peak", "allocated", "freed"):
        assert during[f"reserved_bytes.all.{metric}"] == during[f"active_bytes.all.{metric}"]

    del x
    after = delta(cpu_reading(), before)
    assert after["active_bytes.all.current"] == 0
    assert after["active_bytes.all.freed"] == MiB
    assert after["active_bytes.all.allocated"] == MiB
    assert after["active_bytes.all.peak"] == MiB  # peak survives the free
    assert after["allocation.all.current"] == 0
    assert after["allocation.all.freed"] == 1

    shim.reset_peaks("cpu", 0)
    reset = cpu_reading()
    assert reset["active_bytes.all.peak"] == reset["active_bytes.all.current"]
    assert reset["allocation.all.peak"] == reset["allocation.all.current"]
    # Accumulated counters are left alone.
    assert reset["active_bytes.all.allocated"] == before["active_bytes.all.allocated"] + MiB


def test_cpu_peak_tracks_the_high_water_mark(cpu_source):
    shim.reset_peaks("cpu", 0)
    base = cpu_reading()["active_bytes.all.current"]
    a = torch.empty(MiB, dtype=torch.uint8)
    b = torch.empty(2 * MiB, dtype=torch.uint8)
    del a, b
    c = torch.empty(MiB, dtype=torch.uint8)
    r = cpu_reading()
    assert r["active_bytes.all.peak"] - base == 3 * MiB
    assert r["active_bytes.all.current"] - base == MiB
    del c


def test_cpu_counts_stay_consistent_across_threads(cpu_source):
    before = cpu_reading()

    def churn():
        for _ in range(200):
            t = torch.empty(1000, dtype=torch.uint8)
            del t

    threads = [threading.Thread(target=churn) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    d = delta(cpu_reading(), before)
    assert d["allocation.all.current"] == 0
    assert d["active_bytes.all.current"] == 0
    # 4 threads x 200 tensors of 1000 bytes, each freed
    assert d["allocation.all.allocated"] == d["allocation.all.freed"] == 800
    assert d["active_bytes.all.allocated"] == d["active_bytes.all.freed"] == 800 * 1000


def test_cpu_many_blocks_freed_in_any_order_are_each_counted(cpu_source):
    """The wrapper's table of live blocks (address -> size) through growth,
    collisions and removals in random order, with addresses reused: after
    every step the live bytes are exactly those of the tensors kept."""
    import gc
    import random
    rng = random.Random(7)
    # the counts are the process's: an earlier test's tensors in reference
    # cycles, collected in the middle, would be frees this test did not make
    gc.collect()
    gc.disable()
    try:
        base = cpu_reading()
        kept = {}
        for step in range(40):
            for i in range(rng.randrange(200, 1500)):
                n = rng.randrange(1, 5000)
                kept[(step, i)] = torch.empty(n, dtype=torch.uint8)
            for key in rng.sample(sorted(kept), k=len(kept) // 2):
                del kept[key]
            d = delta(cpu_reading(), base)
            assert d["active_bytes.all.current"] == sum(t.numel() for t in kept.values())
            assert d["allocation.all.current"] == len(kept)
        kept.clear()
    finally:
        gc.enable()
    d = delta(cpu_reading(), base)
    assert d["active_bytes.all.current"] == 0 and d["allocation.all.current"] == 0


def test_cpu_prepare_is_idempotent_and_device_is_ignored(cpu_source):
    shim.prepare("cpu", 0)
    shim.prepare("cpu", 3)
    before = dict(zip(shim.fields("cpu"), shim.sample("cpu", 3)))
    x = torch.empty(MiB, dtype=torch.uint8)
    d = delta(dict(zip(shim.fields("cpu"), shim.sample("cpu", 3))), before)
    # one counting wrapper however often prepared: each byte counted once
    assert (d["active_bytes.all.allocated"], d["allocation.all.allocated"]) == (MiB, 1)
    assert shim.sample("cpu", 3) == shim.sample("cpu", 0)
    del x


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_cpu_fork_child_can_allocate(cpu_source):
    pid = os.fork()
    if pid == 0:  # child: the side table's mutex must not be stuck
        code = 1
        try:
            x = torch.ones(1000)
            code = 0 if float(x.sum()) == 1000.0 else 2
            del x
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0


ONEDNN_SCRIPT = textwrap.dedent("""
    import torch
    import torch.nn.functional as F
    import torch.utils.mkldnn
    from pytorch_memlab import _torchshim as shim

    # Made before the wrapper exists: freeing it later must not abort.
    early = torch.randn(2, 3, 8, 8).to_mkldnn()
    early_plain = torch.randn(4096)
    shim.prepare("cpu", 0)

    x = torch.randn(4, 3, 32, 32)
    w = torch.randn(8, 3, 3, 3)
    assert F.conv2d(x, w).shape == (4, 8, 30, 30)
    m = x.to_mkldnn()
    assert torch.equal(m.to_dense(), x)
    conv = torch.utils.mkldnn.to_mkldnn(torch.nn.Conv2d(3, 8, 3))
    assert conv(m).to_dense().shape == (4, 8, 30, 30)
    del early, early_plain, m, conv
    fields = dict(zip(shim.fields("cpu"), shim.sample("cpu", 0)))
    assert fields["allocation.all.allocated"] > 0
    print("ok")
""")


def test_cpu_wrapper_onednn_in_fresh_process():
    if not torch.backends.mkldnn.is_available():
        pytest.skip("torch built without oneDNN")
    proc = subprocess.run([sys.executable, "-c", ONEDNN_SCRIPT],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


# --------------------------------------------------------------------------
# CUDA source: names everywhere, values on a GPU


def test_cuda_source_names():
    if not hasattr(shim, "cuda_source"):
        pytest.skip("shim built without a CUDA source (torch < 2.9)")
    fields = shim.fields("cuda")
    assert list(fields) == sorted(fields)
    assert len(set(fields)) == len(fields)
    for name in ("active_bytes.all.peak", "reserved_bytes.large_pool.current",
                 "requested_bytes.small_pool.freed", "oversize_segments.allocated",
                 "num_alloc_retries", "num_ooms", "max_split_size"):
        assert name in fields
    assert len(fields) >= 122   # torch 2.11 reports 122; newer torch may add more
    # The shim states each unit and kind beside DeviceStats' members; torch
    # states them in the key's name: the two must agree.
    for field in sources.field_table("cuda"):
        assert field == torch_meaning(field.name), field
    assert sources.field_meaning("max_split_size").unit == "bytes"
    assert sources.field_meaning("segment.large_pool.peak") == ("segment.large_pool.peak",
                                                                "peak", "count")
    tracer = pytest.importorskip("pytorch_memlab._tracer")
    assert tracer.source_info(shim.cuda_source) == ("cuda", fields)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA message")
def test_cuda_prepare_fails_clearly_without_cuda():
    if not hasattr(shim, "cuda_source"):
        pytest.skip("shim built without a CUDA source (torch < 2.9)")
    with pytest.raises(RuntimeError, match="CUDA is not"):
        shim.prepare("cuda", 0)
    with pytest.raises(RuntimeError):
        shim.sample("cuda", 0)


@pytest.fixture
def cuda_ready():
    torch.cuda.init()
    shim.prepare("cuda", 0)


def _memory_stats_keys() -> list:
    return [k for k in torch.cuda.memory_stats(0)
            if not k.startswith("reserved_bytes_by_private_pools.")]


@pytest.mark.cuda
def test_cuda_fields_equal_memory_stats_keys(cuda_ready):
    assert list(shim.fields("cuda")) == _memory_stats_keys()


@pytest.mark.cuda
def test_cuda_values_equal_memory_stats(cuda_ready):
    x = torch.empty(3 * MiB, dtype=torch.uint8, device="cuda:0")
    torch.cuda.synchronize()
    values = dict(zip(shim.fields("cuda"), shim.sample("cuda", 0)))
    expected = torch.cuda.memory_stats(0)
    for key in ("allocated_bytes.all.current", "allocated_bytes.all.peak",
                "active_bytes.all.current", "reserved_bytes.all.current",
                "requested_bytes.all.allocated", "allocation.all.current",
                "segment.all.current", "num_alloc_retries", "num_ooms"):
        assert values[key] == expected[key], key
    assert values["allocated_bytes.all.current"] >= 3 * MiB
    del x


@pytest.mark.cuda
def test_cuda_reset_peaks(cuda_ready):
    x = torch.empty(8 * MiB, dtype=torch.uint8, device="cuda:0")
    del x
    shim.reset_peaks("cuda", 0)
    values = dict(zip(shim.fields("cuda"), shim.sample("cuda", 0)))
    assert values["allocated_bytes.all.peak"] == values["allocated_bytes.all.current"]
    assert torch.cuda.max_memory_allocated(0) == torch.cuda.memory_allocated(0)


@pytest.mark.cuda
def test_cuda_bad_device_is_an_error_not_a_crash(cuda_ready):
    bad = torch.cuda.device_count() + 5
    with pytest.raises(RuntimeError):
        shim.prepare("cuda", bad)
    with pytest.raises(RuntimeError):
        shim.sample("cuda", bad)


@pytest.mark.cuda
def test_cuda_fallback_agrees_with_shim(cuda_ready):
    fallback = cuda_fallback.CudaFallbackSource()
    fallback.prepare(0)
    assert fallback.fields == shim.fields("cuda")
    x = torch.empty(MiB, dtype=torch.uint8, device="cuda:0")
    assert list(fallback.sample(0)) == list(shim.sample("cuda", 0))
    del x
    assert cuda_fallback.flatten_stats(torch._C._cuda_memoryStats(0)) == dict(torch.cuda.memory_stats(0))
