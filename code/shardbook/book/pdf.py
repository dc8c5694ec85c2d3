"""`make pdf`: the whole book as one PDF (book machinery, layer 3).

Jupyter Book's single-page build is printed by Debian's Chromium through
Playwright, with the site's print styles, a title page and a contents list
put in front, page numbers in the footer and the headings as PDF bookmarks.
Before printing, the page is checked as print lays it out, at the printed
column's width: a code block, table or figure wider than the column (its
end would be cut off), an interactive control still shown (a live box, a
"Show code cell output" toggle, a button), or a block print cannot break
that is taller than half a page (it would leave a large blank gap when
pushed to the next page) stops the print with a message. After printing,
the bookmarks' titles are mended (Chromium doubles some) and checked, each
heading once and its title not doubled, and no page may be blank. The PDF
is written to a temporary file and then moved into place, so a failure
leaves the previous PDF as it was.

    python -m shardbook.book.pdf _build/singlehtml _build/pdf/book.pdf
"""

import os
import re
import sys
import tempfile
from pathlib import Path

from . import site

FOOTER = (
    '<div style="font-size:8px;width:100%;text-align:center;color:#555">'
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


def blank_pages(pdf_path):
    """1-based numbers of the printed pages with nothing on them but the
    footer's page number (a forced break after a break, or a block pushed on)."""
    from pypdf import PdfReader

    blank = []
    for number, page in enumerate(PdfReader(str(pdf_path)).pages, start=1):
        text = re.sub(r"\b\d+ / \d+\b", "", page.extract_text() or "")
        resources = page.get("/Resources") or {}
        if not text.strip() and not resources.get("/XObject"):
            blank.append(number)
    return blank


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
HEADINGS_JS = """() => [...document.querySelectorAll('h1, h2, h3, h4, h5, h6')]
  .filter(h => getComputedStyle(h).display !== 'none' && h.getBoundingClientRect().height > 0)
  .map(h => [...h.childNodes].filter(n => !(n.classList && n.classList.contains('headerlink')))
    .map(n => n.textContent).join('').replace(/\\s+/g, ' ').trim())"""


def _halved(title):
    """`title` once, if it is one text written twice ("ModelsModels")."""
    half = len(title) // 2
    if len(title) > 3 and len(title) % 2 == 0 and title[:half] == title[half:]:
        return title[:half]
    return title


def _outline_items(writer):
    """The PDF's bookmark dictionaries in document order (each before the
    bookmarks under it)."""
    outlines = writer.root_object.get("/Outlines")
    items = []

    def walk(node):
        while node is not None:
            item = node.get_object()
            items.append(item)
            walk(item.get("/First"))
            node = item.get("/Next")

    if outlines is not None:
        walk(outlines.get_object().get("/First"))
    return items


def mend_bookmark_titles(pdf_path, headings=None):
    """Rewrite, in place, the bookmarks' titles Chromium garbles: it writes
    some headings that open a page twice ("ModelsModels", "1.8. 1.8. Key
    takeawaysKey takeaways") and drops the space at a heading's line break
    ("NVL72racks"). With `headings`, the printed page's headings in order
    (HEADINGS_JS), one per bookmark, each bookmark takes its heading's text;
    otherwise a title written twice is halved. Returns how many changed."""
    from pypdf import PdfWriter
    from pypdf.generic import NameObject, TextStringObject

    writer = PdfWriter(clone_from=str(pdf_path))
    items = _outline_items(writer)
    use_headings = headings is not None and len(headings) == len(items)
    mended = 0
    for i, item in enumerate(items):
        title = str(item.get("/Title", ""))
        better = headings[i] if use_headings else _halved(title)
        if better != title:
            item[NameObject("/Title")] = TextStringObject(better)
            mended += 1
    if mended:
        with open(pdf_path, "wb") as out:
            writer.write(out)
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
  (document.getElementById('jb-print-docs-body') || { remove() {} }).remove();
  front.append(page, contents);
  article.insertBefore(front, article.firstChild);
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  return contents.querySelectorAll('a').length;
}"""


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
    printable = source / "_book.html"
    printable.write_text(page_file.read_text())
    target = Path(pdf_path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".book-", suffix=".pdf")
    os.close(fd)
    try:
        with sync_playwright() as pw, site.serve(source) as base:
            browser = pw.chromium.launch(executable_path=chromium, args=site.CHROMIUM_FLAGS)
            page = browser.new_page()
            # the load event (the whole page parsed, images in), then the fonts:
            # "networkidle" alone came once while a busy machine was still
            # parsing the 1.5 MB page, and the PDF ended where the parser was
            # (108 of 242 pages)
            page.goto(f"{base}/_book.html", wait_until="load", timeout=120_000)
            page.evaluate("document.fonts.ready.then(() => true)")
            meta = _book_metadata(source)
            page.evaluate(FRONT_MATTER_JS, [meta["title"], meta["author"], meta["copyright"]])
            page.set_viewport_size({"width": COLUMN_WIDTH_PX, "height": PAGE_HEIGHT_PX})
            page.emulate_media(media="print")
            # every figure in before printing: those a screen loads lazily, and the still
            # final frames that animated figures offer for print (a <picture> source)
            page.evaluate("document.querySelectorAll('img[loading=lazy]').forEach(i => { i.loading = 'eager'; })")
            page.wait_for_function("[...document.images].every(i => i.complete)", timeout=120_000)
            problems = print_problems(page)
            if problems:
                raise ValueError("not printed:\n  " + "\n  ".join(problems))
            headings = page.evaluate(HEADINGS_JS)
            page.pdf(
                path=tmp,
                format="A4",
                print_background=True,
                outline=True,
                tagged=True,
                display_header_footer=True,
                header_template="<span></span>",
                footer_template=FOOTER,
                margin={side: f"{mm}mm" for side, mm in PAGE_MARGINS_MM.items()},
            )
            browser.close()
        mend_bookmark_titles(tmp, headings)
        problems = bookmark_problems(tmp)
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
