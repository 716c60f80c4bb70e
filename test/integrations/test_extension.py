"""%mlrun and %%mlrun, driven through a real IPython InteractiveShell, on CPU
tensors with exact bytes.

Peaks are absolute levels and other tests may leave CPU tensors alive, so
peaks are compared with the level of a line that allocates nothing; net
growth is exact as it is.
"""
import sys

import pytest

pytest.importorskip("IPython")
torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")

from helpers import ipython_shell, line_figures, line_of  # noqa: E402
from IPython.core.error import UsageError  # noqa: E402

from pytorch_memlab import LineProfiler, _tracer  # noqa: E402
from pytorch_memlab.common import devices as _devices  # noqa: E402
from pytorch_memlab.line_profiler import DEFAULT_COLUMNS  # noqa: E402

from helpers import MiB  # noqa: E402
QUARTER = 262144                     # float32 elements in 1 MiB
MONITORING = _tracer.MECHANISM == "monitoring"
HAVE_CUDA = torch.cuda.is_available()
OPTIONS = ["-f", "--function", "-c", "--column", "-D", "--no_default_columns",
           "-r", "--return-profiler", "-g", "--gpu", "-q", "--quiet",
           "-T", "--dump-profile"]


# ---- code the magics profile ------------------------------------------------------

def work(n):
    n = int(n)                       # level
    x = torch.empty(n)               # 1 MiB
    y = torch.empty(2 * n)           # 2 MiB
    del x
    return y


def helper(n):
    t = torch.empty(n)               # helper alloc
    return t.numel()


def boom(n):
    x = torch.empty(n)               # before boom
    raise ValueError("boom")         # boom line


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(16, 16)

    def forward(self, inp):
        out = self.linear(inp)       # net forward
        return out.relu()


CELL_SOURCE = '''\
def celldef(n):
    base = int(n)
    kept = torch.empty(n)
    return kept
'''


# ---- fixtures and helpers -----------------------------------------------------------

@pytest.fixture(scope="module")
def shell(tmp_path_factory):
    """One InteractiveShell for the module (see helpers.ipython_shell)."""
    with ipython_shell(tmp_path_factory.mktemp("ipython")) as ip:
        ip.run_cell("import torch")
        ip.run_cell(CELL_SOURCE)
        ip.user_ns.update(work=work, helper=helper, boom=boom, Net=Net, net=Net(),
                          fns={"a b": helper})
        yield ip


@pytest.fixture(autouse=True)
def no_hook_after():
    target = _devices._target
    yield
    assert sys.gettrace() is None
    assert _devices._target == target       # -g never moves the target GPU


def assert_off(prof):
    assert not prof.enabled
    assert sys.gettrace() is None
    if MONITORING:
        for tracer in prof._tracers.tracers:
            assert tracer.tool_id == -1


def table_row(out, text):
    """The cells of the text-table line that shows source ``text``."""
    return next(line for line in out.splitlines() if text in line).split()


def mlrun(shell, line, cell=None):
    if cell is None:
        return shell.run_line_magic("mlrun", line)
    return shell.run_cell_magic("mlrun", line, cell)


# ---- registration and help --------------------------------------------------------------

def test_load_ext_registers_line_and_cell_magic(shell):
    assert "mlrun" in shell.magics_manager.magics["line"]
    assert "mlrun" in shell.magics_manager.magics["cell"]


def test_help_states_every_option(shell, capsys):
    doc = shell.find_line_magic("mlrun").__doc__
    for option in OPTIONS + ["statement"]:
        assert option in doc, option
    shell.run_cell("%mlrun?")
    shown = capsys.readouterr().out
    for option in OPTIONS:
        assert option in shown, option
    assert "'cpu'" in shown and "'all'" in shown


# ---- line magic ---------------------------------------------------------------------

