"""Cost of the C tracer, with the manual C source (no torch, no device).

Columns of the table:
  ns/line    ns per profiled line event: a registered function with a hot
             loop of trivial lines, run with a Tracer enabled minus run with
             none, over the line events the tracer counted (4 columns and a
             growth field, as a real profile has).
  base ns    ns per line of the same loop with no tracer.
  floor ns   (3.12+) ns per line event of sys.monitoring itself calling a
             no-op C function (operator.is_): what no callback can go below
             on this machine.
  unrelated  run time of an unrelated pure-Python function (not registered,
             called at top level) while a Tracer is enabled on some other
             function, over its run time with no tracer at all.
  callee     the same unrelated function called from inside a profiled
             function, over the same call with no tracer.
  +curve ns  ns per line event that recording the memory curve of a call
             adds: the hot loop under a Tracer with curve="peak"
             minus under the same Tracer with curve=None, paired side by
             side; target <= 20 ns.

Timings alternate on and off in adjacent pairs (the order flips each repeat)
and each figure is the median over pairs, which keeps slow drift out.  A
shared machine also makes whole processes fast or slow, so --all runs each
mechanism in several fresh processes and reports medians over them.
Targets: <= 100 ns/line on 3.12+ (<= 150 on 3.11), unrelated
<= 1.02x on 3.12+.

  PYTHONPATH=. python bench/bench_tracer.py        # this process's mechanism
  PYTHONPATH=. python bench/bench_tracer.py --all  # every mechanism this
                                                   # Python has
The last lines are JSON objects, one per mechanism.
"""
import argparse
import gc
import json
import operator
import os
import platform
import statistics
import subprocess
import sys
import time

from pytorch_memlab import _testsource, _tracer
from timing import hot, pairs, unrelated  # bench/ is on sys.path when run as a script

COLUMNS = ("bytes.peak", "bytes.allocated", "bytes.freed", "bytes.current")
GROWTH = "bytes.current"


def registered_elsewhere():
    """What the tracer profiles during the unrelated measurements."""
    return 0


def tiny(x):
    return x


def call_tiny(n):
    for i in range(n):
        tiny(i)


def profiled_caller(n):
    return unrelated(n)


def new_tracer(*functions, curve=None):
    tracer = _tracer.Tracer(_testsource.manual_source, 0, COLUMNS, GROWTH, curve=curve,
                            curve_columns=("bytes.current", "bytes.peak"))
    for f in functions:
        tracer.add_code(f.__code__)
    return tracer


def timed(func, arg):
    t0 = time.perf_counter_ns()
    func(arg)
    return time.perf_counter_ns() - t0


def ns_per_line(n, repeats):
    tracer = new_tracer(hot)
    tracer.enable()
    hot(n)
    tracer.disable()
    events = sum(count for count, _, _ in dict(tracer.stats())[hot.__code__].values())
    on, off = pairs(lambda: (tracer.enable(), timed(hot, n), tracer.disable())[1],
                    lambda: timed(hot, n), repeats)
    return {"ns_per_line": statistics.median(a - b for a, b in zip(on, off)) / events,
            "base_ns_per_line": statistics.median(off) / events, "line_events": events}


def curve_cost(n, events, repeats):
    """ns per line event added by curve="peak", against curve=None."""
    plain, curved = new_tracer(hot), new_tracer(hot, curve="peak")
    def under(tracer):
        tracer.enable()
        t = timed(hot, n)
        tracer.disable()
        return t
    on, off = pairs(lambda: under(curved), lambda: under(plain), repeats)
    return statistics.median(a - b for a, b in zip(on, off)) / events


def call_cost(n, repeats):
    """ns per outermost call of tiny (one line), against no tracer."""
    tracer = new_tracer(tiny)
    def under():
        tracer.enable()
        t = timed(call_tiny, n)
        tracer.disable()
        return t
    under()
    (calls, _, _, _), = [figures for code, figures in tracer.call_stats()]
    assert calls == n, (calls, n)                 # each call of tiny is a call
    on, off = pairs(under, lambda: timed(call_tiny, n), repeats)
    return statistics.median(a - b for a, b in zip(on, off)) / n


def monitoring_floor(n, events, repeats):
    """ns per LINE event of sys.monitoring with a no-op C callable."""
    if not hasattr(sys, "monitoring"):
        return None
    mon = sys.monitoring
    tool = next(i for i in range(6) if mon.get_tool(i) is None)
    def measure_on():
        mon.set_local_events(tool, hot.__code__, mon.events.LINE)
        t = timed(hot, n)
        mon.set_local_events(tool, hot.__code__, 0)
        return t
    mon.use_tool_id(tool, "memlab-bench-floor")
    try:
        mon.register_callback(tool, mon.events.LINE, operator.is_)
        on, off = pairs(measure_on, lambda: timed(hot, n), repeats)
    finally:
        mon.set_local_events(tool, hot.__code__, 0)
        mon.register_callback(tool, mon.events.LINE, None)
        mon.free_tool_id(tool)
    return statistics.median(a - b for a, b in zip(on, off)) / events


