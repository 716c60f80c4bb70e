"""The tracer keys code objects by identity, and its sys.monitoring state
survives what Python code can do to it: a callback that tears the hook down,
look-alike code objects, the module executed a second time.

Memory errors are witnessed in a fresh interpreter under PYTHONMALLOC=debug
(freed memory is overwritten there) and, in CI, under AddressSanitizer."""
import sys
import types

import helpers
import pytest

from pytorch_memlab import _testsource, _tracer

MONITORING = _tracer.MECHANISM == "monitoring"
monitoring_only = pytest.mark.skipif(
    not MONITORING, reason="sys.monitoring mechanism only (Python 3.12+, "
    "PYTORCH_MEMLAB_TRACER unset or 'monitoring')")

LOOK_ALIKE = '''
def work(n):
    total = 0
    for i in range(n):
        total += i
    return total
'''


def look_alikes():
    """The same function compiled from two files: equal code objects
    (equality ignores the file name), two distinct ones."""
    funcs = []
    for filename in ("a.py", "b.py"):
        namespace = {}
        exec(compile(LOOK_ALIKE, filename, "exec"), namespace)
        funcs.append(namespace["work"])
    a, b = funcs
    assert a.__code__ == b.__code__ and a.__code__ is not b.__code__
    assert (a.__code__.co_filename, b.__code__.co_filename) == ("a.py", "b.py")
    return a, b


def tracer_each(*funcs):
    """A tracer on the manual source for each function, registered for it."""
    tracers = []
    for func in funcs:
        tracers.append(_tracer.Tracer(_testsource.manual_source, 0, ["bytes.peak"]))
        tracers[-1].add_code(func.__code__)
    return tracers


def counts(lines, code):
    """{line offset from def: count} of one code's table."""
    return {line - code.co_firstlineno: rec[0] for line, rec in lines.items()}


def table(tracer, code):
    """The lines of `code` in tracer.stats(), found by identity."""
    found = [lines for c, lines in tracer.stats() if c is code]
    assert len(found) == 1, found
    return found[0]


def run_fresh(code, malloc="debug"):
    # -W error: a warning in the child (an unraisable error reported by a
    # callback) is a failure
    return helpers.run_fresh(code, malloc, warnings_error=True)


# ---- a callback that tears the hook down --------------------------------------------

@monitoring_only
def test_teardown_from_inside_a_callback():
    # x's sample() disables both tracers (the last disable frees the tool id
    # and drops the callback objects, which CPython does not hold while it
    # calls one) and enables them again.  The running callback then went on to
    # y with its own `action` read from freed memory: y got a garbage event
    # (a line record lost) or none (its `b = 2` line uncounted).
    proc = run_fresh('''
        from helpers import LevelSource
        from pytorch_memlab import _testsource, _tracer

        def work():
            global armed
            armed = True
            b = 2
            return b

        armed = False
        tracers = {}
        junk = []

        def x_tears_down():
            global armed
            if armed:
                armed = False
                x, y = tracers["x"][0], tracers["y"][0]
                x.disable(); y.disable()
                # small ints take the freed callbacks' memory (same size
                # class) and put a number where `action` was: a use
                # after free is then seen in every build, not by luck
                junk.extend(10 ** 6 + i for i in range(200))
                y.enable(); x.enable()

        for name in ("y", "x"):
            source = LevelSource(x_tears_down if name == "x" else None)
            t = _tracer.Tracer(source, 0, ["n.current"])
            t.add_code(work.__code__)
            tracers[name] = (t, source)
            t.enable()                   # newest first: x is called before y
        work()                           # x tears down at the LINE event of `b = 2`
        for t, _ in tracers.values():
            t.disable()
        first = work.__code__.co_firstlineno
        for name, (t, _) in sorted(tracers.items()):
            (code, lines), = t.stats()
            assert code is work.__code__
            print(name, sorted((line - first, rec[0]) for line, rec in lines.items()),
                  t.sample_errors)
    ''')
    assert proc.returncode == 0, proc.stderr[-3000:]
    # x's own event, inside which x was disabled and enabled again, belongs to
    # the session that ended: it drops its work (see test_tracer_sampler's
    # test_event_outliving_disable_drops_its_work), so `b = 2` opens no line
    # of x; y, called after its re-enable, counts it
    assert proc.stdout.split("\n") == [
        "x [(2, 1), (4, 1)] 0",
        "y [(2, 1), (3, 1), (4, 1)] 0",
        ""], proc.stderr[-3000:]


