"""pytorch_memlab.lightning.MemlabCallback in a real Lightning Trainer (CPU).

A tiny MLP LightningModule trained 3 steps on random data: its training_step
table, the per-step metrics Lightning logs, the saved files, and the
post-mortem of an allocation the CPU allocator cannot make.  The tests that
need Lightning skip without it; those about importing run everywhere."""
import csv
import gc
import json
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from helpers import line_of, saved_line  # noqa: E402

FRAMEWORK_MODULES = ("lightning", "pytorch_lightning", "transformers")


def _blocked_import(module, names):
    """Import ``module`` in a fresh interpreter where ``names`` cannot be
    imported: (returncode, stderr)."""
    code = textwrap.dedent(f"""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in {names!r}:
                    raise ImportError(f"No module named {{name!r}} (blocked)")
        sys.meta_path.insert(0, Block())
        import {module}
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    return proc.returncode, proc.stderr


def test_importing_pytorch_memlab_imports_no_framework():
    code = textwrap.dedent(f"""
        import sys
        import pytorch_memlab
        from pytorch_memlab import LineProfiler, profile, load
        import pytorch_memlab.integrations.step_profiler, pytorch_memlab.line_profiler
        loaded = [m for m in {FRAMEWORK_MODULES!r} if m in sys.modules]
        assert not loaded, loaded
        print("ok")
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


@pytest.mark.parametrize("module, extra", [
    ("pytorch_memlab.lightning", "pytorch-memlab[lightning]"),
    ("pytorch_memlab.transformers", "pytorch-memlab[transformers]"),
], ids=["lightning", "transformers"])
def test_callback_without_its_framework_is_one_import_error(module, extra):
    rc, err = _blocked_import(module, FRAMEWORK_MODULES)
    assert rc != 0
    last = err.strip().splitlines()[-1]
    assert last.startswith("ImportError: ") and extra in last, err


# ---- with Lightning ------------------------------------------------------------------

L = pytest.importorskip("lightning")

from pytorch_memlab import load  # noqa: E402
from pytorch_memlab.lightning import KIND_METRIC, METRICS, MemlabCallback  # noqa: E402

IN, HIDDEN, OUT, BATCH, STEPS = 64, 128, 8, 4, 3


class MLP(L.LightningModule):
    """Manual optimization, so that the optimizer's step is a line of
    training_step (with automatic optimization Lightning calls it outside)."""

    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.net = torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.ReLU(),
                                       torch.nn.Linear(HIDDEN, OUT))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        opt = self.optimizers()
        loss = torch.nn.functional.mse_loss(self(x), y)
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters())


class Impossible(MLP):
    def training_step(self, batch, batch_idx):
        x, _ = batch
        kept = torch.empty(1 << 20, dtype=torch.uint8)                # 1 MiB
        huge = torch.empty(1 << 62, dtype=torch.uint8)                # no machine has it
        return x.sum() + kept.sum() + huge.sum()


def loader():
    data = torch.utils.data.TensorDataset(torch.randn(BATCH * STEPS, IN),
                                          torch.randn(BATCH * STEPS, OUT))
    return torch.utils.data.DataLoader(data, batch_size=BATCH)


def trainer(tmp_path, callback, **options):
    return L.Trainer(max_steps=STEPS, accelerator="cpu", devices=1, callbacks=[callback],
                     logger=L.pytorch.loggers.CSVLogger(str(tmp_path / "logs"), name="run"),
                     log_every_n_steps=1, enable_progress_bar=False,
                     enable_model_summary=False, enable_checkpointing=False,
                     default_root_dir=str(tmp_path), **options)


def logged_rows(tmp_path):
    """The CSV logger's rows that carry the callback's metrics."""
    (path,) = (tmp_path / "logs").rglob("metrics.csv")
    with open(path, newline="") as f:
        return [row for row in csv.DictReader(f) if row.get(METRICS[0])]


def training_step_record(profile):
    (record,) = [r for r in profile.stats() if r["qualname"] == "MLP.training_step"]
    return record


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """One fit of 3 steps, shared by the tests that read it: (model, callback,
    trainer, printed text, folder)."""
    tmp_path = tmp_path_factory.mktemp("fit")
    callback = MemlabCallback(save=tmp_path / "prof.json", html=tmp_path / "prof.html",
                              every_n_steps=2)
    model = MLP()
    fit = trainer(tmp_path, callback)
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        fit.fit(model, loader())
    return model, callback, fit, out.getvalue(), tmp_path


