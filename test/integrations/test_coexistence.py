"""pytorch_memlab beside the real tools people run with it: coverage.py,
cProfile, the line_profiler package, a bdb debugger and torch.profiler.

Each case runs in a fresh interpreter (trace hooks and tool ids are process
state), in both orders, and checks exact figures for both tools: our count
and net growth of a 4 MiB line, and the other tool's own numbers.  The
mechanism follows PYTORCH_MEMLAB_TRACER, which the subprocess inherits.
"""
import json
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")

from helpers import MiB  # noqa: E402

# The measured module: grab() is profiled; run_threads() starts a thread
# after the profiled calls, which coverage must still see.
WORK = '''\
import threading

import torch


def grab():
    x = torch.empty(1 << 20, dtype=torch.float32)  # 4 MiB
    return x.numel()


def in_thread(out):
    out.append(grab())


def run_threads():
    out = []
    t = threading.Thread(target=in_thread, args=(out,))
    t.start()
    t.join()
    return out
'''

# Prints one JSON line: our figures for the 4 MiB line, plus `extra`.
DRIVER_HEAD = '''\
import json, sys
sys.path.insert(0, {root!r})
from pytorch_memlab import LineProfiler
import work

prof = LineProfiler(work.grab, device="cpu")
extra = {{}}


def ours():
    for record in prof.stats(work.grab):
        for line in record["lines"]:
            if "4 MiB" in line["code"]:
                return {{"count": line["count"], "growth": line["net_growth"]}}
    return None
'''

DRIVER_TAIL = '''
from pytorch_memlab import _tracer
extra["hook_left"] = (sys.gettrace() is _tracer._thread_starter
                      or (sys.version_info >= (3, 12)
                          and any(sys.monitoring.get_tool(i) == "pytorch_memlab"
                                  for i in range(6))))
print(json.dumps({"ours": ours(), "extra": extra, "table": str(prof.display())}))
'''

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MONITORING_PY = sys.version_info >= (3, 12)


