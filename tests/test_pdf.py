"""`make pdf`: the whole book as one PDF with every chapter, bookmarks, page
numbers, and no code line cut off at the margin."""

import re
import subprocess

import pytest

from conftest import BUILD, CHAPTERS, ROOT
from shardbook.book import site

PDF = BUILD / "pdf" / "book.pdf"
APPENDICES = sorted((ROOT / "chapters").glob("9[0-9]_*.md"))


@pytest.fixture(scope="module")
def book_pdf():
    # output to a file, not a pipe: a helper the build leaves running (KaTeX's
    # node server) would hold a pipe open and the wait would never end
    log = BUILD / "make_pdf.log"
    with open(log, "w") as out:
        result = subprocess.run(["make", "pdf"], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, timeout=900)
    assert result.returncode == 0, log.read_text()[-6000:]
    assert PDF.exists()
    return PDF


def _title(path):
    return re.search(r"^# (.+)$", path.read_text(), re.M).group(1).strip()


def _bookmarks(reader):
    """(title with its whitespace collapsed, 0-based page it opens) for every bookmark."""
    found = []

    def walk(items):
        for item in items:
            if isinstance(item, list):
                walk(item)
            else:
                found.append((" ".join(item.title.split()), reader.get_destination_page_number(item)))

    walk(reader.outline)
    return found


def test_the_pdf_has_every_chapter_and_bookmarks(book_pdf):
    """Each chapter has a bookmark, and the page that bookmark opens shows the
    chapter's title (only those pages' text is extracted: pypdf reads a page
    in about a tenth of a second)."""
    from pypdf import PdfReader

    reader = PdfReader(str(book_pdf))
    n = len(reader.pages)
    assert n >= 50
    bookmarks = _bookmarks(reader)
    text = {}
    for path in CHAPTERS + APPENDICES:
        title = " ".join(_title(path).split())
        # Chromium drops the space at a heading's line break in a bookmark's title
        pages = [page for entry, page in bookmarks if "".join(title.split()) in "".join(entry.split())]
        assert pages, f"{path.name}: no bookmark for {title!r}"
        for page in pages:
            text.setdefault(page, " ".join(reader.pages[page].extract_text().split()))
        assert any(title in text[page] for page in pages), (
            f"{path.name}: title {title!r} not on the page its bookmark opens ({[p + 1 for p in pages]})"
        )
    # page numbers in the footer: "1 / N" on the first page, "N / N" on the last
    assert f"1 / {n}" in reader.pages[0].extract_text() and f"{n} / {n}" in reader.pages[-1].extract_text()


def test_no_code_line_is_clipped_in_print(book_pdf):
    """With the print styles every code block wraps: nothing is wider than the
    page's column, so nothing is cut off in the PDF."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw, site.serve(BUILD / "singlehtml") as base:
        browser = pw.chromium.launch(executable_path=site.chromium(), args=site.CHROMIUM_FLAGS)
        page = browser.new_page()
        page.goto(f"{base}/_book.html", wait_until="load", timeout=120_000)  # as make pdf waits
        page.emulate_media(media="print")
        clipped = page.evaluate(
            "[...document.querySelectorAll('pre')].filter(p => p.scrollWidth > p.clientWidth + 1)"
            ".map(p => p.textContent.slice(0, 60))"
        )
        hidden_controls = page.evaluate(
            "[...document.querySelectorAll('.shardbook-live, .shardbook-full-size')]"
            ".filter(e => getComputedStyle(e).display !== 'none').length"
        )
        browser.close()
    assert not clipped, clipped
    assert hidden_controls == 0
