"""pytorch_memlab against the old pure-Python pytorch_memlab 0.3.2, in one process.

The old package must be importable as ``old_pytorch_memlab`` (unzip its wheel
into a directory on PYTHONPATH and rename the package directory; it needs
calmsize and pandas).  Without it, or without CUDA (the old package reads CUDA
statistics only and records nothing on a CPU machine), its column says n/a.

What is measured (on CUDA when available, else on CPU with device='cpu'):

  per-line cost   a hot loop of small tensor ops (``x = x + 1`` lines) run
                  under LineProfiler(fn) enabled minus run with nothing
                  enabled, over the line events recorded, in us.  Adjacent
                  on/off pairs (order flips each repeat), median.
  unrelated       run time of unrelated pure-Python code (recursive fib and a
                  loop calling small functions) after some other function was
                  decorated with ``profile`` and called once, over the same
                  before (thread CPU time, medians).  Ours is measured first;
                  the old one leaves sys.settrace installed, which is removed
                  afterwards.
  train step      an MLP train step (Linear 1024->4096->1024, Adam, batch 256)
                  with ``step`` profiled by LineProfiler, over unprofiled;
                  blocks of steps on and off alternate, per-step medians (the
                  first step after each switch is not counted).
  nested          bench_nested.py: TransformerEncoderLayer(512, 8, 2048)
                  forward with forward, _sa_block, _ff_block and
                  MultiheadAttention.forward profiled; us per line event with
                  the CUDA source, the CPU source and a no-op LINE callback
                  (the CPython floor), and their ratios over the floor.
  run -f          bench_cli.py: unrelated pure-Python code in a script run by
                  ``python -m pytorch_memlab run -f step`` after step ran,
                  over the plain script (fresh interpreters, rounds rotate);
                  the same script under ``@profile`` beside it.
  memory          host memory held after N line events, per event: ours at
                  two sizes, 1,000,002 and 10,000,002 events (RSS delta after
                  gc, a fresh profiler per size, one call of that size before
                  the one measured), the old one over 20,000 (tracemalloc
                  delta: its records are Python dicts).  What ours holds is
                  the memory curve's (records.curve): a kept call and the
                  call being recorded, each at most 100,000 points of 32
                  bytes, per profiled function and device (CURVE_BOUND), and
                  the allocator may keep those pages or give them back.  The
                  row is met when what a call leaves at either size is within
                  that bound (a cost per event would pass it at 10,000,002
                  events from 0.64 B each); the largest size again with
                  curve=None shows the part that is the curve's.
  features        bench_features.py: what each feature (held at peak, the
                  curve, the source's read) adds per line event on the hot
                  loop, each a pair of Tracers that differ in that one thing.

  python bench/bench_torch.py           # full run (about a minute or two)
  python bench/bench_torch.py --quick   # smoke run

The table comes last, then one JSON line.
"""
import argparse
import gc
import importlib
import json
import platform
import statistics
import sys
import threading
import time

import torch

import bench_cli  # noqa: E402  (bench/ is on sys.path when run as a script)
import bench_features  # noqa: E402
import bench_nested  # noqa: E402
import timing  # noqa: E402
from torch_common import NA, NO_CUDA, TARGETS, Env, load_old, measure_old, old_enable, \
    ours_events, quiet, settle  # noqa: E402
from torch_memory import memory_all  # noqa: E402
from torch_report import table  # noqa: E402
from torch_workloads import hot_loop, old_decorated, ours_decorated, unrelated  # noqa: E402
from timing import hot, pairs  # noqa: E402
import pytorch_memlab
from pytorch_memlab import LineProfiler, clear_global_line_profiler, profile
from pytorch_memlab import _tracer



# ---- 1. per-line cost --------------------------------------------------------------

def per_line(env, make_profiler, events_of, n, repeats):
    """(t_on - t_off) / events, median over many short adjacent pairs, in us.

    A small op costs microseconds with noise of the same order; the median of
    many short pairs keeps that noise out of a difference of ~0.1 us."""
    x = torch.zeros(16, device=env.dev)
    hot_loop(x, 10)
    env.sync()

    def off():
        t0 = time.perf_counter()
        hot_loop(x, n)
        env.sync()
        return time.perf_counter() - t0, 0

    def on():
        prof = make_profiler()
        prof.enable()
        t0 = time.perf_counter()
        hot_loop(x, n)
        env.sync()
        t = time.perf_counter() - t0
        prof.disable()
        events = events_of(prof)
        if events == 0:
            raise NA("it recorded no line events")
        return t, events

    settle()
    gc.disable()
    try:
        on_runs, off_runs = pairs(on, off, repeats)
    finally:
        gc.enable()
    costs = [(t_on - t_off) / ev * 1e6 for (t_on, ev), (t_off, _) in zip(on_runs, off_runs)]
    return {"per_line_us": statistics.median(costs), "line_events": on_runs[0][1],
            "base_us_per_line": statistics.median(t for t, _ in off_runs) / on_runs[0][1] * 1e6}


