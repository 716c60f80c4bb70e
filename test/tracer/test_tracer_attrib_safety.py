"""Memory safety of the held-at-peak attribution when threads push blocks
without the GIL while the tracer is moved between devices, or when an
enable() fails half-way.  Run under AddressSanitizer by ``make asan``: a Call
freed while a thread can still reach it is a heap-use-after-free there."""
import threading
import time

import pytest
from helpers import MiB

from test_tracer_deferred import fresh_readings, tracer_for  # noqa: F401 (a fixture)

from pytorch_memlab import _testsource, _tracer

block = _testsource.deferred_block


def churning_inner(stop):
    _testsource.deferred_churn(0xC000, MiB, 5000)  # without the GIL
    return stop.is_set()


def churning_outer(stop):
    return churning_inner(stop)


def test_moving_the_tracer_while_a_thread_pushes_inside_nested_calls():
    """set_device ends every thread's Calls and starts over on the new
    device; the workers, inside two profiled frames, push blocks without
    the GIL all the while and must never reach a Call that has ended."""
    t = tracer_for(churning_outer, churning_inner)
    stop = threading.Event()

    def work():
        while not churning_outer(stop):
            pass

    t.enable()
    # Several workers: while one thread's Calls end, the others' still do,
    # each a moment for the first to push through a Call it may not reach.
    workers = [threading.Thread(target=work) for _ in range(4)]
    for w in workers:
        w.start()
    try:
        for _ in range(100):
            for device in (1, 0):
                time.sleep(0.002)    # the workers take the GIL, then push without it
                t.set_device(device)
    finally:
        stop.set()
        for w in workers:
            w.join()
        t.disable()
    (peak,) = [p for code, p in t.peaks() if code is churning_outer.__code__]
    bytes_, _, _, before, other, held = peak
    assert sum(held.values()) + before + other == bytes_
    assert t.followed_blocks[0] == 0        # every churned block was freed


@pytest.mark.skipif(_tracer.MECHANISM != "settrace",
                    reason="only the settrace hook runs Python (threading.settrace) while enabling")
def test_a_failed_enable_ends_the_frames_other_threads_opened(monkeypatch):
    """enable() puts the tracer on the enabled list, then installs the hook;
    on settrace that calls threading.settrace, and a thread started meanwhile
    opens profiled frames with Calls.  When the install fails, those frames
    end with the Calls, so the next session never writes through them."""
    inside, go = threading.Event(), threading.Event()

    def waits():
        inside.set()
        go.wait()
        x = 1                                          # a line after the failure
        block(0x900, MiB); block(0x900, -MiB)          # and a block
        return x

    t = tracer_for(waits)
    real_settrace = threading.settrace
    threads = []

    def settrace_then_fail(func):
        real_settrace(func)
        threads.append(threading.Thread(target=waits))
        threads[0].start()
        inside.wait()
        raise KeyboardInterrupt

    monkeypatch.setattr(threading, "settrace", settrace_then_fail)
    with pytest.raises(KeyboardInterrupt):
        t.enable()
    monkeypatch.undo()
    real_settrace(None)
    assert not t.enabled
    t.enable()                   # the next session
    go.set()
    threads[0].join()
    t.disable()
    assert t.followed_blocks[0] == 0
