"""The saved-tensor hooks the kinds push inside a profiled call's modules
change nothing the program does: the user's own hooks (``save_on_cpu``,
offloading) stay the ones autograd calls, an in-place change to a saved
tensor still raises, torch.func's transforms still run, and nothing is left
on autograd's stack of hooks; a block stops being saved once autograd lets
go of it, with or without a backward; a forward left without our post hook
(KeyboardInterrupt), or a backward that raised, leaves nothing stale for the
next call."""
import pytest

from helpers import checked_peak, line_of

torch = pytest.importorskip("torch")

from pytorch_memlab import LineProfiler  # noqa: E402
from pytorch_memlab.line_profiler.wrapping import wrap  # noqa: E402

N = 250_000                   # float32 elements: 1,000,000 bytes
HOOKS = torch._C._autograd


def no_hooks_left():
    return HOOKS._top_saved_tensors_default_hooks(False) is None


class Exp(torch.nn.Module):
    def forward(self, x):
        return (x * 2).exp()               # exp keeps its result for backward


def test_the_users_own_hooks_stay_the_ones_autograd_calls():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    packed = []

    def pack(t):
        packed.append(tuple(t.shape))
        return t

    def step(x):
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = model(x).sum()
        out.backward()

    x = torch.randn(4, 8)
    step(x)
    unprofiled = list(packed)
    packed.clear()
    prof = LineProfiler(step, device="cpu")
    wrap(step, prof)(x)
    assert unprofiled and packed == unprofiled
    assert no_hooks_left()


class Inplace(torch.nn.Module):
    def forward(self, x):
        a = x.sigmoid()                    # sigmoid keeps its result...
        a.mul_(2)                          # ...which is changed in place
        return a


def test_an_inplace_change_to_a_saved_tensor_still_raises():
    def step(x):
        Inplace()(x).sum().backward()

    x = torch.randn(4, requires_grad=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        step(x)
    prof = LineProfiler(step, device="cpu")
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        wrap(step, prof)(x)
    assert no_hooks_left()

    # the backward that raised left no module charged on this thread
    def outside():
        kept = torch.ones(N)
        big = torch.empty(16 * N, dtype=torch.uint8).fill_(1)    # the peak
        del big
        return kept

    prof = LineProfiler(outside, device="cpu")
    wrap(outside, prof)()
    peak, held = checked_peak(prof.stats()[0])
    assert peak["by_module"] == {"(no module)": sum(held.values())}


def test_torch_func_transforms_run_in_a_profiled_call():
    model = torch.nn.Linear(8, 1)
    params = dict(model.named_parameters())

    def loss(p, x):
        return torch.func.functional_call(model, p, (x,)).square().sum()

    def step(x):
        return torch.func.grad(loss)(params, x)

    x = torch.randn(4, 8)
    expected = step(x)
    prof = LineProfiler(step, device="cpu")
    got = wrap(step, prof)(x)
    assert all(torch.equal(got[k], expected[k]) for k in expected)
    assert no_hooks_left()


def test_a_block_is_no_longer_saved_once_its_graph_is_gone():
    def step(x):
        out = Exp()(x)                     # out: kept by exp's node
        kept = out.detach()                # the same block, without the graph
        del out                            # the graph goes, no backward ran
        big = torch.empty(16 * N, dtype=torch.uint8).fill_(1)   # the peak
        del big
        return kept

    x = torch.randn(N, requires_grad=True)
    prof = LineProfiler(step, device="cpu")
    wrap(step, prof)(x)
    peak, _ = checked_peak(prof.stats()[0])
    assert peak["lineno"] == line_of(step, "torch.empty")
    kinds = peak["lines_by_kind"][line_of(step, "Exp()(x)")]
    assert kinds == {"temporary": 4 * N}


class Interrupted(torch.nn.Module):
    def forward(self, x):
        raise KeyboardInterrupt


def test_a_forward_left_by_keyboard_interrupt_leaves_nothing_stale():
    prof = LineProfiler(lambda: None, device="cpu")
    prof.enable()
    with pytest.raises(KeyboardInterrupt):
        Interrupted()(torch.randn(2))      # torch skips the post hooks
    prof.disable()

    model = torch.nn.Linear(256, 256)

    def step(x):
        return model(x).sum()

    prof = LineProfiler(step, device="cpu")
    wrap(step, prof)(torch.randn(4, 256))
    peak, _ = checked_peak(prof.stats()[0])
    params = sum(p.untyped_storage().nbytes() for p in model.parameters())
    assert peak["before_call_by_kind"].get("parameter") == params
    assert "Linear" in peak["by_module"] or peak["by_module"].keys() <= {"(no module)"}
    assert no_hooks_left()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 64)

    def forward(self, x):
        return self.fc(x).relu()


def test_a_compiled_model_reads_as_the_model_it_compiled():
    model = torch.compile(Net(), backend="eager")

    def step(x):
        out = model(x)
        big = torch.empty(1 << 20, dtype=torch.uint8).fill_(1)   # the peak: out held
        del big
        return out

    prof = LineProfiler(step, device="cpu")
    wrap(step, prof)(torch.randn(512, 64))
    peak, _ = checked_peak(prof.stats()[0])
    assert "Net" in peak["by_module"] and "OptimizedModule" not in peak["by_module"]
    assert peak["by_module_stopped_at"] == ["Net"]


def test_where_torch_cannot_say_what_is_on_top_ours_still_come_off(monkeypatch):
    from pytorch_memlab.kinds import saved
    monkeypatch.setattr(saved, "_top_of", None)      # torch before 2.8
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())

    def step(x):
        model(x).sum().backward()

    prof = LineProfiler(step, device="cpu")
    for _ in range(3):
        wrap(step, prof)(torch.randn(4, 8))
    assert no_hooks_left()
    checked_peak(prof.stats()[0])          # and the kinds still sum exactly