# ---- look-alike code objects ----------------------------------------------------------

def test_stats_keeps_look_alike_codes_apart():
    # stats() was a dict keyed by code: one entry for both (on 3.11, a's key
    # with b's figures).  It is now a list of (code, lines) in registration order.
    a, b = look_alikes()
    t = _tracer.Tracer(_testsource.manual_source, 0, ["bytes.peak"])
    t.add_code(a.__code__)
    t.add_code(b.__code__)
    t.enable()
    try:
        a(1)
        b(2)
    finally:
        t.disable()
    stats = t.stats()
    assert [code for code, _ in stats] == [a.__code__, b.__code__]
    assert stats[0][0] is a.__code__ and stats[1][0] is b.__code__
    assert counts(stats[0][1], a.__code__) == {1: 1, 2: 2, 3: 1, 4: 1}
    assert counts(stats[1][1], b.__code__) == {1: 1, 2: 3, 3: 2, 4: 1}


def test_look_alike_codes_of_two_tracers_both_get_events():
    # monitoring: the set of instrumented codes found b "already there" (it
    # holds a), so b never got local events and its tracer saw nothing
    a, b = look_alikes()
    ta, tb = tracer_each(a, b)
    ta.enable()
    tb.enable()
    try:
        a(1)
        b(2)
    finally:
        tb.disable()
        ta.disable()
    assert counts(table(ta, a.__code__), a.__code__) == {1: 1, 2: 2, 3: 1, 4: 1}
    assert counts(table(tb, b.__code__), b.__code__) == {1: 1, 2: 3, 3: 2, 4: 1}


@monitoring_only
def test_disabling_a_look_alike_leaves_no_events_behind():
    # b's tracer disabled first took a out of the set of instrumented codes
    # (equal to b) while a kept its local events; the last disable then did
    # not clear them and the next owner of the tool id got a's LINE events.
    proc = run_fresh('''
        import sys
        from test_tracer_identity import look_alikes, tracer_each
        a, b = look_alikes()
        ta, tb = tracer_each(a, b)
        ta.enable()
        tb.enable()
        a(1)
        b(1)
        tool = ta.tool_id
        tb.disable()
        ta.disable()
        mon = sys.monitoring
        mon.use_tool_id(tool, "next owner")
        seen = []
        mon.register_callback(tool, mon.events.LINE,
                              lambda code, line: seen.append((code.co_filename, line)))
        a(1)
        b(1)
        print("unasked LINE events:", seen)
    ''', malloc=None)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == "unasked LINE events: []\n"


def test_code_with_unhashable_constants_is_traced():
    # codes are keyed by identity, so one whose constants cannot be hashed
    # (code.replace can make it) registers, runs and is torn down like any
    # other; add_code() (monitoring) and stats() raised TypeError: unhashable
    a, _ = look_alikes()
    weird = a.__code__.replace(co_consts=a.__code__.co_consts + ([],))
    with pytest.raises(TypeError):
        hash(weird)
    t = _tracer.Tracer(_testsource.manual_source, 0, ["bytes.peak"])
    other = _tracer.Tracer(_testsource.manual_source, 0, ["bytes.peak"])
    other.add_code(a.__code__)
    t.enable()
    other.enable()
    try:
        t.add_code(weird)
        types.FunctionType(weird, a.__globals__)(2)
        t.disable()
    finally:
        other.disable()
        t.disable()
    assert counts(table(t, weird), weird) == {1: 1, 2: 3, 3: 2, 4: 1}


# ---- the module executed again ---------------------------------------------------------

# A child script's start: a tracer of the module as first imported, enabled on
# work(), which has run once.
ENABLED_BEFORE_REIMPORT = '''
        import importlib, os, sys, threading
        from pytorch_memlab import _testsource, _tracer

        def work():
            x = 1
            return x

        t = _tracer.Tracer(_testsource.manual_source, 0, ["bytes.peak"])
        t.add_code(work.__code__)
        t.enable()
        work()
'''


