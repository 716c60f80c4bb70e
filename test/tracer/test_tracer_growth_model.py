"""Property test: a line's growth per call against a reference model.

While blocks are followed through all the calls, a line's growth in one
call is exact: the bytes that line made during the call (its profiled
callees' included) that are still alive when the figures are read (a cache
of the last few results outlives a call or two, then is freed: no growth).
``growth_per_call`` is the least of that over the calls after the first.  Hypothesis writes programs of a few calls of one function whose
lines keep blocks, make temporaries, free blocks of earlier calls or call a
profiled helper that keeps blocks, with frees between the calls too; the
"deferred" test source pushes each block as the CUDA source does.  The
reference computes the figure from the log of which line made and which
moment freed every block, and the levels when the calls began (the first
call's; the later call's that first reached the later calls' highest level)
from the blocks alive then.  Needs no torch."""
import os

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from test_tracer_deferred import fresh_readings  # noqa: F401 (a fixture)

from pytorch_memlab import _testsource, _tracer

N_LINES = 5
EXAMPLES = int(os.environ.get("MEMLAB_PROPERTY_EXAMPLES", "200"))

size = st.integers(1, 64).map(lambda n: n * 16)
action = st.one_of(st.tuples(st.just("keep"), size), st.tuples(st.just("temp"), size),
                   st.tuples(st.just("helper"), size), st.tuples(st.just("free"), st.integers(0, 99)))
call_plan = st.lists(st.lists(action, max_size=2), min_size=N_LINES, max_size=N_LINES)
program = st.tuples(st.lists(call_plan, min_size=3, max_size=5),
                    st.lists(st.lists(st.integers(0, 99), max_size=2), min_size=5, max_size=5))


class Run:
    """Executes a plan and logs every block: who made it, when it died."""

    def __init__(self, plans):
        self.plans = plans
        self.call = 0                 # the call running, from 1; between calls: the last
        self.line = None              # the step's line running (its index)
        self.live = []                # ids of live blocks, in the order made
        self.made = {}                # id -> (call, line index, size)
        self.freed_before = {}        # id -> the call whose start it did not live to see
        self.next_id = 1
        self.high = {}                # call -> the highest level reached in it

    def level(self):
        return sum(self.made[bid][2] for bid in self.live)

    def make(self, n, on_line):
        bid = self.next_id
        self.next_id += 1
        _testsource.deferred_block(0x100000 + bid * 0x1000, n)
        if on_line:
            self.made[bid] = (self.call, self.line, n)
        self.high[self.call] = max(self.high.get(self.call, 0), self.level() + n)
        return bid

    def free(self, bid, in_call):
        self.live.remove(bid)
        size = self.made[bid][2] if bid in self.made else 16
        _testsource.deferred_block(0x100000 + bid * 0x1000, -size)
        # freed during call c: dead at the start of c + 1; between calls
        # after call c: dead at the start of c + 1 as well
        self.freed_before[bid] = self.call + 1

    def pick(self, k):
        return self.live[k % len(self.live)] if self.live else None

    def do(self, i):
        self.line = i
        for kind, arg in self.plans[self.call - 1][i]:
            if kind == "keep":
                self.live.append(self.make(arg, True))
            elif kind == "temp":
                bid = self.make(arg, True)
                self.live.append(bid)
                self.free(bid, True)
            elif kind == "helper":
                helper(self, arg)
            else:
                bid = self.pick(arg)
                if bid is not None:
                    self.free(bid, True)


def helper(run, n):
    run.live.append(run.make(n, True))       # counts on the step's calling line
    return n


def step(run):
    run.do(0)
    run.do(1)
    run.do(2)
    run.do(3)
    run.do(4)
    return 0


def expected_least(run, n_calls):
    """{line index: least growth over calls 2..n} from the log."""
    least = {}
    for line in range(N_LINES):
        per_call = []
        for c in range(2, n_calls + 1):
            alive_at = n_calls + 1               # when read
            per_call.append(sum(n for bid, (call, ln, n) in run.made.items()
                                if call == c and ln == line
                                and run.freed_before.get(bid, n_calls + 2) > alive_at))
        least[line] = min(per_call)
    return least


@settings(deadline=None, max_examples=EXAMPLES,
          phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(program=program)
def test_growth_per_call_is_what_each_line_made_and_still_holds(program):
    plans, between = program
    _testsource.manual_reset()
    run = Run(plans)
    t = _tracer.Tracer(_testsource.deferred_source, 0, ["bytes.peak"],
                       growth_field="bytes.current")
    t.add_code(step.__code__)
    t.add_code(helper.__code__)
    t.enable()
    starts = {}
    try:
        for c in range(1, len(plans) + 1):
            run.call = c
            starts[c] = run.high[c] = run.level()
            step(run)
            for k in between[c - 1]:
                bid = run.pick(k)
                if bid is not None:
                    run.free(bid, False)
    finally:
        t.disable()
    (calls,) = [figures for code, figures in t.call_stats() if code is step.__code__]
    n_calls, _, lines, (first_start, later_starts) = calls
    assert n_calls == len(plans)
    # what was alive when the first call began, and when the later call began
    # that first reached the later calls' highest level
    top = max(run.high[c] for c in range(2, n_calls + 1))
    assert first_start == starts[1]
    assert later_starts == (starts[min(c for c in range(2, n_calls + 1)
                                       if run.high[c] == top)],)
    first = step.__code__.co_firstlineno
    want = expected_least(run, n_calls)
    got = {i: lines[first + 1 + i][2] for i in range(N_LINES) if first + 1 + i in lines}
    assert got == {i: want[i] for i in got}
    # every line that made a block after the first call ran, so is in `got`
    assert all(want[i] == 0 or i in got for i in range(N_LINES))
