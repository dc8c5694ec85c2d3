"""Issue 49 item 2: every table, code block and figure of every page, measured
in Chromium at a phone's width (390 px) and a laptop's (1280 px). Each one
fits its column, stacks (a table of cards), or scrolls sideways inside a
frame that shows the figures' cue ("scroll sideways", pages.FRAME_SOURCE);
none is cut off with no cue, the page itself never scrolls sideways, and
code in a table cell never breaks inside a word (the audit's "P('x" / "',"
and "fsdp_t" / "p")."""

import pytest

from test_site import CHAPTER_PAGES, _settle, server  # noqa: F401  (shared fixture)

WIDTHS = {"phone": (390, 844), "laptop": (1280, 900)}

# For each table, code block and figure image in the article, folded cell
# outputs opened as a reader opens them: the element that clips it sideways
# (itself or an ancestor whose overflow is not visible), and whether what it
# holds is wider than what it shows; if so, whether the frame around it shows
# the cue where no box around it clips the cue's line. An element with no
# clipping box may not reach past the window. A box off screen may not have
# been framed or measured yet (the frame script frames a box as it comes near
# the screen, and its ResizeObserver waits for a rendering step): it is
# brought on screen and checked again, for up to 120 frames, before it counts.
MEASURE_JS = """async () => {
  document.querySelectorAll('main details').forEach(d => { d.open = true; });  // folded outputs too
  const article = document.querySelector('article.bd-article') || document.querySelector('main');
  const vw = document.documentElement.clientWidth;
  const label = e => (e.closest('figure') && e.closest('figure').querySelector('figcaption') || e).textContent
    .trim().replace(/\\s+/g, ' ').slice(0, 60);
  const clipper = e => {
    for (let c = e; c && c !== article && c !== document.body; c = c.parentElement) {
      if (getComputedStyle(c).overflowX !== 'visible') return c;
    }
    return null;
  };
  // the cue is set, and no box around the frame clips its line under the frame
  const cued = c => {
    const frame = c.closest('.shardbook-figure-frame');
    if (!frame || !frame.classList.contains('shardbook-wide')) return false;
    const cue = getComputedStyle(frame, '::after');
    if (!/scroll/.test(cue.content)) return false;
    const line = parseFloat(cue.lineHeight) || 1.5 * parseFloat(cue.fontSize);
    const bottom = frame.getBoundingClientRect().bottom;
    for (let a = frame.parentElement; a && a !== article; a = a.parentElement) {
      const s = getComputedStyle(a);
      if (s.overflowY !== 'visible' && a.getBoundingClientRect().bottom - bottom < line - 1) return false;
    }
    return true;
  };
  const frames = () => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  const elements = [...article.querySelectorAll('table, pre, figure img, figure svg')]
    .filter(e => !e.closest('svg *') && !e.parentElement.closest('table, pre'));
  const found = { counted: { table: 0, pre: 0, img: 0, svg: 0 }, scrolled: 0, cut: [] };
  for (const e of elements) {
    let r = e.getBoundingClientRect();
    if (r.width === 0 && r.height === 0) continue;  // not shown
    const kind = e.tagName.toLowerCase();
    found.counted[kind] = (found.counted[kind] || 0) + 1;
    const c = clipper(e);
    if (!c) {
      if (r.right > vw + 1 || r.left < -1) {
        found.cut.push(`${kind} reaches past the window (${Math.round(r.right)} px of ${vw} px): ${label(e)}`);
      }
      continue;
    }
    const over = () => c.scrollWidth - c.clientWidth > 1;
    if (!over()) continue;
    found.scrolled += 1;
    if (!cued(c)) {
      c.scrollIntoView({ block: 'center' });
      for (let i = 0; i < 60 && !cued(c); i++) await frames();
    }
    if (over() && !cued(c)) {
      found.cut.push(`${kind} cut with no cue (${c.scrollWidth} px in ${c.clientWidth} px): ${label(e)}`);
    }
    const cr = c.getBoundingClientRect();
    if (cr.right > vw + 1) found.cut.push(`${kind}'s scrolling box reaches past the window: ${label(e)}`);
  }
  if (document.documentElement.scrollWidth > vw + 1) {
    found.cut.push(`the page scrolls sideways (${document.documentElement.scrollWidth} px in ${vw} px)`);
  }
  return found;
}"""

