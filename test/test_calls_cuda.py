"""One CUDA case each of the first call apart, growth per call and diff;
prints the figures it checks (run on the device by the merger)."""
import pytest

torch = pytest.importorskip("torch")

from pytorch_memlab import LineProfiler, diff  # noqa: E402

from helpers import MiB, line_figures  # noqa: E402

pytestmark = pytest.mark.cuda
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
state, kept = [], []


def warm_step():
    if not state:
        state.append(torch.empty(2 * MiB, dtype=torch.float32, device="cuda"))   # 8 MiB
    y = torch.empty(MiB // 4, device="cuda")
    return y


def leaky_step():
    kept.append(torch.empty(MiB // 4, device="cuda"))                           # 1 MiB
    return len(kept)


def run(func, calls):
    prof = LineProfiler(func, device="cuda")
    with prof:
        for _ in range(calls):
            func()
    torch.cuda.synchronize()
    return prof


@cuda
def test_cuda_first_call_apart():
    state.clear()
    line = line_figures(run(warm_step, 4), warm_step, "state.append")
    print("first call:", line["first_call"], "later:", line["later_calls"],
          "growth_per_call:", line["growth_per_call"])
    assert line["first_call"]["net_growth"] == 8 * MiB and line["first_call"]["count"] == 1
    assert line["later_calls"]["count"] == 0 and line["growth_per_call"] == 0


@cuda
def test_cuda_growth_per_call():
    kept.clear()
    line = line_figures(run(leaky_step, 4), leaky_step, "kept.append")
    print("growth_per_call:", line["growth_per_call"], "net_growth:", line["net_growth"])
    assert line["growth_per_call"] == MiB and line["net_growth"] == 4 * MiB
    kept.clear()


@cuda
def test_cuda_diff():
    kept.clear()
    old = run(leaky_step, 1).to_profile()
    kept.clear()
    new = run(leaky_step, 3).to_profile()
    (fd,) = diff(old, new).functions
    print(fd.summary())
    line = next(ln for ln in fd.lines if "kept.append" in ln.code)
    assert line.change("net_growth") == 2 * MiB
    kept.clear()


def held_step():
    kept.append(torch.empty(MiB // 4, device="cuda"))                           # 1 MiB
    out = torch.empty(MiB, device="cuda")                                       # 4 MiB held
    return out


@cuda
def test_cuda_held_result_beside_a_leak():
    """The result the caller holds until the next call is not marked; the
    line that keeps 1 MiB per call is (the frees charged to what they fit)."""
    kept.clear()
    prof = LineProfiler(held_step, device="cuda")
    with prof:
        result = None
        for _ in range(5):
            result = held_step()
        del result
    torch.cuda.synchronize()
    held = line_figures(prof, held_step, "out = torch.empty")
    leak = line_figures(prof, held_step, "kept.append")
    print("held:", held["growth_per_call"], "leak:", leak["growth_per_call"])
    assert held["growth_per_call"] == 0 and leak["growth_per_call"] == MiB
    kept.clear()
