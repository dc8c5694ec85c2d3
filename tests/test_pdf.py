"""`make pdf`: the whole book as one PDF with every chapter, bookmarks, page
numbers, and no code line cut off at the margin."""

import re
import subprocess
import sys

import pytest

from conftest import BUILD, CHAPTERS, ROOT

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


def test_a_page_that_print_would_cut_off_is_not_printed(tmp_path):
    """`make pdf` checks the page as print lays it out before printing (so
    the book's own PDF above has no code line cut off at the margin and no
    screen-only control): a code line wider than the page, or a live box
    left visible, stops it with a message, and the previous PDF stays. (The
    command in a process of its own: this one may hold the tests' browser,
    and Playwright drives one browser session per thread.)"""
    source = tmp_path / "singlehtml"
    source.mkdir()
    (source / "index.html").write_text('<meta http-equiv="refresh" content="0; url=page.html">')
    wide = "x = " + " + ".join(f"term_{i}" for i in range(60))
    (source / "page.html").write_text(
        f'<html><body><pre style="overflow:auto;white-space:pre">{wide}</pre>'
        '<div class="shardbook-live">live</div></body></html>'
    )
    previous = tmp_path / "book.pdf"
    previous.write_bytes(b"%PDF- the previous book")
    result = subprocess.run(
        [sys.executable, "-m", "shardbook.book.pdf", str(source), str(previous)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.startswith("pdf: not printed:"), result.stderr
    assert "a code block is wider than the printed column (cut off): 'x = term_0 + term_1" in result.stderr
    assert "1 screen-only control(s) shown in print" in result.stderr
    assert "Traceback" not in result.stderr
    assert previous.read_bytes() == b"%PDF- the previous book"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["book.pdf", "singlehtml"]
