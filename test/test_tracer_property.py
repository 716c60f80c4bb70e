"""Property test: the C tracer against a pure-Python reference tracer.

Hypothesis writes small random programs (functions and generators calling each
other, loops with break/continue, early returns, exceptions raised and caught
inside or outside the raising function, try/finally, manual_alloc(+-n)),
compiles them from a temporary file and runs each twice with the same start
state: once under ``_tracer.Tracer`` fed by the C manual source, once under
``Reference`` below, a line-for-line restatement in Python of the semantics in
src/tracer/events.c:

* every event takes one reading and folds the interval into the pending
  figures of the current line of *every* profiled frame on the stack
  (``*.peak``: max, counters: sum of deltas, levels: the last reading, i.e.
  the level at the line's end);
* a line event commits the innermost frame's line and opens the next one; a
  start pushes a frame (a resumed generator continues an already counted
  line: the one it yielded at, so what runs before its next line event is
  charged there); a leave commits and pops the frame, and any frames above it;
* over executions: counters sum, everything else max; count = line events;
  net growth sums (current at line end - at line start).

The reference listens with the same mechanism as the C tracer
(``sys.monitoring`` with its own tool id, or ``sys.settrace``), so both see
the same event stream and any difference is the C tracer's bookkeeping.
Needs no torch.
"""
import inspect
import linecache
import opcode
import os
import sys
import tempfile

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from pytorch_memlab import _testsource, _tracer

COLUMNS = ("bytes.peak", "bytes.allocated", "bytes.freed", "bytes.current")
GROWTH = "bytes.current"
MAX_CALLS = 120                        # calls one program run may make
BUDGET_NAME = "CALLS_LEFT"


# ---- the reference ----------------------------------------------------------

class ManualModel:
    """Python twin of the C manual source."""

    def __init__(self):
        self.fields = {"bytes.current": 0, "bytes.peak": 0,
                       "bytes.allocated": 0, "bytes.freed": 0}

    def manual_alloc(self, n):
        f = self.fields
        f["bytes.current"] += n
        if n > 0:
            f["bytes.allocated"] += n
        else:
            f["bytes.freed"] -= n
        f["bytes.peak"] = max(f["bytes.peak"], f["bytes.current"])

    def sample(self):
        return dict(self.fields)

    def reset_peaks(self):
        self.fields["bytes.peak"] = self.fields["bytes.current"]


def column_kind(name):
    last = name.rsplit(".", 1)[-1]
    if last in ("allocated", "freed"):
        return "counter"
    return "peak" if last == "peak" else "level"


class Frame:
    __slots__ = ("code", "line", "counted", "start_level", "pending")

    def __init__(self, code, line, level, width):
        self.code = code
        self.line = line
        self.counted = 0
        self.start_level = level
        self.pending = [0] * width


