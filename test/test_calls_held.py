"""growth_per_call is what a call *kept* of a line's growth: a result held
until the next call replaces it is not a leak, even beside a line that does
leak in the same call (the frees seen before the next call are charged to
the lines whose growth they fit)."""
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
