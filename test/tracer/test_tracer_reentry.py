"""Re-entry into the C core from a memory source's Python code, and the
settrace hook's chaining.

A Python memory source runs arbitrary code inside enable(), disable() and
every event: it may call enable()/disable() again, drop the last reference
to a tracer, or run profiled code.  Memory errors are witnessed in a fresh
interpreter under PYTHONMALLOC=debug; hangs in a fresh interpreter with a
timeout."""
import bdb
import subprocess
import sys
import textwrap
import threading

import pytest

from helpers import line_of, run_fresh

from pytorch_memlab import _testsource, _tracer

SETTRACE = _tracer.MECHANISM == "settrace"
settrace_only = pytest.mark.skipif(
    not SETTRACE, reason="the PyEval_SetTrace hook only (PYTORCH_MEMLAB_TRACER=settrace)")

# Shared by the child scripts: a Python-level source whose sample() and
# prepare() run what the test puts in `on_sample` / `on_prepare`.
PRELUDE = '''
import sys, threading
from pytorch_memlab import _testsource, _tracer

def simple():
    x = 1
    return x

class Src:
    name = "py"
    fields = ("n.current",)
    kinds = ("level",)
    def __init__(self):
        self.on_sample = self.on_prepare = None
    def prepare(self, device):
        hook, self.on_prepare = self.on_prepare, None   # once
        if hook is not None:
            hook()
    def reset_peaks(self, device):
        pass
    def sample(self, device):
        hook, self.on_sample = self.on_sample, None     # once
        if hook is not None:
            hook()
        return (0,)

def tracer_on(src):
    """A tracer of src's level field, registered for simple()."""
    t = _tracer.Tracer(src, 0, ["n.current"], "n.current")
    t.add_code(simple.__code__)
    return t
'''


