"""What a peak is made of by kind, with real torch on the CPU: an MLP and
Adam.  Parameters, gradients and optimizer state are the bytes of their
storages exactly; each nn.Linear's saved input is B*D*itemsize; every part
of the peak sums exactly (helpers.check_kinds); the hooks are on only while a
profiled call runs, and nothing the program computes changes."""
import threading

import pytest

from helpers import checked_peak, line_of

torch = pytest.importorskip("torch")

from pytorch_memlab import LineProfiler  # noqa: E402
from pytorch_memlab.html_report import render_report  # noqa: E402
from pytorch_memlab.kinds import tagging  # noqa: E402
from pytorch_memlab.line_profiler.wrapping import wrap  # noqa: E402

B, D = 4, 128
ITEM = 4


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(D, D), torch.nn.ReLU(), torch.nn.Linear(D, D),
                               torch.nn.ReLU(), torch.nn.Linear(D, D))


def nbytes(tensors):
    return sum(t.untyped_storage().nbytes() for t in tensors)


def train_step(model, opt, x):
    opt.zero_grad(set_to_none=True)
    loss = model(x).square().mean()
    loss.backward()
    opt.step()                                      # the peak: Adam's update
    return loss.detach()


def test_parameters_gradients_and_adam_state_are_their_storages():
    model, x = mlp(), torch.randn(B, D)
    opt = torch.optim.Adam(model.parameters())
    prof = LineProfiler(train_step, device="cpu")
    with prof:
        train_step(model, opt, x)
        train_step(model, opt, x)
    peak, held = checked_peak(prof.stats()[0])
    params = list(model.parameters())
    state = [v for s in opt.state.values() for v in s.values()]
    assert peak["lineno"] == line_of(train_step, "# the peak")
    assert peak["by_kind"]["parameter"] == nbytes(params)
    assert peak["by_kind"]["gradient"] == nbytes(p.grad for p in params)
    # Adam: exp_avg and exp_avg_sq like each parameter, and a float32 step count each
    assert peak["by_kind"]["optimizer_state"] == nbytes(state) == \
        2 * nbytes(params) + ITEM * len(params)
    assert "saved_for_backward" not in peak["by_kind"]     # backward freed them


def forward_loss(model, x):
    out = model(x)                                  # forward
    return out.sum()


def test_each_linear_keeps_its_input_for_backward():
    model, x = mlp(), torch.randn(B, D)
    prof = LineProfiler(forward_loss, device="cpu")
    with prof:
        loss = forward_loss(model, x)
    peak, held = checked_peak(prof.stats()[0])
    activation = B * D * ITEM
    # the three inputs of the Linears (x, and each ReLU's output, which ReLU keeps too)
    assert peak["by_kind"]["saved_for_backward"] == 3 * activation
    before = peak["before_call_by_kind"]        # (and whatever else the process holds)
    assert before["parameter"] == nbytes(model.parameters())
    assert before["saved_for_backward"] == activation
    assert peak["lines_by_kind"][line_of(forward_loss, "# forward")] == \
        {"saved_for_backward": 2 * activation, "temporary": activation}
    # the module that made each Linear's saved input (x was made before the call)
    assert [peak["modules_by_kind"][name] for name in ("Sequential.1", "Sequential.3")] == \
        [{"saved_for_backward": activation}] * 2
    loss.backward()
    text = repr(prof.display())
    assert "\nby kind: " in text and " saved for backward" in text
    line = next(l for l in text.splitlines() if l.startswith("by kind: "))
    assert "<br>" + line + "<br>by module: " in prof.display()._repr_html_()  # the notebook
    assert f'<p class="peaknote">{line}</p>' in render_report(prof)         # the HTML report


def test_the_hooks_are_on_only_while_a_profiled_call_runs():
    model, x = mlp(), torch.randn(B, D)
    opt = torch.optim.Adam(model.parameters())
    prof = LineProfiler(train_step, device="cpu")
    assert not tagging.hooks_on()
    with prof:
        assert tagging.hooks_on()
        train_step(model, opt, x)
    assert not tagging.hooks_on()
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None
    from torch.nn.modules import module
    from torch.optim import optimizer
    ours = {tagging._module_pre, tagging._module_post, tagging._optimizer_pre,
            tagging._optimizer_post}
    hooks = [*module._global_forward_pre_hooks.values(), *module._global_forward_hooks.values(),
             *optimizer._global_optimizer_pre_hooks.values(),
             *optimizer._global_optimizer_post_hooks.values()]
    assert not ours & set(hooks)
    # a decorated call: on while it runs, off after it, however the tracer parks
    seen = []

    def step_seeing_hooks(*args):
        seen.append(tagging.hooks_on())
        return train_step(*args)
    decorated = LineProfiler(step_seeing_hooks, device="cpu")
    wrapped = wrap(step_seeing_hooks, decorated)
    wrapped(model, opt, x)
    assert seen == [True] and not tagging.hooks_on()
    checked_peak(decorated.stats()[0])


