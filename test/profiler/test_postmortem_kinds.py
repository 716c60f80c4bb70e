"""The out-of-memory post-mortem's live bytes by kind and by module: a model's
forward, then an allocation no machine can serve (2**62 bytes), real CPU
tensors; the kinds sum exactly to the allocated bytes the post-mortem
reports, the modules to what the failing call's lines made."""
import pytest

from helpers import MiB

torch = pytest.importorskip("torch")

from pytorch_memlab import LineProfiler  # noqa: E402
from pytorch_memlab.kinds.names import NO_MODULE  # noqa: E402
from pytorch_memlab.reports.postmortem_text import format_postmortem  # noqa: E402

B, D = 4, 128
ACT = B * D * 4


def forward_then_fail(model, x):
    out = model(x)
    kept = torch.empty(MiB, dtype=torch.uint8)
    huge = torch.empty(1 << 62, dtype=torch.uint8)     # fails
    return out, kept, huge


def test_live_bytes_at_the_failure_by_kind_and_module():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(D, D), torch.nn.ReLU(), torch.nn.Linear(D, D),
                                torch.nn.ReLU(), torch.nn.Linear(D, D))
    x = torch.randn(B, D)
    prof = LineProfiler(forward_then_fail, device="cpu")
    with pytest.raises(RuntimeError):
        with prof:
            forward_then_fail(model, x)
    pm = prof.stats()[0]["postmortem"]
    live = pm["live_by_line"]
    assert sum(live["by_kind"].values()) == live["bytes"] == pm["allocated_bytes"]
    assert live["by_kind"]["parameter"] == sum(p.untyped_storage().nbytes()
                                               for p in model.parameters())
    assert live["by_kind"]["saved_for_backward"] == 3 * ACT      # each Linear's input
    made = sum(line["bytes"] for line in live["lines"])
    assert live["by_module"] == {"Sequential.1": ACT, "Sequential.3": ACT,
                                 "Sequential.4": ACT, NO_MODULE: MiB}
    assert sum(live["by_module"].values()) == made
    text = format_postmortem(pm, "forward_then_fail")
    assert "    by kind: " in text and "saved for backward" in text
    assert "    by module: 1.00M outside modules, 2.00K Sequential.1" in text
