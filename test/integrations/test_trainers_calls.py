"""Each training step is one call in both training callbacks' tables (CPU):
a step that keeps 1 MiB more than the one before, trained 6 steps with the
tables printed every 3.  Every printed table (steps 1-3, steps 4-6, the
whole fit) counts the calls of its steps; its peak line names the highest
figure of the table, made of parts that sum to it, and the curve is that
step's; the line that keeps the MiB is marked as growing every call by it
(see check_calls); the saved file has the first step apart from the later
ones.  The table of a framework's own method leaves out its lines that
never ran."""
import contextlib
import io
import os

import pytest

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
    os.environ[_name] = "1"

torch = pytest.importorskip("torch")

from helpers import MiB, checked_peak, line_of  # noqa: E402
from pytorch_memlab import load  # noqa: E402
from pytorch_memlab.common.sizes import readable_size  # noqa: E402
from pytorch_memlab.reports.peak_text import peak_line  # noqa: E402
from pytorch_memlab.integrations.step_profiler import StepProfiler  # noqa: E402

STEPS, EVERY, IN, BATCH = 6, 3, 16, 2
# each printed table: its steps, and the last, where the memory kept peaks
TABLES = {"training steps 1-3": (3, 3), "training steps 4-6": (3, 6),
          "6 training steps": (6, 6)}
KEEP = "self.kept.append(torch.zeros(MiB // 4))"     # float32: 1 MiB


class Fit:
    """One training run: what it printed, and each printed table's records as
    they were then ({heading: {qualname: (record as a dict, its peak line)}})."""

    def __init__(self, monkeypatch, train):
        self.tables = {}
        original = StepProfiler._print

        def spy(profiler, records, what):
            self.tables[what] = {r.qualname: (r.to_dict(), peak_line(r))
                                 for r in records.values()}
            original(profiler, records, what)

        monkeypatch.setattr(StepProfiler, "_print", spy)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            train()
        monkeypatch.undo()
        self.text = out.getvalue()

    def section(self, what, qualname):
        """The printed table of ``qualname`` under the heading ``what``."""
        text = self.text[self.text.index(f"Callback: {what}\n"):]
        text = text[text.index(f"## {qualname}\n"):]
        ends = [i for i in (text.find("\n## ", 1), text.find("\n# pytorch_memlab", 1)) if i > 0]
        return text[:min(ends, default=len(text))]


def ran_line(fit, qualname, code):
    """The number of the line of ``qualname`` that ran and holds ``code``."""
    record, _ = fit.tables["6 training steps"][qualname]
    (lineno,) = [ln["lineno"] for ln in record["lines"] if ln["count"] and code in ln["code"]]
    return lineno


def check_calls(fit, qualname, code):
    """Every table of ``qualname`` as the module docstring says; ``code`` is
    in the line that keeps the MiB.  Its growth per call is the MiB less
    what the tracer charges it of the bytes freed between two steps, a few
    hundred here (it guesses which line's growth a free released, and the
    framework frees the step's batch, loss and gradients after it), as a
    LineProfiler around the same loop shows it."""
    lineno = ran_line(fit, qualname, code)
    assert list(fit.tables) == list(TABLES)
    for what, (steps, last) in TABLES.items():
        record, peak_text = fit.tables[what][qualname]
        assert record["calls"] == steps, (what, record["calls"])
        peak, _ = checked_peak(record)
        assert peak["call"] == last
        # the curve kept is that call's, numbered among the calls so far
        assert (record["curve_of"]["call"], record["curve_of"]["calls"]) == (last, last)
        (line,) = [ln for ln in record["lines"] if ln["lineno"] == lineno]
        assert line["count"] == steps and line["net_growth"] >= steps * MiB
        growth = line["growth_per_call"]
        assert MiB - 1024 < growth <= MiB, (what, line)
        shown = fit.section(what, qualname)
        assert peak_text.startswith("peak ") and peak_text in shown.splitlines()
        (row,) = [r for r in shown.splitlines() if code in r and f" {lineno} " in r]
        assert row.endswith(f"<-- grows every call (+{readable_size(growth)})"), row
    return lineno


def check_start_levels(fit, qualname):
    """What was alive when the calls began, as the folded tables keep it: the
    first call's is step 1's; the later calls' is that of step 6, where the
    kept MiB make the peak, in the whole fit as in steps 4-6."""
    levels = {what: fit.tables[what][qualname][0]["start_level"] for what in TABLES}
    early, late = levels["training steps 1-3"], levels["training steps 4-6"]
    whole = levels["6 training steps"]
    assert whole["first_call"] == early["first_call"] is not None and late["first_call"] is None
    assert whole["later_calls"] == late["later_calls"] is not None
    assert early["later_calls"] < late["later_calls"]
    # steps 1 to 5 each left a kept MiB alive before step 6 began
    assert whole["later_calls"] - early["first_call"] >= (STEPS - 1) * MiB


