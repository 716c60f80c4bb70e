"""The sampler and event core: a Python source's fields read once, events
that outlive a disable(), reader slots taken while a register is being
opened (its readings: test_tracer_sampler_readings.py).  No torch: every source is a few Python
integers (or the C manual source), so every figure is exact.  The suite runs
under both tracer mechanisms."""
import threading

import pytest
from helpers import run_fresh, tracer_line

from pytorch_memlab import _tracer


# ---- a source's fields are read once, at Tracer() ----------------------

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


# ---- an event that outlives disable() -----------------------------------

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


# ---- a reader slot while its register is being opened -------------------

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