# Code in a table cell: a line break between two letters or digits of one
# token (each character's line read from its own box) is a word split.
SPLIT_CODE_JS = """() => {
  const article = document.querySelector('article.bd-article') || document.querySelector('main');
  const splits = [];
  for (const code of article.querySelectorAll('td code, th code')) {
    const text = code.textContent;
    const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
    const chars = [];
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (let i = 0; i < node.data.length; i++) {
        const range = document.createRange();
        range.setStart(node, i); range.setEnd(node, i + 1);
        const box = range.getClientRects()[0];
        chars.push([node.data[i], box ? box.top : null, box ? box.height : 0]);
      }
    }
    for (let i = 1; i < chars.length; i++) {
      const [a, top_a, h] = chars[i - 1], [b, top_b] = chars[i];
      if (/[A-Za-z0-9]/.test(a) && /[A-Za-z0-9]/.test(b) && top_a !== null && top_b !== null
          && Math.abs(top_b - top_a) > h / 2) {
        splits.push(`${JSON.stringify(text.slice(0, 40))} breaks between "${a}" and "${b}"`);
        break;
      }
    }
  }
  return splits;
}"""


def measure(browser, url, size):
    """What MEASURE_JS and SPLIT_CODE_JS find on `url` in a window of `size`."""
    page = browser.new_page()
    page.set_viewport_size({"width": size[0], "height": size[1]})
    page.goto(url, wait_until="networkidle")
    _settle(page)
    page.evaluate("document.querySelectorAll('img[loading=lazy]').forEach(i => { i.loading = 'eager'; })")
    page.wait_for_function("[...document.images].every(i => i.complete)")
    found = page.evaluate(MEASURE_JS)
    found["splits"] = page.evaluate(SPLIT_CODE_JS)
    page.close()
    return found


@pytest.mark.parametrize("width", sorted(WIDTHS))
@pytest.mark.parametrize("rel", CHAPTER_PAGES)
def test_every_table_code_block_and_figure_fits_or_scrolls_with_a_cue(rel, width, server, browser):  # noqa: F811
    found = measure(browser, f"{server}/{rel}", WIDTHS[width])
    print(f"\n{rel} at {WIDTHS[width][0]} px: {found['counted']}, {found['scrolled']} scroll sideways")
    problems = found["cut"] + [f"code in a table cell split inside a word: {s}" for s in found["splits"]]
    assert not problems, f"{rel} at {WIDTHS[width][0]} px:\n  " + "\n  ".join(problems)


def test_the_measure_finds_a_cut_table_and_a_split_token(server, browser):  # noqa: F811
    """On a planted page: a table wider than the phone in a scrolling box with
    no frame, a code block cut by its box, and code in a cell broken inside a
    word are each named; the same table in the figures' frame, with the cue
    shown, passes."""
    page = browser.new_page()
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{server}/chapters/00_introduction.html", wait_until="networkidle")
    _settle(page)
    cells = "".join(f"<td>column_{i}_value</td>" for i in range(12))
    page.evaluate(
        """cells => {
      const article = document.querySelector('article.bd-article');
      article.innerHTML = `<div style="overflow-x:auto"><table><tr>${cells}</tr></table></div>`
        + `<pre style="overflow:hidden">${'x = term + '.repeat(40)}</pre>`
        + `<table style="width:60px;table-layout:fixed"><tr><td>`
        + `<code style="white-space:normal;word-break:break-all">fsdp_tp_single_moe</code></td></tr></table>`;
    }""",
        cells,
    )
    found = page.evaluate(MEASURE_JS)
    splits = page.evaluate(SPLIT_CODE_JS)
    assert any(line.startswith("table cut with no cue") and "column_0_value" in line for line in found["cut"]), found
    assert any(line.startswith("pre cut with no cue") for line in found["cut"]), found
    assert splits and "fsdp_tp_single_moe" in splits[0], splits
    page.evaluate(
        """() => {
      const box = document.querySelector('article.bd-article > div');
      const frame = document.createElement('div');
      frame.className = 'shardbook-figure-frame shardbook-scroll-frame shardbook-wide';
      box.before(frame); frame.append(box); box.classList.add('shardbook-figure-scroll');
      document.querySelector('article.bd-article > pre').remove();
      document.querySelector('article.bd-article > table').remove();
    }"""
    )
    found = page.evaluate(MEASURE_JS)
    assert found["cut"] == [] and found["scrolled"] == 1, found
    page.close()


def test_the_stylesheet_ships_its_rules_without_its_comments():
    """Every first visit loads the site's stylesheet: it ships without its
    comments (pages.bare_stylesheet), and with every rule of its source,
    byte for byte (a comment never sits inside a rule's text here)."""
    import re
    from pathlib import Path

    from shardbook.book import pages

    source = (Path(pages.__file__).parent / "static" / "shardbook.css").read_text()
    bare = pages.strip_css_comments(source)
    assert "/*" not in bare and "*/" not in bare
    assert len(bare) < 0.8 * len(source)
    # the rules, as the source has them once its comments are gone however they are cut out
    rules = re.sub(r"/\*.*?\*/", "", source, flags=re.S)
    assert bare.split() == rules.split()
    assert 'content: "\\2190  scroll sideways  \\2192"' in bare
