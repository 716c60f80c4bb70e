"""The public path of the pytest plugin (the ``pytest11`` entry point,
``-p pytorch_memlab.pytest_plugin``): its hooks, re-exported from
``integrations/pytest_plugin/``, so that pytest registers this one module."""
from .integrations.pytest_plugin import (pytest_addoption, pytest_collection_modifyitems,
                                         pytest_configure)

__all__ = ["pytest_addoption", "pytest_collection_modifyitems", "pytest_configure"]
