"""How this copy of pytorch_memlab was installed, and the command that rebuilds it.

The package is not on the package index under its name yet (``pytorch-memlab``
there is the old 0.3.2, with another API), so every hint must point back at
the checkout or wheel this copy came from.  PEP 610's ``direct_url.json`` says which:
an editable install or a local folder (rebuild from that folder) or a wheel
file (rebuild from the checkout it was built from; we cannot know where that
is).  Running from a source tree without an install: build in place.
"""
from __future__ import annotations

import json
import os
from typing import Any, Optional
from urllib.parse import unquote, urlparse

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
CPU_TORCH_COMMAND = "pip install torch --index-url https://download.pytorch.org/whl/cpu"
_PIP = "python -m pip install --no-build-isolation"


def _direct_url() -> Optional[dict[str, Any]]:
    """PEP 610 direct_url.json of the installed pytorch-memlab (whichever copy), or None."""
    try:
        from importlib.metadata import PackageNotFoundError, distribution
        dist = distribution("pytorch-memlab")
    except (ImportError, PackageNotFoundError):
        return None
    text = dist.read_text("direct_url.json")
    if text is None:
        return None
    try:
        info = json.loads(text)
    except ValueError:
        return None
    return info if isinstance(info, dict) else None


def _source_tree() -> Optional[str]:
    """The checkout this package lives in, if it is imported from one."""
    root = os.path.dirname(_PACKAGE_DIR)
    if os.path.isfile(os.path.join(root, "setup.py")) and os.path.isdir(
            os.path.join(root, "src", "tracer")):
        return root
    return None


def _local_path(url: str) -> Optional[str]:
    parsed = urlparse(url)
    return unquote(parsed.path) if parsed.scheme == "file" else None


def rebuild_command() -> str:
    """The exact command that rebuilds both extensions for how this copy was installed."""
    info = _direct_url()
    path = _local_path(info.get("url", "")) if info else None
    if info is None or not _installed_here(info, path):
        info = path = None  # what pip installed is some other copy
    if info is not None and path is not None and "dir_info" in info:
        if info["dir_info"].get("editable"):
            return f"cd {path} && {_PIP} -e ."
        return f"{_PIP} --force-reinstall --no-deps {path}"
    tree = _source_tree()
    if info is None and tree is not None:
        # imported straight from a checkout (PYTHONPATH or its own folder)
        return f"cd {tree} && python setup.py build_ext --inplace"
    # a wheel (or an index/archive install): build again from the checkout
    return f"{_PIP} --force-reinstall --no-deps /path/to/pytorch_memlab-checkout"


def _installed_here(info: dict[str, Any], path: Optional[str]) -> bool:
    """True when the installed distribution is this very package folder."""
    if info.get("dir_info", {}).get("editable"):
        # an editable install runs the checkout it was made from
        return path is not None and os.path.realpath(path) == os.path.realpath(
            os.path.dirname(_PACKAGE_DIR))
    try:
        from importlib.metadata import distribution
        init = distribution("pytorch-memlab").locate_file("pytorch_memlab/__init__.py")
    except Exception:
        return False
    return os.path.realpath(str(init)) == os.path.realpath(
        os.path.join(_PACKAGE_DIR, "__init__.py"))


def missing_requirement(torch: bool = True) -> Optional[str]:
    """One line saying what keeps the package API from importing, or None.

    Checked before the first public name is imported, so that a missing torch
    or an uncompiled source tree reads as what to do, not as a bare
    ``No module named 'torch'`` / ``cannot import name '_tracer'``.
    """
    from importlib.util import find_spec
    if torch and find_spec("torch") is None:
        return ("pytorch_memlab needs torch, which is not installed: install torch first "
                f"(CPU-only build: {CPU_TORCH_COMMAND})")
    if find_spec("pytorch_memlab._tracer") is None:
        return (f"pytorch_memlab's C extension _tracer is not compiled in {_PACKAGE_DIR} "
                f"(a source tree?); build it: {rebuild_command()}")
    return None