def per_line_ours(env, args, device=None):
    """The hot loop under a LineProfiler reading ``device``'s source (the
    hot loop's own device by default).  device="cpu" on a CUDA hot loop: the
    tracer's own cost on these lines, without the CUDA allocator's."""
    prof = LineProfiler(hot_loop, device=device or env.dev)

    def make():
        prof.clear()
        return prof
    return per_line(env, make, lambda p: ours_events(p, hot_loop), args.ours_iters,
                    args.ours_pairs)


def per_line_floor(env, args):
    """CPython's floor on the hot loop: a no-op Python LINE callback."""
    floor = bench_nested.Floor([hot_loop.__code__])
    return per_line(env, lambda: floor, lambda p: p.events, args.ours_iters,
                    args.ours_pairs)


def per_line_old(env, args, old):
    def factory():
        # a fresh one per run: its records are kept forever
        prof = quiet(old.LineProfiler, hot_loop, target_gpu=env.index)
        prof.enable = lambda: old_enable(prof)
        return prof
    return per_line(env, factory, lambda p: len(p._raw_line_records), args.old_iters,
                    args.old_pairs)


# ---- 2. unrelated code after @profile ----------------------------------------------

def time_unrelated(n, repeats):
    settle()
    gc.disable()
    try:
        times = []
        for _ in range(repeats):
            # CPU time of this thread: pure Python, and a shared machine's
            # descheduling stays out of a before/after that cannot alternate
            t0 = time.thread_time()
            unrelated(n)
            times.append(time.thread_time() - t0)
    finally:
        gc.enable()
    return statistics.median(times)


def unrelated_all(env, args, old):
    n = args.unrelated_n
    unrelated(n)
    base = time_unrelated(n, args.unrelated_repeats)
    x = torch.ones(8, device=env.dev)
    out = {"base_ms": base * 1e3}

    ours_fn = profile(ours_decorated, device=env.dev)
    ours_fn(x)
    env.sync()
    after = time_unrelated(n, args.unrelated_repeats)
    out["ours"] = after / base
    clear_global_line_profiler()       # nothing to print at exit

    if old is not None:
        measure_old(out, unrelated_old, env, args, old, x, base)
    return out


def unrelated_old(env, args, old, x, base):
    old_fn = quiet(old.profile, old_decorated)
    quiet(old_fn, x)
    env.sync()
    gl = importlib.import_module("old_pytorch_memlab.line_profiler.profile").global_line_profiler
    if not gl.enabled:
        raise NA(NO_CUDA)
    if not gl._raw_line_records:
        raise NA("it recorded no line events")
    after_old = time_unrelated(args.unrelated_n, args.old_unrelated_repeats)
    gl._raw_line_records = []
    return after_old / base


# ---- 3. MLP train step -------------------------------------------------------------

