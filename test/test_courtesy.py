"""Tests for pytorch_memlab.courtesy.

Without a GPU, ``HostCourtesy`` drives the real yield/restore path with the CPU
as the "device": it parks CPU storages in fresh CPU storages and brings them
back.  Everything but the device change itself (grouping, re-pointing,
records, rollback, restore) runs as it does on CUDA.  The CUDA tests at the end
check the real thing.
"""
import copy
import gc
import warnings
from collections import OrderedDict
from typing import Callable, Dict, List, Optional

import pytest
import torch

import pytorch_memlab
from pytorch_memlab.courtesy import lender, scope, storage_moves
from pytorch_memlab.courtesy import Courtesy

from helpers import MiB  # noqa: E402
HAS_CUDA = torch.cuda.is_available()


def needs_cuda(fn: Callable) -> Callable:
    return pytest.mark.cuda(pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")(fn))


class HostCourtesy(Courtesy):
    """Courtesy whose source 'device' is the CPU (CPU storages not parked yet)."""

    def _source_filter(self) -> Optional[Callable[[torch.Tensor], bool]]:
        return lambda t: (t.device.type == "cpu"
                          and t.untyped_storage().data_ptr() not in self._moved)


def tied_model(device: str = "cpu") -> torch.nn.Module:
    """First and last layer share one weight; a frozen layer; a buffer."""
    torch.manual_seed(0)
    first = torch.nn.Linear(16, 16, device=device)
    hidden = torch.nn.Linear(16, 16, device=device)
    frozen = torch.nn.Linear(16, 16, device=device)
    frozen.requires_grad_(False)
    last = torch.nn.Linear(16, 16, bias=False, device=device)
    last.weight = first.weight
    model = torch.nn.Sequential(OrderedDict(
        first=first, act=torch.nn.ReLU(), hidden=hidden, frozen=frozen, last=last))
    model.register_buffer("scale", torch.full((16,), 0.5, device=device))
    return model


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> torch.Tensor:
    opt.zero_grad()
    loss = (model(x) * model.scale).square().mean()
    loss.backward()
    opt.step()
    return loss.detach()


def adam(model: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)


def train_beside_reference(device: str, batch: int,
                           round_trip: Callable[[torch.nn.Module, torch.optim.Optimizer], None]
                           ) -> None:
    """Four Adam steps of a tied_model and of its copy on the same data: the
    copy's state makes ``round_trip`` after its second step, and every loss
    and the final state must equal the reference's."""
    data = [torch.randn(batch, 16, device=device) for _ in range(4)]
    ref = tied_model(device)
    ref_opt = adam(ref)
    model = copy.deepcopy(ref)
    opt = adam(model)
    for i, x in enumerate(data):
        assert torch.equal(train_step(model, opt, x), train_step(ref, ref_opt, x))
        if i == 1:
            round_trip(model, opt)
    assert_same_values(snapshot(state_tensors(model, opt)), snapshot(state_tensors(ref, ref_opt)))


def snapshot(tensors: Dict[str, torch.Tensor]) -> Dict[str, torch.Tensor]:
    return {k: t.detach().cpu().clone() for k, t in tensors.items()}


def state_tensors(model: torch.nn.Module, opt: torch.optim.Optimizer) -> Dict[str, torch.Tensor]:
    """Every tensor a training run depends on, by a stable name."""
    out: Dict[str, torch.Tensor] = dict(model.named_parameters())
    out.update(model.named_buffers())
    names = {id(p): n for n, p in model.named_parameters()}
    for n, p in model.named_parameters():
        if p.grad is not None:
            out[n + ".grad"] = p.grad
    for p, st in opt.state.items():
        for k, v in st.items():
            if isinstance(v, torch.Tensor):
                out[f"{names[id(p)]}.{k}"] = v
    return out


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind ``tensors``, as torch counts them."""
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes()
                for t in tensors}.values())


def assert_same_values(a: Dict[str, torch.Tensor], b: Dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k].cpu(), b[k].cpu()), k


# --- public surface and argument checking ----------------------------------

def test_public_import():
    assert pytorch_memlab.Courtesy is Courtesy


@pytest.mark.parametrize("device, shown", [
    ("cuda", "cuda"), ("cuda:0", "cuda:0"), (0, "cuda:0"), (torch.device("cuda", 0), "cuda:0"),
    (None, "None"),
])
def test_accepts_cuda_devices(device, shown):
    assert repr(Courtesy(device=device)) == f"Courtesy(device={shown}, all tensors, yielded=0.00B)"


DEVICE_FORMS = "expected None (every CUDA device), 'cuda', 'cuda:N', an int N or torch.device('cuda', N)"


@pytest.mark.parametrize("device, error, text", [
    ("cpu", ValueError, "'cpu' is not a CUDA device"),
    ("meta", ValueError, "'meta' is not a CUDA device"),
    (torch.device("cpu"), ValueError, "'cpu' is not a CUDA device"),
    ("not a device", ValueError,
     "unknown device 'not a device' (Invalid device string: 'not a device')"),
    (-1, ValueError, "GPU index must be >= 0, not -1"),
    (1.5, TypeError, "got float 1.5"), (True, TypeError, "got bool True"),
    ([0], TypeError, "got list [0]"),
])
def test_rejects_bad_device(device, error, text):
    with pytest.raises(error) as err:
        Courtesy(device=device)
    assert str(err.value) == f"Courtesy(device=...): {text}; {DEVICE_FORMS}"


def test_accepts_scopes():
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    t = torch.zeros(3)
    for tensors, roots in ((model, 1), (opt, 1), (t, 1), ([t, model, opt], 3), ((t,), 1), ([], 0),
                           ((p for p in model.parameters()), 2)):
        assert repr(Courtesy(tensors=tensors)) == \
            f"Courtesy(device=None, {roots} root(s), yielded=0.00B)"


@pytest.mark.parametrize("scope", ["weights", b"x", 42, {"w": torch.zeros(1)},
                                   [torch.zeros(1), 3], [None]])
def test_rejects_bad_scope(scope):
    with pytest.raises(TypeError, match="torch.nn.Module"):
        Courtesy(tensors=scope)


def test_state_dict_scope_explains():
    with pytest.raises(TypeError, match="pass the module itself"):
        Courtesy(tensors=torch.nn.Linear(2, 2).state_dict())


@pytest.mark.parametrize("threshold, error", [
    (-1, ValueError), (float("nan"), ValueError), ("1GB", TypeError), (True, TypeError),
])
def test_rejects_bad_threshold(threshold, error):
    with pytest.raises(error, match="bytes"):
        Courtesy(threshold=threshold)


@pytest.mark.skipif(not HAS_CUDA, reason="the device count is only checked with CUDA")
def test_rejects_missing_device_index():
    with pytest.raises(ValueError, match="visible"):
        Courtesy(device=torch.cuda.device_count())


# --- the real class, on any machine ----------------------------------------

def test_cpu_tensors_untouched():
    model = tied_model()
    x = torch.zeros(1000)
    before = {k: t.data_ptr() for k, t in dict(model.named_parameters(), x=x).items()}
    c = Courtesy(tensors=[model, x], threshold=None)
    assert c.yield_memory() == 0
    assert c.restore() == 0
    assert {k: t.data_ptr() for k, t in dict(model.named_parameters(), x=x).items()} == before


def test_gc_walk_leaves_cpu_tensors_alone():
    x = torch.arange(100.0)
    ptr = x.data_ptr()
    with Courtesy(threshold=None):
        assert x.device.type == "cpu" and x.data_ptr() == ptr
    assert x.data_ptr() == ptr and torch.equal(x, torch.arange(100.0))


@pytest.mark.skipif(HAS_CUDA, reason="checks the no-CUDA behaviour")
def test_noop_without_cuda():
    c = Courtesy()
    assert c.yield_memory() == 0
    assert c.yielded_bytes == 0
    assert c.restore() == 0


# --- the yield/restore machinery, CPU standing in for the device -----------

def test_round_trip_keeps_identity_aliasing_values():
    model = tied_model()
    opt = adam(model)
    train_step(model, opt, torch.randn(8, 16))
    first, hidden, frozen, last = model.first, model.hidden, model.frozen, model.last
    assert frozen.weight.grad is None  # a Parameter without grad must not trip anything
    base = torch.randn(32, 32)
    view, tview = base[4:8], base.t()
    before = state_tensors(model, opt)
    ids = {k: id(t) for k, t in before.items()}
    ptrs = {k: t.data_ptr() for k, t in before.items()}
    values = snapshot(before)
    grad = hidden.weight.grad

    c = HostCourtesy(tensors=[model, opt, view, tview], threshold=None)
    moved = c.yield_memory()
    assert moved == storage_bytes(list(before.values()) + [base])
    during = state_tensors(model, opt)
    assert {k: id(t) for k, t in during.items()} == ids
    assert all(t.data_ptr() != ptrs[k] for k, t in during.items())  # every storage moved
    assert moved == c.yielded_bytes
    assert last.weight is first.weight and hidden.weight.grad is grad
    assert hidden.weight.requires_grad and not frozen.weight.requires_grad
    assert view._base is base and tview._base is base
    assert view.data_ptr() == base.data_ptr() + 4 * 32 * 4
    assert tview.data_ptr() == base.data_ptr()
    assert_same_values(snapshot(during), values)

    assert c.restore() == moved
    after = state_tensors(model, opt)
    assert {k: id(t) for k, t in after.items()} == ids
    assert last.weight is first.weight and view._base is base
    assert view.data_ptr() == base.data_ptr() + 4 * 32 * 4
    assert_same_values(snapshot(after), values)
    view.fill_(7.0)  # still one storage: writes through the view reach the base
    assert bool((base[4:8] == 7.0).all()) and bool((tview[:, 4:8] == 7.0).all())
    assert c.yielded_bytes == 0


def test_training_after_round_trip_matches_reference():
    def round_trip(model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
        parked = storage_bytes(state_tensors(model, opt).values())
        with HostCourtesy(tensors=[model, opt], threshold=None) as c:
            assert c.yielded_bytes == parked
    train_beside_reference("cpu", 8, round_trip)


def test_view_in_scope_brings_its_base():
    base = torch.randn(100)
    view = base[10:20]
    c = HostCourtesy(tensors=[view], threshold=None)
    assert c.yield_memory() == base.untyped_storage().nbytes()
    assert view.data_ptr() == base.data_ptr() + 10 * 4
    c.restore()
    assert view.data_ptr() == base.data_ptr() + 10 * 4


def test_storage_used_outside_scope_stays():
    x = torch.randn(100)
    other = x.detach()  # another tensor on the same storage, not in the scope
    ptr = x.data_ptr()
    c = HostCourtesy(tensors=[x], threshold=None)
    assert c.yield_memory() == 0  # moving would free nothing and split the aliasing
    assert x.data_ptr() == ptr == other.data_ptr()
    del other
    assert c.yield_memory() == x.untyped_storage().nbytes()
    assert x.data_ptr() != ptr


def test_exception_in_with_restores():
    model = tied_model()
    values = snapshot(dict(model.named_parameters()))
    with pytest.raises(RuntimeError, match="boom"):
        with HostCourtesy(tensors=model, threshold=None) as c:
            assert c.yielded_bytes == storage_bytes(list(model.parameters()) + [model.scale])
            raise RuntimeError("boom")
    assert c.yielded_bytes == 0
    assert_same_values(snapshot(dict(model.named_parameters())), values)
    assert model.last.weight is model.first.weight


def test_failed_yield_puts_everything_back(monkeypatch):
    tensors = [torch.randn(10) for _ in range(4)]
    ptrs = [t.data_ptr() for t in tensors]
    real = storage_moves.copy_storage
    calls: List[int] = []

    def flaky(storage: torch.UntypedStorage, device: torch.device) -> torch.UntypedStorage:
        calls.append(1)
        if len(calls) == 3:
            raise MemoryError("host is full")
        return real(storage, device)

    monkeypatch.setattr(storage_moves, "copy_storage", flaky)
    c = HostCourtesy(tensors=tensors, threshold=None)
    with pytest.raises(MemoryError):
        c.yield_memory()
    assert [t.data_ptr() for t in tensors] == ptrs
    assert c.yielded_bytes == 0


def test_yield_twice_then_restore_twice():
    a = torch.randn(10)
    c = HostCourtesy(tensors=[a], threshold=None)
    assert c.restore() == 0  # nothing parked yet
    first = c.yield_memory()
    assert first == a.untyped_storage().nbytes() == 40
    assert c.yield_memory() == 0  # already parked
    assert c.restore() == first
    assert c.restore() == 0


def test_skips_what_it_cannot_move():
    sparse = torch.eye(4).to_sparse()
    with torch.inference_mode():
        frozen = torch.randn(8)
    empty = torch.empty(0)
    c = HostCourtesy(tensors=[sparse, frozen, empty], threshold=None)
    assert c.yield_memory() == frozen.untyped_storage().nbytes()
    assert frozen.is_inference() and repr(frozen)
    c.restore()
    assert frozen.is_inference() and sparse.is_sparse


def test_leftover_message_names_the_causes():
    msg = lender._leftover_message([(0, 3 * 1024 ** 3)], 64 * MiB, stuck=2 * MiB,
                                         skipped=1, scoped=True)
    assert msg == (
        "Courtesy.yield_memory(): still allocated after yielding: cuda:0 3.00G (threshold "
        "64.00M). Not movable: 2.00M in storages that something besides the moved tensors still "
        "uses (left in place); tensors autograd saved for backward that Python no longer "
        "references (finish backward() or drop the graph before yielding); tensors referenced "
        "only from C++ (DDP gradient buckets, CUDA-graph pools, extension state); tensors "
        "outside the tensors= scope; 1 sparse, quantized, nested or subclass tensor(s).")


def test_gc_walk_finds_unnamed_owners():
    holder = {"deep": [torch.randn(5)]}  # reachable only through containers
    t = holder["deep"][0]
    found, _ = scope.collect(None)
    assert any(x is t for x in found)


# --- CUDA: the real device -------------------------------------------------

def settle() -> int:
    """Free what can be freed; return memory_allocated() of the current device."""
    gc.collect()
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear is not None:
        clear()
    torch.cuda.empty_cache()
    return torch.cuda.memory_allocated()


@needs_cuda
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


@needs_cuda
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


@needs_cuda
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


@needs_cuda
def test_cuda_training_step_matches_run_without_round_trip():
    def round_trip(model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
        with Courtesy(tensors=[model, opt], threshold=None):
            assert all(p.device.type == "cpu" for p in model.parameters())
        assert all(p.is_cuda for p in model.parameters())
    train_beside_reference("cuda", 32, round_trip)


@needs_cuda
def test_cuda_gc_walk_default_scope():
    x = torch.randn(MiB, device="cuda")
    part = x[5:50]
    ref = x.cpu()
    with Courtesy(device="cuda", threshold=None) as c:
        assert x.device.type == "cpu" and part.data_ptr() == x.data_ptr() + 5 * 4
        assert c.yielded_bytes >= x.nbytes
    assert x.is_cuda and part.data_ptr() == x.data_ptr() + 5 * 4
    assert torch.equal(x.cpu(), ref)


@needs_cuda
def test_cuda_exception_in_with_restores():
    x = torch.randn(1000, device="cuda")
    ref = x.cpu()
    with pytest.raises(RuntimeError, match="boom"):
        with Courtesy(tensors=[x], threshold=None):
            assert x.device.type == "cpu"
            raise RuntimeError("boom")
    assert x.is_cuda and torch.equal(x.cpu(), ref)


@needs_cuda
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


@needs_cuda
def test_cuda_no_warning_when_all_moved():
    baseline = settle()
    x = torch.randn(16 * MiB, device="cuda")
    c = Courtesy(device="cuda", tensors=[x], threshold=baseline + MiB)  # baseline's device
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert c.yield_memory() == 64 * MiB            # x's float32 storage, all of it
    assert x.device.type == "cpu"
    assert c.restore() == 64 * MiB and x.is_cuda


@needs_cuda
def test_cuda_storage_shared_outside_scope_stays():
    x = torch.randn(MiB, device="cuda")
    other = x.detach()
    with pytest.warns(UserWarning, match="left in place"):
        moved = Courtesy(tensors=[x], threshold=0).yield_memory()
    assert moved == 0 and x.is_cuda and x.data_ptr() == other.data_ptr()
