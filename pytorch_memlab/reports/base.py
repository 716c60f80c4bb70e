"""The one interface every reporter has: a profile in, a text out."""
from __future__ import annotations

from typing import Protocol

from ..records.model import Profile


class Reporter(Protocol):
    def render(self, profile: Profile) -> str:
        """The whole report of ``profile``."""
        ...
