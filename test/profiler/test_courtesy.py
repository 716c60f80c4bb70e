"""Tests for pytorch_memlab.courtesy.

Without a GPU, ``HostCourtesy`` drives the real yield/restore path with the CPU
as the "device": it parks CPU storages in fresh CPU storages and brings them
back.  Everything but the device change itself (grouping, re-pointing,
records, rollback, restore) runs as it does on CUDA.  The CUDA tests at the end
check the real thing.
"""
import copy
from collections import OrderedDict
from typing import Callable, Dict, List, Optional

import pytest
import torch

import pytorch_memlab
from pytorch_memlab.courtesy import lender, scope, storage_moves
from pytorch_memlab.courtesy import Courtesy

from helpers import MiB  # noqa: E402
HAS_CUDA = torch.cuda.is_available()


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


@pytest.mark.cuda   # the device count is only checked with CUDA
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
