"""What the benchmarks share: a loop of trivial lines, unrelated pure-Python
code and adjacent on/off timing pairs (bench/ is on sys.path when a bench
runs as a script)."""


def hot(n):
    """Eleven line events per iteration (the for line and ten assignments),
    no allocation and no call."""
    a = 0
    for _ in range(n):
        a = 1
        a = 2
        a = 3
        a = 4
        a = 5
        a = 6
        a = 7
        a = 8
        a = 9
        a = 10
    return a


def helper(i):
    return i * 2 + 1


def unrelated(n):
    """Pure Python with calls, loops and attribute lookups: what the
    benchmarks never register, timed to see what profiling costs elsewhere."""
    total = 0
    items = []
    for i in range(n):
        total += helper(i)
        if i % 7 == 0:
            items.append(total)
    return total + len(items)


def pairs(measure_on, measure_off, repeats):
    """Adjacent (on, off) measurements; which goes first flips every repeat,
    so slow drift of a shared machine falls on both sides alike."""
    on, off = [], []
    for r in range(repeats):
        if r % 2:
            on.append(measure_on())
            off.append(measure_off())
        else:
            off.append(measure_off())
            on.append(measure_on())
    return on, off
