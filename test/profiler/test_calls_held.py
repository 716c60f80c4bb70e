"""growth_per_call is what a call *kept* of a line's growth: a result held
until the next call replaces it is not a leak, even beside a line that does
leak in the same call (the blocks each line made are followed until the call
after the next begins)."""
import io

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")

from pytorch_memlab import LineProfiler  # noqa: E402

from helpers import MiB, line_figures  # noqa: E402

FLOATS_PER_MIB = MiB // 4
kept = []


@pytest.fixture(autouse=True)
def fresh():
    kept.clear()
    yield
    kept.clear()


class Model:
    """Holds its last output until the next step replaces it."""

    def __init__(self):
        self.out = None

    def step(self):
        self.out = torch.empty(4 * FLOATS_PER_MIB)
        return 1

    def step_and_leak(self):
        kept.append(torch.empty(FLOATS_PER_MIB))        # 1 MiB kept per call
        self.out = torch.empty(4 * FLOATS_PER_MIB)
        return 1


def make_result():
    out = torch.empty(4 * FLOATS_PER_MIB)
    return out


def make_result_and_leak():
    kept.append(torch.empty(FLOATS_PER_MIB))            # 1 MiB kept per call
    out = torch.empty(4 * FLOATS_PER_MIB)
    return out


def leak_beside_a_temporary():
    tmp = torch.empty(4 * FLOATS_PER_MIB)               # freed two lines below
    kept.append(torch.empty(FLOATS_PER_MIB))            # 1 MiB kept per call
    del tmp
    return len(kept)


def leak_only():
    kept.append(torch.empty(FLOATS_PER_MIB))            # 1 MiB kept per call
    return len(kept)


def profiled(func, loop, calls=5):
    prof = LineProfiler(func, device="cpu")
    with prof:
        loop(calls)
    return prof


def held_by_caller(func):
    def loop(calls):
        result = None
        for _ in range(calls):
            result = func()              # the previous result lives until here
        del result
    return loop


def called(func):
    def loop(calls):
        for _ in range(calls):
            func()
    return loop


def marks(prof):
    out = io.StringIO()
    prof.print_stats(stream=out)
    return [row for row in out.getvalue().splitlines() if "grows every call" in row]


@pytest.mark.parametrize("calls", [3, 5])
def test_result_held_until_the_next_call_is_not_marked(calls):
    model = Model()
    prof = profiled(Model.step, lambda n: [model.step() for _ in range(n)], calls)
    assert line_figures(prof, Model.step, "self.out =")["growth_per_call"] == 0
    prof = profiled(make_result, held_by_caller(make_result), calls)
    line = line_figures(prof, make_result, "out = torch.empty")
    assert line["later_calls"]["net_growth"] == 4 * MiB * (calls - 1)   # grew every call
    assert line["growth_per_call"] == 0
    assert marks(prof) == []


@pytest.mark.parametrize("func, text", [
    (make_result_and_leak, "out = torch.empty"),
    (leak_beside_a_temporary, "tmp = torch.empty"),
], ids=["held-result", "temporary"])
def test_only_the_leaking_line_is_marked(func, text):
    prof = profiled(func, held_by_caller(func))
    assert line_figures(prof, func, text)["growth_per_call"] == 0
    assert line_figures(prof, func, "kept.append")["growth_per_call"] == MiB
    (row,) = marks(prof)
    assert "kept.append" in row and row.endswith("<-- grows every call (+1.00M)")


def test_stateful_step_that_also_leaks():
    model = Model()
    prof = profiled(Model.step_and_leak, lambda n: [model.step_and_leak() for _ in range(n)])
    assert line_figures(prof, Model.step_and_leak, "self.out =")["growth_per_call"] == 0
    assert line_figures(prof, Model.step_and_leak, "kept.append")["growth_per_call"] == MiB


def test_a_leak_alone_is_marked_exactly():
    prof = profiled(leak_only, called(leak_only))
    line = line_figures(prof, leak_only, "kept.append")
    assert line["growth_per_call"] == MiB
    assert line["later_calls"]["net_growth"] == 4 * MiB
    (row,) = marks(prof)
    assert row.endswith("<-- grows every call (+1.00M)")


TRAIN_STEP = """
import torch
from torch import nn

torch.manual_seed(0)
net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
opt = torch.optim.SGD(net.parameters(), lr=0.1)
LEAK = []
x, y = torch.randn(128, 64), torch.randint(0, 10, (128,))

def train_step():
    out = net(x)
    loss = nn.functional.cross_entropy(out, y)
    LEAK.append(out.detach().clone())
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.item()

for _ in range(6):
    train_step()
"""


def test_the_leak_is_marked_on_the_line_that_keeps_it_under_run(tmp_path):
    """`run -f` profiles each call on its own (the hook is off between
    calls): the line that keeps a 5,120-byte copy per step is the one marked,
    not the loss line beside it."""
    import json

    from helpers import saved_profile
    doc = json.loads(saved_profile(tmp_path, "step", TRAIN_STEP).read_text())
    (record,) = doc["functions"]
    growth = {line["code"].strip(): line.get("growth_per_call") for line in record["lines"]}
    assert growth["LEAK.append(out.detach().clone())"] == 128 * 10 * 4
    assert {code: g for code, g in growth.items() if g} == \
        {"LEAK.append(out.detach().clone())": 128 * 10 * 4}
