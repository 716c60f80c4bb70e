"""The pytest plugin (pytorch_memlab.pytest_plugin), run through pytester on
real CPU tensors: budgets, the line table in the failure, --memlab, the leak
check and xdist (bad input and the edges: test_pytest_plugin_checks.py)."""
import os
import re
from importlib import metadata
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
MODULE = "pytorch_memlab.pytest_plugin"


def _entry_point_installed() -> bool:
    return any(ep.value == MODULE for ep in metadata.entry_points(group="pytest11"))


# Installed (make check: pip install -e .), the entry point loads the plugin;
# from a bare checkout on PYTHONPATH it has to be named.
PLUGIN = [] if _entry_point_installed() else ["-p", MODULE]


@pytest.fixture
def run(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    # pytest prints whole short-summary lines under CI (CI / BUILD_NUMBER set)
    # and cuts them to the terminal's width elsewhere; the manual shows the latter.
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("BUILD_NUMBER", raising=False)

    def go(*args, subprocess=False):
        if subprocess:      # a fresh process: nothing live from earlier tests
            return pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", *args)
        # in-process, the plugin module is imported already: nothing to rewrite
        return pytester.runpytest(*PLUGIN, "-p", "no:cacheprovider",
                                  "-W", "ignore::pytest.PytestAssertRewriteWarning", *args)
    return go


def output_with_errors(run, pytester, errors, source):
    """pytest's output on ``source`` as test_bad.py, which must end in
    ``errors`` errors (a bad marker is an error, not a failure)."""
    pytester.makepyfile(test_bad=source)
    result = run("-q")
    result.assert_outcomes(errors=errors)
    return result.stdout.str()


BUDGETS = '''
import pytest, torch

@pytest.fixture
def held():
    return torch.empty(5 * 262144)           # 5 MiB live before the test starts

def helper(n):
    t = torch.empty(n)
    return t

@pytest.mark.memlab_limit(3 * 1024 * 1024 - 1, device="cpu")
def test_one_byte_over(held):
    x = torch.empty(262144)
    y = helper(524288)
    del x, y


@pytest.mark.memlab_limit("3 MiB", device="cpu")
def test_exactly_at_budget(held):
    x = torch.empty(262144)                  # 1 MiB
    y = torch.empty(524288)                  # 2 MiB: peak 3 MiB above held
    del x, y
'''


def test_budget_passes_at_and_fails_over_exact_bytes(run, pytester):
    pytester.makepyfile(test_budgets=BUDGETS)
    # a fresh process, the failing test first: the fixture's 5 MiB, allocated
    # before the test's first profiled line, must count as live at its start
    result = run("-q", subprocess=True)
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert ("memlab_limit: the test's peak on cpu was 3.00 MiB (3,145,728 bytes), over its "
            "budget of 3145727 B; that is live tensor memory above the 5.00 MiB "
            "(5,242,880 bytes) already live when the test started") in out
    assert "test_exactly_at_budget" not in out.split("FAILURES")[1]


def test_failure_shows_the_table_with_the_peak_line_and_the_helper(run, pytester):
    pytester.makepyfile(test_budgets=BUDGETS)
    out = run("-q", "-k", "over", subprocess=True).stdout.str()   # 5 MiB held, nothing else
    # the test's own table, the peak reached on the line calling helper
    assert re.search(r"^## test_one_byte_over$", out, re.M)
    assert re.search(r"^ +8\.00M +8\.00M +2\.00M +2\.00M +1 +14 +y = helper\(524288\)   <-- peak$",
                     out, re.M), out
    assert re.search(r"^ +6\.00M +6\.00M +1\.00M +1\.00M +1 +13 +x = torch.empty\(262144\)$",
                     out, re.M)
    # what the peak is made of
    assert re.search(r"^peak 8\.00M on line 14 \(call 1\): 5\.00M before the call, "
                     r"2\.00M line 14, 1\.00M line 13$", out, re.M), out
    # and helper's, where the peak was reached
    assert re.search(r"^## helper$", out, re.M)
    assert re.search(r"^ +8\.00M +8\.00M +2\.00M +2\.00M +1 +8 +t = torch.empty\(n\)"
                     r"   <-- peak \(inside this call\)$", out, re.M), out
    # with what its peak is made of: the test's 6 MiB were alive before its call
    assert re.search(r"^peak 8\.00M on line 8 \(call 1\): 6\.00M before the call, "
                     r"2\.00M line 8$", out, re.M), out
    # one breakdown line under each of the two tables, and none elsewhere
    assert len(re.findall(r"^peak ", out, re.M)) == 2


def test_memlab_lists_the_highest_peaks_like_durations(run, pytester):
    pytester.makepyfile(test_many='''
        import torch

        def test_one_mib():
            x = torch.empty(262144)

        def test_three_mib():
            x = torch.empty(262144)
            y = torch.empty(524288)

        def test_none():
            pass
    ''')
    result = run("-q", "--memlab", "--memlab-top", "2", "--memlab-device", "cpu")
    result.assert_outcomes(passed=3)
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if "memlab: peak live tensor memory, top 2 tests" in line)
    assert [line.split() for line in lines[start + 1:start + 3]] == [
        ["3.00M", "cpu", "test_many.py::test_three_mib"],
        ["1.00M", "cpu", "test_many.py::test_one_mib"]]
    assert "test_none" not in result.stdout.str()


