"""What a test asks for: its memlab markers (and --memlab), checked and parsed.

No torch here: this runs for every marked test before anything is measured.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from ...common.sizes import parse_size

if TYPE_CHECKING:
    import pytest

LIMIT = "memlab_limit"
NO_GROWTH = "memlab_no_growth"
MARKERS = {
    LIMIT: ('memlab_limit(budget, *, device=None, functions=()): fail the test when its peak '
            'of live tensor bytes, above what was live when it started, exceeds budget '
            '("64 MiB", "1.5 GB", or an int of bytes) on device ("cpu", "cuda", "cuda:N"; '
            'default: the current CUDA device, else CPU); see pytorch_memlab\'s docs/pytest.md'),
    NO_GROWTH: ('memlab_no_growth(*, device=None, tolerance=0, functions=()): fail the test '
                'when tensor bytes still alive after it returned (and gc.collect()) exceed '
                'tolerance; see pytorch_memlab\'s docs/pytest.md'),
}
_DEVICE = re.compile(r"^(cpu|cuda(:\d+)?)$")


@dataclass
class Request:
    """One check (or the --memlab profile) of one test."""
    kind: str                        # LIMIT, NO_GROWTH or "profile"
    device: Optional[str]            # "cpu", "cuda", "cuda:N"; None: the default
    size: int = 0                    # budget or tolerance, bytes
    text: str = ""                   # the size as the user wrote it
    functions: tuple[Any, ...] = field(default_factory=tuple)


def check_device(device: Any, what: str) -> Optional[str]:
    if device is None:
        return None
    if not isinstance(device, str) or not _DEVICE.match(device):
        raise ValueError(f"{what}: device={device!r}; expected 'cpu', 'cuda' or 'cuda:N'")
    return device


def _functions(value: Any, what: str) -> tuple[Any, ...]:
    items = tuple(value) if isinstance(value, (list, tuple)) else (value,)
    for item in items:
        if not callable(item):
            raise TypeError(f"{what}: functions= takes functions or methods, not {item!r}")
    return items


def _size_text(value: Any) -> str:
    return value if isinstance(value, str) else f"{value} B"


def parse_limit(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Request:
    what = f"@pytest.mark.{LIMIT}"
    unknown = set(kwargs) - {"budget", "device", "functions"}
    if unknown or len(args) + ("budget" in kwargs) != 1:
        raise TypeError(f"{what} takes one budget and the keywords device= and functions= "
                        f"(got args={args!r}, kwargs={kwargs!r}), e.g. "
                        f'@pytest.mark.{LIMIT}("64 MiB", device="cpu")')
    budget = args[0] if args else kwargs["budget"]
    return Request(LIMIT, check_device(kwargs.get("device"), what),
                   parse_size(budget, f"{what} budget"), _size_text(budget),
                   _functions(kwargs.get("functions", ()), what))


def parse_no_growth(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Request:
    what = f"@pytest.mark.{NO_GROWTH}"
    unknown = set(kwargs) - {"device", "tolerance", "functions"}
    if unknown or args:
        raise TypeError(f"{what} takes only the keywords device=, tolerance= and functions= "
                        f"(got args={args!r}, kwargs={kwargs!r}), e.g. "
                        f'@pytest.mark.{NO_GROWTH}(device="cpu", tolerance="1 KiB")')
    tolerance = kwargs.get("tolerance", 0)
    return Request(NO_GROWTH, check_device(kwargs.get("device"), what),
                   parse_size(tolerance, f"{what} tolerance"), _size_text(tolerance),
                   _functions(kwargs.get("functions", ()), what))


def requests_of(item: pytest.Item) -> list[Request]:
    """The marker checks of ``item`` (closest marker of each kind wins)."""
    found = []
    for name, parse in ((LIMIT, parse_limit), (NO_GROWTH, parse_no_growth)):
        marker = item.get_closest_marker(name)
        if marker is not None:
            found.append(parse(marker.args, dict(marker.kwargs)))
    return found


def has_marker(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(name) is not None for name in MARKERS)
