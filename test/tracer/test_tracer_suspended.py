"""A generator's or coroutine's call spans its yields and awaits: one call
from its first line to its return (per-call figures), one Call whose lines
hold what they made (held at peak), and what other code makes while it is
suspended is "other" for it.  The "deferred" test source pushes each block as
the CUDA source does, so the breakdowns are exact.  No torch; both mechanisms
on 3.12+."""
import asyncio
import gc
import sys
import types

import pytest
from helpers import MiB, line_of

from test_tracer_deferred import fresh_readings  # noqa: F401 (a fixture)

from pytorch_memlab import _testsource, _tracer

block = _testsource.deferred_block




@pytest.fixture
def tracer():
    made = []

    def make(*funcs):
        t = _tracer.Tracer(_testsource.deferred_source, 0, ["bytes.peak"],
                           growth_field="bytes.current")
        for f in funcs:
            t.add_code(f.__code__)
        made.append(t)
        return t

    yield make
    for t in made:
        t.disable()


def calls(t, func):
    return next(c for code, c in t.call_stats() if code is func.__code__)[0]


def peak_of(t, func):
    """(bytes, lineno, call, before, other, {lineno: held}), its parts checked."""
    peak = next(p for code, p in t.peaks() if code is func.__code__)
    bytes_, lineno, call, before, other, held = peak
    assert sum(held.values()) + before + other == bytes_
    return peak


async def grab_await_grab(base):
    block(base, 4 * MiB)             # before the await
    await asyncio.sleep(0)           # suspends
    block(base + 16, 16 * MiB)       # after the await
    return base


def test_a_coroutine_is_one_call_across_its_await(tracer):
    t = tracer(grab_await_grab)
    t.enable()
    asyncio.run(grab_await_grab(0x1000))
    t.disable()
    assert calls(t, grab_await_grab) == 1
    before, after = line_of(grab_await_grab, "# before"), line_of(grab_await_grab, "# after")
    assert peak_of(t, grab_await_grab) == (20 * MiB, after, 1, 0, 0,
                                           {before: 4 * MiB, after: 16 * MiB})


def test_interleaved_coroutines_do_not_hold_each_others_bytes(tracer):
    t = tracer(grab_await_grab)

    async def both():
        return await asyncio.gather(grab_await_grab(0x1000), grab_await_grab(0x2000))

    t.enable()
    asyncio.run(both())
    t.disable()
    before, after = line_of(grab_await_grab, "# before"), line_of(grab_await_grab, "# after")
    # The second peaks last: the first's 4 MiB was alive when it began, the
    # first's 16 MiB was made while it was suspended.
    assert peak_of(t, grab_await_grab) == (40 * MiB, after, 1, 4 * MiB, 16 * MiB,
                                           {before: 4 * MiB, after: 16 * MiB})
    # Calls that overlap are one call of the per-call figures (as on threads).
    assert calls(t, grab_await_grab) == 1


def squares(n):
    for i in range(n):
        block(0x100 + i * 16, MiB)   # each item
        yield i


def test_a_generator_is_one_call_and_its_consumer_is_other(tracer):
    t = tracer(squares)
    t.enable()
    for i in squares(3):
        block(0x900 + i * 16, 8 * MiB)   # the consumer, while it is suspended
    t.disable()
    assert calls(t, squares) == 1
    item, resumed = line_of(squares, "# each item"), line_of(squares, "yield i")
    # Its peak is when it resumes the last time, on the line it yielded at:
    # its own 3 MiB on its line, the consumer's 24 MiB made during its call
    # by code that is not its own.
    assert peak_of(t, squares) == (27 * MiB, resumed, 1, 0, 24 * MiB, {item: 3 * MiB})


def plain():
    block(0x5000, 1)                 # plain
    block(0x5000, -1)


