"""Helpers shared by the test modules (conftest puts test/ and its folders on
sys.path; the children run_fresh starts have them on theirs): the figures of a line, sources
and interpreters for the tracer's tests, the thread helpers, an OOM post-mortem's
live bytes by line, a peak's breakdown, saved profiles for ``diff``, and an
IPython shell with %mlrun loaded."""
import bdb
import contextlib
import ctypes
import inspect
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

MiB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))
# test/ and its folders by part: modules import helpers and each other across
# them (conftest puts these on sys.path; run_fresh's children get them too)
TEST_DIRS = [HERE] + sorted(entry.path for entry in os.scandir(HERE)
                            if entry.is_dir() and entry.name[0] not in "._")


def line_of(func, text):
    """Line number of the first source line of func containing text."""
    lines, start = inspect.getsourcelines(func)
    for i, line in enumerate(lines):
        if text in line:
            return start + i
    raise AssertionError(text)


def by_line(pm):
    """An OOM post-mortem's (live_by_line, {lineno: bytes}), checked: the
    parts sum to the post-mortem's allocated bytes."""
    live = pm["live_by_line"]
    lines = {row["lineno"]: row["bytes"] for row in live["lines"]}
    assert [row["lineno"] for row in live["lines"]] == sorted(lines)
    assert live["bytes"] == pm["allocated_bytes"]
    assert (sum(lines.values()) + live["before_call"] + live["other_threads"]
            + live["after_call"]) == live["bytes"]
    return live, lines


def checked_peak(record, column="active_bytes.all.peak"):
    """(record["peak"], {lineno: held}) of a function's record, checked: the
    parts sum to the peak, which is the highest figure of ``column`` its
    table shows."""
    peak = record["peak"]
    held = {line["lineno"]: line["held_at_peak"] for line in record["lines"]
            if line["held_at_peak"]}
    assert sum(held.values()) + peak["before_call"] + peak["other_threads"] == peak["bytes"]
    assert peak["bytes"] == max(line[column] for line in record["lines"]
                                if line[column] is not None)
    if "by_kind" in peak:
        check_kinds(peak, held)
    if "by_kind" in peak and "by_module" in peak:
        check_module_kinds(peak)
    return peak, held


def check_module_kinds(peak):
    """A peak's modules' kinds sum exactly: each module's to its by_module
    bytes, and each kind over the modules to that kind over the lines."""
    modules = peak["modules_by_kind"]
    assert list(modules) == list(peak["by_module"])
    assert {name: sum(kinds.values()) for name, kinds in modules.items()} == peak["by_module"]
    assert all(size > 0 for kinds in modules.values() for size in kinds.values())
    over_modules, over_lines = {}, {}
    for total, parts in ((over_modules, modules), (over_lines, peak["lines_by_kind"])):
        for kinds in parts.values():
            for kind, size in kinds.items():
                total[kind] = total.get(kind, 0) + size
    assert over_modules == over_lines


def check_kinds(peak, held):
    """A peak's kinds sum exactly: each part's to that part (before the call,
    other threads, each line's held bytes), and by_kind to the peak."""
    assert sum(peak["by_kind"].values()) == peak["bytes"]
    assert sum(peak["before_call_by_kind"].values()) == peak["before_call"]
    assert sum(peak["other_threads_by_kind"].values()) == peak["other_threads"]
    # (keyed by line numbers as strings in a record's to_dict(), as in the JSON)
    assert {int(n): sum(k.values()) for n, k in peak["lines_by_kind"].items()} == \
        {n: b for n, b in held.items() if b}
    total = {}
    parts = [peak["before_call_by_kind"], peak["other_threads_by_kind"],
             *peak["lines_by_kind"].values()]
    for part in parts:
        assert all(size > 0 for size in part.values())
        for kind, size in part.items():
            total[kind] = total.get(kind, 0) + size
    assert total == peak["by_kind"]


def line_figures(prof, func, text, device=None):
    """The stats() line record of ``func`` whose code contains ``text``: on
    ``device`` when given, else on the first device that recorded ``func``."""
    lineno = line_of(func, text)
    for record in prof.stats(func):
        if device is None or record["device"] == device:
            return next(line for line in record["lines"] if line["lineno"] == lineno)
    raise AssertionError(f"{func.__qualname__} has no record on {device}")


