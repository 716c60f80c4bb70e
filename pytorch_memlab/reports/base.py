"""The one interface every reporter has: a subject in, a text out.

``Reporter[S]`` is generic over what it reports on, because the reporters do
not all read the same thing: the line-table reporters (``TextReport``,
``NotebookReport``, ``HtmlReport``) read a ``Profile``; the rank table
(``RankTextReport``) a ``RankedProfile``, the merge of several ranks; the
per-rank HTML page (``RanksHtmlReport``) the rank documents themselves; and
MemReporter's table (``MemReportText``) a ``MemReport``.  Callers hold them as
``Reporter[...]``; ``reporter_for`` names the profile reporters by format.
"""
from __future__ import annotations

from typing import Any, Protocol, TypeVar

from ..records.model import Profile

S = TypeVar("S", contravariant=True)

PROFILE_FORMATS = ("text", "notebook", "html")


class Reporter(Protocol[S]):
    def render(self, subject: S) -> str:
        """The whole report of ``subject``."""
        ...


def reporter_for(format: str, **options: Any) -> Reporter[Profile]:
    """The reporter of a profile as ``format``: "text" (``print_stats``,
    ``repr``), "notebook" (``_repr_html_``) or "html" (the report page;
    ``options``: ``title_text``)."""
    if format == "text":
        from .text_table import TextReport
        return TextReport(**options)
    if format == "notebook":
        from .notebook import NotebookReport
        return NotebookReport(**options)
    if format == "html":
        from .html_page import HtmlReport
        return HtmlReport(**options)
    raise ValueError(f"format={format!r}: expected one of {', '.join(PROFILE_FORMATS)}")
