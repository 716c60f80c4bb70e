"""A memory source that fails: a Python source is opened once into the
same table of calls as a compiled one, so its failures take the sampler's
one path.  On the control path (enable(), set_device()) the source's own
exception reaches the caller, never a generic RuntimeError in its place nor
an unraisable error beside it, for a push source's failed first reading as
for a polled one's.  On the hot
path nothing is raised into the profiled code.  No torch: every source is a
few Python integers.  The suite runs under both tracer mechanisms."""
import sys

import pytest
from helpers import tracer_figures

from pytorch_memlab import _testsource, _tracer


class DeviceGone(LookupError):
    """A source's own error type: nothing in the tracer raises it."""


class Ints:
    """A polled source of two integers that fails when told to."""
    name = "ints"
    fields = ("n.current", "n.peak")
    kinds = ("level", "peak")

    def __init__(self):
        self.level = 0
        self.fail = None      # the name of the method that raises

    def _maybe_fail(self, method, device):
        if self.fail == method:
            raise DeviceGone(f"{method}: device {device} was unplugged")

    def prepare(self, device):
        self._maybe_fail("prepare", device)

    def sample(self, device):
        self._maybe_fail("sample", device)
        return (self.level, self.level)

    def reset_peaks(self, device):
        self._maybe_fail("reset_peaks", device)


class PushedInts(Ints):
    """The same, offering the push path (one register)."""
    name = "pushed-ints"

    def open_reader(self, device):
        self._maybe_fail("open_reader", device)
        return 0

    def close_reader(self, device, reader):
        pass

    def read(self, device, reader):
        self._maybe_fail("read", device)
        return (self.level, self.level)


def work(src):
    src.level += 5  # grow
    return src.level  # done


CASES = [(Ints, "prepare"), (Ints, "sample"), (Ints, "reset_peaks"),
         (PushedInts, "prepare"), (PushedInts, "sample")]


@pytest.mark.parametrize("make, method", CASES,
                         ids=["polled-prepare", "polled-sample", "polled-reset",
                              "push-prepare", "push-sample"])
def test_enable_raises_the_sources_own_error(make, method):
    src = make()
    src.fail = method
    t = _tracer.Tracer(src, 3, ["n.peak"], "n.current")
    unraisable = []
    old_hook = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        with pytest.raises(DeviceGone, match=f"^{method}: device 3 was unplugged$"):
            t.enable()
    finally:
        sys.unraisablehook = old_hook
        t.disable()
    assert unraisable == []        # raised once, to the caller, not also reported
    # the tracer is usable once the source is
    src.fail = None
    t.add_code(work.__code__)
    t.enable()
    work(src)
    t.disable()
    count, growth, values = tracer_figures(t, work, "# grow")
    assert (count, growth) == (1, 5)


@pytest.mark.parametrize("make", [Ints, PushedInts], ids=["polled", "push"])
def test_set_device_raises_the_sources_own_error(make):
    src = make()
    t = _tracer.Tracer(src, 0, ["n.peak"], "n.current")
    t.enable()
    try:
        src.fail = "sample"
        with pytest.raises(DeviceGone, match="^sample: device 1 was unplugged$"):
            t.set_device(1)
    finally:
        src.fail = None
        t.disable()


@pytest.mark.parametrize("make, method", [(Ints, "sample"), (PushedInts, "read")],
                         ids=["polled", "push"])
def test_hot_path_reports_the_sources_own_error(make, method):
    src = make()
    t = _tracer.Tracer(src, 0, ["n.peak"], "n.current")
    t.add_code(work.__code__)
    t.enable()
    src.fail = method
    unraisable = []
    old_hook = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        assert work(src) == 5          # nothing raised into the profiled code
    finally:
        sys.unraisablehook = old_hook
        src.fail = None
        t.disable()
    assert unraisable and all(u.exc_type is DeviceGone for u in unraisable)
    assert str(unraisable[0].exc_value) == f"{method}: device 0 was unplugged"
    assert unraisable[0].object is src
    assert t.sample_errors == len(unraisable)


def test_compiled_source_failure_still_names_the_device():
    # The manual source has one device: reading another fails in C, with no
    # exception of its own; the caller gets the tracer's message.
    t = _tracer.Tracer(_testsource.manual_source, 5, ["bytes.peak"])
    with pytest.raises(RuntimeError, match="device 5"):
        t.enable()
    t.disable()