def test_memlab_html_writes_failed_and_top_tests(run, pytester):
    pytester.makepyfile(test_budgets=BUDGETS, test_small="""
        import torch

        def test_small():
            x = torch.empty(1024)
    """)
    out_dir = pytester.path / "reports"
    run("-q", f"--memlab-html={out_dir}", "--memlab-top", "2")
    # the failed test, and the top 2 (both budget tests: 3 MiB each); not test_small
    assert sorted(p.name for p in out_dir.iterdir()) == [
        "test_budgets.py_test_exactly_at_budget.html", "test_budgets.py_test_one_byte_over.html"]
    page = (out_dir / "test_budgets.py_test_one_byte_over.html").read_text()
    assert "<h2>test_one_byte_over</h2>" in page and "<h2>helper</h2>" in page
    assert "pytorch_memlab: test_budgets.py::test_one_byte_over" in page
    assert page.count("<!DOCTYPE html>") == 1


LEAK = '''
import pytest, torch

kept = []

@pytest.mark.memlab_no_growth(device="cpu")
def test_leaks():
    scratch = torch.empty(524288)            # 2 MiB local: freed when the test returns
    kept.append(torch.empty(262144))         # 1 MiB that outlives the test

@pytest.mark.memlab_no_growth(device="cpu", tolerance="1 MiB")
def test_within_tolerance():
    kept.append(torch.empty(262144))

@pytest.mark.memlab_no_growth(device="cpu")
def test_cycle_is_collected():
    a = [torch.empty(262144)]
    a.append(a)                              # garbage only gc.collect() frees
'''


def test_no_growth_names_the_line_that_holds_memory(run, pytester):
    pytester.makepyfile(test_leak=LEAK)
    result = run("-q")
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    assert ("memlab_no_growth: 1.00 MiB (1,048,576 bytes) of tensors on cpu were still alive "
            "after the test returned (and gc.collect()), over the tolerance of 0 B") in out
    lines = result.stdout.lines
    start = lines.index("lines whose net growth holds them (bytes a line allocated and had not "
                        "freed when it ended), largest first:")
    assert lines[start + 1].startswith("  test_leak.py:8 (test_leaks)  +1.00M  kept.append(")
    # the local's line grew by more than is still alive: listed apart
    assert lines[start + 2].startswith("lines that grew by more than is still alive")
    assert lines[start + 3].startswith("  test_leak.py:7 (test_leaks)  +2.00M  scratch = ")
    assert lines[start + 4] == ""


EVERY_CALL = '''
import pytest, torch

cache = []

def step():
    x = torch.empty(262144)                  # 1 MiB, freed at return
    cache.append(torch.empty(65536))         # 256 KiB kept by every call
    return x.sum()

@pytest.mark.memlab_no_growth(device="cpu", functions=[step])
def test_steps():
    for _ in range(4):
        step()
'''


def test_no_growth_names_the_line_that_grows_every_call(run, pytester):
    """The message lists a profiled callee's line that grew in every call
    after the first (growth_per_call); its line that grew only
    while a call ran (x) is not listed there."""
    pytester.makepyfile(test_every=EVERY_CALL)
    result = run("-q")
    result.assert_outcomes(failed=1)
    lines = result.stdout.lines
    start = lines.index("lines that grew in every call after the first (least growth of one "
                        "call):")
    assert lines[start + 1] == ("  test_every.py:7 (step, 4 calls)  +256.00K per call  "
                                "cache.append(torch.empty(65536))         # 256 KiB kept by "
                                "every call")
    assert lines[start + 2] == ""


def test_xdist_two_workers_one_summary(run, pytester):
    pytest.importorskip("xdist")
    pytester.makepyfile(test_budgets=BUDGETS, test_leak=LEAK)
    reports = pytester.path / "reports"
    result = run("-n", "2", "--memlab-top", "0", "--memlab-device", "cpu",
                 f"--memlab-html={reports}")
    result.assert_outcomes(passed=3, failed=2)
    out = result.stdout.str()
    assert out.count("memlab: peak live tensor memory, all tests") == 1
    assert "memlab_limit: the test's peak on cpu was 3.00 MiB (3,145,728 bytes)" in out
    assert "memlab_no_growth: 1.00 MiB (1,048,576 bytes)" in out
    rows = {line.split()[-1]: line.split()[0] for line in result.stdout.lines
            if re.match(r"^ +[\d.]+[BKMG] +cpu +test_", line)}
    assert rows == {"test_budgets.py::test_exactly_at_budget": "3.00M",
                    "test_budgets.py::test_one_byte_over": "3.00M",
                    "test_leak.py::test_leaks": "3.00M",
                    "test_leak.py::test_within_tolerance": "1.00M",
                    "test_leak.py::test_cycle_is_collected": "1.00M"}
    # every test is in the summary (--memlab-top 0): one report each, written
    # by the controller from what the workers sent
    assert sorted(p.name for p in reports.iterdir()) == sorted(
        name.replace("::", "_") + ".html" for name in rows)
