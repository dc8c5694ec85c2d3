"""A small writer of compact, self-contained SVG figures (no matplotlib):
the book's diagrams and animations are drawn with it.

A figure is shown by a chapter cell as its value (`_repr_svg_`), which
myst-nb writes to an image file that the page loads lazily. Animation is CSS
only (no script), in frames: an element is visible from one frame to
another. The SVG's own state, without animation, is the final frame: the
animation rules apply only under `prefers-reduced-motion: no-preference` on a
screen, so opened on its own it rests on the final frame for a reader who
asks for no motion and in print. Loaded as an image it does not see the
page's media, so the built page also offers `final_frame` for those media
(pages.rewrite_pages, a <picture> source). Every text is at least MIN_FONT_PX in the figure's own units,
and a figure is at most MAX_WIDTH_PX wide, so it is drawn at its own size in
the book's text column (688 px at 1280 px) and its text is never under
10 px there; on a narrower screen the page keeps every figure at least as
wide as its smallest text needs (pages.readable_width_px) and lets it scroll
sideways in its frame.

Not a cost-model module: layer 3, the book's machinery.
"""

import re
from html import escape

MIN_FONT_PX = 12
MAX_WIDTH_PX = 680
TEXT_COLUMN_PX = 688  # the theme's article column at a 1280 px window

INK = "#1a1a1a"
ACCENT = "#1565c0"
ACCENT2 = "#c62828"
GREEN = "#2e7d32"
PURPLE = "#6a1b9a"
ORANGE = "#ef6c00"
MUTED = "#9e9e9e"
LIGHT = "#e0e0e0"
CHUNK_COLORS = ("#1565c0", "#c62828", "#2e7d32", "#6a1b9a", "#ef6c00", "#00838f", "#ad1457", "#5d4037")


def _num(x):
    """A coordinate with at most one decimal, no trailing zeros."""
    text = f"{x:.1f}"
    return text[:-2] if text.endswith(".0") else text


