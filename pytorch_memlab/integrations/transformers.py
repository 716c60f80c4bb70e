"""``MemlabTrainerCallback``: the line profiler inside Hugging Face's ``Trainer``.

    from pytorch_memlab.transformers import MemlabTrainerCallback
    trainer = Trainer(model, args, train_dataset=data, callbacks=[MemlabTrainerCallback()])

Needs transformers and accelerate (``pip install 'pytorch-memlab[transformers]'``).
Importing ``pytorch_memlab`` alone never imports transformers.
"""
from __future__ import annotations

import functools
import sys
import types
from typing import Any, Optional

from ..common.devices import DeviceArg
from .step_profiler import CallbackOptions, FunctionsArg, PathArg, StepProfiler

try:
    import transformers
    from transformers import TrainerCallback
except ImportError as exc:
    raise ImportError("pytorch_memlab.transformers needs transformers, which is not "
                      "installed: pip install 'pytorch-memlab[transformers]' (or pip install "
                      "transformers accelerate)") from exc

METRICS = ("memlab_peak_active_bytes", "memlab_peak_reserved_bytes")
# then memlab/peak/<kind>: the bytes of each kind at the highest step's peak (kinds.names)
KIND_METRIC = "memlab/peak/"
FRAMEWORK = ("transformers", "accelerate")


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
    ``trainer.state.log_history``, with ``memlab/peak/<kind>``: the bytes of
    each kind at the highest peak of a profiled function in the step that
    reached the highest (see pytorch_memlab.kinds).  Each training step is one call of the
    functions that ran in it (the calls, the first step apart from the later
    ones, the lines that grow every step, the step that reached the peak);
    the tables of the Trainer's and transformers' own methods leave out
    their lines that never ran.  The tables are printed when training ends;
    when an exception escapes ``train()``, with the lines it left by marked
    and, for an out-of-memory error, the post-mortem; the exception then goes
    on unchanged.  The post-mortem needs the callback given to
    ``Trainer(callbacks=[...])``: one added later with ``add_callback`` sees
    only errors that escape ``training_step``.
    """

    def __init__(self, functions: FunctionsArg = (), device: DeviceArg = None,
                 every_n_steps: Optional[int] = None, save: Optional[PathArg] = None,
                 html: Optional[PathArg] = None) -> None:
        self.options = CallbackOptions(type(self).__name__, functions, device,
                                       every_n_steps, save, html)
        self.steps: Optional[StepProfiler] = None     # the run being profiled
        self._since_log: list[tuple[int, int]] = []   # step peaks not logged yet
        self._kinds_since_log: list[dict[str, int]] = []   # and their kinds
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
        world = (args.world_size, args.process_index, args.local_process_index)
        self._since_log = []
        self._kinds_since_log = []
        functions = [model.forward, *self.options.resolve(owner, model, "the model")]
        self.steps = self.options.start(owner, world, args.device, type(trainer).training_step,
                                        functions, FRAMEWORK)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        peak = self.steps.end_step() if self.steps is not None else None
        if peak is not None and self.steps is not None:
            self._since_log.append(peak)
            self._kinds_since_log.append(self.steps.kinds[-1])

    def on_log(self, args: Any, state: Any, control: Any, logs: Optional[dict[str, Any]] = None,
               **kwargs: Any) -> None:
        if not self._since_log or logs is None:
            return
        peaks: dict[str, int] = dict(zip(METRICS, map(max, zip(*self._since_log))))
        # the kinds of the step with the highest peak since the last log
        highest = max(range(len(self._since_log)), key=lambda i: self._since_log[i][0])
        peaks.update((f"{KIND_METRIC}{kind}", size)
                     for kind, size in self._kinds_since_log[highest].items())
        self._since_log = []
        self._kinds_since_log = []
        logs.update(peaks)
        # the Trainer appended its copy of ``logs`` to the history before calling us
        if state.log_history and all(state.log_history[-1].get(k) == v
                                     for k, v in logs.items() if k not in peaks):
            state.log_history[-1].update(peaks)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.steps is not None:
            self.steps.finish()
        self._unguard("training_step")
