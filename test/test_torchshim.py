"""The torch shim (src/torchshim/) and its Python face, pytorch_memlab.native.

CPU tests run everywhere torch does; CUDA tests skip without a GPU.  Tests
that could abort the process (a bad allocator wrapper trips internal asserts
in oneDNN) run in a subprocess.
"""
import os
import subprocess
import sys
import textwrap
import threading
import warnings

import pytest

torch = pytest.importorskip("torch")

from pytorch_memlab import native  # noqa: E402

shim = pytest.importorskip("pytorch_memlab._torchshim")

MiB = 1 << 20
requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


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
    table = native.field_table("cpu")
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
    for field in native.field_table("cuda"):
        assert field == native._torch_meaning(field.name), field
    assert native.field_meaning("max_split_size").unit == "bytes"
    assert native.field_meaning("segment.large_pool.peak") == ("segment.large_pool.peak",
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
@requires_cuda
def test_cuda_fields_equal_memory_stats_keys(cuda_ready):
    assert list(shim.fields("cuda")) == _memory_stats_keys()


@pytest.mark.cuda
@requires_cuda
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
@requires_cuda
def test_cuda_reset_peaks(cuda_ready):
    x = torch.empty(8 * MiB, dtype=torch.uint8, device="cuda:0")
    del x
    shim.reset_peaks("cuda", 0)
    values = dict(zip(shim.fields("cuda"), shim.sample("cuda", 0)))
    assert values["allocated_bytes.all.peak"] == values["allocated_bytes.all.current"]
    assert torch.cuda.max_memory_allocated(0) == torch.cuda.memory_allocated(0)


@pytest.mark.cuda
@requires_cuda
def test_cuda_bad_device_is_an_error_not_a_crash(cuda_ready):
    bad = torch.cuda.device_count() + 5
    with pytest.raises(RuntimeError):
        shim.prepare("cuda", bad)
    with pytest.raises(RuntimeError):
        shim.sample("cuda", bad)


@pytest.mark.cuda
@requires_cuda
def test_cuda_fallback_agrees_with_shim(cuda_ready):
    fallback = native.CudaFallbackSource()
    fallback.prepare(0)
    assert fallback.fields == shim.fields("cuda")
    x = torch.empty(MiB, dtype=torch.uint8, device="cuda:0")
    assert list(fallback.sample(0)) == list(shim.sample("cuda", 0))
    del x
    assert native._flatten(torch._C._cuda_memoryStats(0)) == dict(torch.cuda.memory_stats(0))


# --------------------------------------------------------------------------
# native: the shim path and the fallback path


def test_get_source_returns_capsules():
    assert native.get_source("cpu") is shim.cpu_source
    if hasattr(shim, "cuda_source"):
        assert native.get_source("cuda") is shim.cuda_source
    assert native.source_fields("cpu") == shim.fields("cpu")
    with pytest.raises(ValueError, match="unknown source kind"):
        native.get_source("tpu")


@pytest.fixture
def no_shim(monkeypatch):
    def broken():
        raise ImportError("simulated: undefined symbol after a torch upgrade")

    monkeypatch.setattr(native, "_import_shim", broken)
    monkeypatch.setattr(native, "_shim_state", None)
    monkeypatch.setattr(native, "_warned", False)
    monkeypatch.delenv(native.REQUIRE_SHIM_ENV, raising=False)


def test_fallback_warns_once(no_shim):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = native.get_source("cuda")
        second = native.get_source("cuda")
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1, messages
    assert native.rebuild_command() in messages[0]
    assert "simulated" in messages[0]
    for source in (first, second):
        assert isinstance(source, native.CudaFallbackSource)
        assert source.name == "cuda"
    if torch.cuda.is_available():
        assert len(first.fields) >= 122
    else:
        for ask in (first.prepare, lambda _: first.fields):
            with pytest.raises(RuntimeError, match="CUDA is not available"):
                ask(0)


def test_fallback_cpu_is_a_clear_error(no_shim):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning for CPU: it is an error
        with pytest.raises(RuntimeError, match="CPU memory profiling needs") as info:
            native.get_source("cpu")
    assert native.rebuild_command() in str(info.value)
    with pytest.raises(RuntimeError, match="CPU memory profiling needs"):
        native.source_fields("cpu")


def test_require_shim_env_makes_missing_shim_an_import_error(no_shim, monkeypatch):
    monkeypatch.setenv(native.REQUIRE_SHIM_ENV, "1")
    for kind in ("cuda", "cpu"):
        with pytest.raises(ImportError, match=native.REQUIRE_SHIM_ENV):
            native.get_source(kind)


def test_flatten_matches_memory_stats_rules():
    nested = {
        "num_ooms": 0,
        "active_bytes": {"all": {"peak": 5, "current": 2}},
        "reserved_bytes_by_private_pools": {(0, 1): {"all": {"current": 7}}},
    }
    flat = native._flatten(nested)
    assert list(flat) == ["active_bytes.all.current", "active_bytes.all.peak",
                          "num_ooms", "reserved_bytes_by_private_pools.0_1.all.current"]
    assert flat["reserved_bytes_by_private_pools.0_1.all.current"] == 7
