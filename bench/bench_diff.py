"""``diff`` on a 20,000-line function: the time to align and compare a pair
(target: under 1 s), and to print it.

The pair is made here, no torch and no profiling: OLD is the stripped lines
of this package's own sources, repeated to 20,000 lines (so blank lines,
``return`` and the like repeat thousands of times, as in real code); NEW is
OLD with 1% of its lines inserted, deleted or changed at random places
(seeded).  Each line carries figures and a held-at-peak, so ``diff`` also
blames the peak.  A second pair reorders 4,000 lines wholesale (the case
past ``common.align.MAX_EDITS``).  Times are medians of 3 on this machine.

  PYTHONPATH=. python bench/bench_diff.py
"""
import glob
import os
import random
import statistics
import time

from pytorch_memlab.common.align import align
from pytorch_memlab.records.diff import diff
from pytorch_memlab.reports.diff_text import render_diff_text
from pytorch_memlab.records.model import FunctionRecord, LineRecord, Profile

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


def median_time(work, repeats=3):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    rng = random.Random(2026)
    old_lines = source_lines(20_000)
    new_lines = edited(old_lines, 0.01, rng)
    old, new = profile(old_lines, rng), profile(new_lines, rng)
    stripped = ([s.strip() for s in old_lines], [s.strip() for s in new_lines])
    result = diff(old, new)
    print(f"pair: {len(old_lines):,} and {len(new_lines):,} lines, "
          f"{sum(1 for s in stripped[0] if not s):,} blank in OLD")
    print(f"align:            {median_time(lambda: align(*stripped)):.3f} s")
    print(f"diff (align, blame): {median_time(lambda: diff(old, new)):.3f} s")
    print(f"render_text:      {median_time(lambda: render_diff_text(result)):.3f} s")
    shuffled = list(stripped[0][:4000])
    rng.shuffle(shuffled)
    print(f"align, 4,000 lines reordered: "
          f"{median_time(lambda: align(stripped[0][:4000], shuffled)):.3f} s")


if __name__ == "__main__":
    main()
