"""The HTML report's picture of what a function's peak is made of: the
breakdown line (``peak_text``), then one horizontal bar split into its items,
each as wide as its share of the peak, labelled with its size and what it is
(a line: its number and code, cut to the segment's width; the whole in the
tooltip); under it, which modules hold what (``icicle_svg``).  A device
without a breakdown gets the line that says why, and no bar."""
from __future__ import annotations

import html

from ..common.sizes import readable_size
from .icicle_svg import icicle_svg
from .notebook import BAR_COLORS
from .peak_text import PeakItem, PeakNote, items_text

# The lines take the column colours (red left out: it means shrinking
# elsewhere; grey too); what is not a line of the function is grey or sand.
_LINE_COLORS = tuple(c for c in BAR_COLORS if c != "#797979")
_OTHER_COLORS = {"before the call": "#a0a0a0", "other threads": "#d5bb67"}
_REST_COLOR = "#dcdcdc"


def _color(item: PeakItem, line_index: int) -> str:
    if item.lineno is not None:
        return _LINE_COLORS[line_index % len(_LINE_COLORS)]
    return _OTHER_COLORS.get(item.label, _REST_COLOR)


def item_title(item: PeakItem) -> str:
    """What a segment's tooltip says: its size, its label, then its code or parts."""
    text = f"{readable_size(item.size)} {item.label}"
    if item.code.strip():
        text += ": " + item.code.strip()
    if item.rest:
        text += ": " + items_text(item.rest)
    return text


def _segment(item: PeakItem, total: int, color: str) -> str:
    width = 100.0 * item.size / total
    line = "" if item.lineno is None else f' data-line="{item.lineno}"'
    label = html.escape(item_title(item) if item.lineno is not None
                        else f"{readable_size(item.size)} {item.label}")
    return (f'<div class="seg" data-bytes="{item.size}"{line} '
            f'style="width:{width:.3f}%;background:{color}99" '
            f'title="{html.escape(item_title(item))}">{label}</div>')


def peak_bar(note: PeakNote) -> str:
    """The note's line, and its bar when it has items, then its modules' icicle."""
    text = f'<p class="peaknote">{html.escape(note.text)}</p>'
    total = sum(item.size for item in note.items)
    if total <= 0:
        return f'<div class="peak">{text}{icicle_svg(note.modules_by_kind)}</div>'
    segments, lines = [], 0
    for item in note.items:
        segments.append(_segment(item, total, _color(item, lines)))
        lines += item.lineno is not None
    return (f'<div class="peak">{text}<div class="peakbar" role="img" '
            f'aria-label="{html.escape(note.text)}">{"".join(segments)}</div>'
            f"{icicle_svg(note.modules_by_kind)}</div>")
