"""Randomized stress of the C core: several threads run profiled code (plain,
recursive, raising, generators) while others enable, disable, clear, read
and re-register tracers, and Python sources run code (re-enter the tracers,
release the GIL) from inside events.  Each run is a fresh interpreter with a
time bound, so a crash, a hang or an AddressSanitizer report (make asan runs
this file too) fails the test; at the end no hook, thread hook or tool id may
be left behind and every figure must be well formed."""
import os
import subprocess
import sys
import textwrap

import pytest

import pytorch_memlab

# The package this run imports (the ASan tree under make asan).
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(pytorch_memlab.__file__)))
SECONDS = float(os.environ.get("MEMLAB_STRESS_SECONDS", "3"))

SCRIPT = textwrap.dedent('''
    import random, sys, threading, time
    from pytorch_memlab import _testsource, _tracer

    SEED, SECONDS = int(sys.argv[1]), float(sys.argv[2])
    rng = random.Random(SEED)
    tracers = []          # filled below; sources may act on them
    calm = threading.Event()  # set at shutdown: sources stop switching tracers

    # What enable()/disable() may answer when another thread (or the source
    # itself) is switching the same tracer: documented refusals, not defects.
    REFUSED = ("while the tracer is being", "cannot read device")

    def control(call):
        try:
            call()
        except RuntimeError as exc:
            if not any(text in str(exc) for text in REFUSED):
                raise

    def chaos(rng):
        """What a Python source may do inside an event."""
        if calm.is_set():
            return
        roll = rng.random()
        if roll < 0.02 and tracers:
            t = rng.choice(tracers)
            control(t.disable)
            control(t.enable)
        elif roll < 0.04 and len(tracers) > 1:
            x, y = rng.sample(tracers, 2)
            for call in (x.disable, y.disable, y.enable, x.enable):
                control(call)
        elif roll < 0.10:
            time.sleep(0)                     # let another thread run
        elif roll < 0.12 and tracers:
            rng.choice(tracers).stats()

    class Polled:
        name = "polled"
        fields = ("n.current", "n.peak", "n.allocated")
        kinds = ("level", "peak", "counter")
        def __init__(self, seed):
            self.rng = random.Random(seed)
            self.n = 0
        def prepare(self, device): pass
        def reset_peaks(self, device): pass
        def sample(self, device):
            self.n += 1
            chaos(self.rng)
            return (self.n % 97, self.n % 89, self.n)

    class Pushed(Polled):
        name = "pushed"
        def __init__(self, seed):
            super().__init__(seed)
            self.next_reader = 0
        def open_reader(self, device):
            chaos(self.rng)
            self.next_reader += 1
            return -1 if self.next_reader % 7 == 0 else self.next_reader % 5
        def close_reader(self, device, reader):
            chaos(self.rng)
        def read(self, device, reader):
            return self.sample(device)

    def leaf(n):
        x = [0] * n
        return len(x)

    def recurse(n):
        if n <= 0:
            return leaf(3)
        return recurse(n - 1) + 1

    def raises(n):
        y = leaf(n)
        if y % 2:
            raise ValueError(y)
        return y

    def gen(n):
        for i in range(n):
            yield leaf(i)

    PROFILED = (leaf, recurse, raises, gen)

    def make_tracer(kind):
        if kind == 0:
            t = _tracer.Tracer(_testsource.manual_source, 0, ["bytes.peak", "bytes.allocated"],
                               "bytes.current")
        elif kind == 1:
            t = _tracer.Tracer(Polled(rng.random()), 0, ["n.peak", "n.allocated", "n.current"],
                               "n.current")
        else:
            t = _tracer.Tracer(Pushed(rng.random()), 0, ["n.peak", "n.allocated"], "n.current")
        for f in rng.sample(PROFILED, rng.randint(1, len(PROFILED))):
            t.add_code(f.__code__)
        return t

    tracers.extend(make_tracer(k % 3) for k in range(4))
    stop = time.monotonic() + SECONDS
    failures = []

    def worker(seed):
        r = random.Random(seed)
        try:
            while time.monotonic() < stop:
                _tracer.install_thread_hook()
                for _ in range(20):
                    n = r.randint(0, 6)
                    try:
                        recurse(n) + leaf(n) + sum(gen(n)) + raises(n)
                    except ValueError:
                        pass
                    g = gen(5)
                    next(g, None)
                    g.close()
        except BaseException as exc:         # anything else is a defect
            failures.append(repr(exc))

    def controller(seed):
        r = random.Random(seed)
        try:
            while time.monotonic() < stop:
                t = r.choice(tracers)
                roll = r.random()
                if roll < 0.35:
                    control(t.enable)
                elif roll < 0.65:
                    control(t.disable)
                elif roll < 0.75:
                    t.clear()
                elif roll < 0.85:
                    t.stats()
                elif roll < 0.92:
                    t.add_code(r.choice(PROFILED).__code__)
                else:
                    i = r.randrange(len(tracers))
                    tracers[i] = make_tracer(r.randrange(3))   # the old one dies
                time.sleep(r.random() * 0.002)
        except BaseException as exc:
            failures.append(repr(exc))

    threads = [threading.Thread(target=worker, args=(rng.random(),)) for _ in range(3)]
    threads += [threading.Thread(target=controller, args=(rng.random(),)) for _ in range(2)]
    for th in threads:
        th.start()
    worker(rng.random())
    for th in threads:
        th.join()
    # Disabling one tracer closes its source's readers, and a source's chaos
    # may re-enable a tracer already disabled: quiet the sources first.
    calm.set()
    for t in tracers:
        control(t.disable)
    for t in tracers:
        assert not t.enabled
    for t in tracers:
        stats = t.stats()
        for lines in (stats.values() if isinstance(stats, dict) else [l for _, l in stats]):
            for line, (count, growth, values) in lines.items():
                assert isinstance(line, int) and count >= 0, (line, count)
                assert all(isinstance(v, int) for v in values), values
    assert not failures, failures
    assert sys.gettrace() is None, sys.gettrace()
    assert threading._trace_hook is None, threading._trace_hook
    if sys.version_info >= (3, 12):
        for tool in (3, 4):
            assert sys.monitoring.get_tool(tool) is None, (tool, sys.monitoring.get_tool(tool))
    del tracers[:]
    print("stress ok")
''')


@pytest.mark.parametrize("seed", range(3))
def test_random_threads_and_reentry_leave_nothing_broken(seed):
    env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT)
    # generous: a hang is a failure, slowness under ASan is not
    try:
        proc = subprocess.run([sys.executable, "-c", SCRIPT, str(seed), str(SECONDS)],
                              env=env, capture_output=True, text=True,
                              timeout=60 + 10 * SECONDS)
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode(errors="replace") if exc.stderr else ""
        pytest.fail(f"seed {seed}: still running after {exc.timeout:.0f} s (a hang)\n"
                    + err[-3000:])
    assert "AddressSanitizer" not in proc.stderr, proc.stderr[-6000:]
    assert proc.returncode == 0 and "stress ok" in proc.stdout, proc.stderr[-6000:]
