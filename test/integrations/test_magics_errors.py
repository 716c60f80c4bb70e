"""%mlrun's bad options are reported before the code runs, in one line
naming the option and what it accepts; a function with no source says so
under its table."""
import pytest

pytest.importorskip("IPython")
torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")

from helpers import ipython_shell  # noqa: E402
from IPython.core.error import UsageError  # noqa: E402

MADE_BY_EXEC = "def made(n):\n    kept = torch.empty(n)\n    return kept\n"


def work(n):
    return torch.empty(n)


@pytest.fixture(scope="module")
def shell(tmp_path_factory):
    with ipython_shell(tmp_path_factory.mktemp("ipython")) as ip:
        namespace = {"torch": torch}
        exec(MADE_BY_EXEC, namespace)
        ip.user_ns.update(work=work, made=namespace["made"], calls=[])
        yield ip


def test_an_unwritable_dump_path_stops_before_the_code_runs(shell, tmp_path):
    target = tmp_path / "no such folder" / "t.txt"
    shell.user_ns["calls"].clear()
    with pytest.raises(UsageError) as info:
        shell.run_line_magic("mlrun", f'-g cpu -T "{target}" -f work calls.append(work(4))')
    assert shell.user_ns["calls"] == []
    assert str(info.value) == (f"%mlrun: -T {target}: cannot write there (no such folder, "
                               "or no permission)")
    with pytest.raises(UsageError, match="-T"):      # a folder is no file to write
        shell.run_line_magic("mlrun", f"-g cpu -T {tmp_path} -f work calls.append(work(4))")
    assert shell.user_ns["calls"] == []


@pytest.mark.parametrize("spelling", ["tpu", "meta", "cuda:x", "-1"])
def test_an_unknown_device_is_one_line(shell, spelling):
    with pytest.raises(UsageError) as info:
        shell.run_line_magic("mlrun", f"-g {spelling} -f work work(4)")
    assert str(info.value) == (f"%mlrun: -g {spelling!r}: expected a GPU index N, 'cuda', "
                               "'cuda:N', 'cpu' or 'all'")


def test_a_function_made_by_exec_says_its_source_is_missing(shell, capsys):
    shell.run_line_magic("mlrun", "-g cpu -f made made(256)")
    out = capsys.readouterr().out
    assert "## made" in out
    note = ("note: the source of made (<string>) is not available (a string run by exec() or "
            "compile(), or a file gone since), so the code column is empty.")
    assert out.count(note) == 1
    assert out.rstrip().endswith(note)
