"""Shared fixtures.  The whole suite runs once per tracer mechanism, chosen by
PYTORCH_MEMLAB_TRACER (see .ci/run); capability flags decide skips."""
import importlib.util
import sys

import pytest

from helpers import TEST_DIRS

# The test modules import helpers and each other across test/'s folders by part
# (under xdist too: each worker loads this file).
sys.path[:0] = [path for path in TEST_DIRS if path not in sys.path]

HAVE_TORCH = importlib.util.find_spec("torch") is not None


def _cuda_available() -> bool:
    if not HAVE_TORCH:
        return False
    import torch
    return torch.cuda.is_available()


HAVE_CUDA = _cuda_available()

requires_torch = pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
requires_cuda = pytest.mark.skipif(not HAVE_CUDA, reason="no CUDA device")


def pytest_report_header(config):
    from pytorch_memlab import _tracer
    return (f"pytorch_memlab tracer mechanism: {_tracer.MECHANISM}; "
            f"torch: {HAVE_TORCH}; cuda: {HAVE_CUDA}; python {sys.version.split()[0]}")
