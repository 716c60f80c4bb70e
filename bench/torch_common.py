"""bench_torch.py's shared parts: the device, the old package's loading and
enabling (NA where it cannot be measured), quiet runs, host memory, the
targets."""
import contextlib
import gc
import importlib
import io
import os
import sys
import threading

import torch

import bench_cli  # noqa: E402  (bench/ is on sys.path when run as a script)
from pytorch_memlab import _tracer

TARGETS = {"per_line_us": 0.5, "unrelated_ratio": 1.02, "train_ratio": 1.10,
           "cli_unrelated_ratio": bench_cli.TARGET, "bytes_per_event": "flat"}
# "flat": what a call leaves behind, at 1,000,002 and 10,000,002 line events,
# within the curve's two buffers (kept and live) of CURVE_MAX_POINTS 32-byte points
CURVE_BOUND = 2 * _tracer.CURVE_MAX_POINTS * 32


class Env:
    def __init__(self):
        self.cuda = torch.cuda.is_available()
        if self.cuda:
            self.index = torch.cuda.current_device()
            self.dev = f"cuda:{self.index}"
        else:
            self.index = 0
            self.dev = "cpu"

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.index)


def load_old():
    """(module, None) or (None, why not)."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            old = importlib.import_module("old_pytorch_memlab")
            prof_mod = importlib.import_module("old_pytorch_memlab.line_profiler.profile")
    except Exception as exc:  # not installed, no pandas, no calmsize...
        return None, f"{type(exc).__name__}: {exc}"
    # its profile() prints each decorated function's table at exit: not here
    prof_mod.global_line_profiler.print_stats = lambda *a, **k: None
    return old, None


def quiet(func, *args, **kwargs):
    """Run ``func`` with stdout swallowed (the old package prints on CPU)."""
    with contextlib.redirect_stdout(io.StringIO()):
        return func(*args, **kwargs)


def ours_events(prof, func):
    return sum(line["count"] for rec in prof.stats(func) for line in rec["lines"])


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def settle():
    gc.collect()
    gc.collect()


class NA(Exception):
    """The old package cannot be measured here (reason in the message)."""


def measure_old(out, func, *args):
    """out["old"] = func(*args), or out["old_na"] = why it could not be
    measured: a failure on the old side must not stop ours."""
    try:
        out["old"] = func(*args)
    except NA as exc:
        out["old_na"] = str(exc)
    except Exception as exc:
        out["old_na"] = f"{type(exc).__name__}: {exc}"
    finally:
        # the old package leaves its trace functions installed
        sys.settrace(None)
        threading.settrace(None)
    return out


NO_CUDA = "it reads CUDA statistics only: without CUDA its enable() does nothing"


def old_enable(prof):
    """Enable an old LineProfiler; NA where it refuses (no CUDA: it prints and returns)."""
    quiet(type(prof).enable, prof)
    if not prof.enabled:
        raise NA(NO_CUDA)
