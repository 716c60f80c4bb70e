"""Prints the two outputs the manual shows for a GPU (docs/memreporter.md,
docs/oom.md): MemReporter on a 2-layer MLP after one Adam step (every
allocator block accounted for), and the OOM post-mortem of a profiled
function that holds a 4 GiB tensor when a 1 TiB allocation fails.  Without
CUDA it prints the CPU versions (smaller sizes).

    python bench/device_reports.py
"""
import torch

from pytorch_memlab import LineProfiler, MemReporter

CUDA = torch.cuda.is_available()
DEVICE = "cuda:0" if CUDA else "cpu"


def mlp_report() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 1024)).to(DEVICE)
    optimizer = torch.optim.Adam(model.parameters())
    reporter = MemReporter(model)
    reporter.add_optimizer(optimizer)
    x = torch.randn(512, 1024, device=DEVICE)
    model(x).pow(2).mean().backward()
    optimizer.step()
    loss = model(x).pow(2).mean()
    report = reporter.report(outputs=loss, device=DEVICE)
    if CUDA:
        print("torch.cuda.memory_allocated():", torch.cuda.memory_allocated(0))
    print("report rows:", len(report.rows), "blocks not held by a tensor:", len(report.blocks))


def grow():
    big = torch.empty(4 << 30 if CUDA else 4 << 20, dtype=torch.uint8, device=DEVICE)
    more = torch.empty(1 << 40 if CUDA else 1 << 62, dtype=torch.uint8, device=DEVICE)
    return big, more


def oom_postmortem() -> None:
    profiler = LineProfiler(grow, device=DEVICE)
    try:
        with profiler:
            grow()
    except (torch.OutOfMemoryError, RuntimeError):
        pass
    profiler.print_stats()


if __name__ == "__main__":
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0) if CUDA else 'CPU'}\n")
    mlp_report()
    print()
    oom_postmortem()
