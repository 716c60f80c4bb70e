"""The command line's grammar and its one-line errors: run's arguments after the
program, usage errors with status 2, view refusing what is not a profile, a
closed stdout, and the CPU note (each in a fresh interpreter where it runs)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")

from pytorch_memlab import load  # noqa: E402
from test_cli import ROOT, TRAIN, memlab, train, write  # noqa: E402


@pytest.mark.parametrize("argv, module, script, program_args", [
    (["-f", "a", "-dcpu", "s.py", "-f", "x"], None, "s.py", ["-f", "x"]),
    (["-o", "o.json", "-m", "pkg.mod", "-m", "y"], "pkg.mod", None, ["-m", "y"]),
    (["-mpkg", "a", "-f", "b"], "pkg", None, ["a", "-f", "b"]),
    (["--html", "r.html", "--", "-odd.py", "z"], None, "-odd.py", ["z"]),
    (["s.py", "--", "-x"], None, "s.py", ["--", "-x"]),
    (["s.py"], None, "s.py", []),
])
def test_run_arguments_after_the_program_are_its_own(argv, module, script, program_args):
    # As with `python script.py ...`: run's options stop at the script or -m MODULE.
    from pytorch_memlab.cli import parse
    command, args = parse(["run"] + argv)
    assert command.name == "run"
    assert (args.module, args.script, args.args) == (module, script, program_args)


@pytest.mark.parametrize("argv, message", [
    ([], "name one script, or -m MODULE"),
    (["-f", "a"], "name one script, or -m MODULE"),
    (["-m"], "-m needs a MODULE"),
])
def test_run_without_a_program_is_a_usage_error(argv, message, capsys):
    from pytorch_memlab.cli import parse
    with pytest.raises(SystemExit) as exc:
        parse(["run"] + argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("name, content", [
    ("garbage.json", b"\xff\xfe\x00garbage"),
    ("text.json", b"not json at all"),
    ("other.json", b'{"x": 1}'),
    ("empty.json", None),
    ("cut.csv", b"qualname,filename,first_line,device,net_growth,raised,code\n"
                b"f,f.py,1,cpu,0,,x = 1\n"),              # no lineno, count
    ("deep.json", b"[" * 100_000 + b"]" * 100_000),   # past json's recursion limit
], ids=["garbage", "text", "other-json", "missing", "csv-without-lineno", "deep-json"])
# (explicit ids: pytest would put the 200 kB deep file in the id, which then
# does not fit the environment of the test's subprocess: E2BIG)
def test_view_rejects_non_profile_with_one_line(tmp_path: Path, name: str,
                                                content: "bytes | None") -> None:
    # Any file that is not a saved profile: one stderr line naming it, exit 2, no traceback.
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "pytorch_memlab", "view", str(path)],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert str(path) in lines[0]


def test_a_closed_stdout_loses_no_file_and_no_status(train):
    # `run ... | true`: the reader is gone before the tables are printed.  The
    # files are written first; the closed pipe is no error of the profiler (no
    # traceback, the script's own status).
    script = TRAIN.replace('    print("ARGV"', '    pass  # print("ARGV"')
    write(train, "quiet.py", script)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for extra, status in (([], 0), (["--exit", "3"], 3)):
        for name in ("hp.json", "hp.html"):
            (train / name).unlink(missing_ok=True)
        proc = subprocess.run(
            f'"{sys.executable}" -m pytorch_memlab run -d cpu -f main.step -o hp.json '
            f'--html hp.html quiet.py {" ".join(extra)} | true; exit ${{PIPESTATUS[0]}}',
            shell=True, executable="/bin/bash", cwd=train, env=env, capture_output=True,
            text=True, timeout=300)
        assert proc.returncode == status, proc.stderr
        assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
        assert [f["qualname"] for f in load(train / "hp.json").to_dict()["functions"]] \
            == ["main.<locals>.step"]
        assert (train / "hp.html").stat().st_size > 0


@pytest.mark.parametrize("argv, message", [
    (["run", "-d", "cpu", "-m", "nosuchmodule"], "-m nosuchmodule: no module named"),
    (["view", "{tmp}"], "holds no rank<R>.json profile"),
    (["run", "-d", "cpu", "-o", "{tmp}/missing/p.json", "quiet.py"],
     "-o {tmp}/missing/p.json: cannot write there"),
    (["run", "-d", "cpu", "--html", "{tmp}/missing/r.html", "quiet.py"],
     "--html {tmp}/missing/r.html: cannot write there"),
    (["view", "{tmp}/nofile.json"], "{tmp}/nofile.json: no such file"),
    (["run", "-d", "gpu", "quiet.py"], "-d 'gpu': expected cpu, cuda, cuda:N or all"),
])
def test_every_usage_error_is_one_line_and_status_2(train, tmp_path, argv, message):
    write(train, "quiet.py", "x = 1\n")
    (tmp_path / "empty").mkdir(exist_ok=True)
    argv = [a.replace("{tmp}", str(tmp_path / "empty")) for a in argv]
    proc = memlab(train, *argv)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message.replace("{tmp}", str(tmp_path / "empty")) in lines[0], \
        proc.stderr
    assert "not a saved profile" not in lines[0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the note is for machines without CUDA")
def test_the_cli_cpu_note_speaks_cli(train):
    proc = memlab(train, "run", "-f", "main.step", "train.py")
    assert proc.returncode == 0, proc.stderr
    assert "(pass -d cpu to say so and silence this note)" in proc.stderr
    assert "device='cpu'" not in proc.stderr
