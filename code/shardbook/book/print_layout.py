"""The printed page's layout of figures (book machinery, layer 3): how an
SVG figure is drawn on paper so that its smallest text is at least
MIN_TEXT_PT, and the tiles a graph too large for that is cut into.

`make pdf` (pdf.py) prints at scale 1, so a CSS pixel is 0.75 pt on paper.
A figure fits when, drawn within the printed column and under the print
styles' height cap, its smallest text stays at least MIN_TEXT_PT; a figure
that does not, but whose text reaches MIN_TEXT_PT at a size that still fits
the column and TILE_MAX_HEIGHT_PX, is drawn at that size; anything larger
(the compiler's graphs, up to 4,220 px wide) is cut into tiles, each a view
of the same drawing (its viewBox moved), drawn at the size that keeps its
text readable, and overlapping its neighbours by a line of text, so that a
label cut at one tile's edge is whole in the next.
"""

import math
import re
import xml.etree.ElementTree as ET

PT_PER_PX = 0.75  # CSS pixels are 1/96 inch, points 1/72: printed at scale 1
MIN_TEXT_PT = 7.0
MIN_TEXT_PX = MIN_TEXT_PT / PT_PER_PX
# the print styles' cap on a figure's height (shardbook.css, figure img: 92 mm)
FIGURE_MAX_HEIGHT_PX = 92 * 96 / 25.4
# a tile, or a figure drawn larger for its text, stays under half the printed
# page (265 mm, 1,001 px), the most a block print will not break may take
TILE_MAX_HEIGHT_PX = 440
# a figure is drawn at this much more than the least size for MIN_TEXT_PT, so
# that rounding of the page's layout never takes it under
TEXT_MARGIN = 1.02

_UNITS = {"pt": 4 / 3, "px": 1.0, "": 1.0}
_FONT = re.compile(r'font-size="([0-9.]+)"|font(?:-size)?:\s*([0-9.]+)px')


def geometry(svg_text):
    """(own width px, own height px, viewBox (x, y, w, h), smallest font in
    viewBox units) of an SVG, or None when it has no size or no sized text."""
    root = ET.fromstring(svg_text)
    size = []
    for name in ("width", "height"):
        match = re.fullmatch(r"([0-9.]+)(pt|px|)", (root.get(name) or "").strip())
        if not match:
            return None
        size.append(float(match.group(1)) * _UNITS[match.group(2)])
    view = root.get("viewBox")
    box = tuple(float(v) for v in view.replace(",", " ").split()) if view else (0.0, 0.0, *size)
    fonts = [float(a or b) for a, b in _FONT.findall(svg_text)]
    if not fonts:
        return None
    return size[0], size[1], box, min(fonts)


def smallest_text_pt(svg_text, shown_width_px):
    """The smallest text of an SVG drawn `shown_width_px` wide, in printed
    points; None when it has no sized text."""
    found = geometry(svg_text)
    if found is None:
        return None
    _, _, box, font = found
    return font * shown_width_px / box[2] * PT_PER_PX


def _spans(length, tile, overlap):
    """(start, size) of tiles of at most `tile` covering `length`, each
    overlapping the next by `overlap`, all the same size."""
    if length <= tile:
        return [(0.0, length)]
    n = math.ceil((length - overlap) / (tile - overlap))
    size = (length + (n - 1) * overlap) / n
    return [(i * (size - overlap), size) for i in range(n)]


def plan(svg_text, column_px, shown_px=None):
    """How to print an SVG figure in a column `column_px` wide, which the
    print styles draw `shown_px` wide (by default as they would: the
    column's width, the height cap, never above its own size): ("fit",
    None) where that keeps its text at MIN_TEXT_PT or more (or it has no
    sized text), ("size", width px) where a larger size
    that fits the column and TILE_MAX_HEIGHT_PX does, else ("tiles",
    [(x, y, w, h) in viewBox units, ...], width px per viewBox unit) in
    reading order, rows of tiles from the top."""
    found = geometry(svg_text)
    if found is None:
        return ("fit", None)
    own_w, own_h, (vx, vy, vw, vh), font = found
    shown = shown_px or min(column_px, own_w, own_w * FIGURE_MAX_HEIGHT_PX / own_h)
    if font * shown / vw * PT_PER_PX >= MIN_TEXT_PT:
        return ("fit", None)
    scale = MIN_TEXT_PX * TEXT_MARGIN / font  # px per viewBox unit
    if vw * scale <= column_px and vh * scale <= TILE_MAX_HEIGHT_PX:
        return ("size", vw * scale)
    tile_w, tile_h = min(vw, column_px / scale), min(vh, TILE_MAX_HEIGHT_PX / scale)
    overlap = 2.5 * font  # a line of text and its spacing
    tiles = [(vx + x, vy + y, w, h) for y, h in _spans(vh, tile_h, overlap) for x, w in _spans(vw, tile_w, overlap)]
    return ("tiles", tiles, scale)


def tile(svg_text, box, scale):
    """The SVG showing only `box` (x, y, w, h in its viewBox units), drawn
    at `scale` px per unit: the same drawing with its viewBox moved."""
    x, y, w, h = box
    view = f'viewBox="{x:.2f} {y:.2f} {w:.2f} {h:.2f}"'
    size = f'width="{w * scale:.1f}px" height="{h * scale:.1f}px"'
    head, rest = svg_text.split("<svg", 1)
    attrs, body = rest.split(">", 1)
    attrs = re.sub(r'\s(?:width|height|viewBox)="[^"]*"', "", attrs)
    return f"{head}<svg {size} {view}{attrs}>{body}"
