"""Two lists of line texts aligned like a text diff: a longest common
subsequence, found by Myers' greedy algorithm (O((n + m) * D) time, D the
number of lines inserted or deleted).

Before Myers runs, the common head and tail are set aside and so is every
text found on one side only (it can match nothing), as GNU diff does: a pair
of long, mostly equal functions costs what their few differences cost, and
two unrelated ones cost almost nothing.  Past MAX_EDITS differences (lines
reordered wholesale) the match is no longer the longest: the texts found
once on each side are matched in order (patience diff's anchors) and Myers
runs between them, so time and memory stay bounded.
"""
from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from typing import Optional, Sequence

Pair = tuple[Optional[int], Optional[int]]
# Myers keeps one row per edit for its walk back: O(MAX_EDITS ** 2) memory.
MAX_EDITS = 1000


def align(old: Sequence[str], new: Sequence[str]) -> list[Pair]:
    """Pairs of indexes (None: no partner), in order: equal texts matched
    along a longest common subsequence; between two matches, the old lines
    left over (deleted) come before the new ones (inserted)."""
    pairs: list[Pair] = []
    i = j = 0
    for a, b in _common(old, new) + [(len(old), len(new))]:
        pairs += [(k, None) for k in range(i, a)]
        pairs += [(None, k) for k in range(j, b)]
        if a < len(old):
            pairs.append((a, b))
        i, j = a + 1, b + 1
    return pairs


def _common(old: Sequence[str], new: Sequence[str]) -> list[tuple[int, int]]:
    """The matched (old index, new index) of a longest common subsequence."""
    n, m = len(old), len(new)
    head = 0
    while head < n and head < m and old[head] == new[head]:
        head += 1
    tail = 0
    while tail < n - head and tail < m - head and old[n - 1 - tail] == new[m - 1 - tail]:
        tail += 1
    in_old, in_new = set(old[head:n - tail]), set(new[head:m - tail])
    # the middle's lines that can match, as small ints (cheap to compare)
    keep_a = [k for k in range(head, n - tail) if old[k] in in_new]
    keep_b = [k for k in range(head, m - tail) if new[k] in in_old]
    codes: dict[str, int] = {}
    a = [codes.setdefault(old[k], len(codes)) for k in keep_a]
    b = [codes.setdefault(new[k], len(codes)) for k in keep_b]
    middle = [(keep_a[x], keep_b[y]) for x, y in _middle(a, b)]
    return ([(k, k) for k in range(head)] + middle
            + [(n - tail + k, m - tail + k) for k in range(tail)])


def _middle(a: Sequence[int], b: Sequence[int]) -> list[tuple[int, int]]:
    """Myers' matches, or past MAX_EDITS, anchors and Myers between them."""
    found = _myers(a, b)
    if found is not None:
        return found
    matched: list[tuple[int, int]] = []
    px = py = -1
    for x, y in _anchors(a, b) + [(len(a), len(b))]:
        gap = _myers(a[px + 1:x], b[py + 1:y]) or []
        matched += [(px + 1 + i, py + 1 + j) for i, j in gap]
        if x < len(a):
            matched.append((x, y))
        px, py = x, y
    return matched


def _anchors(a: Sequence[int], b: Sequence[int]) -> list[tuple[int, int]]:
    """The texts found once in ``a`` and once in ``b``, matched along the
    longest run in the same order in both."""
    count_a, count_b = Counter(a), Counter(b)
    where_b = {code: y for y, code in enumerate(b) if count_b[code] == 1}
    unique = [(x, where_b[code]) for x, code in enumerate(a)
              if count_a[code] == 1 and code in where_b]
    tails: list[int] = []           # tails[L]: least y ending an increasing run of L + 1
    ends: list[int] = []            # the index in unique of that run's end
    before: list[int] = []          # each item's predecessor in its run
    for index, (_, y) in enumerate(unique):
        at = bisect_left(tails, y)
        before.append(ends[at - 1] if at else -1)
        if at == len(tails):
            tails.append(y)
            ends.append(index)
        else:
            tails[at], ends[at] = y, index
    run, k = [], ends[-1] if ends else -1
    while k >= 0:
        run.append(unique[k])
        k = before[k]
    run.reverse()
    return run


def _myers(a: Sequence[int], b: Sequence[int]) -> Optional[list[tuple[int, int]]]:
    """Matched index pairs of a shortest edit script from ``a`` to ``b``;
    None when it takes more than MAX_EDITS edits."""
    n, m = len(a), len(b)
    if not n or not m:
        return []
    offset = n + m + 1
    v = [0] * (2 * offset + 1)      # diagonal k = x - y -> furthest x reached
    trace: list[list[int]] = []     # v before each round d, for the walk back
    for d in range(min(n + m, MAX_EDITS) + 1):
        trace.append(v[offset - d - 1:offset + d + 2])
        for k in range(-d, d + 1, 2):
            if k == -d or (k != d and v[offset + k - 1] < v[offset + k + 1]):
                x = v[offset + k + 1]           # down: b[y - 1] inserted
            else:
                x = v[offset + k - 1] + 1       # right: a[x - 1] deleted
            y = x - k
            while x < n and y < m and a[x] == b[y]:
                x, y = x + 1, y + 1
            v[offset + k] = x
            if x >= n and y >= m:
                return _walk_back(trace, a, b)
    return None


def _walk_back(trace: list[list[int]], a: Sequence[int],
               b: Sequence[int]) -> list[tuple[int, int]]:
    """The diagonal steps (matches) of the path that the rounds in ``trace``
    found, from its end back to (0, 0), returned in order."""
    x, y = len(a), len(b)
    matched: list[tuple[int, int]] = []
    for d in range(len(trace) - 1, -1, -1):
        row = trace[d]                       # v[k] is row[k + d + 1]
        k = x - y
        if k == -d or (k != d and row[k - 1 + d + 1] < row[k + 1 + d + 1]):
            prev_k = k + 1
        else:
            prev_k = k - 1
        prev_x = row[prev_k + d + 1] if d else 0
        prev_y = prev_x - prev_k if d else 0
        start_x = prev_x if prev_k == k + 1 else prev_x + 1
        if d == 0:
            start_x = 0
        while x > start_x:
            x, y = x - 1, y - 1
            matched.append((x, y))
        x, y = prev_x, prev_y
    matched.reverse()
    return matched
