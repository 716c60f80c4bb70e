"""LineProfiler end to end on CPU tensors, with exact bytes.

CPU tensor bytes come from the torch shim's counting allocator, installed at
the first CPU profile.  A peak is an absolute level (bytes live at the worst
moment of the line), so in-process tests compare against the level of a line
that allocates nothing; tests that check printed text run a fresh interpreter.
"""
import functools
import sys
import threading

import pytest
from helpers import ContinueDebugger, EarlyThread, MiB, disabled_after, line_figures, threads_at_reused_addresses

torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")

from pytorch_memlab import LineProfiler, _tracer  # noqa: E402

PEAK = "active_bytes.all.peak"
MONITORING = _tracer.MECHANISM == "monitoring"


# ---- helpers -----------------------------------------------------------------

def assert_no_hook(prof):
    assert not prof.enabled
    assert sys.gettrace() is None
    if MONITORING:
        for tracer in prof._tracers.tracers:
            assert tracer.tool_id == -1


def cpu_profiler(*funcs, **kwargs):
    kwargs.setdefault("device", "cpu")
    return LineProfiler(*funcs, **kwargs)


@pytest.fixture
def prof_factory():
    yield from disabled_after(cpu_profiler)


# ---- profiled code -------------------------------------------------------------

def one_mib():
    base = 0  # nothing
    x = torch.empty(262144)  # 1 MiB of float32
    return x  # keep


def grow_then_free():
    base = 0  # nothing
    x = torch.empty(262144)  # make
    y = torch.empty(524288)  # make two
    del x  # free one
    del y  # free two
    return base


def inner_temp():
    t = torch.empty(524288)  # inner 2 MiB
    return t.numel()  # inner done


def outer_calls():
    base = 0  # nothing
    n = inner_temp()  # call inner
    return n + base  # outer done


# ---- exact bytes -----------------------------------------------------------------

def test_one_mib_line_peak_and_growth(prof_factory):
    prof = prof_factory(one_mib)
    with prof:
        x = one_mib()
    base = line_figures(prof, one_mib, "# nothing")[PEAK]
    line = line_figures(prof, one_mib, "# 1 MiB")
    assert line[PEAK] - base == MiB
    assert line["net_growth"] == MiB
    assert line["count"] == 1
    assert line["reserved_bytes.all.peak"] - base == MiB    # CPU: reserved == active
    del x


def test_net_growth_when_freed_on_later_line(prof_factory):
    prof = prof_factory(grow_then_free)
    with prof:
        grow_then_free()
    base = line_figures(prof, grow_then_free, "# nothing")[PEAK]
    assert line_figures(prof, grow_then_free, "# make")["net_growth"] == MiB
    assert line_figures(prof, grow_then_free, "# make two")["net_growth"] == 2 * MiB
    assert line_figures(prof, grow_then_free, "# make two")[PEAK] - base == 3 * MiB
    assert line_figures(prof, grow_then_free, "# free one")["net_growth"] == -MiB
    assert line_figures(prof, grow_then_free, "# free two")["net_growth"] == -2 * MiB
    assert line_figures(prof, grow_then_free, "# free two")[PEAK] - base == 2 * MiB


def test_counters_and_levels(prof_factory):
    cols = ["active_bytes.all.allocated", "active_bytes.all.freed",
            "active_bytes.all.current", "allocation.all.allocated"]
    prof = prof_factory(grow_then_free, columns=cols)
    with prof:
        grow_then_free()
        grow_then_free()
    make = line_figures(prof, grow_then_free, "# make two")
    assert make["count"] == 2
    assert make["active_bytes.all.allocated"] == 4 * MiB      # summed over runs
    assert make["allocation.all.allocated"] == 2
    assert make["net_growth"] == 4 * MiB                      # summed over runs
    assert line_figures(prof, grow_then_free, "# free two")["active_bytes.all.freed"] == 4 * MiB
    base = line_figures(prof, grow_then_free, "# nothing")["active_bytes.all.current"]
    assert make["active_bytes.all.current"] - base == 3 * MiB   # level at the end


def test_nested_inner_peak_charged_to_callers_line(prof_factory):
    prof = prof_factory(outer_calls, inner_temp)
    with prof:
        outer_calls()
    base = line_figures(prof, outer_calls, "# nothing")[PEAK]
    call = line_figures(prof, outer_calls, "# call inner")
    assert call[PEAK] - base == 2 * MiB
    assert call["net_growth"] == 0
    assert line_figures(prof, inner_temp, "# inner 2 MiB")[PEAK] - base == 2 * MiB
    assert line_figures(prof, inner_temp, "# inner 2 MiB")["net_growth"] == 2 * MiB


def test_unregistered_callee_still_charged(prof_factory):
    prof = prof_factory(outer_calls)
    with prof:
        outer_calls()
    base = line_figures(prof, outer_calls, "# nothing")[PEAK]
    assert line_figures(prof, outer_calls, "# call inner")[PEAK] - base == 2 * MiB
    assert [r["qualname"] for r in prof.stats()] == ["outer_calls"]


def test_max_over_runs(prof_factory):
    def sized(n):
        base = 0  # nothing
        x = torch.empty(n)  # sized
        return x.numel() + base

    prof = prof_factory(sized)
    with prof:
        sized(262144)
        sized(262144 * 4)
        sized(262144 * 2)
    line = line_figures(prof, sized, "# sized")
    assert line["count"] == 3
    assert line[PEAK] - line_figures(prof, sized, "# nothing")[PEAK] == 4 * MiB