def check_by_call(saved, qualname, lineno):
    """The saved fit has the first step apart from the 5 after it."""
    (record,) = saved.stats(qualname)
    assert record["calls"] == STEPS
    (line,) = [ln for ln in record["lines"] if ln["lineno"] == lineno]
    assert line["first_call"]["count"] == 1 and line["first_call"]["net_growth"] >= MiB
    assert line["later_calls"]["count"] == STEPS - 1
    assert line["later_calls"]["net_growth"] >= (STEPS - 1) * MiB
    out = io.StringIO()
    saved.print_stats(qualname, by_call=True, stream=out)
    (row,) = [r for r in out.getvalue().splitlines() if f" {lineno} " in r]
    counts = [cell for cell in row.split() if cell.isdigit()]
    assert counts[:3] == ["1", str(STEPS - 1), str(STEPS)], row   # first, later, all


def framework_rows(fit, qualname):
    """The rows of the fit's table of a framework method: each one ran."""
    rows = fit.section("6 training steps", qualname).splitlines()
    rows = rows[rows.index("") + 1:]
    body = rows[3:rows.index("")]      # after the group rule and the two title rows
    # a row that ran starts with its peak ("6.01M"), one that did not with its number
    assert body and not [r for r in body if r.split()[0].isdigit()], body
    return body


# ---- Lightning --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lightning_fit(tmp_path_factory):
    L = pytest.importorskip("lightning")
    from pytorch_memlab.lightning import MemlabCallback

    class Leaky(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Linear(IN, 1)
            self.kept = []

        def training_step(self, batch, batch_idx):
            self.kept.append(torch.zeros(MiB // 4))     # float32: 1 MiB
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    tmp_path = tmp_path_factory.mktemp("lightning")
    data = torch.utils.data.TensorDataset(torch.randn(BATCH * STEPS, IN))
    trainer = L.Trainer(max_steps=STEPS, accelerator="cpu", devices=1, logger=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False, default_root_dir=str(tmp_path),
                        callbacks=[MemlabCallback(every_n_steps=EVERY,
                                                  save=tmp_path / "fit.json",
                                                  html=tmp_path / "fit.html")])
    monkeypatch = pytest.MonkeyPatch()
    fit = Fit(monkeypatch, lambda: trainer.fit(
        Leaky(), torch.utils.data.DataLoader(data, batch_size=BATCH)))
    return fit, Leaky, L, load(tmp_path / "fit.json"), (tmp_path / "fit.html").read_text()


def test_lightning_training_step_is_one_call_per_step(lightning_fit):
    fit, Leaky, _, saved, _ = lightning_fit
    qualname = Leaky.training_step.__qualname__
    lineno = check_calls(fit, qualname, KEEP)
    assert lineno == line_of(Leaky.training_step, KEEP)
    check_by_call(saved, qualname, lineno)
    check_start_levels(fit, qualname)


def test_lightning_optimizer_step_is_one_call_per_step(lightning_fit):
    fit, Leaky, L, saved, html = lightning_fit
    qualname = "LightningModule.optimizer_step"
    code = "optimizer.step(closure=optimizer_closure)"
    check_by_call(saved, qualname, check_calls(fit, qualname, code))
    # Lightning's method: its signature and docstring are left out
    (row,) = framework_rows(fit, qualname)
    assert code in row
    # the module's own method keeps them
    assert "def training_step(self, batch, batch_idx):" in \
        fit.section("6 training steps", Leaky.training_step.__qualname__)
    # the callback's HTML report as printed
    assert code in html and "def optimizer_step(" not in html
    assert "def training_step(self, batch, batch_idx):" in html


# ---- Hugging Face ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def hf_fit(tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from pytorch_memlab.transformers import MemlabTrainerCallback

    class LeakyLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(IN, 1)
            self.kept = []

        def forward(self, x, labels=None):
            self.kept.append(torch.zeros(MiB // 4))     # float32: 1 MiB
            return {"loss": self.linear(x).pow(2).mean()}

    class Rows(torch.utils.data.Dataset):
        def __len__(self):
            return BATCH * STEPS

        def __getitem__(self, i):
            return {"x": torch.full((IN,), float(i))}

    tmp_path = tmp_path_factory.mktemp("hf")
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=STEPS, report_to=[], use_cpu=True,
        per_device_train_batch_size=BATCH, save_strategy="no", disable_tqdm=True,
        logging_steps=STEPS)
    callback = MemlabTrainerCallback(every_n_steps=EVERY, save=tmp_path / "train.json")
    trainer = transformers.Trainer(model=LeakyLM(), args=args, train_dataset=Rows(),
                                   callbacks=[callback])
    monkeypatch = pytest.MonkeyPatch()
    fit = Fit(monkeypatch, trainer.train)
    return fit, LeakyLM, transformers, load(tmp_path / "train.json")


def test_hf_forward_is_one_call_per_step(hf_fit):
    fit, LeakyLM, _, saved = hf_fit
    qualname = LeakyLM.forward.__qualname__
    lineno = check_calls(fit, qualname, KEEP)
    assert lineno == line_of(LeakyLM.forward, KEEP)
    check_by_call(saved, qualname, lineno)
    check_start_levels(fit, qualname)


def test_hf_training_step_is_one_call_per_step(hf_fit):
    fit, _, transformers, saved = hf_fit
    code = "loss = self.compute_loss(model, inputs"
    check_by_call(saved, "Trainer.training_step",
                  check_calls(fit, "Trainer.training_step", code))
    # the Trainer's method: only its lines that ran
    assert len(framework_rows(fit, "Trainer.training_step")) < 30
