"""`make pdf`: the whole book as one PDF (book machinery, layer 3).

Jupyter Book's single-page build is printed by Debian's Chromium through
Playwright, with the site's print styles, a title page and a contents list
put in front, page numbers in the footer and the headings as PDF bookmarks.
Before printing, the page is checked as print lays it out, at the printed
column's width: a code block, table or figure wider than the column (its
end would be cut off), an interactive control still shown (a live box, a
"Show code cell output" toggle, a button), or a block print cannot break
that is taller than half a page (it would leave a large blank gap when
pushed to the next page) stops the print with a message, as does text
under MIN_TEXT_PT on paper (the page's text, and the text inside each SVG
figure at the size it is drawn) and a blank figure (under BLANK_INK_SHARE
of its pixels drawn). Before that check, the page is laid out for paper:
each animated figure shows its final frame (the still its <picture> offers
print), a figure whose text would print too small is drawn larger or cut
into tiles (print_layout), and a code block whose lines are too long for
the column is set in smaller type, down to MIN_TEXT_PT, where that keeps
each line whole. The page is printed twice: the contents has a slot of
fixed width for each entry's page number; the first print's bookmarks say
on which page each heading landed, the numbers go into their slots, and
after the second print every number is checked against the page its
bookmark opens. After printing, the bookmarks' titles are mended (Chromium
doubles some) and checked, each heading once and its title not doubled,
and no page may be blank. The PDF is written to a temporary file and then
moved into place, so a failure leaves the previous PDF as it was.

    python -m shardbook.book.pdf _build/singlehtml _build/pdf/book.pdf
"""

import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from . import print_layout, site
from .print_layout import MIN_TEXT_PT, MIN_TEXT_PX

FOOTER = (
    '<div style="font-size:10px;width:100%;text-align:center;color:#555">'
    '<span class="pageNumber"></span> / <span class="totalPages"></span></div>'
)


# A4 less the margins below, in CSS pixels (96 per inch): the printed column
PAGE_MARGINS_MM = {"top": 16, "bottom": 16, "left": 14, "right": 14}
MM_PX = 96 / 25.4
COLUMN_WIDTH_PX = round((210 - PAGE_MARGINS_MM["left"] - PAGE_MARGINS_MM["right"]) * MM_PX)
PAGE_HEIGHT_PX = round((297 - PAGE_MARGINS_MM["top"] - PAGE_MARGINS_MM["bottom"]) * MM_PX)
# an unbreakable block taller than this share of a page leaves at least the
# rest of the page blank when it does not fit under the text above it
UNBREAKABLE_SHARE = 0.5

# What print would cut off, show needlessly or push whole onto the next
# page, read in the page laid out for print at the column's width. Print
# opens every <details> first (a folded cell output is printed open).
PRINT_PROBLEMS_JS = """([column, unbreakable]) => {
  const shown = e => { const r = e.getBoundingClientRect(); return getComputedStyle(e).display !== 'none'
    && getComputedStyle(e).visibility !== 'hidden' && (r.width > 0 || r.height > 0); };
  const label = e => (e.getAttribute('aria-label') || e.textContent || e.tagName).trim().replace(/\\s+/g, ' ').slice(0, 60);
  const main = document.querySelector('main') || document.body;
  const left = main.getBoundingClientRect().left;
  const mono = e => { const s = getComputedStyle(e);
    return ['auto', 'scroll'].includes(s.overflowY) || ['auto', 'scroll'].includes(s.overflowX)
      || s.breakInside === 'avoid' || s.breakInside === 'avoid-page'; };
  return {
    clipped: [...document.querySelectorAll('pre')].filter(p => shown(p) && p.scrollWidth > p.clientWidth + 1)
      .map(p => p.textContent.trim().slice(0, 60)),
    wide: [...main.querySelectorAll('table, img, svg, figure')]
      .filter(e => shown(e) && !e.closest('svg *') && e.getBoundingClientRect().right - left > column + 1)
      .map(e => e.tagName.toLowerCase() + ' ' + Math.round(e.getBoundingClientRect().width) + ' px: '
        + (e.closest('figure, table') || e).textContent.trim().replace(/\\s+/g, ' ').slice(0, 50)),
    screen_only: [...document.querySelectorAll('.shardbook-live, .shardbook-full-size')].filter(shown).length,
    controls: [...document.querySelectorAll('summary, button, input, select, textarea, [role=button], .toggle-button')]
      .filter(e => shown(e) && main.contains(e)).map(label),
    unbreakable: [...main.querySelectorAll('div, table, figure, pre, img, svg, details, aside, blockquote, dl, ul, ol, p')]
      .filter(e => !e.closest('svg *') && e.getBoundingClientRect().height > unbreakable && shown(e) && mono(e))
      .filter((e, i, all) => !all.some(o => o !== e && o.contains(e)))
      .map(e => e.tagName.toLowerCase() + '.' + [...e.classList].join('.') + ' '
        + Math.round(e.getBoundingClientRect().height) + ' px: ' + e.textContent.trim().replace(/\\s+/g, ' ').slice(0, 50)),
  };
}"""


