"""One CUDA case each of the first call apart, growth per call and diff;
prints the figures it checks (run on the device by the merger)."""
import json
import os
from importlib import metadata
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from pytorch_memlab import LineProfiler, diff  # noqa: E402

from helpers import MiB, line_figures  # noqa: E402

pytestmark = pytest.mark.cuda
pytest_plugins = ["pytester"]
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


def test_cuda_first_call_apart():
    state.clear()
    line = line_figures(run(warm_step, 4), warm_step, "state.append")
    print("first call:", line["first_call"], "later:", line["later_calls"],
          "growth_per_call:", line["growth_per_call"])
    assert line["first_call"]["net_growth"] == 8 * MiB and line["first_call"]["count"] == 1
    assert line["later_calls"]["count"] == 0 and line["growth_per_call"] == 0


def test_cuda_growth_per_call():
    kept.clear()
    line = line_figures(run(leaky_step, 4), leaky_step, "kept.append")
    print("growth_per_call:", line["growth_per_call"], "net_growth:", line["net_growth"])
    assert line["growth_per_call"] == MiB and line["net_growth"] == 4 * MiB
    kept.clear()


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


def test_cuda_adam_state_is_before_the_later_calls():
    """The start levels of a train step whose first call makes Adam's state
    are torch's own counter read just before the calls, and the later calls
    start with at least that state more alive (cuBLAS's workspace, made by
    the first call's matmul, may add to it)."""
    torch.manual_seed(0)
    net = torch.nn.Linear(1024, 1024).cuda()
    opt = torch.optim.Adam(net.parameters())
    x = torch.randn(1536, 1024, device="cuda")

    def train_step():
        out = net(x)
        loss = out.pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()

    levels = []
    prof = LineProfiler(train_step, device="cuda")
    with prof:
        for _ in range(4):
            torch.cuda.synchronize()
            levels.append(torch.cuda.memory_stats()["active_bytes.all.current"])
            train_step()
    torch.cuda.synchronize()
    (record,) = prof.stats()
    state = sum(t.untyped_storage().nbytes() for s in opt.state.values() for t in s.values()
                if t.is_cuda)
    note = [row for row in repr(prof.display()).splitlines() if row.startswith("note:")]
    print("start_level:", record["start_level"], "levels:", levels, "state:", state, note)
    assert levels[1] == levels[2] == levels[3]
    assert record["start_level"] == {"first_call": levels[0], "later_calls": levels[1]}
    assert levels[1] - levels[0] >= state > 0
    torch.cuda.empty_cache()


GATE_TESTS = '''
import torch

def test_small():
    x = torch.empty({size}, device="cuda")
    assert x.numel() == {size}
'''


def test_cuda_pytest_gate(pytester, monkeypatch):
    """--memlab-save then --memlab-compare on CUDA: a test that grew by 2 MiB
    fails with the diff; a loose limit passes."""
    root = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(root)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    monkeypatch.delenv("CI", raising=False)
    plugin = [] if any(ep.value == "pytorch_memlab.pytest_plugin"
                       for ep in metadata.entry_points(group="pytest11")) \
        else ["-p", "pytorch_memlab.pytest_plugin"]

    def go(*args):
        return pytester.runpytest_subprocess(*plugin, "-p", "no:cacheprovider",
                                             "--memlab-device", "cuda", *args)
    pytester.makepyfile(test_gate=GATE_TESTS.format(size=1 << 18))           # 1 MiB
    saved = pytester.path / "peaks.json"
    first = go("--memlab-save", str(saved))
    assert first.ret == 0, first.stdout.str()
    small = json.loads(saved.read_text())["pytest_peaks"]["test_gate.py::test_small"]
    print("saved:", small["peak"], small["device"])
    assert small["peak"] == MiB and small["device"].startswith("cuda")
    pytester.makepyfile(test_gate=GATE_TESTS.format(size=3 << 18))           # 3 MiB
    second = go("--memlab-compare", str(saved), "--memlab-fail-on-increase", "1MiB")
    out = second.stdout.str()
    print(out[-600:])
    assert second.ret == 1, out
    assert "peak grew from 1.00M to 3.00M (+2.00M, +200.0%)" in out
    loose = go("--memlab-compare", str(saved), "--memlab-fail-on-increase", "250%")
    assert loose.ret == 0, loose.stdout.str()
