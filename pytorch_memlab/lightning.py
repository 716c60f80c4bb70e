"""The public path of the Lightning callback (``from pytorch_memlab.lightning
import MemlabCallback``); it lives in ``integrations/lightning.py``."""
from .integrations.lightning import METRICS, MemlabCallback

__all__ = ["METRICS", "MemlabCallback"]