def print_problems(page):
    """What is wrong with `page` (a Playwright page in print media, laid
    out at the printed column's width, COLUMN_WIDTH_PX) as print would lay
    it out: a line per code block, table or figure wider than the column,
    per interactive control shown (screen-only boxes, toggles, buttons), and
    per block print cannot break (scrolling, or break-inside: avoid) taller
    than half a page."""
    found = page.evaluate(PRINT_PROBLEMS_JS, [COLUMN_WIDTH_PX, PAGE_HEIGHT_PX * UNBREAKABLE_SHARE])
    problems = [f"a code block is wider than the printed column (cut off): {text!r}" for text in found["clipped"]]
    problems += [f"wider than the printed column ({COLUMN_WIDTH_PX} px, cut off): {text!r}" for text in found["wide"]]
    if found["screen_only"]:
        problems.append(f"{found['screen_only']} screen-only control(s) shown in print (live box, full-size links)")
    problems += [f"an interactive control shown in print: {text!r}" for text in found["controls"]]
    problems += [
        f"a block print cannot break is taller than half a page (a large blank gap before it): {text!r}"
        for text in found["unbreakable"]
    ]
    return problems


# Figures print as a reader sees them at rest: each animated figure's
# <picture> offers print its final frame (pages.STILL_MEDIA), but Chromium's
# print keeps the image it chose for the screen and prints the animation's
# first frame; the still becomes the image itself.
STILLS_JS = """() => {
  let n = 0;
  document.querySelectorAll('picture').forEach(p => {
    const still = [...p.querySelectorAll('source')].find(s => /\\bprint\\b/.test(s.media || ''));
    const img = p.querySelector('img');
    if (!still || !img) return;
    img.loading = 'eager';
    img.removeAttribute('srcset');
    img.src = new URL(still.getAttribute('srcset').trim().split(/\\s+/)[0], document.baseURI).href;
    p.querySelectorAll('source').forEach(s => s.remove());
    n += 1;
  });
  return n;
}"""

# Every SVG image in the book's text, with the size print draws it at; each
# is numbered (data-print-figure) for the changes below.
SVG_FIGURES_JS = """() => {
  const main = document.querySelector('main') || document.body;
  return [...main.querySelectorAll('img')].filter(i => /\\.svg(?:[?#]|$)/.test(i.currentSrc || i.src))
    .filter(i => i.getClientRects().length && getComputedStyle(i).visibility !== 'hidden')
    .map((i, k) => { i.dataset.printFigure = k; const r = i.getBoundingClientRect();
      return {index: k, url: i.currentSrc || i.src, width: r.width, height: r.height,
              room: main.getBoundingClientRect().right - r.left}; });
}"""

# A figure drawn larger for its text, or replaced by its tiles, each with its
# size (no layout change when it loads) and a line saying which part it is.
APPLY_FIGURES_JS = """(changes) => {
  for (const c of changes) {
    const img = document.querySelector(`img[data-print-figure="${c.index}"]`);
    if (!img) continue;
    if (c.still) { img.removeAttribute('srcset'); img.loading = 'eager'; img.src = c.still; }
    if (c.width) {
      img.style.cssText += `;width:${c.width}px !important;height:auto !important;max-width:none !important;max-height:none !important`;
      continue;
    }
    if (!c.tiles) continue;
    const box = document.createElement('div');
    box.className = 'shardbook-print-tiles';
    c.tiles.forEach((t, k) => {
      const part = document.createElement('div');
      part.className = 'shardbook-print-tile';
      const label = document.createElement('p');
      label.className = 'shardbook-print-tile-label';
      label.textContent = `${c.name}, part ${k + 1} of ${c.tiles.length} (row ${t.row}, column ${t.column})`;
      const tile = document.createElement('img');
      tile.src = t.src; tile.alt = `${img.alt} (part ${k + 1} of ${c.tiles.length})`;
      tile.width = Math.round(t.width); tile.height = Math.round(t.height);
      tile.style.cssText = `width:${t.width}px !important;height:${t.height}px !important;`
        + 'max-width:none !important;max-height:none !important';
      part.append(label, tile);
      box.append(part);
    });
    (img.closest('picture') || img).replaceWith(box);
  }
  return changes.length;
}"""

# Code blocks whose lines are longer than the column: one line per line in
# smaller type where that type is not under the floor (a table the planner
# prints stays a table); otherwise they wrap, at their own size.
FIT_CODE_JS = """([minPx]) => {
  const main = document.querySelector('main') || document.body;
  let fitted = 0;
  for (const pre of main.querySelectorAll('pre')) {
    if (!pre.getClientRects().length) continue;
    pre.classList.add('shardbook-print-oneline');
    const s = getComputedStyle(pre);
    const pad = parseFloat(s.paddingLeft) + parseFloat(s.paddingRight);
    if (pre.scrollWidth <= pre.clientWidth + 1) { pre.classList.remove('shardbook-print-oneline'); continue; }
    let size = parseFloat(s.fontSize) * (pre.clientWidth - pad) / (pre.scrollWidth - pad);
    for (let tries = 0; tries < 4 && size >= minPx; tries++) {
      pre.style.setProperty('font-size', `${Math.floor(size * 100) / 100}px`, 'important');
      if (pre.scrollWidth <= pre.clientWidth + 1) break;
      size *= 0.98;
    }
    if (size < minPx || pre.scrollWidth > pre.clientWidth + 1) {
      pre.classList.remove('shardbook-print-oneline');
      pre.style.removeProperty('font-size');
    } else {
      fitted += 1;
    }
  }
  return fitted;
}"""