class Reference:
    """The tracer's semantics, written plainly (one thread)."""

    def __init__(self, codes, model, columns):
        self.codes = {id(c): c for c in codes}
        self.tables = {id(c): {} for c in codes}
        self.model = model
        self.columns = columns
        self.kinds = [column_kind(c) for c in columns]
        self.summed = [k == "counter" for k in self.kinds]
        self.last_wins = [k == "level" for k in self.kinds]
        self.has_peaks = "peak" in self.kinds
        self.last = {}
        self.stack = []

    def _read(self):
        reading = self.model.sample()
        if self.has_peaks:
            self.model.reset_peaks()
        interval = []
        for name, kind in zip(self.columns, self.kinds):
            if kind == "counter":
                interval.append(reading[name] - self.last[name])
                self.last[name] = reading[name]
            else:
                interval.append(reading[name])
        return interval, reading[GROWTH]

    def start(self):
        reading = self.model.sample()
        if self.has_peaks:
            self.model.reset_peaks()
        self.last = reading

    def _fold(self):
        interval, level = self._read()
        for frame in self.stack:
            pending = frame.pending
            for c, v in enumerate(interval):
                if self.summed[c]:
                    pending[c] += v
                elif self.last_wins[c] or v > pending[c]:
                    pending[c] = v
        return level

    def _commit(self, frame, level, next_line):
        if frame.line >= 0:
            table = self.tables[id(frame.code)]
            row = table.get(frame.line)
            if row is None:
                row = table[frame.line] = [0, 0, list(frame.pending)]
            else:
                values = row[2]
                for c, v in enumerate(frame.pending):
                    values[c] = values[c] + v if self.summed[c] else max(values[c], v)
            row[0] += frame.counted
            row[1] += level - frame.start_level
        frame.pending = [0] * len(self.columns)
        frame.line = next_line
        frame.counted = 1
        frame.start_level = level

    def _push(self, code, line, level):
        self.stack.append(Frame(code, line, level, len(self.columns)))

    def on_start(self, code, line):
        if id(code) in self.tables:
            self._push(code, line, self._fold())

    def on_line(self, code, line):
        if id(code) not in self.tables:
            return
        level = self._fold()
        if not self.stack or self.stack[-1].code is not code:
            self._push(code, -1, level)
        self._commit(self.stack[-1], level, line)

    def on_leave(self, code):
        if id(code) not in self.tables:
            return
        level = self._fold()
        target = len(self.stack) - 1
        while target >= 0 and self.stack[target].code is not code:
            target -= 1
        while target >= 0 and len(self.stack) > target:
            self._commit(self.stack[-1], level, -1)
            self.stack.pop()

    def close_all(self):
        if self.stack:
            level = self._fold()
            while self.stack:
                self._commit(self.stack[-1], level, -1)
                self.stack.pop()

    def stats(self):
        return {self.codes[k]: {line: (row[0], row[1], tuple(row[2]))
                                for line, row in table.items()}
                for k, table in self.tables.items()}


def line_of_offset(code, offset):
    """PyCode_Addr2Line for a bytecode offset, -1 when it has no line."""
    if offset < 0:
        return -1
    for start, end, line in code.co_lines():
        if start <= offset < end:
            return -1 if line is None else line
    return -1


# Both listeners feed every reference the same events; each reference keeps
# only its own code objects (as each C tracer does).

GENERATOR_FLAGS = (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR
                   | inspect.CO_ITERABLE_COROUTINE)


def resumed(frame):
    """A generator resuming after a yield (not starting, not thrown into): it
    continues the line that yielded."""
    code = frame.f_code
    if not code.co_flags & GENERATOR_FLAGS:
        return False
    if sys.version_info < (3, 11):
        return frame.f_lasti >= 0
    raw = code.co_code
    i = frame.f_lasti
    return 0 <= i < len(raw) - 1 and raw[i] == opcode.opmap["RESUME"] and raw[i + 1] != 0


def run_with_settrace(refs, run):
    def local(frame, event, arg):
        if event == "line":
            for ref in refs:
                ref.on_line(frame.f_code, frame.f_lineno)
        elif event == "return":
            for ref in refs:
                ref.on_leave(frame.f_code)
        return local

    def global_trace(frame, event, arg):
        if event == "call" and any(id(frame.f_code) in ref.tables for ref in refs):
            line = frame.f_lineno if resumed(frame) else -1
            for ref in refs:
                ref.on_start(frame.f_code, line)
            return local
        return None

    old = sys.gettrace()
    for ref in refs:
        ref.start()
    sys.settrace(global_trace)
    try:
        run()
    finally:
        sys.settrace(old)
    for ref in refs:
        ref.close_all()