def code_line(record, text):
    """The one line of a stats() or saved record whose code contains ``text``:
    for functions whose source is not in this process (a child's script)."""
    (line,) = [line for line in record["lines"] if text in line["code"]]
    return line


def saved_line(doc, qualname, text):
    """code_line of the function ``qualname`` in a saved profile's JSON ``doc``."""
    (record,) = [r for r in doc["functions"] if r["qualname"] == qualname]
    return code_line(record, text)


def tracer_line(tracer, func, text):
    """(count, growth, values in column order) of the line of ``func``
    containing ``text``, as a ``_tracer.Tracer``'s stats() holds it."""
    return dict(tracer.stats())[func.__code__][line_of(func, text)]


def tracer_figures(tracer, func, text):
    """tracer_line with the values by column name: the tracer-level twin of
    line_figures."""
    count, growth, values = tracer_line(tracer, func, text)
    return count, growth, dict(zip(tracer.columns, values))


def disabled_after(make):
    """A fixture's body (``yield from disabled_after(make)``): yields a
    factory that calls ``make`` and keeps what it made; at teardown each one
    is disabled and no trace function may be left behind."""
    made = []

    def factory(*args, **kwargs):
        made.append(make(*args, **kwargs))
        return made[-1]

    yield factory
    for obj in made:
        obj.disable()
    assert sys.gettrace() is None


class LevelSource:
    """A Python memory source with one level field that counts its readings;
    ``on_sample`` (if given) runs inside each reading, before it returns."""
    name = "py"
    fields = ("n.current",)
    kinds = ("level",)

    def __init__(self, on_sample=None):
        self.n = 0
        self.on_sample = on_sample

    def prepare(self, device):
        pass

    def sample(self, device):
        self.n += 1
        if self.on_sample is not None:
            self.on_sample()
        return (self.n,)

    def reset_peaks(self, device):
        pass


