"""The C tracer: several tracers on one device, fed by the deterministic C
"manual" source (no torch; both mechanisms on 3.12+)."""
import sys
import warnings

import pytest
from helpers import tracer_figures

from pytorch_memlab import _tracer
from test_tracer import MONITORING, alloc, inner, make_tracer, outer, simple  # noqa: E402


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
