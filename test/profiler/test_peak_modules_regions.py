"""Modules at the peak when part of the model runs where the module hooks do
not see it, with real torch on the CPU: activation checkpointing (its
recomputation runs inside the backward pass; use_reentrant=False and True)
and torch.compile (the "eager" and "aot_eager" backends, which go through
dynamo).  The program computes what it computes unprofiled, the kinds sum
exactly, and what the region's modules made is charged to its outermost
module seen, which the record and the report name."""
import pytest

from helpers import checked_peak, line_of

torch = pytest.importorskip("torch")

from torch.utils.checkpoint import checkpoint  # noqa: E402

from pytorch_memlab import LineProfiler, load  # noqa: E402
from pytorch_memlab.kinds.names import NO_MODULE  # noqa: E402

B, D = 1024, 128
ACT = B * D * 4                                     # a block's input and output
WIDE = 4 * ACT                                      # fc1's and the ReLU's outputs
FC1_GRADS = (4 * D * D + 4 * D) * 4
FC2_GRADS = (D * 4 * D + D) * 4


class Block(torch.nn.Module):
    def __init__(self, hidden=4 * D):
        super().__init__()
        self.fc1 = torch.nn.Linear(D, hidden)
        self.act = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(hidden, D)

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(x)))


class Net(torch.nn.Module):
    """Three blocks; the middle one is called through ``region``."""

    def __init__(self, region=None):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = torch.nn.ModuleList([Block() for _ in range(3)])
        self.region = region

    def forward(self, x):
        for i, block in enumerate(self.blocks):
            x = self.region(block, x) if i == 1 and self.region else block(x)
        return x


def step(model, x):
    loss = model(x).square().mean()
    loss.backward()                                 # the peak
    return loss.detach()


def profiled(model, x):
    """(record's peak, the gradients), checked: the kinds and the modules
    sum exactly, the peak is in the backward, and the gradients are those of
    the same step unprofiled."""
    twin = Net(model.region)
    twin.load_state_dict({k.replace("._orig_mod", ""): v
                          for k, v in model.state_dict().items()})
    step(twin, x.detach().clone().requires_grad_(x.requires_grad))
    prof = LineProfiler(step, device="cpu")
    with prof:
        step(model, x)
    peak, held = checked_peak(prof.stats()[0])
    assert sum(peak["by_module"].values()) == sum(held.values())
    assert peak["lineno"] == line_of(step, "# the peak")
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        assert torch.equal(p.grad, q.grad), name
    return peak, prof


def plain_peak():
    peak, _ = profiled(Net(), torch.randn(B, D))
    return peak


def rng_bytes():
    # checkpointing keeps the RNG state, made in Net's forward where it is called
    return torch.get_rng_state().untyped_storage().nbytes()


def test_checkpoint_non_reentrant_recomputation_is_charged_to_the_region(tmp_path):
    region = (lambda block, x: checkpoint(block, x, use_reentrant=False))
    peak, prof = profiled(Net(region), torch.randn(B, D))
    # the peak is in block 1's backward: the node of fc2 whose saved tensors
    # called for the recomputation has made fc2's gradients; the ReLU's
    # backward after it is charged to it as ever (the forward's nodes run)
    assert peak["by_module"] == {
        "Net": rng_bytes(), "blocks.0": ACT, "blocks.0.act": WIDE,
        "blocks.1": 2 * WIDE + FC2_GRADS,           # recomputed fc1 and ReLU outputs
        "blocks.1.act": WIDE,
        "blocks.2.fc1": FC1_GRADS, "blocks.2.fc2": FC2_GRADS,
        NO_MODULE: ACT + 8}                         # the output's gradient, loss, seed
    assert peak["by_kind"]["gradient"] == FC1_GRADS + 2 * FC2_GRADS
    assert peak["by_module_stopped_at"] == ["blocks.1"]
    text = repr(prof.display())
    by_module = text.splitlines().index(next(l for l in text.splitlines()
                                             if l.startswith("by module: ")))
    assert text.splitlines()[by_module + 1] == (
        "note: modules inside compiled or checkpointed regions are charged to the "
        "outermost visible module (blocks.1)")
    prof.save(tmp_path / "p.json")
    assert load(tmp_path / "p.json").stats()[0]["peak"] == prof.stats()[0]["peak"]
    assert repr(load(tmp_path / "p.json").display()) == text


