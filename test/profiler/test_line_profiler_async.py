"""What an unprofiled callee allocates after an await resumes is charged to
the awaiting line, under both mechanisms (on settrace the resumed frame has
no current line until its next line event: the resume gives it one)."""
import asyncio

import pytest
from helpers import line_figures, line_of

torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")

from pytorch_memlab import LineProfiler, clear_global_line_profiler, profile  # noqa: E402
from pytorch_memlab.line_profiler import global_line_profiler  # noqa: E402

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


async def work():
    a = torch.empty(4 * MiB, dtype=torch.uint8)   # before the await
    await asyncio.sleep(0)                          # suspends
    b = torch.empty(16 * MiB, dtype=torch.uint8)  # after the await
    return a, b


def held_at_peak(prof, func):
    """(peak, {lineno: held}) of ``func``'s only record, its parts checked."""
    record = prof.stats(func)[0]
    peak = record["peak"]
    held = {line["lineno"]: line["held_at_peak"] for line in record["lines"]
            if line["held_at_peak"]}
    assert sum(held.values()) + peak["before_call"] + peak["other_threads"] == peak["bytes"]
    return record, peak, held


def test_an_await_does_not_split_the_call():
    before, after = line_of(work, "# before the await"), line_of(work, "# after the await")
    prof = LineProfiler(work, device="cpu")
    with prof:
        for _ in range(2):
            del _
            result = asyncio.run(work())
            del result
    record, peak, held = held_at_peak(prof, work)
    assert record["calls"] == 2                       # one per asyncio.run, not per resume
    assert held == {before: 4 * MiB, after: 16 * MiB}  # not "before the call"
    assert peak["lineno"] == after and peak["other_threads"] == 0
    assert "first call" not in repr(prof.display())   # no first-call note


def test_interleaved_coroutines_each_hold_their_own_bytes():
    before, after = line_of(work, "# before the await"), line_of(work, "# after the await")

    async def both():
        return await asyncio.gather(work(), work())

    prof = LineProfiler(work, device="cpu")
    with prof:
        results = asyncio.run(both())
    record, peak, held = held_at_peak(prof, work)
    del results
    # The second coroutine peaks last: its own 4 + 16 MiB on its lines; the
    # first's 4 MiB was alive before it began, the first's 16 MiB was made by
    # other code while it was suspended.
    assert held == {before: 4 * MiB, after: 16 * MiB}
    assert peak["lineno"] == after
    assert peak["other_threads"] == 16 * MiB
    assert peak["bytes"] - peak["before_call"] == 36 * MiB
    # Overlapping calls are one call of the per-call figures, as on threads.
    assert record["calls"] == 1


def test_a_decorated_coroutine_is_one_call_per_run():
    clear_global_line_profiler()

    @profile(device="cpu")
    async def decorated():
        a = torch.empty(4 * MiB, dtype=torch.uint8)   # decorated, before
        await asyncio.sleep(0)
        b = torch.empty(16 * MiB, dtype=torch.uint8)  # decorated, after
        return a, b

    try:
        for _ in range(2):
            del _
            result = asyncio.run(decorated())
            del result
        prof = global_line_profiler(device="cpu")
        prof.disable()
        record, peak, held = held_at_peak(prof, decorated)
        assert record["calls"] == 2
        assert held == {line_of(decorated, "# decorated, before"): 4 * MiB,
                        line_of(decorated, "# decorated, after"): 16 * MiB}
    finally:
        clear_global_line_profiler()
