"""What ``diff`` blames for a peak's change (the parts of the peak both
profiles record: before the call, each line's held_at_peak), and what it
says of a function on one side only; real profiles of real CPU tensors."""
import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("pytorch_memlab._torchshim")

import pytorch_memlab  # noqa: E402
from helpers import MiB, saved_profile  # noqa: E402
from helpers import diff_cli as cli  # noqa: E402

STEP = """\
import torch

kept = []

def train_step():
    a = torch.empty(1 << 20)
    b = torch.empty(1 << 20)
    return a.sum() + b.sum()

{before}train_step()
"""

SIZED = """\
import torch

N = {n}

def train_step():
    a = torch.empty(1 << 20)
    b = torch.empty(N)
{inserted}    return a.sum() + b.sum()

train_step()
"""


def line(fd, text):
    return next(diff for diff in fd.lines if diff.code.strip() == text)


def test_growth_before_the_call_blames_no_line(tmp_path):
    """NEW keeps 5 MiB alive before the call: every line's peak figure grows
    by it, no line's held bytes do."""
    old = saved_profile(tmp_path, "old", STEP.format(before=""))
    new = saved_profile(tmp_path, "new",
                        STEP.format(before="kept.append(torch.empty(5 << 18))\n"))
    proc = cli(old, new)
    assert proc.returncode == 0, proc.stderr
    assert "<-- largest increase" not in proc.stdout
    assert ("grew before the call: +5.00M (alive before the call began) of the peak's "
            "+5.00M\n") in proc.stdout
    assert proc.stdout.rstrip().endswith("(+5.00M, +62.5%), before the call")
    (fd,) = pytorch_memlab.diff(old, new).functions
    assert line(fd, "a = torch.empty(1 << 20)").change("active_bytes.all.peak") == 5 * MiB
    assert (fd.blame.total, fd.blame.before_call) == (5 * MiB, 5 * MiB)
    assert all(change == 0 for _, change in fd.blame.lines)
    assert fd.blame.before and fd.peak_line is None


@pytest.fixture
def sized(tmp_path):
    """b grows by 1 MiB (4 -> 5 MiB) on a line of the same text; a new line
    after it holds 256 KiB at the peak, its peak figure 9.25 MiB."""
    return (saved_profile(tmp_path, "old", SIZED.format(n="1 << 20", inserted="")),
            saved_profile(tmp_path, "new", SIZED.format(
                n="5 << 18", inserted="    c = torch.empty(1 << 16)\n")))


def test_a_new_line_counts_what_it_holds_at_the_peak(sized):
    (fd,) = pytorch_memlab.diff(*sized).functions
    b, c = line(fd, "b = torch.empty(N)"), line(fd, "c = torch.empty(1 << 16)")
    assert c.old is None and c.new.held_at_peak == MiB // 4
    assert c.change("active_bytes.all.peak") == 9 * MiB + MiB // 4
    assert fd.peak_line == b.new.lineno == 7
    changes = {diff.code.strip(): change for diff, change in fd.blame.lines}
    assert changes["c = torch.empty(1 << 16)"] == MiB // 4
    assert changes["b = torch.empty(N)"] == MiB
    assert fd.blame.total == fd.peak_change == MiB + MiB // 4
    text = cli(*sized).stdout
    marked = [row for row in text.splitlines() if row.endswith("<-- largest increase")]
    assert len(marked) == 1 and "b = torch.empty(N)" in marked[0]
    assert "\npeak change +1.25M: +1.00M line 7, +256.00K line 8\n" in text
    assert text.rstrip().endswith("(+1.25M, +15.6%), line 7")


SHRANK = """\
import torch

A, N = {a}, {n}

def train_step():
    a = torch.empty(A)
    b = torch.empty(N)
    return a.sum() + b.sum()

train_step()
"""


def test_a_peak_that_shrank_blames_no_line(tmp_path):
    """a's line holds 256 bytes more, b's 1 MiB less: the peak shrank, and no
    line is marked as its largest increase."""
    old = saved_profile(tmp_path, "old", SHRANK.format(a="1 << 20", n="5 << 18"))
    new = saved_profile(tmp_path, "new", SHRANK.format(a="(1 << 20) + 64", n="1 << 20"))
    (fd,) = pytorch_memlab.diff(old, new).functions
    changes = {diff.code.strip(): change for diff, change in fd.blame.lines}
    assert (changes["a = torch.empty(A)"], changes["b = torch.empty(N)"]) == (256, -MiB)
    assert fd.blame.total == fd.peak_change == 256 - MiB
    assert fd.peak_line is None
    text = cli(old, new).stdout
    assert "<-- largest increase" not in text
    assert text.rstrip().endswith("(-1023.75K, -11.1%)"), text[-300:]


def test_without_a_breakdown_the_peak_column_decides_and_says_so(sized, tmp_path):
    """OLD as a file older than schema version 4 (no held_at_peak, no peak)."""
    old, new = sized
    data = json.loads(old.read_text())
    data["schema_version"] = 3
    for record in data["functions"]:
        del record["peak"]
        for row in record["lines"]:
            del row["held_at_peak"]
    older = tmp_path / "older.json"
    older.write_text(json.dumps(data))
    (fd,) = pytorch_memlab.diff(older, new).functions
    assert fd.blame is None
    assert fd.peak_line == line(fd, "c = torch.empty(1 << 16)").new.lineno
    proc = cli(older, new)
    assert proc.returncode == 0, proc.stderr
    assert ("\nOLD without a breakdown of the peak (held_at_peak: a file older than schema "
            "version 4, or a polled source): the line marked is the one whose "
            "active_bytes.all.peak grew most\n") in proc.stdout


HELPED = """\
import torch

def helper():
    return torch.ones(1 << 10).sum()

def train_step():
    x = torch.empty(1 << 18)
    return helper() + x.sum()

train_step()
"""
INLINED = """\
import torch

def train_step():
    x = torch.empty(1 << 18)
    return torch.ones(1 << 10).sum() + x.sum()

train_step()
"""


def test_a_function_on_one_side_is_named_and_fails_the_gate(tmp_path):
    old = saved_profile(tmp_path, "old", HELPED, functions=("train_step", "helper"))
    new = saved_profile(tmp_path, "new", INLINED)
    gone = "function helper (old.py:3) on cpu"
    proc = cli(old, new, "--fail-over", "100%")
    assert proc.stdout.rstrip().splitlines()[-1] == f"only in OLD: {gone}"
    assert proc.returncode == 1
    assert proc.stderr == f"pytorch_memlab diff: {gone} is missing from NEW (--fail-over 100%)\n"
    added = cli(new, old, "--fail-over", "100%")
    assert added.returncode == 0, added.stderr
    assert added.stdout.rstrip().splitlines()[-1] == f"only in NEW: {gone}"
    result = pytorch_memlab.diff(old, new)
    assert [fd.qualname for fd in result.functions] == ["train_step"]
    assert [item.text() for item in result.one_side] == [f"only in OLD: {gone}"]
