"""Which source a profiler reads (pytorch_memlab.sources.choice): the shim's
capsules, the typed choice, and without the shim the fallback, its warning
and its errors."""
import warnings

import pytest

torch = pytest.importorskip("torch")

from pytorch_memlab import _install, sources  # noqa: E402
from pytorch_memlab.sources import choice, cuda_fallback, native  # noqa: E402

shim = pytest.importorskip("pytorch_memlab._torchshim")


def test_get_source_returns_capsules():
    assert sources.get_source("cpu") is shim.cpu_source
    if hasattr(shim, "cuda_source"):
        assert sources.get_source("cuda") is shim.cuda_source
    assert sources.source_fields("cpu") == shim.fields("cpu")
    with pytest.raises(ValueError, match="unknown source kind"):
        sources.get_source("tpu")


def test_choice_says_source_path_and_why():
    cpu = sources.choose("cpu")
    assert (cpu.kind, cpu.source, cpu.origin, cpu.path, cpu.why) == (
        "cpu", shim.cpu_source, "shim", shim.path("cpu"), None)
    assert cpu.compiled
    if hasattr(shim, "cuda_source"):
        polled = sources.choose("cuda")          # no columns named: the polled source
        assert (polled.source, polled.origin, polled.path) == (shim.cuda_source, "shim", "poll")


@pytest.fixture
def no_shim(monkeypatch):
    def broken():
        raise ImportError("simulated: undefined symbol after a torch upgrade")

    monkeypatch.setattr(native, "import_shim", broken)
    monkeypatch.setattr(native, "_shim_state", None)
    monkeypatch.setattr(choice, "_warned", False)
    monkeypatch.delenv(sources.REQUIRE_SHIM_ENV, raising=False)


def test_fallback_warns_once(no_shim):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = sources.get_source("cuda")
        second = sources.get_source("cuda")
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1, messages
    assert _install.rebuild_command() in messages[0]
    assert "simulated" in messages[0]
    for source in (first, second):
        assert isinstance(source, cuda_fallback.CudaFallbackSource)
        assert source.name == "cuda"
    if torch.cuda.is_available():
        assert len(first.fields) >= 122
    else:
        for ask in (first.prepare, lambda _: first.fields):
            with pytest.raises(RuntimeError, match="CUDA is not available"):
                ask(0)


def test_choice_without_the_shim(no_shim):
    cuda, cpu = sources.choose("cuda"), sources.choose("cpu")
    assert isinstance(cuda.source, cuda_fallback.CudaFallbackSource)
    assert (cuda.origin, cuda.path, cuda.compiled) == ("python fallback", "poll", False)
    assert "simulated" in cuda.why
    assert (cpu.source, cpu.origin, cpu.path) == (None, None, None)
    assert "CPU profiling needs the compiled shim" in cpu.why and "simulated" in cpu.why


def test_fallback_cpu_is_a_clear_error(no_shim):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no fallback warning for CPU: it is an error
        with pytest.raises(RuntimeError, match="CPU memory profiling needs") as info:
            sources.get_source("cpu")
    assert _install.rebuild_command() in str(info.value)
    with pytest.raises(RuntimeError, match="CPU memory profiling needs"):
        sources.source_fields("cpu")


def test_require_shim_env_makes_missing_shim_an_import_error(no_shim, monkeypatch):
    monkeypatch.setenv(sources.REQUIRE_SHIM_ENV, "1")
    for kind in ("cuda", "cpu"):
        with pytest.raises(ImportError, match=sources.REQUIRE_SHIM_ENV):
            sources.get_source(kind)


def test_flatten_matches_memory_stats_rules():
    nested = {
        "num_ooms": 0,
        "active_bytes": {"all": {"peak": 5, "current": 2}},
        "reserved_bytes_by_private_pools": {(0, 1): {"all": {"current": 7}}},
    }
    flat = cuda_fallback.flatten_stats(nested)
    assert list(flat) == ["active_bytes.all.current", "active_bytes.all.peak",
                          "num_ooms", "reserved_bytes_by_private_pools.0_1.all.current"]
    assert flat["reserved_bytes_by_private_pools.0_1.all.current"] == 7


def test_warnings_name_the_line_that_asked(no_shim, monkeypatch):
    monkeypatch.setattr(choice, "_warned_resets", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sources.get_source("cuda", ("active_bytes.all.peak",))
    assert [w.filename for w in caught] == [__file__, __file__]   # polled peaks, the fallback
