"""``MemlabCallback``: the line profiler inside Lightning's ``Trainer``.

    from pytorch_memlab.lightning import MemlabCallback
    trainer = Trainer(callbacks=[MemlabCallback()])

Needs Lightning (``pip install 'pytorch-memlab[lightning]'``); works with the
``lightning`` package and with ``pytorch_lightning``, whichever the Trainer
comes from.  Importing ``pytorch_memlab`` alone never imports Lightning.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Optional, Sequence, Union

import torch

from .common.devices import DeviceArg
from .distributed import RankEnv
from .step_profiler import PathArg, StepProfiler, check_every, check_path


def _callback_bases() -> tuple[type, ...]:
    """Lightning's ``Callback`` classes: ``lightning.pytorch``'s and
    ``pytorch_lightning``'s, those installed (a Trainer accepts only callbacks
    of its own package's class, and both packages often sit side by side)."""
    bases = []
    for name in ("lightning.pytorch", "pytorch_lightning"):
        try:
            module = __import__(name, fromlist=["Callback"])
        except ImportError:
            continue
        bases.append(module.Callback)
    if not bases:
        raise ImportError("pytorch_memlab.lightning needs Lightning, which is not installed: "
                          "pip install 'pytorch-memlab[lightning]' (or pip install lightning)")
    return tuple(bases)


_Bases = _callback_bases()
METRICS = ("memlab/peak_active_bytes", "memlab/peak_reserved_bytes")
FunctionsArg = Sequence[Union[str, Callable[..., Any], torch.nn.Module]]


class MemlabCallback(*_Bases):  # type: ignore[misc]  # a base per installed package
    """Profile a LightningModule's ``training_step`` line by line during
    ``Trainer.fit``.

    - ``functions``: more to profile: names of the LightningModule's methods
      (``"validation_step"``, ``"forward"``), functions, methods or modules.
    - ``device``: what to read, as ``LineProfiler(device=...)``; default the
      device the LightningModule trains on.
    - ``every_n_steps``: also print the tables of each ``n`` training steps.
    - ``save``: a ``.json`` (or ``.csv``) file of the whole fit; under DDP a
      folder, where each rank writes ``rank<R>.json`` and rank 0 prints the
      merged table.  ``html``: the HTML report.

    With automatic optimization the module's ``optimizer_step`` is profiled
    too: Lightning calls ``training_step``, the backward pass and the
    optimizer from its one line, so its table shows the peak of the whole step.
    Each training step's peaks of active and reserved bytes (the highest line
    figures of the profiled functions in that step) are logged as
    ``memlab/peak_active_bytes`` and ``memlab/peak_reserved_bytes``.  The tables
    of the whole fit are printed when it ends; when an exception escapes
    ``fit()``, with the lines it left by marked and, for an out-of-memory
    error, the post-mortem; the exception then goes on unchanged.
    """

    def __init__(self, functions: FunctionsArg = (), device: DeviceArg = None,
                 every_n_steps: Optional[int] = None, save: Optional[PathArg] = None,
                 html: Optional[PathArg] = None) -> None:
        super().__init__()
        owner = type(self).__name__
        if isinstance(functions, (str, torch.nn.Module)) or callable(functions):
            functions = [functions]
        self.functions = list(functions)
        self.device = device
        self.every_n_steps = check_every(every_n_steps, owner)
        # under DDP save is a folder: its name is checked when the fit starts
        self.save = None if save is None else os.fspath(save)
        self.html = check_path(html, "html", (".html", ".htm"), owner)
        self.steps: Optional[StepProfiler] = None     # the fit being profiled

    def _resolve(self, pl_module: Any) -> list[Callable[..., Any]]:
        found: list[Callable[..., Any]] = []
        for item in self.functions:
            if isinstance(item, str):
                method = getattr(pl_module, item, None)
                if not callable(method):
                    raise ValueError(f"{type(self).__name__}: functions: "
                                     f"{type(pl_module).__name__} has no method {item!r}; "
                                     "give a method name of the LightningModule, or a "
                                     "function, method or module")
                found.append(method)
            elif callable(item):
                found.append(item)
            else:
                raise TypeError(f"{type(self).__name__}: functions: got "
                                f"{type(item).__name__}; expected method names of the "
                                "LightningModule, functions, methods or modules")
        return found

    # ---- Lightning's hooks -------------------------------------------------------

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        owner = type(self).__name__
        rank = None
        if trainer.world_size > 1:
            rank = RankEnv(trainer.global_rank, trainer.world_size, trainer.local_rank,
                           os.environ.get("TORCHELASTIC_RUN_ID", ""))
        else:
            check_path(self.save, "save", (".json", ".csv"), owner)
        device = self.device if self.device is not None else pl_module.device
        functions = self._resolve(pl_module)
        if pl_module.automatic_optimization:
            # Lightning runs training_step, backward and the optimizer inside
            # this hook's one line: the step's peak is there
            functions.append(pl_module.optimizer_step)
        self.steps = StepProfiler(owner, device, pl_module.training_step, functions,
                                  self.every_n_steps, self.save, self.html, rank)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self.steps is None or self.steps.done:
            return
        peak = self.steps.end_step()
        if peak is not None:
            for name, value in zip(METRICS, peak):
                # float64 holds byte counts exactly (Lightning would make an int float32)
                pl_module.log(name, torch.tensor(float(value), dtype=torch.float64),
                              on_step=True, on_epoch=False)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        if self.steps is not None:
            self.steps.finish()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        if self.steps is not None:
            self.steps.fail(exception)