# Tables as print lays them out: type no smaller than the floor (the print
# styles shrink a cell output's table twice over), identifiers never broken
# inside a word; a table still wider than the column then prints as column
# groups, each a table of its own that repeats the first column (the row's
# name) and says which columns it holds. A table with merged cells keeps the
# print styles' wrapping.
FIT_TABLES_JS = """([minPx]) => {
  const main = document.querySelector('main') || document.body;
  const width = main.getBoundingClientRect().width;
  const cellsOf = t => [...t.querySelectorAll('th, td, caption')].filter(c => c.closest('table') === t);
  let grouped = 0, enlarged = 0;
  for (const table of [...main.querySelectorAll('table')].filter(t => t.getClientRects().length && !t.parentElement.closest('table'))) {
    let smallest = Infinity;
    for (const c of cellsOf(table)) {
      for (const e of [c, ...c.querySelectorAll('*')]) {
        const own = [...e.childNodes].some(t => t.nodeType === 3 && /[^\\s\u200b]/.test(t.textContent));
        if (own && e.getClientRects().length) smallest = Math.min(smallest, parseFloat(getComputedStyle(e).fontSize));
      }
    }
    if (smallest < minPx) {
      const size = parseFloat(getComputedStyle(table).fontSize) * minPx / smallest;
      table.style.setProperty('font-size', `${Math.ceil(size * 100) / 100}px`, 'important');
      enlarged += 1;
    }
    table.classList.add('shardbook-print-whole-words');
    if (table.getBoundingClientRect().width <= width + 1) continue;
    const rows = [...table.rows];
    const n = rows.length ? rows[0].cells.length : 0;
    const plain = n > 2 && rows.every(r => r.cells.length === n && [...r.cells].every(c => c.colSpan === 1 && c.rowSpan === 1));
    if (!plain) { table.classList.remove('shardbook-print-whole-words'); continue; }
    let done = false;
    for (let groups = 2; groups < n && !done; groups++) {
      const per = Math.ceil((n - 1) / groups);
      const parts = [];
      for (let g = 0; g < groups && 1 + g * per < n; g++) {
        const keep = new Set([0]);
        for (let k = 1 + g * per; k < Math.min(n, 1 + (g + 1) * per); k++) keep.add(k);
        const part = table.cloneNode(true);
        part.removeAttribute('id');
        [...part.rows].forEach(r => [...r.cells].forEach((c, k) => { if (!keep.has(k)) c.remove(); }));
        const cap = part.querySelector('caption');
        const cols = [...keep].map(k => k + 1);
        const note = `(columns ${cols[0]}, ${cols[1]}–${cols[cols.length - 1]} of ${n})`;
        if (cap && g > 0) cap.textContent = 'Continued ' + note;
        else if (cap) cap.append(' ' + note);
        else { const c = document.createElement('caption'); c.textContent = (g ? 'Continued ' : '') + note; part.prepend(c); }
        parts.push(part);
      }
      table.after(...parts);
      table.style.display = 'none';
      done = parts.every(p => p.getBoundingClientRect().width <= width + 1);
      if (!done) { parts.forEach(p => p.remove()); table.style.display = ''; }
    }
    if (done) { grouped += 1; table.remove(); }
    else table.classList.remove('shardbook-print-whole-words');
  }
  return [enlarged, grouped];
}"""


# Text under the floor as print lays it out: every element that holds text
# in the book's text, at its computed size (an inline SVG's text at the
# scale it is drawn); a line each, the smallest first.
SMALL_TEXT_JS = """([minPx]) => {
  const main = document.querySelector('main') || document.body;
  const found = new Map();
  const walker = document.createTreeWalker(main, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const e = n.parentElement;
    if (!e || found.has(e) || !/[^\\s\u200b]/.test(n.textContent)) continue;
    if (!e.getClientRects().length) { found.set(e, null); continue; }
    const s = getComputedStyle(e);
    let px = parseFloat(s.fontSize);
    const svg = e.closest('svg');
    if (svg) {
      const view = svg.viewBox && svg.viewBox.baseVal;
      const r = svg.getBoundingClientRect();
      if (view && view.width) px *= r.width / view.width;
    }
    const clipped = s.clip === 'rect(0px, 0px, 0px, 0px)' || (e.closest('.visually-hidden, .sr-only, .katex-mathml'));
    found.set(e, px < minPx - 0.01 && s.visibility !== 'hidden' && !clipped ? px : null);
  }
  return [...found].filter(([, px]) => px !== null).sort((a, b) => a[1] - b[1])
    .map(([e, px]) => [px, e.tagName.toLowerCase()
      + (e.className && typeof e.className === 'string' ? '.' + e.className.trim().split(/\\s+/).join('.') : ''),
      e.textContent.trim().replace(/\\s+/g, ' ').slice(0, 50)]);
}"""

