"""The kinds a block at a peak can be, their order and how a report says them;
how a module's name reads in a report.  No torch: a saved profile is viewed
without it."""
from __future__ import annotations

PARAMETER, BUFFER, GRADIENT, OPTIMIZER_STATE = "parameter", "buffer", "gradient", "optimizer_state"
SAVED_FOR_BACKWARD, WORKSPACE = "saved_for_backward", "workspace"
# Kinds Python tags (the tracer's numbering: TAGGED[i] is kind i + 1).
TAGGED = (PARAMETER, BUFFER, GRADIENT, OPTIMIZER_STATE, SAVED_FOR_BACKWARD, WORKSPACE)
# The rest of each place of a peak, by where it was made: alive before the
# call, made on one of its lines, made by another thread during it.
INPUT, TEMPORARY, OTHER = "input", "temporary", "other"
# Every kind, in the order records and reports list them.
KINDS = ("parameter", "buffer", "gradient", "optimizer_state", "saved_for_backward",
         TEMPORARY, INPUT, "workspace", OTHER)
LABELS = {"parameter": "parameters", "buffer": "buffers", "gradient": "gradients",
          "optimizer_state": "optimizer state", "saved_for_backward": "saved for backward",
          TEMPORARY: "temporary", INPUT: "input", "workspace": "workspace",
          OTHER: "other threads"}


def code_of(kind: str) -> int:
    """The tracer's number of a tagged kind."""
    return TAGGED.index(kind) + 1


# A peak's by_module key for what was made outside every module.
NO_MODULE = "(no module)"


def folded(name: str) -> str:
    """A name with each index between two other parts as ``*``
    (``layers.3.mlp`` -> ``layers.*.mlp``; an nn.Sequential's ``mlp.2``, whose
    children are different layers, stays): how reports group repeated
    blocks, never the data; from the name alone, so a saved profile folds as
    the live one did."""
    parts = name.split(".")
    return ".".join("*" if p.isdigit() and 0 < i < len(parts) - 1 else p
                    for i, p in enumerate(parts))
