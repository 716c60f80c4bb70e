"""The C tracer: several profilers and registration, and it never raises into
the user's frame nor leaves its hooks behind; fed by the deterministic C
"manual" source (no torch; both mechanisms on 3.12+)."""
import gc
import subprocess
import sys
import textwrap
import threading
import warnings

import pytest
from helpers import line_of, tracer_figures

from pytorch_memlab import _testsource, _tracer
from test_tracer import MONITORING, alloc, make_tracer, outer, simple  # noqa: E402


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