def run_case(tmp_path, *bodies, argv_prefix=(sys.executable,), env_extra=None):
    (tmp_path / "work.py").write_text(WORK)
    body = "".join(textwrap.dedent(b) for b in bodies)
    script = DRIVER_HEAD.format(root=ROOT) + body + DRIVER_TAIL
    (tmp_path / "driver.py").write_text(script)
    env = dict(os.environ, **(env_extra or {}))
    env.pop("COVERAGE_PROCESS_START", None)
    proc = subprocess.run([*argv_prefix, "driver.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not out["extra"].pop("hook_left"), "a trace hook was left behind"
    return out, proc.stderr


def assert_ours(out, count):
    # net growth adds up over the runs: 4 MiB kept by the line each time
    assert out["ours"] == {"count": count, "growth": count * 4 * MiB}, out["table"]
    assert "No profiled function ran" not in out["table"]


# ---- coverage.py --------------------------------------------------------------

COVERAGE_CORES = ["ctrace"] + (["sysmon"] if MONITORING_PY else [])


def coverage_of_work(tmp_path):
    subprocess.run([sys.executable, "-m", "coverage", "json", "-q", "-o", "cov.json",
                    "--include=work.py"], cwd=tmp_path, check=True, timeout=120)
    data = json.loads((tmp_path / "cov.json").read_text())
    summary = data["files"]["work.py"]["summary"]
    return summary["percent_covered"], data["files"]["work.py"]["missing_lines"]


@pytest.mark.parametrize("core", COVERAGE_CORES)
def test_coverage_run_then_profile(tmp_path, core):
    # coverage first (coverage run), ours inside; a thread starts afterwards
    out, _ = run_case(tmp_path, '''
        with prof:
            work.grab()
            work.grab()
        work.run_threads()
    ''', argv_prefix=(sys.executable, "-m", "coverage", "run", "--branch"),
        env_extra={"COVERAGE_CORE": core})
    assert_ours(out, 2)
    assert coverage_of_work(tmp_path) == (100.0, [])


@pytest.mark.parametrize("core", COVERAGE_CORES)
def test_profile_then_coverage_started(tmp_path, core):
    # ours enabled first, coverage started (API) while ours runs
    out, _ = run_case(tmp_path, '''
        import coverage
        with prof:
            cov = coverage.Coverage(branch=True, include=["work.py"])
            cov.start()
            work.grab()
            work.grab()
            work.run_threads()
            cov.stop()
        cov.save()
    ''', env_extra={"COVERAGE_CORE": core})
    # monitoring: the thread's call too.  settrace: coverage's start() puts
    # its own threading.settrace hook in place of ours (we chain it when we
    # start, not when it starts after us), so that thread is coverage's only.
    settrace = not MONITORING_PY or os.environ.get("PYTORCH_MEMLAB_TRACER") == "settrace"
    assert_ours(out, 2 if settrace else 3)
    # work.py was imported before coverage started: only its import and def
    # lines are missed; every function body ran, the thread's included
    assert coverage_of_work(tmp_path)[1] == [1, 3, 6, 11, 15]


# ---- cProfile -------------------------------------------------------------------

CPROFILE_CALLS = '''
    import pstats
    stats = pstats.Stats(cp).stats
    extra["cprofile"] = sorted(v[1] for k, v in stats.items()
                               if k[2] == "grab" and k[0].endswith("work.py"))
'''


def test_profile_then_cprofile(tmp_path):
    out, _ = run_case(tmp_path, '''
        import cProfile
        with prof:
            cp = cProfile.Profile()
            cp.enable()              # 3.12+: raised "Another profiling tool" before
            work.grab()
            work.grab()
            cp.disable()
    ''', CPROFILE_CALLS)
    assert_ours(out, 2)
    assert out["extra"]["cprofile"] == [2]


def test_cprofile_then_profile(tmp_path):
    out, _ = run_case(tmp_path, '''
        import cProfile
        cp = cProfile.Profile()
        cp.enable()
        with prof:
            work.grab()
            work.grab()
        cp.disable()
    ''', CPROFILE_CALLS)
    assert_ours(out, 2)
    assert out["extra"]["cprofile"] == [2]


# ---- the line_profiler package ----------------------------------------------------

LP_HITS = '''
    lstats = lp.get_stats()
    hits = {}
    for (fn, _, name), lines in lstats.timings.items():
        if name == "grab":
            for lineno, nhits, _ in lines:
                hits[lineno] = hits.get(lineno, 0) + nhits
    extra["lp_hits"] = sorted(hits.values())
'''


def test_profile_then_line_profiler(tmp_path):
    out, _ = run_case(tmp_path, '''
        import line_profiler
        lp = line_profiler.LineProfiler(work.grab)
        with prof:
            lp.enable_by_count()
            work.grab()
            work.grab()
        work.grab()                   # ours is off; theirs still counts
        lp.disable_by_count()         # raised "tool 2 is not in use" before
    ''', LP_HITS)
    assert_ours(out, 2)
    assert out["extra"]["lp_hits"] == [3, 3]


def test_line_profiler_then_profile(tmp_path):
    out, _ = run_case(tmp_path, '''
        import line_profiler
        lp = line_profiler.LineProfiler(work.grab)
        lp.enable_by_count()
        with prof:
            work.grab()
            work.grab()
        lp.disable_by_count()
    ''', LP_HITS)
    assert_ours(out, 2)
    assert out["extra"]["lp_hits"] == [2, 2]


# ---- a bdb debugger -----------------------------------------------------------------

BDB_COUNTER = '''
    import bdb

    class LineCounter(bdb.Bdb):
        """Steps everywhere and counts line events in work.grab."""
        def __init__(self):
            super().__init__()
            self.lines = 0

        def user_line(self, frame):
            if frame.f_code is work.grab.__code__:
                self.lines += 1
            self.set_step()
'''


def test_profile_then_debugger(tmp_path):
    out, err = run_case(tmp_path, BDB_COUNTER, '''
    dbg = LineCounter()
    with prof:
        dbg.runcall(work.grab)        # the debugger arrives, then leaves
        work.grab()                   # ours alone again
    extra["bdb_lines"] = dbg.lines
    ''')
    assert_ours(out, 2)
    assert out["extra"]["bdb_lines"] == 2
    if not MONITORING_PY or os.environ.get("PYTORCH_MEMLAB_TRACER") == "settrace":
        assert err.count("another tool called sys.settrace") == 1


def test_debugger_then_profile(tmp_path):
    out, _ = run_case(tmp_path, BDB_COUNTER, '''
    dbg = LineCounter()

    def session():
        with prof:
            work.grab()
            work.grab()

    dbg.runcall(session)
    extra["bdb_lines"] = dbg.lines
    ''')
    assert_ours(out, 2)
    assert out["extra"]["bdb_lines"] == 4


# ---- torch.profiler ---------------------------------------------------------------------

TORCH_BYTES = '''
    extra["torch_bytes"] = sum(e.cpu_memory_usage for e in tp.events()
                               if e.name == "aten::empty")
'''


def test_profile_then_torch_profiler(tmp_path):
    out, _ = run_case(tmp_path, '''
        import torch.profiler
        with prof:
            with torch.profiler.profile(profile_memory=True) as tp:
                work.grab()
                work.grab()
    ''', TORCH_BYTES)
    assert_ours(out, 2)
    assert out["extra"]["torch_bytes"] == 8 * MiB


def test_torch_profiler_then_profile(tmp_path):
    out, _ = run_case(tmp_path, '''
        import torch.profiler
        with torch.profiler.profile(profile_memory=True) as tp:
            with prof:
                work.grab()
                work.grab()
    ''', TORCH_BYTES)
    assert_ours(out, 2)
    assert out["extra"]["torch_bytes"] == 8 * MiB
