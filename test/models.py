"""Small real models the tests share: ``Net(n)``, ``n`` residual blocks of a
two-layer MLP, ``D`` wide, and a head with ``head=True``."""
import torch

D = 128


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mlp = torch.nn.Sequential(torch.nn.Linear(D, 2 * D), torch.nn.ReLU(),
                                       torch.nn.Linear(2 * D, D))

    def forward(self, x):
        return x + self.mlp(x)


class Net(torch.nn.Module):
    def __init__(self, n, head=False):
        super().__init__()
        self.layers = torch.nn.ModuleList([Block() for _ in range(n)])
        self.head = torch.nn.Linear(D, 1) if head else None

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return self.head(x) if self.head is not None else x
