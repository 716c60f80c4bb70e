"""``run -f``: each profiled function is wrapped as it is created, as
``@profile`` wraps it, so the trace hook is on only during profiled calls:
unprofiled code sees ``sys.gettrace()`` None on the settrace
path, and every table is the decorator's, threads, generators, methods and
recursion included.  Each case runs in a fresh interpreter."""
import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")

from pytorch_memlab import LineProfiler, _tracer, load  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SETTRACE = _tracer.MECHANISM == "settrace"

PROG = """\
import json, os, sys, threading
import torch

seen = {}

def unrelated(tag):
    seen[tag] = sys.gettrace() is not None

def step(n):
    a = torch.ones(n)
    unrelated("inside step")
    b = torch.ones(2 * n)
    return a.numel() + b.numel()

def gen(n):
    for i in range(n):
        t = torch.zeros(256 * (i + 1))
        yield t.numel()

class Net:
    def forward(self, n):
        out = torch.zeros(n)
        return out.sum()

def fib(n):
    if n < 2:
        return torch.ones(n + 1).numel()
    return fib(n - 1) + fib(n - 2)

if os.environ.get("DECORATE"):
    from pytorch_memlab import profile
    step, gen, fib = (profile(f, device="cpu") for f in (step, gen, fib))
    Net.forward = profile(Net.forward, device="cpu")

step(1024)
unrelated("after step")
for n in (4096, 4096):      # one after the other: each thread's figures alone
    worker = threading.Thread(target=step, args=(n,))
    worker.start()
    worker.join()
g = gen(3)
next(g)
unrelated("generator suspended")
rest = list(g)
Net().forward(512)
fib(5)
print("SEEN", json.dumps(sorted(tag for tag, on in seen.items() if on)))
"""


def write(folder, name, text):
    path = Path(folder) / name
    path.write_text(textwrap.dedent(text))
    return path


