"""MemReporter: exact byte counts on CPU, safety, and the printed report (the
CUDA allocator, meta tensors and blocks: test_mem_reporter_devices.py)."""
import gc
import json
import re
import weakref

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from pytorch_memlab.mem_reporter import MemReport, MemReporter, allocator  # noqa: E402


def quiet_report(reporter, **kwargs) -> MemReport:
    return reporter.report(print_report=False, **kwargs)


def named(result: MemReport):
    return {r.name: r for r in result.rows}


def mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


# ------------------------------------------------------------------ exact bytes


def test_linear_exact_bytes():
    lin = nn.Linear(4, 3)
    rows = named(quiet_report(MemReporter(lin)))
    assert rows["weight"].bytes == 4 * 3 * 4
    assert rows["weight"].shape == (3, 4) and rows["weight"].numel == 12
    assert rows["weight"].dtype == "float32" and rows["weight"].kind == "parameter"
    assert rows["bias"].bytes == 3 * 4
    assert rows["weight"].storage_id != rows["bias"].storage_id


@pytest.mark.parametrize("dtype,size", [(torch.float16, 2), (torch.float64, 8), (torch.int8, 1)])
def test_bytes_are_not_multiplied_by_element_size(dtype, size):
    # the old tool multiplied storage bytes by the element size (4x for fp32)
    lin = nn.Linear(16, 16).to(dtype) if dtype.is_floating_point else nn.Linear(16, 16)
    if not dtype.is_floating_point:
        lin.register_buffer("codes", torch.zeros(16, 16, dtype=dtype))
        assert named(quiet_report(MemReporter(lin), module=lin))["codes"].bytes == 256 * size
    else:
        assert named(quiet_report(MemReporter(lin), module=lin))["weight"].bytes == 256 * size


@pytest.mark.parametrize("cuda_left", [None, {"cuda:0": 1024}], ids=["as is", "cuda used"])
def test_module_scope_totals_are_exact(monkeypatch, cuda_left):
    # CUDA memory an earlier test of this process left allocated adds that
    # device's allocator line beside the module's (faked here so that it runs
    # on CPU too): the figures checked are the CPU's
    if cuda_left is not None:
        monkeypatch.setattr(allocator, "cuda_allocated", lambda: cuda_left)
    lin = nn.Linear(4, 3)
    result = quiet_report(MemReporter(lin), module=lin)
    assert [r.name for r in result.rows] == ["weight", "bias"]
    assert result.total_bytes == 60
    others = {d.device: d for d in result.devices}
    cpu = others.pop("cpu")
    assert (cpu.tensors, cpu.storages, cpu.bytes) == (2, 2, 60)
    assert cpu.allocator_bytes is None
    # another device is a CUDA allocator's line, holding none of the module's tensors
    assert all(name.startswith("cuda:") and (d.tensors, d.storages, d.bytes) == (0, 0, 0)
               for name, d in others.items())
    if cuda_left is not None:
        assert list(others) == ["cuda:0"] and others["cuda:0"].allocator_bytes == 1024


def test_tied_weights_counted_once():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(10, 4)
            self.head = nn.Linear(4, 10, bias=False)
            self.head.weight = self.embed.weight

    model = Tied()
    result = quiet_report(MemReporter(model), module=model, verbose=True)
    rows = named(result)
    assert rows["embed.weight"].bytes == 160
    assert rows["head.weight"].bytes == 0
    assert rows["head.weight"].alias_of == "embed.weight"
    assert rows["head.weight"].storage_bytes == 160
    assert result.total_bytes == 160
    assert "head.weight(->embed.weight)" in str(result)
    # not verbose: one row per storage, and the hidden row is mentioned
    plain = result.format(verbose=False)
    assert "head.weight" not in plain and "1 rows sharing a storage" in plain