@monitoring_only
def test_module_executed_again_keeps_live_state():
    # a second exec of the module (del sys.modules[...], import) replaced the
    # set of instrumented codes: disable() then left work()'s local events on,
    # and the next owner of the tool id got LINE events it never asked for
    proc = run_fresh(ENABLED_BEFORE_REIMPORT + '''
        tool = t.tool_id
        del sys.modules["pytorch_memlab._tracer"]
        again = importlib.import_module("pytorch_memlab._tracer")
        assert again is not _tracer          # exec ran again
        t.disable()
        mon = sys.monitoring
        assert mon.get_tool(tool) is None
        mon.use_tool_id(tool, "next owner")
        seen = []
        mon.register_callback(tool, mon.events.LINE, lambda code, line: seen.append(line))
        work()
        print("unasked LINE events:", seen)
        mon.register_callback(tool, mon.events.LINE, None)
        mon.set_local_events(tool, work.__code__, 0)
        mon.free_tool_id(tool)
        # a tracer of the new module shares the tool id with the old one's
        u = again.Tracer(_testsource.manual_source, 0, ["bytes.peak"])
        u.add_code(work.__code__)
        t.enable()
        u.enable()
        assert u.tool_id == t.tool_id == tool
        work()
        t.disable()
        u.disable()
        assert mon.get_tool(tool) is None
        print("counts:", [sorted(r[0] for r in lines.values())
                          for x in (t, u) for _, lines in x.stats()])
    ''')
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == "unasked LINE events: []\ncounts: [[2, 2], [1, 1]]\n"


@monitoring_only
def test_module_executed_again_has_its_own_callback_type():
    # the callbacks' type is each module's (its state), not a static made at
    # the first exec, which held that module for good and served every later one
    proc = run_fresh(ENABLED_BEFORE_REIMPORT + '''
        del sys.modules["pytorch_memlab._tracer"]
        again = importlib.import_module("pytorch_memlab._tracer")
        print("shared type:", again._MonitoringCallback is _tracer._MonitoringCallback)
        t.disable()
        u = again.Tracer(_testsource.manual_source, 0, ["bytes.peak"])
        u.add_code(work.__code__)
        u.enable()
        work()
        u.disable()
        print("counts:", [sorted(r[0] for r in lines.values()) for _, lines in u.stats()])
    ''')
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == "shared type: False\ncounts: [[1, 1]]\n"


@pytest.mark.skipif(MONITORING, reason="the settrace hook's state (monitoring: above)")
def test_module_executed_again_keeps_the_settrace_hook():
    # a second exec makes a new thread-starter token: the old tracer's disable()
    # must still recognise the one in threading._trace_hook and clear it
    proc = run_fresh(ENABLED_BEFORE_REIMPORT + '''
        os.environ.pop("PYTORCH_MEMLAB_TRACER", None)   # the choice is made once
        del sys.modules["pytorch_memlab._tracer"]
        again = importlib.import_module("pytorch_memlab._tracer")
        assert again is not _tracer and again.MECHANISM == "settrace", again.MECHANISM
        t.disable()
        print(sys.gettrace(), threading._trace_hook)
    ''')
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == "None None\n"


@pytest.mark.skipif(sys.version_info < (3, 12), reason="Py_mod_multiple_interpreters is 3.12+")
def test_subinterpreters_are_refused():
    # the tracer's state is process-wide; a sub-interpreter that checks its
    # extensions (here one sharing the main GIL) imported the module and ran
    # its init again over that state
    proc = run_fresh('''
        import sys
        code = "import pytorch_memlab._tracer"
        try:
            if sys.version_info >= (3, 13):
                import _interpreters, _testinternalcapi
                config = _interpreters.new_config("legacy")
                config.check_multi_interp_extensions = True
                rc = _testinternalcapi.run_in_subinterp_with_config(code, config)
            else:
                import _testcapi
                rc = _testcapi.run_in_subinterp_with_config(
                    code, use_main_obmalloc=True, allow_fork=True, allow_exec=True,
                    allow_threads=True, allow_daemon_threads=True,
                    check_multi_interp_extensions=True, gil=1)
        except (ImportError, AttributeError, TypeError) as e:
            print("no helper:", repr(e))
        else:
            print("rc", rc)
    ''', malloc=None)
    if proc.stdout.startswith("no helper:"):
        pytest.skip("this CPython has no sub-interpreter test helper: " + proc.stdout)
    assert proc.stdout == "rc -1\n", proc.stderr[-3000:]
    assert "does not support loading in subinterpreters" in proc.stderr
