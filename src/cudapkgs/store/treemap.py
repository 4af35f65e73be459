"""A closure's sizes drawn as a treemap: plain SVG (or an HTML page holding it and a table), no scripts.

Layout: the squarified treemap of Bruls, Huizing and van Wijk, "Squarified Treemaps" (2000):
tiles are laid in rows along the shorter side of the space left, a row growing while its
worst aspect ratio improves. Each tile's area is proportional to its path's NAR size.
Paths past the `max_tiles` heaviest are drawn as one grey "N smaller paths" tile, so the file
stays small for any closure. Every tile has a <title> (shown on hover) with the path, its size,
its share and its chain from the root.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

from ..table import format_size as _size
from .weights import Weight, short_names

__all__ = ["Tile", "squarify", "render_svg", "render_html"]

WIDTH, HEIGHT, HEADER = 1200, 720, 56
FONT = "DejaVu Sans, Verdana, Arial, sans-serif"
# A qualitative palette (Tableau 10), light enough for black text.
PALETTE = ("#8fb8de", "#ffbe7d", "#8cd17d", "#ff9d9a", "#b6a0d8", "#d7b5a6", "#f1a9cf", "#bab0ac", "#9ad5d0", "#f1ce63")


@dataclass(frozen=True)
class Tile:
    """A rectangle in user units: top-left (`x`, `y`), `w` wide, `h` high, for item `index` of the input."""

    index: int
    x: float
    y: float
    w: float
    h: float


def squarify(values: Sequence[float], x: float, y: float, w: float, h: float) -> list[Tile]:
    """Tiles for `values` (non-negative, heaviest first for the best aspect ratios) filling the rectangle.

    Tile areas are proportional to the values and sum to ``w * h`` (zero values get zero-area
    tiles); an empty or all-zero input gives no tiles. ValueError for a negative value.
    """
    if any(v < 0 for v in values):
        raise ValueError("treemap values must not be negative")
    total = float(sum(values))
    if not values or total <= 0 or w <= 0 or h <= 0:
        return []
    scale = w * h / total
    areas = [(i, v * scale) for i, v in enumerate(values)]
    tiles: list[Tile] = []
    row: list[tuple[int, float]] = []
    rest = list(areas)
    while rest:
        side = min(w, h)
        candidate = row + [rest[0]]
        if not row or _worst(candidate, side) <= _worst(row, side):
            row = candidate
            rest.pop(0)
            continue
        x, y, w, h = _lay_row(row, x, y, w, h, tiles)
        row = []
    if row:
        _lay_row(row, x, y, w, h, tiles)
    return tiles


def _worst(row: list[tuple[int, float]], side: float) -> float:
    """The worst aspect ratio of `row` laid along a side of length `side`."""
    s = sum(a for _, a in row)
    if s <= 0:
        return float("inf")
    biggest, smallest = max(a for _, a in row), min(a for _, a in row)
    if smallest <= 0:
        return float("inf")
    return max(side * side * biggest / (s * s), s * s / (side * side * smallest))


def _lay_row(row: list[tuple[int, float]], x: float, y: float, w: float, h: float,
             tiles: list[Tile]) -> tuple[float, float, float, float]:
    """Lay `row` along the shorter side; returns the rectangle left over."""
    s = sum(a for _, a in row)
    if w >= h:  # a column at the left, tiles stacked downwards
        thick = s / h if h else 0.0
        at = y
        for i, a in row:
            size = a / thick if thick else 0.0
            tiles.append(Tile(i, x, at, thick, size))
            at += size
        return x + thick, y, w - thick, h
    thick = s / w if w else 0.0
    at = x
    for i, a in row:
        size = a / thick if thick else 0.0
        tiles.append(Tile(i, at, y, size, thick))
        at += size
    return x, y + thick, w, h - thick


def _fit(text: str, width: float, font_size: float) -> str:
    """`text` cut with "…" to about `width` units at `font_size` (average glyph 0.6 em)."""
    room = int(width / (font_size * 0.6))
    if room <= 1:
        return ""
    return text if len(text) <= room else text[: room - 1] + "…"


def render_svg(weights: Sequence[Weight], title: str, max_tiles: int = 150) -> str:
    """An SVG document (a str) drawing `weights` (as `closure_weights` orders them) as a treemap.

    `title` heads the picture (e.g. the root's name); tiles beyond the `max_tiles` heaviest are
    merged into one. Sizes are shown as B/KiB/MiB/GiB (powers of 1024).
    """
    total = sum(w.nar_size for w in weights)
    shown = list(weights[:max_tiles])
    rest = list(weights[max_tiles:])
    names = short_names([w.path for w in weights])
    values = [w.nar_size for w in shown] + ([sum(w.nar_size for w in rest)] if rest else [])
    tiles = squarify(values, 0, HEADER, WIDTH, HEIGHT - HEADER)
    one_root = len({w.chain[0] for w in weights}) == 1
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
           f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="{FONT}">',
           f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#ffffff"/>',
           f'<text x="8" y="24" font-size="18" font-weight="bold">{html.escape(title)}</text>',
           f'<text x="8" y="46" font-size="13" fill="#444">{len(weights)} paths, {_size(total)} in all '
           f'(NAR sizes); each area is one path\'s share. Hover a tile for why it is there.</text>']
    for tile in tiles:
        if tile.index < len(shown):
            w = shown[tile.index]
            label, fill = names[w.path], PALETTE[tile.index % len(PALETTE)]
            why = " → ".join(names[p] for p in w.chain)
            tip = f"{w.path}\n{_size(w.nar_size)}, {w.share:.1%} of the closure\nwhy: {why}"
            share = w.share
        else:
            label, fill = f"{len(rest)} smaller paths", "#dddddd"
            share = values[-1] / total if total else 0.0
            tip = f"{len(rest)} paths under {_size(rest[0].nar_size)} each, {share:.1%} of the closure"
        out.append(f'<g><title>{html.escape(tip)}</title>'
                   f'<rect x="{tile.x:.2f}" y="{tile.y:.2f}" width="{tile.w:.2f}" height="{tile.h:.2f}" '
                   f'fill="{fill}" stroke="#ffffff" stroke-width="1.5"/>')
        font = 13.0 if tile.w >= 90 and tile.h >= 40 else 10.0
        if tile.h >= font * 1.3 + 4:
            text = _fit(label, tile.w - 8, font)
            if text:
                out.append(f'<text x="{tile.x + 4:.2f}" y="{tile.y + font + 3:.2f}" font-size="{font:g}">'
                           f'{html.escape(text)}</text>')
        if tile.h >= font * 2.6 + 6:
            text = _fit(f"{_size(values[tile.index])} · {share:.1%}", tile.w - 8, font)
            if text:
                out.append(f'<text x="{tile.x + 4:.2f}" y="{tile.y + 2 * font + 6:.2f}" font-size="{font:g}" '
                           f'fill="#333">{html.escape(text)}</text>')
        if tile.index < len(shown) and tile.h >= font * 3.9 + 8:
            chain = shown[tile.index].chain
            # One root: every chain starts there, so the line names what lies between (the tile's own room).
            between = chain[1:-1] if one_root else chain[:-1]
            if len(chain) == 1:
                line = "(a root)"
            elif not between:
                line = "the root refers to it"
            else:
                line = "via " + " → ".join(names[p] for p in between)
            text = _fit(line, tile.w - 8, font * 0.9)
            if text:
                out.append(f'<text x="{tile.x + 4:.2f}" y="{tile.y + 3 * font + 8:.2f}" font-size="{font * 0.9:g}" '
                           f'fill="#555">{html.escape(text)}</text>')
        out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def render_html(weights: Sequence[Weight], title: str, max_tiles: int = 150) -> str:
    """A self-contained HTML page (a str): the treemap of `render_svg` inline, then a table of every
    path (size, share, cumulative share, chain from the root). No scripts, no network."""
    names = short_names([w.path for w in weights])
    rows = "\n".join(
        f"<tr><td class=n>{_size(w.nar_size)}</td><td class=n>{w.share:.1%}</td><td class=n>{w.cumulative:.1%}</td>"
        f"<td title=\"{html.escape(w.path)}\">{html.escape(names[w.path])}</td>"
        f"<td>{html.escape(' → '.join(names[p] for p in w.chain))}</td></tr>"
        for w in weights)
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>\n"
            "<style>body{font-family:" + FONT + ";margin:16px} table{border-collapse:collapse;font-size:13px}"
            " td,th{padding:2px 8px;text-align:left;border-bottom:1px solid #eee} .n{text-align:right}</style>"
            f"</head><body>\n{render_svg(weights, title, max_tiles)}"
            "<table><tr><th class=n>size</th><th class=n>share</th><th class=n>cumulative</th><th>path</th>"
            f"<th>why (from the root)</th></tr>\n{rows}\n</table></body></html>\n")
