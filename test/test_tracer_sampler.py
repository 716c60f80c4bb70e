"""Regression tests for the sampler and event core (issue 30): a Python
source's fields read once, events that outlive a disable(), reader slots
taken while a register is being opened, the polling fallback of a push
source with no free register, a level column's figure (the level at the
line's end), and extreme readings.  No torch: every source is a few Python
integers (or the C manual source), so every figure is exact.  The suite runs
under both tracer mechanisms."""
import sys
import threading

import pytest
from helpers import run_fresh, tracer_line

from pytorch_memlab import _testsource, _tracer

INT64_MAX = 2 ** 63 - 1
INT64_MIN = -2 ** 63


# ---- item 4: a source's fields are read once, at Tracer() ----------------------

class ShiftingSource:
    """A Python source whose `fields` is a property the test changes."""
    name = "shifting"

    def __init__(self, names):
        self.names = tuple(names)
        self.value = 0

    @property
    def fields(self):
        return self.names

    @property
    def kinds(self):
        return tuple("peak" if n.endswith(".peak") else "level" for n in self.names)

    def prepare(self, device):
        pass

    def sample(self, device):
        return (self.value,) * len(self.names)

    def reset_peaks(self, device):
        pass


def test_columns_keep_the_field_names_read_at_init():
    # Tracer.columns and growth_field looked names up again in the source's
    # fields, by the indices found at init: once fields changed they named
    # other fields (and past a shorter tuple, read out of bounds).
    src = ShiftingSource(("a.current", "b.current", "c.current"))
    t = _tracer.Tracer(src, 0, ["c.current"], "b.current")
    src.names = ("x.current", "y.current", "z.current")
    assert t.columns == ("c.current",)
    assert t.growth_field == "b.current"


def test_columns_after_fields_shrank():
    proc = run_fresh('''
        from test_tracer_sampler import ShiftingSource
        from pytorch_memlab import _testsource, _tracer
        src = ShiftingSource(["a.current", "b.current", "c.current"])
        t = _tracer.Tracer(src, 0, ["c.current"], "c.current")
        src.names = ("x.current",)
        print(t.columns, t.growth_field)
    ''')
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["('c.current',)", "c.current"]


def test_peers_with_other_fields_share_no_peaks():
    # Two polled tracers on one Python source share the peaks each reading
    # resets.  The second was made after `fields` grew: it wrote its four
    # peaks into the first one's carried array, which has room for one (a
    # heap-buffer-overflow under AddressSanitizer).
    proc = run_fresh('''
        import sys
        sys.unraisablehook = lambda u: None    # the first tracer's readings fail
        from test_tracer_sampler import ShiftingSource
        from pytorch_memlab import _testsource, _tracer

        def work():
            x = 1
            return x

        src = ShiftingSource(["a.peak"])
        src.value = 7
        first = _tracer.Tracer(src, 0, ["a.peak"])
        first.add_code(work.__code__)
        first.enable()
        src.names = ("b.peak", "c.peak", "d.peak", "a.peak")
        second = _tracer.Tracer(src, 0, ["a.peak"])
        second.add_code(work.__code__)
        second.enable()
        for _ in range(3):
            work()
        second.disable()
        first.disable()
        lines = dict(second.stats())[work.__code__]
        print(sorted(v[2] for v in lines.values()))
        del first, second
        print("ok")
    ''')
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[-2] == "ok"


# ---- item 6: an event that outlives disable() -----------------------------------

class BlockingSource:
    """A polled source whose sample() can block one thread (releasing the
    GIL) until the test lets it go."""
    name = "blocking"
    fields = ("bytes.allocated",)
    kinds = ("counter",)

    def __init__(self):
        self.allocated = 0
        self.block_thread = None
        self.blocked = threading.Event()
        self.release = threading.Event()

    def prepare(self, device):
        pass

    def arm(self):
        """The calling thread's next reading blocks."""
        self.block_thread = threading.get_ident()

    def alloc(self, n):
        self.allocated += n

    def sample(self, device):
        if self.block_thread == threading.get_ident():
            self.block_thread = None
            self.blocked.set()
            assert self.release.wait(30)
        return (self.allocated,)

    def reset_peaks(self, device):
        pass


