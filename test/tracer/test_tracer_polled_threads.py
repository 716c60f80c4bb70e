"""A polled source and threads: a poll reads the whole device, so
what it saw since the previous poll (the peak since the last reset, the
counters' deltas) belongs to every line open on every thread, not only to
the thread that polled.  Before, one thread's line took the peak and the
counter deltas of a line still open on another thread.  No torch: the C
manual source and Python sources of a few integers, so every figure is
exact.  The suite runs under both tracer mechanisms."""
import threading

import pytest
from helpers import tracer_line

from pytorch_memlab import _testsource, _tracer

COLUMNS = ["bytes.peak", "bytes.allocated", "bytes.freed", "bytes.current"]
WAIT = 60   # seconds; only a broken run waits that long


class ManualTwin:
    """A Python source with the manual source's fields, driven by alloc()."""
    name = "twin"
    fields = ("bytes.current", "bytes.peak", "bytes.allocated", "bytes.freed")
    kinds = ("level", "peak", "counter", "counter")
    units = ("bytes",) * 4

    def __init__(self):
        self.state = [0, 0, 0, 0]

    def alloc(self, n):
        s = self.state
        s[0] += n
        if n > 0:
            s[2] += n
        else:
            s[3] -= n
        s[1] = max(s[1], s[0])

    def prepare(self, device):
        pass

    def sample(self, device):
        return tuple(self.state)

    def reset_peaks(self, device):
        self.state[1] = self.state[0]


class FullTwin(ManualTwin):
    """A push source whose registers are all taken: every thread polls."""
    name = "full-twin"

    def open_reader(self, device):
        return -1

    def close_reader(self, device, reader):
        raise AssertionError("no register was opened")

    def read(self, device, reader):
        raise AssertionError("no register was opened")


def manual_alloc(n):
    _testsource.manual_alloc(n)


def line_a(alloc, opened, b_done):
    alloc(300); alloc(-300); alloc(10); opened.set(); b_done.wait(WAIT)  # A's line
    alloc(-10)  # A's next line
    return 0  # A returns


def line_b(alloc, n):
    alloc(n); alloc(-n)  # B's line
    return 0  # B returns


def run_two_threads(tracer, alloc, b_bytes):
    """Thread A opens its line (300 up and down, then 10 up) and waits
    while thread B runs one whole profiled function."""
    opened, b_done = threading.Event(), threading.Event()

    def thread_b():
        assert opened.wait(WAIT)
        line_b(alloc, b_bytes)
        b_done.set()

    tracer.add_code(line_a.__code__)
    tracer.add_code(line_b.__code__)
    tracer.enable()
    try:
        b = threading.Thread(target=thread_b)
        b.start()
        line_a(alloc, opened, b_done)
        b.join(WAIT)
    finally:
        tracer.disable()
    assert tracer.sample_errors == 0


def manual_tracer():
    _testsource.manual_reset()
    return _tracer.Tracer(_testsource.manual_source, 0, COLUMNS, "bytes.current")


def test_line_open_on_another_thread_keeps_its_figures():
    # The case: A's line showed (10, 0, 0) instead of (300, 310, 300):
    # B's first poll reset the peak A's line had reached and moved the one
    # counter baseline past A's allocations.
    t = manual_tracer()
    run_two_threads(t, manual_alloc, 0)
    assert tracer_line(t, line_a, "# A's line") == (1, 10, (300, 310, 300, 10))
    assert tracer_line(t, line_b, "# B's line") == (1, 0, (10, 0, 0, 10))
    assert tracer_line(t, line_a, "# A's next line") == (1, -10, (10, 0, 10, 0))


def test_line_open_on_another_thread_sees_that_threads_allocations():
    # A poll reads the device: what B did while A's line was open is part of
    # A's line's span (the device's figures over exactly that span).
    t = manual_tracer()
    run_two_threads(t, manual_alloc, 5)
    assert tracer_line(t, line_a, "# A's line") == (1, 10, (300, 315, 305, 10))
    assert tracer_line(t, line_b, "# B's line") == (1, 0, (15, 5, 5, 10))


@pytest.mark.parametrize("source", [ManualTwin, FullTwin], ids=["python", "push-polled"])
def test_python_polled_source_and_threads(source):
    # The Python fallback, and a push source's threads that found no free
    # register (they poll, as source.h says): the same figures.
    src = source()
    t = _tracer.Tracer(src, 0, COLUMNS, "bytes.current")
    run_two_threads(t, src.alloc, 5)
    assert tracer_line(t, line_a, "# A's line") == (1, 10, (300, 315, 305, 10))
    assert tracer_line(t, line_b, "# B's line") == (1, 0, (15, 5, 5, 10))


def test_peer_tracer_on_the_same_device():
    # Two tracers read one device: a poll of either resets the peaks, which
    # it hands to its peer.  A's line is profiled by both; B's by the second.
    _testsource.manual_reset()
    first = _tracer.Tracer(_testsource.manual_source, 0, COLUMNS, "bytes.current")
    first.add_code(line_a.__code__)
    first.enable()
    try:
        second = _tracer.Tracer(_testsource.manual_source, 0, COLUMNS, "bytes.current")
        run_two_threads(second, manual_alloc, 5)
    finally:
        first.disable()
    for t in (first, second):
        assert tracer_line(t, line_a, "# A's line") == (1, 10, (300, 315, 305, 10))
    assert tracer_line(second, line_b, "# B's line") == (1, 0, (15, 5, 5, 10))


class OneRegister(ManualTwin):
    """A push source with one register: the first thread reads through it
    (its own counters, its register's peak), the others poll."""
    name = "one-register"

    def __init__(self):
        super().__init__()
        self.taken = False
        self.register = 0
        self.mine = {}          # thread -> [allocated, freed]

    def alloc(self, n):
        super().alloc(n)
        own = self.mine.setdefault(threading.get_ident(), [0, 0])
        own[0 if n > 0 else 1] += abs(n)
        self.register = max(self.register, self.state[0])

    def open_reader(self, device):
        if self.taken:
            return -1
        self.taken = True
        self.register = self.state[0]
        return 0

    def close_reader(self, device, reader):
        self.taken = False

    def read(self, device, reader):
        current = self.state[0]
        peak, self.register = max(self.register, current), current
        allocated, freed = self.mine.get(threading.get_ident(), [0, 0])
        return (current, peak, allocated, freed)


def test_polls_leave_a_thread_with_a_register_alone():
    # A reads through the register (its own counters and peak); only B polls.
    # B's polls go to polling threads' lines, not to A's: A's line keeps its
    # own allocations, B's line the device's.
    src = OneRegister()
    t = _tracer.Tracer(src, 0, COLUMNS, "bytes.current")
    run_two_threads(t, src.alloc, 5)
    assert tracer_line(t, line_a, "# A's line") == (1, 10, (300, 310, 300, 10))
    assert tracer_line(t, line_b, "# B's line") == (1, 0, (15, 5, 5, 10))
