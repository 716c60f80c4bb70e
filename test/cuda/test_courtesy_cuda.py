"""Courtesy on the real device: tensors yielded to the CPU and restored, the
allocator's figures checked (skipped without CUDA)."""
import gc
import warnings

import pytest
import torch

from pytorch_memlab.courtesy import Courtesy

from helpers import MiB  # noqa: E402
from test_courtesy import (adam, assert_same_values, snapshot, state_tensors,  # noqa: E402
                           tied_model, train_beside_reference, train_step)

pytestmark = pytest.mark.cuda


# --- CUDA: the real device -------------------------------------------------

def settle() -> int:
    """Free what can be freed; return memory_allocated() of the current device."""
    gc.collect()
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()
    torch.cuda.empty_cache()
    return torch.cuda.memory_allocated()


def test_cuda_memory_released_and_restored():
    baseline = settle()
    x = torch.randn(64 * MiB, device="cuda")  # 256 MiB
    model = torch.nn.Linear(1024, 1024, device="cuda")
    ref = x.cpu()
    expected = x.nbytes + sum(p.nbytes for p in model.parameters())
    allocated = torch.cuda.memory_allocated()
    reserved = torch.cuda.memory_reserved()
    assert allocated >= baseline + expected

    c = Courtesy(tensors=[x, model], threshold=None)
    assert c.yield_memory() == expected
    assert x.device.type == "cpu" and all(p.device.type == "cpu" for p in model.parameters())
    assert torch.cuda.memory_allocated() <= baseline + MiB
    assert torch.cuda.memory_reserved() <= reserved - x.nbytes  # handed back to the driver

    assert c.restore() == expected
    assert x.is_cuda and all(p.is_cuda for p in model.parameters())
    assert torch.equal(x.cpu(), ref)
    assert torch.cuda.memory_allocated() <= allocated + MiB  # no doubling


def test_cuda_aliasing_identity_values():
    base = torch.randn(1024, 1024, device="cuda")
    view, tview, flat = base[10:20], base.t(), base.view(-1)
    model = tied_model("cuda")
    first, last = model.first, model.last
    tensors = dict(model.named_parameters(), base=base)
    ids = {k: id(t) for k, t in tensors.items()}
    values = snapshot(tensors)
    allocated = torch.cuda.memory_allocated()

    c = Courtesy(tensors=[model, view, tview, flat], threshold=None)
    c.yield_memory()
    assert base.device.type == "cpu" and first.weight.device.type == "cpu"
    assert last.weight is first.weight
    assert view.data_ptr() == base.data_ptr() + 10 * 1024 * 4
    assert tview.data_ptr() == flat.data_ptr() == base.data_ptr()

    c.restore()
    assert {k: id(t) for k, t in dict(model.named_parameters(), base=base).items()} == ids
    assert base.is_cuda and view.is_cuda and last.weight is first.weight
    assert view.data_ptr() == base.data_ptr() + 10 * 1024 * 4
    assert tview.data_ptr() == flat.data_ptr() == base.data_ptr()
    assert_same_values(snapshot(dict(model.named_parameters(), base=base)), values)
    assert torch.cuda.memory_allocated() <= allocated + MiB  # views did not get their own copy
    view.fill_(3.0)
    assert bool((base[10:20] == 3.0).all())


def test_cuda_grads_and_optimizer_state_move():
    model = tied_model("cuda")
    opt = adam(model)
    train_step(model, opt, torch.randn(8, 16, device="cuda"))
    grad = model.hidden.weight.grad
    before = state_tensors(model, opt)
    devices = {k: t.device for k, t in before.items()}
    values = snapshot(before)
    assert model.frozen.weight.grad is None

    c = Courtesy(tensors=[model, opt], threshold=None)
    c.yield_memory()
    during = state_tensors(model, opt)
    assert all(t.device.type == "cpu" for t in during.values())
    assert model.hidden.weight.grad is grad
    assert opt.state[model.hidden.weight]["exp_avg"].device.type == "cpu"

    c.restore()
    after = state_tensors(model, opt)
    assert {k: id(t) for k, t in after.items()} == {k: id(t) for k, t in before.items()}
    assert {k: t.device for k, t in after.items()} == devices  # Adam's step stays on the CPU
    assert_same_values(snapshot(after), values)


def test_cuda_training_step_matches_run_without_round_trip():
    def round_trip(model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
        with Courtesy(tensors=[model, opt], threshold=None):
            assert all(p.device.type == "cpu" for p in model.parameters())
        assert all(p.is_cuda for p in model.parameters())
    train_beside_reference("cuda", 32, round_trip)


def test_cuda_gc_walk_default_scope():
    x = torch.randn(MiB, device="cuda")
    part = x[5:50]
    ref = x.cpu()
    with Courtesy(device="cuda", threshold=None) as c:
        assert x.device.type == "cpu" and part.data_ptr() == x.data_ptr() + 5 * 4
        assert c.yielded_bytes >= x.nbytes
    assert x.is_cuda and part.data_ptr() == x.data_ptr() + 5 * 4
    assert torch.equal(x.cpu(), ref)


def test_cuda_exception_in_with_restores():
    x = torch.randn(1000, device="cuda")
    ref = x.cpu()
    with pytest.raises(RuntimeError, match="boom"):
        with Courtesy(tensors=[x], threshold=None):
            assert x.device.type == "cpu"
            raise RuntimeError("boom")
    assert x.is_cuda and torch.equal(x.cpu(), ref)


def test_cuda_warns_about_memory_held_by_autograd():
    x = torch.randn(16 * MiB, device="cuda", requires_grad=True)  # 64 MiB
    y = x.exp()  # exp saves its output inside the graph
    loss = y.sum()
    del y  # now only the graph holds that storage, out of Python's reach
    c = Courtesy(tensors=[x, loss], threshold=32 * MiB)
    with pytest.warns(UserWarning, match="autograd saved"):
        c.yield_memory()
    assert x.device.type == "cpu"
    c.restore()
    loss.backward()  # the graph still works after the round trip
    torch.testing.assert_close(x.grad, x.detach().exp())


def test_cuda_no_warning_when_all_moved():
    baseline = settle()
    x = torch.randn(16 * MiB, device="cuda")
    c = Courtesy(device="cuda", tensors=[x], threshold=baseline + MiB)  # baseline's device
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert c.yield_memory() == 64 * MiB            # x's float32 storage, all of it
    assert x.device.type == "cpu"
    assert c.restore() == 64 * MiB and x.is_cuda


def test_cuda_storage_shared_outside_scope_stays():
    x = torch.randn(MiB, device="cuda")
    other = x.detach()
    with pytest.warns(UserWarning, match="left in place"):
        moved = Courtesy(tensors=[x], threshold=0).yield_memory()
    assert moved == 0 and x.is_cuda and x.data_ptr() == other.data_ptr()