def test_line_magic_exact_bytes(shell):
    prof = mlrun(shell, f"-r -q -g cpu -f work work({QUARTER})")
    assert isinstance(prof, LineProfiler)
    assert prof.devices == ["cpu"]
    assert_off(prof)
    level = line_figures(prof, work, "# level")["active_bytes.all.peak"]
    x = line_figures(prof, work, "# 1 MiB")
    y = line_figures(prof, work, "# 2 MiB")
    assert (x["count"], x["net_growth"]) == (1, MiB)
    assert x["active_bytes.all.peak"] - level == MiB
    assert y["active_bytes.all.peak"] - level == 3 * MiB
    assert y["reserved_bytes.all.peak"] == y["active_bytes.all.peak"]
    assert line_figures(prof, work, "del x")["net_growth"] == -MiB


def test_line_magic_displays_table(shell, capsys):
    assert mlrun(shell, f"-g cpu -f work work({QUARTER})") is None
    out = capsys.readouterr().out
    assert "## work" in out
    assert "active_bytes  reserved_bytes  held at  active_bytes  count  line  code" in out
    cells = table_row(out, "# 1 MiB")
    assert cells[3:6] == ["1.00M", "1", str(line_of(work, "# 1 MiB"))]
    assert table_row(out, "# 2 MiB")[3] == "2.00M"
    assert table_row(out, "del x")[3] == "-1.00M"


def test_by_call_and_hide_unrun(shell, capsys):
    """--by-call shows the first and the later calls side by side;
    --hide-unrun leaves out the def line, which never runs as a line."""
    assert mlrun(shell, f"--by-call --hide-unrun -g cpu -f work -- "
                        f"[work({QUARTER}) for _ in range(3)]") is None
    out = capsys.readouterr().out
    assert "cpu, first call" in out and "cpu, later calls" in out
    assert "def work(n):" not in out
    # first call: 1 MiB net growth of x, once; later calls: twice that, 2 runs
    assert table_row(out, "# 1 MiB")[2:4] == ["1.00M", "1"]
    assert table_row(out, "# 1 MiB")[6:8] == ["2.00M", "2"]
    assert mlrun(shell, f"-g cpu -f work work({QUARTER})") is None
    assert "def work(n):" in capsys.readouterr().out


def test_return_profiler_also_displays(shell, capsys):
    prof = mlrun(shell, f"-r -g cpu -f work work({QUARTER})")
    out = capsys.readouterr().out
    assert out.strip() == repr(prof.display()).strip()


def test_quiet_shows_nothing(shell, capsys):
    assert mlrun(shell, f"-q -g cpu -f work work({QUARTER})") is None
    assert capsys.readouterr().out == ""


def test_statement_runs_in_user_namespace_verbatim(shell):
    shell.user_ns.pop("got", None)
    mlrun(shell, f'-q -g cpu -f helper -- got = (helper({QUARTER}), "a  b")')
    assert shell.user_ns["got"] == (QUARTER, "a  b")
    mlrun(shell, f"-q -g cpu -f helper got = helper({QUARTER} // 2)")
    assert shell.user_ns["got"] == QUARTER // 2
    # no $var / {expr} expansion: the statement is Python as written
    shell.run_cell('%mlrun -q -g cpu -f helper got = "{helper.__name__} $QUARTER"')
    assert shell.user_ns["got"] == "{helper.__name__} $QUARTER"


def test_line_magic_through_run_cell(shell, capsys):
    result = shell.run_cell(f"prof = %mlrun -r -q -g cpu -f work work({QUARTER})")
    assert result.success
    prof = shell.user_ns["prof"]
    assert line_figures(prof, work, "# 1 MiB")["net_growth"] == MiB
    assert capsys.readouterr().out == ""


# ---- cell magic --------------------------------------------------------------------------

def test_cell_magic_runs_whole_cell(shell):
    cell = f"for _ in range(3):\n    kept = work({QUARTER})\ntotal = helper({QUARTER})\n"
    prof = mlrun(shell, "-r -q -g cpu -f work -f helper", cell)
    x = line_figures(prof, work, "# 1 MiB")
    assert (x["count"], x["net_growth"]) == (3, 3 * MiB)
    h = line_figures(prof, helper, "# helper alloc")
    assert (h["count"], h["net_growth"]) == (1, MiB)
    assert shell.user_ns["total"] == QUARTER
    assert tuple(shell.user_ns["kept"].shape) == (2 * QUARTER,)
    assert_off(prof)


