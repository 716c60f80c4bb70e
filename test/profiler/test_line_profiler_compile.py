"""torch.compile'd functions: their frames run as compiled graphs, so no line
is traced; the table says so and how to profile them.  Real dynamo on CPU
(backend="eager": the graph runs eagerly, no C++ compiler needed; the frames
are replaced all the same)."""
import io

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")

from pytorch_memlab import LineProfiler, clear_global_line_profiler, profile  # noqa: E402
from pytorch_memlab.line_profiler import global_line_profiler  # noqa: E402

from helpers import MiB, code_line  # noqa: E402
COMPILED = "but none of its lines was traced: it is compiled by torch.compile"


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    clear_global_line_profiler()
    yield
    torch._dynamo.reset()
    prof = global_line_profiler(device="cpu")
    if prof is not None:
        prof.disable()


def text(prof, func=None):
    out = io.StringIO()
    prof.print_stats(func, stream=out)
    return out.getvalue()


def eager(x):
    y = torch.ones(1024, 1024) + x  # eager line
    return y.sum()


def test_compiled_function_says_why_and_the_eager_one_is_profiled():
    compiled = torch.compile(eager, backend="eager")
    prof = LineProfiler(compiled, device="cpu")
    with prof:
        assert compiled(torch.ones(1)).item() == 2 * MiB
    out = text(prof)
    assert "No profiled function ran" in out
    assert f"eager {COMPILED}" in out and "torch._dynamo.disable" in out

    # the advice works: the eager function, called as it is, is traced
    prof = LineProfiler(eager, device="cpu")
    with prof:
        eager(torch.ones(1))
    line = code_line(prof.stats()[0], "# eager line")
    assert line["count"] == 1 and line["active_bytes.all.peak"] >= 4 * MiB
    assert "none of its lines" not in text(prof)


def test_profile_over_compile_counts_the_calls():
    @profile(device="cpu")
    @torch.compile(backend="eager")
    def step(x):
        return (torch.ones(1024, 1024) + x).sum()

    step(torch.ones(1))
    step(torch.ones(1))
    assert f"step ran 2 times {COMPILED}" in text(global_line_profiler(device="cpu"), step)
    clear_global_line_profiler()     # forgets the calls with the figures
    out = text(global_line_profiler(device="cpu"), step)
    assert f"step {COMPILED}" in out and "ran 2 times" not in out


def test_compile_over_profile_says_it_ran():
    @torch.compile(backend="eager")
    @profile(device="cpu")
    def step(x):
        return (torch.ones(1024, 1024) + x).sum()

    step(torch.ones(1))
    out = text(global_line_profiler(device="cpu"))
    assert "step ran 1 time but none of its lines was traced: if torch.compile" in out


def test_dynamo_disable_inside_a_compiled_caller_is_profiled():
    @profile(device="cpu")
    @torch._dynamo.disable
    def kept_eager(x):
        y = torch.ones(1024, 1024) + x  # kept line
        return y

    @torch.compile(backend="eager")
    def caller(x):
        return kept_eager(x * 2).sum()

    assert caller(torch.ones(1)).item() == 3 * MiB
    prof = global_line_profiler(device="cpu")
    record = prof.stats(kept_eager)[0]
    line = code_line(record, "# kept line")
    assert line["count"] == 1 and line["net_growth"] == 4 * MiB
    assert "none of its lines" not in text(prof, kept_eager)


def test_compiled_module_registers_its_forward():
    class Net(torch.nn.Module):
        def forward(self, x):
            return (x * 2).sum()  # forward line

    net = torch.compile(Net(), backend="eager")
    prof = LineProfiler(net, device="cpu")
    with prof:
        net(torch.ones(4))
    assert [r["qualname"] for r in prof.stats()] == [
        "test_compiled_module_registers_its_forward.<locals>.Net.forward"]
    assert f"Net.forward {COMPILED}" in text(prof)
