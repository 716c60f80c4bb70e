"""The tracer's push path through a source written in Python: a
reader per thread's stack of profiled frames, peaks from the reader's own
register, allocated / freed from the calling thread's own counters, and no
reset of shared state.  No torch: the "allocator" is a few integers, so every
figure is exact.  The suite runs under both tracer mechanisms.

One tracer shared by two threads is not tested here: while one thread is
inside a Python source's callback (which can switch threads), the tracer's
re-entry guard drops the other thread's events; the shim's C sources never
switch threads there."""
import threading
import time

from helpers import MiB, spin, tracer_figures, worker_against_main

from pytorch_memlab import _tracer

FIELDS = ("bytes.allocated", "bytes.current", "bytes.freed", "bytes.peak")
COLUMNS = ["bytes.peak", "bytes.allocated", "bytes.freed"]


class PushSource:
    """An allocator of plain integers that offers the reader methods."""

    name = "pushtest"
    fields = FIELDS
    kinds = ("counter", "level", "counter", "peak")

    def __init__(self):
        self.lock = threading.Lock()
        self.current = 0
        self.peak = 0                 # the "user's" peak: readers never reset it
        self.registers = {}           # reader -> peak since its last read
        self.mine = threading.local()
        self.resets = 0
        self.total_alloc = self.total_freed = 0   # what a polled reading sees

    def _own(self):
        if not hasattr(self.mine, "alloc"):
            self.mine.alloc = self.mine.freed = 0
        return self.mine

    def alloc(self, n):
        with self.lock:
            self.current += n
            self.total_alloc += n
            self.peak = max(self.peak, self.current)
            for r in self.registers:
                self.registers[r] = max(self.registers[r], self.current)
        self._own().alloc += n

    def free(self, n):
        with self.lock:
            self.current -= n
            self.total_freed += n
        self._own().freed += n

    def prepare(self, device):
        pass

    def sample(self, device):
        return [self.total_alloc, self.current, self.total_freed, self.peak]

    def reset_peaks(self, device):
        self.resets += 1
        self.peak = self.current

    def open_reader(self, device):
        with self.lock:
            reader = next(i for i in range(64) if i not in self.registers)
            self.registers[reader] = self.current
        return reader

    def close_reader(self, device, reader):
        with self.lock:
            del self.registers[reader]

    def read(self, device, reader):
        own = self._own()
        with self.lock:
            peak = max(self.registers[reader], self.current)
            self.registers[reader] = self.current
        return [own.alloc, self.current, own.freed, peak]


SRC = PushSource()


def worker_line(ready, proceed):
    ready.set()  # before
    proceed.wait(30)  # wait
    SRC.alloc(2 * MiB), time.sleep(0.02), SRC.alloc(MiB), time.sleep(0.02), SRC.free(2 * MiB)  # the line
    return 0  # done


def make(*funcs):
    tracer = _tracer.Tracer(SRC, 0, COLUMNS, "bytes.current")
    for f in funcs:
        tracer.add_code(f.__code__)
    return tracer


def run(worker_tracer, main_tracer):
    """A worker thread runs worker_line while the main thread spins."""
    def work(ready, proceed):
        worker_tracer.enable()   # per-thread on settrace; idempotent otherwise
        return worker_line(ready, proceed)

    main_tracer.enable()
    worker_tracer.enable()
    try:
        worker_against_main(work, spin)
    finally:
        main_tracer.disable()
        worker_tracer.disable()
    SRC.free(MiB)   # what the line kept


def check(worker_tracer, main_tracer):
    base = tracer_figures(worker_tracer, worker_line, "# wait")[2]["bytes.peak"]
    count, growth, line = tracer_figures(worker_tracer, worker_line, "# the line")
    assert count == 1 and growth == MiB
    assert line["bytes.peak"] - base == 3 * MiB
    assert line["bytes.allocated"] == 3 * MiB
    assert line["bytes.freed"] == 2 * MiB
    spun = dict(main_tracer.stats())[spin.__code__]
    assert len(spun) == 4
    for lineno, (count, growth, values) in spun.items():
        values = dict(zip(main_tracer.columns, values))
        assert (values["bytes.allocated"], values["bytes.freed"]) == (0, 0), lineno


def test_two_tracers_two_threads_exact():
    worker_tracer, main_tracer = make(worker_line), make(spin)
    run(worker_tracer, main_tracer)
    check(worker_tracer, main_tracer)


def test_readers_never_reset_and_are_given_back():
    before = SRC.resets
    SRC.alloc(5 * MiB)
    SRC.free(5 * MiB)
    user_peak = SRC.peak
    worker_tracer, main_tracer = make(worker_line), make(spin)
    run(worker_tracer, main_tracer)
    assert SRC.resets == before
    assert SRC.peak == user_peak
    assert SRC.registers == {}