# The share of each figure's pixels that are drawn (darker than a light
# grey), as print shows it: each image, and each inline SVG, drawn on white.
INK_OF = """async (e) => {
  const r = e.getBoundingClientRect();
  let img = e;
  if (e.tagName.toLowerCase() === 'svg') {
    img = new Image();
    img.src = 'data:image/svg+xml;charset=utf-8,' + encodeURIComponent(new XMLSerializer().serializeToString(e));
  }
  try { await img.decode(); } catch (err) { return null; }
  const w = Math.max(1, Math.min(1000, Math.round(r.width))), h = Math.max(1, Math.round(r.height * w / r.width));
  const canvas = document.createElement('canvas');
  canvas.width = w; canvas.height = h;
  const g = canvas.getContext('2d');
  g.fillStyle = '#fff'; g.fillRect(0, 0, w, h); g.drawImage(img, 0, 0, w, h);
  const d = g.getImageData(0, 0, w, h).data;
  let ink = 0;
  for (let k = 0; k < d.length; k += 4) if (Math.min(d[k], d[k + 1], d[k + 2]) < 207) ink += 1;
  return ink / (w * h);
}"""

INK_JS = (
    "async () => { const inkOf = "
    + INK_OF
    + """;
  const main = document.querySelector('main') || document.body;
  const out = [];
  const figures = [...main.querySelectorAll('img, svg')].filter(e => !(e.parentElement && e.parentElement.closest('svg')))
    .filter(e => e.getClientRects().length && getComputedStyle(e).visibility !== 'hidden');
  for (const e of figures) {
    const r = e.getBoundingClientRect();
    if (r.width < 32 || r.height < 32) continue;  // an icon, a logo
    const fig = e.closest('figure');
    const caption = fig && fig.querySelector('figcaption');
    const name = (caption ? caption.textContent : (e.getAttribute('alt') || e.getAttribute('aria-label') || e.currentSrc || e.src || 'svg'))
      .trim().replace(/\\s+/g, ' ').slice(0, 50);
    const share = await inkOf(e);
    out.push(share === null ? [0, 'an image that does not load: ' + (e.currentSrc || e.src)] : [share, name]);
  }
  return out;
}"""
)

# A graph's tiles that show none of it (a corner with no node or edge) are
# left out; the others keep their row and column.
PRUNE_TILES_JS = (
    "async ([share]) => { const inkOf = "
    + INK_OF
    + """;
  let pruned = 0;
  for (const box of document.querySelectorAll('.shardbook-print-tiles')) {
    const parts = [...box.querySelectorAll('.shardbook-print-tile')];
    for (const part of parts) {
      const ink = await inkOf(part.querySelector('img'));
      if (ink !== null && ink < share) { part.remove(); pruned += 1; }
    }
    const kept = [...box.querySelectorAll('.shardbook-print-tile-label')];
    kept.forEach((label, k) => { label.textContent = label.textContent.replace(/part \\d+ of \\d+/, `part ${k + 1} of ${kept.length}`); });
  }
  return pruned;
}"""
)

# a figure with less of its area drawn than this is blank on paper: the
# book's sparsest figure is drawn over 3 % (a chart's thin lines), the sparsest
# tile of a graph kept over 0.7 %; a white image with one small mark, 0.04 %
BLANK_INK_SHARE = 0.005
# where the stills and the tiles are written, in the single-page build
PRINT_FIGURES = "_print_figures"


def _file_of(url, source):
    """The file under `source` that a page's `url` (served from it) names."""
    from urllib.parse import unquote, urlparse

    return source / unquote(urlparse(url).path).lstrip("/")


def lay_out_figures(page, source, column_px=None):
    """Draw each SVG figure of `page` (served from `source`) as print
    should: an animated one (svg.is_animated) as its final frame, still
    (svg.final_frame), and each so that its text prints at MIN_TEXT_PT or
    more (print_layout.plan): larger, or as tiles. The stills and tiles are
    written under `source`/_print_figures. Returns (stills, figures drawn
    larger, figures tiled)."""
    from . import svg

    column_px = column_px or COLUMN_WIDTH_PX
    out = source / PRINT_FIGURES
    out.mkdir(exist_ok=True)
    changes, stills, larger, tiled = [], 0, 0, 0
    for figure in page.evaluate(SVG_FIGURES_JS):
        path = _file_of(figure["url"], source)
        if not path.is_file():
            continue
        text = path.read_text()
        change = {"index": figure["index"]}
        if svg.is_animated(text):
            # Chromium prints an animated SVG image at its first frame
            text = svg.final_frame(text)
            (out / f"{path.stem}.still.svg").write_text(text)
            change["still"] = f"{PRINT_FIGURES}/{path.stem}.still.svg"
            stills += 1
        plan = print_layout.plan(text, min(column_px, figure["room"]), figure["width"] or None)
        if plan[0] == "size":
            change["width"] = round(plan[1], 1)
            larger += 1
        elif plan[0] == "tiles":
            _, boxes, scale = plan
            xs = sorted({round(b[0], 3) for b in boxes})
            ys = sorted({round(b[1], 3) for b in boxes})
            stem = f"{figure['index']:03d}-{path.parent.name}-{path.stem}"
            change["tiles"] = []
            for k, box in enumerate(boxes):
                name = f"{stem}-{k + 1}.svg"
                (out / name).write_text(print_layout.tile(text, box, scale))
                change["tiles"].append({"src": f"{PRINT_FIGURES}/{name}", "width": box[2] * scale, "height": box[3] * scale,
                                        "row": ys.index(round(box[1], 3)) + 1, "column": xs.index(round(box[0], 3)) + 1})  # fmt: skip
            change["name"] = "The graph"
            tiled += 1
        if len(change) > 1:
            changes.append(change)
    page.evaluate(APPLY_FIGURES_JS, changes)
    _wait_for_images(page)
    if tiled:
        page.evaluate(PRUNE_TILES_JS, [BLANK_INK_SHARE])
    return stills, larger, tiled


