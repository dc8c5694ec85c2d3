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


@pytest.fixture(scope="module")
def printed(book_pdf):
    """The book's PDF read once for the tests below (PDFium's text of 557
    pages and pypdf's outline took some 3 s of processor time a reading):
    (the pages' texts, whitespace collapsed; the bookmarks, as _bookmarks
    gives them; the number of pages pypdf counts). Tuples: a test cannot
    change what the next one reads."""
    from pypdf import PdfReader

    from shardbook.book import pdf

    reader = PdfReader(str(book_pdf))
    texts = tuple(" ".join(t.split()) for t in pdf.page_texts(book_pdf))
    return texts, tuple(_bookmarks(reader)), len(reader.pages)


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


def test_the_pdf_has_every_chapter_and_bookmarks(book_pdf, printed):
    """Each chapter has a bookmark, and the page that bookmark opens shows the
    chapter's title (the pages' text as PDFium reads it, pdf.page_texts)."""
    from shardbook.book import pdf

    texts, bookmarks, n = printed
    assert len(texts) == n
    assert n >= 50
    for path in CHAPTERS + APPENDICES:
        title = " ".join(_title(path).split())
        # Chromium drops the space at a heading's line break in a bookmark's title
        pages = [page for entry, page in bookmarks if "".join(title.split()) in "".join(entry.split())]
        assert pages, f"{path.name}: no bookmark for {title!r}"
        assert any(title in texts[page] for page in pages), (
            f"{path.name}: title {title!r} not on the page its bookmark opens ({[p + 1 for p in pages]})"
        )
    # page numbers in the footer: "1 / N" on the first page, "N / N" on the last
    assert f"1 / {n}" in texts[0] and f"{n} / {n}" in texts[-1]
    # a title page (the book's title and author, nothing else), then the contents
    first = texts[0]
    assert "Splitting Transformer Training Across Accelerators" in first and "The shardbook authors" in first
    assert "Introduction and notation" not in first
    # the contents: from the second page to the page before the first chapter's (it may take two)
    first_chapter = min(page for entry, page in bookmarks if "Introduction and notation" in entry)
    contents = " ".join(texts[k] for k in range(1, max(first_chapter, 2)))
    assert contents.startswith("Contents") or "Contents" in contents[:40], contents[:200]
    for path in CHAPTERS:
        assert " ".join(_title(path).split()) in contents, f"{path.name} is not in the contents"
    assert pdf.bookmark_problems(book_pdf) == []


def test_the_pdf_prints_final_frames_and_numbers_its_contents(printed):
    """The book's animated figures print the frame their captions describe,
    the last (the rings' and ring attention's "done" lines, none of the
    first frames' "start" lines; the audit's PDF printed the first), and each
    chapter's entry in the contents carries the page its bookmark opens."""
    texts, bookmarks, _ = printed
    text = " ".join(texts)
    for first in ("start: device i holds chunk i", "start: every device holds its own",
                  "start: chunk i→j is what device i has", "start: rank i holds query block i"):  # fmt: skip
        assert first not in text, f"a first frame printed: {first!r}"
    for last in ("done in", "done: each device sent", "every unmasked block computed"):
        assert last in text, f"no final frame's line {last!r} in the PDF"
    first_chapter = min(page for entry, page in bookmarks if "Introduction and notation" in entry)
    contents = " ".join(texts[k] for k in range(1, first_chapter))
    for path in CHAPTERS + APPENDICES:
        title = " ".join(_title(path).split())
        # the bookmark titled so (a section number in front allowed), not one that only contains the
        # title ("The planner" is also in "The planner's rules of thumb")
        page = min(page for entry, page in bookmarks if re.sub(r"^[\d.]+\s*", "", entry) == title)
        found = re.search(re.escape(title) + r"\s*(\d+)\b", contents)
        assert found, f"{path.name}: {title!r} without a page number in the contents: {contents[:300]}"
        assert int(found.group(1)) == page + 1, f"{path.name}: contents says {found.group(1)}, bookmark {page + 1}"


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


