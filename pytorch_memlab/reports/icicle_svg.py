"""The HTML report's picture of which modules hold what at a function's peak
(``peak["modules_by_kind"]``): an icicle, one inline SVG (no script, nothing
fetched).  The top row is everything the modules hold then; each row below
splits its cells by the next part of the qualified names (``layers``, then
``layers.0``, then ``layers.0.mlp``...), each cell as wide as the bytes of
its module and the modules it leads, and split into one segment per kind, in
``kinds.names.KINDS`` order.  Hovering a cell or a segment shows its full
name, its kind and its exact bytes (SVG titles).  What no module made
(``NO_MODULE``) is left out of the picture and said in the top cell's title.
Children narrower than a pixel are drawn as one grey "N more" cell; the data
is never folded."""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Optional

from ..common.sizes import readable_size
from ..kinds.names import KINDS, LABELS, NO_MODULE
from .notebook import COLORS

WIDTH = 720            # the picture's width in pixels (its viewBox's units)
ROW = 18               # a row's height
_CHAR = 6.6            # a monospace character at 11px
# A colour per kind, in KINDS order, from the report's palette (red left out:
# it means shrinking elsewhere); input is the peak bar's "before the call" grey.
KIND_COLORS = dict(zip(KINDS, (COLORS[0], COLORS[9], COLORS[1], COLORS[4], COLORS[2],
                               COLORS[8], "#a0a0a0", COLORS[5], COLORS[6])))
_MORE_COLOR = "#dcdcdc"


@dataclass
class _Node:
    name: str                                   # the full qualified name ("" at the top)
    kinds: dict[str, int] = field(default_factory=dict)   # its own and its children's
    children: dict[str, "_Node"] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return sum(self.kinds.values())


def _tree(modules: dict[str, dict[str, int]]) -> _Node:
    """The names' tree, children in the order their names first come."""
    top = _Node("")
    for name, kinds in modules.items():
        if name == NO_MODULE:
            continue
        node, parts = top, name.split(".")
        chain = [top]
        for i in range(len(parts)):
            node = node.children.setdefault(parts[i], _Node(".".join(parts[:i + 1])))
            chain.append(node)
        for step in chain:
            for kind, size in kinds.items():
                step.kinds[kind] = step.kinds.get(kind, 0) + size
    return top


def _depth(node: _Node) -> int:
    return 1 + max((_depth(c) for c in node.children.values()), default=0)


def _title(text: str) -> str:
    return f"<title>{html.escape(text)}</title>"


def _label(text: str, x: float, y: float, width: float) -> str:
    chars = int((width - 4) / _CHAR)
    if chars < 3:
        return ""
    if len(text) > chars:
        text = text[:chars - 1] + "\u2026"
    return (f'<text x="{x + 2:.3f}" y="{y + ROW - 5}" font-family="monospace" '
            f'font-size="11" fill="#222">{html.escape(text)}</text>')


def _cell(node: _Node, x: float, y: float, width: float, title: str, label: str) -> str:
    """A cell: its kinds' segments, its outline, its label."""
    parts, done, total = [], 0, node.size
    for kind in KINDS:
        size = node.kinds.get(kind, 0)
        if not size:
            continue
        left = x + width * done / total
        done += size
        right = x + width * done / total
        name = node.name or "all modules"
        parts.append(
            f'<rect class="seg" data-kind="{kind}" data-bytes="{size}" x="{left:.3f}" '
            f'y="{y}" width="{right - left:.3f}" height="{ROW}" '
            f'fill="{KIND_COLORS[kind]}" fill-opacity="0.6">'
            f"{_title(f'{name}: {LABELS[kind]}, {size:,} bytes ({readable_size(size)})')}"
            "</rect>")
    return (f'<g class="cell" data-name="{html.escape(node.name)}" data-bytes="{total}" '
            f'data-x="{x:.3f}" data-width="{width:.3f}">{_title(title)}{"".join(parts)}'
            f'<rect x="{x:.3f}" y="{y}" width="{width:.3f}" height="{ROW}" fill="none" '
            f'stroke="#fff"/>{_label(label, x, y, width)}</g>')


def _cell_title(node: _Node) -> str:
    own = node.size - sum(c.size for c in node.children.values())
    text = f"{node.name}: {node.size:,} bytes ({readable_size(node.size)})"
    if node.children and own:
        text += f", {own:,} bytes of them its own"
    return text + "; " + ", ".join(f"{LABELS[k]} {node.kinds[k]:,} bytes"
                                   for k in KINDS if node.kinds.get(k))


def _row(node: _Node, x: float, y: float, scale: float, out: list[str]) -> None:
    """The cells of node's children, and theirs below, from x on row y."""
    narrow: list[_Node] = []
    for child in node.children.values():
        width = child.size * scale
        if width < 1:
            narrow.append(child)
            continue
        parts = child.name.split(".")
        # an index reads with what it indexes ("layers.0", not "0")
        last = ".".join(parts[-2:]) if parts[-1].isdigit() and len(parts) > 1 else parts[-1]
        out.append(_cell(child, x, y, width, _cell_title(child),
                         f"{last} {readable_size(child.size)}"))
        _row(child, x, y + ROW, scale, out)
        x += width
    if narrow:
        size = sum(c.size for c in narrow)
        width = size * scale
        title = (f"{len(narrow)} more under {node.name or 'all modules'}, each under a "
                 f"pixel: {size:,} bytes ({readable_size(size)})")
        out.append(f'<g class="cell more" data-bytes="{size}" data-count="{len(narrow)}">'
                   f'{_title(title)}<rect x="{x:.3f}" y="{y}" width="{width:.3f}" '
                   f'height="{ROW}" fill="{_MORE_COLOR}"/></g>')


def _legend(kinds: list[str], y: float) -> str:
    parts, x = [], 0.0
    for kind in kinds:
        parts.append(f'<rect x="{x:.1f}" y="{y + 4}" width="10" height="10" '
                     f'fill="{KIND_COLORS[kind]}" fill-opacity="0.6"/>'
                     f'<text x="{x + 13:.1f}" y="{y + ROW - 5}" font-family="monospace" '
                     f'font-size="11" fill="#222">{html.escape(LABELS[kind])}</text>')
        x += 13 + _CHAR * len(LABELS[kind]) + 12
    return f'<g class="legend">{"".join(parts)}</g>'


def icicle_svg(modules: Optional[dict[str, dict[str, int]]]) -> str:
    """The icicle of a peak's ``modules_by_kind``; "" where no module holds
    anything (none recorded, only what no module made, an older file)."""
    top = _tree(modules or {})
    if top.size <= 0:
        return ""
    outside = sum((modules or {}).get(NO_MODULE, {}).values())
    title = f"all modules: {top.size:,} bytes ({readable_size(top.size)}) at the peak"
    if outside:
        title += f"; {outside:,} bytes made outside every module, not drawn"
    cells = [_cell(top, 0.0, 0, WIDTH, title, f"all modules {readable_size(top.size)}")]
    _row(top, 0.0, ROW, WIDTH / top.size, cells)
    rows = _depth(top)
    kinds = [k for k in KINDS if top.kinds.get(k)]
    height = (rows + 1) * ROW
    return (f'<svg class="icicle" xmlns="http://www.w3.org/2000/svg" role="img" '
            f'aria-label="{html.escape(title)}" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}" style="display:block;max-width:100%;'
            f'height:auto;margin:4px 0">{"".join(cells)}{_legend(kinds, rows * ROW)}</svg>')