def python(cwd, *args, env=None):
    full = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1", **(env or {}))
    proc = subprocess.run([sys.executable, *map(str, args)], cwd=cwd, env=full,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def tables(text):
    """{title: the table's text} of the printed tables."""
    out = {}
    for part in text.split("## ")[1:]:
        title, _, body = part.partition("\n")
        out[title] = body.split("\n\n\n", 1)[0].rstrip()
    return out


def seen(text):
    line = next(x for x in text.splitlines() if x.startswith("SEEN "))
    return json.loads(line[5:])


def lines_of(saved, qualname):
    (record,) = saved.stats(qualname)
    return {line["code"].strip(): line for line in record["lines"]}


def test_unprofiled_code_runs_with_no_hook_and_tables_are_the_decorators(tmp_path):
    write(tmp_path, "prog.py", PROG)
    cli = python(tmp_path, "-m", "pytorch_memlab", "run", "-d", "cpu", "-f", "step",
                 "-f", "gen", "-f", "Net.forward", "-f", "fib", "-o", "p.json", "prog.py")
    # the hook only inside step (where unrelated is a callee, as under the
    # decorator); on 3.12+ sys.monitoring never sets one
    assert seen(cli) == (["inside step"] if SETTRACE else [])
    decorated = python(tmp_path, "prog.py", env={"DECORATE": "1"})
    assert seen(decorated) == seen(cli)
    ours = tables(cli)
    assert sorted(ours) == ["Net.forward", "fib", "gen", "step"]
    assert ours == tables(decorated)

    saved = load(tmp_path / "p.json")
    step = lines_of(saved, "step")
    # three calls, one per thread: 1024, 4096 and 4096 elements of float32
    assert step["b = torch.ones(2 * n)"]["count"] == 3
    assert step["b = torch.ones(2 * n)"]["net_growth"] == 2 * (1024 + 4096 + 4096) * 4
    assert step["a = torch.ones(n)"]["net_growth"] == (1024 + 4096 + 4096) * 4
    # each new t is 1 KiB larger than the one it replaces
    gen = lines_of(saved, "gen")
    assert gen["t = torch.zeros(256 * (i + 1))"]["count"] == 3
    assert gen["t = torch.zeros(256 * (i + 1))"]["net_growth"] == 3 * 1024
    assert lines_of(saved, "Net.forward")["out = torch.zeros(n)"]["net_growth"] == 512 * 4
    assert lines_of(saved, "fib")["if n < 2:"]["count"] == 15     # fib(5): 15 calls


MODELS = """\
import functools
import sys
import torch

seen = {}

def unrelated_here():
    seen["module code"] = sys.gettrace() is not None

def make(n):
    t = torch.ones(n)
    return t + 1

class Box:
    @staticmethod
    @functools.lru_cache(maxsize=None)
    def build(n):
        return torch.ones(n)

    @classmethod
    def kind(cls):
        return cls.__name__
"""

USE = """\
import inspect, sys
import models

def plain():
    models.seen["script code"] = sys.gettrace() is not None

a = models.make(1000)
b = models.Box.build(2000)
models.Box.build(2000)              # cached: the function body runs once
models.unrelated_here()
plain()
print("KIND", models.Box.kind())
print("SIG", inspect.signature(models.make), inspect.getsource(models.make).split("(")[0])
print("SEEN", sorted(k for k, v in models.seen.items() if v))
inner = getattr(models.make, "__wrapped__", None)
print("LINE", inner and inner.__code__.co_firstlineno, models.make.__qualname__)
"""


def test_functions_of_an_imported_module_and_methods(tmp_path):
    write(tmp_path, "models.py", MODELS)
    write(tmp_path, "use.py", USE)
    out = python(tmp_path, "-m", "pytorch_memlab", "run", "-d", "cpu", "-f", "models.py:make",
                 "-f", "models:Box.build", "-f", "models:Box.kind", "-o", "p.json", "use.py")
    assert "SEEN []" in out          # neither the module's nor the script's code saw a hook
    assert "KIND Box" in out
    assert "SIG (n) def make" in out          # signature and source: the function's
    assert "LINE 10 make" in out
    assert sorted(tables(out)) == ["Box.build", "Box.kind", "make"]
    saved = load(tmp_path / "p.json")
    make = lines_of(saved, "make")
    assert (make["t = torch.ones(n)"]["count"], make["t = torch.ones(n)"]["net_growth"]) \
        == (1, 4000)
    build = lines_of(saved, "Box.build")["return torch.ones(n)"]
    assert (build["count"], build["net_growth"]) == (1, 8000)


def test_a_function_that_exists_already_keeps_the_hook_on_for_the_run(tmp_path):
    # torch's relu exists before the script starts: it cannot be wrapped as
    # it is created, so the tracer stays on from the start, as it always did
    write(tmp_path, "use.py", """\
        import sys
        import torch
        import torch.nn.functional as F

        def first():
            return F.relu(torch.ones(10))

        first()
        print("HOOK", sys.gettrace() is not None)
        """)
    out = python(tmp_path, "-m", "pytorch_memlab", "run", "-d", "cpu", "-f", "first",
                 "-f", "torch.nn.functional:relu", "use.py")
    assert f"HOOK {SETTRACE}" in out
    assert list(tables(out)) == ["first", "relu"]        # in -f order, as always


def test_an_async_generator_is_profiled_with_the_hook_on(tmp_path):
    # the wrapper drives coroutines and generators, not async generators:
    # those are registered unwrapped and the tracer stays on
    defs = """\
        import asyncio
        import torch

        async def produce(n):
            for i in range(n):
                t = torch.zeros(256)
                yield t.numel()

        async def consume():
            return [x async for x in produce(3)]
        """
    write(tmp_path, "agen.py", defs + """
        print("GOT", asyncio.run(consume()))
        """)
    out = python(tmp_path, "-m", "pytorch_memlab", "run", "-d", "cpu", "-f", "produce",
                 "-f", "consume", "-o", "p.json", "agen.py")
    assert "GOT [256, 256, 256]" in out
    saved = load(tmp_path / "p.json")
    assert lines_of(saved, "produce")["t = torch.zeros(256)"]["count"] == 3
    # the comprehension's line counts as LineProfiler counts it in this
    # interpreter: 3.12 inlines comprehensions, and its settrace path reports
    # a line event at each turn of that loop (4), sys.monitoring and 3.11 one
    namespace: dict = {}
    exec(compile(textwrap.dedent(defs), str(tmp_path / "agen.py"), "exec"), namespace)
    direct = LineProfiler(namespace["consume"], device="cpu")
    with direct:
        asyncio.run(namespace["consume"]())
    comprehension = "return [x async for x in produce(3)]"
    expected = lines_of(direct, "consume")[comprehension]["count"]
    assert lines_of(saved, "consume")[comprehension]["count"] == expected >= 1
