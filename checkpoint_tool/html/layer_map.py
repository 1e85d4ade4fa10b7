"""The layer map: an inline SVG with one column per MoE layer and one row per question.

Each cell is a coloured rect with its hover text as an SVG ``<title>`` and the longest label
that fits its width (monospace, so the width of a label is known here: ``CHAR_EM`` per
character; the browser test measures the real glyphs). A column is a link to ``#layer-N``,
the panel with that layer's numbers (shown by CSS ``:target``, no script).

Geometry (pixels): ``LABEL_W`` for the row names, then ``cell_width(n)`` per layer, between
``MIN_CELL`` (61 layers: 22, labels at 9.5 px) and ``MAX_CELL`` (4 layers: 200)::

    <svg class="map narrow" width="1430" height="192" data-layers="59" data-cell="22">
      <a href="#layer-3"><g class="col" data-layer="3">
        <g><title>MoE layer 3: fused into routed slot(s) [256], 2048 wide</title>
           <rect class="cell" data-row="fse" data-kind="fused" .../><text ...>on</text></g> ...
"""

from __future__ import annotations

from collections.abc import Sequence

from checkpoint_tool.html.cells import Row
from checkpoint_tool.html.page import esc
from checkpoint_tool.policy.report import PolicyReport

FONT_PX = 11
#: narrow columns (many layers) draw their labels smaller, to keep 3-digit numbers
NARROW_FONT_PX = 9.5
NARROW_BELOW = 30
#: advance of one monospace glyph (DejaVu Sans Mono / Liberation Mono: 0.60 em), with margin
CHAR_EM = 0.62
PAD = 2
LABEL_W = 130
HEADER_H = 22
ROW_H = 24
MIN_CELL = 22
MAX_CELL = 200
#: the map aims at this width before it scrolls sideways
TARGET_W = 1200
HEADER_FILL = "#334155"
MTP_FILL = "#7c3aed"


def cell_width(n_layers: int) -> int:
    """Width of one layer's column: the map fills ``TARGET_W`` within the bounds."""
    if n_layers <= 0:
        return MAX_CELL
    return max(MIN_CELL, min(MAX_CELL, (TARGET_W - LABEL_W) // n_layers))


def char_width(cell: int) -> float:
    """Estimated advance of one label glyph in a column ``cell`` pixels wide."""
    return CHAR_EM * (NARROW_FONT_PX if cell < NARROW_BELOW else FONT_PX)


def fit(labels: Sequence[str], width: int) -> str:
    """The first label if it fits ``width`` (with padding); a long first label cut with an
    ellipsis when 6 characters or more remain; else the first shorter one that fits, or ""."""
    room = width - 2 * PAD
    per_char = char_width(width)
    first = labels[0]
    if len(first) * per_char <= room:
        return first
    keep = int(room // per_char) - 1
    if len(first) >= 10 and keep >= 6:
        return first[:keep] + "…"
    return next((label for label in labels[1:] if len(label) * per_char <= room), "")


def _text_fill(fill: str) -> str:
    """Dark or white text, whichever reads better on ``fill`` (#rrggbb)."""
    r, g, b = (int(fill[i : i + 2], 16) for i in (1, 3, 5))
    return "#1d2330" if 0.299 * r + 0.587 * g + 0.114 * b > 150 else "#ffffff"


def _label(x: float, y: float, text: str, fill: str) -> str:
    if not text:
        return ""
    return (
        f'<text x="{x:g}" y="{y:g}" text-anchor="middle" fill="{_text_fill(fill)}">'
        f"{esc(text)}</text>"
    )


def render_map(report: PolicyReport, rows: Sequence[Row]) -> str:
    """The SVG of the map (deterministic: fixed geometry, no ids beyond the layer anchors)."""
    n = len(report.moe_layers)
    cw = cell_width(n)
    width = LABEL_W + n * cw + 2
    height = HEADER_H + len(rows) * ROW_H + 2
    out = [
        f'<svg class="map{" narrow" if cw < NARROW_BELOW else ""}" xmlns="http://www.w3.org/2000/svg" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" data-layers="{n}" '
        f'data-cell="{cw}" role="img" aria-label="layer policy map, {n} MoE layers">'
    ]
    out.append(f'<text class="row" x="4" y="{HEADER_H / 2:g}" fill="#4a5568">MoE layer</text>')
    for r, row in enumerate(rows):
        y = HEADER_H + r * ROW_H + ROW_H / 2
        out.append(f'<text class="row" x="4" y="{y:g}" fill="#1d2330">{esc(row.name)}</text>')
    for c, m in enumerate(report.moe_layers):
        x = LABEL_W + c * cw
        mid = x + cw / 2
        head_fill = MTP_FILL if m.is_mtp else HEADER_FILL
        head_title = (
            f"MoE layer {m.layer}{' (MTP)' if m.is_mtp else ''}: {m.prefix}; click for numbers"
        )
        out.append(
            f'<a href="#layer-{m.layer}"><g class="col" data-layer="{m.layer}">'
            f"<g><title>{esc(head_title)}</title>"
            f'<rect class="cell head" data-row="layer" data-kind="{"mtp" if m.is_mtp else "layer"}" '
            f'x="{x}" y="0" width="{cw}" height="{HEADER_H}" fill="{head_fill}"/>'
            f"{_label(mid, HEADER_H / 2, fit((str(m.layer),), cw), head_fill)}</g>"
        )
        for r, row in enumerate(rows):
            cell = row.cells[c]
            y = HEADER_H + r * ROW_H
            out.append(
                f"<g><title>{esc(cell.title)}</title>"
                f'<rect class="cell" data-row="{esc(row.key)}" data-kind="{esc(cell.kind)}" '
                f'x="{x}" y="{y}" width="{cw}" height="{ROW_H}" fill="{cell.fill}"/>'
                f"{_label(mid, y + ROW_H / 2, fit(cell.labels, cw), cell.fill)}</g>"
            )
        out.append("</g></a>")
    out.append("</svg>")
    return "\n".join(out)