def test_views_point_to_their_base():
    holder = nn.Module()
    base = torch.zeros(100)
    holder.register_buffer("base", base)
    holder.register_buffer("window", base[10:20])
    reshaped = base.view(10, 10)  # named after the variable that holds it
    result = quiet_report(MemReporter(holder), verbose=True)
    rows = named(result)
    assert rows["base"].bytes == 400
    assert rows["window"].bytes == 0 and rows["window"].alias_of == "base"
    assert rows["window"].storage_id == rows["base"].storage_id
    anon = [r for r in result.rows if r.alias_of == "base" and r.shape == (10, 10)]
    assert len(anon) == 1 and anon[0].name == "reshaped"
    # rows of one storage sit together, owner first
    ids = [r.storage_id for r in result.rows]
    first = ids.index(rows["base"].storage_id)
    assert ids[first:first + 3] == [rows["base"].storage_id] * 3
    del reshaped


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_sparse_coo_and_csr_report_components():
    holder = nn.Module()
    indices = torch.tensor([[0, 1, 2], [2, 0, 1]])
    values = torch.tensor([1.0, 2.0, 3.0])
    coo = torch.sparse_coo_tensor(indices, values, (3, 3), check_invariants=True)
    holder.register_buffer("coo", coo)
    csr = torch.sparse_csr_tensor(torch.arange(6), torch.arange(5), torch.ones(5), (5, 5),
                                  check_invariants=True)
    holder.register_buffer("csr", csr)
    # to_sparse_csr() may over-allocate: rows show the storage, whatever its size
    holder.register_buffer("eye", torch.eye(5).to_sparse_csr())
    rows = named(quiet_report(MemReporter(holder), module=holder, verbose=True))
    assert "coo" not in rows and "csr" not in rows
    assert rows["coo.indices"].shape == (2, 3)
    assert rows["coo.indices"].storage_bytes == 2 * 3 * 8
    assert rows["coo.values"].storage_bytes == 3 * 4
    assert rows["csr.crow_indices"].bytes == 6 * 8
    assert rows["csr.col_indices"].bytes == 5 * 8
    assert rows["csr.values"].bytes == 5 * 4
    assert all(rows[n].kind == "buffer" for n in rows)
    assert rows["eye.col_indices"].bytes == holder.eye.col_indices().untyped_storage().nbytes()


def test_adam_states():
    lin = nn.Linear(4, 3)
    opt = torch.optim.Adam(lin.parameters())
    lin(torch.randn(2, 4)).sum().backward()
    opt.step()
    reporter = MemReporter(lin)
    reporter.add_optimizer(opt)
    result = quiet_report(reporter, module=lin)
    rows = named(result)
    assert rows["weight.grad"].bytes == 48 and rows["weight.grad"].kind == "gradient"
    assert rows["Adam.weight.exp_avg"].bytes == 48
    assert rows["Adam.weight.exp_avg_sq"].bytes == 48
    assert rows["Adam.bias.exp_avg"].bytes == 12
    assert rows["Adam.weight.exp_avg"].kind == "optimizer_state"
    step = rows["Adam.weight.step"]
    assert step.bytes == step.numel * torch.empty((), dtype=getattr(torch, step.dtype)).element_size()
    steps = sum(rows[f"Adam.{p}.step"].bytes for p in ("weight", "bias"))
    # params + grads + exp_avg + exp_avg_sq, 60 bytes each, plus the step counters
    assert result.total_bytes == 4 * 60 + steps


def test_optimizer_param_outside_the_model():
    extra = nn.Parameter(torch.zeros(6))
    opt = torch.optim.SGD([extra], lr=0.1, momentum=0.9)
    extra.grad = torch.ones(6)
    opt.step()
    reporter = MemReporter(nn.Linear(1, 1))
    reporter.add_optimizer(opt)
    rows = named(quiet_report(reporter))
    assert rows["SGD.params[0]"].bytes == 24 and rows["SGD.params[0]"].kind == "parameter"
    assert rows["SGD.params[0].grad"].bytes == 24
    assert rows["SGD.params[0].momentum_buffer"].bytes == 24