def test_what_the_program_computes_is_the_same():
    def run(profiled):
        model, x = mlp(), torch.randn(B, D, generator=torch.Generator().manual_seed(1))
        opt = torch.optim.Adam(model.parameters())
        prof = LineProfiler(train_step, device="cpu")
        losses = []
        for _ in range(3):
            if profiled:
                with prof:
                    losses.append(train_step(model, opt, x))
            else:
                losses.append(train_step(model, opt, x))
        return losses, [p.detach().clone() for p in model.parameters()]
    plain, profiled = run(False), run(True)
    assert all(torch.equal(a, b) for a, b in zip(plain[0], profiled[0]))
    assert all(torch.equal(a, b) for a, b in zip(plain[1], profiled[1]))


def outer_step(model, opt, x):
    loss = forward_loss(model, x)                   # nested
    loss.backward()
    opt.step()
    return loss.detach()


def test_nested_profiled_functions_each_sum_exactly():
    model, x = mlp(), torch.randn(B, D)
    opt = torch.optim.Adam(model.parameters())
    prof = LineProfiler(outer_step, forward_loss, device="cpu")
    with prof:
        outer_step(model, opt, x)
    records = {r.qualname: r for r in prof.stats()}
    outer, _ = checked_peak(records["outer_step"])
    inner, _ = checked_peak(records["forward_loss"])
    assert outer["by_kind"]["parameter"] == inner["by_kind"]["parameter"] == \
        nbytes(model.parameters())
    assert inner["by_kind"]["saved_for_backward"] == 3 * B * D * ITEM
    assert outer["by_kind"]["optimizer_state"] == nbytes(
        v for s in opt.state.values() for v in s.values())


def two_models(models, x, barrier):
    done = []

    def work(model):
        barrier.wait()
        done.append(model(x).sum())
    threads = [threading.Thread(target=work, args=(m,)) for m in models]
    for t in threads:
        t.start()
    for t in threads:
        t.join()                                    # both ran
    return done


def test_two_threads_running_modules_sum_exactly():
    models, x = [mlp(), mlp()], torch.randn(B, D)
    prof = LineProfiler(two_models, device="cpu")
    with prof:
        two_models(models, x, threading.Barrier(2))
    peak, _ = checked_peak(prof.stats()[0])
    assert peak["by_kind"]["parameter"] == sum(nbytes(m.parameters()) for m in models)


def batches(model, x, n):
    for _ in range(n):
        out = model(x)                              # each batch
        yield out.sum()


def test_a_generator_sums_exactly():
    model, x = mlp(), torch.randn(B, D)
    prof = LineProfiler(batches, device="cpu")
    with prof:
        losses = list(batches(model, x, 3))
    peak, _ = checked_peak(prof.stats()[0])
    assert peak["by_kind"]["parameter"] == nbytes(model.parameters())
    assert peak["by_kind"]["saved_for_backward"] >= 3 * B * D * ITEM
    del losses


def test_a_parameter_in_memory_no_allocator_made_is_left_out():
    np = pytest.importorskip("numpy")
    lin = torch.nn.Linear(D, D)
    # a numpy array's memory: the counting allocator never saw it, so it is in
    # no figure of the peak, and tagging it would make the kinds wrong
    lin.weight = torch.nn.Parameter(torch.from_numpy(np.ones((D, D), dtype=np.float32)))
    x = torch.randn(B, D)
    prof = LineProfiler(linear_sum, device="cpu")
    with prof:
        linear_sum(lin, x)
    peak, _ = checked_peak(prof.stats()[0])
    assert "by_kind_missing" not in peak
    assert peak["by_kind"]["parameter"] == lin.bias.untyped_storage().nbytes()


def linear_sum(lin, x):
    return lin(x).sum()


class Waits(torch.nn.Module):
    """A module whose forward waits for a go (another thread's profiled call
    ends meanwhile)."""

    def __init__(self, entered, go):
        super().__init__()
        self.lin = torch.nn.Linear(D, D)
        self.entered, self.go = entered, go

    def forward(self, x):
        self.entered.set()
        self.go.wait()
        return self.lin(x)


def test_a_thread_inside_a_module_when_the_call_ends_pops_what_was_pushed():
    entered, go = threading.Event(), threading.Event()
    model, x, after = Waits(entered, go), torch.randn(B, D), []

    def other_thread():
        model(x)
        after.append(torch._C._autograd._top_saved_tensors_default_hooks(False))
    prof = LineProfiler(forward_loss, device="cpu")
    thread = threading.Thread(target=other_thread, daemon=True)
    try:
        with prof:
            thread.start()
            assert entered.wait(60)
        # the call ended: the hooks that start things are off, the one that pops stays
        assert tagging.hooks_on() and not tagging._handles
    finally:
        go.set()
        thread.join(60)
    assert after == [None] and not tagging.hooks_on()
