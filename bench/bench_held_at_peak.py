"""The cost of following each block for ``held_at_peak`` (issue 26), on the CPU:

  unprofiled loop   100,000 small tensor allocations in a function that is not
                    profiled: before any profile (no counting wrapper yet),
                    while a profiler is enabled (every block reaches the
                    tracer's table), and after it was disabled (the wrapper
                    stays; the tracer's listener returns at once).  Ratios over
                    the first, medians of alternating repeats.
  train step        an MLP train step (Linear 512->2048->512, Adam, batch 256)
                  with ``step`` profiled, over unprofiled.

Usage: PYTHONPATH=. python bench/bench_held_at_peak.py [--repeats N]"""
import argparse
import statistics
import time

import torch

from pytorch_memlab import LineProfiler


def churn(n):
    for _ in range(n):
        torch.empty(16)


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
    args = parser.parse_args()
    n = 100_000
    churn(n)                                   # warm up
    before = statistics.median(timed(churn, n) for _ in range(args.repeats))
    prof = LineProfiler(step, device="cpu")
    on, off = [], []
    for _ in range(args.repeats):
        with prof:
            on.append(timed(churn, n))
        off.append(timed(churn, n))
    print(f"unprofiled loop of {n:,} allocations: {before * 1e3:.1f} ms never profiled; "
          f"{statistics.median(on) / before:.3f}x while a profiler is enabled; "
          f"{statistics.median(off) / before:.3f}x after it was disabled")

    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.ReLU(),
                                torch.nn.Linear(2048, 512))
    optimizer = torch.optim.Adam(model.parameters())
    x = torch.randn(256, 512)
    for _ in range(3):
        step(model, optimizer, x)
    plain, profiled = [], []
    for _ in range(args.repeats):
        plain.append(timed(step, model, optimizer, x))
        with prof:
            profiled.append(timed(step, model, optimizer, x))
    print(f"MLP train step with step() profiled: "
          f"{statistics.median(profiled) / statistics.median(plain):.3f}x unprofiled")


if __name__ == "__main__":
    main()
