"""The code bench_torch.py profiles or times: a hot loop of small tensor
ops, unrelated pure Python, and a small function for each package to
decorate."""
import timing  # noqa: E402  (bench/ is on sys.path when run as a script)


def hot_loop(x, n):
    """Five line events per iteration: the for line and four small ops."""
    for _ in range(n):
        x = x + 1
        x = x - 1
        x = x * 1
        x = x + 1
    return x


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def unrelated(n):
    """Pure Python: recursion, then a loop calling small functions."""
    return fib(20) + timing.unrelated(n)


def ours_decorated(x):
    y = x + 1
    z = y * 2
    return z


def old_decorated(x):
    y = x + 1
    z = y * 2
    return z
