"""Shared fixtures.  The whole suite runs once per tracer mechanism, chosen by
PYTORCH_MEMLAB_TRACER (see .ci/run); capability flags decide skips."""
import gc
import importlib.util
import signal
import sys

import pytest

from helpers import TEST_DIRS

# The test modules import helpers and each other across test/'s folders by part
# (under xdist too: each worker loads this file).
sys.path[:0] = [path for path in TEST_DIRS if path not in sys.path]

# A suite started in the background by a non-interactive shell (nohup ... &)
# inherits SIGINT ignored, and so would every program the tests start: Python
# then never raises KeyboardInterrupt, and the Ctrl-C tests see no Ctrl-C.
# Programs run from a terminal get it: give them the same (handlers reset to
# the default across exec, an ignored signal stays ignored).
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

HAVE_TORCH = importlib.util.find_spec("torch") is not None


def _cuda_available() -> bool:
    if not HAVE_TORCH:
        return False
    import torch
    return torch.cuda.is_available()


HAVE_CUDA = _cuda_available()


def pytest_collection_modifyitems(config, items):
    """The one CUDA gate: a test marked ``cuda`` skips without a CUDA device."""
    if HAVE_CUDA:
        return
    no_cuda = pytest.mark.skip(reason="no CUDA device")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(no_cuda)


def pytest_report_header(config):
    from pytorch_memlab import _tracer
    return (f"pytorch_memlab tracer mechanism: {_tracer.MECHANISM}; "
            f"torch: {HAVE_TORCH}; cuda: {HAVE_CUDA}; python {sys.version.split()[0]}")


@pytest.fixture(autouse=True)
def _no_earlier_garbage():
    """CPU memory is counted for the whole process: an earlier test's tensors
    left in reference cycles, collected in the middle of a test, would be
    frees it did not make.  Collected before each test instead."""
    gc.collect()
    yield