def test_a_page_with_a_wide_table_a_control_or_an_unbreakable_block_is_not_printed(tmp_path):
    """The print check, on planted pages, refuses what the reader's audit
    found in the PDF: a table wider than the printed column (its last columns
    cut off) that cannot print as column groups (it has a merged cell), a "Show code cell output" toggle and a button left in, and a
    scrolling block taller than half a page (printed whole on the next page,
    leaving a large blank gap); each is named, and nothing is written."""
    source = tmp_path / "singlehtml"
    source.mkdir()
    (source / "index.html").write_text('<meta http-equiv="refresh" content="0; url=page.html">')
    cells = "".join(f"<td>column_{i}_value</td>" for i in range(16))
    tall = "\n".join(f"line {i}" for i in range(120))
    (source / "page.html").write_text(
        "<html><body><main><section id='s'><h1>Planted</h1>"
        f"<table style='border-collapse:collapse'><tr><th colspan='16'>merged</th></tr><tr>{cells}</tr></table>"
        "<details><summary>Show code cell output</summary><p>out</p></details>"
        "<button type='button'>Copy</button>"
        f"<div style='overflow:auto;max-height:none'><pre style='white-space:pre'>{tall}</pre></div>"
        "</section></main></body></html>"
    )
    target = tmp_path / "book.pdf"
    result = subprocess.run(
        [sys.executable, "-m", "shardbook.book.pdf", str(source), str(target)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    err = result.stderr
    assert err.startswith("pdf: not printed:"), err
    assert "wider than the printed column" in err and "table" in err and "column_0_value" in err, err
    assert "an interactive control shown in print: 'Copy'" in err, err
    assert "taller than half a page" in err and "line 0" in err, err
    assert "Traceback" not in err
    assert not target.exists()


def test_a_pdf_with_doubled_bookmarks_is_refused(tmp_path):
    """After printing, the bookmarks are read back: a heading bookmarked
    twice, or a title written twice in one bookmark (the audit's PDF had
    both), is named; one bookmark per heading passes."""
    from pypdf import PdfWriter

    from shardbook.book import pdf

    def planted(titles):
        writer = PdfWriter()
        writer.add_blank_page(width=595, height=842)
        for title in titles:
            writer.add_outline_item(title=title, page_number=0)
        path = tmp_path / f"{len(titles)}-{abs(hash(tuple(titles)))}.pdf"
        with open(path, "wb") as out:
            writer.write(out)
        return path

    assert pdf.bookmark_problems(planted(["1. Topology", "1.1. Links", "2. Sharding"])) == []
    assert pdf.bookmark_problems(planted(["1. Topology", "1. Topology"])) == ["a bookmark repeated: '1. Topology'"]
    assert pdf.bookmark_problems(planted(["Pipeline parallelism Pipeline parallelism"])) == [
        "a bookmark's title doubled: 'Pipeline parallelism Pipeline parallelism'"
    ]
    assert pdf.bookmark_problems(planted([])) == ["the PDF has no bookmarks"]
    # Chromium's doubled titles are mended from the printed headings, or halved without them
    garbled = planted(["1. Topology", "ModelsModels", "1.8. 1.8. Key takeawaysKey takeaways"])
    assert pdf.mend_bookmark_titles(garbled, ["1. Topology", "Models", "1.8. Key takeaways"]) == 2
    assert pdf.bookmark_problems(garbled) == []
    halved = planted(["ModelsModels", "Two domains"])
    assert pdf.mend_bookmark_titles(halved) == 1 and pdf.bookmark_problems(halved) == []
    # a page with nothing on it is found (the planted PDFs have one blank page each)
    assert pdf.blank_pages(halved) == [1]


def _print_planted(tmp_path, body, files=None):
    """Print a planted single page (`body` inside <main>, `files` written
    beside it) with the command, in a process of its own; (result, target)."""
    source = tmp_path / "singlehtml"
    source.mkdir()
    (source / "index.html").write_text('<meta http-equiv="refresh" content="0; url=page.html">')
    (source / "page.html").write_text(
        "<html><head><title>Planted book</title><style>body{font-size:16px} figure img{max-width:100%;height:auto}"
        " .shardbook-title-page{break-after:page} section{break-before:page}</style></head>"
        f"<body><main><article class='bd-article'>{body}</article></main></body></html>"
    )
    for name, text in (files or {}).items():
        (source / name).write_text(text)
    target = tmp_path / "book.pdf"
    result = subprocess.run(
        [sys.executable, "-m", "shardbook.book.pdf", str(source), str(target)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return result, target


def test_a_blank_figure_and_text_under_seven_points_are_not_printed(tmp_path):
    """The print check refuses a figure with almost nothing drawn (a white
    image with one small mark: the first frame of an animation printed in
    place of its last) and text set under 7 pt on paper (8 CSS px is 6 pt
    at the printed scale), naming each; nothing is written."""
    blank = (
        '<svg xmlns="http://www.w3.org/2000/svg" width="600" height="300" viewBox="0 0 600 300">'
        '<rect width="600" height="300" fill="white"/><rect x="10" y="10" width="8" height="8" fill="#1a1a1a"/></svg>'
    )
    body = (
        "<section id='s'><h1>Planted</h1><p>Text at the book's size.</p>"
        "<figure><img src='blank.svg' width='600' height='300' alt='an empty timeline'>"
        "<figcaption>Fig. 1: the schedule, empty</figcaption></figure>"
        "<p style='font-size:8px'>footnote set too small</p></section>"
    )
    result, target = _print_planted(tmp_path, body, {"blank.svg": blank})
    err = result.stderr
    assert result.returncode == 2, result.stdout + err
    assert err.startswith("pdf: not printed:"), err
    assert "a blank figure (0.0% of it drawn, under 0.5%): 'Fig. 1: the schedule, empty'" in err, err
    assert "text under 7 pt in 1 place(s): 6.0 pt in p: 'footnote set too small'" in err, err
    assert "Traceback" not in err
    assert not target.exists()


def test_a_planted_book_prints_final_frames_readable_graphs_and_numbered_contents(tmp_path):
    """A planted page with what the reader's audit found broken on paper:
    an animated figure prints its final frame (its "done" line, not its
    "start" line), both an image of shardbook.book.svg's animation on its
    own (the single-page build's form) and a <picture> whose source offers
    print a still (the site's form); a compiler
    graph drawn at 10 pt on a canvas 2,400 pt wide prints as tiles whose text
    is at least 7 pt; a table too wide for the column prints as column
    groups; and the contents, printed twice, gives each entry the page its
    bookmark opens."""
    from pypdf import PdfReader

    from shardbook.book import pdf, print_layout, svg

    def animated(still):
        # the final frame only in the still; the moving one shows "start" until it plays
        style = "" if still else "<style>.d{opacity:0}</style>"
        return (
            '<svg xmlns="http://www.w3.org/2000/svg" width="640" height="200" viewBox="0 0 640 200">'
            f'{style}<rect width="640" height="200" fill="white"/><rect x="20" y="20" width="600" height="120" '
            'fill="#1565c0"/><text x="20" y="180" font-size="14" class="d">done in 3 steps</text>'
            + ("" if still else '<text x="20" y="160" font-size="14">start: device i holds chunk i</text>')
            + "</svg>"
        )

    nodes = "".join(
        f'<g><rect x="{40 + 300 * (i % 8)}" y="{40 + 120 * (i // 8)}" width="200" height="60" fill="#ffb74d"/>'
        f'<text x="{50 + 300 * (i % 8)}" y="{75 + 120 * (i // 8)}" font-size="10.00">node_{i}</text></g>'
        for i in range(24)
    )
    graph = (
        '<svg xmlns="http://www.w3.org/2000/svg" width="2400pt" height="400pt" viewBox="0.00 0.00 2400.00 400.00">'
        f'<rect width="2400" height="400" fill="white"/>{nodes}</svg>'
    )
    filler = "".join(f"<p>Paragraph {k} of the planted chapter, long enough to fill the page.</p>" for k in range(40))
    wide = "".join(f"<td>column_{i}_value</td>" for i in range(16))
    body = (
        "<section id='one'><h1>One</h1><figure><picture><source media='(prefers-reduced-motion: reduce), print' "
        "srcset='anim.still.svg' type='image/svg+xml'><img src='anim.svg' width='640' height='200' alt='ring'>"
        f"</picture><figcaption>Fig. 1: a ring</figcaption></figure>{filler}</section>"
        f"<section id='two'><h1>Two</h1><figure><img src='graph.svg' alt='a graph'><figcaption>Fig. 2: a graph"
        f"</figcaption></figure>{filler}</section>"
        f"<section id='three'><h1>Three</h1><table><tr>{wide}</tr><tr>{wide}</tr></table>{filler}</section>"
        "<div id='jb-print-docs-body'><div id='jb-print-toc'><nav><ul><li><a href='#two'>Two</a></li>"
        "<li><a href='#three'>Three</a></li></ul></nav></div></div>"
    )
    # an animation as the book writes it (shardbook.book.svg), an image on its own
    moving = svg.Figure(640, 200, "A red bar with a line under it saying how far the ring has got.", n_frames=3)
    moving.rect(20, 20, 600, 120, fill="#c62828")
    moving.text(20, 180, "start: rank i holds query block i", size=14, frames=(0, 1))
    moving.text(20, 180, "done after 2 steps", size=14, frames=(2, None))
    body = body.replace(
        "<figcaption>Fig. 1: a ring</figcaption></figure>",
        "<figcaption>Fig. 1: a ring</figcaption></figure><figure><img src='moving.svg' width='640' height='200' "
        "alt='moving'><figcaption>Fig. 1b: ring attention</figcaption></figure>",
    )
    files = {
        "anim.svg": animated(False),
        "anim.still.svg": animated(True),
        "graph.svg": graph,
        "moving.svg": moving.svg(),
    }
    result, target = _print_planted(tmp_path, body, files)
    assert result.returncode == 0, result.stdout + result.stderr
    reader = PdfReader(str(target))
    text = " ".join(" ".join((p.extract_text() or "").split()) for p in reader.pages)
    assert "done in 3 steps" in text and "start: device i holds" not in text, text[:600]
    assert "done after 2 steps" in text and "start: rank i holds" not in text, text[:600]
    # the graph in tiles, each labelled, every one with text at 7 pt or more
    tiles = sorted((tmp_path / "singlehtml" / pdf.PRINT_FIGURES).glob("*-graph-*.svg"))
    assert len(tiles) >= 3, tiles
    assert re.search(r"part 1 of [3-9]", text) and "node_0" in text and "node_23" in text, text
    for tile in tiles:
        size = print_layout.geometry(tile.read_text())
        assert print_layout.smallest_text_pt(tile.read_text(), size[0]) >= 7.0
    # a table too wide for the column: column groups, each repeating the first column
    assert "(columns 1, 2" in text and "of 16)" in text and "Continued (columns 1," in text, text
    assert text.count("column_0_value") >= 4, text
    # the contents: "Two" and "Three" with the pages their bookmarks open
    pages = dict(zip(["One", "Two", "Three"], pdf.bookmark_pages(target), strict=True))
    contents = " ".join((reader.pages[1].extract_text() or "").split())
    assert pages["Two"] > pages["One"] >= 3, pages
    assert f"Two {pages['Two']}" in contents and f"Three {pages['Three']}" in contents, (contents, pages)


def test_contents_numbers_that_disagree_with_the_bookmarks_are_refused(tmp_path):
    """After the second print each contents number is checked against the
    page its heading's bookmark opens: a page whose layout moves between the
    two prints (here a block that grows when the book is printed a second
    time, counted in the page's storage) is
    refused in one line naming the first entry that moved."""
    filler = "".join(f"<p>Paragraph {k}.</p>" for k in range(10))
    body = (
        f"<section id='one'><h1>One</h1>{filler}<div id='grow'></div></section>"
        f"<section id='two'><h1>Two</h1>{filler}</section>"
        "<div id='jb-print-docs-body'><div id='jb-print-toc'><nav><ul><li><a href='#two'>Two</a></li></ul>"
        "</nav></div></div>"
        "<script>addEventListener('beforeprint', () => { const printed = Number(localStorage.printed || 0) + 1;"
        " localStorage.printed = printed; if (printed === 2) document.getElementById('grow').style.height = '2400px'; });"
        "</script>"
    )
    result, target = _print_planted(tmp_path, body)
    err = result.stderr
    assert result.returncode == 2, result.stdout + err
    assert "pdf: not printed:" in err and "the contents' page numbers disagree with the PDF: 1 of 2 entries" in err, err
    assert "first 'Two' numbered" in err, err
    assert not target.exists()
    from shardbook.book import pdf

    # the check itself: numbers against the bookmarks' pages
    assert pdf.contents_problems([3, 5], [0, 1], [3, 5], ["One", "Two"]) == []
    assert pdf.contents_problems([3, 5], [0, 1], [3, 6], ["One", "Two"]) == [
        "the contents' page numbers disagree with the PDF: 1 of 2 entries, first 'Two' numbered 5, its heading on page 6"
    ]
