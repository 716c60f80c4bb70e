"""On the device: a TransformerEncoder train step's curve on CUDA,
its peak event equal to the table's peak.  Run with -s: the figures print."""
import pytest

torch = pytest.importorskip("torch")

from pytorch_memlab import LineProfiler  # noqa: E402
from pytorch_memlab.reports.curve_text import chart  # noqa: E402
from pytorch_memlab.reports.sections import tables  # noqa: E402

pytestmark = pytest.mark.cuda


def train_step(model, optimizer, x):
    out = model(x)
    loss = out.float().pow(2).mean()
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


def test_transformer_train_step_curve_peak_is_the_tables_peak(tmp_path):
    layer = torch.nn.TransformerEncoderLayer(d_model=512, nhead=8, dim_feedforward=2048,
                                             batch_first=True)
    model = torch.nn.TransformerEncoder(layer, num_layers=4).cuda()
    optimizer = torch.optim.AdamW(model.parameters())
    x = torch.randn(16, 256, 512, device="cuda")
    prof = LineProfiler(train_step, device="cuda")
    with prof:
        for _ in range(3):
            train_step(model, optimizer, x)
    record = prof.stats()[0]
    curve = record["curve"]
    table_peak = max(line["active_bytes.all.peak"] or 0 for line in record["lines"])
    best = max(range(len(curve)), key=lambda i: curve[i][3])
    print("\ncurve_of:", record["curve_of"])
    print("points:", len(curve))
    for point in curve:
        print("  ", point)
    print("curve peak event:", curve[best], "table peak:", table_peak)
    print(chart(tables(prof.to_profile())[0][0].curves[0]))
    assert curve[best][3] == table_peak
    assert record["curve_of"]["calls"] == 3 and record["curve_of"]["merged"] == 1
    assert [p[0] for p in curve] == list(range(curve[0][0], curve[0][0] + 6))
    assert all(p[2] >= p[1] for p in curve)      # reserved holds what is active
    from pytorch_memlab.html_report import write_report
    write_report(prof, tmp_path / "report.html")
    print("report:", tmp_path / "report.html")
