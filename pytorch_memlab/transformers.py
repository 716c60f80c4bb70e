"""``MemlabTrainerCallback``: the line profiler inside Hugging Face's ``Trainer``.

    from pytorch_memlab.transformers import MemlabTrainerCallback
    trainer = Trainer(model, args, train_dataset=data, callbacks=[MemlabTrainerCallback()])

Needs transformers and accelerate (``pip install 'pytorch-memlab[transformers]'``).
Importing ``pytorch_memlab`` alone never imports transformers.
"""
from __future__ import annotations

import functools
import os
import sys
import types
from typing import Any, Callable, Optional, Sequence, Union

import torch

from .common.devices import DeviceArg
from .distributed import RankEnv
from .step_profiler import PathArg, StepProfiler, check_every, check_path

try:
    import transformers
    from transformers import TrainerCallback
except ImportError as exc:
    raise ImportError("pytorch_memlab.transformers needs transformers, which is not "
                      "installed: pip install 'pytorch-memlab[transformers]' (or pip install "
                      "transformers accelerate)") from exc

METRICS = ("memlab_peak_active_bytes", "memlab_peak_reserved_bytes")
FunctionsArg = Sequence[Union[str, Callable[..., Any], torch.nn.Module]]


def _find_trainer() -> Any:
    """The ``Trainer`` whose callback handler is calling us: the first frame up
    the stack whose ``self`` is one (callbacks are not handed the trainer)."""
    frame: Optional[types.FrameType] = sys._getframe(1)
    for _ in range(16):
        if frame is None:
            break
        owner = frame.f_locals.get("self")
        if isinstance(owner, transformers.Trainer):
            return owner
        frame = frame.f_back
    return None


class MemlabTrainerCallback(TrainerCallback):  # type: ignore[misc]  # transformers is not type-checked
    """Profile ``Trainer.training_step`` and the model's ``forward`` line by
    line during ``Trainer.train``.

    - ``functions``: more to profile: names of the model's methods, functions,
      methods or modules.
    - ``device``: what to read, as ``LineProfiler(device=...)``; default the
      device the Trainer trains on (``args.device``).
    - ``every_n_steps``: also print the tables of each ``n`` optimizer steps.
    - ``save``: a ``.json`` (or ``.csv``) file of the whole run; under torchrun
      (more than one process) a folder, where each rank writes
      ``rank<R>.json`` and rank 0 prints the merged table.  ``html``: the HTML
      report.

    At each logging step, ``memlab_peak_active_bytes`` and
    ``memlab_peak_reserved_bytes`` (the highest line figures of the profiled
    functions over the steps since the previous log: the forward and backward
    passes, not the optimizer's step, which the Trainer runs outside
    ``training_step``) join the logs, and
    ``trainer.state.log_history``.  The tables are printed when training ends;
    when an exception escapes ``train()``, with the lines it left by marked
    and, for an out-of-memory error, the post-mortem; the exception then goes
    on unchanged.  The post-mortem needs the callback given to
    ``Trainer(callbacks=[...])``: one added later with ``add_callback`` sees
    only errors that escape ``training_step``.
    """

    def __init__(self, functions: FunctionsArg = (), device: DeviceArg = None,
                 every_n_steps: Optional[int] = None, save: Optional[PathArg] = None,
                 html: Optional[PathArg] = None) -> None:
        owner = type(self).__name__
        if isinstance(functions, (str, torch.nn.Module)) or callable(functions):
            functions = [functions]
        self.functions = list(functions)
        self.device = device
        self.every_n_steps = check_every(every_n_steps, owner)
        self.save = None if save is None else os.fspath(save)   # a folder under torchrun
        self.html = check_path(html, "html", (".html", ".htm"), owner)
        self.steps: Optional[StepProfiler] = None     # the run being profiled
        self._since_log: list[tuple[int, int]] = []   # step peaks not logged yet
        self._guarded: list[tuple[Any, str]] = []     # (trainer, method) wrapped
        self._train_guarded = False   # Trainer(callbacks=[...]): train() itself is

    # ---- the trainer's own methods ------------------------------------------------

    def _guard(self, trainer: Any, name: str) -> None:
        """Wrap ``trainer.<name>`` (on the instance) so that an exception escaping
        it ends the profile with the post-mortem, then propagates unchanged."""
        if any(t is trainer and n == name for t, n in self._guarded):
            return
        original = getattr(trainer, name)

        @functools.wraps(original)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            try:
                return original(*args, **kwargs)
            except BaseException as exc:
                if self.steps is not None:
                    self.steps.fail(exc)
                self._unguard("training_step")
                raise
        setattr(trainer, name, guarded)
        self._guarded.append((trainer, name))

    def _unguard(self, name: str) -> None:
        for trainer, wrapped in self._guarded:
            if wrapped == name:
                trainer.__dict__.pop(name, None)
        self._guarded = [(t, n) for t, n in self._guarded if n != name]

    def _resolve(self, model: Any) -> list[Callable[..., Any]]:
        found: list[Callable[..., Any]] = [model.forward]
        for item in self.functions:
            if isinstance(item, str):
                method = getattr(model, item, None)
                if not callable(method):
                    raise ValueError(f"{type(self).__name__}: functions: "
                                     f"{type(model).__name__} has no method {item!r}; give "
                                     "a method name of the model, or a function, method "
                                     "or module")
                found.append(method)
            elif callable(item):
                found.append(item)
            else:
                raise TypeError(f"{type(self).__name__}: functions: got "
                                f"{type(item).__name__}; expected method names of the "
                                "model, functions, methods or modules")
        return found

    # ---- the callback events ------------------------------------------------------

    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        trainer = _find_trainer()
        if trainer is not None:
            self._guard(trainer, "train")      # for the trainer's life
            self._train_guarded = True

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                       **kwargs: Any) -> None:
        owner = type(self).__name__
        trainer = _find_trainer()
        if trainer is None:
            raise RuntimeError(f"{owner}: could not find the Trainer that runs this "
                               "callback")
        if not self._train_guarded:       # added after __init__: errors of each step
            self._guard(trainer, "training_step")
        rank = None
        if args.world_size > 1:
            rank = RankEnv(args.process_index, args.world_size, args.local_process_index,
                           os.environ.get("TORCHELASTIC_RUN_ID", ""))
        else:
            check_path(self.save, "save", (".json", ".csv"), owner)
        device = self.device if self.device is not None else args.device
        self._since_log = []
        self.steps = StepProfiler(owner, device, type(trainer).training_step,
                                  self._resolve(model),
                                  self.every_n_steps, self.save, self.html, rank)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.steps is None or self.steps.done:
            return
        peak = self.steps.end_step()
        if peak is not None:
            self._since_log.append(peak)

    def on_log(self, args: Any, state: Any, control: Any, logs: Optional[dict[str, Any]] = None,
               **kwargs: Any) -> None:
        if not self._since_log or logs is None:
            return
        peaks = dict(zip(METRICS, map(max, zip(*self._since_log))))
        self._since_log = []
        logs.update(peaks)
        # the Trainer appended its copy of ``logs`` to the history before calling us
        if state.log_history and all(state.log_history[-1].get(k) == v
                                     for k, v in logs.items() if k not in peaks):
            state.log_history[-1].update(peaks)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.steps is not None:
            self.steps.finish()
        self._unguard("training_step")
