"""pytorch_memlab.transformers.MemlabTrainerCallback in a real Hugging Face
Trainer (CPU, no network): a 2-layer GPT-2 built from its config, trained 3
steps on a tiny in-memory dataset."""
import contextlib
import io
import json
import os

import pytest

# nothing may be fetched: the model is built from its config, the data made here
for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE",
              "HF_HUB_DISABLE_TELEMETRY"):
    os.environ[_name] = "1"

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

from pytorch_memlab import load  # noqa: E402
from pytorch_memlab.transformers import KIND_METRIC, METRICS, MemlabTrainerCallback  # noqa: E402

from helpers import line_of  # noqa: E402

VOCAB, SEQ, BATCH, STEPS = 128, 16, 2, 3


class Tokens(torch.utils.data.Dataset):
    """Random token ids, the labels the ids themselves (causal LM)."""

    def __init__(self, n=BATCH * STEPS):
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, VOCAB, (n, SEQ), generator=generator)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def gpt2():
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=64, vocab_size=VOCAB, n_positions=SEQ,
                                     n_head=2)
    return transformers.GPT2LMHeadModel(config)


def make_trainer(tmp_path, model, callbacks=(), **options):
    options = {"logging_steps": 1, **options}
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=STEPS, report_to=[],
        per_device_train_batch_size=BATCH, use_cpu=True, save_strategy="no",
        disable_tqdm=True, **options)
    return transformers.Trainer(model=model, args=args, train_dataset=Tokens(),
                                callbacks=list(callbacks))


def train(trainer):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        trainer.train()
    return out.getvalue()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("train")
    callback = MemlabTrainerCallback(save=tmp_path / "prof.json")
    trainer = make_trainer(tmp_path, gpt2(), [callback])
    return trainer, callback, train(trainer), tmp_path


def test_logs_carry_the_step_peaks(trained):
    trainer, callback, _, _ = trained
    steps = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert [entry["step"] for entry in steps] == [1, 2, 3]
    assert [(e[METRICS[0]], e[METRICS[1]]) for e in steps] == \
        [tuple(peak) for peak in callback.steps.peaks]
    assert all(isinstance(e[METRICS[0]], int) for e in steps)
    # and the kinds at each step's highest peak: the model's parameters among them
    params = sum(p.untyped_storage().nbytes() for p in trainer.model.parameters())
    assert [e[KIND_METRIC + "parameter"] for e in steps] == [params] * len(steps)
    assert [{k[len(KIND_METRIC):]: v for k, v in e.items() if k.startswith(KIND_METRIC)}
            for e in steps] == callback.steps.kinds


def test_forward_and_training_step_tables_are_printed(trained):
    _, _, printed, _ = trained
    assert "# pytorch_memlab MemlabTrainerCallback: 3 training steps" in printed
    assert "## GPT2LMHeadModel.forward" in printed
    assert "## Trainer.training_step" in printed
    (logits,) = [line for line in printed.splitlines()
                 if "logits = self.lm_head(hidden_states" in line]   # [:, slice] in newer
    lineno = line_of(transformers.GPT2LMHeadModel.forward, "logits = self.lm_head(")
    # after the peak columns and the held-at-peak cell: net growth, count, line
    assert logits.split()[3:6] == ["48.00K", "3", str(lineno)]


def test_figures_that_follow_from_the_shapes(trained):
    _, callback, _, tmp_path = trained
    saved = load(tmp_path / "prof.json")
    (forward,) = saved.stats("GPT2LMHeadModel.forward")
    lineno = line_of(transformers.GPT2LMHeadModel.forward, "logits = self.lm_head(")
    (line,) = [ln for ln in forward["lines"] if ln["lineno"] == lineno]
    # each forward's logits stay alive (the loss needs them): batch x seq x vocab floats
    assert line["count"] == STEPS
    assert line["net_growth"] == STEPS * BATCH * SEQ * VOCAB * 4
    (step,) = saved.stats("Trainer.training_step")
    ran = [ln for ln in step["lines"] if ln["count"]]
    assert max(ln["active_bytes.all.peak"] for ln in ran) == \
        max(p.active_bytes for p in callback.steps.peaks)
    # the peak of the forward is inside training_step's
    assert max(ln["active_bytes.all.peak"] for ln in forward["lines"] if ln["count"]) <= \
        max(ln["active_bytes.all.peak"] for ln in ran)
    doc = json.loads((tmp_path / "prof.json").read_text())
    assert [row["call"] for row in doc["timeline"]] == [1, 2, 3]


def test_a_log_every_two_steps_carries_the_higher_peak(tmp_path):
    callback = MemlabTrainerCallback(device="cpu")
    trainer = make_trainer(tmp_path, gpt2(), [callback], logging_steps=2)
    train(trainer)
    peaks = callback.steps.peaks
    (logged,) = [e for e in trainer.state.log_history if "loss" in e]
    assert logged["step"] == 2
    assert logged[METRICS[0]] == max(peaks[0].active_bytes, peaks[1].active_bytes)
    # the last step's peak goes with the closing summary (train_runtime, ...)
    (summary,) = [e for e in trainer.state.log_history if "train_runtime" in e]
    assert summary[METRICS[0]] == peaks[2].active_bytes


class Boom(torch.nn.Module):
    """A model whose forward asks the CPU allocator for more than any machine has."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(SEQ, 1)

    def forward(self, input_ids, labels=None):
        kept = torch.empty(1 << 20, dtype=torch.uint8)                # 1 MiB
        huge = torch.empty(1 << 62, dtype=torch.uint8)
        return {"loss": self.linear(input_ids.float()).sum() + kept.sum() + huge.sum()}


@pytest.mark.parametrize("added", ["init", "add_callback"])
def test_impossible_allocation_prints_the_postmortem_and_reraises(tmp_path, added):
    callback = MemlabTrainerCallback(device="cpu")
    if added == "init":
        trainer = make_trainer(tmp_path, Boom(), [callback])
    else:
        trainer = make_trainer(tmp_path, Boom())
        trainer.add_callback(callback)
    out = io.StringIO()
    with pytest.raises(RuntimeError, match="can't allocate memory") as raised, \
            contextlib.redirect_stdout(out):
        trainer.train()
    assert type(raised.value) is RuntimeError
    tb = raised.value.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    assert tb.tb_frame.f_code is Boom.forward.__code__
    printed = out.getvalue()
    assert "then RuntimeError in step 1" in printed
    (huge,) = [line for line in printed.splitlines() if "huge = torch.empty(1 << 62" in line]
    assert huge.endswith("<-- RuntimeError raised here")
    assert "Out of memory (RuntimeError) in Boom.forward on cpu" in printed
    assert f"({1 << 62:,} bytes)" in printed
    # the trainer's own methods are its class's again once training is over
    assert "training_step" not in vars(trainer)


def test_unknown_function_name_is_one_error(tmp_path):
    callback = MemlabTrainerCallback(functions=["forwrd"])
    with pytest.raises(ValueError, match="GPT2LMHeadModel has no method 'forwrd'"):
        train(make_trainer(tmp_path, gpt2(), [callback]))
