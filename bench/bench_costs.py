"""What each of the package's one-time and per-report features costs, with
every feature at its default, so that a regression shows in one run.

  import        ``from pytorch_memlab import profile`` with torch already
                imported, in a fresh interpreter (bytecode cached first, in a
                temporary PYTHONPYCACHEPREFIX); median over the runs.
  first call    the first ``@profile(device="cpu")`` call of a process that
                holds ``--objects`` live Python objects (170,000 by default,
                about what a model script holds), minus the second call of the
                same function: the CPU source's one-time start (the counting
                wrapper and the count of the tensors alive before it);
                median over fresh interpreters.
  print_stats   ``print_stats()`` of a LineProfiler after one call of a
                20,000-iteration loop (default curve="peak"), and the same
                with curve=None: what the text table costs beside the curve it
                never shows; medians in one process.
  recursion     the depth a recursive ``@profile`` function reaches under
                the default recursion limit, over the depth the same
                function reaches undecorated.

  PYTHONPATH=. python bench/bench_costs.py [--quick]

The table comes last, then one JSON line.
"""
import argparse
import io
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGETS = {"import_ms": 30.0, "first_call_ms": 5.0, "print_stats_ms": 5.0,
           "recursion_ratio": 0.90}

IMPORT = ("import time, torch\n"
          "t0 = time.perf_counter()\n"
          "from pytorch_memlab import profile\n"
          "print((time.perf_counter() - t0) * 1e3)\n")

FIRST_CALL = """\
import sys, time, torch
from pytorch_memlab import profile
# live objects as a program holds them: containers the garbage collector tracks
held = [[i] for i in range({objects})]
tensors = [torch.ones(16) for _ in range(100)]

@profile(device="cpu")
def step(x):
    y = x * 2
    return y.sum()

x = torch.ones(1000)
t0 = time.perf_counter()
step(x)
t1 = time.perf_counter()
step(x)
t2 = time.perf_counter()
print((t1 - t0) * 1e3, (t2 - t1) * 1e3)
"""


def child_env():
    """The package first on the path; bytecode cached outside the checkout."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]),
        PYTHONPYCACHEPREFIX=os.path.join(tempfile.gettempdir(), "memlab-bench-pyc"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run_child(code):
    proc = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True,
                          text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    # the first line: what follows is @profile's table, printed at exit
    return [float(v) for v in proc.stdout.splitlines()[0].split()]


def import_ms(runs):
    run_child(IMPORT)     # writes the bytecode caches
    return statistics.median(run_child(IMPORT)[0] for _ in range(runs))


def first_call_ms(runs, objects):
    code = FIRST_CALL.format(objects=objects)
    run_child(code)
    times = [run_child(code) for _ in range(runs)]
    return {"extra_ms": statistics.median(first - second for first, second in times),
            "first_ms": statistics.median(first for first, _ in times),
            "second_ms": statistics.median(second for _, second in times)}


def loop(n):
    total = 0
    for i in range(n):
        total += i
    return total


def print_stats_ms(iters, repeats):
    from pytorch_memlab import LineProfiler
    out = {}
    for curve in ("peak", None):
        prof = LineProfiler(loop, device="cpu", curve=curve)
        with prof:
            loop(iters)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            prof.print_stats(stream=io.StringIO())
            times.append(time.perf_counter() - t0)
        out["peak" if curve else "none"] = statistics.median(times) * 1e3
    return out


def depth_reached(func):
    """The deepest level ``func`` (which recurses until it fails) reached."""
    deepest = [0]

    def probe(level):
        deepest[0] = max(deepest[0], level)
    try:
        func(0, probe)
    except RecursionError:
        pass
    return deepest[0]


def recurse(level, probe):
    probe(level)
    return recurse(level + 1, probe)


def recursion():
    global recurse
    from pytorch_memlab import clear_global_line_profiler, profile
    plain = depth_reached(recurse)
    undecorated = recurse
    recurse = profile(recurse, device="cpu")
    try:
        profiled = depth_reached(recurse)
    finally:
        recurse = undecorated
        clear_global_line_profiler()
    return {"plain": plain, "profiled": profiled, "limit": sys.getrecursionlimit(),
            "ratio": profiled / plain}


def table(res):
    rows = [
        ("from pytorch_memlab import profile (torch loaded)", f"{res['import_ms']:.1f} ms",
         f"<= {TARGETS['import_ms']:.0f} ms", res["import_ms"] <= TARGETS["import_ms"]),
        (f"first profiled call on the CPU ({res['objects']:,} live objects)",
         f"+{res['first_call']['extra_ms']:.1f} ms", f"<= {TARGETS['first_call_ms']:.0f} ms",
         res["first_call"]["extra_ms"] <= TARGETS["first_call_ms"]),
        (f"print_stats() after a {res['iters']:,}-iteration call",
         f"{res['print_stats']['peak']:.1f} ms", f"<= {TARGETS['print_stats_ms']:.0f} ms",
         res["print_stats"]["peak"] <= TARGETS["print_stats_ms"]),
        ("recursion depth under @profile",
         f"{res['recursion']['profiled']} of {res['recursion']['plain']}",
         f">= {TARGETS['recursion_ratio']:.0%}",
         res["recursion"]["ratio"] >= TARGETS["recursion_ratio"]),
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    out = [f"== bench_costs: torch {res['torch']}, python {platform.python_version()}"]
    for name, value, target, ok in rows:
        out.append(f"{name:<{widths[0]}}  {value:>{widths[1]}}  {target:>{widths[2]}}  "
                   f"{'yes' if ok else 'NO'}")
    out.append(f"  first call {res['first_call']['first_ms']:.1f} ms, second "
               f"{res['first_call']['second_ms']:.2f} ms; print_stats with curve=None "
               f"{res['print_stats']['none']:.1f} ms; recursion limit "
               f"{res['recursion']['limit']}")
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short smoke run")
    parser.add_argument("--objects", type=int, default=170_000)
    args = parser.parse_args()
    runs = 3 if args.quick else 9
    import torch
    res = {"torch": torch.__version__, "python": platform.python_version(),
           "objects": args.objects, "iters": 20_000}
    res["import_ms"] = import_ms(runs)
    res["first_call"] = first_call_ms(runs, args.objects)
    res["print_stats"] = print_stats_ms(res["iters"], runs)
    res["recursion"] = recursion()
    print(table(res))
    print(json.dumps({"bench": "costs", **res, "targets": TARGETS}), flush=True)


if __name__ == "__main__":
    main()
