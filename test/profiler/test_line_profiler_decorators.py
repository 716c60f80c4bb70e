"""profile, profile_every, the target GPU functions, on CPU tensors.

Tests that look at what is printed at interpreter exit run a fresh
interpreter on a script file; the rest run here with device='cpu'."""
import asyncio
import io
import sys
import threading

import pytest
from helpers import EarlyThread, MiB, code_line, line_figures, run_script

torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")

from pytorch_memlab import _tracer, clear_global_line_profiler, profile
from pytorch_memlab.line_profiler import global_line_profiler

MONITORING = _tracer.MECHANISM == "monitoring"


def parse(size):
    units = {"B": 0, "K": 10, "M": 20, "G": 30}
    return round(float(size[:-1]) * (1 << units[size[-1]]))


def no_hook(*profilers):
    """No trace hook on this thread.  On 3.12+ a decorated function's profiler
    stays on between calls (see PARK_BETWEEN_CALLS), so disable those first."""
    assert sys.gettrace() is None
    if MONITORING:
        for prof in profilers:
            prof.disable()
        for tool in range(2, 6):
            assert sys.monitoring.get_tool(tool) != "pytorch_memlab"


@pytest.fixture
def cpu_profile():
    """The global profiler for device='cpu', empty before and after."""
    clear_global_line_profiler()
    yield lambda: global_line_profiler(device="cpu")
    clear_global_line_profiler()
    no_hook(global_line_profiler(device="cpu"))


# ---- profile ---------------------------------------------------------------------

@profile(device="cpu")
def deco_work(n):
    x = torch.empty(n)  # deco alloc
    return x.numel()


def test_profile_with_arguments_on_between_calls_only_if_cheap(cpu_profile):
    assert deco_work.__name__ == "deco_work" and deco_work.__wrapped__
    deco_work(262144)
    # settrace: off between calls; sys.monitoring: parked (costs nothing)
    assert cpu_profile().enabled == MONITORING
    assert sys.gettrace() is None
    deco_work(262144 * 2)
    line = line_figures(cpu_profile(), deco_work, "# deco alloc")
    assert line["count"] == 2
    assert line["net_growth"] == 3 * MiB   # x outlives its line: 1 MiB, then 2 MiB


def test_profile_bare_prints_at_exit(tmp_path):
    out, err = run_script(tmp_path, """\
        import torch
        from pytorch_memlab import profile

        DEV = "cuda" if torch.cuda.is_available() else "cpu"

        @profile
        def work():
            x = torch.empty(262144, device=DEV)
            y = torch.empty(262144, device=DEV)
            return x, y

        work()
        work()
        print("main done")
        """)
    # bare @profile reads the current GPU if there is one, else CPU memory;
    # CUDA puts 1 MiB blocks in 2 MiB segments of its small pool.
    first_reserved = "2.00M" if torch.cuda.is_available() else "1.00M"
    if not torch.cuda.is_available():
        assert "CUDA is not available" in err and err.count("\n") == 1
    first, _, table = out.partition("main done\n")
    assert first == ""                   # printed at exit, after the script
    lines = table.splitlines()
    assert lines[0] == "## work"
    assert lines[5].split() == ["6", "@profile"]
    assert lines[6].split() == ["7", "def", "work():"]
    # third: the bytes each line held at the peak: x and y, 1 MiB
    # each (a whole 1 MiB block on CUDA too), at the 2 MiB peak
    assert lines[7].split()[:6] == ["1.00M", first_reserved, "1.00M", "2.00M", "2", "8"]
    assert lines[8].split()[:6] == ["2.00M", "2.00M", "1.00M", "2.00M", "2", "9"]