def test_checkpoint_reentrant_recomputation_and_its_backward_go_to_the_region():
    region = (lambda block, x: checkpoint(block, x, use_reentrant=True))
    peak, _ = profiled(Net(region), torch.randn(B, D, requires_grad=True))
    # use_reentrant=True recomputes the block and runs its backward inside
    # one node: the recomputed fc1 and ReLU outputs and the block's output,
    # then the ReLU output's gradient and fc2's gradients
    assert peak["by_module"] == {
        "Net": rng_bytes(), "blocks.0": ACT, "blocks.0.act": WIDE,
        "blocks.1": 3 * WIDE + ACT + FC2_GRADS,
        "blocks.2.fc1": FC1_GRADS, "blocks.2.fc2": FC2_GRADS,
        NO_MODULE: ACT + 8}
    assert peak["by_module_stopped_at"] == ["blocks.1"]


class WideThenCheckpointed(torch.nn.Module):
    """A wide block, an operation of this module's own, then a checkpointed
    block: the peak is in the wide block's backward, after the checkpointed
    block's."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.wide = Block(16 * D)
        self.block = Block()

    def forward(self, x):
        x = self.wide(x) * 2.0
        return checkpoint(self.block, x, use_reentrant=True)


def test_after_a_reentrant_checkpoint_the_backward_is_charged_as_before():
    prof = LineProfiler(step, device="cpu")
    with prof:
        step(WideThenCheckpointed(), torch.randn(B, D, requires_grad=True))
    peak, held = checked_peak(prof.stats()[0])
    by_module = peak["by_module"]
    # the gradient of `* 2.0` (made by this module's backward; the wide
    # block's residual passes it on to the input's .grad) is this module's,
    # not one of the recomputed block's modules
    assert by_module["WideThenCheckpointed"] == rng_bytes() + ACT
    assert by_module["block"] == FC1_GRADS + FC2_GRADS
    assert not [name for name in by_module if name.startswith("block.")]
    assert peak["by_module_stopped_at"] == ["block"]


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_compiled_block_is_charged_with_its_modules_bytes(backend):
    dynamo = pytest.importorskip("torch._dynamo")
    model = Net()
    model.blocks[1] = torch.compile(model.blocks[1], backend=backend)
    dynamo.reset()
    dynamo.utils.counters.clear()
    with pytest.warns(UserWarning, match="global hooks"):   # torch's, while ours are on
        peak, _ = profiled(model, torch.randn(B, D))
    # our hooks, traced into the compiled code, break no graph
    assert not dynamo.utils.counters["graph_break"]
    plain = plain_peak()
    # the same kinds (but what the process held before, which differs); block
    # 1's modules' bytes are its own
    peak["by_kind"].pop("input"), plain["by_kind"].pop("input")
    assert peak["by_kind"] == plain["by_kind"]
    expected = dict(plain["by_module"])
    expected["blocks.1"] += expected.pop("blocks.1.act")
    assert peak["by_module"] == expected
    assert peak["by_module_stopped_at"] == ["blocks.1"]
    assert "by_module_stopped_at" not in plain


def test_the_programs_own_saved_tensor_hooks_stay_on_top():
    # ours under a program's saved-tensor hooks would hide them (as they hid
    # checkpointing's): theirs keep deciding what is kept, which then counts
    # as made in the call (temporary), not saved for backward
    packed = []

    def pack(t):
        packed.append(t.shape)
        return t

    model, x = Net(), torch.randn(B, D)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step(model, x)
    unprofiled, packed[:] = list(packed), []
    prof = LineProfiler(step, device="cpu")
    with prof, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step(model, x)
    assert packed == unprofiled and len(packed) > 3
    peak, _ = checked_peak(prof.stats()[0])
    assert "saved_for_backward" not in peak["by_kind"]