def run_with_monitoring(refs, run):
    mon = sys.monitoring
    ev = mon.events
    tool = next(i for i in (4, 3, 5, 2, 1, 0) if mon.get_tool(i) is None)

    def on_line(code, line):
        for ref in refs:
            ref.on_line(code, line)

    def on_start(code, offset):
        for ref in refs:
            ref.on_start(code, -1)

    def on_resume(code, offset, *exc):
        line = line_of_offset(code, offset)
        for ref in refs:
            ref.on_start(code, line)

    def on_leave(code, offset, arg):
        for ref in refs:
            ref.on_leave(code)

    callbacks = {ev.LINE: on_line, ev.PY_START: on_start, ev.PY_RESUME: on_resume,
                 ev.PY_RETURN: on_leave, ev.PY_YIELD: on_leave,
                 ev.PY_UNWIND: on_leave, ev.PY_THROW: on_resume}
    local = ev.LINE | ev.PY_START | ev.PY_RESUME | ev.PY_RETURN | ev.PY_YIELD
    codes = {id(c): c for ref in refs for c in ref.codes.values()}.values()
    mon.use_tool_id(tool, "memlab-reference")
    try:
        for event, callback in callbacks.items():
            mon.register_callback(tool, event, callback)
        mon.set_events(tool, ev.PY_UNWIND | ev.PY_THROW)
        for code in codes:
            mon.set_local_events(tool, code, local)
        for ref in refs:
            ref.start()
        run()
        for ref in refs:
            ref.close_all()
    finally:
        mon.set_events(tool, 0)
        for code in codes:
            mon.set_local_events(tool, code, 0)
        for event in callbacks:
            mon.register_callback(tool, event, None)
        mon.free_tool_id(tool)


def run_reference(refs, run):
    if _tracer.MECHANISM == "monitoring":
        run_with_monitoring(refs, run)
    else:
        run_with_settrace(refs, run)


# ---- programs ---------------------------------------------------------------

class Ctx:
    """Where a statement is generated: the functions it may call, whether it
    is in a generator, the loop variables in scope, how deep it nests."""

    def __init__(self, kinds, is_gen):
        self.kinds = kinds            # "f" (plain) or "g" (generator), per function
        self.is_gen = is_gen
        self.loops = []               # loop variable names in scope
        self.in_finally = False
        self.nest = 0
        self.n_loops = 0


def draw_cond(draw, ctx):
    choices = ["d == {}".format(draw(st.integers(0, 3))), "x % 3 == 2", "x % 4 == 1"]
    if ctx.loops:
        choices.append("{} == {}".format(draw(st.sampled_from(ctx.loops)),
                                         draw(st.integers(0, 2))))
    return draw(st.sampled_from(choices))


def draw_block(draw, ctx, min_size=1):
    n = draw(st.integers(min_size, 5))
    lines = []
    for _ in range(n):
        lines += draw_stmt(draw, ctx)
    return lines


def indented(lines):
    return ["    " + line for line in lines]


def draw_stmt(draw, ctx):
    kinds = ["alloc", "alloc", "alloc", "free", "free", "nop", "call", "call", "call",
             "return", "raise"]
    if ctx.nest < 2:
        kinds += ["loop", "if", "try"]
    if ctx.loops and not ctx.in_finally:
        kinds.append("jump")
    if ctx.is_gen and not ctx.in_finally:
        kinds += ["yield", "yield"]
    if ctx.in_finally:
        kinds = [k for k in kinds if k != "return"]
    kind = draw(st.sampled_from(kinds))

    if kind == "alloc":
        return ["manual_alloc({})".format(draw(st.integers(1, 512)))]
    if kind == "free":
        return ["manual_alloc(-{})".format(draw(st.integers(1, 512)))]
    if kind == "nop":
        return ["x += 1"]
    if kind == "yield":
        return ["yield x"]
    if kind in ("return", "raise", "jump"):
        word = {"return": "return", "raise": "raise E()",
                "jump": draw(st.sampled_from(["break", "continue"]))}[kind]
        if draw(st.integers(0, 3)):      # mostly conditional
            return ["if {}:".format(draw_cond(draw, ctx)), "    " + word]
        return [word]
    if kind == "call":
        j = draw(st.integers(0, len(ctx.kinds) - 1))
        call = "f{}(d + 1)".format(j)
        if ctx.kinds[j] == "f":
            return [call]
        # closed explicitly, so an exception its finally raises reaches us
        header = "with closing({}) as g:".format(call)
        if ctx.nest >= 2 or draw(st.booleans()):
            return [header, "    next(g, None)"]     # left suspended, then closed
        ctx.nest += 1
        try:
            return [header] + indented(nested(draw, ctx, "for v in g:"))
        finally:
            ctx.nest -= 1
    if kind == "loop":
        var = "i{}".format(ctx.n_loops)
        ctx.n_loops += 1
        ctx.loops.append(var)
        try:
            return nested(draw, ctx, "for {} in range({}):".format(var, draw(st.integers(0, 3))))
        finally:
            ctx.loops.pop()
    if kind == "if":
        lines = nested(draw, ctx, "if {}:".format(draw_cond(draw, ctx)))
        if draw(st.booleans()):
            lines += nested(draw, ctx, "else:")
        return lines
    # try: except and/or finally
    handler, final = draw(st.sampled_from([(True, False), (False, True), (True, True)]))
    lines = nested(draw, ctx, "try:")
    if handler:
        lines += nested(draw, ctx, "except E:")
    if final:
        was = ctx.in_finally
        ctx.in_finally = True
        try:
            lines += nested(draw, ctx, "finally:")
        finally:
            ctx.in_finally = was
    return lines


