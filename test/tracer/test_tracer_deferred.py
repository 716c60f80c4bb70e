"""The breakdown of the peak when a source learns each block's size only at
its next event or reading, as the CUDA source does: the test
source "deferred" pushes blocks exactly that way (with no size at the event,
MEMLAB_SIZED later), so CI checks the protocol the device relies on."""
import threading

import pytest

from helpers import MiB, line_of

from pytorch_memlab import _testsource, _tracer

block = _testsource.deferred_block


@pytest.fixture(autouse=True)
def fresh_readings():
    _testsource.manual_reset()
    yield
    _testsource.manual_reset()


def tracer_for(*funcs):
    t = _tracer.Tracer(_testsource.deferred_source, 0, ["bytes.peak"],
                       growth_field="bytes.current")
    for f in funcs:
        t.add_code(f.__code__)
    return t


def peak_of(tracer, func):
    (peak,) = [p for code, p in tracer.peaks() if code is func.__code__]
    bytes_, lineno, call, before, other, held = peak
    assert sum(held.values()) + before + other == bytes_
    return peak


def issue_case():
    block(0x200, 4 * MiB)                          # A: kept
    block(0x300, 16 * MiB)                         # B: a temporary
    block(0x300, -16 * MiB); block(0x400, 2 * MiB)  # C
    return 0


def test_the_issue_case_from_deferred_sizes():
    block(0x100, MiB)                              # alive before the call
    t = tracer_for(issue_case)
    t.enable()
    issue_case()
    t.disable()
    held = {line_of(issue_case, "# A"): 4 * MiB, line_of(issue_case, "# B"): 16 * MiB}
    assert peak_of(t, issue_case) == (21 * MiB, line_of(issue_case, "# B"), 1, MiB, 0, held)


def frees_an_older_block():
    block(0x500, 4 * MiB)                          # made
    block(0x100, -MiB)                             # frees the older one
    block(0x600, 2 * MiB)                          # the peak
    return 0


def test_a_block_made_before_profiling_is_sized_when_freed():
    """Its free carries no size and the tracer never saw it made: the size
    comes after, and the level falls by it before the next block counts."""
    block(0x100, MiB)
    t = tracer_for(frees_an_older_block)
    t.enable()
    frees_an_older_block()
    t.disable()
    held = {line_of(frees_an_older_block, "# made"): 4 * MiB,
            line_of(frees_an_older_block, "# the peak"): 2 * MiB}
    assert peak_of(t, frees_an_older_block) == \
        (6 * MiB, line_of(frees_an_older_block, "# the peak"), 1, 0, 0, held)


def made_and_freed_on_one_line():
    block(0x700, 8 * MiB); block(0x700, -8 * MiB)   # temporary
    block(0x800, MiB)                              # after
    return 0


def test_a_block_freed_before_its_size_came_still_makes_the_peak():
    t = tracer_for(made_and_freed_on_one_line)
    t.enable()
    made_and_freed_on_one_line()
    t.disable()
    line = line_of(made_and_freed_on_one_line, "# temporary")
    assert peak_of(t, made_and_freed_on_one_line) == (8 * MiB, line, 1, 0, 0, {line: 8 * MiB})


def test_a_second_tracer_starts_from_the_first_ones_level():
    first = tracer_for(issue_case)
    first.enable()
    block(0x100, MiB)                              # pushed, not yet sized
    second = tracer_for(issue_case)
    second.enable()
    assert _testsource.deferred_listening()
    issue_case()
    second.disable()
    assert _testsource.deferred_listening()        # the first still follows
    first.disable()
    assert not _testsource.deferred_listening()    # the last one stops the pushes
    held = {line_of(issue_case, "# A"): 4 * MiB, line_of(issue_case, "# B"): 16 * MiB}
    expected = (21 * MiB, line_of(issue_case, "# B"), 1, MiB, 0, held)
    assert peak_of(first, issue_case) == expected
    assert peak_of(second, issue_case) == expected


def test_follow_blocks_false_follows_none():
    t = _tracer.Tracer(_testsource.deferred_source, 0, ["bytes.peak"],
                       growth_field="bytes.current", follow_blocks=False)
    t.add_code(issue_case.__code__)
    t.enable()
    assert not _testsource.deferred_listening()
    issue_case()
    t.disable()
    assert t.peaks() == [(issue_case.__code__, None)]
    assert "follow_blocks=False" in t.peak_unavailable


def makes_nothing_then_frees_an_older_block():
    block(0xA00, 0)                                # moves no bytes
    block(0x100, -MiB)                             # frees the older one
    block(0xB00, 2 * MiB)                          # the peak
    return 0


def test_a_block_that_moved_no_bytes_leaves_the_next_frees_size_alone():
    """An allocator event that moved no active bytes gets no size (the CUDA
    source drops it); the free after it, of a block made before profiling,
    still lowers the level by its size."""
    block(0x100, MiB)
    f = makes_nothing_then_frees_an_older_block
    t = tracer_for(f)
    t.enable()
    f()
    t.disable()
    assert peak_of(t, f) == (2 * MiB, line_of(f, "# the peak"), 1, 0, 0,
                             {line_of(f, "# the peak"): 2 * MiB})


def waits_in_a(ready, go):
    ready.set()
    go.wait()                                      # a waits
    return 0


def waits_in_b(ready, go):
    ready.set()
    go.wait()                                      # b waits
    return 0


@pytest.mark.parametrize("profiling", [(waits_in_a,), (waits_in_a, waits_in_b)])
def test_a_block_from_a_thread_without_python(profiling):
    """Autograd's device threads allocate for a backward() called on some
    Python thread, and cannot say which: with one thread profiling, its line
    holds the block; with two, neither guesses (another thread's for both)."""
    t = tracer_for(waits_in_a, waits_in_b)
    go = threading.Event()
    readies = [threading.Event() for _ in profiling]
    threads = [threading.Thread(target=f, args=(r, go)) for f, r in zip(profiling, readies)]
    t.enable()
    for thread, ready in zip(threads, readies):
        thread.start()
        ready.wait()
    _testsource.deferred_native_block(0xD00, MiB)
    go.set()
    for thread in threads:
        thread.join()
    t.disable()
    for f in profiling:
        _, _, _, _, other, held = peak_of(t, f)
        if len(profiling) == 1:
            assert (held, other) == ({line_of(f, "# a waits"): MiB}, 0)
        else:
            assert (held, other) == ({}, MiB)
