"""``diff`` on a 20,000-line function: the time to align and compare a pair
(target: under 1 s), and to print it.

The pair is made here, no torch and no profiling: OLD is the stripped lines
of this package's own sources, repeated to 20,000 lines (so blank lines,
``return`` and the like repeat thousands of times, as in real code); NEW is
OLD with 1% of its lines inserted, deleted or changed at random places
(seeded).  Each line carries figures and a held-at-peak, so ``diff`` also
blames the peak.  A second pair reorders 4,000 lines wholesale (the case
past ``common.align.MAX_EDITS``).  Then the whole command, as a user runs
it: both profiles saved as JSON, ``python -m pytorch_memlab diff OLD NEW``
run in this process (read both files, diff, render and print the text;
target: under 1 s), and once as a subprocess (adding the interpreter's start
and the imports).  Times are medians of 3 on this machine.

  PYTHONPATH=. python bench/bench_diff.py
"""
import contextlib
import glob
import io
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time

from pytorch_memlab.__main__ import main as cli_main
from pytorch_memlab.common.align import align
from pytorch_memlab.records.diff import diff
from pytorch_memlab.reports.diff_text import render_diff_text
from pytorch_memlab.records.model import FunctionRecord, LineRecord, Profile
from pytorch_memlab.records.saved import save

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COLUMN = "active_bytes.all.peak"


def source_lines(count):
    lines = []
    for path in sorted(glob.glob(os.path.join(ROOT, "pytorch_memlab", "**", "*.py"),
                                 recursive=True)):
        with open(path, encoding="utf-8") as f:
            lines += f.read().splitlines()
    return (lines * (count // len(lines) + 1))[:count]


def edited(lines, fraction, rng):
    out = list(lines)
    for k in range(int(len(lines) * fraction)):
        at = rng.randrange(len(out))
        kind = rng.randrange(3)
        if kind == 0:
            out.insert(at, f"    extra_{k} = torch.empty({k})")
        elif kind == 1:
            del out[at]
        else:
            out[at] += "  # changed"
    return out


def profile(lines, rng):
    """One function, every line with a peak figure and held bytes."""
    records = [LineRecord(n + 1, code, 1, rng.randrange(1 << 20), {COLUMN: rng.randrange(1 << 30)},
                          held_at_peak=rng.randrange(1 << 10), has_held=True)
               for n, code in enumerate(lines)]
    held = sum(r.held_at_peak or 0 for r in records)
    peak = {"bytes": held + (1 << 20), "lineno": 1, "call": 1, "before_call": 1 << 20,
            "other_threads": 0}
    record = FunctionRecord("step", "train.py", 1, "cpu", [COLUMN], records, peak=peak)
    return Profile([record], [COLUMN], ["cpu"])


def cpu_time(children):
    t = os.times()
    return t.children_user + t.children_system if children else t.user + t.system


def timed(work, children=False, repeats=3):
    """Median wall time, and median CPU time of this process or (``children``)
    of the processes it ran: a shared machine stretches the wall time, the
    CPU time shows the work itself."""
    walls, cpus = [], []
    for _ in range(repeats):
        start, cpu = time.perf_counter(), cpu_time(children)
        work()
        walls.append(time.perf_counter() - start)
        cpus.append(cpu_time(children) - cpu)
    return f"{statistics.median(walls):.3f} s (CPU {statistics.median(cpus):.3f} s)"


def cli_in_process(paths):
    """``diff OLD NEW`` through the CLI's own entry point, its stdout kept."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = cli_main(["diff", *paths])
    assert status == 0, status
    return out.getvalue()


def cli_subprocess(paths):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run([sys.executable, "-m", "pytorch_memlab", "diff", *paths], check=True,
                   stdout=subprocess.DEVNULL, env=env)


def main():
    rng = random.Random(2026)
    old_lines = source_lines(20_000)
    new_lines = edited(old_lines, 0.01, rng)
    old, new = profile(old_lines, rng), profile(new_lines, rng)
    stripped = ([s.strip() for s in old_lines], [s.strip() for s in new_lines])
    result = diff(old, new)
    print(f"pair: {len(old_lines):,} and {len(new_lines):,} lines, "
          f"{sum(1 for s in stripped[0] if not s):,} blank in OLD")
    print(f"align:            {timed(lambda: align(*stripped))}")
    print(f"diff (align, blame): {timed(lambda: diff(old, new))}")
    print(f"render_text:      {timed(lambda: render_diff_text(result))}")
    shuffled = list(stripped[0][:4000])
    rng.shuffle(shuffled)
    print(f"align, 4,000 lines reordered: "
          f"{timed(lambda: align(stripped[0][:4000], shuffled))}")
    with tempfile.TemporaryDirectory() as tmp:
        paths = [os.path.join(tmp, "old.json"), os.path.join(tmp, "new.json")]
        save(old, paths[0])
        save(new, paths[1])
        assert cli_in_process(paths) == render_diff_text(result)
        print(f"CLI diff OLD NEW (in process): {timed(lambda: cli_in_process(paths))}")
        print(f"CLI diff OLD NEW (subprocess): {timed(lambda: cli_subprocess(paths), True)}")


if __name__ == "__main__":
    main()