def test_suspended_generator_at_exit_prints_and_leaves_no_hook(tmp_path):
    """A generator suspended at a yield keeps no hook on (settrace: unrelated
    code would run under it), is in the exit table, and exit leaves no hook or
    tool id (the check runs after the table: atexit runs last-in first-out)."""
    out, err = run_script(tmp_path, """\
        import atexit, gc, sys
        import torch
        from pytorch_memlab import _tracer, profile

        def after_exit():
            tools = ([sys.monitoring.get_tool(i) for i in range(6)]
                     if sys.version_info >= (3, 12) else [])
            print("after exit:", sys.gettrace(), "pytorch_memlab" in tools)

        atexit.register(after_exit)

        @profile(device="cpu")
        def gen():
            x = torch.ones(1024, 1024)  # one
            yield x
            y = torch.ones(2048, 1024)  # two
            yield y
            z = torch.ones(4096, 1024)  # never

        kept = gen()
        next(kept)
        dropped = gen()
        next(dropped)
        next(dropped)
        del dropped
        gc.collect()
        print("suspended:", sys.gettrace())
        print("main done")
        """)
    first, _, table = out.partition("main done\n")
    assert first == "suspended: None\n"
    lines = table.splitlines()
    assert lines[0] == "## gen", out
    # peak, reserved peak, net growth, count (the bytes held at the peak,
    # third, left out): "one" ran in both generators
    # (4 MiB each, both alive), "two" (8 MiB) in the dropped one only
    by_tag = {ln.split("# ")[-1]: ln.split()[:2] + ln.split()[3:5] for ln in lines if "# " in ln}
    assert by_tag["one"] == ["8.00M", "8.00M", "8.00M", "2"]
    assert by_tag["two"] == ["16.00M", "16.00M", "8.00M", "1"]
    assert lines[[i for i, ln in enumerate(lines) if ln.endswith("# never")][0]].split()[1] \
        == "z"                                  # no figures: it never ran
    assert lines[-1] == "after exit: None False"


def test_profile_columns_positional_and_nested(tmp_path):
    out, _ = run_script(tmp_path, """\
        import torch
        from pytorch_memlab import profile

        @profile(device="cpu", columns=["active_bytes.all.allocated"])
        def inner():
            t = torch.empty(262144)
            return t.numel()

        @profile(device="cpu", columns=["active_bytes.all.allocated"])
        def outer():
            inner()
            inner()

        outer()
        """)
    assert out.count("## ") == 2 and "## outer" in out and "## inner" in out
    outer = out[out.index("## outer"):].splitlines()
    assert outer[3].split() == ["active_bytes", "held", "at", "active_bytes", "count", "line",
                                "code"]
    assert outer[4].split() == ["all.allocated", "peak", "net", "growth"]
    # inner() charged here, and its 1 MiB was alive at outer's peak
    assert outer[7].split()[:5] == ["1.00M", "1.00M", "0.00B", "1", "11"]


def test_keyboard_interrupt_prints_and_leaves_no_hook(cpu_profile, capsys):
    @profile(device="cpu")
    def interrupted():
        x = torch.empty(262144)  # ok line
        raise KeyboardInterrupt  # interrupted here

    with pytest.raises(KeyboardInterrupt):
        interrupted()
    no_hook(cpu_profile())
    out = capsys.readouterr().out
    assert out.startswith("## ")
    assert "## test_keyboard_interrupt_prints_and_leaves_no_hook.<locals>.interrupted" in out
    assert "raise KeyboardInterrupt  # interrupted here   <-- KeyboardInterrupt raised here" in out
    assert line_figures(cpu_profile(), interrupted, "# ok line")["net_growth"] == MiB


def test_oom_marks_the_line_in_every_profiled_frame(cpu_profile, capsys):
    @profile(device="cpu")
    def allocate():
        x = torch.empty(262144)  # fine
        raise torch.OutOfMemoryError("CUDA out of memory (simulated)")  # oom line

    @profile(device="cpu")
    def step():
        allocate()  # call that fails

    with pytest.raises(torch.OutOfMemoryError):
        step()
    out = capsys.readouterr().out
    assert out.count("## ") == 2                      # printed once, at the outermost
    marked = [line for line in out.splitlines() if "<-- OutOfMemoryError raised here" in line]
    assert len(marked) == 2
    assert any("# oom line" in m for m in marked)
    assert any("# call that fails" in m for m in marked)
    prof = cpu_profile()
    assert line_figures(prof, allocate, "# oom line")["raised"] == "OutOfMemoryError"
    assert line_figures(prof, step, "# call that fails")["raised"] == "OutOfMemoryError"
    assert line_figures(prof, allocate, "# fine")["raised"] is None
    no_hook(prof)


