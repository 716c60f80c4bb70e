"""``@profile`` costs no recursion depth: the callable it returns for a plain
function is a C one, so a recursive profiled function reaches (nearly) the
depth it reaches unprofiled, and what it returns for a method still binds,
pickles by name and leaves no frame of ours in a traceback."""
import pickle
import sys
import traceback

import pytest
from helpers import MiB

torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")

from pytorch_memlab import LineProfiler, clear_global_line_profiler, profile  # noqa: E402
from pytorch_memlab.line_profiler import global_line_profiler  # noqa: E402

# Python 3.12 alone also counts each call from C into Python against a fixed
# C recursion limit (1500 units, two per call, whatever sys.getrecursionlimit
# says): through a C callable, three quarters of the depth at most there.
SHARE = 0.7 if sys.version_info[:2] == (3, 12) else 0.9


def deepest(func):
    """The deepest level ``func``, calling itself, reached before RecursionError."""
    seen = [0]
    with pytest.raises(RecursionError):
        func(0, seen, func)
    return seen[0]


def descend(level, seen, itself):
    seen[0] = level
    return itself(level + 1, seen, itself)


@pytest.fixture
def cleared():
    yield
    clear_global_line_profiler()
    # On 3.12+ a decorated function's profiler stays on between calls (and
    # holds its sys.monitoring tool id): off, for the tests that follow.
    prof = global_line_profiler(device="cpu")
    if prof is not None:
        prof.disable()


def test_recursion_reaches_nearly_its_unprofiled_depth(cleared):
    plain = deepest(descend)
    depth = deepest(profile(descend, device="cpu"))
    assert sys.getrecursionlimit() >= plain >= 0.9 * sys.getrecursionlimit() - 20
    assert depth >= SHARE * plain, (depth, plain)


def grow(n):
    x = torch.ones(MiB // 4)  # 1 MiB
    return x.numel() if n == 0 else x.numel() + grow(n - 1)


def test_recursive_levels_are_each_counted(cleared):
    prof = LineProfiler(grow, device="cpu")
    with prof:
        assert grow(3) == 4 * MiB // 4
    (record,) = prof.stats()
    (ones,) = [line for line in record["lines"] if "torch.ones" in line["code"]]
    peak = record["peak"]
    # what the test process held before counts too: the call's own part is 4 MiB
    assert ones["count"] == 4 and ones["active_bytes.all.peak"] == peak["bytes"]
    assert peak["bytes"] - peak["before_call"] - peak["other_threads"] == 4 * MiB


class Model:
    @profile(device="cpu")
    def double(self, x):
        return x * 2


def fails():
    raise KeyError("inside")


def test_methods_bind_pickle_by_name_and_tracebacks_show_the_function_only(cleared):
    model = Model()
    assert model.double(torch.ones(2)).tolist() == [2.0, 2.0]
    assert Model.double(model, torch.ones(1)).tolist() == [2.0]
    assert Model.double.__name__ == "double" and Model.double.__wrapped__.__name__ == "double"
    assert pickle.loads(pickle.dumps(Model.double)) is Model.double
    wrapped = profile(fails, device="cpu")
    with pytest.raises(KeyError) as info:
        wrapped()
    files = {frame.filename for frame in traceback.extract_tb(info.value.__traceback__)}
    assert files == {__file__}