def svg_text_problems(page, source):
    """A line per SVG image whose smallest text prints under MIN_TEXT_PT at
    the size print draws it."""
    problems = []
    for figure in page.evaluate(SVG_FIGURES_JS):
        path = _file_of(figure["url"], source)
        if not path.is_file() or not figure["width"]:
            continue
        smallest = print_layout.smallest_text_pt(path.read_text(), figure["width"])
        if smallest is not None and smallest < MIN_TEXT_PT - 0.01:
            problems.append(
                f"a figure's text prints at {smallest:.1f} pt, under {MIN_TEXT_PT:g} pt: "
                f"{path.name} drawn {figure['width']:.0f} px wide"
            )
    return problems


def text_problems(page, shown=8):
    """A line for the text of the page set under MIN_TEXT_PT as print lays
    it out (the first `shown` places, the smallest first, and how many)."""
    small = page.evaluate(SMALL_TEXT_JS, [MIN_TEXT_PX])
    if not small:
        return []
    places = "; ".join(f"{px * print_layout.PT_PER_PX:.1f} pt in {tag}: {text!r}" for px, tag, text in small[:shown])
    return [f"text under {MIN_TEXT_PT:g} pt in {len(small)} place(s): {places}"]


def blank_figures(page, share=BLANK_INK_SHARE):
    """A line per figure of the page, as print shows it, with less than
    `share` of its pixels drawn (or that does not load)."""
    return [
        f"a blank figure ({ink:.1%} of it drawn, under {share:.1%}): {name!r}"
        for ink, name in page.evaluate(INK_JS)
        if ink < share
    ]


def page_texts(pdf_path):
    """Each printed page's text, in order, as PDFium extracts it (lines
    joined by CR LF): the book's 557 pages in about 2 s."""
    import pypdfium2

    document = pypdfium2.PdfDocument(str(pdf_path))
    try:
        texts = []
        for page in document:
            textpage = page.get_textpage()
            texts.append(textpage.get_text_range())
            textpage.close()
            page.close()
        return texts
    finally:
        document.close()


def blank_pages(pdf_path):
    """1-based numbers of the printed pages with nothing on them but the
    footer's page number (a forced break after a break, or a block pushed on):
    no other text and no image or form (an /XObject of the page's resources)."""
    import pikepdf

    with pikepdf.open(str(pdf_path)) as document:
        drawn = ["/XObject" in page.resources for page in document.pages]
    return [
        number
        for number, (text, has_xobject) in enumerate(zip(page_texts(pdf_path), drawn, strict=True), start=1)
        if not re.sub(r"\b\d+ / \d+\b", "", text).strip() and not has_xobject
    ]


def bookmark_problems(pdf_path):
    """Bookmarks that name a heading twice: the same title twice in a row,
    or a title that is one text written twice ("Topology Topology")."""
    from pypdf import PdfReader

    reader = PdfReader(str(pdf_path))
    titles = []

    def walk(items):
        for item in items:
            if isinstance(item, list):
                walk(item)
            else:
                titles.append(" ".join(item.title.split()))

    walk(reader.outline)
    if not titles:
        return ["the PDF has no bookmarks"]
    problems = []
    for before, title in zip([None, *titles[:-1]], titles, strict=True):
        half = len(title) // 2
        if title == before:
            problems.append(f"a bookmark repeated: {title!r}")
        elif len(title) > 3 and len(title) % 2 == 0 and title[:half] == title[half:]:
            problems.append(f"a bookmark's title doubled: {title!r}")
        elif len(title) > 3 and title[:half].strip() == title[half + 1 :].strip() and title[half] == " ":
            problems.append(f"a bookmark's title doubled: {title!r}")
    return problems


# The headings print makes bookmarks of, in document order, as the reader
# reads them (the section number and the title, one space between words).
HEADING_ELEMENTS = """[...document.querySelectorAll('h1, h2, h3, h4, h5, h6')]
  .filter(h => getComputedStyle(h).display !== 'none' && h.getBoundingClientRect().height > 0)"""