def nested(draw, ctx, header):
    ctx.nest += 1
    try:
        return [header] + indented(draw_block(draw, ctx))
    finally:
        ctx.nest -= 1


# Every generated module starts with this.  A generator closed while it is
# suspended in a try whose finally raises E may catch that E and yield again
# ("generator ignored GeneratorExit"); closing() then closes it again until it
# has finished, so no suspended generator is left for the garbage collector to
# run at some unpredictable time.
PRELUDE = """\
class E(Exception):
    pass

class closing:
    def __init__(self, gen):
        self.gen = gen
    def __enter__(self):
        return self.gen
    def __exit__(self, *exc):
        while True:
            try:
                self.gen.close()
                return False
            except RuntimeError as e:
                if "ignored GeneratorExit" not in str(e):
                    raise
"""


@st.composite
def programs(draw):
    """(source, kinds): the module text and "f" (plain) or "g" (generator)
    per function f0..fN; f0 is called first."""
    n = draw(st.integers(1, 4))
    kinds = [draw(st.sampled_from("fg")) for _ in range(n)]
    max_depth = draw(st.integers(1, 3))
    lines = PRELUDE.splitlines() + [""]
    for i, kind in enumerate(kinds):
        ctx = Ctx(kinds, kind == "g")
        body = draw_block(draw, ctx, min_size=2)
        if kind == "g":
            body.append("yield x")     # a generator even if no yield was drawn
        lines += ["def f{}(d):".format(i),
                  "    x = d",
                  "    {}[0] -= 1".format(BUDGET_NAME),
                  "    if d > {} or {}[0] < 0:".format(max_depth, BUDGET_NAME),
                  "        return"]
        lines += indented(body) + [""]
    return "\n".join(lines) + "\n", tuple(kinds)


# ---- running ----------------------------------------------------------------

@st.composite
def traced_programs(draw, n_tracers):
    """(source, kinds, registrations, runs): a program; per tracer, the
    functions it profiles (at least one each; they may overlap); how many
    times it runs, the tracers disabled and enabled again in between."""
    source, kinds = draw(programs())
    functions = st.integers(0, len(kinds) - 1)
    registrations = tuple(tuple(sorted(draw(st.sets(functions, min_size=1))))
                          for _ in range(n_tracers))
    return source, kinds, registrations, draw(st.integers(1, 2))


def load(source, tmp_path):
    path = os.path.join(tmp_path, "memlab_generated.py")
    with open(path, "w") as f:
        f.write(source)
    linecache.checkcache(path)
    namespace = {"__name__": "memlab_generated", BUDGET_NAME: [0]}
    exec(compile(source, path, "exec"), namespace)
    return namespace


def runner(namespace, kinds, manual_alloc):
    E = namespace["E"]
    entry = namespace["f0"]

    def run():
        """Runs the program; says how it ended, which must not depend on
        who listens."""
        namespace["manual_alloc"] = manual_alloc
        namespace[BUDGET_NAME][0] = MAX_CALLS
        try:
            if kinds[0] == "g":
                for _ in entry(0):
                    pass
            else:
                entry(0)
        except E:
            return "raised E"
        return "returned"
    return run


