"""What each feature of a profile adds per line event, on bench_torch's hot
loop of small tensor ops, so that a regression shows in one run.

Each row is a pair of Tracers that differ in one thing, run alternately on
the same loop (adjacent pairs, the order flipping each repeat), the median
difference over the line events counted:

  all on            a Tracer as LineProfiler makes it (the device's source,
                    its columns, curve="peak", blocks followed), over no
                    tracer at all
  held at peak      blocks followed (follow_blocks=True) over not followed
  curve             curve="peak" over curve=None
  source read       the device's source over a compiled source that reads a
                    static array (the test source; both with no curve and no
                    blocks followed): the reading and the allocator's hook

Per-call figures are always on (their work is at a call's start and end,
not per line) and have no row.

  PYTHONPATH=. python bench/bench_features.py [--device cuda] [--quick]
"""
import argparse
import gc
import json
import statistics
import time

import torch

from pytorch_memlab import LineProfiler, _tracer, sources
from pytorch_memlab.records.columns import GROWTH_FIELD
from pytorch_memlab.records.curve import PEAK_FIELD, RESERVED_FIELD
from torch_workloads import hot_loop  # noqa: E402  (bench/ is on sys.path as a script)


def profiler_tracer(dev, curve="peak", follow_blocks=True):
    """A Tracer of hot_loop as LineProfiler(hot_loop, device=dev) makes one
    (line_profiler/tracers.py), with the features given."""
    kind = torch.device(dev).type
    columns = tuple(LineProfiler(hot_loop, device=dev).columns)
    fields = sources.source_fields(kind)
    extra = () if curve is None else tuple(
        f for f in (RESERVED_FIELD, PEAK_FIELD) if f not in columns and f in fields)
    read = columns + extra
    pick = (RESERVED_FIELD if RESERVED_FIELD in read else None,
            PEAK_FIELD if PEAK_FIELD in read else None)
    source = sources.get_source(kind, read + (GROWTH_FIELD,))
    index = torch.device(dev).index or 0
    tracer = _tracer.Tracer(source, index, read, growth_field=GROWTH_FIELD, curve=curve,
                            curve_columns=pick, follow_blocks=follow_blocks)
    tracer.add_code(hot_loop.__code__)
    return tracer


def static_tracer():
    """The same loop under the test source, which reads a static array."""
    from pytorch_memlab import _testsource
    tracer = _tracer.Tracer(_testsource.manual_source, 0,
                            ("bytes.peak", "bytes.allocated", "bytes.freed", "bytes.current"),
                            growth_field="bytes.current")
    tracer.add_code(hot_loop.__code__)
    return tracer


def events_of(tracer):
    return sum(count for code, lines in tracer.stats() if code is hot_loop.__code__
               for count, _, _ in lines.values())


def run(tracer, x, n, sync):
    """Seconds of hot_loop(x, n) under `tracer` (None: no tracer)."""
    if tracer is not None:
        tracer.clear()
        tracer.enable()
    start = time.perf_counter()
    hot_loop(x, n)
    sync()
    elapsed = time.perf_counter() - start
    if tracer is not None:
        tracer.disable()
    return elapsed


def added_ns(on, off, x, n, repeats, sync):
    """ns per line event `on` adds over `off`, median of alternating pairs."""
    run(on, x, n, sync)
    events = events_of(on)
    diffs = []
    for i in range(repeats):
        first, second = (on, off) if i % 2 else (off, on)
        t_first = run(first, x, n, sync)
        t_second = run(second, x, n, sync)
        t_on, t_off = (t_first, t_second) if first is on else (t_second, t_first)
        diffs.append((t_on - t_off) / events * 1e9)
    return statistics.median(diffs)


def features(dev="cpu", quick=False):
    """{row: ns per line event} (the rows of the module's docstring)."""
    n, repeats = (400, 31) if quick else (400, 151)
    cuda = dev.startswith("cuda")
    sync = (lambda: torch.cuda.synchronize()) if cuda else (lambda: None)
    x = torch.zeros(16, device=dev)
    hot_loop(x, 10)
    full = profiler_tracer(dev)
    rows = {}
    gc.collect()
    gc.disable()
    try:
        rows["all on"] = added_ns(full, None, x, n, repeats, sync)
        rows["held at peak"] = added_ns(full, profiler_tracer(dev, follow_blocks=False),
                                        x, n, repeats, sync)
        rows["curve"] = added_ns(full, profiler_tracer(dev, curve=None), x, n, repeats, sync)
        rows["source read"] = added_ns(profiler_tracer(dev, curve=None, follow_blocks=False),
                                       static_tracer(), x, n, repeats, sync)
    finally:
        gc.enable()
    return rows


def lines(rows):
    return [f"  feature: {name:<40} {ns:>9.1f} ns/event" for name, ns in rows.items()]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    rows = features(args.device, args.quick)
    print("\n".join(lines(rows)))
    print(json.dumps({"bench": "features", "device": args.device,
                      "ns_per_event": {k: round(v, 1) for k, v in rows.items()}}))


if __name__ == "__main__":
    main()
