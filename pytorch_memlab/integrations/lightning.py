"""``MemlabCallback``: the line profiler inside Lightning's ``Trainer``.

    from pytorch_memlab.lightning import MemlabCallback
    trainer = Trainer(callbacks=[MemlabCallback()])

Needs Lightning (``pip install 'pytorch-memlab[lightning]'``); works with the
``lightning`` package and with ``pytorch_lightning``, whichever the Trainer
comes from.  Importing ``pytorch_memlab`` alone never imports Lightning.
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from ..common.devices import DeviceArg
from .step_profiler import CallbackOptions, FunctionsArg, PathArg, StepProfiler


FRAMEWORK = ("lightning", "pytorch_lightning")


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
# then memlab/peak/<kind>: the bytes of each kind at the step's peak (kinds.names)
KIND_METRIC = "memlab/peak/"


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
    ``memlab/peak_active_bytes`` and ``memlab/peak_reserved_bytes``, and
    the kinds at the highest peak of a profiled function in it as
    ``memlab/peak/<kind>`` (``memlab/peak/optimizer_state``...: bytes of each
    kind present, see pytorch_memlab.kinds).  Each
    training step is one call of the functions that ran in it (the calls,
    the first step apart from the later ones, the lines that grow every
    step, the step that reached the peak); the tables of Lightning's own
    methods leave out their lines that never ran.  The tables of the whole
    fit are printed when it ends; when an exception escapes
    ``fit()``, with the lines it left by marked and, for an out-of-memory
    error, the post-mortem; the exception then goes on unchanged.
    """

    def __init__(self, functions: FunctionsArg = (), device: DeviceArg = None,
                 every_n_steps: Optional[int] = None, save: Optional[PathArg] = None,
                 html: Optional[PathArg] = None) -> None:
        super().__init__()
        self.options = CallbackOptions(type(self).__name__, functions, device,
                                       every_n_steps, save, html)
        self.steps: Optional[StepProfiler] = None     # the fit being profiled

    # ---- Lightning's hooks -------------------------------------------------------

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        owner = type(self).__name__
        functions = self.options.resolve(owner, pl_module, "the LightningModule")
        if pl_module.automatic_optimization:
            # Lightning runs training_step, backward and the optimizer inside
            # this hook's one line: the step's peak is there
            functions.append(pl_module.optimizer_step)
        world = (trainer.world_size, trainer.global_rank, trainer.local_rank)
        self.steps = self.options.start(owner, world, pl_module.device, pl_module.training_step,
                                        functions, FRAMEWORK)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        peak = self.steps.end_step() if self.steps is not None else None
        if peak is not None and self.steps is not None:
            logged = dict(zip(METRICS, peak))
            logged.update((f"{KIND_METRIC}{kind}", size)
                          for kind, size in self.steps.kinds[-1].items())
            for name, value in logged.items():
                # float64 holds byte counts exactly (Lightning would make an int float32)
                pl_module.log(name, torch.tensor(float(value), dtype=torch.float64),
                              on_step=True, on_epoch=False)

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        if self.steps is not None:
            self.steps.finish()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        if self.steps is not None:
            self.steps.fail(exception)