def make_step(env):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 1024)).to(env.dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    data = torch.randn(256, 1024, device=env.dev)
    target = torch.randn(256, 1024, device=env.dev)

    def step():
        opt.zero_grad(set_to_none=True)
        out = model(data)
        loss = torch.nn.functional.mse_loss(out, target)
        loss.backward()
        opt.step()
        return loss
    return step


def train_ratio(env, prof, step, events_of, blocks, per_block, warmup):
    """Blocks of steps off and on alternate; per-step medians on / off.

    The first step after each switch is not counted, on either side: turning
    a tracer on or off (sys.monitoring re-instruments the code that runs next)
    is a one-time cost, and a training loop is profiled for many steps."""
    for _ in range(warmup):
        step()
    env.sync()
    on, off = [], []

    def run_block(times):
        step()
        env.sync()
        for _ in range(per_block):
            t0 = time.perf_counter()
            step()
            env.sync()
            times.append(time.perf_counter() - t0)

    for b in range(blocks):
        for profiled in ((False, True) if b % 2 == 0 else (True, False)):
            settle()
            if profiled:
                prof.enable()
                run_block(on)
                prof.disable()
            else:
                run_block(off)
    if events_of(prof) == 0:
        raise NA("it recorded no line events")
    return {"ratio": statistics.median(on) / statistics.median(off),
            "step_ms": statistics.median(off) * 1e3, "steps": len(on)}


def train_all(env, args, old):
    step = make_step(env)
    out = {}
    prof = LineProfiler(step, device=env.dev)
    r = train_ratio(env, prof, step, lambda p: ours_events(p, step),
                    args.blocks, args.per_block, args.warmup)
    out["ours"], out["step_ms"], out["steps"] = r["ratio"], r["step_ms"], r["steps"]
    if old is not None:
        measure_old(out, train_old, env, args, old, step)
    return out


def train_old(env, args, old, step):
    oprof = quiet(old.LineProfiler, step, target_gpu=env.index)
    old_enable(oprof)          # empty_cache and stat resets once, not per block
    oprof.disable()
    oprof.enable = oprof.register_callback   # re-install its trace hook only
    return train_ratio(env, oprof, step, lambda p: len(p._raw_line_records),
                       args.blocks, args.per_block, 1)["ratio"]


# ---- 4. host memory held per line event --------------------------------------------

def section(name, func, *args):
    """Run one measurement; its failure on the old side must not stop ours."""
    t0 = time.perf_counter()
    result = func(*args)
    print(f"[{name}: {time.perf_counter() - t0:.1f} s]", flush=True)
    return result


def per_line_all(env, args, old):
    out = {"ours": per_line_ours(env, args)}
    if env.cuda:
        out["cpu_source"] = per_line_ours(env, args, device="cpu")
    out["floor"] = per_line_floor(env, args)
    if old is not None:
        measure_old(out, per_line_old, env, args, old)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--no-old", action="store_true", help="skip the old package")
    args = parser.parse_args()
    # iters: hot-loop iterations per timed run (x5 line events); pairs: on/off pairs
    if args.quick:
        args.ours_iters, args.ours_pairs, args.old_iters, args.old_pairs = 400, 21, 40, 3
        args.unrelated_n, args.unrelated_repeats, args.old_unrelated_repeats = 5000, 11, 3
        args.blocks, args.per_block, args.warmup = 2, 2, 1
        args.ours_mem_sizes, args.old_mem_events = (1_000_002, 10_000_002), 2_000
    else:
        args.ours_iters, args.ours_pairs, args.old_iters, args.old_pairs = 400, 151, 200, 7
        args.unrelated_n, args.unrelated_repeats, args.old_unrelated_repeats = 20000, 41, 9
        args.blocks, args.per_block, args.warmup = 4, 5, 3
        args.ours_mem_sizes, args.old_mem_events = (1_000_002, 10_000_002), 20_000

    env = Env()
    old, old_why = (None, "--no-old") if args.no_old else load_old()
    res = {}
    res["per_line"] = section("per-line", per_line_all, env, args, old)
    res["unrelated"] = section("unrelated", unrelated_all, env, args, old)
    res["train"] = section("train step", train_all, env, args, old)
    res["cli"] = section("run -f", bench_cli.measure, args.quick)
    res["memory"] = section("memory", memory_all, env, args, old)
    sys.settrace(None)
    threading.settrace(None)
    res["nested"] = section("nested", bench_nested.nested, env.dev, args.quick)
    res["features"] = section("features", bench_features.features, env.dev, args.quick)

    print(table(env, res, old_why))
    floor_us = res["per_line"]["floor"]["per_line_us"]
    for key, label in (("ours", "hot loop: ours, device's source"),
                       ("cpu_source", "hot loop: ours, CPU source"),
                       ("floor", "hot loop: no-op LINE callback (floor)")):
        if key in res["per_line"]:
            us = res["per_line"][key]["per_line_us"]
            ratio = f"{us / floor_us:.2f}x the floor" if floor_us > 0 else ""
            print(f"  {label:<48} {us:>9.3f} us/event  {ratio}")
    for r in bench_nested.rows(res["nested"]):
        print(f"  {r[0]:<48} {r[1]:>9} us/event  {r[2]}")
    print("\n".join(bench_features.lines(res["features"])))
    pl, un, tr, mem = res["per_line"], res["unrelated"], res["train"], res["memory"]
    summary = {
        "bench": "torch", "device": env.dev, "torch": torch.__version__,
        "python": platform.python_version(), "mechanism": _tracer.MECHANISM,
        "quick": args.quick, "old_available": old is not None,
        "ours": {"per_line_us": round(pl["ours"]["per_line_us"], 4),
                 "base_us_per_line": round(pl["ours"]["base_us_per_line"], 3),
                 "unrelated_ratio": round(un["ours"], 4),
                 "train_ratio": round(tr["ours"], 4),
                 "cli_unrelated_ratio": round(res["cli"]["cli"], 4),
                 "cli_decorator_ratio": round(res["cli"]["decorator"], 4),
                 "bytes_per_event": round(mem["ours"]["bytes_per_event"], 4),
                 "mem_events": mem["ours"]["events"],
                 "mem_runs": mem["ours"]["runs"], "mem_no_curve": mem["ours"]["no_curve"],
                 "mem_bounded": mem["ours"]["bounded"]},
        "old": {"per_line_us": None if "old" not in pl else round(pl["old"]["per_line_us"], 2),
                "unrelated_ratio": None if "old" not in un else round(un["old"], 3),
                "train_ratio": None if "old" not in tr else round(tr["old"], 3),
                "bytes_per_event": None if "old" not in mem
                else round(mem["old"]["bytes_per_event"], 1),
                "mem_events": None if "old" not in mem else mem["old"]["events"]},
        "train_step_ms": round(tr["step_ms"], 3), "targets": TARGETS,
        "nested_us_per_event": {k: round(v, 4) if isinstance(v, float) else v
                                for k, v in res["nested"].items()},
        "features_ns_per_event": {k: round(v, 1) for k, v in res["features"].items()},
        "hot_loop_us_per_event": {k: round(res["per_line"][k]["per_line_us"], 4)
                                  for k in ("ours", "cpu_source", "floor")
                                  if k in res["per_line"]},
    }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
