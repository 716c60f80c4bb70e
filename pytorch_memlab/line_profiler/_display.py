"""What ``LineProfiler.display()`` returns: shows itself as HTML in a notebook
(``_repr_html_``) and as text elsewhere (``__repr__``)."""
from __future__ import annotations

import html
from typing import Sequence

from ._html import render_html
from ._stats import FunctionRecord
from ._text import render_text


def untraced_note(qualname: str, calls: int, compiled: bool) -> str:
    """A function with no traced line although it ran (or is compiled)."""
    ran = f"{qualname} ran {calls} time{'s' if calls != 1 else ''}" if calls else qualname
    how = ("it is compiled by torch.compile, and compiled code does not run line by line"
           if compiled else
           "if torch.compile compiled it (or a caller), compiled code does not run line "
           "by line")
    return (f"{ran} but none of its lines was traced: {how}.  To profile it, profile "
            "the eager function (the one given to torch.compile) and call that, or keep "
            "it out of compilation with torch._dynamo.disable.")


class ProfileDisplay:
    def __init__(self, records: Sequence[FunctionRecord], notes: Sequence[str] = ()) -> None:
        self.records = list(records)
        self.notes = list(notes)   # see untraced_note

    def __repr__(self) -> str:
        text = render_text(self.records)
        for note in self.notes:
            text += note + "\n"
        return text

    __str__ = __repr__

    def _repr_html_(self) -> str:
        return render_html(self.records) + "".join(
            f"<p>{html.escape(note)}</p>" for note in self.notes)
