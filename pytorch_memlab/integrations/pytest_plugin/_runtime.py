"""The per-test hooks, registered only when ``--memlab`` is given or a
collected test carries a memlab marker (see ``__init__``)."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Optional

import pytest

from ._markers import LIMIT, NO_GROWTH, Request, check_device, requests_of

if TYPE_CHECKING:
    from ._measure import Measured

PEAK_PROPERTY = "memlab_peak"           # (device, bytes) in a call report's user_properties
MISSING_CUDA = ("skip", "fail")


@dataclass
class Plan:
    """What to measure for one test, devices resolved."""
    requests: list[tuple[Request, str]]   # (request, "cpu" / "cuda:N")
    callees: bool                          # profile the module's functions too


def report_name(nodeid: str) -> str:
    """A file name for a test's HTML report: the node id, made safe."""
    name = re.sub(r"[^\w.-]+", "_", nodeid).strip("_") or "test"
    return name[:150] + ".html"


def _skip_at_test(why: str) -> None:
    """Skip, reported at the test's location rather than at this line."""
    try:
        raise pytest.skip.Exception(why, _use_item_location=True)
    except TypeError:       # a pytest without that argument
        pytest.skip(why)


def _torch_missing() -> Optional[str]:
    """Why torch cannot be imported (one line), or None when it can."""
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        return f"import torch failed ({type(exc).__name__}: {exc})"
    return None


