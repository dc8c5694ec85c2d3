"""The coverage appendix: every item of shardbook.book.coverage names a
source that references.bib holds and a section that exists, in the chapter
source and in the built page, and the appendix links every item."""

import re

import pytest

from conftest import CHAPTERS, HTML, ROOT
from shardbook.book import coverage

CHAPTER_STEMS = {p.stem for p in CHAPTERS}


def test_every_item_names_a_known_source_and_chapter():
    bib = (ROOT / "references.bib").read_text()
    for item in coverage.COVERAGE:
        assert item.source in coverage.SOURCES, item
        assert re.search(r"@\w+\{" + re.escape(item.source) + ",", bib), f"{item.source} is not in references.bib"
        assert item.chapter in CHAPTER_STEMS, item


@pytest.mark.parametrize("item", coverage.COVERAGE, ids=lambda i: i.target + ":" + i.what[:30])
def test_every_target_labels_one_heading(item):
    assert coverage.heading(item, ROOT / "chapters")


def test_a_missing_target_is_named():
    bad = coverage.Item("choosing-a-mesh", "Pipelining", "nothing", "06_pipeline", "sec-no-such-section")
    with pytest.raises(ValueError, match=r"target \(sec-no-such-section\)= must stand once.*found it 0 times"):
        coverage.heading(bad, ROOT / "chapters")
    with pytest.raises(ValueError, match="names chapter '99_nothing', which does not exist"):
        coverage.heading(coverage.Item("choosing-a-mesh", "x", "y", "99_nothing", "sec-x"), ROOT / "chapters")


def test_the_built_appendix_links_every_item_to_an_existing_anchor(built_book):
    appendix = (HTML / "chapters" / "94_coverage.html").read_text()
    links = set(re.findall(r'href="(\d\d_\w+\.html)#([\w-]+)"', appendix))
    expected = {(f"{i.chapter}.html", i.target) for i in coverage.COVERAGE}
    assert expected <= links, sorted(expected - links)
    for page, anchor in expected:
        html = (HTML / "chapters" / page).read_text()
        assert f'id="{anchor}"' in html, f"{page} has no anchor {anchor}"
