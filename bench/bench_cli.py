"""Unrelated code under ``python -m pytorch_memlab run -f step`` beside the
same code under ``@profile``, each over the plain script.

One script, three ways, each in a fresh interpreter: ``python prog.py``
(plain), the same with ``step = profile(step)`` (decorator), and ``python -m
pytorch_memlab run -f step prog.py`` (cli).  The script calls ``step`` (a
small tensor step) once, then times an unrelated pure-Python loop that
calls a helper (thread CPU time, median of repeats, gc off).  A ratio is a
round's time over the plain run of the same round; rounds rotate the order
of the three; the figure is the median over rounds.  Target: the
CLI <= 1.05x, as the decorator.  The script also reports whether the
unrelated code saw a trace function (``sys.gettrace()``).

  PYTHONPATH=. python bench/bench_cli.py [--quick]
"""
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

TARGET = 1.05
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROG = """\
import gc, os, statistics, sys, time
import torch

def step(x):
    y = x * 2
    return y.sum()

def helper(i):
    return i * 2 + 1

def unrelated(n):
    total = 0
    for i in range(n):
        total += helper(i)
        if i % 7 == 0:
            total -= 1
    return total

if os.environ.get("BENCH_DECORATE"):
    from pytorch_memlab import profile
    step = profile(step, device="cpu")

step(torch.ones(1000))
n, repeats = int(sys.argv[1]), int(sys.argv[2])
unrelated(n)
hooked = sys.gettrace() is not None
gc.disable()
times = []
for _ in range(repeats):
    t0 = time.thread_time()
    unrelated(n)
    times.append(time.thread_time() - t0)
gc.enable()
print("BENCH", statistics.median(times), hooked, flush=True)
"""

WAYS = {
    "plain": ([], {}),
    "decorator": ([], {"BENCH_DECORATE": "1"}),
    "cli": (["-m", "pytorch_memlab", "run", "-d", "cpu", "-f", "step"], {}),
}


def _once(folder, way, n, repeats):
    prefix, extra = WAYS[way]
    env = dict(os.environ, PYTHONPATH=ROOT, **extra)
    proc = subprocess.run([sys.executable, *prefix, "prog.py", str(n), str(repeats)],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{way}: exit {proc.returncode}\n{proc.stderr}")
    line = next(x for x in proc.stdout.splitlines() if x.startswith("BENCH "))
    _, seconds, hooked = line.split()
    return float(seconds), hooked == "True"


def measure(quick=False):
    """{"decorator": ratio, "cli": ratio, "base_ms", "hooked": {way: bool}}."""
    n, repeats, rounds = (50_000, 5, 3) if quick else (200_000, 9, 7)
    order = list(WAYS)
    ratios = {"decorator": [], "cli": []}
    base, hooked = [], {}
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "prog.py"), "w") as f:
            f.write(PROG)
        for r in range(rounds):
            times = {}
            for way in order[r % 3:] + order[:r % 3]:
                times[way], hooked[way] = _once(folder, way, n, repeats)
            base.append(times["plain"])
            for way in ratios:
                ratios[way].append(times[way] / times["plain"])
    out = {way: statistics.median(v) for way, v in ratios.items()}
    out.update(ranges={way: (min(v), max(v)) for way, v in ratios.items()},
               base_ms=statistics.median(base) * 1e3, hooked=hooked, rounds=rounds)
    return out


def rows(res):
    """Table rows: (measure, ratio, target, ok)."""
    return [(f"unrelated code: {label}", f"{res[way]:.3f}x",
             f"<= {TARGET:.2f}x", res[way] <= TARGET)
            for way, label in (("decorator", "after @profile"), ("cli", "under run -f"))]


def main():
    res = measure("--quick" in sys.argv)
    print(f"== bench_cli: python {platform.python_version()}, "
          f"unrelated base {res['base_ms']:.1f} ms, {res['rounds']} rounds")
    for r in rows(res):
        way = "cli" if "run" in r[0] else "decorator"
        low, high = res["ranges"][way]
        print(f"  {r[0]:<34} {r[1]:>8}  ({low:.3f}-{high:.3f})  target {r[2]}  "
              f"{'yes' if r[3] else 'NO'}  trace hook seen: {res['hooked'][way]}")
    print(json.dumps({"bench": "cli", "python": platform.python_version(), **res}))


if __name__ == "__main__":
    main()
