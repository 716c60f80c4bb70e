"""bench_torch.py's host-memory row: what a call of 1,000,002 and of
10,000,002 line events leaves held (RSS), ours, and the old package's per
event (tracemalloc)."""
import sys
import tracemalloc

from timing import hot  # noqa: E402  (bench/ is on sys.path when run as a script)
from torch_common import CURVE_BOUND, NA, measure_old, old_enable, ours_events, quiet, \
    rss_bytes, settle  # noqa: E402
from pytorch_memlab import LineProfiler

def memory_one_size(env, events, curve="peak"):
    prof = LineProfiler(hot, device=env.dev, curve=curve)
    with prof:
        # line tables, allocator wrapper, hooks, and a kept curve of this size
        hot(events // 11)
    settle()
    before_events = ours_events(prof, hot)
    settle()
    rss0 = rss_bytes()
    with prof:
        hot(events // 11)
    settle()
    rss1 = rss_bytes()
    n = ours_events(prof, hot) - before_events
    return {"bytes_per_event": (rss1 - rss0) / n, "events": n, "rss_delta": rss1 - rss0}


def memory_ours(env, sizes):
    """Each size's figures, then the largest with curve=None; ``bytes_per_event``:
    the largest size's; ``bounded``: what each call left within CURVE_BOUND."""
    runs = [memory_one_size(env, events) for events in sizes]
    return {"bytes_per_event": runs[-1]["bytes_per_event"], "runs": runs,
            "events": runs[-1]["events"], "no_curve": memory_one_size(env, sizes[-1], None),
            "bounded": all(r["rss_delta"] <= CURVE_BOUND for r in runs)}


def memory_old(env, events, old):
    prof = quiet(old.LineProfiler, hot, target_gpu=env.index)
    old_enable(prof)
    hot(10)
    prof.disable()
    settle()
    prof._raw_line_records = []
    tracemalloc.start()
    try:
        settle()
        m0 = tracemalloc.get_traced_memory()[0]
        old_enable(prof)
        hot(events // 11)
        prof.disable()
        settle()
        m1 = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
        sys.settrace(None)
    n = len(prof._raw_line_records)
    if n == 0:
        raise NA("it recorded no line events")
    return {"bytes_per_event": (m1 - m0) / n, "events": n}


def memory_all(env, args, old):
    out = {"ours": memory_ours(env, args.ours_mem_sizes)}
    if old is not None:
        measure_old(out, memory_old, env, args.old_mem_events, old)
    return out