def test_cell_magic_on_function_defined_in_a_cell(shell, capsys):
    result = shell.run_cell(f"%%mlrun -g cpu -f celldef\nout = celldef({QUARTER})\n")
    assert result.success, result.error_in_exec
    out = capsys.readouterr().out
    assert "## celldef" in out
    # the source comes from IPython's cell cache; net growth of the alloc line
    assert table_row(out, "kept = torch.empty(n)")[2] == "1.00M"
    assert "def celldef(n):" in out


def test_cell_may_use_ipython_syntax(shell):
    cell = f"names = %who_ls\nhelper({QUARTER})\n"
    prof = mlrun(shell, "-r -q -g cpu -f helper", cell)
    assert "helper" in shell.user_ns["names"]
    assert line_figures(prof, helper, "# helper alloc")["count"] == 1


# ---- -f expressions -----------------------------------------------------------------------

@pytest.mark.parametrize("expr", ["Net.forward", "net", "net.forward", "Net"])
def test_function_expressions(shell, expr):
    prof = mlrun(shell, f"-r -q -g cpu -f {expr} net(torch.randn(4, 16))")
    assert [f.__qualname__ for f in prof.functions] == ["Net.forward"]
    line = line_figures(prof, Net.forward, "# net forward")
    assert (line["count"], line["net_growth"]) == (1, 4 * 16 * 4)


def test_quoted_function_expression_and_repeats(shell):
    prof = mlrun(shell, f"""-r -q -g cpu -f "fns['a b']" -f work -f helper """
                        f"""--function=work helper({QUARTER})""")
    assert [f.__name__ for f in prof.functions] == ["helper", "work"]
    assert line_figures(prof, helper, "# helper alloc")["net_growth"] == MiB


# ---- columns ----------------------------------------------------------------------

def test_extra_column_added_to_defaults(shell):
    prof = mlrun(shell, f"-r -q -g cpu -c active_bytes.all.allocated -c allocation.all.allocated "
                        f"-f work work({QUARTER})")
    assert prof.columns == DEFAULT_COLUMNS + ("active_bytes.all.allocated",
                                              "allocation.all.allocated")
    x = line_figures(prof, work, "# 1 MiB")
    assert x["active_bytes.all.allocated"] == MiB
    assert x["allocation.all.allocated"] == 1


def test_default_column_repeated_is_not_doubled(shell):
    prof = mlrun(shell, f"-r -q -g cpu -c active_bytes.all.peak -f work work({QUARTER})")
    assert prof.columns == DEFAULT_COLUMNS


def test_no_default_columns(shell, capsys):
    prof = mlrun(shell, f"-r -g cpu -D -c active_bytes.all.allocated -f work work({QUARTER})")
    assert prof.columns == ("active_bytes.all.allocated",)
    out = capsys.readouterr().out
    assert "reserved_bytes" not in out and "all.peak" not in out
    assert table_row(out, "# 2 MiB")[:2] == ["2.00M", "2.00M"]   # allocated, net growth
    prof = mlrun(shell, f"-r -q -g cpu --no-default-columns --column allocation.all.current "
                        f"-f work work({QUARTER})")
    assert prof.columns == ("allocation.all.current",)


# ---- -T ----------------------------------------------------------------------------

def test_dump_profile(shell, tmp_path, capsys):
    target = tmp_path / "a profile.txt"
    prof = mlrun(shell, f'-r -q -g cpu -T "{target}" -f work work({QUARTER})')
    text = target.read_text(encoding="utf-8")
    assert text == repr(prof.display()) + "\n"
    assert table_row(text, "# 1 MiB")[2] == "1.00M"
    assert capsys.readouterr().out == ""
    mlrun(shell, f"-q -g cpu --dump-profile {tmp_path / 'b.txt'} -f helper helper(4)")
    assert "## helper" in (tmp_path / "b.txt").read_text(encoding="utf-8")


# ---- an exception in the profiled code -------------------------------------------------

def test_exception_shows_and_dumps_table_then_propagates(shell, tmp_path, capsys):
    dump = tmp_path / "boom.txt"
    with pytest.raises(ValueError, match="boom"):
        mlrun(shell, f"-g cpu -T {dump} -f boom boom({QUARTER})")
    out = capsys.readouterr().out
    boom_line = next(line for line in out.splitlines() if "# boom line" in line)
    assert boom_line.endswith("<-- ValueError raised here")
    assert "ValueError raised here" in dump.read_text(encoding="utf-8")
    assert table_row(out, "# before boom")[2] == "1.00M"


