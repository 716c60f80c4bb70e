"""torchrun: two real gloo ranks on CPU, each profiling its own allocations;
rank files, one merged table on rank 0, ``view DIR/``, a crashing rank."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import MiB, saved_line

torch = pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]

# rank r allocates (r + 1) MiB on the marked line
TRAIN = """\
import os
import sys
import time
import torch
import torch.distributed as dist


def train_step(rank):
    x = torch.zeros(1024, 1024 * (rank + 1), dtype=torch.uint8)   # MARK
    return int(x.sum())


def main():
    group = "--no-group" not in sys.argv
    if group:
        dist.init_process_group("gloo")
    rank = int(os.environ["RANK"])
    for _ in range(2):
        train_step(rank)
    if "--crash" in sys.argv and rank == 1:
        raise RuntimeError("rank 1 fails")
    if "--die" in sys.argv:
        if rank == 0:
            return                       # no barrier: its profile is saved at exit
        # Killed hard (no file), but only once rank 0 has saved its profile:
        # torchrun stops rank 0 when rank 1 dies, and must not race its write.
        deadline = time.monotonic() + 60
        while not os.path.exists("prof/rank0.json") and time.monotonic() < deadline:
            time.sleep(0.05)
        os._exit(3)
    if group:
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
"""

DECORATED = """\
import torch
import torch.distributed as dist
from pytorch_memlab import profile


@profile(columns=["active_bytes.all.peak"])
def train_step(rank):
    x = torch.zeros(1024, 1024 * (rank + 1), dtype=torch.uint8)   # MARK
    return int(x.sum())


dist.init_process_group("gloo")
train_step(dist.get_rank())
dist.destroy_process_group()
"""


def torchrun(cwd, *args, env=None):
    # CPU tensors over gloo, as on a machine without a GPU: on a GPU machine a
    # rank would profile cuda:LOCAL_RANK (and see none of these bytes).
    environ = dict(os.environ, PYTHONUNBUFFERED="1", CUDA_VISIBLE_DEVICES="", **(env or {}))
    environ["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in
                                            [environ.get("PYTHONPATH")] if p])
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node",
                           "2", "--standalone", *map(str, args)],
                          cwd=cwd, capture_output=True, text=True, env=environ, timeout=300)


def memlab(cwd, *args):
    environ = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "pytorch_memlab", *map(str, args)],
                          cwd=cwd, capture_output=True, text=True, env=environ, timeout=120)


def rank_doc(folder, rank):
    return json.loads((folder / f"rank{rank}.json").read_text())


def merged_part(stdout):
    """The merged table rank 0 printed (from its '# N of W ranks' line)."""
    return stdout[stdout.index("# 2 of 2 ranks"):].strip()


def test_run_two_gloo_ranks_merged_over_the_group(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    out = torchrun(tmp_path, "-m", "pytorch_memlab", "run", "-f", "train_step",
                   "-c", "active_bytes.all.peak", "-o", "prof/", "train.py")
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("## train_step") == 1          # printed once, by rank 0
    assert out.stdout.count("# 2 of 2 ranks: rank 0, rank 1") == 1
    for rank in (0, 1):
        doc = rank_doc(tmp_path / "prof", rank)
        assert doc["rank"]["rank"] == rank and doc["rank"]["world_size"] == 2
        assert doc["devices"] == ["cpu"]
        line = saved_line(doc, "train_step", "# MARK")
        assert line["count"] == 2
        assert line["net_growth"] == 2 * (rank + 1) * MiB           # exact, per rank
        assert line["active_bytes.all.peak"] >= (rank + 1) * MiB
        assert doc["run"]["exit_status"] == 0
    # the marked line: rank 0 1.00M, rank 1 2.00M, spread 1.00M of peak; growth 2M/4M/2M
    row = [line for line in out.stdout.splitlines() if "# MARK" in line][0].split()
    spread_peak = (saved_line(rank_doc(tmp_path / "prof", 1), "train_step", "# MARK")["active_bytes.all.peak"]
                   - saved_line(rank_doc(tmp_path / "prof", 0), "train_step", "# MARK")["active_bytes.all.peak"])
    assert row[1] == "2.00M" and row[3] == "4.00M" and row[5] == "2.00M"
    assert row[4] == f"{spread_peak / MiB:.2f}M"
    view = memlab(tmp_path, "view", "prof/")
    assert view.returncode == 0, view.stderr
    assert view.stdout.strip() == merged_part(out.stdout)
    html = memlab(tmp_path, "view", "prof/", "-o", "report.html")
    assert html.returncode == 0, html.stderr
    text = (tmp_path / "report.html").read_text()
    assert '<select id="rank">' in text and 'data-rank="1"' in text


def test_decorators_under_torchrun_write_files_and_print_once(tmp_path):
    (tmp_path / "deco.py").write_text(DECORATED)
    out = torchrun(tmp_path, "deco.py", env={"PYTORCH_MEMLAB_OUT": "prof/"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("## train_step") == 1
    for rank in (0, 1):
        assert saved_line(rank_doc(tmp_path / "prof", rank), "train_step", "# MARK")["net_growth"] == (rank + 1) * MiB


def test_without_a_process_group_rank0_merges_the_files(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    out = torchrun(tmp_path, "-m", "pytorch_memlab", "run", "-f", "train_step",
                   "-c", "active_bytes.all.peak", "-o", "prof/", "train.py", "--no-group")
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("## train_step") == 1
    assert memlab(tmp_path, "view", "prof/").stdout.strip() == merged_part(out.stdout)


def test_a_crashing_rank_leaves_its_file(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    out = torchrun(tmp_path, "-m", "pytorch_memlab", "run", "-f", "train_step",
                   "-o", "prof/", "train.py", "--crash")
    assert out.returncode != 0
    doc = rank_doc(tmp_path / "prof", 1)
    assert doc["run"]["exit_status"] == 1
    assert saved_line(doc, "train_step", "# MARK")["net_growth"] == 4 * MiB


def test_a_rank_killed_hard_is_named_missing(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    out = torchrun(tmp_path, "-m", "pytorch_memlab", "run", "-f", "train_step",
                   "-o", "prof/", "train.py", "--die")
    assert out.returncode != 0
    assert not (tmp_path / "prof" / "rank1.json").exists()
    view = memlab(tmp_path, "view", "prof/")
    assert view.returncode == 0, view.stderr
    assert "# 1 of 2 ranks: rank 0" in view.stdout
    assert "# missing: rank 1 (no prof/rank1.json)" in view.stdout


def test_past_four_ranks_min_max_and_the_rank_with_the_max(tmp_path):
    from pytorch_memlab import LineProfiler
    from pytorch_memlab.reports.rank_table import merge, render_ranks_text

    def step(n):
        x = torch.zeros(n, dtype=torch.uint8)
        return x

    docs = []
    for rank, size in enumerate([1, 3, 2, 5, 4]):
        with LineProfiler(step, device="cpu", columns=["active_bytes.all.peak"]) as prof:
            step(size * MiB)
        doc = prof.to_dict()
        doc["rank"] = {"rank": rank, "world_size": 6}
        docs.append(doc)
    text = render_ranks_text(merge(docs))
    assert "# 5 of 6 ranks" in text and "# missing: rank 5 (sent nothing)" in text
    assert "min over ranks" in text and "rank with the max" in text
    row = [line for line in text.splitlines() if "torch.zeros(n" in line][0].split()
    # min peak, min growth, max peak, max growth, argmax x2, spread x2
    assert row[1] == "1.00M" and row[3] == "5.00M" and row[4] == row[5] == "3"
    assert row[7] == "4.00M"