def stale_line(src, arm):
    if arm:
        src.arm()  # arm
    src.alloc(100)  # the line
    return 0  # done


@pytest.mark.parametrize("reenabled", [False, True],
                         ids=["disabled", "disabled-and-reenabled"])
def test_event_outliving_disable_drops_its_work(reenabled):
    # A worker's event waits in sample() (the GIL released) at the line
    # event of "the line" while the main thread disables the tracer.  The
    # resumed event pushed a frame into the closed session: nothing pops it
    # (the rest of that call is not traced), and after enable() every later
    # interval of that thread was folded into it too: three executions of a
    # 100-byte line read (4, 600).  When the tracer was enabled again before
    # the event resumed, the event still belongs to the closed session.
    src = BlockingSource()
    t = _tracer.Tracer(src, 0, ["bytes.allocated"])
    t.add_code(stale_line.__code__)
    again, first_done = threading.Event(), threading.Event()
    errors = []

    def worker():
        try:
            _tracer.install_thread_hook()
            stale_line(src, True)
            first_done.set()
            assert again.wait(30)
            _tracer.install_thread_hook()
            for _ in range(3):
                stale_line(src, False)
        except BaseException as exc:   # reported by the main thread
            errors.append(exc)

    t.enable()
    try:
        th = threading.Thread(target=worker)
        th.start()
        assert src.blocked.wait(30)
        t.disable()
        if reenabled:
            t.enable()
        src.release.set()
        assert first_done.wait(30)
        if not reenabled:
            t.enable()
        again.set()
        th.join(30)
        assert not th.is_alive()
    finally:
        t.disable()
    assert not errors
    assert tracer_line(t, stale_line, "# the line") == (3, 0, (300,))


# ---- item 9: a reader slot while its register is being opened -------------------

class SlowOpenSource:
    """A push source whose first open_reader() blocks (releasing the GIL)
    until told; it keeps the set of open registers."""
    name = "slowopen"
    fields = ("bytes.current",)
    kinds = ("level",)

    def __init__(self):
        self.open = set()
        self.opened = 0
        self.block_thread = None
        self.blocked = threading.Event()
        self.release = threading.Event()
        self.first_read = threading.Event()

    def prepare(self, device):
        pass

    def sample(self, device):
        return (0,)

    def reset_peaks(self, device):
        pass

    def open_reader(self, device):
        if self.block_thread == threading.get_ident():
            self.block_thread = None
            self.blocked.set()
            assert self.release.wait(30)
        reader = next(i for i in range(64) if i not in self.open)
        self.open.add(reader)
        self.opened += 1
        return reader

    def close_reader(self, device, reader):
        self.open.remove(reader)

    def read(self, device, reader):
        assert reader in self.open
        if threading.current_thread().name == "opener":
            self.first_read.set()
        return (0,)


def opener_work():
    return 0  # opener


def main_work(src):
    src.release.set()  # let the opener go on
    assert src.first_read.wait(30)  # it has its register now
    return 0  # done


def start_blocked_opener(src):
    """A thread that enters opener_work and blocks in src.open_reader() until
    src.release is set; returned once it is blocked there."""
    def opener():
        src.block_thread = threading.get_ident()
        _tracer.install_thread_hook()
        opener_work()

    th = threading.Thread(target=opener, name="opener")
    th.start()
    assert src.blocked.wait(30)
    return th


def test_reader_slot_is_not_taken_while_its_register_opens():
    # While one thread's open_reader() ran, its reader slot still read
    # "closed": another thread took it and opened a register of its own.
    # The first thread then wrote its register over the second's, which was
    # never closed, not even by disable() or dealloc.
    src = SlowOpenSource()
    t = _tracer.Tracer(src, 0, ["bytes.current"])
    t.add_code(opener_work.__code__)
    t.add_code(main_work.__code__)

    t.enable()
    try:
        th = start_blocked_opener(src)
        main_work(src)
        th.join(30)
        assert not th.is_alive()
    finally:
        t.disable()
    del t
    assert src.opened >= 2
    assert src.open == set()


