"""What ``LineProfiler.display()`` returns: shows itself as HTML in a notebook
(``_repr_html_``) and as text elsewhere (``__repr__``)."""
from __future__ import annotations

from typing import Sequence

from ._html import render_html
from ._stats import FunctionRecord
from ._text import render_text


class ProfileDisplay:
    def __init__(self, records: Sequence[FunctionRecord]) -> None:
        self.records = list(records)

    def __repr__(self) -> str:
        return render_text(self.records)

    __str__ = __repr__

    def _repr_html_(self) -> str:
        return render_html(self.records)
