"""Our kinds at the peak against torch's MemTracker
(torch.distributed._tools.mem_tracker), both on the CPU, where MemTracker
counts a storage's bytes exactly (its 512-byte rounding is CUDA's).

An MLP + Adam step, MemTracker's run and ours one after the other, the peak
in ``optimizer.step()``: parameters and gradients are equal; MemTracker
counts every tensor made inside ``optimizer.step()`` as optimizer state, so
its figure is Adam's state plus the temporaries Adam's update holds at the
peak, which are ours on that line, less 12 bytes (measured on torch 2.13;
which tensors was not traced: the allocator counts them and its dispatch
mode, which by its own documented limits misses tensors that bypass it, does
not).

A two-layer TransformerEncoder + AdamW step, in one run that both watch (the
step under MemTracker's dispatch mode runs otherwise than without it: on
torch 2.13 it saves 182,272 bytes for backward at the peak where the plain
step saves 248,832), the peak in the backward: see the test."""
import contextlib

import pytest

from helpers import checked_peak, line_of

torch = pytest.importorskip("torch")
mem_tracker = pytest.importorskip("torch.distributed._tools.mem_tracker")

from pytorch_memlab import LineProfiler  # noqa: E402

B, D = 4, 128
REF = mem_tracker._MemRefType


def train_step(model, opt, x):
    opt.zero_grad(set_to_none=True)
    loss = model(x).square().mean()
    loss.backward()
    opt.step()                                      # the MLP's peak, for both
    return loss.detach()


def memtracker_peak(model, opt, x, prof=None):
    """MemTracker's figures at the peak of one train_step ({_MemRefType:
    bytes}, and "Total"), that step run inside ``prof`` when given."""
    tracker = mem_tracker.MemTracker()
    tracker.track_external(model, opt, x)
    with prof if prof is not None else contextlib.nullcontext():
        with tracker:
            train_step(model, opt, x)
    (theirs,) = tracker.get_tracker_snapshot("peak").values()
    return theirs


def test_parameters_gradients_and_optimizer_state_match_memtracker():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(D, D), torch.nn.ReLU(), torch.nn.Linear(D, D),
                                torch.nn.ReLU(), torch.nn.Linear(D, D))
    x = torch.randn(B, D)
    opt = torch.optim.Adam(model.parameters())
    train_step(model, opt, x)                       # Adam's state exists for both
    theirs = memtracker_peak(model, opt, x)
    prof = LineProfiler(train_step, device="cpu")
    with prof:
        train_step(model, opt, x)
    peak, _ = checked_peak(prof.stats()[0])
    ours = peak["by_kind"]
    assert ours["parameter"] == theirs[REF.PARAM]
    assert ours["gradient"] == theirs[REF.GRAD]
    in_step = peak["lines_by_kind"][line_of(train_step, "# the MLP's peak")]["temporary"]
    assert 0 <= ours["optimizer_state"] + in_step - theirs[REF.OPT] <= 3 * 4
    params = sum(p.untyped_storage().nbytes() for p in model.parameters())
    assert ours["optimizer_state"] == 2 * params + 4 * len(opt.state)


def test_transformer_step_against_memtracker_in_one_run():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128,
                                             dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    del layer                                       # the encoder holds copies of it
    x = torch.randn(4, 16, 64)
    opt = torch.optim.AdamW(model.parameters())
    train_step(model, opt, x)                       # AdamW's state exists for both
    prof = LineProfiler(train_step, device="cpu")
    theirs = memtracker_peak(model, opt, x, prof)
    peak, _ = checked_peak(prof.stats()[0])         # ours sum to our peak exactly
    ours = peak["by_kind"]
    assert peak["lineno"] == line_of(train_step, "loss.backward()")
    assert ours["parameter"] == theirs[REF.PARAM]
    assert ours["gradient"] == theirs[REF.GRAD]     # the grads made so far in the backward
    assert ours["optimizer_state"] == theirs[REF.OPT]
    state = [v for s in opt.state.values() for v in s.values()]
    assert ours["optimizer_state"] == sum(t.untyped_storage().nbytes() for t in state)
    # x is MemTracker's other; our input is x and whatever else the process
    # held before the call (what earlier tests left), which MemTracker does not see
    assert theirs[REF.OTH] == x.untyped_storage().nbytes() <= ours["input"]
    # Our peak is the allocator's highest level in the run; each storage
    # MemTracker counts is alive, in that allocator, at its peak: less the
    # inputs, ours is not lower (equal here: no scratch inside one operator
    # at that moment).
    assert peak["bytes"] - ours["input"] >= theirs["Total"] - theirs[REF.OTH]
    # So, the rest being equal, what we call saved for backward or temporary
    # is at least its activations and temporaries (equal here).  The split
    # differs: MemTracker calls activation whatever was made outside a
    # module's backward and is alive, we only what autograd keeps; a tensor
    # the forward made that autograd does not keep is our temporary (8 bytes
    # here: the loss, and the gradient backward() starts from, made before
    # any module's backward), and so is scratch inside an operator.
    ours_made = ours["saved_for_backward"] + ours["temporary"]
    assert ours_made >= theirs[REF.ACT] + theirs[REF.TEMP]
    assert ours["saved_for_backward"] <= theirs[REF.ACT]
    assert ours["temporary"] >= theirs[REF.TEMP]
