"""What keeps a phone's main thread free while a chapter loads (issue 49,
Lighthouse mobile 90+): the theme's back-to-top button reads the header's box
on the first scroll, not as its script runs (which forced the whole page's
first layout into it), the theme's other reads at load wait for the next
rendering step, the frame script reads every box before it moves or marks
one, and a phone lays out the first screen first and the rest a section at a
time; the sidebar, the contents highlight and a #fragment still work."""

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

from shardbook.book import pages, theme_assets
from test_site import _settle, server  # noqa: F401  (shared fixture)

# found, not imported: importing the theme (Sphinx with it) takes some 0.3 s on every worker that collects this file
THEME_BOOTSTRAP = (
    Path(importlib.util.find_spec("pydata_sphinx_theme").origin).parent
    / "theme"
    / "pydata_sphinx_theme"
    / "static"
    / "scripts"
    / "bootstrap.js"
)


def _site_with(tmp_path, text, name="bootstrap.js"):
    """A built site's stand-in (its outdir) whose theme script `name` holds `text`, and that script's path."""
    script = tmp_path / "_static" / "scripts" / name
    script.parent.mkdir(parents=True)
    script.write_text(text)
    return SimpleNamespace(outdir=str(tmp_path)), script


def test_the_themes_back_to_top_reads_the_header_on_the_first_scroll(tmp_path):
    app, script = _site_with(tmp_path, THEME_BOOTSTRAP.read_text())
    assert theme_assets.lazy_back_to_top(app)
    text = script.read_text()
    assert theme_assets.THEME_BACK_TO_TOP not in text
    assert text.count(theme_assets.THEME_BACK_TO_TOP_LAZY) == 1
    # no read of the header's box left outside the scroll handler
    assert text.count('getElementsByClassName("bd-header")[0].getBoundingClientRect()') == 1
    assert theme_assets.lazy_back_to_top(app) and script.read_text() == text  # a second build leaves it


def test_a_theme_without_that_code_is_left_alone(tmp_path):
    app, script = _site_with(tmp_path, "window.bootstrap = {};")
    assert theme_assets.lazy_back_to_top(app) is False
    assert script.read_text() == "window.bootstrap = {};"


def test_the_frame_script_reads_every_box_before_it_moves_one():
    source = pages.FRAME_SOURCE
    # the boxes are found (style reads) in one pass, then framed (DOM writes) in another
    assert source.index("getComputedStyle(c)") < source.index("c.before(frame)")
    assert "boxes.push(c)" in source.split("c.before(frame)")[0]
    # the observer measures every frame it is given before it marks any
    observer = source.split("new ResizeObserver(")[1].split("});")[0]
    assert observer.index("measure(") < observer.index("apply(")
    # so does each batch of boxes that come near the screen, before it marks them
    batch = source.split("new IntersectionObserver(")[1].split("}, {")[0]
    assert batch.index("framed.map(measure)") < batch.index("apply(")


THEME_SCRIPT = THEME_BOOTSTRAP.with_name("pydata-sphinx-theme.js")
THEME_READS = (
    (theme_assets.THEME_BANNERS, theme_assets.THEME_BANNERS_LATER),
    (theme_assets.THEME_SIDEBAR_SCROLL, theme_assets.THEME_SIDEBAR_SCROLL_LATER),
    (theme_assets.THEME_SIDEBAR_SCROLL_END, theme_assets.THEME_SIDEBAR_SCROLL_END_LATER),
    (theme_assets.THEME_TOC_HIGHLIGHT, theme_assets.THEME_TOC_HIGHLIGHT_LATER),
)


def test_the_themes_reads_at_load_move_to_the_next_rendering_step(tmp_path):
    app, script = _site_with(tmp_path, THEME_SCRIPT.read_text(), THEME_SCRIPT.name)
    assert theme_assets.lazy_theme_reads(app)
    text = script.read_text()
    for code, patched in THEME_READS:
        assert text.count(patched) == 1 and text.count(code) == patched.count(code)  # only inside the patch
    # the header's height (contents highlight) and the banners' heights are read in a callback
    # that a rendering step starts; the sidebar's scroll inside requestAnimationFrame
    assert text.count(theme_assets.AFTER_PAINT_JS) == 2
    assert 'requestAnimationFrame(function(){if(!document.querySelector(".bd-docs-nav"))return;' in text
    assert theme_assets.lazy_theme_reads(app) and script.read_text() == text  # a second build leaves it
    # the patched script still parses
    import shutil
    import subprocess

    if shutil.which("node"):
        assert subprocess.run(["node", "--check", str(script)], capture_output=True).returncode == 0


@pytest.mark.parametrize("changed", range(len(THEME_READS)))
def test_a_theme_whose_code_changed_is_not_half_patched(tmp_path, changed):
    """If any one of the codes is not in the theme's script, nothing is written."""
    original = THEME_SCRIPT.read_text().replace(THEME_READS[changed][0], "/* changed */")
    app, script = _site_with(tmp_path, original, THEME_SCRIPT.name)
    assert theme_assets.lazy_theme_reads(app) is False
    assert script.read_text() == original


# --- in the built site (Chromium) ---

LAST_CHAPTER = "chapters/99_planner.html"


def test_the_sidebar_scrolls_to_the_current_page(server, browser):  # noqa: F811
    """On a laptop whose window is short, the chapter list opens scrolled so
    that the current page's entry (the last one) is in view, as the theme
    scrolls it, from the next rendering step."""
    page = browser.new_page()
    page.set_viewport_size({"width": 1280, "height": 420})
    page.goto(f"{server}/{LAST_CHAPTER}", wait_until="networkidle")
    _settle(page)
    top, link, box = page.evaluate(
        """() => {
      const sidebar = document.querySelector('div.bd-sidebar');
      const active = [...document.querySelectorAll('.bd-docs-nav .active')].pop();
      const a = active.getBoundingClientRect(), s = sidebar.getBoundingClientRect();
      return [sidebar.scrollTop, [a.top, a.bottom], [s.top, s.bottom]];
    }"""
    )
    page.close()
    assert top > 0, "the chapter list was not scrolled"
    assert box[0] <= link[0] and link[1] <= box[1], f"the current page's entry {link} is outside the list {box}"


