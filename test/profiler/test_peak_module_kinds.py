"""Each module's bytes at the peak by kind (``peak["modules_by_kind"]``),
with real torch on the CPU: an MLP's training step with Adam sums exactly
(helpers.check_module_kinds: each module to its by_module bytes, each kind
over the modules to that kind over the lines); saved and loaded as JSON and
CSV it is the same; a version 6 file, which has none, still loads."""
import json

import pytest

from helpers import checked_peak, line_of

torch = pytest.importorskip("torch")

from pytorch_memlab import LineProfiler, load  # noqa: E402
from pytorch_memlab.kinds.names import NO_MODULE  # noqa: E402

BATCH, D, H = 16, 256, 1024                         # parameters outweigh activations


def train_step(model, opt, x):
    opt.zero_grad(set_to_none=True)
    loss = model(x).square().mean()
    loss.backward()
    opt.step()                                      # the peak: Adam's first update
    return loss.detach()


def nbytes(tensors):
    return sum(t.untyped_storage().nbytes() for t in tensors)


@pytest.fixture(scope="module")
def profiled():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(D, H), torch.nn.ReLU(), torch.nn.Linear(H, D))
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(BATCH, D)
    prof = LineProfiler(train_step, device="cpu")
    with prof:
        train_step(model, opt, x)
    return prof, model, opt


def test_a_training_steps_modules_by_kind_sum_exactly(profiled):
    prof, model, opt = profiled
    peak, _ = checked_peak(prof.stats()[0])            # check_module_kinds too
    assert peak["lineno"] == line_of(train_step, "# the peak")
    modules = peak["modules_by_kind"]
    # each Linear's backward made its gradients; the step made Adam's state, in no module
    assert modules["Sequential.0"] == {"gradient": nbytes(p.grad for p in model[0].parameters())}
    assert modules["Sequential.2"] == {"gradient": nbytes(p.grad for p in model[2].parameters())}
    assert "Sequential.1" not in modules                # the ReLU's output is freed by then
    assert modules[NO_MODULE]["optimizer_state"] == \
        nbytes(v for s in opt.state.values() for v in s.values())


@pytest.mark.parametrize("ext", ["json", "csv"])
def test_modules_by_kind_is_saved_and_loaded(profiled, tmp_path, ext):
    prof = profiled[0]
    prof.save(tmp_path / f"p.{ext}")
    loaded = load(tmp_path / f"p.{ext}").stats()[0]["peak"]
    assert loaded["modules_by_kind"] == prof.stats()[0]["peak"]["modules_by_kind"]


def test_a_version_6_file_loads_without_it(profiled, tmp_path):
    doc = profiled[0].to_dict()
    doc["schema_version"] = 6
    for record in doc["functions"]:
        record["peak"].pop("modules_by_kind")
    (tmp_path / "old.json").write_text(json.dumps(doc))
    peak = load(tmp_path / "old.json").stats()[0]["peak"]
    assert "modules_by_kind" not in peak and peak["by_module"]


def test_a_bad_modules_by_kind_names_its_place(profiled, tmp_path):
    doc = profiled[0].to_dict()
    name = next(iter(doc["functions"][0]["peak"]["modules_by_kind"]))
    doc["functions"][0]["peak"]["modules_by_kind"][name] = {"nonsense": 1}
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"functions\[0\]\.peak\.modules_by_kind\..*kinds among"):
        load(tmp_path / "bad.json")
