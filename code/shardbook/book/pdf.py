"""`make pdf`: the whole book as one PDF (book machinery, layer 3).

Jupyter Book's single-page build is printed by Debian's Chromium through
Playwright, with the site's print styles, page numbers in the footer and the
headings as PDF bookmarks. Before printing, the page is checked as print
lays it out: a code block wider than its column (its end would be cut off)
or a screen-only control still shown stops the print with a message. The PDF
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


# what print would cut off or show needlessly, read in the page laid out for print
PRINT_PROBLEMS_JS = """() => ({
  clipped: [...document.querySelectorAll('pre')].filter(p => p.scrollWidth > p.clientWidth + 1)
    .map(p => p.textContent.trim().slice(0, 60)),
  screen_only: [...document.querySelectorAll('.shardbook-live, .shardbook-full-size')]
    .filter(e => getComputedStyle(e).display !== 'none').length,
})"""


def print_problems(page):
    """What is wrong with `page` (a Playwright page in print media) as print
    would lay it out: a line per code block wider than its column, and one
    for screen-only controls (the live box, full-size links) still shown."""
    found = page.evaluate(PRINT_PROBLEMS_JS)
    problems = [f"a code block is wider than the printed column (cut off): {text!r}" for text in found["clipped"]]
    if found["screen_only"]:
        problems.append(f"{found['screen_only']} screen-only control(s) shown in print (live box, full-size links)")
    return problems


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
            page.emulate_media(media="print")
            # every figure in before printing: those a screen loads lazily, and the still
            # final frames that animated figures offer for print (a <picture> source)
            page.evaluate("document.querySelectorAll('img[loading=lazy]').forEach(i => { i.loading = 'eager'; })")
            page.wait_for_function("[...document.images].every(i => i.complete)", timeout=120_000)
            problems = print_problems(page)
            if problems:
                raise ValueError("not printed:\n  " + "\n  ".join(problems))
            page.pdf(
                path=tmp,
                format="A4",
                print_background=True,
                outline=True,
                tagged=True,
                display_header_footer=True,
                header_template="<span></span>",
                footer_template=FOOTER,
                margin={"top": "16mm", "bottom": "16mm", "left": "14mm", "right": "14mm"},
            )
            browser.close()
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
