"""Polled CUDA columns and threads, on the device: a line open on
thread A while thread B runs a profiled line keeps the device's figures over
its whole span.  The columns are polled (allocated_bytes.* is not pushed),
under the native allocator and under cudaMallocAsync (which is always
polled).  Figures are compared with torch's own counters, read around the
line in the same run.  Skipped without CUDA."""
import json
import os

import pytest
from helpers import run_script

torch = pytest.importorskip("torch")

SCRIPT = """\
import json, threading
import torch
from pytorch_memlab import LineProfiler

COLUMNS = ["allocated_bytes.all.peak", "allocated_bytes.all.allocated",
           "allocated_bytes.all.freed", "allocated_bytes.all.current"]
MiB = 1 << 20

def stats():
    torch.cuda.synchronize()
    s = torch.cuda.memory_stats(0)
    return {k: s[k] for k in ("allocated_bytes.all.current", "allocated_bytes.all.allocated",
                              "allocated_bytes.all.freed")}

def sizes():
    # the allocator's own bytes for each tensor of the test, caches warm
    base = stats()["allocated_bytes.all.current"]
    out = {}
    for name, n in (("a", 4 * MiB), ("b", 1 * MiB), ("c", 2 * MiB)):
        x = torch.empty(n, dtype=torch.uint8, device="cuda")
        out[name] = stats()["allocated_bytes.all.current"] - base
        del x
    return out

def work_a(opened, b_done, seen):
    seen["before"] = stats()  # before A
    a = torch.empty(4 * MiB, dtype=torch.uint8, device="cuda"); del a; b = torch.empty(1 * MiB, dtype=torch.uint8, device="cuda"); opened.set(); b_done.wait(60)  # A's line
    seen["after"] = stats()  # after A
    return b

def work_b():
    c = torch.empty(2 * MiB, dtype=torch.uint8, device="cuda"); del c  # B's line
    return 0

torch.cuda.init()
torch.empty(1, device="cuda")
size = sizes()
sizes()
opened, b_done, seen = threading.Event(), threading.Event(), {}

def thread_b():
    opened.wait(60)
    work_b()
    b_done.set()

prof = LineProfiler(work_a, work_b, device="cuda:0", columns=COLUMNS)
with prof:
    t = threading.Thread(target=thread_b)
    t.start()
    kept = work_a(opened, b_done, seen)
    t.join(60)
lines = {}
for rec in prof.stats():
    for line in rec["lines"]:
        if "# A's line" in line["code"] or "# B's line" in line["code"]:
            lines[line["code"].split("# ")[-1]] = [line[c] for c in COLUMNS]
print(json.dumps({"size": size, "seen": seen, "lines": lines}))
"""


@pytest.mark.cuda
@pytest.mark.parametrize("backend", ["native", "cudaMallocAsync"])
def test_line_open_on_another_thread_keeps_its_figures(tmp_path, backend):
    env = dict(os.environ)
    if backend == "cudaMallocAsync":
        env["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
    out, err = run_script(tmp_path, SCRIPT, env=env)
    got = json.loads(out.splitlines()[-1])
    size, before, after = got["size"], got["seen"]["before"], got["seen"]["after"]
    base = before["allocated_bytes.all.current"]
    delta = {k: after[k] - before[k] for k in after}
    peak, allocated, freed, current = got["lines"]["A's line"]
    # A's line: the device's figures over its whole span, B's line included
    assert (allocated, freed) == (delta["allocated_bytes.all.allocated"],
                                  delta["allocated_bytes.all.freed"]), err
    # B's polls must not reset the peak A's line reached (it would read b's level)
    assert peak >= base + size["a"], err
    if backend == "native":
        assert current == after["allocated_bytes.all.current"]
        assert peak == base + max(size["a"], size["b"] + size["c"])
        assert delta["allocated_bytes.all.allocated"] == size["a"] + size["b"] + size["c"]
        assert delta["allocated_bytes.all.freed"] == size["a"] + size["c"]
        # B's line ran while A held b: its peak is b and c at once
        assert got["lines"]["B's line"] == [base + size["b"] + size["c"], size["c"], size["c"],
                                            base + size["b"]], err
    # (cudaMallocAsync may keep no allocated / freed totals, and frees in
    # stream order: a level read at the line's end, before any synchronize,
    # need not equal torch's reading after one)
