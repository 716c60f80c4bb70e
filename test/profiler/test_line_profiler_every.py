"""profile_every, and the target GPU the decorators follow."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")

from pytorch_memlab import profile_every, reset_target_gpu, set_target_gpu, target_gpu
from pytorch_memlab.common import devices as _devices  # noqa: E402
from pytorch_memlab.line_profiler import readable_size
from test_line_profiler_decorators import no_hook, parse  # noqa: E402


# ---- profile_every ---------------------------------------------------------------------

def test_profile_every_prints_each_interval(capsys):
    @profile_every(2, device="cpu")
    def step(n):
        x = torch.empty(n)  # every line
        return x.numel()

    for i in range(5):
        step(262144 * (i + 1))
    out = capsys.readouterr().out
    tables = out.split("## ")[1:]
    assert len(tables) == 2                              # after calls 2 and 4
    # each table holds only its own interval: calls 1-2 grew 1+2 MiB, calls 3-4 3+4 MiB
    rows = [t.split("# every line")[0].splitlines()[-1].split() for t in tables]
    assert [r[3:5] for r in rows] == [["3.00M", "2"], ["7.00M", "2"]]   # held at peak: r[2]
    assert readable_size(parse(rows[1][0]) - parse(rows[0][0])) == "2.00M"   # peaks 4 vs 2
    assert step.line_profiler.stats()[0]["lines"][2]["count"] == 1   # call 5, unprinted
    no_hook(step.line_profiler)


def test_profile_every_disabled_returns_function():
    def step():
        return 1
    assert profile_every(3, enable=False)(step) is step
    with pytest.raises(ValueError, match=r"output_interval must be an int >= 1 .*not 0"):
        profile_every(0)


@pytest.mark.parametrize("interval", ["2", 2.0, None, True])
def test_profile_every_refuses_a_non_int_interval(interval):
    with pytest.raises(TypeError, match=r"profile_every: output_interval must be an int >= 1"):
        profile_every(interval)


def test_profile_every_prints_on_exception(capsys):
    @profile_every(10, device="cpu")
    def fails():
        raise RuntimeError("x")  # fails here

    with pytest.raises(RuntimeError):
        fails()
    assert "<-- RuntimeError raised here" in capsys.readouterr().out


# ---- the target GPU --------------------------------------------------------------------

@pytest.mark.cuda   # set_target_gpu refuses every index without CUDA (test_common.py)
def test_target_gpu_state_without_cuda_profilers():
    before = _devices._target
    try:
        set_target_gpu(0)
        assert _devices.current_target() == 0
        with target_gpu(torch.device("cuda", 0)) as index:
            assert index == 0
        assert _devices._target == 0
        reset_target_gpu()
        assert _devices._target is None
        with pytest.raises(ValueError):
            set_target_gpu("cpu")
        with pytest.raises(ValueError):
            set_target_gpu(-1)
    finally:
        _devices._target = before
