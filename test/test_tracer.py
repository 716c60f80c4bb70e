"""The C tracer's mechanics, fed by the deterministic C "manual" source.

Runs on 3.11, 3.12 and 3.13, under both mechanisms on 3.12+ (no torch)."""
import asyncio
import gc
import re
import subprocess
import sys
import textwrap
import threading
import warnings

import pytest
from helpers import EarlyThread, disabled_after, line_of, tracer_figures

from pytorch_memlab import _testsource, _tracer

alloc = _testsource.manual_alloc
COLUMNS = ["bytes.peak", "bytes.allocated", "bytes.freed", "bytes.current"]
MONITORING = _tracer.MECHANISM == "monitoring"


def manual_tracer(*funcs, columns=COLUMNS):
    _testsource.manual_reset()
    t = _tracer.Tracer(_testsource.manual_source, 0, columns, "bytes.current")
    for f in funcs:
        t.add_code(f.__code__)
    return t


@pytest.fixture
def make_tracer():
    yield from disabled_after(manual_tracer)


# --- basics -----------------------------------------------------------------

def simple():
    alloc(100)  # grab
    alloc(-40)  # drop
    return None  # done


def test_per_line_figures(make_tracer):
    t = make_tracer(simple)
    t.enable()
    simple()
    simple()
    t.disable()
    count, growth, v = tracer_figures(t, simple, "# grab")
    assert count == 2
    assert growth == 200                      # +100 per run
    assert v["bytes.allocated"] == 200        # summed over runs
    assert v["bytes.peak"] == 160             # second run starts at 60
    count, growth, v = tracer_figures(t, simple, "# drop")
    assert (count, growth, v["bytes.freed"]) == (2, -80, 80)
    assert v["bytes.peak"] == 160             # peak during the line = level at start
    assert v["bytes.current"] == 120          # level at end, max over runs


def test_unregistered_code_is_not_recorded(make_tracer):
    t = make_tracer(simple)
    t.enable()

    def other():
        alloc(5)
    other()
    t.disable()
    assert [code for code, _ in t.stats()] == [simple.__code__]
    assert dict(t.stats())[simple.__code__] == {}


def test_unknown_column_lists_valid_ones():
    with pytest.raises(ValueError, match=r"unknown column 'nope'.*bytes\.peak"):
        _tracer.Tracer(_testsource.manual_source, 0, ["nope"])


def test_bad_arguments():
    with pytest.raises(TypeError, match="sequence of str"):
        _tracer.Tracer(_testsource.manual_source, 0, "bytes.peak")
    t = _tracer.Tracer(_testsource.manual_source, 0, ["bytes.peak"])
    with pytest.raises(TypeError, match="__code__"):
        t.add_code(simple)
    with pytest.raises(TypeError, match="memory source"):
        _tracer.Tracer(object(), 0, ["x"])
    with pytest.raises(RuntimeError, match="only device 0"):
        _tracer.Tracer(_testsource.manual_source, 3, ["bytes.peak"]).enable()


def test_source_info():
    name, fields = _tracer.source_info(_testsource.manual_source)
    assert name == "manual"
    assert fields == ("bytes.current", "bytes.peak", "bytes.allocated", "bytes.freed")


def test_field_table_is_what_the_source_declares():
    assert _tracer.field_table(_testsource.manual_source) == (
        ("bytes.current", "level", "bytes"), ("bytes.peak", "peak", "bytes"),
        ("bytes.allocated", "counter", "bytes"), ("bytes.freed", "counter", "bytes"))


class Ticking:
    """One field, "x", read 10 higher at every sample; its kind as given."""
    name = "ticking"
    fields = ("x",)

    def __init__(self, kinds):
        self.kinds = kinds
        self.n = 0

    def prepare(self, device):
        pass

    def reset_peaks(self, device):
        pass

    def sample(self, device):
        self.n += 10
        return (self.n,)