def c_stats(code_sets, columns, run, runs):
    tracers = []
    for codes in code_sets:
        tracer = _tracer.Tracer(_testsource.manual_source, 0, columns, GROWTH)
        for code in codes:
            tracer.add_code(code)
        tracers.append(tracer)
    _testsource.manual_reset()
    outcomes = []
    for _ in range(runs):
        try:
            for tracer in tracers:
                tracer.enable()
            outcomes.append(run())
        finally:
            for tracer in tracers:
                tracer.disable()
    assert [t.sample_errors for t in tracers] == [0] * len(tracers)
    return [dict(t.stats()) for t in tracers], outcomes


def reference_stats(code_sets, columns, run_with, runs):
    # One model per reference: the C tracers hand each other the peaks they
    # read, so each must see exactly what it would see alone.
    models = [ManualModel() for _ in code_sets]
    refs = [Reference(codes, model, columns) for codes, model in zip(code_sets, models)]

    def alloc(n):
        for model in models:
            model.manual_alloc(n)
    run = run_with(alloc)
    outcomes = []
    for _ in range(runs):
        run_reference(refs, lambda: outcomes.append(run()))
    return [ref.stats() for ref in refs], outcomes


def describe(stats):
    out = []
    for code, lines in sorted(stats.items(), key=lambda kv: kv[0].co_firstlineno):
        out.append("  {} (line {}):".format(code.co_name, code.co_firstlineno))
        for line in sorted(lines):
            out.append("    {:3d}: {}".format(line, lines[line]))
    return "\n".join(out)


def check(program, columns, workdir):
    source, kinds, registrations, runs = program
    namespace = load(source, workdir)
    code_sets = [[namespace["f{}".format(i)].__code__ for i in registered]
                 for registered in registrations]

    got, c_outcomes = c_stats(code_sets, columns,
                              runner(namespace, kinds, _testsource.manual_alloc), runs)
    want, ref_outcomes = reference_stats(
        code_sets, columns, lambda alloc: runner(namespace, kinds, alloc), runs)
    assert c_outcomes == ref_outcomes

    for n, (codes, g, w) in enumerate(zip(code_sets, got, want)):
        assert set(g) == set(codes)
        if g != w:
            numbered = "\n".join("{:3d}  {}".format(i, line)
                                 for i, line in enumerate(source.splitlines(), 1))
            pytest.fail("C tracer #{} of {} ({}) disagrees with the reference\n"
                        "program:\n{}\nregistered: {}\ncolumns: {}\nruns: {}\n"
                        "C tracer:\n{}\nreference:\n{}".format(
                            n + 1, len(code_sets), _tracer.MECHANISM, numbered,
                            "; ".join(", ".join("f{}".format(i) for i in r)
                                      for r in registrations),
                            ", ".join(columns), runs, describe(g), describe(w)))


@pytest.fixture(scope="module")
def workdir():
    with tempfile.TemporaryDirectory(prefix="memlab-prop-") as d:
        yield d


EXAMPLES = int(os.environ.get("MEMLAB_PROPERTY_EXAMPLES", "200"))
SETTINGS = settings(
    deadline=None,
    # explain would trace the test with sys.settrace / sys.monitoring itself
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.function_scoped_fixture])
no_foreign_tracer = pytest.mark.skipif(
    sys.gettrace() is not None, reason="another trace function (debugger, coverage) is active")


@no_foreign_tracer
@settings(SETTINGS, max_examples=EXAMPLES)
@given(program=traced_programs(1))
def test_c_tracer_matches_reference(program, workdir):
    check(program, COLUMNS, workdir)


@no_foreign_tracer
@settings(SETTINGS, max_examples=max(1, EXAMPLES // 2))
@given(program=traced_programs(2))
def test_two_tracers_match_reference(program, workdir):
    # Each reading resets the device's peaks; tracers on one device hand each
    # other the peaks they read, so each must see what it would see alone.
    check(program, COLUMNS, workdir)

