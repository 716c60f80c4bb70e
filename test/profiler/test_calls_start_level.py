"""What was alive when the calls began (record["start_level"]): a train step
whose first call makes Adam's state has a later peak higher by exactly that
state, and the first-call note says so instead of blaming lines; the key's
round trip, and a version 4 file (written before it existed) still loads."""
import io
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
shim = pytest.importorskip("pytorch_memlab._torchshim")

from torch import nn  # noqa: E402

from pytorch_memlab import LineProfiler, load  # noqa: E402
from pytorch_memlab.common.sizes import readable_size  # noqa: E402
from pytorch_memlab.records.document import SCHEMA_VERSION  # noqa: E402

V4_FILE = Path(__file__).resolve().parents[1] / "reports" / "data" / "train_step_v4.json"
PEAK = "active_bytes.all.peak"


def text(source, **kwargs):
    out = io.StringIO()
    source.print_stats(stream=out, **kwargs)
    return out.getvalue()


def note_of(source):
    return next(row for row in text(source).splitlines() if row.startswith("note:"))


def profiled_train_steps(calls=4):
    """(profiler, the step, Adam's state bytes, the CPU source's active bytes
    read just before each call): a real step whose first call makes the
    optimizer's state; its backward is the peak of every call."""
    torch.manual_seed(0)
    net = nn.Linear(1024, 1024)
    opt = torch.optim.Adam(net.parameters())
    x = torch.randn(1536, 1024)

    def train_step():
        out = net(x)
        loss = out.pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()

    active = shim.fields("cpu").index("active_bytes.all.current")
    levels = []
    prof = LineProfiler(train_step, device="cpu")
    with prof:
        for _ in range(calls):
            levels.append(shim.sample("cpu", 0)[active])
            train_step()
    state = sum(t.untyped_storage().nbytes() for s in opt.state.values() for t in s.values())
    return prof, train_step, state, levels


def peaks(record):
    first = max(ln["first_call"][PEAK] for ln in record["lines"]
                if ln["first_call"][PEAK] is not None)
    later = max(ln["later_calls"][PEAK] for ln in record["lines"]
                if ln["later_calls"][PEAK] is not None)
    return first, later


def test_adam_state_made_by_the_first_call_is_before_the_later_calls():
    prof, _, state, levels = profiled_train_steps()
    (record,) = prof.stats()
    first, later = peaks(record)
    assert later - first == state
    note = note_of(prof)
    assert note.startswith(f"note: on cpu the later 3 calls' peak ({readable_size(later)}) is "
                           f"{readable_size(state)} higher than the first call's "
                           f"({readable_size(first)}): all of it was alive before the call "
                           f"began ({readable_size(state)} more than before the first call")
    assert "the lines made no difference" in note
    assert "lines that differ most" not in note
    # the start levels are the source's own counter read before the calls
    assert record["start_level"] == {"first_call": levels[0], "later_calls": levels[1]}
    assert levels[1] == levels[2] == levels[3]
    assert levels[1] - levels[0] == state


def test_a_first_call_whose_lines_made_more_names_them():
    """Nothing kept between the calls: as much was alive before each, and
    the line that made 12 MiB in the first call alone is named for it."""
    seen = []

    def step():
        if not seen:
            seen.append(torch.empty(3 << 20).numel())   # 12 MiB, freed at once
        y = torch.empty(1 << 20)                         # 4 MiB, freed at return
        return y.sum()

    with LineProfiler(step, device="cpu") as prof:
        for _ in range(3):
            step()
    (record,) = prof.stats()
    starts = record["start_level"]
    assert starts["later_calls"] == starts["first_call"]
    first, later = peaks(record)
    assert first == starts["first_call"] + (12 << 20)
    assert starts["later_calls"] + (4 << 20) < later < starts["later_calls"] + (5 << 20)
    note = note_of(prof)
    assert (f"is {readable_size(first - later)} lower than the first call's "
            f"({readable_size(first)}): as much was alive before each call began; the lines "
            "made the difference; lines that differ most, later calls less first, each from "
            "its call's start: ") in note
    big = next(ln["lineno"] for ln in record["lines"] if "seen.append" in ln["code"])
    assert note.split("start: ")[1].startswith(f"{big} (-12.00M)")


def test_start_level_round_trip_json_and_csv(tmp_path):
    prof, _, state, _ = profiled_train_steps(calls=3)
    (live,) = prof.stats()
    for name in ("p.json", "p.csv"):
        prof.save(tmp_path / name)
        (saved,) = load(tmp_path / name).stats()
        assert saved["start_level"] == live["start_level"], name
        assert note_of(load(tmp_path / name)) == note_of(prof)
    doc = json.loads((tmp_path / "p.json").read_text())
    assert doc["schema_version"] == SCHEMA_VERSION == 7
    assert doc["functions"][0]["start_level"] == live["start_level"]


def test_bad_start_level_is_one_clear_error(tmp_path):
    prof, _, _, _ = profiled_train_steps(calls=2)
    prof.save(tmp_path / "p.json")
    doc = json.loads((tmp_path / "p.json").read_text())
    doc["functions"][0]["start_level"] = {"first_call": "12", "later_calls": None}
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"functions\[0\]\.start_level: 'first_call' is a str"):
        load(tmp_path / "bad.json")


def test_a_version_4_file_loads_and_keeps_its_note():
    """Written by the code before start_level existed: it loads, knows no
    start levels, and its note is the one it always had."""
    saved = load(V4_FILE)
    assert saved.schema_version == 4
    (record,) = saved.stats()
    assert "start_level" not in record and record["calls"] == 4
    assert note_of(saved).startswith("note: on cpu the first call's peak (52.00M) differs "
                                     "from the later 3 calls' (60.01M) by -8.01M")
    assert saved.to_dict()["schema_version"] == SCHEMA_VERSION
    assert "start_level" not in saved.to_dict()["functions"][0]
