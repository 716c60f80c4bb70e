"""The sampler's readings: the polling fallback of a push source with no free
register, a level column's figure (the level at the line's end), and extreme
readings and reader ids.  No torch: every source is a few Python integers, so
every figure is exact.  The suite runs under both tracer mechanisms."""
import sys

from helpers import tracer_line

from pytorch_memlab import _testsource, _tracer

INT64_MAX = 2 ** 63 - 1
INT64_MIN = -2 ** 63


# ---- a push source with no free register is polled -------------------

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


# ---- a level column is the level at the line's end ---------------------

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


# ---- extreme readings and reader ids --------------------------------

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