def run_fresh(code, malloc="debug", warnings_error=False, timeout=120):
    """``code`` (dedented) in a fresh interpreter under PYTHONMALLOC=``malloc``
    (debug: a use after free fails loudly instead of passing by luck; None:
    as this process has it); under AddressSanitizer (make asan) the system
    allocator, the one it watches.  The child imports the extension this process uses (the ASan
    build under make asan, not the checkout's) and can import from test/."""
    from pytorch_memlab import _tracer
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(_tracer.__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([package_root, *TEST_DIRS]))
    if malloc and "asan" not in env.get("LD_PRELOAD", ""):
        env["PYTHONMALLOC"] = malloc
    flags = ["-W", "error"] if warnings_error else []
    return subprocess.run([sys.executable, *flags, "-c", textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=timeout)


def run_script(tmp_path, source, expect_rc=0, env=None, timeout=300):
    """Run source as a script file (so its lines have source text);
    (stdout, stderr)."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(source))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=timeout, env=env)
    assert proc.returncode == expect_rc, proc.stderr
    return proc.stdout, proc.stderr


def saved_profile(tmp_path, name, source, functions=("train_step",)):
    """``python -m pytorch_memlab run -d cpu -f F... -o NAME.json`` on
    ``source`` written as NAME.py: the path of the saved profile."""
    script = tmp_path / f"{name}.py"
    script.write_text(textwrap.dedent(source))
    out = tmp_path / f"{name}.json"
    picks = [arg for f in functions for arg in ("-f", f)]
    proc = subprocess.run([sys.executable, "-m", "pytorch_memlab", "run", "-d", "cpu", *picks,
                           "-o", str(out), str(script)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out


def diff_cli(*args):
    """``python -m pytorch_memlab diff ARGS``: the finished process."""
    return subprocess.run([sys.executable, "-m", "pytorch_memlab", "diff", *map(str, args)],
                          capture_output=True, text=True, timeout=300)


class ContinueDebugger(bdb.Bdb):
    """A debugger that stops once and continues, as pdb's "continue" does:
    with no breakpoint set, it calls sys.settrace(None)."""

    def user_line(self, frame):
        self.set_continue()


# ---- threads ------------------------------------------------------------------------

_thread_state = ctypes.pythonapi.PyThreadState_Get
_thread_state.restype = ctypes.c_void_p


def threads_at_reused_addresses(debugged_call, plain_call, wanted=2, limit=400):
    """Start threads one after another until `wanted` of them got the
    PyThreadState address of an earlier thread that ran debugged_call (CPython
    reuses that memory, though not always at once: after a long suite the
    allocator's bins can hand out other chunks for dozens of threads, which
    is why the limit is high; the loop stops as soon as `wanted` are seen):
    those run plain_call, the others debugged_call.  Returns (threads run,
    threads at a reused address)."""
    debugged, reused = set(), []

    def worker():
        state = _thread_state()
        if state in debugged:
            reused.append(state)
            plain_call()
        else:
            debugged.add(state)
            debugged_call()

    runs = 0
    while runs < limit and len(reused) < wanted:
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        runs += 1
    if len(reused) < wanted and hasattr(ctypes.CDLL(None), "__asan_init"):
        pytest.skip("under AddressSanitizer freed memory is held back, so no thread gets a "
                    "finished thread's PyThreadState address: nothing to witness")
    assert len(reused) >= wanted, "no thread got a finished thread's PyThreadState address"
    return runs, len(reused)


def keep_and_temp(ready, proceed, empty):
    """A line that keeps 1 MiB and frees a 2 MiB temporary (``empty(n)``
    makes n float32s on the device under test)."""
    ready.set()  # before
    proceed.wait(30)  # wait
    # The sleeps hand the GIL to the other thread in the middle of the line.
    x = (empty(524288), time.sleep(0.02), empty(262144), time.sleep(0.02))[2]  # keep 1 MiB, 2 MiB temporary
    return x  # done


def spin(until):
    """Four lines that allocate nothing, run until ``until`` is set."""
    n = 0  # start
    while not until.is_set():
        n += 1  # spin
    return n  # done


def worker_against_main(work, main):
    """work(ready, proceed) on a new thread and, once it is ready, main(done)
    on this one until the worker is done; the interpreter switches threads
    every microsecond meanwhile, so their line events interleave.  Returns
    (work's result, main's result)."""
    ready, proceed, done = threading.Event(), threading.Event(), threading.Event()
    kept = []

    def worker():
        try:
            kept.append(work(ready, proceed))
        finally:
            done.set()   # main must not wait forever on a worker that raised

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        thread = threading.Thread(target=worker)
        thread.start()
        ready.wait(30)
        proceed.set()
        result = main(done)
        thread.join()
    finally:
        sys.setswitchinterval(old)
    assert kept, "the worker thread raised (its traceback is above)"
    return kept[0], result


class EarlyThread:
    """A thread started at once that waits to be released and then runs
    ``call()``: a thread that exists before a profiler is enabled."""

    def __init__(self, call):
        self.go, self.done = threading.Event(), threading.Event()

        def worker():
            self.go.wait()
            try:
                call()
            finally:
                self.done.set()

        self.thread = threading.Thread(target=worker)
        self.thread.start()

    def release(self):
        """Let it run ``call()``, and wait until that has returned."""
        self.go.set()
        self.done.wait(30)

    def join(self):
        self.thread.join()


@contextlib.contextmanager
def ipython_shell(ipython_dir):
    """An InteractiveShell with %mlrun loaded, history in memory, IPYTHONDIR
    at ``ipython_dir``; the environment and sys.modules['__main__'] given
    back afterwards."""
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    saved_env = os.environ.get("IPYTHONDIR")
    saved_main = sys.modules["__main__"]
    os.environ["IPYTHONDIR"] = str(ipython_dir)
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    ip = InteractiveShell.instance(config=config)
    ip.run_line_magic("load_ext", "pytorch_memlab")
    try:
        yield ip
    finally:
        InteractiveShell.clear_instance()
        sys.modules["__main__"] = saved_main
        if saved_env is None:
            os.environ.pop("IPYTHONDIR", None)
        else:
            os.environ["IPYTHONDIR"] = saved_env