def three_lines():
    a = 1
    b = 2
    return a + b


@pytest.mark.parametrize("kind, figures", [
    ("counter", [30, 30, 30]),   # 10 per execution of each line, summed over 3 calls
    ("level", [140, 150, 160]),  # the reading at the end of the line, its last call
])
def test_the_declared_kind_folds_a_field_whatever_its_name(kind, figures):
    # "x" says nothing by its name: only the declared kind decides.
    tracer = _tracer.Tracer(Ticking((kind,)), 0, ["x"])
    tracer.add_code(three_lines.__code__)
    tracer.enable()
    for _ in range(3):
        three_lines()
    tracer.disable()
    lines = sorted(dict(tracer.stats())[three_lines.__code__].items())
    assert [values[0] for _, (_, _, values) in lines] == figures
    assert _tracer.field_table(Ticking((kind,))) == (("x", kind, "count"),)


@pytest.mark.parametrize("kinds, error, message", [
    (None, TypeError, "needs `kinds`: 'level', 'peak' or 'counter' for each field"),
    ((), ValueError, "0 kinds for 1 fields"),
    (("lvl",), ValueError, "kinds[0] is 'lvl'; expected 'level', 'peak' or 'counter'"),
    ((1,), ValueError, "kinds[0] is 1; expected"),
])
def test_a_python_source_without_valid_kinds_is_refused(kinds, error, message):
    source = Ticking(kinds)
    if kinds is None:
        del source.kinds
    with pytest.raises(error, match=re.escape(message)):
        _tracer.Tracer(source, 0, ["x"])


# --- nesting, recursion -----------------------------------------------------

def inner():
    alloc(1000)  # inner grab
    alloc(-1000)  # inner drop


def outer():
    alloc(10)  # outer grab
    inner()  # call inner
    alloc(-10)  # outer drop


def test_nested_call_charged_to_caller_line(make_tracer):
    t = make_tracer(outer, inner)
    t.enable()
    outer()
    t.disable()
    count, growth, v = tracer_figures(t, outer, "# call inner")
    assert count == 1 and growth == 0
    assert v["bytes.peak"] == 1010
    assert v["bytes.allocated"] == 1000 and v["bytes.freed"] == 1000
    assert tracer_figures(t, inner, "# inner grab")[2]["bytes.peak"] == 1010


def test_nested_unregistered_callee_still_charged(make_tracer):
    t = make_tracer(outer)
    t.enable()
    outer()
    t.disable()
    assert tracer_figures(t, outer, "# call inner")[2]["bytes.peak"] == 1010
    assert inner.__code__ not in dict(t.stats())


def recurse(n):
    alloc(10)  # rec grab
    if n > 0:
        recurse(n - 1)  # rec call
    alloc(-10)  # rec drop


def test_recursion(make_tracer):
    t = make_tracer(recurse)
    t.enable()
    recurse(4)
    t.disable()
    assert tracer_figures(t, recurse, "# rec grab")[0] == 5
    count, growth, v = tracer_figures(t, recurse, "# rec call")
    assert count == 4
    assert v["bytes.peak"] == 50             # outermost call sees the deepest level
    assert tracer_figures(t, recurse, "# rec drop")[1] == -50


# --- generators and coroutines ---------------------------------------------

def gen(n):
    for i in range(n):
        alloc(8)  # gen grab
        yield i  # gen yield
    alloc(-8 * n)  # gen drop


def test_generator_suspend_resume(make_tracer):
    t = make_tracer(gen)
    t.enable()
    total = 0
    for x in gen(3):
        alloc(1000)  # consumer work, outside the generator
        alloc(-1000)
        total += x
    t.disable()
    assert total == 3
    assert tracer_figures(t, gen, "# gen grab")[0] == 3
    assert tracer_figures(t, gen, "# gen yield")[0] == 3
    count, growth, v = tracer_figures(t, gen, "# gen drop")
    assert count == 1 and growth == -24
    # the consumer's 1000 bytes happen while gen is suspended: never charged
    assert all(vals[0] < 1000 for _, _, vals in dict(t.stats())[gen.__code__].values())