# ---- threads ---------------------------------------------------------------------

def test_thread_started_after_enable(prof_factory):
    prof = prof_factory(one_mib)
    out = []
    with prof:
        t = threading.Thread(target=lambda: out.append(one_mib()))
        t.start()
        t.join()
    line = line_figures(prof, one_mib, "# 1 MiB")
    assert line["count"] == 1 and line["net_growth"] == MiB


@pytest.mark.skipif(not MONITORING, reason="with settrace a thread that existed before "
                    "enable() is hooked by the decorators' wrapper only (see decorator tests)")
def test_thread_started_before_enable(prof_factory):
    prof = prof_factory(one_mib)
    early = EarlyThread(one_mib)
    with prof:
        early.release()
    early.join()
    assert line_figures(prof, one_mib, "# 1 MiB")["count"] == 1


def maybe_debugged(n, debug):
    x = torch.empty(n, dtype=torch.uint8)  # alloc
    del x  # free
    if debug:
        ContinueDebugger().set_trace()  # debugger
    return n  # done


def test_later_thread_at_a_finished_threads_address(prof_factory):
    # With settrace, a debugger that takes a worker inside a profiled call
    # hides its return; the frame stays open until disable().  A later thread
    # often gets the finished one's PyThreadState address: it must not
    # continue that frame (its bytes were charged to the debugger's line).
    cols = ["active_bytes.all.allocated", "allocation.all.allocated"]
    prof = prof_factory(maybe_debugged, columns=cols)
    with prof:
        runs, plain = threads_at_reused_addresses(lambda: maybe_debugged(MiB, True),
                                                  lambda: maybe_debugged(4 * MiB, False))
    debugged = runs - plain
    alloc = line_figures(prof, maybe_debugged, "# alloc")
    assert (alloc["count"], alloc[cols[0]], alloc[cols[1]]) == (
        runs, (debugged + 4 * plain) * MiB, runs)
    line = line_figures(prof, maybe_debugged, "# debugger")
    assert (line["count"], line[cols[0]], line[cols[1]]) == (debugged, 0, 0)


# ---- what can be profiled --------------------------------------------------------

class Holder:
    def method(self):
        x = torch.empty(262144)  # method line
        return x

    @staticmethod
    def static():
        x = torch.empty(262144)  # static line
        return x

    @classmethod
    def klass(cls):
        x = torch.empty(262144)  # class line
        return x


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(256, 256)

    def forward(self, inp):
        hidden = self.lin(inp)  # forward line
        return hidden.relu()


def test_methods_and_module_forward(prof_factory):
    holder, net = Holder(), Net()
    prof = prof_factory(holder.method, Holder.static, Holder.klass, net)
    with torch.no_grad(), prof:
        holder.method()
        Holder.static()
        Holder.klass()
        net(torch.ones(4, 256))
    assert line_figures(prof, Holder.method, "# method line")["net_growth"] == MiB
    assert line_figures(prof, Holder.static, "# static line")["net_growth"] == MiB
    assert line_figures(prof, Holder.klass, "# class line")["net_growth"] == MiB
    assert line_figures(prof, Net.forward, "# forward line")["net_growth"] == 4 * 256 * 4
    assert {r["qualname"] for r in prof.stats()} == {
        "Holder.method", "Holder.static", "Holder.klass", "Net.forward"}


def test_forward_by_class_and_by_bound_method(prof_factory):
    net = Net()
    prof = prof_factory(Net, net.forward)     # both name the same function
    assert len(prof.functions) == 1
    with torch.no_grad(), prof:
        net(torch.ones(1, 256))
    assert line_figures(prof, Net.forward, "# forward line")["count"] == 1


def test_wrapped_function_is_unwrapped(prof_factory):
    def deco(f):
        @functools.wraps(f)
        def wrapper(*a, **k):
            return f(*a, **k)
        return wrapper

    wrapped = deco(one_mib)
    prof = prof_factory(wrapped)
    assert prof.functions == [one_mib]
    with prof:
        wrapped()
    assert line_figures(prof, one_mib, "# 1 MiB")["count"] == 1


def test_replaced_code_object_is_picked_up(prof_factory):
    def target():
        x = torch.empty(262144)  # original
        return x

    def replacement():
        y = torch.empty(524288)  # replacement
        return y

    original = target.__code__
    prof = prof_factory(target)
    try:
        target.__code__ = replacement.__code__
        with prof:
            target()
        codes = prof._tracers.tracers[0].codes()
        assert replacement.__code__ in codes and original in codes
        lines = prof.stats(target)[0]["lines"]
        grown = [line for line in lines if line["net_growth"]]
        assert [line["net_growth"] for line in grown] == [2 * MiB]
        assert "# replacement" in grown[0]["code"]
    finally:
        target.__code__ = original


def test_builtin_is_refused(prof_factory):
    with pytest.raises(TypeError, match="no Python code"):
        prof_factory(len)


def test_partial_is_refused_naming_its_func(prof_factory):
    with pytest.raises(TypeError, match=r"functools\.partial has no code of its own; profile "
                                        r"the function it calls \(its \.func\)"):
        prof_factory(functools.partial(one_mib))
