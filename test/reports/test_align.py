"""``common.align``: the line alignment of ``diff`` (no torch needed).  Its
speed on a 20,000-line pair is measured by bench/bench_diff.py, not here."""
import random

import pytest

from pytorch_memlab.common import align as align_module
from pytorch_memlab.common.align import align


def lcs_length(a, b):
    """The textbook table, the reference the alignment must reach."""
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(len(a) - 1, -1, -1):
        for j in range(len(b) - 1, -1, -1):
            table[i][j] = (table[i + 1][j + 1] + 1 if a[i] == b[j]
                           else max(table[i + 1][j], table[i][j + 1]))
    return table[0][0]


def check(a, b, pairs):
    """Every index once, in order; matched pairs have equal texts."""
    assert [i for i, _ in pairs if i is not None] == list(range(len(a)))
    assert [j for _, j in pairs if j is not None] == list(range(len(b)))
    matched = [(i, j) for i, j in pairs if i is not None and j is not None]
    assert all(a[i] == b[j] for i, j in matched)
    return matched


def test_inserted_and_deleted_lines_do_not_shift_the_rest():
    old = ["def f():", "a = 1", "b = 2", "", "return a + b"]
    new = ["def f():", "x = 0", "a = 1", "", "c = 3", "return a + b"]
    assert align(old, new) == [(0, 0), (None, 1), (1, 2), (2, None), (3, 3), (None, 4),
                               (4, 5)]


def test_a_changed_line_is_deleted_then_inserted_and_repeats_pair_in_order():
    old = ["a", "", "x = 1", "", "b"]
    new = ["a", "", "x = 2", "", "b"]
    assert align(old, new) == [(0, 0), (1, 1), (2, None), (None, 2), (3, 3), (4, 4)]
    assert align([], ["a"]) == [(None, 0)] and align(["a"], []) == [(0, None)]


def test_a_longest_common_subsequence_on_random_lines():
    rng = random.Random(7)
    for _ in range(500):
        a = [rng.choice("abcde") for _ in range(rng.randrange(0, 14))]
        b = [rng.choice("abcdef") for _ in range(rng.randrange(0, 14))]
        assert len(check(a, b, align(a, b))) == lcs_length(a, b), (a, b)


def test_past_max_edits_the_alignment_stays_valid(monkeypatch):
    """Lines reordered wholesale: anchors, then Myers between them; every
    line still appears once, matches are equal texts, the lines found once on
    each side in the same order still match."""
    monkeypatch.setattr(align_module, "MAX_EDITS", 3)
    old = [f"line {k}" for k in range(40)] + [""] * 5
    new = list(reversed(old[:20])) + old[20:]
    matched = check(old, new, align(old, new))
    assert [(i, j) for i, j in matched if i >= 20] == [(i, i) for i in range(20, 45)]
    rng = random.Random(3)
    for _ in range(200):
        a = [rng.choice("abcdefgh") for _ in range(rng.randrange(0, 20))]
        b = [rng.choice("abcdefghij") for _ in range(rng.randrange(0, 20))]
        check(a, b, align(a, b))


@pytest.mark.parametrize("size", [0, 1, 50])
def test_equal_lists_match_every_line(size):
    lines = [f"x{k % 7}" for k in range(size)]
    assert align(lines, lines) == [(k, k) for k in range(size)]
