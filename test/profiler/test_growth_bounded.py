"""A bounded cache is not growth: the blocks a deque of the last three
results holds outlive a call or two and are then freed, while a list that
keeps one tensor per call grows.  Real CPU tensors, the profiler enabled
through all the calls (blocks followed between them)."""
import collections

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")
from pytorch_memlab import LineProfiler  # noqa: E402

from helpers import line_of  # noqa: E402

RECENT = collections.deque(maxlen=3)
LEAK = []
KEEP = []


def step():
    RECENT.append(torch.empty(1 << 18))          # deque
    LEAK.append(torch.empty(1 << 16))            # leak
    a = torch.empty(1 << 17)                     # capped
    KEEP.append(a)
    if len(KEEP) > 2:
        KEEP.pop(0)
    x = torch.empty(1 << 18)
    return x.sum()


def test_a_cache_of_the_last_results_does_not_grow_every_call_and_a_leak_does():
    RECENT.clear(), LEAK.clear(), KEEP.clear()
    prof = LineProfiler(step, device="cpu")
    with prof:
        for _ in range(10):
            step()
    (record,) = prof.stats(step)
    growth = {line["lineno"]: line.get("growth_per_call") for line in record["lines"]}
    leak = LEAK[0].untyped_storage().nbytes()
    assert (growth[line_of(step, "# deque")], growth[line_of(step, "# leak")],
            growth[line_of(step, "# capped")]) == (0, leak, 0)
    # what the leaking line made is all still alive: one tensor per call
    assert sum(t.untyped_storage().nbytes() for t in LEAK) == 10 * leak
