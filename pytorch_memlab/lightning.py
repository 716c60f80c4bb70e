"""The public path of the Lightning callback (``from pytorch_memlab.lightning
import MemlabCallback``); it lives in ``integrations/lightning.py``."""
from .integrations.lightning import KIND_METRIC, METRICS, MemlabCallback

__all__ = ["KIND_METRIC", "METRICS", "MemlabCallback"]
