"""The C tracer's mechanics, fed by the deterministic C "manual" source.

Runs on 3.11, 3.12 and 3.13, under both mechanisms on 3.12+ (no torch)."""
import asyncio
import re
import threading

import pytest
from helpers import EarlyThread, disabled_after, tracer_figures

from pytorch_memlab import _testsource, _tracer

alloc = _testsource.manual_alloc
COLUMNS = ["bytes.peak", "bytes.allocated", "bytes.freed", "bytes.current"]
MONITORING = _tracer.MECHANISM == "monitoring"


def manual_tracer(*funcs, columns=COLUMNS):
    _testsource.manual_reset()
    t = _tracer.Tracer(_testsource.manual_source, 0, columns, "bytes.current")
    for f in funcs:
        t.add_code(f.__code__)
    return t


@pytest.fixture
def make_tracer():
    yield from disabled_after(manual_tracer)


# --- basics -----------------------------------------------------------------

def simple():
    alloc(100)  # grab
    alloc(-40)  # drop
    return None  # done


def test_per_line_figures(make_tracer):
    t = make_tracer(simple)
    t.enable()
    simple()
    simple()
    t.disable()
    count, growth, v = tracer_figures(t, simple, "# grab")
    assert count == 2
    assert growth == 200                      # +100 per run
    assert v["bytes.allocated"] == 200        # summed over runs
    assert v["bytes.peak"] == 160             # second run starts at 60
    count, growth, v = tracer_figures(t, simple, "# drop")
    assert (count, growth, v["bytes.freed"]) == (2, -80, 80)
    assert v["bytes.peak"] == 160             # peak during the line = level at start
    assert v["bytes.current"] == 120          # level at end, max over runs


def test_unregistered_code_is_not_recorded(make_tracer):
    t = make_tracer(simple)
    t.enable()

    def other():
        alloc(5)
    other()
    t.disable()
    assert [code for code, _ in t.stats()] == [simple.__code__]
    assert dict(t.stats())[simple.__code__] == {}


def test_unknown_column_lists_valid_ones():
    with pytest.raises(ValueError, match=r"unknown column 'nope'.*bytes\.peak"):
        _tracer.Tracer(_testsource.manual_source, 0, ["nope"])


def test_bad_arguments():
    with pytest.raises(TypeError, match="sequence of str"):
        _tracer.Tracer(_testsource.manual_source, 0, "bytes.peak")
    t = _tracer.Tracer(_testsource.manual_source, 0, ["bytes.peak"])
    with pytest.raises(TypeError, match="__code__"):
        t.add_code(simple)
    with pytest.raises(TypeError, match="memory source"):
        _tracer.Tracer(object(), 0, ["x"])
    with pytest.raises(RuntimeError, match="only device 0"):
        _tracer.Tracer(_testsource.manual_source, 3, ["bytes.peak"]).enable()


def test_source_info():
    name, fields = _tracer.source_info(_testsource.manual_source)
    assert name == "manual"
    assert fields == ("bytes.current", "bytes.peak", "bytes.allocated", "bytes.freed")


def test_field_table_is_what_the_source_declares():
    assert _tracer.field_table(_testsource.manual_source) == (
        ("bytes.current", "level", "bytes"), ("bytes.peak", "peak", "bytes"),
        ("bytes.allocated", "counter", "bytes"), ("bytes.freed", "counter", "bytes"))


class Ticking:
    """One field, "x", read 10 higher at every sample; its kind as given."""
    name = "ticking"
    fields = ("x",)

    def __init__(self, kinds):
        self.kinds = kinds
        self.n = 0

    def prepare(self, device):
        pass

    def reset_peaks(self, device):
        pass

    def sample(self, device):
        self.n += 10
        return (self.n,)


def three_lines():
    a = 1
    b = 2
    return a + b


@pytest.mark.parametrize("kind, figures", [
    ("counter", [30, 30, 30]),   # 10 per execution of each line, summed over 3 calls
    ("level", [140, 150, 160]),  # the reading at the end of the line, its last call
])
def test_the_declared_kind_folds_a_field_whatever_its_name(kind, figures):
    # "x" says nothing by its name: only the declared kind decides.
    tracer = _tracer.Tracer(Ticking((kind,)), 0, ["x"])
    tracer.add_code(three_lines.__code__)
    tracer.enable()
    for _ in range(3):
        three_lines()
    tracer.disable()
    lines = sorted(dict(tracer.stats())[three_lines.__code__].items())
    assert [values[0] for _, (_, _, values) in lines] == figures
    assert _tracer.field_table(Ticking((kind,))) == (("x", kind, "count"),)


@pytest.mark.parametrize("kinds, error, message", [
    (None, TypeError, "needs `kinds`: 'level', 'peak' or 'counter' for each field"),
    ((), ValueError, "0 kinds for 1 fields"),
    (("lvl",), ValueError, "kinds[0] is 'lvl'; expected 'level', 'peak' or 'counter'"),
    ((1,), ValueError, "kinds[0] is 1; expected"),
])
def test_a_python_source_without_valid_kinds_is_refused(kinds, error, message):
    source = Ticking(kinds)
    if kinds is None:
        del source.kinds
    with pytest.raises(error, match=re.escape(message)):
        _tracer.Tracer(source, 0, ["x"])


# --- nesting, recursion -----------------------------------------------------

def inner():
    alloc(1000)  # inner grab
    alloc(-1000)  # inner drop


def outer():
    alloc(10)  # outer grab
    inner()  # call inner
    alloc(-10)  # outer drop


