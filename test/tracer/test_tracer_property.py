"""Property test: the C tracer against a pure-Python reference tracer.

Hypothesis writes small random programs (functions and generators calling each
other, loops with break/continue, early returns, exceptions raised and caught
inside or outside the raising function, try/finally, manual_alloc(+-n)),
compiles them from a temporary file and runs each twice with the same start
state: once under ``_tracer.Tracer`` fed by the C manual source, once under
``Reference`` (tracer_reference.py), a line-for-line restatement in Python of
the semantics in src/tracer/events.c.  Needs no torch.
"""
import linecache
import os
import sys
import tempfile

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from pytorch_memlab import _testsource, _tracer
from tracer_reference import GROWTH, ManualModel, Reference, run_reference

COLUMNS = ("bytes.peak", "bytes.allocated", "bytes.freed", "bytes.current")
MAX_CALLS = 120                        # calls one program run may make
BUDGET_NAME = "CALLS_LEFT"


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