HEADINGS_JS = (
    "() => "
    + HEADING_ELEMENTS
    + """
  .map(h => [...h.childNodes].filter(n => !(n.classList && n.classList.contains('headerlink')))
    .map(n => n.textContent).join('').replace(/\\s+/g, ' ').trim())"""
)


def _halved(title):
    """`title` once, if it is one text written twice ("ModelsModels")."""
    half = len(title) // 2
    if len(title) > 3 and len(title) % 2 == 0 and title[:half] == title[half:]:
        return title[:half]
    return title


def _outline_items(document):
    """The bookmark dictionaries of a pikepdf document in document order
    (each before the bookmarks under it)."""
    items = []

    def walk(node):
        while node is not None:
            items.append(node)
            walk(node.get("/First"))
            node = node.get("/Next")

    outlines = document.Root.get("/Outlines")
    if outlines is not None:
        walk(outlines.get("/First"))
    return items


def mend_bookmark_titles(pdf_path, headings=None):
    """Rewrite the bookmarks' titles Chromium garbles: it writes
    some headings that open a page twice ("ModelsModels", "1.8. 1.8. Key
    takeawaysKey takeaways") and drops the space at a heading's line break
    ("NVL72racks"). With `headings`, the printed page's headings in order
    (HEADINGS_JS), one per bookmark, each bookmark takes its heading's text;
    otherwise a title written twice is halved. Only the /Title entries
    change; the file is replaced once the new one is written. Returns how
    many changed."""
    import pikepdf

    target = Path(pdf_path)
    with pikepdf.open(str(target)) as document:
        items = _outline_items(document)
        use_headings = headings is not None and len(headings) == len(items)
        mended = 0
        for i, item in enumerate(items):
            title = str(item.get("/Title", ""))
            better = headings[i] if use_headings else _halved(title)
            if better != title:
                item.Title = pikepdf.String(better)
                mended += 1
        if mended:
            fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".mended-", suffix=".pdf")
            os.close(fd)
            try:
                document.save(tmp)
                shutil.copymode(target, tmp)  # mkstemp's file is private; keep the printed file's mode
                os.replace(tmp, target)  # pikepdf reads lazily: the source stays open until here
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)
    return mended


def _book_metadata(source):
    """Title, author and year from the book's _config.yml (beside `source`'s
    _build folder), else the page's <title>."""
    config = Path(source).resolve().parent.parent / "_config.yml"
    meta = {"title": "", "author": "", "copyright": ""}
    if config.exists():
        for key in meta:
            found = re.search(rf'^{key}:\s*"?([^"\n]*)"?\s*$', config.read_text(), re.M)
            if found:
                meta[key] = found.group(1).strip()
    return meta


# The title page and the contents, put in front of the book's first section
# in place of the theme's print-only header (its own "Contents" list and a
# second copy of the first page's title). The contents are the toctree's,
# chapters and appendices under their captions, each entry a link in the PDF.
FRONT_MATTER_JS = """([title, author, year]) => {
  const article = document.querySelector('article.bd-article') || document.querySelector('main') || document.body;
  const make = (tag, cls, text) => { const e = document.createElement(tag); e.className = cls; if (text) e.textContent = text; return e; };
  const front = make('div', 'shardbook-front-matter');
  const page = make('div', 'shardbook-title-page');
  page.append(make('p', 'shardbook-title', title || document.title), make('p', 'shardbook-author', author),
              make('p', 'shardbook-year', year ? '\u00a9 ' + year : ''));
  const contents = make('nav', 'shardbook-contents');
  contents.setAttribute('aria-label', 'Contents');
  contents.append(make('p', 'shardbook-contents-title', 'Contents'));
  const first = article.querySelector('section[id]');
  const heading = first && first.querySelector('h1, h2');
  if (heading) {
    const intro = make('p', 'shardbook-contents-first');
    const link = make('a', '', [...heading.childNodes].filter(n => !(n.classList && n.classList.contains('headerlink')))
      .map(n => n.textContent).join('').trim());
    link.href = '#' + first.id; intro.append(link); contents.append(intro);
  }
  const toc = document.querySelector('#jb-print-toc nav');
  if (toc) {
    [...toc.children].forEach(child => {
      const copy = child.cloneNode(true);  // captions are not headings here: no bookmarks
      [copy, ...copy.querySelectorAll('[role=heading]')].forEach(e => { e.removeAttribute('role'); e.removeAttribute('aria-level'); });
      contents.append(copy);
    });
  }
  // each entry's page number in a slot of fixed width, "000" and hidden until the first
  // print says where its heading is: filling it in moves nothing
  contents.querySelectorAll('a').forEach(a => {
    const entry = make('span', 'shardbook-entry');
    entry.append(...a.childNodes);
    a.append(entry, make('span', 'shardbook-page', '000'));
  });
  (document.getElementById('jb-print-docs-body') || { remove() {} }).remove();
  front.append(page, contents);
  article.insertBefore(front, article.firstChild);
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  // a folded box (an exercise's solution) open too, before the page is checked: the
  // theme's own print handler opened it at each print and closed it after, and the
  // two prints laid the book out differently (the contents' numbers one page off)
  document.querySelectorAll('.admonition.toggle.toggle-hidden').forEach(box => {
    const button = box.querySelector('button.toggle-button');
    if (button) button.click();
  });
  return contents.querySelectorAll('a').length;
}"""