class Figure:
    """An SVG drawing in user units (= CSS px at its own width).

    `alt` is the text a reader without the image gets (the SVG's <title>);
    `numbers` holds the values the drawing states, each computed by the
    cost-model function the prose uses (tests compare them). Add elements
    with `rect`, `line`, `text`, `circle`, `path`; pass `frames=(a, b)` to
    show one only from frame a up to (not including) frame b (b None: to the
    end); `n_frames` > 1 makes the figure animated.
    """

    def __init__(self, width, height, alt, n_frames=1, seconds_per_frame=1.2, numbers=None):
        if width > MAX_WIDTH_PX:
            raise ValueError(f"width: at most {MAX_WIDTH_PX} px (the text column), got {width}")
        if not alt or len(alt.split()) < 8:
            raise ValueError(f"alt: must say what the figure shows in at least eight words, got {alt!r}")
        self.width, self.height, self.alt = width, height, alt
        self.n_frames = n_frames
        self.seconds_per_frame = seconds_per_frame
        self.numbers = numbers if numbers is not None else {}
        self._body = []
        self._classes = {}  # (first, end) -> class name
        self._rules = {}  # static class -> CSS declarations (shared attributes, to keep files small)

    # --- animation -------------------------------------------------------
    def _pct(self, frame):
        """Where frame `frame` starts in the cycle (%): the frames share the
        first 80 %, the final frame holds for the last 20 %."""
        return round(80 * frame / (self.n_frames - 1), 2)

    def _frame_class(self, frames):
        if frames is None or self.n_frames <= 1:
            return ""
        first, end = frames
        if not 0 <= first < self.n_frames or (end is not None and not first < end <= self.n_frames):
            raise ValueError(f"frames: must be (first, end) with 0 <= first < end <= {self.n_frames}, got {frames!r}")
        if end == self.n_frames:
            end = None
        if first == 0 and end is None:
            return ""
        key = (first, end)
        if key not in self._classes:
            self._classes[key] = f"f{len(self._classes)}"
        return self._classes[key]

    def style(self, cls, declarations):
        """A class for attributes many elements share: `declarations` is CSS
        (a font-size in it must be at least MIN_FONT_PX)."""
        size = re.search(r"font-size:\s*([0-9.]+)px", declarations)
        if size and float(size.group(1)) < MIN_FONT_PX:
            raise ValueError(f"declarations: figure text is at least {MIN_FONT_PX} px, got {declarations!r}")
        self._rules[cls] = declarations

    def _attrs(self, frames, kw, cls=None):
        classes = " ".join(c for c in (cls, self._frame_class(frames)) if c)
        parts = [f'class="{classes}"'] if classes else []
        for key, value in kw.items():
            if value is None:
                continue
            name = key.rstrip("_").replace("_", "-")
            parts.append(f'{name}="{_num(value) if isinstance(value, float) else escape(str(value))}"')
        return " ".join(parts)

    # --- elements ---------------------------------------------------------
    def rect(self, x, y, w, h, fill="none", stroke=None, frames=None, cls=None, **kw):
        style = {} if cls else dict(fill=fill, stroke=stroke)
        self._body.append(
            f'<rect x="{_num(x)}" y="{_num(y)}" width="{_num(w)}" height="{_num(h)}" '
            f"{self._attrs(frames, dict(style, **kw), cls)}/>"
        )

    def line(self, x1, y1, x2, y2, stroke=INK, frames=None, cls=None, **kw):
        self._body.append(
            f'<line x1="{_num(x1)}" y1="{_num(y1)}" x2="{_num(x2)}" y2="{_num(y2)}" '
            f"{self._attrs(frames, dict(stroke=stroke, **kw), cls)}/>"
        )

    def circle(self, cx, cy, r, fill="none", stroke=None, frames=None, **kw):
        self._body.append(
            f'<circle cx="{_num(cx)}" cy="{_num(cy)}" r="{_num(r)}" '
            f"{self._attrs(frames, dict(fill=fill, stroke=stroke, **kw))}/>"
        )

    def path(self, d, stroke=INK, fill="none", frames=None, **kw):
        self._body.append(f'<path d="{d}" {self._attrs(frames, dict(stroke=stroke, fill=fill, **kw))}/>')

    def arrow(self, x1, y1, x2, y2, stroke=INK, frames=None, width=1.6, head=7):
        """A straight arrow from (x1, y1) to (x2, y2) with a filled head."""
        import math

        angle = math.atan2(y2 - y1, x2 - x1)
        bx, by = x2 - head * math.cos(angle), y2 - head * math.sin(angle)
        px, py = -math.sin(angle) * head / 2, math.cos(angle) * head / 2
        self.line(x1, y1, bx, by, stroke=stroke, frames=frames, stroke_width=width)
        self.path(
            f"M{_num(x2)} {_num(y2)}L{_num(bx + px)} {_num(by + py)}L{_num(bx - px)} {_num(by - py)}Z",
            stroke="none",
            fill=stroke,
            frames=frames,
        )

    def text(self, x, y, content, size=MIN_FONT_PX, anchor="start", fill=INK, weight=None, frames=None, cls=None):
        """A text; with `cls` (a class made by `style`) its look comes from the class."""
        if size < MIN_FONT_PX:
            raise ValueError(f"size: figure text is at least {MIN_FONT_PX} px, got {size}")
        if cls is None:
            look = f'font-size="{_num(size)}" '
            kw = dict(
                text_anchor=anchor if anchor != "start" else None,
                fill=fill if fill != INK else None,
                font_weight=weight,
            )
        else:
            look, kw = "", {}
        self._body.append(
            f'<text x="{_num(x)}" y="{_num(y)}" {look}{self._attrs(frames, kw, cls)}>{escape(str(content))}</text>'
        )

    def box(self, x, y, w, h, label, fill=ACCENT, ink="white", size=MIN_FONT_PX, frames=None, stroke=INK):
        """A rounded box with a centred label."""
        self.rect(x, y, w, h, fill=fill, stroke=stroke, rx=4, frames=frames, stroke_width=0.8)
        if label:
            self.text(x + w / 2, y + h / 2 + size * 0.35, label, size=size, anchor="middle", fill=ink, frames=frames)

    # --- output -------------------------------------------------------------
    @property
    def animated(self):
        return self.n_frames > 1 and bool(self._classes)

    def _style(self):
        rules = ["text{font-family:system-ui,-apple-system,'Segoe UI',Roboto,Helvetica,Arial,sans-serif}"]
        rules += [f".{cls}{{{decl}}}" for cls, decl in self._rules.items()]
        if not self.animated:
            return "".join(rules)
        total = self.seconds_per_frame * (self.n_frames - 1) / 0.8
        hidden, motion = [], []
        for (first, end), cls in self._classes.items():
            a = self._pct(first)
            if end is None:  # visible in the final frame: the static state shows it
                frames = f"0%{{opacity:0}}{a}%{{opacity:1}}"
            else:  # gone by the final frame: hidden in the static state
                hidden.append(f".{cls}")
                frames = f"0%{{opacity:0}}{a}%{{opacity:1}}{self._pct(end)}%{{opacity:0}}"
            motion.append(f"@keyframes {cls}{{{frames}}}.{cls}{{animation:{cls} {total:.1f}s step-end infinite}}")
        if hidden:
            rules.append(",".join(hidden) + "{opacity:0}")
        rules.append("@media screen and (prefers-reduced-motion:no-preference){" + "".join(motion) + "}")
        # no motion asked, or a printed page: the final frame, which is the static state
        rules.append("@media (prefers-reduced-motion:reduce){*{animation:none!important}}")
        rules.append("@media print{*{animation:none!important}}")
        return "".join(rules)

    def svg(self):
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{self.width}" height="{_num(self.height)}" '
            f'viewBox="0 0 {self.width} {_num(self.height)}" fill="{INK}" role="img" aria-label="{escape(self.alt)}">'
            f"<title>{escape(self.alt)}</title><style>{self._style()}</style>"
            f'<rect width="100%" height="100%" fill="white"/>' + "".join(self._body) + "</svg>"
        )

    def _repr_svg_(self):
        return self.svg()

    def save(self, path):
        from pathlib import Path

        Path(path).write_text(self.svg())
        return path


