"""What ``display()`` returns: HTML in a notebook (``_repr_html_``), the text
table elsewhere (``repr``/``print``)."""
from __future__ import annotations

from typing import Callable, Optional

from ..records.model import Profile
from .base import Reporter, reporter_for


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
    """``by_call``: first call and later calls apart; ``hide_unrun``: leave out
    the lines that never ran, in both forms.  ``drawn``: makes the profile the
    HTML draws, curves included, when first asked (None: ``profile`` has them)."""

    def __init__(self, profile: Profile, by_call: bool = False,
                 hide_unrun: bool = False,
                 drawn: Optional[Callable[[], Profile]] = None) -> None:
        self.profile = profile
        self._drawn = drawn
        self.text: Reporter[Profile] = reporter_for("text", by_call=by_call,
                                                    hide_unrun=hide_unrun)
        self.notebook: Reporter[Profile] = reporter_for("notebook", by_call=by_call,
                                                        hide_unrun=hide_unrun)

    @property
    def records(self) -> list:   # type: ignore[type-arg]
        return self.profile.functions

    def __repr__(self) -> str:
        return self.text.render(self.profile)

    __str__ = __repr__

    def _repr_html_(self) -> str:
        if self._drawn is not None:
            self.profile, self._drawn = self._drawn(), None
        return self.notebook.render(self.profile)
