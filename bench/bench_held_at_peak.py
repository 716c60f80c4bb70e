"""The cost of following each block for ``held_at_peak``, on the CPU
or on CUDA (--device cuda):

  unprofiled loop   100,000 small tensor allocations in a function that is not
                    profiled: before any profile (no counting wrapper yet),
                    while a profiler is enabled (every block reaches the
                    tracer's table), and after it was disabled (the wrapper
                    stays; the tracer's listener returns at once).  Ratios over
                    the first, medians of alternating repeats.
  train step        an MLP train step (Linear 512->2048->512, Adam, batch 256)
                    with ``step`` profiled, over unprofiled.
  per line          a profiled hot loop of ``x = x + 1`` (one block made and one
                    freed per line) under a Tracer that follows blocks minus
                    the same Tracer with follow_blocks=False, in ns per line
                    event, pairs alternating.

Usage: PYTHONPATH=. python bench/bench_held_at_peak.py [--repeats N] [--device cuda]"""
import argparse
import statistics
import time

import torch

from pytorch_memlab import LineProfiler, _tracer, sources
from pytorch_memlab.records.columns import GROWTH_FIELD

DEVICE = "cpu"


def churn(n):
    for _ in range(n):
        torch.empty(16, device=DEVICE)


def hot(x, n):
    for _ in range(n):
        x = x + 1
    return x


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def per_line_ns(repeats, n=20_000):
    """ns per line event that following blocks adds to a profiled hot loop."""
    columns = ("active_bytes.all.peak", "reserved_bytes.all.peak")
    source = sources.get_source(DEVICE, columns + (GROWTH_FIELD,))
    x = torch.zeros(256, device=DEVICE)
    diffs = []
    for i in range(repeats):
        times = {}
        for follow in ((True, False) if i % 2 else (False, True)):
            tracer = _tracer.Tracer(source, 0, columns, growth_field=GROWTH_FIELD,
                                    follow_blocks=follow)
            tracer.add_code(hot.__code__)
            tracer.enable()
            sync()
            start = time.perf_counter()
            hot(x, n)
            sync()
            times[follow] = time.perf_counter() - start
            tracer.disable()
        diffs.append((times[True] - times[False]) / (2 * n) * 1e9)   # ~2 line events a turn
    return statistics.median(diffs)


def timed(fn, *args):
    start = time.perf_counter()
    fn(*args)
    return time.perf_counter() - start


def step(model, optimizer, x):
    loss = model(x).square().mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    if DEVICE == "cuda":
        torch.cuda.init()
    n = 100_000
    churn(n)                                   # warm up
    before = statistics.median(timed(churn, n) for _ in range(args.repeats))
    prof = LineProfiler(step, device=DEVICE)
    on, off = [], []
    for _ in range(args.repeats):
        with prof:
            on.append(timed(churn, n))
        off.append(timed(churn, n))
    print(f"[{DEVICE}] unprofiled loop of {n:,} allocations: {before * 1e3:.1f} ms never profiled; "
          f"{statistics.median(on) / before:.3f}x while a profiler is enabled; "
          f"{statistics.median(off) / before:.3f}x after it was disabled")

    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(),
                                torch.nn.Linear(2048, 512)).to(DEVICE)
    optimizer = torch.optim.Adam(model.parameters())
    x = torch.randn(256, 512, device=DEVICE)
    for _ in range(3):
        step(model, optimizer, x)

    def synced_step():
        step(model, optimizer, x)
        sync()
    plain, profiled = [], []
    for _ in range(args.repeats):
        plain.append(timed(synced_step))
        with prof:
            profiled.append(timed(synced_step))
    print(f"[{DEVICE}] MLP train step with step() profiled: "
          f"{statistics.median(profiled) / statistics.median(plain):.3f}x unprofiled")
    print(f"[{DEVICE}] per line event, following blocks adds "
          f"{per_line_ns(args.repeats):+.1f} ns (x = x + 1: a block made and one freed)")


if __name__ == "__main__":
    main()
