"""What `python -m pytorch_memlab demo` profiles: one training step of a
small MLP, on ``device`` (``-d``, checked by ``device_arg`` before this
runs), whose code its table shows."""
from typing import Optional

import torch

from pytorch_memlab.line_profiler import LineProfiler

from .stdout import print_tables


def train_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
               batch: torch.Tensor, target: torch.Tensor) -> float:
    optimizer.zero_grad(set_to_none=True)
    output = model(batch)
    loss = torch.nn.functional.mse_loss(output, target)
    loss.backward()
    optimizer.step()
    return loss.item()


def run_demo(device: Optional[str] = None) -> LineProfiler:
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024),
    ).to(device)
    optimizer = torch.optim.Adam(model.parameters())
    batch = torch.randn(256, 1024, device=device)
    target = torch.randn(256, 1024, device=device)
    profiler = LineProfiler(train_step, device=device)
    with profiler:
        for _ in range(3):
            train_step(model, optimizer, batch, target)

    def show() -> None:
        print(f"pytorch_memlab demo: 3 training steps of a 1024-4096-1024 MLP on {device}")
        profiler.print_stats(columns=("active_bytes.all.peak", "reserved_bytes.all.peak"))
    print_tables(show)
    return profiler