# For each contents entry, the index among the page's headings (the
# bookmarks, in order) of the heading its link leads to; -1 for none.
CONTENTS_TARGETS_JS = (
    "() => { const headings = "
    + HEADING_ELEMENTS
    + """;
  const heading = e => /^H[1-6]$/.test(e.tagName) ? e : e.querySelector('h1, h2, h3, h4, h5, h6');
  return [...document.querySelectorAll('.shardbook-contents a')].map(a => {
    let target = document.getElementById(decodeURIComponent(a.hash.slice(1)));
    let found = target && heading(target);
    for (let next = target && target.nextElementSibling; target && !found && next; next = next.nextElementSibling) found = heading(next);
    return found ? headings.indexOf(found) : -1;
  });
}"""
)

FILL_CONTENTS_JS = """(numbers) => {
  document.querySelectorAll('.shardbook-contents .shardbook-page').forEach((slot, k) => {
    slot.textContent = String(numbers[k]);
    slot.classList.add('shardbook-filled');
  });
}"""

CONTENTS_TITLES_JS = """() => [...document.querySelectorAll('.shardbook-contents a .shardbook-entry')]
  .map(e => e.textContent.replace(/\\s+/g, ' ').trim())"""


def bookmark_pages(pdf_path):
    """The 1-based page each bookmark of the PDF opens, in document order."""
    from pypdf import PdfReader

    reader = PdfReader(str(pdf_path))
    pages = []

    def walk(items):
        for item in items:
            if isinstance(item, list):
                walk(item)
            else:
                pages.append(reader.get_destination_page_number(item) + 1)

    walk(reader.outline)
    return pages


def contents_numbers(targets, pages, titles):
    """The page number of each contents entry: the page of the bookmark of
    the heading it leads to (`targets`, indices into `pages`). ValueError
    naming the first entry that leads to no heading."""
    numbers = []
    for target, title in zip(targets, titles, strict=True):
        if not 0 <= target < len(pages):
            raise ValueError(f"the contents entry {title!r} leads to no heading with a bookmark")
        numbers.append(pages[target])
    return numbers


def contents_problems(numbers, targets, pages, titles):
    """One line if a contents entry's printed number is not the page its
    heading's bookmark opens in the PDF (`pages`), else nothing."""
    wrong = [
        (title, number, pages[target] if 0 <= target < len(pages) else None)
        for number, target, title in zip(numbers, targets, titles, strict=True)
        if not (0 <= target < len(pages)) or pages[target] != number
    ]
    if not wrong:
        return []
    title, number, page = wrong[0]
    where = f"on page {page}" if page is not None else "not bookmarked"
    return [
        f"the contents' page numbers disagree with the PDF: {len(wrong)} of {len(numbers)} entries, "
        f"first {title!r} numbered {number}, its heading {where}"
    ]


# The print-only layout this module adds (the site's own print styles are in
# static/shardbook.css): a code block kept to one line per line, a graph's
# tiles, and the contents' page numbers, each in a slot of fixed width.
PRINT_CSS = """@media print {
  pre.shardbook-print-oneline, pre.shardbook-print-oneline span { white-space: pre !important; overflow-wrap: normal !important; }
  table.shardbook-print-whole-words th, table.shardbook-print-whole-words td {
    overflow-wrap: normal !important; word-break: normal !important; }
  .shardbook-print-tiles { margin: 0.4rem 0; }
  .shardbook-print-tile { break-inside: avoid; margin: 0 0 0.5rem; }
  .shardbook-print-tile-label { font-size: 0.8em; color: #555; margin: 0 0 0.15rem; }
  .shardbook-print-tile img { display: block; margin: 0; }
  /* a solution printed open (taller than half a page, one is) breaks across pages */
  div.solution.toggle { break-inside: auto !important; }
  /* the theme's toctree rules set its links inline: the number's slot needs the whole line */
  .shardbook-contents a { display: flex !important; width: 100%; align-items: baseline; gap: 0.5em; }
  .shardbook-contents .shardbook-entry { flex: 1 1 auto; min-width: 0; }
  .shardbook-contents .shardbook-page { flex: 0 0 2.6em; text-align: right; white-space: nowrap;
    font-variant-numeric: tabular-nums; visibility: hidden; }
  .shardbook-contents .shardbook-page.shardbook-filled { visibility: visible; }
}"""


# true once every chart of the page is built (shardbook-charts.js builds the
# rest when asked); a page without charts, or without the script, has none to wait for
CHARTS_BUILT_JS = """() => !document.querySelector('figure.shardbook-chart')
    || (window.shardbookCharts !== undefined && window.shardbookCharts.buildAll())"""


def _wait_for_images(page):
    page.wait_for_function("[...document.images].every(i => i.complete)", timeout=120_000)


