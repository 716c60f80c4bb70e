"""pytest plugin: memory budgets and leak checks per test, and ``--memlab``.

Registered through the ``pytest11`` entry point.  This module only adds the
options and markers: the hooks that measure tests (``_runtime``) are
registered when ``--memlab`` (or ``--memlab-html``) is given or a collected
test carries ``memlab_limit`` / ``memlab_no_growth``.  Otherwise no hook runs
per test and torch is not imported.
"""
from __future__ import annotations

from typing import Any

import pytest

from ._markers import MARKERS, has_marker

_RUNTIME = "memlab-runtime"


# (flag, addoption's settings): the command line options, in --help's order
OPTIONS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("--memlab", dict(action="store_true", default=False,
                      help="profile every test's function and list the tests with the highest "
                           "peak of live tensor memory at the end")),
    ("--memlab-top", dict(type=int, default=10, metavar="N",
                          help="how many tests the --memlab summary lists (0: all; default 10)")),
    ("--memlab-html", dict(metavar="DIR", default=None,
                           help="write an HTML line report for each failed test and each test "
                                "of the summary into DIR (implies --memlab)")),
    ("--memlab-device", dict(metavar="DEVICE", default=None,
                             help="device --memlab reads: cpu, cuda or cuda:N (default: the "
                                  "current CUDA device, else cpu)")),
    ("--memlab-missing-cuda", dict(choices=("skip", "fail"), default=None,
                                   help="a test whose memlab marker names a CUDA device that is "
                                        "not there is skipped (default) or fails; overrides the "
                                        "ini option")),
    ("--memlab-save", dict(metavar="FILE", default=None,
                           help="write every profiled test's peak and table to FILE: a "
                                "line profile (JSON), each test a function named by its node "
                                "id, that `python -m pytorch_memlab view` and `diff` read "
                                "(implies --memlab)")),
    ("--memlab-compare", dict(metavar="FILE", default=None,
                              help="compare each test's peak with FILE (from --memlab-save; "
                                   "implies --memlab); see --memlab-fail-on-increase")),
    ("--memlab-fail-on-increase", dict(metavar="SIZE|PCT", default=None,
                                       help="with --memlab-compare: fail a test whose peak grew "
                                            "by more than this (e.g. 16MiB or 5%%)")),
)
# the options that turn the per-test profiling on (--memlab itself and those
# that imply it)
ACTIVATING = ("memlab", "memlab_html", "memlab_save", "memlab_compare")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("memlab", "pytorch_memlab: tensor memory per test")
    for flag, settings in OPTIONS:
        group.addoption(flag, **settings)
    parser.addini("memlab_missing_cuda", default="skip",
                  help="skip (default) or fail: a test whose memlab marker names a "
                       "CUDA device that is not there")


def _activate(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin(_RUNTIME):
        from ._runtime import MemlabRuntime
        config.pluginmanager.register(MemlabRuntime(config), _RUNTIME)


def pytest_configure(config: pytest.Config) -> None:
    for doc in MARKERS.values():
        config.addinivalue_line("markers", doc)
    if any(config.getoption(name) for name in ACTIVATING):
        _activate(config)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config,
                                   items: list[pytest.Item]) -> None:
    if not config.pluginmanager.has_plugin(_RUNTIME) and any(map(has_marker, items)):
        _activate(config)
