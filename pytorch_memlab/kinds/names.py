"""The kinds a block at a peak can be, their order and how a report says them."""
from __future__ import annotations

# Kinds Python tags (the tracer's numbering: TAGGED[i] is kind i + 1).
TAGGED = ("parameter", "buffer", "gradient", "optimizer_state", "saved_for_backward",
          "workspace")
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
