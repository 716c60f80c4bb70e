"""Both training callbacks on CUDA, one run each, figures printed (run on the
device; skipped without CUDA or without the frameworks: the device needs
lightning, transformers and accelerate installed)."""
import contextlib
import io
import os

import pytest

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_DISABLE_TELEMETRY"):
    os.environ[_name] = "1"

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.cuda


def _check(peaks, logged, printed):
    print(printed)
    print("step peaks:", list(peaks))
    print("logged:", logged)
    assert len(peaks) == 3
    assert logged == [(float(p.active_bytes), float(p.reserved_bytes)) for p in peaks]
    assert all(p.reserved_bytes >= p.active_bytes > 0 for p in peaks)
    assert "cuda:0" in printed


def test_lightning_callback_on_cuda(tmp_path):
    L = pytest.importorskip("lightning")
    from pytorch_memlab.lightning import METRICS, MemlabCallback

    class MLP(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                           torch.nn.Linear(4096, 1024))

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters())

    data = torch.utils.data.TensorDataset(torch.randn(192, 1024), torch.randn(192, 1024))
    callback = MemlabCallback(save=tmp_path / "prof.json")
    logged = []

    class Record(L.Callback):
        def on_train_batch_end(self, trainer, *args):
            logged.append(tuple(trainer.callback_metrics[m].item() for m in METRICS))

    trainer = L.Trainer(max_steps=3, accelerator="cuda", devices=1,
                        callbacks=[callback, Record()], logger=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False, default_root_dir=str(tmp_path))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        trainer.fit(MLP(), torch.utils.data.DataLoader(data, batch_size=64))
    _check(callback.steps.peaks, logged, out.getvalue())
    params = sum(p.numel() * p.element_size() for p in trainer.lightning_module.parameters())
    # Adam's state and the grads (3x the parameters) stay on the GPU after step 1
    assert callback.steps.peaks[1].active_bytes >= 4 * params


def test_transformers_callback_on_cuda(tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate")
    from pytorch_memlab.transformers import METRICS, MemlabTrainerCallback

    class Tokens(torch.utils.data.Dataset):
        def __init__(self):
            self.ids = torch.randint(0, 128, (6, 16), generator=torch.Generator().manual_seed(0))

        def __len__(self):
            return len(self.ids)

        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": self.ids[i]}

    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=2, n_embd=64, vocab_size=128, n_positions=16, n_head=2))
    callback = MemlabTrainerCallback()
    args = transformers.TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=3,
                                          report_to=[], per_device_train_batch_size=2,
                                          logging_steps=1, save_strategy="no",
                                          disable_tqdm=True)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Tokens(),
                                   callbacks=[callback])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        trainer.train()
    logged = [(float(e[METRICS[0]]), float(e[METRICS[1]]))
              for e in trainer.state.log_history if "loss" in e]
    printed = out.getvalue()
    _check(callback.steps.peaks, logged, printed)
    assert "## GPT2LMHeadModel.forward" in printed
    (logits,) = [line for line in printed.splitlines()
                 if "logits = self.lm_head(hidden_states" in line]   # [:, slice] in newer
    # on CUDA too, the logits of 3 forwards stay alive: 3 x 2 x 16 x 128 floats
    assert "48.00K" in logits.split()
