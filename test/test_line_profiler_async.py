"""What an unprofiled callee allocates after an await resumes is charged to
the awaiting line, under both mechanisms (settrace used to lose it: the
resumed frame had no current line until the next line event)."""
import asyncio

import pytest
from helpers import line_figures

torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")

from pytorch_memlab import LineProfiler  # noqa: E402

from helpers import MiB  # noqa: E402
PEAK = "active_bytes.all.peak"
kept = []


async def helper():
    await asyncio.sleep(0)
    kept.append(torch.empty(MiB, dtype=torch.uint8))   # after the first suspension
    return 1


async def awaits_helper():
    n = await helper()  # await helper
    return n


async def two_mib(tag):
    a = torch.empty(MiB, dtype=torch.uint8)  # first MiB
    b = await helper()  # second MiB, after a suspension
    kept.append(a)
    return tag + b


async def interleaved():
    return await asyncio.gather(two_mib(1), two_mib(2))


def test_callee_allocating_after_resume_is_charged():
    kept.clear()
    prof = LineProfiler(awaits_helper, device="cpu")
    with prof:
        assert asyncio.run(awaits_helper()) == 1
    line = line_figures(prof, awaits_helper, "# await helper")
    assert line["net_growth"] == MiB
    kept.clear()


def test_interleaved_coroutines_charge_all_four_mib():
    kept.clear()
    # two_mib runs twice, interleaved on one event loop: 2 x 2 MiB
    prof = LineProfiler(two_mib, device="cpu")
    with prof:
        assert asyncio.run(interleaved()) == [2, 3]
    assert line_figures(prof, two_mib, "# first MiB")["net_growth"] == 2 * MiB
    assert line_figures(prof, two_mib, "# second MiB")["net_growth"] == 2 * MiB
    kept.clear()