def leave_suspended(how):
    g = squares(5)
    next(g)
    if how == "close":
        g.close()
    elif how == "throw":
        with pytest.raises(ValueError):
            g.throw(ValueError("into the generator"))
    elif how == "drop":
        pass
    del g


@pytest.mark.parametrize("how", ["close", "throw", "drop"])
def test_a_generator_closed_while_suspended_ends_its_call(tracer, how):
    # On 3.13+ closing it emits no event: its call ends at the next event.
    t = tracer(squares, plain)
    t.enable()
    leave_suspended(how)
    for _ in range(3):
        plain()
    t.disable()
    assert (calls(t, squares), calls(t, plain)) == (1, 3)


def test_for_break_ends_the_generators_call(tracer):
    t = tracer(squares, plain)
    t.enable()
    for _ in range(2):
        for _ in squares(5):
            break
        plain()
    t.disable()
    assert (calls(t, squares), calls(t, plain)) == (2, 2)


def test_a_suspended_generator_keeps_the_call_open(tracer):
    t = tracer(squares, plain)
    t.enable()
    g = squares(2)
    next(g)
    for _ in range(3):
        plain()                      # inside the generator's call
    assert calls(t, plain) == 0
    assert list(g) == [1]
    t.disable()
    assert (calls(t, squares), calls(t, plain)) == (1, 1)


def test_disable_ends_a_suspended_call_and_a_resume_after_starts_one(tracer):
    t = tracer(squares)
    t.enable()
    g = squares(3)
    next(g)
    t.disable()
    assert calls(t, squares) == 1
    t.enable()
    assert next(g) == 1
    t.disable()
    assert calls(t, squares) == 2
    del g


def starts(g):
    next(g)                          # starts it
    return g


def resumes(g):
    next(g)                          # resumes it
    block(0x7000, 8 * MiB)           # the resumer's own
    return g


def test_what_a_resumer_makes_after_the_yield_is_its_own(tracer):
    t = tracer(squares, starts, resumes)
    t.enable()
    g = starts(squares(3))
    resumes(g)
    t.disable()
    del g
    own = line_of(resumes, "# the resumer's own")
    # The generator's second item counts where its call began (under
    # starts()): for resumes() it is another's.
    assert peak_of(t, resumes) == (10 * MiB, own, 1, MiB, MiB, {own: 8 * MiB})


def test_a_recursive_generator_call_is_not_split(tracer):
    def nested(depth):
        block(0x3000 + depth * 16, MiB)   # nested item
        if depth:
            yield from nested(depth - 1)  # recurses
        yield depth

    t = tracer(nested)
    t.enable()
    assert list(nested(2)) == [0, 1, 2]
    t.disable()
    assert calls(t, nested) == 1
    item, recurses = line_of(nested, "# nested item"), line_of(nested, "# recurses")
    # A recursive frame makes no Call of its own: its blocks count on the
    # outermost frame's calling line (attrib.h).
    assert peak_of(t, nested)[5] == {item: MiB, recurses: 2 * MiB}


def pair():
    yield 1
    yield 2


# pair's code again, not profiled: a generator of it, kept, takes the address
# a closed pair generator freed (a record keyed by that address would go).
twin = types.FunctionType(pair.__code__.replace(), globals())


def break_early(n, kept):
    """Blocks grown over n generators closed early, inside this one call."""
    before = sys.getallocatedblocks()
    for _ in range(n):
        for _ in pair():
            break                    # closed with no event on 3.13+
        kept.append(twin())
    return sys.getallocatedblocks() - before


def test_generators_closed_inside_a_long_call_are_not_kept(tracer):
    t = tracer(pair, break_early)
    gc.collect()
    gc.disable()                # a collection would free others' blocks meanwhile
    try:
        untraced = break_early(2000, [])      # a block per generator kept
        t.enable()
        grown = break_early(2000, [])
        t.disable()
    finally:
        gc.enable()
    # one more per generator would be the weak reference of a record left behind
    assert grown - untraced < 2000 // 4