def test_exception_after_script_end_is_printed_once(tmp_path):
    out, err = run_script(tmp_path, """\
        import torch
        from pytorch_memlab import profile

        @profile(device="cpu")
        def work():
            x = torch.empty(262144)
            raise ValueError("bad")

        work()
        """, expect_rc=1)
    assert out.count("## work") == 1
    assert "<-- ValueError raised here" in out
    assert "ValueError: bad" in err


def test_methods_forward_static_class(cpu_profile):
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(64, 64)

        @profile(device="cpu")
        def forward(self, inp):
            return self.lin(inp)  # forward line

        @profile(device="cpu")
        @staticmethod
        def make():
            return torch.empty(262144)  # static line

        @profile(device="cpu")
        @classmethod
        def build(cls):
            return cls()  # class line

    with torch.no_grad():
        net = Net.build()
        net(torch.ones(2, 64))
        Net.make()
    prof = cpu_profile()
    assert line_figures(prof, Net.forward, "# forward line")["count"] == 1
    assert line_figures(prof, Net.make, "# static line")["net_growth"] == MiB
    assert line_figures(prof, Net.build, "# class line")["count"] == 1


def test_generator_and_coroutine(cpu_profile):
    @profile(device="cpu")
    def chunks():
        for _ in range(3):
            yield torch.empty(262144)  # yield line

    @profile(device="cpu")
    async def coro():
        x = torch.empty(262144)  # before await
        await asyncio.sleep(0)
        return x  # after await

    assert len(list(chunks())) == 3
    asyncio.run(coro())
    prof = cpu_profile()
    assert line_figures(prof, chunks, "# yield line")["count"] >= 3
    assert line_figures(prof, coro, "# before await")["net_growth"] == MiB
    assert line_figures(prof, coro, "# after await")["count"] == 1


def test_closure_recreated_on_each_call_is_one_record(cpu_profile):
    def outer(n):
        @profile(device="cpu")
        def inner():
            x = torch.empty(n)  # closure alloc
            return x.numel()
        return inner()

    for _ in range(50):
        outer(262144)
    records = cpu_profile().stats()
    assert [r["qualname"] for r in records].count(
        "test_closure_recreated_on_each_call_is_one_record.<locals>.outer.<locals>.inner") == 1
    inner_record = next(r for r in records if r["qualname"].endswith("outer.<locals>.inner"))
    line = code_line(inner_record, "# closure alloc")
    assert line["count"] == 50
    assert line["net_growth"] == 50 * MiB    # each x outlives its line
    out = io.StringIO()
    cpu_profile().print_stats(stream=out)
    assert out.getvalue().count("outer.<locals>.inner") == 1
    assert len(cpu_profile().functions) == len(records)


def test_thread_started_before_and_after(cpu_profile):
    @profile(device="cpu")
    def in_thread():
        x = torch.empty(262144)  # thread line
        return x.numel()

    early = EarlyThread(in_thread)   # exists before anything is enabled

    @profile(device="cpu")
    def main_side():
        early.release()  # waits for the early thread
        late = threading.Thread(target=in_thread)
        late.start()
        late.join()

    main_side()
    early.join()
    assert line_figures(cpu_profile(), in_thread, "# thread line")["count"] == 2


def test_clear_global_line_profiler(cpu_profile):
    deco_work(10)
    assert line_figures(cpu_profile(), deco_work, "# deco alloc")["count"] == 1
    clear_global_line_profiler()
    assert line_figures(cpu_profile(), deco_work, "# deco alloc")["count"] == 0
    deco_work(10)
    assert line_figures(cpu_profile(), deco_work, "# deco alloc")["count"] == 1