def ratio(enabled_tracer, func, arg, repeats):
    def measure_on():
        enabled_tracer.enable()
        t = timed(func, arg)
        enabled_tracer.disable()
        return t
    on, off = pairs(measure_on, lambda: timed(func, arg), repeats)
    return statistics.median(a / b for a, b in zip(on, off))


def measure(args):
    gc.disable()
    try:
        line = ns_per_line(args.lines, args.repeats)
        floor = monitoring_floor(args.lines, line["line_events"], args.repeats)
        curve = curve_cost(args.lines, line["line_events"], args.repeats)
        per_call = call_cost(args.calls, args.repeats)
        unrelated(args.calls)                       # warm up
        other = new_tracer(registered_elsewhere)
        unrelated_ratio = ratio(other, unrelated, args.calls, args.repeats)
        caller = new_tracer(profiled_caller)
        callee_ratio = ratio(caller, profiled_caller, args.calls, args.repeats)
    finally:
        gc.enable()
    return dict(bench="tracer", python=platform.python_version(),
                mechanism=_tracer.MECHANISM, ns_per_line=round(line["ns_per_line"], 1),
                base_ns_per_line=round(line["base_ns_per_line"], 1),
                line_events=line["line_events"],
                monitoring_floor_ns=None if floor is None else round(floor, 1),
                unrelated_ratio=round(unrelated_ratio, 3),
                callee_ratio=round(callee_ratio, 3), curve_ns_per_line=round(curve, 1),
                call_ns=round(per_call, 1), repeats=args.repeats)


HEADER = "{:<8} {:<10} {:>9} {:>9} {:>9} {:>10} {:>10} {:>9} {:>8}".format(
    "python", "mechanism", "ns/line", "base ns", "floor ns", "unrelated", "callee",
    "+curve ns", "call ns")


def row(r):
    floor = r["monitoring_floor_ns"]
    return "{:<8} {:<10} {:>9.1f} {:>9.1f} {:>9} {:>9.3f}x {:>9.3f}x {:>9.1f} {:>8.1f}".format(
        r["python"], r["mechanism"], r["ns_per_line"], r["base_ns_per_line"],
        "-" if floor is None else "{:.1f}".format(floor),
        r["unrelated_ratio"], r["callee_ratio"], r["curve_ns_per_line"], r["call_ns"])


def summarize(runs):
    """One row from several processes' rows: medians, plus the ns/line range."""
    out = dict(runs[0])
    for key in ("ns_per_line", "base_ns_per_line", "monitoring_floor_ns",
                "unrelated_ratio", "callee_ratio", "curve_ns_per_line", "call_ns"):
        values = [r[key] for r in runs if r[key] is not None]
        out[key] = round(statistics.median(values), 3) if values else None
    out["ns_per_line_range"] = [min(r["ns_per_line"] for r in runs),
                                max(r["ns_per_line"] for r in runs)]
    out["processes"] = len(runs)
    return out


def run_all(args):
    """Each mechanism in args.processes fresh processes, interleaved: on a
    shared machine a whole process runs fast or slow, so one is not enough."""
    mechanisms = ["monitoring", "settrace"] if sys.version_info >= (3, 12) else ["settrace"]
    runs = {mech: [] for mech in mechanisms}
    print(HEADER)
    for _ in range(args.processes):
        for mech in mechanisms:
            env = dict(os.environ, PYTORCH_MEMLAB_TRACER=mech)
            cmd = [sys.executable, os.path.abspath(__file__), "--json-only",
                   "--lines", str(args.lines), "--calls", str(args.calls),
                   "--repeats", str(args.repeats)]
            out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            runs[mech].append(r)
            print(row(r))
    summaries = [summarize(runs[mech]) for mech in mechanisms]
    print("median of {} processes:".format(args.processes))
    for r in summaries:
        print(row(r) + "   ns/line {:.1f}..{:.1f}".format(*r["ns_per_line_range"]))
    for r in summaries:
        print(json.dumps(r))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=5000,
                        help="loop iterations of the hot function (x11 line events)")
    parser.add_argument("--calls", type=int, default=10000,
                        help="iterations of the unrelated function")
    parser.add_argument("--repeats", type=int, default=101)
    parser.add_argument("--all", action="store_true",
                        help="every mechanism of this Python, in fresh processes")
    parser.add_argument("--processes", type=int, default=3,
                        help="with --all: processes per mechanism")
    parser.add_argument("--json-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.all:
        run_all(args)
        return
    r = measure(args)
    if not args.json_only:
        print(HEADER)
        print(row(r))
    print(json.dumps(r))


if __name__ == "__main__":
    main()