def test_optimizer_line_shows_the_adam_state_made_on_step_one(fitted):
    model, callback, _, _, tmp_path = fitted
    record = training_step_record(load(tmp_path / "prof.json"))
    lineno = line_of(MLP.training_step, "opt.step()")
    (line,) = [ln for ln in record["lines"] if ln["lineno"] == lineno]
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    state = model.optimizers().optimizer.state
    moments = sum(s[k].nbytes for s in state.values() for k in ("exp_avg", "exp_avg_sq"))
    counters = sum(s["step"].nbytes for s in state.values())    # one 0-d tensor per parameter
    assert moments == 2 * params
    assert line["count"] == STEPS
    # made on step 1 only (later steps update in place): 2x the parameters, plus
    # Adam's step counters
    assert line["net_growth"] == 2 * params + counters
    assert line["net_growth"] - counters == 2 * (IN * HIDDEN + HIDDEN + HIDDEN * OUT + OUT) * 4


def test_each_step_logs_its_peak_by_kind(fitted):
    model, callback, _, _, tmp_path = fitted
    rows = logged_rows(tmp_path)
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    assert [float(row[KIND_METRIC + "parameter"]) for row in rows] == [float(params)] * STEPS
    assert len(callback.steps.kinds) == STEPS
    for row, kinds in zip(rows, callback.steps.kinds):
        assert sum(kinds.values()) > params
        assert {k: float(row[KIND_METRIC + k]) for k in kinds} == \
            {k: float(v) for k, v in kinds.items()}


def test_logged_metric_per_step_equals_the_profilers_peak(fitted):
    _, callback, fit, _, tmp_path = fitted
    peaks = callback.steps.peaks
    assert len(peaks) == STEPS
    rows = logged_rows(tmp_path)
    assert [int(row["step"]) for row in rows] == list(range(STEPS))
    assert [(float(row[METRICS[0]]), float(row[METRICS[1]])) for row in rows] == \
        [(float(p.active_bytes), float(p.reserved_bytes)) for p in peaks]
    assert fit.callback_metrics[METRICS[0]].item() == peaks[-1].active_bytes
    assert fit.callback_metrics[METRICS[1]].item() == peaks[-1].reserved_bytes
    # the fit's table is the max over the steps: its highest line is the highest step
    record = training_step_record(load(tmp_path / "prof.json"))
    ran = [ln for ln in record["lines"] if ln["count"]]
    assert max(ln["active_bytes.all.peak"] for ln in ran) == max(p.active_bytes for p in peaks)
    assert max(ln["reserved_bytes.all.peak"] for ln in ran) == \
        max(p.reserved_bytes for p in peaks)


def test_tables_printed_every_n_steps_and_at_the_end(fitted):
    _, _, _, printed, _ = fitted
    assert printed.count("## MLP.training_step") == 2
    window = printed.index("# pytorch_memlab MemlabCallback: training steps 1-2")
    end = printed.index("# pytorch_memlab MemlabCallback: 3 training steps")
    assert window < end
    # the window's table counts 2 runs of each line, the fit's 3
    code = "opt.step()"
    counts = [int(line.split()[-3]) for line in printed.splitlines()
              if line.rstrip().endswith(code)]
    assert counts == [2, 3]


def test_json_and_html_are_written(fitted):
    _, _, _, _, tmp_path = fitted
    doc = json.loads((tmp_path / "prof.json").read_text())
    assert doc["format"] == "pytorch_memlab.line_profile"
    assert doc["devices"] == ["cpu"]
    assert [row["call"] for row in doc["timeline"]] == [1, 2, 3]   # memory after each step
    assert "MLP.training_step" in {f["qualname"] for f in doc["functions"]}
    assert "MLP.training_step" in (tmp_path / "prof.html").read_text()


def test_impossible_allocation_prints_the_postmortem_and_reraises(tmp_path, capsys):
    callback = MemlabCallback(save=tmp_path / "prof.json")
    with pytest.raises(RuntimeError, match="can't allocate memory") as raised:
        trainer(tmp_path, callback).fit(Impossible(), loader())
    # the allocator's own exception, raised in training_step, reaches the caller
    assert type(raised.value) is RuntimeError
    frames = []
    tb = raised.value.__traceback__
    while tb is not None:
        frames.append(tb.tb_frame.f_code.co_name)
        tb = tb.tb_next
    assert frames[-1] == "training_step"
    out = capsys.readouterr().out
    (huge,) = [line for line in out.splitlines() if "huge = torch.empty(1 << 62" in line]
    assert huge.endswith("<-- RuntimeError raised here")
    # peak, reserved, held at peak, net growth, count, then the line number
    assert huge.split()[5] == str(line_of(Impossible.training_step, "huge = "))
    assert "Out of memory (RuntimeError) in Impossible.training_step on cpu" in out
    assert f"requested             4096.00P ({1 << 62:,} bytes)" in out
    kept = line_of(Impossible.training_step, "kept = ")
    assert f"1.00M  assigned at test_lightning.py:{kept}" in [
        line.split("uint8")[-1].split("(1048576,)")[-1].strip() for line in out.splitlines()
        if line.split()[:1] == ["kept"]]
    assert "# pytorch_memlab MemlabCallback: 0 training steps, then RuntimeError in step 1" in out
    saved = json.loads((tmp_path / "prof.json").read_text())
    (record,) = [f for f in saved["functions"] if f["qualname"] == "Impossible.training_step"]
    assert record["postmortem"]["requested_bytes"] == 1 << 62


