"""Saved for backward outside modules, and the user's own saved-tensor hooks:
what autograd keeps for a functional op on a profiled line (a loss computed
with torch.nn.functional, an op on a leaf) is saved_for_backward at the peak,
in a decorated function, a generator's steps and a ``with`` block alike; the
user's own hooks (``save_on_cpu``, offloading) are the ones autograd calls
while the profiler runs, as without it; nothing is left on autograd's stack
of hooks after a call, a raised exception or a coroutine."""
import asyncio

import pytest

from helpers import checked_peak, line_of

torch = pytest.importorskip("torch")

from pytorch_memlab import LineProfiler  # noqa: E402
from pytorch_memlab.line_profiler.wrapping import wrap  # noqa: E402

N = 250_000                   # float32 elements: 1,000,000 bytes
HOOKS = torch._C._autograd


def no_hooks_left():
    return HOOKS._top_saved_tensors_default_hooks(False) is None


def saved_outside_modules(w):
    h = (w * 2).exp()                          # exp keeps its result for backward
    big = torch.empty(16 * N, dtype=torch.uint8).fill_(1)    # the peak: h is still kept
    del big
    h.sum().backward()


def check_saved_line(prof, func=saved_outside_modules):
    record = prof.stats()[0]
    peak, held = checked_peak(record)
    at = line_of(func, "exp()")
    assert peak["lineno"] == line_of(func, "torch.empty")
    # h itself: kept by exp's node, alive at the peak, made on its line
    assert peak["lines_by_kind"][at]["saved_for_backward"] == 4 * N


def test_a_functional_op_outside_modules_is_saved_for_backward():
    w = torch.randn(N, requires_grad=True)
    prof = LineProfiler(saved_outside_modules, device="cpu")
    profiled = wrap(saved_outside_modules, prof)
    profiled(w)
    check_saved_line(prof)
    assert no_hooks_left()


def test_in_a_with_block_too():
    w = torch.randn(N, requires_grad=True)
    prof = LineProfiler(saved_outside_modules, device="cpu")
    with prof:
        saved_outside_modules(w)
    check_saved_line(prof)
    assert no_hooks_left()


def steps(w):
    yield
    h = (w * 2).exp()                          # exp keeps its result for backward
    big = torch.empty(16 * N, dtype=torch.uint8).fill_(1)    # the peak: h is still kept
    del big
    yield
    h.sum().backward()


def test_across_a_generators_steps():
    w = torch.randn(N, requires_grad=True)
    prof = LineProfiler(steps, device="cpu")
    gen = wrap(steps, prof)(w)
    for _ in gen:
        assert no_hooks_left()                 # suspended: nothing of ours pushed
    check_saved_line(prof, steps)


def test_the_users_own_hooks_stay_the_ones_autograd_calls():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    packed = []

    def pack(t):
        packed.append(tuple(t.shape))
        return t

    def step(x):
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = torch.nn.functional.softplus(model(x)).sum()
        out.backward()

    x = torch.randn(4, 8)
    step(x)
    unprofiled = list(packed)
    packed.clear()
    prof = LineProfiler(step, device="cpu")
    wrap(step, prof)(x)
    assert unprofiled and packed == unprofiled
    assert no_hooks_left()


def test_nothing_is_left_on_the_stack_after_a_raise_or_a_coroutine():
    w = torch.randn(16, requires_grad=True)

    def raises(w):
        h = (w * 2).exp()
        raise ValueError(h.shape)

    async def waits(w):
        h = (w * 2).exp()
        await asyncio.sleep(0)
        return h.sum()

    prof = LineProfiler(raises, waits, device="cpu")
    with pytest.raises(ValueError):
        wrap(raises, prof)(w)
    assert no_hooks_left()
    asyncio.run(wrap(waits, prof)(w))
    assert no_hooks_left()
