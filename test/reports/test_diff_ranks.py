"""``diff OLD_DIR NEW_DIR`` on two folders of torchrun rank files
(``prof/rank<R>.json``, as ``run -o prof/`` leaves them): each rank's
functions are compared with the same rank's."""
import re

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")

import pytorch_memlab  # noqa: E402
from pytorch_memlab import LineProfiler  # noqa: E402
from pytorch_memlab.records.ranks import write_rank_file  # noqa: E402
from pytorch_memlab.reports.diff_html import render_diff_html  # noqa: E402

from helpers import MiB  # noqa: E402
from helpers import diff_cli as cli  # noqa: E402


def step(n):
    x = torch.zeros(n, dtype=torch.uint8)
    return x.numel()


def rank_folder(path, sizes):
    """One rank<R>.json per size, as each torchrun rank writes it."""
    for rank, size in enumerate(sizes):
        with LineProfiler(step, device="cpu", columns=["active_bytes.all.peak"]) as prof:
            step(size)
        doc = prof.to_dict()
        doc["rank"] = {"rank": rank, "world_size": len(sizes), "local_rank": rank,
                       "host": "here", "run_id": path.name}
        write_rank_file(doc, str(path))
    return path


@pytest.fixture
def folders(tmp_path):
    return (rank_folder(tmp_path / "old", [MiB, MiB]),
            rank_folder(tmp_path / "new", [MiB, 3 * MiB]))


def test_each_rank_against_the_same_rank(folders):
    result = pytorch_memlab.diff(*folders)
    by_device = {fd.device: fd for fd in result.functions}
    assert sorted(by_device) == ["rank0:cpu", "rank1:cpu"]
    assert by_device["rank0:cpu"].peak_change == 0
    grown = by_device["rank1:cpu"]
    assert grown.peak_change == 2 * MiB
    line = next(line for line in grown.lines if "torch.zeros" in line.code)
    assert line.change("net_growth") == 2 * MiB
    assert line.change("active_bytes.all.peak") == 2 * MiB
    assert grown.peak_line == line.new.lineno


def test_cli_on_folders(folders, tmp_path):
    old, new = folders
    proc = cli(old, new)
    assert proc.returncode == 0, proc.stderr
    assert "## step (rank0:cpu)" in proc.stdout and "## step (rank1:cpu)" in proc.stdout
    # peaks are the process's CPU level (tensors other tests keep count): the change is exact
    summaries = proc.stdout.strip().splitlines()[-2:]
    assert re.fullmatch(r"step: peak (\S+) -> \1 \(\+0\.00B, \+0\.0%\)", summaries[0])
    assert re.fullmatch(r"step: peak \S+ -> \S+ \(\+2\.00M, \+[\d.]+%\), line \d+", summaries[1])
    assert cli(old, new, "--fail-over", "1MiB").returncode == 1
    assert cli(old, new, "--fail-over", "2MiB").returncode == 0
    (tmp_path / "empty").mkdir()
    bad = cli(tmp_path / "empty", new)
    assert bad.returncode == 2
    assert bad.stderr.count("\n") == 1 and "OLD" in bad.stderr and "rank" in bad.stderr


def test_a_rank_on_one_side_is_named_and_fails_the_gate(tmp_path):
    """A rank of OLD missing from NEW is named once (not its devices or
    functions) and fails --fail-over however little grew; one NEW alone adds
    is named and passes."""
    old, new = rank_folder(tmp_path / "old", [MiB, MiB]), rank_folder(tmp_path / "new", [MiB])
    proc = cli(old, new, "--fail-over", "1MiB")
    assert proc.stdout.rstrip().splitlines()[-1] == "only in OLD: rank 1"
    assert proc.returncode == 1
    assert proc.stderr == "pytorch_memlab diff: rank 1 is missing from NEW (--fail-over 1MiB)\n"
    grown = cli(new, old, "--fail-over", "1MiB")
    assert grown.returncode == 0, grown.stderr
    assert grown.stdout.rstrip().splitlines()[-1] == "only in NEW: rank 1"
    result = pytorch_memlab.diff(old, new)
    assert [fd.device for fd in result.functions] == ["rank0:cpu"]
    assert [item.text() for item in result.one_side] == ["only in OLD: rank 1"]
    assert '<p class="one-side">only in OLD: rank 1</p>' in render_diff_html(result)