def test_register_opened_while_disabled_is_closed():
    # disable() closes every open register; one still being opened was left
    # to its thread, which stored it in the stopped sampler: it stayed open
    # (a register every allocation of the source raises) until the tracer
    # was enabled again or died.
    src = SlowOpenSource()
    t = _tracer.Tracer(src, 0, ["bytes.current"])
    t.add_code(opener_work.__code__)

    t.enable()
    try:
        th = start_blocked_opener(src)
        t.disable()
        src.release.set()
        th.join(30)
        assert not th.is_alive()
        assert src.opened == 1
        assert src.open == set()
    finally:
        t.disable()


# ---- item 10: a push source with no free register is polled -------------------

class FullPushSource:
    """A push source whose registers are all taken: open_reader() returns
    -1, so the caller polls sample() (and resets peaks) as source.h says."""
    name = "full"
    fields = ("bytes.allocated", "bytes.current", "bytes.peak")
    kinds = ("counter", "level", "peak")

    def __init__(self):
        self.allocated = self.current = self.peak = 0
        self.reads = 0

    def alloc(self, n):
        self.current += n
        if n > 0:
            self.allocated += n
        self.peak = max(self.peak, self.current)

    def prepare(self, device):
        pass

    def sample(self, device):
        return (self.allocated, self.current, self.peak)

    def reset_peaks(self, device):
        self.peak = self.current

    def open_reader(self, device):
        return -1

    def close_reader(self, device, reader):
        raise AssertionError("no register was opened")

    def read(self, device, reader):
        self.reads += 1
        raise AssertionError("no register was opened")


def polled(src):
    src.alloc(1000)  # grab
    src.alloc(-1000)  # drop
    return 0  # done


def test_push_source_without_a_free_register_is_polled():
    # push_take failed when open_reader() returned -1: every reading of
    # that thread was a failure (sample_errors), and its lines had no figures.
    src = FullPushSource()
    t = _tracer.Tracer(src, 0, ["bytes.allocated", "bytes.current", "bytes.peak"],
                       "bytes.current")
    t.add_code(polled.__code__)
    t.enable()
    try:
        polled(src)
        polled(src)
    finally:
        t.disable()
    assert t.sample_errors == 0
    assert src.reads == 0
    assert tracer_line(t, polled, "# grab") == (2, 2000, (2000, 1000, 1000))
    assert tracer_line(t, polled, "# drop") == (2, -2000, (0, 0, 1000))


# ---- item 11: a level column is the level at the line's end ---------------------

def callee(n):
    _testsource.manual_alloc(n)  # callee alloc
    _testsource.manual_alloc(-n)  # callee free
    return n  # callee done


def caller():
    callee(1000)  # call
    _testsource.manual_alloc(300)  # after
    _testsource.manual_alloc(-300)  # undo
    return 0  # done


class LevelSource:
    """A Python source with one level field driven by manual_alloc's twin."""
    name = "level"
    fields = ("n.current",)
    kinds = ("level",)

    def __init__(self):
        self.level = 0

    def prepare(self, device):
        pass

    def sample(self, device):
        return (self.level,)

    def reset_peaks(self, device):
        pass


def py_callee(src, n):
    src.level += n  # callee alloc
    src.level -= n  # callee free
    return n  # callee done


def py_caller(src):
    py_callee(src, 1000)  # call
    src.level += 300  # after
    src.level -= 300  # undo
    return 0  # done


def test_caller_line_level_is_the_level_at_its_end_manual_source():
    # A caller's line folded the highest level seen during its callees into
    # its `.current` column (1000), not the level at the line's end (0), as
    # _tracer.pyi and the record schema say.
    _testsource.manual_reset()
    t = _tracer.Tracer(_testsource.manual_source, 0, ["bytes.current", "bytes.peak"],
                       "bytes.current")
    t.add_code(caller.__code__)
    t.add_code(callee.__code__)
    t.enable()
    try:
        caller()
    finally:
        t.disable()
    assert tracer_line(t, caller, "# call") == (1, 0, (0, 1000))
    assert tracer_line(t, caller, "# after") == (1, 300, (300, 300))
    assert tracer_line(t, callee, "# callee alloc") == (1, 1000, (1000, 1000))
    assert tracer_line(t, callee, "# callee free") == (1, -1000, (0, 1000))