_MOTION = re.compile(r"@media screen and \(prefers-reduced-motion:no-preference\)\{.*?\}\}(?=@media \(prefers)", re.S)


def is_animated(svg_text):
    """Whether an SVG written by Figure plays an animation."""
    return bool(_MOTION.search(svg_text))


def final_frame(svg_text):
    """The same SVG without its animation: the final frame, still. A page
    shows it where the reader asks for no motion and in print (an SVG loaded
    as an image does not see the page's media: Chromium plays it and prints
    its first frame), through `<picture><source media=...>`."""
    still = _MOTION.sub("", svg_text)
    if still == svg_text:
        raise ValueError("svg_text: not an animated figure of shardbook.book.svg")
    return still


_FONT = re.compile(r'font-size="([0-9.]+)"|font(?:-size)?:\s*([0-9.]+)px')


def min_font_px(svg_text, column_px=TEXT_COLUMN_PX):
    """The smallest text size (CSS px) of an SVG drawn at its own width, or
    scaled down to fit a column of `column_px`."""
    import xml.etree.ElementTree as ET

    root = ET.fromstring(svg_text)
    view = root.get("viewBox")
    width = root.get("width", "")
    units = {"pt": 4 / 3, "px": 1.0, "": 1.0}
    match = re.fullmatch(r"([0-9.]+)(pt|px|)", width.strip())
    view_w = float(view.split()[2]) if view else None
    shown_px = float(match.group(1)) * units[match.group(2)] if match else column_px
    shown_px = min(shown_px, column_px)
    scale = shown_px / (view_w or shown_px)
    sizes = [float(a or b) for a, b in _FONT.findall(svg_text)]
    return min(sizes) * scale if sizes else None
