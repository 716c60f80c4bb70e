"""The realistic nested case of bench_torch.py: a
TransformerEncoderLayer(512, 8, 2048) forward with ``forward``, ``_sa_block``,
``_ff_block`` and ``MultiheadAttention.forward`` profiled.

Per line event, side by side in one process: ours reading the CUDA source
(when there is a GPU), ours reading the CPU source (same code, same events,
only the source differs), and the CPython floor: a no-op Python LINE
callback on the same code objects (sys.monitoring on 3.12+, sys.settrace
below).  Each is (time enabled - time with nothing enabled) / events, median
of adjacent on/off pairs; the ratios are over the floor."""
import statistics
import sys
import time

import torch

from pytorch_memlab import LineProfiler

NESTED = (torch.nn.TransformerEncoderLayer.forward,
          torch.nn.TransformerEncoderLayer._sa_block,
          torch.nn.TransformerEncoderLayer._ff_block,
          torch.nn.MultiheadAttention.forward)


def _codes():
    return {f.__code__ for f in NESTED}


class Floor:
    """A no-op LINE callback on `codes` (NESTED's code objects by default);
    counts events."""

    def __init__(self, codes=None):
        self.events = 0
        self.codes = set(codes) if codes is not None else _codes()
        self.tool = None

    def enable(self):
        self.events = 0
        if hasattr(sys, "monitoring"):
            mon = sys.monitoring
            self.tool = next(i for i in range(6) if mon.get_tool(i) is None)
            mon.use_tool_id(self.tool, "memlab-bench-floor")

            def line(code, lineno):
                self.events += 1
            mon.register_callback(self.tool, mon.events.LINE, line)
            for code in self.codes:
                mon.set_local_events(self.tool, code, mon.events.LINE)
        else:
            codes = self.codes

            def local(frame, event, arg):
                if event == "line":
                    self.events += 1
                return local

            def glob(frame, event, arg):
                return local if frame.f_code in codes else None
            sys.settrace(glob)

    def disable(self):
        if self.tool is not None:
            mon = sys.monitoring
            for code in self.codes:
                mon.set_local_events(self.tool, code, 0)
            mon.register_callback(self.tool, mon.events.LINE, None)
            mon.free_tool_id(self.tool)
            self.tool = None
        else:
            sys.settrace(None)


def _events(prof):
    return sum(line["count"] for f in NESTED for rec in prof.stats(f)
               for line in rec["lines"])


def per_event(run, sync, make, count, pairs):
    """Median (t_on - t_off) / events over adjacent pairs, in us."""
    costs = []
    for r in range(pairs):
        def off():
            t0 = time.perf_counter()
            run()
            sync()
            return time.perf_counter() - t0

        def on():
            p = make()
            p.enable()
            t0 = time.perf_counter()
            run()
            sync()
            t = time.perf_counter() - t0
            p.disable()
            return t, count(p)
        if r % 2:
            (t_on, ev), t_off = on(), off()
        else:
            t_off = off()
            t_on, ev = on()
        costs.append((t_on - t_off) / ev * 1e6)
    return statistics.median(costs), ev


def nested(dev, quick=False):
    """{'cuda': us, 'cpu': us, 'floor': us, 'events': n} per line event."""
    torch.manual_seed(0)
    # Training mode (dropout 0, no grad): eval mode would take the fused fast
    # path and never run _sa_block / _ff_block.
    layer = torch.nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.0,
                                             batch_first=True).to(dev).train()
    on_cuda = dev.startswith("cuda")
    x = torch.randn(8, 128, 512, device=dev) if on_cuda else torch.randn(1, 8, 512)
    sync = (lambda: torch.cuda.synchronize(dev)) if on_cuda else (lambda: None)
    reps = 3 if quick else 50

    def run():
        with torch.no_grad():
            for _ in range(reps):
                layer(x)
    run()
    sync()
    pairs = 5 if quick else 41
    out = {}
    kinds = (["cuda"] if on_cuda else []) + ["cpu"]
    for kind in kinds:
        prof = LineProfiler(*NESTED, device=dev if kind == "cuda" else "cpu")

        def make(prof=prof):
            prof.clear()
            return prof
        out[kind], out["events"] = per_event(run, sync, make, _events, pairs)
    floor = Floor()
    out["floor"], out["floor_events"] = per_event(run, sync, lambda: floor,
                                                  lambda p: p.events, pairs)
    return out


def rows(res):
    """Table rows: (measure, us/event, over floor)."""
    floor = res["floor"]
    out = []
    for kind, label in (("cuda", "ours, CUDA source"), ("cpu", "ours, CPU source"),
                        ("floor", "no-op LINE callback (floor)")):
        if kind in res:
            out.append((f"nested encoder layer: {label}", f"{res[kind]:.3f}",
                        f"{res[kind] / floor:.2f}x" if floor > 0 else "n/a"))
    if "cuda" in res:
        out.append(("nested: CUDA source - CPU source (us/event)",
                    f"{res['cuda'] - res['cpu']:+.3f}", "target <= +0.03"))
    return out


if __name__ == "__main__":
    dev = "cuda:0" if torch.cuda.is_available() else "cpu"
    res = nested(dev, quick="--quick" in sys.argv)
    for r in rows(res):
        print(f"{r[0]:<48} {r[1]:>9} us/event  {r[2]}")
    print(res)