def test_caller_line_level_is_the_level_at_its_end_python_source():
    src = LevelSource()
    t = _tracer.Tracer(src, 0, ["n.current"], "n.current")
    t.add_code(py_caller.__code__)
    t.add_code(py_callee.__code__)
    t.enable()
    try:
        py_caller(src)
        src.level = 50          # a second execution ends higher: max over runs
        py_caller(src)
    finally:
        t.disable()
    assert tracer_line(t, py_caller, "# call") == (2, 0, (50,))
    assert tracer_line(t, py_caller, "# after") == (2, 600, (350,))
    assert tracer_line(t, py_callee, "# callee alloc") == (2, 2000, (1050,))


# ---- item 15: extreme readings and reader ids --------------------------------

class ExtremeSource:
    """Every field reads `value`, which the profiled code sets."""
    name = "extreme"
    fields = ("n.total", "n.current", "n.peak")
    kinds = ("counter", "level", "peak")

    def __init__(self):
        self.value = INT64_MAX

    def prepare(self, device):
        pass

    def sample(self, device):
        return (self.value,) * 3

    def reset_peaks(self, device):
        pass


def extreme(src):
    src.value = INT64_MIN  # low
    src.value = INT64_MAX  # high
    return 0  # done


def extreme_outer(src):
    extreme(src), extreme(src)  # both
    return 0  # outer done


def test_extreme_readings_saturate():
    # Counter deltas (reading - previous reading), their sums over a line's
    # intervals and over executions, and net growth were plain int64
    # arithmetic: INT64_MIN then INT64_MAX overflowed (undefined behaviour;
    # in practice it wrapped to -1).  They now saturate.
    src = ExtremeSource()
    t = _tracer.Tracer(src, 0, ["n.total", "n.current", "n.peak"], "n.current")
    t.add_code(extreme.__code__)
    t.add_code(extreme_outer.__code__)
    t.enable()
    try:
        extreme(src)
        extreme(src)
        extreme_outer(src)
    finally:
        t.disable()
    assert t.sample_errors == 0
    # each run: MAX -> MIN on "low", MIN -> MAX on "high"
    # (a line's peak never reads below 0: its pending figure starts there)
    assert tracer_line(t, extreme, "# low") == (4, INT64_MIN, (INT64_MIN, INT64_MIN, 0))
    assert tracer_line(t, extreme, "# high") == (4, INT64_MAX, (INT64_MAX, INT64_MAX, INT64_MAX))
    count, growth, (total, level, peak) = tracer_line(t, extreme_outer, "# both")
    assert (count, growth, level, peak) == (1, 0, INT64_MAX, INT64_MAX)
    assert INT64_MIN <= total <= INT64_MAX


class WideReaderSource(FullPushSource):
    """A push source whose register ids do not fit in a C int."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def open_reader(self, device):
        return 2 ** 32 + 3

    def close_reader(self, device, reader):
        self.seen.append(reader)

    def read(self, device, reader):
        self.seen.append(reader)
        return (self.allocated, self.current, self.peak)


def test_reader_id_is_not_truncated():
    # open_reader()'s result was cast to int: 2**32 + 3 became register 3,
    # which was then read and closed.  A reader id that is not an int is a
    # failed open (reported with sys.unraisablehook), so the thread polls.
    src = WideReaderSource()
    t = _tracer.Tracer(src, 0, ["bytes.allocated"])
    t.add_code(polled.__code__)
    unraisable = []
    old_hook = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    t.enable()
    try:
        polled(src)
    finally:
        t.disable()
        sys.unraisablehook = old_hook
    assert src.seen == []
    assert unraisable and unraisable[0].exc_type is OverflowError
    assert tracer_line(t, polled, "# grab") == (1, 0, (1000,))