class MemlabRuntime:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.html_dir: Optional[str] = config.getoption("memlab_html")
        self.save_path: Optional[str] = config.getoption("memlab_save")
        self.compare_path: Optional[str] = config.getoption("memlab_compare")
        self.profile_all = bool(config.getoption("memlab") or self.html_dir or self.save_path
                                or self.compare_path)
        self._gate_setup(config)
        missing = _torch_missing() if self.profile_all else None
        if missing is not None:
            raise pytest.UsageError(f"--memlab measures tensor memory, which needs torch: "
                                    f"{missing}")
        self.top: int = config.getoption("memlab_top")
        self.device = check_device(config.getoption("memlab_device"), "--memlab-device")
        missing = config.getoption("memlab_missing_cuda") or config.getini("memlab_missing_cuda")
        if missing not in MISSING_CUDA:
            raise pytest.UsageError(f"memlab_missing_cuda = {missing!r}: expected 'skip' or 'fail'")
        self.missing_cuda = missing
        self.is_worker = hasattr(config, "workerinput")
        self.plans: dict[str, Plan] = {}
        self.peaks: dict[str, tuple[int, str]] = {}     # nodeid -> (peak, device), from reports
        self.kept: list[tuple[int, str, dict[str, Any]]] = []     # local top tests' profiles
        self.from_workers: list[tuple[int, str, dict[str, Any]]] = []
        if self.device is not None and self.device.startswith("cuda") and self.profile_all:
            import torch
            if not torch.cuda.is_available():
                raise pytest.UsageError(f"--memlab-device={self.device} but CUDA is not available")
        if self.html_dir:
            os.makedirs(self.html_dir, exist_ok=True)

    def _gate_setup(self, config: pytest.Config) -> None:
        from ._gate import parse_increase, read_baseline
        text = config.getoption("memlab_fail_on_increase")
        self.increase_text: str = text or ""
        self.increase = parse_increase(text)
        if self.compare_path and self.increase is None:
            raise pytest.UsageError("--memlab-compare needs --memlab-fail-on-increase SIZE|PCT "
                                    "(e.g. 16MiB or 5%)")
        if self.increase is not None and not self.compare_path:
            raise pytest.UsageError("--memlab-fail-on-increase needs --memlab-compare FILE")
        self.baseline = read_baseline(self.compare_path) if self.compare_path else {}
        self.saved: dict[str, Any] = {}

    # ---- before the test --------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        try:
            requests = requests_of(item)
            error = None
        except (TypeError, ValueError) as exc:
            error = f"{item.nodeid}: {exc}"
        if error is not None:       # raised here, not in the except: no chained traceback
            pytest.fail(error, pytrace=False)
        if requests and (not isinstance(item, pytest.Function)
                         or type(item).__name__ == "TestCaseFunction"):
            pytest.fail(f"{item.nodeid}: memlab markers work on pytest test functions, "
                        f"not on {type(item).__name__} items", pytrace=False)
        if self.profile_all and isinstance(item, pytest.Function) \
                and type(item).__name__ != "TestCaseFunction":
            requests.append(Request("profile", self.device))
        if not requests:
            return
        missing = _torch_missing()
        if missing is not None:     # one line, not the import's traceback
            pytest.fail(f"{item.nodeid}: pytorch_memlab measures tensor memory, which needs "
                        f"torch: {missing}", pytrace=False)
        from ._measure import count_cpu_from_now, resolve_device
        self._check_cuda(item, requests)
        plan = Plan([(r, resolve_device(r.device)) for r in requests],
                    callees=any(r.kind != "profile" for r in requests))
        if any(device == "cpu" for _, device in plan.requests):
            count_cpu_from_now()
        self.plans[item.nodeid] = plan

    def _check_cuda(self, item: pytest.Item, requests: list[Request]) -> None:
        wanted = [r.device for r in requests if r.device and r.device.startswith("cuda")]
        if not wanted:
            return
        import torch
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        for device in wanted:
            index = int(device.split(":")[1]) if ":" in device else 0
            if index < count:
                continue
            why = (f"memlab: device={device!r} but "
                   + ("CUDA is not available" if not count else f"only {count} GPU(s) are visible"))
            if self.missing_cuda == "skip":
                _skip_at_test(why)
            pytest.fail(f"{item.nodeid}: {why} (memlab_missing_cuda = fail)", pytrace=False)

    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        self.plans.pop(item.nodeid, None)

    # ---- the test call ----------------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> Iterator[Any]:
        plan = self.plans.get(pyfuncitem.nodeid)
        if plan is None:
            return (yield)
        from ._measure import Measured, module_functions
        callees = list(module_functions(pyfuncitem.module)) if plan.callees else []
        for request, _ in plan.requests:
            callees.extend(request.functions)
        measured = Measured(pyfuncitem.obj, callees, [d for _, d in plan.requests],
                            collect=any(r.kind == NO_GROWTH for r, _ in plan.requests))
        measured.start()
        try:
            result = yield
        except BaseException as exc:
            measured.stop(exc)
            self._after(pyfuncitem, plan, measured, failed=True)
            raise
        measured.stop(None)
        failures = self._after(pyfuncitem, plan, measured, failed=False)
        if failures:
            pytest.fail("\n\n".join(failures), pytrace=False)
        return result

    def _after(self, item: pytest.Function, plan: Plan, measured: Measured,
               failed: bool) -> list[str]:
        from ._messages import growth_failure, limit_failure
        failures = []
        for request, device in plan.requests:
            result = measured.result(device)
            if request.kind == "profile":
                item.user_properties.append((PEAK_PROPERTY, (device, result.peak)))
                self._keep(result.peak, item.nodeid, measured)
                failure = self._gate(item, device, result.peak, measured, failed)
                if failure:
                    failures.append(failure)
            elif failed:
                continue
            elif request.kind == LIMIT and result.peak > request.size:
                failures.append(limit_failure(request, result))
            elif request.kind == NO_GROWTH and result.growth > request.size:
                failures.append(growth_failure(request, result))
        if (failed or failures) and self.html_dir:
            self._write_html(item.nodeid, measured.to_dict())
        return failures

    def _gate(self, item: pytest.Function, device: str, peak: int, measured: Measured,
              failed: bool) -> Optional[str]:
        if not (self.save_path or self.compare_path):
            return None
        from ._gate import DOC_PROPERTY, increase_failure
        doc = measured.test_dict(item.nodeid)
        if self.save_path:
            item.user_properties.append((DOC_PROPERTY, doc))
        old = self.baseline.get(item.nodeid)
        if failed or old is None or self.increase is None:
            return None
        return increase_failure(old, peak, doc, self.increase, self.increase_text)

    # ---- the tests with the highest peaks ---------------------------------------

    def _keep(self, peak: int, nodeid: str, measured: Measured) -> None:
        if not self.html_dir:
            return
        # ranked as the summary ranks: highest peak first, then node id
        if self.top > 0 and len(self.kept) == self.top and \
                (-peak, nodeid) > (-self.kept[-1][0], self.kept[-1][1]):
            return
        self.kept.append((peak, nodeid, measured.to_dict()))
        self.kept.sort(key=lambda entry: (-entry[0], entry[1]))
        if self.top > 0:
            del self.kept[self.top:]

    def _write_html(self, nodeid: str, data: dict[str, Any]) -> None:
        from ...html_report import write_report
        assert self.html_dir is not None
        write_report(data, os.path.join(self.html_dir, report_name(nodeid)),
                     title_text=f"pytorch_memlab: {nodeid}")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call":
            return
        for name, value in report.user_properties:
            if name == PEAK_PROPERTY:
                pair: Any = value               # (device, bytes), as _after appended
                self.peaks[report.nodeid] = (int(pair[1]), str(pair[0]))
            elif name == "memlab_profile" and report.nodeid in self.peaks:
                peak, device = self.peaks[report.nodeid]
                self.saved[report.nodeid] = {"peak": peak, "device": device, "profile": value}

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """xdist, on the controller: a worker's top tests' profiles."""
        output = getattr(node, "workeroutput", None) or {}
        self.from_workers.extend(tuple(entry) for entry in output.get("memlab_top", []))

    def _ranked(self) -> list[tuple[str, int, str]]:
        rows = sorted(((peak, nodeid, device) for nodeid, (peak, device) in self.peaks.items()),
                      key=lambda row: (-row[0], row[1]))
        rows = rows if self.top <= 0 else rows[:self.top]
        return [(nodeid, peak, device) for peak, nodeid, device in rows]

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.save_path and not self.is_worker:
            from ._gate import write_saved
            write_saved(self.save_path, self.saved)
        if not self.html_dir:
            return
        if self.is_worker:
            output = self.config.workeroutput  # type: ignore[attr-defined]  # xdist
            output["memlab_top"] = [list(e) for e in self.kept]
            return
        wanted = {nodeid for nodeid, _, _ in self._ranked()}
        for _, nodeid, data in self.kept + self.from_workers:
            if nodeid in wanted:
                self._write_html(nodeid, data)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.profile_all or self.is_worker:
            return
        from ...common.sizes import readable_size
        rows = self._ranked()
        what = "all tests" if self.top <= 0 else \
            f"top {len(rows)} test{'' if len(rows) == 1 else 's'}"
        terminalreporter.write_sep("=", f"memlab: peak live tensor memory, {what}")
        if not rows:
            terminalreporter.write_line("(no test was profiled)")
        for nodeid, peak, device in rows:
            terminalreporter.write_line(f"{readable_size(peak):>9}  {device:<7} {nodeid}")
        if self.html_dir:
            terminalreporter.write_line(f"HTML reports of failed and top tests in {self.html_dir}")
        if self.compare_path:
            absent = sorted(n for n in self.peaks if n not in self.baseline)
            for nodeid in absent:
                terminalreporter.write_line(f"memlab: {nodeid} is not in {self.compare_path}: "
                                            "passed without a comparison")
        if self.save_path:
            terminalreporter.write_line(f"memlab: wrote {len(self.saved)} test peaks to "
                                        f"{self.save_path}")
