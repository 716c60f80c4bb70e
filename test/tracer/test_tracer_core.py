"""Regression tests for defects of the C core: references, error paths,
thread identity.  Memory errors are witnessed in a fresh interpreter under
PYTHONMALLOC=debug (freed memory is overwritten, so a use after free fails
loudly there instead of passing by luck)."""
import sys
import threading

import pytest
from helpers import ContinueDebugger, LevelSource, run_fresh, threads_at_reused_addresses

from pytorch_memlab import _testsource, _tracer

MONITORING = _tracer.MECHANISM == "monitoring"


def simple():
    x = 1
    return x


def test_source_dropping_next_tracer_is_safe():
    # a sample() that drops the last reference of the next enabled tracer
    proc = run_fresh('''
        import gc
        from helpers import LevelSource
        from pytorch_memlab import _testsource, _tracer

        def simple():
            x = 1
            return x

        holder = {}
        armed = False

        def drop():
            if armed:
                holder.clear()    # the other tracer dies here

        other = _tracer.Tracer(_testsource.manual_source, 0, ["bytes.peak"])
        other.add_code(simple.__code__)
        other.enable()
        holder["t"] = other
        del other
        mine = _tracer.Tracer(LevelSource(drop), 0, ["n.current"], "n.current")
        mine.add_code(simple.__code__)
        mine.enable()                 # newest first: mine runs before other
        armed = True
        for _ in range(3):
            simple()
        mine.disable()
        print("ok", sorted(dict(mine.stats())[simple.__code__]))
    ''')
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("ok [")


def test_failed_reinit_keeps_no_reference():
    source = LevelSource()
    t = _tracer.Tracer.__new__(_tracer.Tracer)
    before = sys.getrefcount(source)
    for _ in range(20):
        with pytest.raises(ValueError):
            t.__init__(source, 0, ["no.such.column"])
    assert sys.getrefcount(source) == before
    t.__init__(source, 0, ["n.current"])
    assert t.columns == ("n.current",) or list(t.columns) == ["n.current"]


def test_device_index_is_not_truncated():
    t = _tracer.Tracer(_testsource.manual_source, 0, ["bytes.peak"])
    with pytest.raises(ValueError, match="device index"):
        t.set_device(2 ** 32)          # not wrapped round to device 0
    assert t.device == 0


def test_disable_when_sys_gettrace_fails(monkeypatch):
    # settrace: disable() used to ask sys.gettrace() whether its hook was
    # still in place; when that raised, it went on with the error set to
    # import threading and take its thread hook back: SystemError (__import__
    # "returned a result with an exception set"), and threading's hook was
    # left behind.  The hook is now found in the thread state.
    prior_trace, prior_thread_hook = sys.gettrace(), threading._trace_hook
    t = _tracer.Tracer(_testsource.manual_source, 0, ["bytes.peak"])
    t.add_code(simple.__code__)
    t.enable()
    simple()

    def failing_gettrace():
        raise RuntimeError("a tool's sys.gettrace wrapper failed")

    with monkeypatch.context() as patch:
        patch.setattr(sys, "gettrace", failing_gettrace)
        t.disable()
    assert not t.enabled
    assert threading._trace_hook is prior_thread_hook
    assert sys.gettrace() is prior_trace
    assert dict(t.stats())[simple.__code__][simple.__code__.co_firstlineno + 1][0] == 1


def test_guard_is_per_thread():
    # while one thread's sample() runs Python code (and lets other threads
    # run), the other threads' events are still counted
    started, release = threading.Event(), threading.Event()
    state = {"blocking": False}

    def slow():
        if state["blocking"] and threading.current_thread().name == "slow":
            state["blocking"] = False
            started.set()
            release.wait(10)

    source = LevelSource(on_sample=slow)
    t = _tracer.Tracer(source, 0, ["n.current"], "n.current")
    t.add_code(simple.__code__)
    t.enable()
    try:
        def slow_thread():
            _tracer.install_thread_hook()
            state["blocking"] = True
            simple()

        th = threading.Thread(target=slow_thread, name="slow")
        th.start()
        assert started.wait(10)
        _tracer.install_thread_hook()
        simple()                           # main thread, meanwhile
        release.set()
        th.join()
    finally:
        t.disable()
    counts = {line: rec[0] for line, rec in dict(t.stats())[simple.__code__].items()}
    assert counts[simple.__code__.co_firstlineno + 1] == 2


# ---- thread identity ------------------------------------------------------------

def visited(n, debug):
    _testsource.manual_alloc(n)  # alloc
    _testsource.manual_alloc(-n)  # free
    if debug:
        ContinueDebugger().set_trace()  # debugger
    return n  # done


def test_thread_state_address_reuse_gets_fresh_stack():
    # settrace mechanism: a debugger that takes a worker thread inside a
    # profiled call (and then continues) hides that call's return, so its
    # frame stays open until disable().  CPython reuses a finished thread's
    # PyThreadState memory for a later thread; stacks keyed by that address
    # handed the open frame to the new thread, whose every interval was then
    # folded into the debugger's line too.  (sys.monitoring sees the return
    # whatever bdb does: there the figures must simply be the same.)
    first = visited.__code__.co_firstlineno
    _testsource.manual_reset()
    t = _tracer.Tracer(_testsource.manual_source, 0, ["bytes.allocated", "bytes.peak"])
    t.add_code(visited.__code__)
    t.enable()
    try:
        runs, plain = threads_at_reused_addresses(lambda: visited(1000, True),
                                                  lambda: visited(5000, False))
    finally:
        t.disable()
    debugged = runs - plain
    lines = dict(t.stats())[visited.__code__]
    assert lines[first + 1] == (runs, 0, (1000 * debugged + 5000 * plain, 5000))
    # the debugger's line allocated nothing: the later threads' bytes are theirs
    count, _, (allocated, _) = lines[first + 4]
    assert (count, allocated) == (debugged, 0)