def test_generator_closed_while_suspended(make_tracer):
    t = make_tracer(gen)
    t.enable()
    g = gen(5)
    next(g)
    g.close()
    del g
    t.disable()
    assert tracer_figures(t, gen, "# gen grab")[0] == 1
    alloc(-8)


async def coro(n):
    alloc(n)  # coro grab
    await asyncio.sleep(0)  # coro await
    alloc(-n)  # coro drop
    return n


def test_async_coroutines(make_tracer):
    t = make_tracer(coro)
    t.enable()

    async def main():
        return await asyncio.gather(coro(100), coro(200))
    assert asyncio.run(main()) == [100, 200]
    t.disable()
    assert tracer_figures(t, coro, "# coro grab")[0] == 2
    assert tracer_figures(t, coro, "# coro drop")[0] == 2
    assert tracer_figures(t, coro, "# coro drop")[2]["bytes.freed"] == 300


# --- exceptions -------------------------------------------------------------

def raises_inside():
    alloc(50)  # before raise
    try:
        raise ValueError("inside")  # the raise
    except ValueError:
        alloc(-50)  # handler
    return 1


def raises_out():
    alloc(70)  # grab then raise
    raise KeyError("out")  # raise out


def calls_raiser():
    try:
        raises_out()  # call raiser
    except KeyError:
        alloc(-70)  # caught outside
    return 2


def test_exception_caught_inside(make_tracer):
    t = make_tracer(raises_inside)
    t.enable()
    assert raises_inside() == 1
    t.disable()
    assert tracer_figures(t, raises_inside, "# handler")[0] == 1
    assert tracer_figures(t, raises_inside, "return 1")[0] == 1


def test_exception_escaping_commits_lines(make_tracer):
    t = make_tracer(raises_out, calls_raiser)
    t.enable()
    assert calls_raiser() == 2
    with pytest.raises(KeyError):
        raises_out()
    t.disable()
    assert tracer_figures(t, raises_out, "# raise out")[0] == 2
    assert tracer_figures(t, calls_raiser, "# call raiser")[2]["bytes.peak"] == 70
    assert tracer_figures(t, calls_raiser, "# caught outside")[0] == 1
    alloc(-70)


def interrupted():
    alloc(5)  # before interrupt
    raise KeyboardInterrupt  # interrupt


def test_keyboard_interrupt(make_tracer):
    t = make_tracer(interrupted)
    t.enable()
    with pytest.raises(KeyboardInterrupt):
        interrupted()
    t.disable()
    assert tracer_figures(t, interrupted, "# interrupt")[0] == 1
    alloc(-5)


# --- threads ----------------------------------------------------------------

def threaded(n):
    for _ in range(n):
        alloc(3)  # thread grab
        alloc(-3)  # thread drop


