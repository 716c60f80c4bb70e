"""The public path of the Hugging Face callback (``from
pytorch_memlab.transformers import MemlabTrainerCallback``); it lives in
``integrations/transformers.py``."""
from .integrations.transformers import KIND_METRIC, METRICS, MemlabTrainerCallback

__all__ = ["KIND_METRIC", "METRICS", "MemlabTrainerCallback"]