def test_exception_through_run_cell(shell):
    result = shell.run_cell(f"%mlrun -q -g cpu -f boom boom({QUARTER})")
    assert isinstance(result.error_in_exec, ValueError)


# ---- usage errors -------------------------------------------------------------------

@pytest.mark.parametrize("line, named", [
    ("-f nothere work(1)", "nothere"),
    ("-f Net.nope work(1)", "Net.nope"),
    ("-f work( work(1)", "work("),
    ("-f 42 work(1)", "42"),
    ("-f work -c active_bytes.all.peek work(1)", "active_bytes.all.peek"),
    ("-f work -c bogus -c active_bytes.all.current work(1)", "bogus"),
    ("-f work -D work(1)", "-c"),
    ("-f work -g gpu7 work(1)", "gpu7"),
    ("-f work -x work(1)", "-x"),
    ("-f work", "nothing to run"),
    ("work(1)", "-f"),
    ("-f", "-f"),
    ('-f "work work(1)', "unterminated"),
])
def test_usage_errors(shell, line, named):
    with pytest.raises(UsageError) as info:
        mlrun(shell, "-g cpu " + line if "-g" not in line else line)
    assert named in str(info.value)


def test_unknown_column_lists_valid_ones(shell):
    with pytest.raises(UsageError, match="Did you mean 'active_bytes.all.peak'"):
        mlrun(shell, "-g cpu -f work -c active_bytes.all.peek work(1)")


def test_cell_magic_rejects_statement_on_its_line(shell):
    with pytest.raises(UsageError, match="in the cell"):
        mlrun(shell, "-g cpu -f work work(1)", "work(2)\n")


def test_usage_error_through_run_cell_runs_nothing(shell, capsys):
    shell.user_ns["ran"] = False
    result = shell.run_cell("%%mlrun -g cpu -f missing_function\nran = True\n")
    assert isinstance(result.error_in_exec, UsageError)
    assert shell.user_ns["ran"] is False
    assert "missing_function" in capsys.readouterr().err


@pytest.mark.skipif(HAVE_CUDA, reason="checks the error without CUDA")
def test_gpu_index_without_cuda(shell):
    with pytest.raises(UsageError, match="CUDA is not available"):
        mlrun(shell, "-g 0 -f work work(1)")


# ---- nothing leaks into later runs ------------------------------------------------------

def test_device_and_columns_apply_to_one_run_only(shell):
    # read off the profilers the magic really made (-r returns them)
    target = _devices._target
    first = mlrun(shell, f"-r -q -g cpu -D -c allocation.all.allocated -f work work({QUARTER})")
    second = mlrun(shell, f"-r -q -f work work({QUARTER})")
    third = mlrun(shell, "-r -q -f work", f"work({QUARTER})\n")
    assert first.columns == ("allocation.all.allocated",)
    assert first.devices == ["cpu"]
    default = [f"cuda:{torch.cuda.current_device()}"] if HAVE_CUDA else ["cpu"]
    for prof in (second, third):
        assert prof.columns == DEFAULT_COLUMNS
        assert prof.devices == default
        assert prof is not first
        assert_off(prof)
    assert first.stats()[0]["lines"] and len(first.stats()) == 1
    assert _devices._target == target
    assert sys.gettrace() is None


@pytest.mark.cuda
def test_gpu_option_on_cuda(shell):
    before = _devices._target
    prof = mlrun(shell, "-r -q -g 0 -f work work(1024)")
    assert prof.devices == ["cuda:0"]
    prof = mlrun(shell, "-r -q -g all -f work work(1024)")
    assert prof.devices == [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    prof = mlrun(shell, "-r -q -g cuda:0 -f work work(1024)")
    assert prof.devices == ["cuda:0"]
    assert _devices._target == before
    prof = mlrun(shell, "-r -q -f work work(1024)")
    assert prof.devices == [f"cuda:{torch.cuda.current_device()}"]