class Automatic(L.LightningModule):
    """Automatic optimization: Lightning runs training_step, backward and Adam
    inside the module's optimizer_step."""

    def __init__(self):
        super().__init__()
        self.net = MLP().net

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters())


def test_automatic_optimization_profiles_optimizer_step_where_the_step_peaks(tmp_path):
    callback = MemlabCallback(save=tmp_path / "prof.json")
    model = Automatic()
    # CPU memory is the process's: earlier tests' tensors in reference cycles,
    # collected inside optimizer.step, would count as that line's frees
    gc.collect()
    gc.disable()
    try:
        trainer(tmp_path, callback).fit(model, loader())
    finally:
        gc.enable()
    saved = load(tmp_path / "prof.json")
    (hook,) = saved.stats("LightningModule.optimizer_step")
    (line,) = [ln for ln in hook["lines"] if ln["count"]]
    assert "optimizer.step(closure=optimizer_closure)" in line["code"]
    # the grads and Adam's state, made on step 1, are left behind by this line
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    assert line["net_growth"] >= 3 * params
    (step,) = saved.stats("Automatic.training_step")
    forward_peak = max(ln["active_bytes.all.peak"] for ln in step["lines"] if ln["count"])
    peaks = callback.steps.peaks
    assert max(p.active_bytes for p in peaks) == line["active_bytes.all.peak"] > forward_peak
    rows = logged_rows(tmp_path)
    assert [float(row[METRICS[0]]) for row in rows] == [float(p.active_bytes) for p in peaks]


def test_functions_by_name(tmp_path, capsys):
    callback = MemlabCallback(functions=["forward"], device="cpu")
    trainer(tmp_path, callback).fit(MLP(), loader())
    out = capsys.readouterr().out
    assert "## MLP.forward" in out and "## MLP.training_step" in out
    assert "return self.net(x)" in out


def test_unknown_function_name_is_one_error(tmp_path):
    with pytest.raises(ValueError, match="MLP has no method 'training_stp'"):
        trainer(tmp_path, MemlabCallback(functions=["training_stp"])).fit(MLP(), loader())


@pytest.mark.parametrize("options, message", [
    ({"every_n_steps": 0}, "every_n_steps must be an int >= 1"),
    ({"html": "report.txt"}, "html='report.txt': the file name must end in .html or .htm"),
], ids=["every", "html"])
def test_bad_arguments(options, message):
    with pytest.raises(ValueError, match=message):
        MemlabCallback(**options)


def test_bad_save_name_fails_when_the_fit_starts(tmp_path):
    with pytest.raises(ValueError, match=r"save='prof.txt': the file name must end in "
                                         r"\.json or \.csv"):
        trainer(tmp_path, MemlabCallback(save="prof.txt")).fit(MLP(), loader())


DDP_SCRIPT = '''
import torch
import lightning as L
from pytorch_memlab.lightning import MemlabCallback


class Net(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(64, 8)

    def training_step(self, batch, batch_idx):
        x, y = batch
        extra = torch.zeros(1024 * (self.global_rank + 1))   # rank 1: twice as much
        return torch.nn.functional.mse_loss(self.net(x), y) + extra.sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    data = torch.utils.data.TensorDataset(torch.randn(16, 64), torch.randn(16, 8))
    trainer = L.Trainer(max_steps=2, accelerator="cpu", devices=2, strategy="ddp",
                        callbacks=[MemlabCallback(save="prof/")], logger=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False)
    trainer.fit(Net(), torch.utils.data.DataLoader(data, batch_size=4))
'''


def test_ddp_writes_rank_files_and_rank_zero_prints_the_merged_table(tmp_path):
    """Two CPU processes (gloo), started by Lightning's own launcher."""
    import os
    from pathlib import Path
    (tmp_path / "train.py").write_text(DDP_SCRIPT)
    root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [root] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    proc = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("# 2 of 2 ranks: rank 0, rank 1") == 1, proc.stdout
    assert "── rank 1 (cpu) ──" in proc.stdout
    for rank in (0, 1):
        doc = json.loads((tmp_path / "prof" / f"rank{rank}.json").read_text())
        assert doc["rank"]["rank"] == rank and doc["rank"]["world_size"] == 2
        line = saved_line(doc, "Net.training_step", "extra = torch.zeros")
        assert line["count"] == 2
        # levels are the process's: DDP's own threads may free a few bytes meanwhile
        assert abs(line["net_growth"] - 2 * 1024 * 4 * (rank + 1)) < 256