def test_saved_tensors_of_small_mlp():
    model = mlp()
    x = torch.randn(16, 4)
    loss = model(x).pow(2).sum()
    result = quiet_report(MemReporter(model), outputs=loss, verbose=True)
    rows = named(result)
    assert rows["output"].bytes == 4 and rows["output"].kind == "other"
    assert rows["PowBackward0.self"].bytes == 16 * 2 * 4
    assert rows["AddmmBackward0.mat1"].bytes == 16 * 8 * 4          # relu output
    assert rows["ReluBackward0.result"].alias_of == "AddmmBackward0.mat1"
    assert rows["ReluBackward0.result"].bytes == 0
    assert rows["AddmmBackward0.mat2"].alias_of == "2.weight"        # weight.t(), a view
    assert rows["AddmmBackward0[1].mat1"].bytes == 16 * 4 * 4        # the input x
    assert "AddmmBackward0[1].mat2" not in rows                     # x needs no grad
    saved = [r for r in result.rows if r.kind == "saved_for_backward"]
    assert sum(r.bytes for r in saved) == 128 + 512 + 256
    # x itself is not listed a second time by the gc walk
    assert not any(r.alias_of == "AddmmBackward0[1].mat1" for r in result.rows)

    loss.backward()  # frees the saved tensors
    rows = named(quiet_report(MemReporter(model), outputs=loss))
    assert not any(r.kind == "saved_for_backward" for r in rows.values())
    assert rows["0.weight.grad"].bytes == 128


