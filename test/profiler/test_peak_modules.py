"""Which module made what a function holds at its peak, with real torch on
the CPU: each block made during the call is charged to the innermost module
running on its thread, by its qualified name in the outermost module; the
modules sum exactly to what the lines hold; the display folds repeated
layers, the data never."""
import threading

import pytest

from helpers import checked_peak, line_of

torch = pytest.importorskip("torch")

from pytorch_memlab import LineProfiler, load  # noqa: E402
from pytorch_memlab.kinds.names import NO_MODULE, folded  # noqa: E402
from models import Net  # noqa: E402

B, D = 4, 128
ACT = B * D * 4


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(D, D), torch.nn.ReLU(), torch.nn.Linear(D, D),
                               torch.nn.ReLU(), torch.nn.Linear(D, D))


def forward_loss(model, x):
    out = model(x)
    return out.sum()                                # the peak: one more scalar


def by_module_sums(record):
    peak, held = checked_peak(record)
    assert sum(peak["by_module"].values()) == sum(held.values())
    return peak["by_module"]


def test_each_block_goes_to_the_module_that_made_it():
    model, x = mlp(), torch.randn(B, D)
    prof = LineProfiler(forward_loss, device="cpu")
    with prof:
        forward_loss(model, x)
    record = prof.stats()[0]
    assert record["peak"]["lineno"] == line_of(forward_loss, "# the peak")
    # alive then: both ReLUs' outputs (kept for backward) and the last Linear's
    assert by_module_sums(record) == {"Sequential.1": ACT, "Sequential.3": ACT,
                                      "Sequential.4": ACT, NO_MODULE: 4}
    # each ReLU made the input the next Linear saves; the last Linear's output is not saved
    assert record["peak"]["modules_by_kind"] == {
        "Sequential.1": {"saved_for_backward": ACT}, "Sequential.3": {"saved_for_backward": ACT},
        "Sequential.4": {"temporary": ACT}, NO_MODULE: {"temporary": 4}}


def test_nested_modules_by_qualified_name_and_folded_in_the_display_only(tmp_path):
    torch.manual_seed(0)
    model, x = Net(3), torch.randn(B, D)
    prof = LineProfiler(forward_loss, device="cpu")
    with prof:
        forward_loss(model, x)
    by_module = by_module_sums(prof.stats()[0])
    # the peak: the last Block's ReLU, its first Linear's output still alive;
    # each Block before keeps its ReLU's output (2*D wide) and its sum
    assert by_module == {"layers.0": ACT, "layers.0.mlp.1": 2 * ACT,
                         "layers.1": ACT, "layers.1.mlp.1": 2 * ACT,
                         "layers.2.mlp.0": 2 * ACT, "layers.2.mlp.1": 2 * ACT}
    # a ReLU saves its output, which the next Linear saves too; a Block's sum is
    # the next Block's input, which its first Linear saves; the ReLU's input is not
    saved = {"saved_for_backward": 2 * ACT}
    assert prof.stats()[0]["peak"]["modules_by_kind"] == {
        "layers.0": {"saved_for_backward": ACT}, "layers.0.mlp.1": saved,
        "layers.1": {"saved_for_backward": ACT}, "layers.1.mlp.1": saved,
        "layers.2.mlp.0": {"temporary": 2 * ACT}, "layers.2.mlp.1": saved}
    assert folded("layers.2.mlp.1") == "layers.*.mlp.1" and folded("mlp.1") == "mlp.1"
    assert folded("Sequential.2.mlp") == "Sequential.*.mlp"
    text = repr(prof.display())
    line = next(l for l in text.splitlines() if l.startswith("by module: "))
    # a Block's own sum is the name's last part: not folded
    assert line == ("by module: 12.00K layers.*.mlp.1, 4.00K layers.*.mlp.0, 2.00K layers.0, "
                    "2.00K layers.1")
    prof.save(tmp_path / "p.json")
    assert load(tmp_path / "p.json").stats()[0]["peak"] == prof.stats()[0]["peak"]
    assert repr(load(tmp_path / "p.json")) == text


def run_model(model, x, barrier):
    barrier.wait()
    out = model(x)
    barrier.wait()                                  # both threads' outputs alive
    return out


def test_each_thread_charges_its_own_module():
    models, x = [mlp(), mlp()], torch.randn(B, D)
    barrier = threading.Barrier(2)
    prof = LineProfiler(run_model, device="cpu")
    with prof:
        threads = [threading.Thread(target=run_model, args=(m, x, barrier)) for m in models]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    peak, _ = checked_peak(prof.stats()[0])
    by_module = by_module_sums(prof.stats()[0])
    # two copies of one model: their modules share names; a thread's lines
    # hold only what its own model made, the other's are other threads'
    assert peak["other_threads"] >= 2 * ACT
    names = set(by_module) - {NO_MODULE}
    assert names and names <= {f"Sequential.{i}" for i in range(5)}


def test_blocks_made_after_the_call_belong_to_no_module():
    model, x = mlp(), torch.randn(B, D)
    prof = LineProfiler(forward_loss, device="cpu")
    with prof:
        forward_loss(model, x)
    from pytorch_memlab.kinds import tagging
    assert getattr(tagging._local, "numbers", []) == []
    prof2 = LineProfiler(outside, device="cpu")
    with prof2:
        outside()
    assert by_module_sums(prof2.stats()[0]) == {NO_MODULE: ACT}


def outside():
    return torch.empty(B, D)


def train_step(model, opt, x):
    opt.zero_grad(set_to_none=True)
    loss = model(x).square().mean()
    loss.backward()                                 # the peak: the ReLU's backward
    opt.step()


def test_backward_allocations_go_to_the_module_whose_backward_made_them():
    torch.manual_seed(0)
    batch, d, h = 512, 256, 1024                    # activations outweigh the parameters
    model = torch.nn.Sequential(torch.nn.Linear(d, h), torch.nn.ReLU(), torch.nn.Linear(h, d))
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(batch, d)
    prof = LineProfiler(train_step, device="cpu")
    with prof:
        for _ in range(2):
            train_step(model, opt, x)
    record = prof.stats()[0]
    assert record["peak"]["lineno"] == line_of(train_step, "# the peak")
    by_module = by_module_sums(record)
    wide = batch * h * 4
    # the last Linear's backward: the gradient of its input, and of its weight and bias
    assert by_module["Sequential.2"] == wide + (h * d + d) * 4
    # the ReLU: its output (kept for backward), and its backward's output
    assert by_module["Sequential.1"] == 2 * wide
    # the weight's and bias's gradients, told at the optimizer's step after the peak
    grads = sum(p.grad.untyped_storage().nbytes() for p in model[2].parameters())
    by_kind = record["peak"]["modules_by_kind"]
    assert by_kind["Sequential.2"] == {"gradient": grads, "temporary": wide}
    assert by_kind["Sequential.1"] == {"saved_for_backward": wide, "temporary": wide}
    assert sum(v for k, v in by_module.items() if k.startswith("Sequential.")) > \
        0.99 * sum(by_module.values())
