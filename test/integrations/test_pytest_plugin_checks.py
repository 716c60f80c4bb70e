"""The pytest plugin's checks and edges: bad budgets and marker arguments, a
missing CUDA device, no cost when unused, the manual's failure sample as pytest
prints it, and budgets on the device."""
import re

import pytest

from pytorch_memlab.common.sizes import parse_size
from test_pytest_plugin import MODULE, PLUGIN, ROOT, output_with_errors, run  # noqa: E402

pytest_plugins = ["pytester"]
pytest.importorskip("torch")


@pytest.mark.parametrize("budget, message", [
    ('"64 MX"', "unknown unit 'MX' in '64 MX'"),
    ('"64"', "'64' is not a size"),
    ("-1", "-1 is negative"),
    ("True", "not bool True"),
    ('"1.5 B"', "'1.5 B' is not a whole number of bytes"),
])
def test_bad_budget_is_an_error_naming_the_accepted_forms(run, pytester, budget, message):
    out = output_with_errors(run, pytester, 1, f'''
        import pytest

        @pytest.mark.memlab_limit({budget}, device="cpu")
        def test_it():
            pass
    ''')
    assert "test_bad.py::test_it: @pytest.mark.memlab_limit budget: " in out
    assert message in out
    if "whole number" not in message:
        assert "'64 KB', '64 KiB'" in out and "KB/MB/GB = 1000**n bytes" in out
    assert "During handling" not in out


def test_bad_marker_arguments(run, pytester):
    out = output_with_errors(run, pytester, 2, '''
        import pytest

        @pytest.mark.memlab_limit("1 MiB", device="gpu")
        def test_device():
            pass

        @pytest.mark.memlab_no_growth("1 MiB")
        def test_positional():
            pass
    ''')
    assert "device='gpu'; expected 'cpu', 'cuda' or 'cuda:N'" in out
    assert "@pytest.mark.memlab_no_growth takes only the keywords device=, tolerance=" in out


def test_sizes():
    assert parse_size("64 KB", "x") == 64_000
    assert parse_size("64 KiB", "x") == 65_536
    assert parse_size("1.5MB", "x") == 1_500_000
    assert parse_size("1.5 mib", "x") == 1_572_864
    assert parse_size("2 GB", "x") == 2_000_000_000
    assert parse_size("2 GiB", "x") == 2 * 1024 ** 3
    assert parse_size(" 512 B ", "x") == 512
    assert parse_size(4096, "x") == 4096
    assert parse_size("0", "x") == parse_size(" 0.0 ", "x") == parse_size("0B", "x") == 0
    with pytest.raises(ValueError, match="'5' is not a size"):
        parse_size("5", "x")                 # bytes or KiB? only zero needs no unit
    with pytest.raises(TypeError, match="x: expected"):
        parse_size(1.5, "x")


MISSING = '''
import pytest

@pytest.mark.memlab_limit("1 MiB", device="cuda:64")
def test_on_gpu_64():
    pass
'''


def test_missing_cuda_device_skips_by_default(run, pytester):
    pytester.makepyfile(test_gpu=MISSING)
    result = run("-q", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED [[]1[]] test_gpu.py:*: memlab: device='cuda:64' but *"])


@pytest.mark.parametrize("how", ["option", "ini"])
def test_missing_cuda_device_fails_when_asked(run, pytester, how):
    pytester.makepyfile(test_gpu=MISSING)
    if how == "ini":
        pytester.makeini("[pytest]\nmemlab_missing_cuda = fail\n")
        result = run("-q")
    else:
        result = run("-q", "--memlab-missing-cuda=fail")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*test_gpu.py::test_on_gpu_64: memlab: device='cuda:64' but *"
                                 "(memlab_missing_cuda = fail)"])


def test_unused_plugin_imports_no_torch_and_adds_no_hooks(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makepyfile(test_plain='''
        import sys

        def test_nothing_loaded(request):
            assert "torch" not in sys.modules
            assert not request.config.pluginmanager.has_plugin("memlab-runtime")
            assert request.config.pluginmanager.has_plugin("''' + ("memlab" if not PLUGIN else MODULE) + '''")
    ''')
    result = pytester.runpytest_subprocess(*PLUGIN, "-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=1)


def _manual_blocks():
    """The fenced blocks of the manual's page on pytest, docs/pytest.md."""
    return re.findall(r"^```(\w*)\n(.*?)^```\n", (ROOT / "docs" / "pytest.md").read_text(),
                      re.S | re.M)


def _without_timing(lines):
    return [re.sub(r" in [\d.]+s$", "", line.rstrip()) for line in lines]


def test_manual_failure_output_is_what_pytest_prints(run, pytester):
    """The manual's page on pytest shows a run as printed: run it again."""
    torch = pytest.importorskip("torch")
    blocks = _manual_blocks()
    source = next(code for lang, code in blocks if code.startswith("# test_attention.py"))
    # the page's first two outputs
    failure, summary = [code for lang, code in blocks if lang == "text"][:2]
    pytester.makepyfile(test_attention=source)
    result = run("-q", subprocess=True)
    result.assert_outcomes(passed=1, failed=1)
    if torch.cuda.is_available():
        return          # the manual shows a CPU run; any torch prints it alike
    assert _without_timing(result.stdout.lines) == _without_timing(failure.splitlines())
    shown = run("-q", "--memlab", subprocess=True).stdout.lines
    start = shown.index(summary.splitlines()[0])
    assert shown[start:start + 3] == summary.splitlines()


CUDA_BUDGETS = '''
import pytest, torch

@pytest.mark.memlab_limit("3 MiB", device="cuda")
def test_at_budget():
    x = torch.empty(262144, device="cuda")        # 1 MiB
    y = torch.empty(524288, device="cuda")        # 2 MiB
    del x, y

@pytest.mark.memlab_limit(3 * 1024 * 1024 - 1)    # default device: the current GPU
def test_over():
    x = torch.empty(262144, device="cuda")
    y = torch.empty(524288, device="cuda")
    del x, y
'''


@pytest.mark.cuda
def test_cuda_budget_and_summary(run, pytester):
    pytester.makepyfile(test_gpu=CUDA_BUDGETS)
    result = run("-q", "--memlab", subprocess=True)
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    index = __import__("torch").cuda.current_device()
    assert (f"memlab_limit: the test's peak on cuda:{index} was 3.00 MiB (3,145,728 bytes), "
            "over its budget of 3145727 B") in out
    assert re.search(rf"^ +3\.00M +cuda:{index} +test_gpu.py::test_at_budget$", out, re.M)
