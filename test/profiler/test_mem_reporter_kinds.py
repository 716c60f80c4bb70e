"""MemReporter's kinds are the peak's, with real torch on the CPU: after one
Adam step, what MemReporter counts as parameters, gradients and optimizer
state is what the next profiled step's peak found alive of them before the
call, byte for byte, and each is those tensors' storages; every kind the
printed table shows is one of ``kinds.names.KINDS``."""
import re

import pytest

from helpers import checked_peak

torch = pytest.importorskip("torch")

from pytorch_memlab import LineProfiler, MemReporter  # noqa: E402
from pytorch_memlab.kinds.names import KINDS  # noqa: E402

B, D = 4, 64
MODEL_STATE = ("parameter", "gradient", "optimizer_state")
# a row of the table: ... kind, dtype, shape, used memory, storage
ROW = re.compile(r" (\S+) +[a-z0-9_]+ +\([^()]*\) +\S+ +(#\d+|-)$")


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(D, 2 * D), torch.nn.ReLU(),
                               torch.nn.Linear(2 * D, D))


def step(model, opt, x):
    loss = model(x).square().mean()
    loss.backward()                 # accumulates into the gradients the report saw
    opt.step()
    return loss.detach()


def nbytes(tensors):
    return sum(t.untyped_storage().nbytes() for t in tensors)


def printed_kinds(text):
    """The Kind column of every row of a printed report."""
    lines = text.splitlines()
    rows = [ROW.search(line) for line in lines[2:] if not line.startswith(("Storage on", "-"))]
    return [m.group(1) for m in rows if m is not None]


def test_model_state_kinds_match_the_next_calls_peak(capsys):
    model, x = mlp(), torch.randn(B, D)
    opt = torch.optim.Adam(model.parameters())
    step(model, opt, x)
    reporter = MemReporter(model)
    reporter.add_optimizer(opt)
    mine = reporter.report(module=model, print_report=False)
    reported = {kind: sum(r.bytes for r in mine.rows if r.kind == kind) for kind in MODEL_STATE}

    params = list(model.parameters())
    state = [v for s in opt.state.values() for v in s.values()]
    assert reported == {"parameter": nbytes(params),
                        "gradient": nbytes(p.grad for p in params),
                        "optimizer_state": nbytes(state)}
    assert len(state) == 3 * len(params)             # exp_avg, exp_avg_sq, step each

    prof = LineProfiler(step, device="cpu")
    with prof:
        step(model, opt, x)
    peak, _ = checked_peak(prof.stats()[0])
    before = peak["before_call_by_kind"]
    assert {kind: before.get(kind, 0) for kind in MODEL_STATE} == reported

    loss = model(x).square().mean()
    whole = reporter.report(verbose=True, outputs=loss)   # printed: every row, every source
    shown = printed_kinds(capsys.readouterr().out)
    assert len(shown) == len(whole.rows)
    assert set(MODEL_STATE) | {"saved_for_backward", "other"} <= set(shown)
    assert set(shown) <= set(KINDS), set(shown) - set(KINDS)