def test_saved_tensors_of_custom_function():
    class Triple(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            ctx.scale = torch.full((7,), 3.0)
            return x * 3

        @staticmethod
        def backward(ctx, grad):
            return grad * ctx.scale

    x = torch.randn(7, requires_grad=True)
    out = Triple.apply(x)
    rows = named(quiet_report(MemReporter(), outputs=[out], module=nn.Module()))
    assert rows["output"].bytes == 28
    assert rows["TripleBackward.saved_tensors[0]"].bytes == 28
    assert rows["TripleBackward.scale"].bytes == 28


def test_grads_of_non_parameters():
    holder = nn.Module()
    holder.register_buffer("buf", torch.zeros(3, requires_grad=True))
    holder.buf.grad = torch.ones(3)
    loose = torch.zeros(7, 13, requires_grad=True)
    (loose * 2).sum().backward()
    kept_grad = loose.grad  # the user holds the grad: still named after its owner
    result = quiet_report(MemReporter(holder), verbose=True)
    rows = named(result)
    assert rows["buf.grad"].bytes == 12 and rows["buf.grad"].kind == "gradient"
    owner = [r for r in result.rows if r.shape == (7, 13) and r.kind == "other"]
    assert len(owner) == 1
    grad = rows[owner[0].name + ".grad"]
    assert grad.bytes == 7 * 13 * 4 and grad.kind == "gradient"
    assert len([r for r in result.rows if r.shape == (7, 13)]) == 2
    del kept_grad


def test_anonymous_tensors_numbered_per_type():
    # in a dict: no variable of a calling frame names them
    held = {"t": torch.zeros(11, 17), "p": nn.Parameter(torch.zeros(11, 17))}
    rows = [r for r in quiet_report(MemReporter()).rows if r.shape == (11, 17)]
    assert sorted(re.sub(r"\d+$", "", r.name) for r in rows) == ["Parameter", "Tensor"]
    assert all(r.bytes == 11 * 17 * 4 for r in rows)
    del held


# ------------------------------------------------------------------ safety


def test_report_keeps_no_tensor_alive():
    model = mlp()
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(16, 4)
    loss = model(x).sum()
    reporter = MemReporter(model, pre_collect=True)
    reporter.add_optimizer(opt)
    result = quiet_report(reporter, outputs=loss, verbose=True)
    str(result), result.to_json()
    saved = loss.grad_fn.next_functions[0][0]._saved_mat1  # relu output, held by autograd only
    refs = [weakref.ref(t) for t in (x, loss, saved, model[0].weight)]
    model_ref, opt_ref = weakref.ref(model), weakref.ref(opt)
    del model, opt, x, loss, saved
    gc.collect()
    assert [r() for r in refs] == [None] * 4
    assert model_ref() is None and opt_ref() is None   # the reporter holds weak references
    # model and optimizer gone: nothing is named after them any more
    kinds = {r.kind for r in quiet_report(reporter, verbose=True).rows}
    assert not kinds & {"parameter", "buffer", "optimizer_state"}, kinds


def test_survives_objects_whose_isinstance_raises():
    class Victim:
        pass

    class Liar:
        @property
        def __class__(self):
            raise RuntimeError("no class for you")

    victim = Victim()
    proxy = weakref.proxy(victim)
    del victim
    with pytest.raises(ReferenceError):
        isinstance(proxy, torch.Tensor)
    liar = Liar()
    holder = [proxy, liar]
    gc.collect()
    result = quiet_report(MemReporter())
    assert result.skipped == 0
    del holder, proxy, liar


def test_pre_collect_frees_unreachable_cycles():
    class Node:
        pass

    gc.disable()
    try:
        node = Node()
        node.self = node
        node.tensor = torch.zeros(3)
        ref = weakref.ref(node.tensor)
        del node
        quiet_report(MemReporter(pre_collect=True))
        assert ref() is None
    finally:
        gc.enable()


def test_bad_input():
    with pytest.raises(TypeError, match="torch.nn.Module"):
        MemReporter([nn.Linear(1, 1)])
    reporter = MemReporter()
    forms = ("expected None (every device), a str such as 'cpu', 'cuda' (every CUDA device) "
             "or 'cuda:0', an int (a CUDA index) or a torch.device")
    with pytest.raises(ValueError) as err:
        reporter.report(device="gpu0")
    assert str(err.value) == ("report(device=...): unknown device 'gpu0' (Invalid device "
                              f"string: 'gpu0'); {forms}")
    for bad, shown in ((1.5, "float 1.5"), (object(), "object")):
        with pytest.raises(TypeError) as err:
            reporter.report(device=bad)
        assert str(err.value) == f"report(device=...): got {shown}; {forms}"
    with pytest.raises(TypeError, match="module="):
        reporter.report(module="encoder")
    with pytest.raises(TypeError, match="outputs="):
        reporter.report(outputs=3)
    with pytest.raises(TypeError, match="Optimizer"):
        reporter.add_optimizer(object())


# ------------------------------------------------------------------ output


def test_prints_by_default(capsys):
    lin = nn.Linear(2, 2)
    MemReporter(lin).report(module=lin)
    out = capsys.readouterr().out
    assert out.startswith("Element type")
    assert "Storage on cpu" in out and "Used Memory: 24.00B (24 bytes)" in out
    quiet_report(MemReporter(lin), module=lin)
    assert capsys.readouterr().out == ""


def test_table_sizes_are_the_line_table_style():
    # one formatter for the package: the row and the total read as in the line table
    holder = nn.Module()
    holder.register_buffer("big", torch.zeros(3, 1 << 18))         # 3 MiB
    holder.register_buffer("small", torch.zeros(10, dtype=torch.int16))
    result = quiet_report(MemReporter(holder), module=holder)
    storages = [b.untyped_storage().nbytes() for b in holder.buffers()]
    assert storages == [3 << 20, 20] and result.total_bytes == sum(storages)
    lines = str(result).splitlines()
    assert re.fullmatch(r"big +buffer +float32 +\(3, 262144\) +3\.00M +#0", lines[3])
    assert re.fullmatch(r"small +buffer +int16 +\(10,\) +20\.00B +#1", lines[4])
    assert lines[6] == "Total Tensors: 2  Storages: 2  Used Memory: 3.00M (3,145,748 bytes)"


def test_to_dicts_and_json():
    lin = nn.Linear(2, 2)
    result = quiet_report(MemReporter(lin), module=lin)
    dicts = result.to_dicts()
    assert dicts[0] == {"name": "weight", "device": "cpu", "dtype": "float32", "shape": [2, 2],
                        "numel": 4, "bytes": 16, "storage_bytes": 16, "storage_id": 0,
                        "kind": "parameter", "alias_of": None, "allocated_at": None}
    data = json.loads(result.to_json())
    assert data["rows"] == dicts
    assert data["devices"][0]["bytes"] == 24
    assert "24 bytes" in repr(result)


def test_device_filter():
    lin = nn.Linear(2, 2)
    reporter = MemReporter(lin)
    assert {r.device for r in quiet_report(reporter, device="cpu").rows} == {"cpu"}
    assert {r.device for r in quiet_report(reporter, device=torch.device("cpu")).rows} == {"cpu"}
    none = quiet_report(reporter, device="cuda")
    assert not any(r.device == "cpu" for r in none.rows)


def test_module_scope_uses_model_names():
    model = mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    reporter = MemReporter(model)
    reporter.add_optimizer(opt)
    result = quiet_report(reporter, module=model[2])
    assert [r.name for r in result.rows] == [
        "2.weight", "2.weight.grad", "2.bias", "2.bias.grad",
        "SGD.2.weight.momentum_buffer", "SGD.2.bias.momentum_buffer"]
    assert result.total_bytes == 3 * (64 + 8)
