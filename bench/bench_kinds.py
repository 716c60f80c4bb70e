"""The cost of telling the peak's kinds and modules (the global module,
optimizer and saved-tensor hooks of ``pytorch_memlab.kinds``) on an MLP
train step (Linear W->4W->W x LAYERS, Adam; W 512, batch 64 by default)
with ``step`` profiled: kinds on over kinds off (``tagging.ENABLED``, what
PYTORCH_MEMLAB_KINDS=0 sets), medians of alternating repeats; the ratio and
the difference per step are printed, nothing is asserted.  ``--width 16
--batch 4`` makes the compute negligible: the difference is the hooks' own.

Usage: PYTHONPATH=. python bench/bench_kinds.py [--repeats N] [--steps N] [--width W]
       [--batch B] [--device cuda]"""
import argparse
import statistics
import time

import torch

from pytorch_memlab import LineProfiler
from pytorch_memlab.kinds import tagging

LAYERS = 4


def model_and_data(device, width=512, batch=64):
    torch.manual_seed(0)
    layers = []
    for _ in range(LAYERS):
        layers += [torch.nn.Linear(width, 4 * width), torch.nn.ReLU(),
                   torch.nn.Linear(4 * width, width)]
    model = torch.nn.Sequential(*layers).to(device)
    return model, torch.optim.Adam(model.parameters()), torch.randn(batch, width, device=device)


def step(model, opt, x):
    opt.zero_grad(set_to_none=True)
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    return loss


def timed(kinds, steps, device, model, opt, x):
    tagging.ENABLED = kinds
    prof = LineProfiler(step, device=device)
    with prof:
        step(model, opt, x)              # warm: Adam's state exists
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            step(model, opt, x)
        if device == "cuda":
            torch.cuda.synchronize()
        took = time.perf_counter() - start
    if kinds:
        assert "by_kind" in prof.stats()[0]["peak"]
    return took / steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    model, opt, x = model_and_data(args.device, args.width, args.batch)
    on, off = [], []
    for i in range(args.repeats):
        for kinds in ((True, False) if i % 2 else (False, True)):
            (on if kinds else off).append(timed(kinds, args.steps, args.device, model, opt, x))
    tagging.ENABLED = True
    m_on, m_off = statistics.median(on), statistics.median(off)
    w = args.width
    print(f"MLP train step ({LAYERS}x Linear {w}->{4 * w}->{w}, Adam, batch {args.batch}, "
          f"{args.device}), step profiled: kinds+modules on {m_on * 1e3:.2f} ms, off "
          f"{m_off * 1e3:.2f} ms, ratio {m_on / m_off:.3f}x, +{(m_on - m_off) * 1e6:.0f} us "
          f"per step (medians of {args.repeats}); fastest repeats: ratio "
          f"{min(on) / min(off):.3f}x, +{(min(on) - min(off)) * 1e6:.0f} us (on a shared "
          f"machine the medians carry its load, the fastest less of it)")


if __name__ == "__main__":
    main()