def test_thread_started_after_enable(make_tracer):
    t = make_tracer(threaded)
    t.enable()
    workers = [threading.Thread(target=threaded, args=(50,)) for _ in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    t.disable()
    assert tracer_figures(t, threaded, "# thread grab")[0] == 150


def test_thread_started_before_enable(make_tracer):
    t = make_tracer(threaded)

    def in_thread():
        _tracer.install_thread_hook()   # what profile()'s wrapper does
        threaded(20)
    early = EarlyThread(in_thread)
    t.enable()
    early.release()
    early.join()
    t.disable()
    assert tracer_figures(t, threaded, "# thread grab")[0] == 20


# --- several profilers, registration ----------------------------------------

def test_two_tracers_at_once(make_tracer):
    a = make_tracer(simple)
    b = make_tracer(simple, outer)
    a.enable()
    b.enable()
    simple()
    outer()
    a.disable()
    simple()
    b.disable()
    assert tracer_figures(a, simple, "# grab")[0] == 1
    assert tracer_figures(b, simple, "# grab")[0] == 2
    assert tracer_figures(b, outer, "# call inner")[0] == 1
    if MONITORING:
        assert a.tool_id == -1 and b.tool_id == -1


def test_reregistering_is_harmless(make_tracer):
    t = make_tracer(simple)
    t.add_code(simple.__code__)
    t.enable()
    t.add_code(simple.__code__)
    simple()
    t.disable()
    assert t.codes() == [simple.__code__]
    assert tracer_figures(t, simple, "# grab")[0] == 1


def test_code_replaced(make_tracer):
    def f():
        alloc(1)  # one
        alloc(-1)

    def g():
        alloc(2)  # two
        alloc(-2)
    old, line_one = f.__code__, line_of(f, "# one")
    t = make_tracer(f)
    t.enable()
    f()
    f.__code__ = g.__code__
    t.add_code(f.__code__)      # what LineProfiler does when it sees a new code
    f()
    t.disable()
    assert dict(t.stats())[old][line_one][0] == 1
    assert dict(t.stats())[g.__code__][line_of(g, "# two")][0] == 1


def test_add_code_while_enabled(make_tracer):
    t = make_tracer()
    t.enable()
    t.add_code(simple.__code__)
    simple()
    t.disable()
    assert tracer_figures(t, simple, "# grab")[0] == 1


def test_clear(make_tracer):
    t = make_tracer(simple)
    t.enable()
    simple()
    t.clear()
    simple()
    t.disable()
    assert tracer_figures(t, simple, "# grab")[0] == 1


def test_disable_inside_profiled_frame_commits(make_tracer):
    t = make_tracer()

    def stops():
        alloc(9)  # nine
        t.disable()
    t.add_code(stops.__code__)
    t.enable()
    stops()
    assert tracer_figures(t, stops, "# nine")[0] == 1
    alloc(-9)


# --- never raises into the user's frame, never leaves hooks -----------------

class FailingSource:
    name = "failing"
    fields = ("x.current", "x.peak")
    kinds = ("level", "peak")

    def __init__(self):
        self.calls = 0

    def prepare(self, device):
        pass

    def sample(self, device):
        self.calls += 1
        if self.calls > 1:
            raise RuntimeError("sampling broke")
        return (0, 0)

    def reset_peaks(self, device):
        pass


def test_failing_source_never_raises_into_user_code(make_tracer):
    src = FailingSource()
    t = _tracer.Tracer(src, 0, ["x.peak"])
    t.add_code(simple.__code__)
    t.enable()
    hooks = []
    old_hook = sys.unraisablehook
    sys.unraisablehook = hooks.append
    try:
        simple()            # must not raise
        alloc(-60)
    finally:
        sys.unraisablehook = old_hook
        t.disable()
    assert hooks and "sampling broke" in str(hooks[0].exc_value)
    assert t.sample_errors > 0
    with pytest.warns(RuntimeWarning, match="readings of the memory source failed"):
        t.stats()


def test_python_source_works(make_tracer):
    class Counter:
        name = "counter"
        fields = ("n.current",)
        kinds = ("level",)
        n = 0

        def prepare(self, device):
            pass

        def sample(self, device):
            Counter.n += 1
            return (Counter.n,)

        def reset_peaks(self, device):
            pass
    t = _tracer.Tracer(Counter(), 0, ["n.current"], "n.current")
    t.add_code(simple.__code__)
    t.enable()
    simple()
    t.disable()
    alloc(-60)
    # each line spans exactly one reading
    assert all(growth == 1 for _, growth, _ in dict(t.stats())[simple.__code__].values())


def test_no_hook_left_after_disable(make_tracer):
    t = make_tracer(simple)
    t.enable()
    if MONITORING:
        tool = t.tool_id
        assert sys.monitoring.get_tool(tool) == "pytorch_memlab"
    else:
        assert sys.gettrace() is not None
    simple()
    t.disable()
    alloc(-60)
    assert sys.gettrace() is None
    assert threading._trace_hook is None
    if MONITORING:
        assert sys.monitoring.get_tool(tool) is None


@pytest.mark.skipif(not MONITORING, reason="sys.monitoring mechanism only")
def test_tool_id_never_reserved():
    # 0, 1, 2, 5 belong to debuggers, coverage, profilers, optimizers
    t = _tracer.Tracer(_testsource.manual_source, 0, ["bytes.peak"])
    t.enable()
    try:
        assert t.tool_id == 3
        assert all(sys.monitoring.get_tool(i) is None for i in (0, 1, 2, 5))
    finally:
        t.disable()


@pytest.mark.skipif(not MONITORING, reason="sys.monitoring mechanism only")
def test_tool_id_taken_moves_to_next():
    sys.monitoring.use_tool_id(3, "someone else")
    try:
        t = _tracer.Tracer(_testsource.manual_source, 0, ["bytes.peak"])
        t.enable()
        assert t.tool_id == 4
        t.disable()
    finally:
        sys.monitoring.free_tool_id(3)


@pytest.mark.skipif(not MONITORING, reason="sys.monitoring mechanism only")
def test_no_free_tool_id_says_who_holds_them():
    sys.monitoring.use_tool_id(3, "tool three")
    sys.monitoring.use_tool_id(4, "tool four")
    try:
        t = _tracer.Tracer(_testsource.manual_source, 0, ["bytes.peak"])
        with pytest.raises(RuntimeError, match=r"3 \('tool three'\), 4 \('tool four'\)"):
            t.enable()
        assert not t.enabled
        assert all(sys.monitoring.get_tool(i) is None for i in (0, 1, 2, 5))
    finally:
        sys.monitoring.free_tool_id(3)
        sys.monitoring.free_tool_id(4)


def test_other_trace_function_is_kept(make_tracer):
    seen = []

    def other_tracer(frame, event, arg):
        seen.append(event)
        return None
    sys.settrace(other_tracer)
    try:
        t = make_tracer(simple)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t.enable()
        simple()
        t.disable()
        assert sys.gettrace() is other_tracer
    finally:
        sys.settrace(None)
    alloc(-60)
    # both work side by side: settrace chains to the other function
    assert tracer_figures(t, simple, "# grab")[0] == 1
    assert not caught
    assert seen.count("call") >= 1           # theirs saw simple() being called


def test_tracer_dropped_while_enabled_is_cleaned_up():
    t = _tracer.Tracer(_testsource.manual_source, 0, ["bytes.peak"])
    t.add_code(simple.__code__)
    t.enable()
    _tracer._shutdown()
    assert not t.enabled
    del t
    gc.collect()
    assert sys.gettrace() is None


def test_interpreter_exit_leaves_nothing(tmp_path):
    script = tmp_path / "exit_check.py"
    script.write_text(textwrap.dedent("""
        import atexit, sys
        def check():   # registered first, so it runs after the tracer's own handler
            assert sys.gettrace() is None, "trace hook left"
            if hasattr(sys, "monitoring"):
                for i in range(6):
                    assert sys.monitoring.get_tool(i) is None, f"tool id {i} left"
            print("clean")
        atexit.register(check)
        from pytorch_memlab import _testsource, _tracer
        def f():
            _testsource.manual_alloc(1)
        t = _tracer.Tracer(_testsource.manual_source, 0, ["bytes.peak"])
        t.add_code(f.__code__)
        t.enable()
        f()
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert "clean" in out.stdout


# --- several tracers share one device ---------------------------------------

def test_peers_do_not_hide_each_others_peaks(make_tracer):
    # a watches outer only, b watches inner only: b's readings reset the
    # device's peak inside inner(), a must still see it on its caller line.
    a = make_tracer(outer)
    b = make_tracer(inner)
    a.enable()
    b.enable()
    outer()
    b.disable()
    a.disable()
    assert tracer_figures(a, outer, "# call inner")[2]["bytes.peak"] == 1010
    assert tracer_figures(b, inner, "# inner grab")[2]["bytes.peak"] == 1010


def test_more_tracers_than_tool_ids(make_tracer):
    tracers = [make_tracer(simple) for _ in range(8)]
    for t in tracers:
        t.enable()
    simple()
    if MONITORING:
        assert len({t.tool_id for t in tracers}) == 1      # one shared id
    for t in tracers:
        t.disable()
    alloc(-60)
    assert all(tracer_figures(t, simple, "# grab")[0] == 1 for t in tracers)
    if MONITORING:
        assert all(sys.monitoring.get_tool(i) is None for i in range(2, 6))


def test_disabling_one_tracer_keeps_the_other_running(make_tracer):
    a = make_tracer(simple)
    b = make_tracer(simple)
    a.enable()
    b.enable()
    a.disable()
    simple()
    b.disable()
    alloc(-60)
    assert dict(a.stats())[simple.__code__] == {}
    assert tracer_figures(b, simple, "# grab")[0] == 1


class TwoDevices:
    """Python source with two devices whose levels the test sets."""
    name = "two"
    fields = ("b.current", "b.peak")
    kinds = ("level", "peak")

    def __init__(self):
        self.level = [0, 0]

    def prepare(self, device):
        pass

    def sample(self, device):
        return (self.level[device], self.level[device])

    def reset_peaks(self, device):
        pass


def test_set_device_measures_growth_on_the_new_device():
    src = TwoDevices()
    src.level = [100, 5000]
    t = _tracer.Tracer(src, 0, ["b.peak"], "b.current")

    def switch():
        src.level[0] += 10  # on zero
        t.set_device(1)  # switch
        src.level[1] += 7  # on one
    t.add_code(switch.__code__)
    t.enable()
    switch()
    t.disable()
    assert tracer_figures(t, switch, "# on zero")[1] == 10
    assert tracer_figures(t, switch, "# switch")[1] == 0      # not 5000 - 110
    count, growth, v = tracer_figures(t, switch, "# on one")
    assert growth == 7 and v["b.peak"] == 5007


def other(frame, event, arg):
    """Another tool's trace function."""
    return None


def pause():
    for _ in range(2):   # a backward jump: the pending check runs here
        pass


@pytest.mark.skipif(MONITORING, reason="settrace mechanism only (monitoring is not affected)")
def test_settrace_after_enable_warns_once_and_resumes(make_tracer):
    t = make_tracer(simple)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t.enable()
        simple()
        sys.settrace(other)          # another tool arrives
        pause()
        assert sys.gettrace() is other
        simple()
        sys.settrace(None)           # ...and leaves
        pause()
        simple()
        sys.settrace(other)          # arrives again: no second warning
        pause()
        sys.settrace(None)
        pause()
        t.disable()
    alloc(-60)
    assert tracer_figures(t, simple, "# grab")[0] == 3
    assert sum("another tool called sys.settrace" in str(w.message) for w in caught) == 1
    assert sys.gettrace() is None


@pytest.mark.skipif(MONITORING, reason="settrace mechanism only (monitoring is not affected)")
def test_settrace_warning_comes_once_per_profiling_session(make_tracer):
    # once per session, not once per process: a later session (another test,
    # a second profiled run) is told again
    counts = []
    for _ in range(2):
        t = make_tracer(simple)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            t.enable()
            sys.settrace(other)
            pause()
            simple()
            sys.settrace(None)
            pause()
            t.disable()
        counts.append(sum("another tool called sys.settrace" in str(w.message) for w in caught))
    assert counts == [1, 1]