def test_nested_call_charged_to_caller_line(make_tracer):
    t = make_tracer(outer, inner)
    t.enable()
    outer()
    t.disable()
    count, growth, v = tracer_figures(t, outer, "# call inner")
    assert count == 1 and growth == 0
    assert v["bytes.peak"] == 1010
    assert v["bytes.allocated"] == 1000 and v["bytes.freed"] == 1000
    assert tracer_figures(t, inner, "# inner grab")[2]["bytes.peak"] == 1010


def test_nested_unregistered_callee_still_charged(make_tracer):
    t = make_tracer(outer)
    t.enable()
    outer()
    t.disable()
    assert tracer_figures(t, outer, "# call inner")[2]["bytes.peak"] == 1010
    assert inner.__code__ not in dict(t.stats())


def recurse(n):
    alloc(10)  # rec grab
    if n > 0:
        recurse(n - 1)  # rec call
    alloc(-10)  # rec drop


def test_recursion(make_tracer):
    t = make_tracer(recurse)
    t.enable()
    recurse(4)
    t.disable()
    assert tracer_figures(t, recurse, "# rec grab")[0] == 5
    count, growth, v = tracer_figures(t, recurse, "# rec call")
    assert count == 4
    assert v["bytes.peak"] == 50             # outermost call sees the deepest level
    assert tracer_figures(t, recurse, "# rec drop")[1] == -50


# --- generators and coroutines ---------------------------------------------

def gen(n):
    for i in range(n):
        alloc(8)  # gen grab
        yield i  # gen yield
    alloc(-8 * n)  # gen drop


def test_generator_suspend_resume(make_tracer):
    t = make_tracer(gen)
    t.enable()
    total = 0
    for x in gen(3):
        alloc(1000)  # consumer work, outside the generator
        alloc(-1000)
        total += x
    t.disable()
    assert total == 3
    assert tracer_figures(t, gen, "# gen grab")[0] == 3
    assert tracer_figures(t, gen, "# gen yield")[0] == 3
    count, growth, v = tracer_figures(t, gen, "# gen drop")
    assert count == 1 and growth == -24
    # the consumer's 1000 bytes happen while gen is suspended: never charged
    assert all(vals[0] < 1000 for _, _, vals in dict(t.stats())[gen.__code__].values())


def test_generator_closed_while_suspended(make_tracer):
    t = make_tracer(gen)
    t.enable()
    g = gen(5)
    next(g)
    g.close()
    del g
    t.disable()
    assert tracer_figures(t, gen, "# gen grab")[0] == 1
    alloc(-8)


async def coro(n):
    alloc(n)  # coro grab
    await asyncio.sleep(0)  # coro await
    alloc(-n)  # coro drop
    return n


def test_async_coroutines(make_tracer):
    t = make_tracer(coro)
    t.enable()

    async def main():
        return await asyncio.gather(coro(100), coro(200))
    assert asyncio.run(main()) == [100, 200]
    t.disable()
    assert tracer_figures(t, coro, "# coro grab")[0] == 2
    assert tracer_figures(t, coro, "# coro drop")[0] == 2
    assert tracer_figures(t, coro, "# coro drop")[2]["bytes.freed"] == 300


# --- exceptions -------------------------------------------------------------

def raises_inside():
    alloc(50)  # before raise
    try:
        raise ValueError("inside")  # the raise
    except ValueError:
        alloc(-50)  # handler
    return 1


def raises_out():
    alloc(70)  # grab then raise
    raise KeyError("out")  # raise out


def calls_raiser():
    try:
        raises_out()  # call raiser
    except KeyError:
        alloc(-70)  # caught outside
    return 2


def test_exception_caught_inside(make_tracer):
    t = make_tracer(raises_inside)
    t.enable()
    assert raises_inside() == 1
    t.disable()
    assert tracer_figures(t, raises_inside, "# handler")[0] == 1
    assert tracer_figures(t, raises_inside, "return 1")[0] == 1


def test_exception_escaping_commits_lines(make_tracer):
    t = make_tracer(raises_out, calls_raiser)
    t.enable()
    assert calls_raiser() == 2
    with pytest.raises(KeyError):
        raises_out()
    t.disable()
    assert tracer_figures(t, raises_out, "# raise out")[0] == 2
    assert tracer_figures(t, calls_raiser, "# call raiser")[2]["bytes.peak"] == 70
    assert tracer_figures(t, calls_raiser, "# caught outside")[0] == 1
    alloc(-70)


def interrupted():
    alloc(5)  # before interrupt
    raise KeyboardInterrupt  # interrupt


def test_keyboard_interrupt(make_tracer):
    t = make_tracer(interrupted)
    t.enable()
    with pytest.raises(KeyboardInterrupt):
        interrupted()
    t.disable()
    assert tracer_figures(t, interrupted, "# interrupt")[0] == 1
    alloc(-5)


# --- threads ----------------------------------------------------------------

def threaded(n):
    for _ in range(n):
        alloc(3)  # thread grab
        alloc(-3)  # thread drop


def test_thread_started_after_enable(make_tracer):
    t = make_tracer(threaded)
    t.enable()
    workers = [threading.Thread(target=threaded, args=(50,)) for _ in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    t.disable()
    assert tracer_figures(t, threaded, "# thread grab")[0] == 150


def test_thread_started_before_enable(make_tracer):
    t = make_tracer(threaded)

    def in_thread():
        _tracer.install_thread_hook()   # what profile()'s wrapper does
        threaded(20)
    early = EarlyThread(in_thread)
    t.enable()
    early.release()
    early.join()
    t.disable()
    assert tracer_figures(t, threaded, "# thread grab")[0] == 20