def test_the_contents_highlight_follows_the_reader(server, browser):  # noqa: F811
    """The page contents (right) marks the section being read as the reader
    scrolls down to it and back (the theme's observer, connected after the
    first paint)."""
    page = browser.new_page()
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{server}/chapters/03_data_parallel.html", wait_until="networkidle")
    _settle(page)
    ids = page.evaluate(
        "[...document.querySelectorAll('#pst-page-toc-nav a.nav-link')].map(a => a.getAttribute('href').slice(1))"
    )
    assert len(ids) >= 4, ids
    for target in (ids[3], ids[-1], ids[1]):
        page.evaluate(
            """id => { const h = document.getElementById(id);
          window.scrollTo(0, h.getBoundingClientRect().top + window.scrollY - 80); }""",
            target,
        )
        page.wait_for_function(
            """id => { const a = document.querySelector('#pst-page-toc-nav a.nav-link.active');
          return a && a.getAttribute('href') === '#' + id; }""",
            arg=target,
            timeout=5_000,
        )
    page.close()


PHONE = {"width": 390, "height": 844}
SKIPPED_JS = """() => [...document.querySelectorAll('.bd-article section > section')]
  .filter(s => getComputedStyle(s).contentVisibility === 'auto').length"""


def test_a_phone_lays_out_the_first_screen_first_then_the_rest(server, browser):  # noqa: F811
    """On a phone, the sections below the first screen are left out of the
    first paint's layout, then all laid out, one at a time, once the page
    is idle; the page is then laid out as it would have been."""
    page = browser.new_page()
    page.set_viewport_size(PHONE)
    page.add_init_script(
        """addEventListener('DOMContentLoaded', () => {
      window.skippedAtLoad = [...document.querySelectorAll('.bd-article section > section')]
        .filter(s => getComputedStyle(s).contentVisibility === 'auto').length;
    });"""
    )
    page.goto(f"{server}/chapters/04_tensor_parallel.html", wait_until="load")
    sections = page.evaluate("document.querySelectorAll('.bd-article section > section').length")
    assert sections >= 5
    assert page.evaluate("window.skippedAtLoad") == sections
    _settle(page)
    assert page.evaluate(SKIPPED_JS) == 0
    assert not page.evaluate("document.documentElement.classList.contains('shardbook-defer')")
    page.close()


def test_a_page_opened_at_a_place_in_it_is_laid_out_whole(server, browser):  # noqa: F811
    """A #fragment, or a reload, opens the page laid out whole, as before, so
    that the place it opens at is exact; so does a laptop's window."""
    page = browser.new_page()
    page.set_viewport_size(PHONE)
    # read as the document is parsed: a fast load lays every section out (and drops the class)
    # before a later evaluate would see it
    page.add_init_script(
        "addEventListener('DOMContentLoaded', () => "
        "{ window.deferredWhenParsed = document.documentElement.classList.contains('shardbook-defer'); });"
    )
    page.goto(f"{server}/chapters/04_tensor_parallel.html", wait_until="domcontentloaded")
    assert page.evaluate("window.deferredWhenParsed") is True
    target = page.evaluate("document.querySelectorAll('.bd-article section > section')[4].id")
    page.goto("about:blank")
    page.goto(f"{server}/chapters/04_tensor_parallel.html#{target}", wait_until="domcontentloaded")
    assert page.evaluate("document.documentElement.dataset.laidOut") == ""
    assert page.evaluate(SKIPPED_JS) == 0
    page.wait_for_load_state("networkidle")
    top = page.evaluate(f"document.getElementById('{target}').getBoundingClientRect().top")
    assert -5 <= top < 200, f"#{target} opens at {top} px"
    page.goto(f"{server}/chapters/04_tensor_parallel.html", wait_until="networkidle")
    page.reload(wait_until="domcontentloaded")
    assert page.evaluate(SKIPPED_JS) == 0
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{server}/chapters/04_tensor_parallel.html", wait_until="domcontentloaded")
    assert page.evaluate(SKIPPED_JS) == 0
    page.close()


def test_a_link_to_a_place_in_the_page_lays_it_out_whole_first(server, browser):  # noqa: F811
    """A reader who follows a link to a place in the chapter before the
    sections are all laid out (a phone too busy to be idle yet: the idle
    callbacks held back here) gets the whole page laid out first, so the
    sections skipped above the place cannot move it afterwards."""
    page = browser.new_page()
    page.set_viewport_size(PHONE)
    page.add_init_script("window.requestIdleCallback = () => 0;")
    page.goto(f"{server}/chapters/04_tensor_parallel.html", wait_until="load")
    assert page.evaluate(SKIPPED_JS) > 0
    target = page.evaluate("document.querySelectorAll('.bd-article section > section')[6].id")
    skipped, top = page.evaluate(
        """([id, skipped]) => {
      const a = document.createElement('a');
      a.href = '#' + id;
      a.textContent = 'to ' + id;
      document.querySelector('.bd-article').prepend(a);
      a.click();
      return [eval(skipped)(), document.getElementById(id).getBoundingClientRect().top];
    }""",
        [target, SKIPPED_JS],
    )
    assert skipped == 0
    assert not page.evaluate("document.documentElement.classList.contains('shardbook-defer')")
    assert -5 <= top < 200, f"#{target} at {top} px"
    page.close()