def run_child(code, timeout=30):
    """Run PRELUDE + code in a fresh interpreter under PYTHONMALLOC=debug (a
    use after free fails loudly there).  A hang is a failure, not a stuck
    test run."""
    try:
        # PRELUDE is not indented: dedent code on its own
        proc = run_fresh(PRELUDE + textwrap.dedent(code), timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the child hung for {timeout} s (an event loops forever?)")
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    return proc.stdout


# ---- the chained trace function outlives a disable() in dispatch ----

@settrace_only
@pytest.mark.parametrize("how", ["disable", "drop"])
def test_dispatch_that_disables_last_tracer_keeps_foreign_function(how):
    # Another tool traces the thread; we chain to it.  A sample() that
    # disables the last tracer (or drops its last reference) put the tool's
    # function back and freed our record of it; trace_function then called
    # the freed record's function pointer.
    out = run_child('''
        calls = []
        def foreign(frame, event, arg):
            calls.append(event)
            return foreign
        src = Src()
        holder = {"t": tracer_on(src)}
        sys.settrace(foreign)
        holder["t"].enable()
        if %r == "disable":
            src.on_sample = lambda: holder["t"].disable()
        else:
            src.on_sample = holder.clear            # the tracer dies in dispatch
        simple()
        assert sys.gettrace() is foreign, sys.gettrace()
        del calls[:]
        simple()
        sys.settrace(None)
        print("ok", calls)
    ''' % how)
    # the tool still sees every event of the next call
    assert out.split(None, 1) == ["ok", "['call', 'line', 'line', 'return']\n"]


# ---- an event while a dying tracer disables itself ------------------

def test_event_while_dying_tracer_disables():
    # A tracer that dies while enabled disables itself in dealloc; its last
    # sample() runs profiled code.  The event used to find the dying tracer
    # still on the enabled list, take a reference (0 -> 1) and drop it: the
    # tracer was freed twice.
    out = run_child('''
        src = Src()
        holder = {"t": tracer_on(src)}

        def victim():
            # the tracer dies here, victim's frame open; the dealloc's last
            # reading runs profiled code (one line: no reading in between)
            src.on_sample = simple; holder.clear()
            return 1

        holder["t"].add_code(victim.__code__)
        holder["t"].enable()
        victim()
        simple()
        print("ok", sys.gettrace())
    ''')
    assert out == "ok None\n"


# ---- enable() / disable() re-entered ----------------------------------

@pytest.mark.parametrize("then", ["event", "shutdown"])
def test_prepare_that_enables_same_tracer(then):
    # enable() set `enabled` only after the source's prepare(); a prepare()
    # that enabled the same tracer linked it twice onto the enabled list
    # (next_enabled == self): the next event looped forever, and so did
    # _shutdown().  Now the inner enable() is a no-op: the outer call
    # finishes enabling.
    out = run_child('''
        src = Src()
        t = tracer_on(src)
        inner = []
        src.on_prepare = lambda: inner.append((t.enable(), t.enabled))
        t.enable()
        if %r == "event":
            simple()
            t.disable()
        else:
            _tracer._shutdown()
        counts = sorted(rec[0] for rec in dict(t.stats())[simple.__code__].values())
        print("ok", inner, t.enabled, counts)
    ''' % then)
    counts = [1, 1] if then == "event" else []
    assert out == f"ok [(None, False)] False {counts}\n"


def test_enable_from_two_threads_at_once():
    # Thread B enables while thread A's enable() waits in prepare(): both
    # used to link the tracer, and every later event spun forever.
    out = run_child('''
        src = Src()
        t = tracer_on(src)
        in_prepare, b_done = threading.Event(), threading.Event()
        def slow_prepare():
            in_prepare.set()
            assert b_done.wait(30)
        src.on_prepare = slow_prepare
        def other():
            assert in_prepare.wait(30)
            t.enable()             # while A is enabling: a no-op
            b_done.set()
        b = threading.Thread(target=other)
        b.start()
        t.enable()
        b.join()
        _tracer.install_thread_hook()
        simple()
        t.disable()
        stats = dict(t.stats())[simple.__code__]
        print("ok", t.enabled, sorted(rec[0] for rec in stats.values()))
    ''')
    assert out == "ok False [1, 1]\n"


def test_disable_while_enabling_is_refused():
    out = run_child('''
        src = Src()
        t = tracer_on(src)
        seen = []
        def prepare_disables():
            try:
                t.disable()
            except RuntimeError as e:
                seen.append(str(e))
        src.on_prepare = prepare_disables
        t.enable()
        simple()
        enabled = t.enabled
        t.disable()
        print("ok", enabled, seen)
    ''')
    assert out.startswith("ok True [\"Tracer.disable() while the tracer is being enabled")


def test_enable_or_disable_while_disabling():
    # disable()'s last reading runs the source: disable() there is a no-op
    # (it used to recurse), enable() is refused.
    out = run_child('''
        src = Src()
        t = tracer_on(src)
        seen = []
        def victim():
            src.on_sample = sample_reenters; t.disable()   # its last reading
            return 1
        t.add_code(victim.__code__)
        def sample_reenters():
            seen.append(t.disable())
            try:
                t.enable()
            except RuntimeError as e:
                seen.append(str(e))
            _tracer._shutdown()
        t.enable()
        simple()
        victim()
        simple()
        print("ok", t.enabled, seen, sys.gettrace())
    ''')
    assert out.startswith("ok False [None, \"Tracer.enable() while the tracer is being disabled")
    assert out.endswith(" None\n")


# ---- the chained record of each thread ------------------------------

@settrace_only
def test_chained_trace_function_is_not_leaked_per_thread():
    # A coverage-style threading hook installs the tool's trace object in
    # each new thread; our hook chained to it kept a malloc'd record with a
    # strong reference per thread, never freed: the object's reference count
    # grew by one per thread.
    def tool(frame, event, arg):
        return None

    def thread_hook(frame, event, arg):
        sys.settrace(tool)
        return tool(frame, event, arg)

    t = _tracer.Tracer(_testsource.manual_source, 0, ["bytes.peak"])
    prior = threading._trace_hook
    threading.settrace(thread_hook)
    t.enable()
    try:
        before = sys.getrefcount(tool)
        for _ in range(50):
            th = threading.Thread(target=int)
            th.start()
            th.join()
        after = sys.getrefcount(tool)
    finally:
        t.disable()
        threading.settrace(prior)
    assert after == before


# ---- a debugger started in an unprofiled frame ---------------------

class Stepper(bdb.Bdb):
    """Steps until `code` returns, recording the lines of `code`."""

    def __init__(self, code):
        super().__init__()
        self.code, self.lines = code, []

    def user_line(self, frame):
        if frame.f_code is self.code:
            self.lines.append(frame.f_lineno - self.code.co_firstlineno)
        self.set_step()

    def user_return(self, frame, value):
        if frame.f_code is self.code:
            self.set_continue()
        else:
            self.set_step()


def debugged(stepper):
    stepper.set_trace()
    a = 1
    b = 2
    return a + b


def stepped_lines():
    stepper = Stepper(debugged.__code__)
    try:
        debugged(stepper)
    finally:
        sys.settrace(None)
    return stepper.lines


@settrace_only
def test_debugger_in_unprofiled_frame_gets_line_events():
    # The hook set f_trace_lines = False on every unprofiled frame entered
    # while enabled, so a debugger started in such a frame got no line
    # events there: bdb stepped through nothing.
    alone = stepped_lines()
    assert alone == [2, 3, 4]
    t = _tracer.Tracer(_testsource.manual_source, 0, ["bytes.peak"])
    t.add_code(test_event_while_dying_tracer_disables.__code__)   # something else
    t.enable()
    try:
        profiled = stepped_lines()
    finally:
        t.disable()
    assert profiled == alone


# ---- sys.settrace on a worker thread --------------------------------

def worked():
    x = 1
    return x


@settrace_only
def test_settrace_on_worker_thread_keeps_profiling_there():
    # Another tool's sys.settrace on a worker replaced our hook there; the
    # recheck (a pending call) ran on the main thread only, so the worker's
    # profiled calls went uncounted from then on.  Now the worker's next
    # event chains us to the newcomer (or installs us alone once it left).
    first = worked.__code__.co_firstlineno
    seen = []

    def tool(frame, event, arg):
        seen.append(event)
        return tool

    def worker():
        worked()                       # counted: our hook is there
        sys.settrace(tool)
        worked()                       # still counted, and the tool sees it
        sys.settrace(None)
        worked()                       # still counted, we stand alone again

    t = _tracer.Tracer(_testsource.manual_source, 0, ["bytes.peak"])
    t.add_code(worked.__code__)
    t.enable()
    try:
        th = threading.Thread(target=worker)
        th.start()
        th.join()
    finally:
        t.disable()
    assert dict(t.stats())[worked.__code__][first + 1][0] == 3
    assert "call" in seen and "line" in seen


def test_disable_inside_a_line_keeps_its_last_reading():
    # disable() takes the tracer off the enabled list before its last reading
    # (so no event can reach a dying tracer); that reading must still be
    # folded into the lines it closes, not dropped as a stale event's
    t = _tracer.Tracer(_testsource.manual_source, 0, ["bytes.peak", "bytes.allocated"],
                       "bytes.current")
    _testsource.manual_reset()

    def closes_itself():
        x = 1  # first
        _testsource.manual_alloc(100); t.disable()  # the line
        return x

    t.add_code(closes_itself.__code__)
    t.enable()
    closes_itself()
    _testsource.manual_alloc(-100)
    lines = dict(t.stats())[closes_itself.__code__]
    assert lines[line_of(closes_itself, "# the line")] == (1, 100, (100, 100))