def _print(page, path):
    page.pdf(
        path=path,
        format="A4",
        print_background=True,
        outline=True,
        tagged=True,
        display_header_footer=True,
        header_template="<span></span>",
        footer_template=FOOTER,
        margin={side: f"{mm}mm" for side, mm in PAGE_MARGINS_MM.items()},
    )


def _laid_out(context, base, source, meta):
    """A new page of `context` with the single-page book served at `base`
    (from `source`), its title page and contents in front, laid out for
    print at the column's width: stills for animations, figures sized or
    tiled for their text, code and tables fitted (all images loaded)."""
    page = context.new_page()
    # the load event (the whole page parsed, images in), then the fonts:
    # "networkidle" alone came once while a busy machine was still
    # parsing the 1.5 MB page, and the PDF ended where the parser was
    # (108 of 242 pages)
    page.goto(f"{base}/_book.html", wait_until="load", timeout=120_000)
    page.evaluate("document.fonts.ready.then(() => true)")
    # every instant chart drawn: a screen builds one only near the screen or when idle
    page.wait_for_function(CHARTS_BUILT_JS, timeout=60_000)
    page.evaluate(FRONT_MATTER_JS, [meta["title"], meta["author"], meta["copyright"]])
    page.add_style_tag(content=PRINT_CSS)
    page.set_viewport_size({"width": COLUMN_WIDTH_PX, "height": PAGE_HEIGHT_PX})
    page.emulate_media(media="print")
    # every figure in before printing: those a screen loads lazily, and each
    # animation's still final frame in place of the animation
    page.evaluate(STILLS_JS)
    page.evaluate("document.querySelectorAll('img[loading=lazy]').forEach(i => { i.loading = 'eager'; })")
    _wait_for_images(page)
    lay_out_figures(page, source)
    page.evaluate(FIT_CODE_JS, [MIN_TEXT_PX])
    page.evaluate(FIT_TABLES_JS, [MIN_TEXT_PX])
    _wait_for_images(page)
    page.evaluate("document.fonts.ready.then(() => true)")
    return page


def render(singlehtml_dir, pdf_path):
    """Print `singlehtml_dir`/index.html to `pdf_path`; returns the path.
    ValueError if there is no single-page build, no Chromium, or a print
    problem (:func:`print_problems`)."""
    source = Path(singlehtml_dir)
    if not (source / "index.html").exists():
        raise ValueError(f"{source}: no single-page build (index.html); run `make pdf`, which builds it first")
    chromium = site.chromium()
    if chromium is None:
        raise ValueError("Chromium is missing: install the Debian package 'chromium' (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    # Sphinx writes the single page under the root document's folder
    # (chapters/00_introduction.html) but with links relative to the build's
    # root: print a copy placed at the root, where those links resolve.
    redirect = re.search(r'url=([^"]+)"', (source / "index.html").read_text())
    page_file = source / (redirect.group(1) if redirect else "index.html")
    shutil.rmtree(source / PRINT_FIGURES, ignore_errors=True)  # a previous print's
    printable = source / "_book.html"
    printable.write_text(page_file.read_text())
    target = Path(pdf_path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".book-", suffix=".pdf")
    os.close(fd)
    try:
        with sync_playwright() as pw, site.serve(source) as base:
            browser = pw.chromium.launch(executable_path=chromium, args=site.CHROMIUM_FLAGS)
            context = browser.new_context()
            meta = _book_metadata(source)
            page = _laid_out(context, base, source, meta)
            problems = print_problems(page)
            problems += text_problems(page)
            problems += svg_text_problems(page, source)
            problems += blank_figures(page)
            if problems:
                raise ValueError("not printed:\n  " + "\n  ".join(problems))
            headings = page.evaluate(HEADINGS_JS)
            targets = page.evaluate(CONTENTS_TARGETS_JS)
            titles = page.evaluate(CONTENTS_TITLES_JS)
            # first print: where each heading lands; its numbers go into the contents' slots
            _print(page, tmp)
            page.close()
            pages = bookmark_pages(tmp)
            if len(pages) != len(headings):
                raise ValueError(
                    f"not printed: {len(pages)} bookmarks for {len(headings)} headings (contents not numbered)"
                )
            numbers = contents_numbers(targets, pages, titles)
            # the second print from the page laid out afresh: Chromium printed one page twice
            # differently (a long code block broken at another line, 150 of 178 headings a page
            # on, each print the other way), so each print is a page's first
            page = _laid_out(context, base, source, meta)
            page.evaluate(FILL_CONTENTS_JS, numbers)
            _print(page, tmp)
            browser.close()
        mend_bookmark_titles(tmp, headings)
        problems = contents_problems(numbers, targets, bookmark_pages(tmp), titles)
        problems += bookmark_problems(tmp)
        problems += [f"page {n} is blank" for n in blank_pages(tmp)]
        if problems:
            raise ValueError("not printed:\n  " + "\n  ".join(problems))
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the book is for reading
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m shardbook.book.pdf SINGLEHTML_DIR OUTPUT.pdf", file=sys.stderr)
        return 2
    try:
        path = render(*argv)
    except ValueError as exc:
        print(f"pdf: {exc}", file=sys.stderr)
        return 2
    print(f"==> wrote {path} ({path.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
