"""The built site as a reader gets it: every page in headless Chromium
(Debian's package, driven by Playwright), offline, light, searchable, readable
in dark mode; plus static checks of links and accessibility.

Screenshots of every page go to _build/screenshots/ for review.
"""

import html.parser
import itertools
import json
import re
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from conftest import BUILD, CHAPTERS, HTML
from shardbook.book import site

PAGE_BUDGET_BYTES = 1.5e6  # a chapter's own content: HTML, figures, SVGs, data
FIRST_VISIT_BUDGET_BYTES = 1_000_000  # everything a first visit loads, raw (the reader's-side issue)
LAYOUT_SHIFT_LIMIT = 0.05  # Lighthouse's CLS, "good" below 0.1; the book aims at 0.05
AXE = Path(__file__).resolve().parents[1] / "node_modules" / "axe-core" / "axe.min.js"
SCREENSHOTS = BUILD / "screenshots"
SHOT_MAX_PX = 30_000  # JPEG holds at most 65,535 pixels a side


def _pages():
    return sorted(p.relative_to(HTML).as_posix() for p in HTML.glob("chapters/*.html"))


# from the sources, so that the tests are the same whether or not the book is built yet
CHAPTER_PAGES = sorted(f"chapters/{p.stem}.html" for p in CHAPTERS)


@pytest.fixture(scope="module")
def server(built_book):
    with site.serve(HTML) as base:
        yield base


def _stored_theme_js(theme):
    """A script that stores `theme` ("light" or "dark") where
    pydata-sphinx-theme reads it when a page loads."""
    return f"localStorage.setItem('mode', '{theme}'); localStorage.setItem('theme', '{theme}');"


def _visit(context, url, theme=None):
    """Open a page (in `theme`, "light" or "dark", if given, else the one the
    shared profile holds) and record what happened: console errors, failed
    or off-site requests, and the bytes it loaded by category."""
    page = context.new_page()
    if theme is not None:
        page.add_init_script(_stored_theme_js(theme))
    log = {"console": [], "failed": [], "offsite": [], "paths": []}
    page.on("console", lambda m: log["console"].append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: log["console"].append(f"uncaught: {e}"))
    page.on("requestfailed", lambda r: log["failed"].append(r.url))
    page.on("response", lambda r: log["failed"].append(f"{r.status} {r.url}") if r.status >= 400 else None)

    def on_request(request):
        host = urlparse(request.url).hostname
        if request.url.startswith(("data:", "blob:")):
            return
        if host != "127.0.0.1":
            log["offsite"].append(request.url)
        else:
            log["paths"].append(unquote(urlparse(request.url).path))

    page.on("request", on_request)
    page.goto(url, wait_until="networkidle")
    _settle(page)
    return page, log


def _open_at(browser, url, width, height):
    """A new page of the shared browser at width × height, `url` loaded and
    parsed (_settle)."""
    page = browser.new_page()
    page.set_viewport_size({"width": width, "height": height})
    page.goto(url, wait_until="networkidle")
    _settle(page)
    return page


def _settle(page):
    """Wait, after "networkidle", for the parse to end: that event once came
    before a busy machine had parsed a long page (the PDF printed half the
    book), and the checks read the whole page; on a phone, for the whole page
    to be laid out."""
    page.wait_for_function("document.readyState === 'complete'")
    # and, on a phone, for the sections laid out after the first paint (pages.DEFER_SOURCE;
    # a planted page has no such script), then a rendering step for what observes their sizes
    page.wait_for_function(
        "document.documentElement.dataset.laidOut !== undefined"
        " || !document.querySelector('script[src*=\"shardbook-mode.js\"]')"
    )
    page.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")


def _bytes(paths):
    own, shared = 0, 0
    for path in set(paths):
        target = HTML / path.lstrip("/")
        if target.is_dir():
            target = target / "index.html"
        if not target.is_file():
            continue
        if "/_static/" in path:
            shared += target.stat().st_size
        else:
            own += target.stat().st_size
    return own, shared


def _math_problems(page, log):
    """Formulas left as TeX, a math runtime loaded, or math not from KaTeX."""
    problems = []
    text = page.evaluate("document.querySelector('main').innerText")
    raw = re.findall(r"\\\(|\\\[|\$\$", text)
    if raw:
        problems.append(f"math not typeset ({len(raw)} raw delimiters)")
    runtimes = [p for p in log["paths"] if re.search(r"mathjax|katex(\.min)?\.js|auto-render", p, re.I)]
    if runtimes:
        problems.append(f"a math runtime is loaded ({runtimes}); math is rendered at build time")
    if page.evaluate("document.querySelectorAll('main .math').length") != page.evaluate(
        "document.querySelectorAll('main .math .katex').length"
    ):
        problems.append("a formula is not rendered by KaTeX at build time")
    return problems


def _figure_problems(page):
    """Images not shown, HLO graphs collapsed, icons the trimmed script missed.
    The figures a first visit leaves for later (loading="lazy") are fetched
    first, so that every one is checked."""
    problems = []
    page.evaluate("document.querySelectorAll('img[loading=lazy]').forEach(i => { i.loading = 'eager'; })")
    page.wait_for_function("[...document.images].every(i => i.complete)")
    broken = page.evaluate(
        "[...document.images].filter(i => !i.complete || i.naturalWidth === 0"
        " || i.getBoundingClientRect().width === 0).map(i => i.src)"
    )
    if broken:
        problems.append(f"images not shown {broken}")
    hlo = page.evaluate(
        "[...document.querySelectorAll('img[src*=after_partitioning]')].map(i => i.getBoundingClientRect().height)"
    )
    if any(h < 50 for h in hlo):
        problems.append(f"an HLO graph is not visible ({hlo})")
    left = page.evaluate("document.querySelectorAll('i[class*=fa-], span[class*=fa-]').length")
    if left:
        problems.append(f"{left} icons not drawn (missing from the trimmed icon script)")
    return problems


def _axe(page, script, context="document", rules=None):
    """axe-core's violations on the page as it is, within `context` (a JS
    expression: the document, or a selector string) and, if given, only for
    `rules`: [{id, impact, nodes (the first three)}]."""
    if not page.evaluate("typeof axe !== 'undefined'"):
        page.add_script_tag(content=script)
    run_only = f", runOnly: {json.dumps(list(rules))}" if rules else ""
    return page.evaluate(
        f"axe.run({context}, {{resultTypes: ['violations']{run_only}}}).then(r => r.violations.map(v => "
        "({id: v.id, impact: v.impact, nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))})))"
    )


def _visit_report(browser, server, rel):
    """One visit of a page, shared by the page checks and axe: what the page
    loaded and showed in light mode, its screenshot, axe-core's violations in
    light mode, and in dark mode after the theme switch."""
    script = AXE.read_text()
    page, log = _visit(browser, f"{server}/{rel}")
    report = {"axe": {}}
    if rel != "search.html":
        # what a first visit loads and shifts, before the figures below the first
        # screen (loading="lazy") are fetched to check that each one shows
        report["shift"] = page.evaluate(site.LAYOUT_SHIFT_JS)
        report["first_visit"], _ = site.loaded_bytes(page, HTML)
        report["problems"] = _math_problems(page, log) + _figure_problems(page)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        # JPEG: a long page's full-length PNG takes Chromium half as long again to
        # encode; a page taller than JPEG allows (the package reference) is shot
        # down to SHOT_MAX_PX
        height = page.evaluate("document.documentElement.scrollHeight")
        page.screenshot(
            path=str(SCREENSHOTS / f"{Path(rel).stem}.jpg"),
            full_page=True,
            clip={"x": 0, "y": 0, "width": 1280, "height": min(height, SHOT_MAX_PX)},
            type="jpeg",
            quality=85,
        )
    report["log"] = {key: list(entries) for key, entries in log.items()}  # before axe runs
    report["axe"] = _axe_light_and_dark(page, script)
    page.close()
    return report


def _axe_light_and_dark(page, script, rules=None):
    """axe-core's violations on `page` (light) in light mode, then in dark mode
    as a reader gets it from the theme's switch (the dark theme restored from
    storage on load is test_dark_mode_keeps_figures_readable's): {"light": ...,
    "dark": ...}. The page is left dark, to be closed; only the shared
    profile's storage goes back to light (switching the page itself back cost
    a restyle of the whole page and a wait on its transitions, 0.15 s of
    processor time a chapter against 0.01 s)."""
    found = {"light": _axe(page, script, rules=rules)}
    switch_theme(page, "dark")
    found["dark"] = _axe(page, script, rules=rules)
    page.evaluate(_stored_theme_js("light"))
    return found


# What pydata-sphinx-theme's switch does (its setTheme): the mode and theme on
# <html>, remembered in storage. Reading a style applies the new rules at once,
# so the colour transitions they start are running when the wait begins.
SWITCH_THEME_JS = """theme => {
  localStorage.setItem('mode', theme); localStorage.setItem('theme', theme);
  document.documentElement.dataset.mode = theme; document.documentElement.dataset.theme = theme;
  getComputedStyle(document.body).color;
}"""


def switch_theme(page, theme):
    """Switch `page` to `theme` ("light" or "dark") in place, as a reader's
    click on the theme switch does, and wait until its colour transitions
    have ended: a check then reads the colours the reader ends up with."""
    page.evaluate(SWITCH_THEME_JS, theme)
    page.wait_for_function(
        "document.getAnimations().every(a => !(a instanceof CSSTransition)"
        f" || a.playState === 'finished') && document.documentElement.dataset.theme === '{theme}'"
    )


def _axe_problems(rel, report):
    """axe-core (pinned in package.json) in light and dark mode: serious or
    critical violations are problems; the others are printed."""
    serious = []
    for scheme, violations in report["axe"].items():
        for v in violations:
            line = f"{rel}: axe ({scheme}) {v['impact']} {v['id']} {v['nodes']}"
            if v["impact"] in ("serious", "critical"):
                serious.append(line)
            else:
                print(line)
    return serious


def test_every_chapter_source_is_a_page(built_book):
    """The pages checked one by one below are exactly the built chapter pages."""
    assert _pages() == CHAPTER_PAGES


@pytest.mark.parametrize("rel", CHAPTER_PAGES)
def test_page_in_a_browser(rel, server, browser):
    """A chapter as a reader opens it: no console error, failed or off-site
    request; math typeset by KaTeX at build time; figures shown; little
    layout shift; its first visit within budget; and no serious axe-core
    violation in light or dark mode."""
    report = _visit_report(browser, server, rel)
    log = report["log"]
    problems = [
        f"{what} {log[key]}"
        for key, what in (
            ("console", "console errors"),
            ("failed", "failed requests"),
            ("offsite", "requests off 127.0.0.1"),
        )
        if log[key]
    ]
    problems += report["problems"]
    if report["shift"] > LAYOUT_SHIFT_LIMIT:
        problems.append(f"layout shift {report['shift']:.3f} while loading (limit {LAYOUT_SHIFT_LIMIT})")
    if report["first_visit"] > FIRST_VISIT_BUDGET_BYTES:
        problems.append(f"a first visit loads {report['first_visit']:,} bytes (budget {FIRST_VISIT_BUDGET_BYTES:,})")
    own, theme = _bytes(log["paths"])
    if own > PAGE_BUDGET_BYTES:
        problems.append(f"{own:,} bytes of its own content (budget {PAGE_BUDGET_BYTES:,.0f})")
    print(
        f"\n{rel}: {own:,} bytes own content, theme assets {theme:,}; first visit {report['first_visit']:,} bytes raw"
    )
    problems += _axe_problems(rel, report)
    assert (SCREENSHOTS / f"{Path(rel).stem}.jpg").stat().st_size > 0
    assert not problems, "\n".join(f"{rel}: {p}" for p in problems)


def test_search_page_in_a_browser(server, browser):
    report = _visit_report(browser, server, "search.html")
    log = report["log"]
    assert not log["console"] and not log["failed"] and not log["offsite"], log
    serious = _axe_problems("search.html", report)
    assert not serious, "\n".join(serious)


def test_the_icon_script_stays_trimmed(built_book):
    icon_script = HTML / "_static" / "scripts" / "fontawesome.js"
    assert icon_script.stat().st_size < 20_000, (
        "the theme's full icon bundle is back; shardbook.book.theme_assets trims it"
    )


def test_search_finds_the_chapters(server, browser):
    page, log = _visit(browser, f"{server}/search.html?q=all-gather")
    page.wait_for_selector("#search-results ul.search li a", timeout=30_000)
    links = page.evaluate(
        "[...document.querySelectorAll('#search-results ul.search li a')].map(a => a.getAttribute('href'))"
    )
    assert any("02_sharding" in href for href in links), links
    assert any("03_data_parallel" in href for href in links), links
    assert not log["offsite"] and not log["console"]
    _forget_search_terms(page)
    page.close()


def _forget_search_terms(page):
    """A search leaves its terms in the site's storage for the next page
    opened (Sphinx's highlighting); clear them, so that the tests after this
    one in the shared profile open pages as a reader who came from no search
    (test_a_page_opened_from_a_search_result_does_not_jump covers that path)."""
    page.evaluate("localStorage.removeItem('sphinx_highlight_terms')")


def test_a_page_opened_from_a_search_result_does_not_jump(server, browser):
    """On a phone, a search, then its first result: the chapter opens with the
    query highlighted and Sphinx's "Hide Search Matches" link on screen, and
    the link, added when the page may already be drawn, moves nothing (it
    floats; in the page's flow it pushed the chapter 65 px down, a layout
    shift of 0.074 that failed a phone screenshot test run after a search)."""
    page = browser.new_page()
    page.add_init_script(_stored_theme_js("light"))
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{server}/search.html?q=all-gather", wait_until="networkidle")
    first = page.locator("#search-results ul.search li a").first
    first.wait_for(timeout=30_000)
    first.click()
    page.wait_for_load_state("networkidle")
    _settle(page)
    assert "/chapters/" in page.url, page.url
    link = page.locator("#searchbox p.highlight-link a")
    link.wait_for(timeout=10_000)
    box = link.bounding_box()
    assert box and 0 <= box["y"] and box["y"] + box["height"] <= 844 and box["x"] + box["width"] <= 390, box
    page.wait_for_function("document.querySelectorAll('main span.highlighted').length > 0")  # 10 ms after the link
    shift = page.evaluate(site.LAYOUT_SHIFT_JS)
    moved = " | ".join(page.evaluate(site.LAYOUT_SHIFT_SOURCES_JS)) if shift > LAYOUT_SHIFT_LIMIT else ""
    assert shift <= LAYOUT_SHIFT_LIMIT, f"layout shift {shift:.3f} (limit {LAYOUT_SHIFT_LIMIT}): {moved}"
    # whether the link was added before or after the first paint is a race (a shift only in the second
    # case), so also check what decides it: the link takes no room in the page's flow
    article_top = "document.querySelector('article.bd-article').getBoundingClientRect().top + window.scrollY"
    top_with_link = page.evaluate(article_top)
    link.click()  # hides the matches, as a reader would
    page.wait_for_function("document.querySelectorAll('main span.highlighted').length === 0")
    assert page.locator("#searchbox p.highlight-link").count() == 0
    assert page.evaluate(article_top) == top_with_link, "the link pushed the chapter down"
    page.close()


# Every write of the theme on <html> as a first visit makes it (nothing stored):
# the value it replaced and whether the body was being parsed yet. A
# MutationObserver's callback runs right after the script that wrote.
THEME_WRITES_JS = """
localStorage.removeItem('mode'); localStorage.removeItem('theme');
window.shardbookThemeWrites = [];
new MutationObserver(records => records.forEach(r => window.shardbookThemeWrites.push(
  [r.oldValue, document.body !== null]))).observe(document,
  {subtree: true, attributes: true, attributeFilter: ['data-theme'], attributeOldValue: true});
"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_first_visit_has_its_colour_scheme_before_the_body_is_parsed(server, browser, scheme):
    """On a first visit (nothing stored) the page has the mode and theme that
    pydata-sphinx-theme's script sets (auto, and the system's scheme) before
    its body is parsed, and that script, when it sets them again, changes
    nothing. They were empty: the first paint had no scheme, and the script
    then restyled the whole page (0.2 s of a phone's main thread on chapter
    4, which Lighthouse counts as blocking)."""
    page = browser.new_page()
    page.emulate_media(color_scheme=scheme)
    page.add_init_script(THEME_WRITES_JS)
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.goto(f"{server}/chapters/04_tensor_parallel.html", wait_until="load")
    writes, mode, theme = page.evaluate(
        "[window.shardbookThemeWrites, document.documentElement.dataset.mode, document.documentElement.dataset.theme]"
    )
    assert (mode, theme) == ("auto", scheme)
    # what each write left: the value the next one replaced, the last one's the page's
    values = [old for old, _ in writes[1:]] + [theme]
    assert any(not in_body for _, in_body in writes), "nothing set the theme in the head"
    changed_in_body = [(old, new) for (old, in_body), new in zip(writes, values, strict=True) if in_body and old != new]
    assert not changed_in_body, f"the theme changed after the body was parsed: {changed_in_body}"
    assert not errors, errors
    page.evaluate(_stored_theme_js("light"))  # the shared profile's storage back to light
    page.close()


@pytest.mark.parametrize("chapter", ["01_topology", "02_sharding"])
def test_dark_mode_keeps_figures_readable(server, browser, chapter):
    """Plots (chapter 1) and HLO graphs (chapter 2) keep a light background
    and dark ink when the theme is dark."""
    from io import BytesIO

    from PIL import Image

    page = browser.new_page()
    page.add_init_script(_stored_theme_js("dark"))
    page.goto(f"{server}/chapters/{chapter}.html", wait_until="networkidle")
    _settle(page)
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    figures = page.query_selector_all("figure img")
    assert figures
    for img in figures:
        img.scroll_into_view_if_needed()
        # figures after a page's first load lazily: read the figure, not the empty box before it
        page.wait_for_function("i => i.complete && i.naturalWidth > 0", arg=img)
        shot = Image.open(BytesIO(img.screenshot())).convert("L")
        w, h = shot.size
        inner = shot.crop((w // 10, h // 10, w - w // 10, h - h // 10))
        # the figure's own background, its most common shade, must stay light
        # (the theme dims images in dark mode, so "light" is not white); a
        # transparent background would show the page's near-black instead
        histogram = inner.histogram()
        background = max(range(256), key=histogram.__getitem__)
        assert background > 150, (
            f"a figure's background is dark in dark mode ({img.get_attribute('src')}: {background})"
        )
        # ... and its ink must stay dark
        assert shot.getextrema()[0] < 80, "a figure has lost its dark ink"
    page.screenshot(path=str(SCREENSHOTS / f"dark_{chapter}.png"))
    page.close()


def test_the_dark_check_reads_the_colours_after_the_switch(browser, tmp_path):
    """The pages' dark-theme axe check switches the theme in place: on a
    planted page whose text turns low-contrast in the dark theme only, behind
    a slow colour transition, it finds the violation (it read the colours the
    transition ends on, not those it starts from); the light theme has none."""
    page_html = (
        "<!doctype html><html lang='en' data-theme='light'><head><title>planted</title><style>"
        "p { color: #111; background: #fff; transition: color 0.8s, background-color 0.8s; }"
        "html[data-theme=dark] p { color: #555; background: #333; }"
        "</style></head><body><main><p>Some text to read.</p></main></body></html>"
    )
    (tmp_path / "index.html").write_text(page_html)
    script = AXE.read_text()
    with site.serve(tmp_path) as base:
        page, _ = _visit(browser, f"{base}/index.html")
        found = _axe_light_and_dark(page, script, rules=["color-contrast"])
        page.close()
        # the shared profile's storage is light again: the next page opens light
        after = browser.new_page()
        after.goto(f"{base}/index.html")
        stored = after.evaluate("[localStorage.getItem('mode'), localStorage.getItem('theme')]")
        after.close()
    assert found["light"] == []
    assert [v["id"] for v in found["dark"]] == ["color-contrast"], found["dark"]
    assert stored == ["light", "light"], stored


class _Collector(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.hrefs, self.imgs, self.headings = set(), [], [], []
        self.figures = self.figcaptions = self.tables = self.theads = 0
        self.in_main = 0

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "main":
            self.in_main += 1
        if tag == "a" and a.get("href"):
            self.hrefs.append(a["href"])
        if tag == "img" and self.in_main:
            self.imgs.append(a.get("alt"))
        if self.in_main and re.fullmatch(r"h[1-6]", tag):
            self.headings.append(int(tag[1]))
        if self.in_main and tag == "figure":
            self.figures += 1
        if self.in_main and tag == "figcaption":
            self.figcaptions += 1
        if self.in_main and tag == "table":
            self.tables += 1
        if self.in_main and tag == "thead":
            self.theads += 1

    def handle_endtag(self, tag):
        if tag == "main":
            self.in_main -= 1


def _parsed(path):
    c = _Collector()
    c.feed(path.read_text(errors="replace"))
    return c


def test_internal_links_and_anchors_resolve(built_book):
    pages = {p: _parsed(p) for p in HTML.rglob("*.html") if "_static" not in p.parts}
    missing = []
    for page, parsed in pages.items():
        for href in parsed.hrefs:
            url = urlparse(href)
            if url.scheme or href.startswith(("mailto:", "javascript:")) or href.startswith("//"):
                continue
            target = (page.parent / unquote(url.path)).resolve() if url.path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                missing.append(f"{page.relative_to(HTML)} -> {href}")
                continue
            if url.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parsed(target).ids
                if unquote(url.fragment) not in ids:
                    missing.append(f"{page.relative_to(HTML)} -> {href} (no such id)")
    assert not missing, "\n".join(missing[:40])


@pytest.mark.parametrize("rel", _pages())
def test_accessibility_basics(rel, built_book):
    parsed = _parsed(HTML / rel)
    assert all(alt for alt in parsed.imgs), f"{rel}: an image without alt text"
    assert parsed.figures == parsed.figcaptions, f"{rel}: {parsed.figures} figures, {parsed.figcaptions} captions"
    levels = parsed.headings
    assert levels and levels[0] == 1, f"{rel}: the page does not start with an h1"
    assert all(b <= a + 1 for a, b in itertools.pairwise(levels)), f"{rel}: heading levels skip: {levels}"
    assert parsed.theads == parsed.tables, f"{rel}: {parsed.tables} tables, {parsed.theads} with a header row"


def test_every_figure_opens_full_size(built_book):
    """Wide plots and HLO graphs are unreadable at a phone's width: every
    figure's image has an "Open full size" link to the image itself."""
    for page in sorted(HTML.glob("chapters/*.html")):
        text = page.read_text()
        images = re.findall(
            r'<figure\b[^>]*>\s*(?:<div class="shardbook-figure-frame[^"]*"><div [^>]*>)?(?:<picture><source [^>]*>)?'
            r'<img\b[^>]*?\bsrc="([^"]+)"',
            text,
        )
        links = re.findall(r'<a class="shardbook-full-size" href="([^"]+)">Open full size</a>', text)
        assert images == links, f"{page.name}: figures {images} but full-size links {links}"
        for src in links:
            assert (page.parent / src).resolve().exists(), f"{page.name}: {src} does not exist"


@pytest.fixture(scope="module")
def small_screen_tab(browser):
    """A tab of a given screen size, one per size, that goes from page to page
    (each test's own tab took twice the processor time: a new renderer, the
    page laid out from nothing); the light theme in each, whatever an earlier
    test left in the shared profile."""
    tabs = {}

    def tab(width, height):
        if (width, height) not in tabs:
            page = browser.new_page()
            page.add_init_script(_stored_theme_js("light"))
            page.set_viewport_size({"width": width, "height": height})
            # a new tab opens at the profile's 1280 px; its first chapter must load at the small
            # size, not be laid out wide and then narrowed (which a busy machine showed as a
            # layout shift of the whole page): wait until the blank page reports the new width
            page.goto("about:blank")
            page.wait_for_function(f"window.innerWidth === {width} && window.innerHeight === {height}")
            tabs[width, height] = page
        return tabs[width, height]

    yield tab
    for page in tabs.values():
        page.close()


@pytest.mark.parametrize("rel", CHAPTER_PAGES)
@pytest.mark.parametrize("width,height,kind", [(390, 844, "phone"), (768, 1024, "tablet")])
def test_phone_and_tablet_screenshots(server, small_screen_tab, width, height, kind, rel):
    """A chapter at a phone's and a tablet's width: no sideways scrolling of
    the page itself, no display formula cut at its column's left edge, little
    layout shift, and a screenshot for review."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    wide = []
    page = small_screen_tab(width, height)
    page.goto(f"{server}/{rel}", wait_until="networkidle")
    _settle(page)
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    if overflow > 1:
        wide.append(f"{rel}: {overflow}px wider than the screen")
    shift = page.evaluate(site.LAYOUT_SHIFT_JS)
    if shift > LAYOUT_SHIFT_LIMIT:
        moved = " | ".join(page.evaluate(site.LAYOUT_SHIFT_SOURCES_JS))
        wide.append(f"{rel}: layout shift {shift:.3f} while loading (limit {LAYOUT_SHIFT_LIMIT}): {moved}")
    clipped = page.evaluate(
        "[...document.querySelectorAll('main div.math')].filter(d => { const k = d.querySelector('.katex-display');"
        " return k && k.getBoundingClientRect().left < d.getBoundingClientRect().left - 1; }).length"
    )
    if clipped:
        wide.append(f"{rel}: {clipped} display formula(s) start left of their column (clipped)")
    page.screenshot(path=str(SCREENSHOTS / f"{kind}_{Path(rel).stem}.png"))
    assert not wide, wide


def test_no_connection_tried_to_leave_the_machine(browser, server):
    """Everything that is not the loopback goes to a proxy that refuses and
    records it; after every page above, it has seen nothing. The proxy does
    see a request that tries to leave, so the check can fail."""
    assert browser.left_the_machine == [], browser.left_the_machine
    page = browser.new_page()
    try:
        page.goto("http://example.invalid/", wait_until="commit", timeout=10_000)
    except Exception:
        pass  # refused, as it should be
    page.close()
    assert any("example.invalid" in line for line in browser.left_the_machine)
    browser.left_the_machine.clear()


def test_the_local_server_compresses_and_caches_as_a_static_host(tmp_path):
    """shardbook.book.site serves gzip to a browser that accepts it, lets
    assets be cached for ten minutes, makes pages revalidate (so `make serve`
    shows a rebuild at once) and answers a revalidation with 304."""
    import gzip
    import urllib.error
    import urllib.request

    (tmp_path / "page.html").write_text("<p>" + "numbers " * 500 + "</p>")
    (tmp_path / "style.css").write_text("p { color: red; }\n" * 100)

    def get(url, **headers):
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers)) as r:
                return r.status, dict(r.headers), r.read()
        except urllib.error.HTTPError as err:
            return err.code, dict(err.headers), b""

    with site.serve(tmp_path) as base:
        status, headers, body = get(f"{base}/page.html", **{"Accept-Encoding": "gzip"})
        assert status == 200 and headers["Content-Encoding"] == "gzip" and headers["Cache-Control"] == "no-cache"
        assert gzip.decompress(body) == (tmp_path / "page.html").read_bytes()
        assert int(headers["Content-Length"]) < (tmp_path / "page.html").stat().st_size / 5
        status, headers, _ = get(f"{base}/style.css", **{"Accept-Encoding": "gzip"})
        assert status == 200 and headers["Cache-Control"] == "max-age=600"
        status, _, body = get(f"{base}/page.html")  # no Accept-Encoding: plain bytes
        assert status == 200 and body == (tmp_path / "page.html").read_bytes()
        later = "Sun, 01 Jan 2102 00:00:00 GMT"
        assert get(f"{base}/page.html", **{"Accept-Encoding": "gzip", "If-Modified-Since": later})[0] == 304


def test_a_page_with_a_table_waits_only_for_an_element_it_has(built_book):
    """The render-blocking `expect` link names an element the page holds
    (a missing one would hold the first paint until the whole page is parsed)."""
    from shardbook.book.pages import FIRST_SECTION_END_ID

    expecting = 0
    for path in sorted(HTML.glob("chapters/*.html")):
        text = path.read_text()
        if f'href="#{FIRST_SECTION_END_ID}" blocking="render"' in text:
            expecting += 1
            assert text.count(f'id="{FIRST_SECTION_END_ID}"') == 1, path.name
        else:
            assert "<table" not in text.split("<article", 1)[-1].split("</article>", 1)[0], (
                f"{path.name}: a table but no expect link"
            )
    assert expecting >= 5


def test_an_exercise_is_numbered_and_its_solution_opens_when_asked(server, browser):
    """Chapter 2's first exercise is "Exercise 2.1"; its solution, linked to
    it, is folded until the reader opens it, and then shows the computed
    answer."""
    page, log = _visit(browser, f"{server}/chapters/02_sharding.html")
    exercise = page.locator("[id='ex-sharding-1']")
    assert "Exercise 2.1" in exercise.inner_text()
    solution = page.locator("div.solution").first
    assert solution.locator("a[href='#ex-sharding-1']").count() == 1, "the solution does not link to its exercise"
    answer = solution.locator(".glue-key-shard_ex1_mb")
    assert not answer.is_visible(), "the solution is open before the reader asks"
    solution.locator(".admonition-title").click()
    answer.wait_for(state="visible", timeout=5_000)
    assert answer.inner_text().strip() != ""
    assert not log["console"] and not log["offsite"], log
    page.close()


def test_a_tap_on_the_exercise_name_in_a_solution_title_opens_the_answer(server, browser):
    """On a phone the link to the exercise fills most of a solution's
    title: a tap on that name opens the answer rather than jumping to the
    exercise just above it (the reader audit's folded answers that would
    not open)."""
    page, log = _visit(browser, f"{server}/chapters/02_sharding.html")
    page.set_viewport_size({"width": 390, "height": 844})
    solution = page.locator("div.solution").first
    answer = solution.locator(".glue-key-shard_ex1_mb")
    name = solution.locator(".admonition-title a[href='#ex-sharding-1']")
    name.scroll_into_view_if_needed()
    before = page.url
    box = name.bounding_box()
    page.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)  # where a thumb lands
    answer.wait_for(state="visible", timeout=5_000)
    assert page.url == before, "the tap followed the link instead of opening the answer"
    assert not log["console"] and not log["offsite"], log
    page.close()


def test_a_name_in_a_code_cell_opens_its_reference_entry(server, browser):
    """Clicking a package name in a chapter's code cell lands on its entry in
    the package reference, with its docstring in view."""
    page, log = _visit(browser, f"{server}/chapters/03_data_parallel.html")
    link = page.locator("a.sphinx-codeautolink-a[href*='95_reference_'][href*='.html#shardbook.']").first
    address, target = link.get_attribute("href").split("#", 1)
    link.scroll_into_view_if_needed()
    link.click()
    page.wait_for_url(f"**/{address.rsplit('/', 1)[-1]}#{target}")
    # the page's load, after which the browser has jumped to the fragment: what the checks below
    # read ("networkidle", 500 ms without a request after that, twice did not come within 30 s
    # while the build's other browser tests and the PDF print loaded both cores)
    page.wait_for_load_state("load")
    entry = page.locator(f"[id='{target}']")
    entry.wait_for(state="visible")
    assert entry.is_visible()
    top = entry.evaluate("e => e.getBoundingClientRect().top")
    assert 0 <= top < page.viewport_size["height"], f"{target} is not in view after the jump ({top}px)"
    assert entry.locator("xpath=..").locator("dd").first.inner_text().strip(), f"{target}: no docstring shown"
    assert not log["console"] and not log["offsite"], log
    page.close()


def test_a_glued_sentence_reads_in_the_text_weight_and_a_glued_number_in_bold(server, browser):
    """myst-nb shows every glued value bold, so a computed number stands out;
    a whole sentence of prose glued under a ``..._sentence`` key (chapter 7's
    77-word verdict on TP across nodes) is shown in its paragraph's weight."""
    page, log = _visit(browser, f"{server}/chapters/07_choosing_a_mesh.html")
    weights = page.evaluate(
        """() => {
            const w = e => Number(getComputedStyle(e).fontWeight);
            const sentence = document.querySelector("span.pasted-text.glue-key-mesh_valid_cross_tp_sentence");
            const number = [...document.querySelectorAll("p span.pasted-text")]
                .find(e => !/_sentence/.test(e.className) && /^[0-9][0-9,.]*$/.test(e.textContent.trim()));
            return {sentence: w(sentence), paragraph: w(sentence.parentElement), number: w(number)};
        }"""
    )
    assert weights["sentence"] == weights["paragraph"] < 600, weights
    assert weights["number"] >= 600, weights
    assert not log["console"] and not log["offsite"], log
    page.close()


def test_a_glued_figure_keeps_its_unit_on_its_line(server, browser):
    """A glued "37 s" broke after "37" at a line's end, its unit starting
    the next line: at a phone's width every glued number-and-unit of chapter
    5 is one line, and a glued phrase still wraps."""
    page = browser.new_page()
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{server}/chapters/05_expert_parallel.html", wait_until="networkidle")
    found = page.evaluate(
        """() => {
            const spans = [...document.querySelectorAll("p span.pasted-text")];
            const figures = spans.filter(e => e.classList.contains("glue-figure"));
            const lines = e => e.getClientRects().length;
            return {
                figures: figures.length,
                with_unit: figures.filter(e => / /.test(e.textContent)).length,
                broken: figures.filter(e => lines(e) > 1).map(e => e.textContent),
                nowrap: figures.every(e => getComputedStyle(e).whiteSpace === "nowrap"),
                phrase_wraps: spans.some(e => !e.classList.contains("glue-figure") && lines(e) > 1),
            };
        }"""
    )
    assert found["figures"] > 20 and found["with_unit"] > 10, found
    assert found["nowrap"] and not found["broken"], found
    assert found["phrase_wraps"], found  # the long glued phrases are not figures: they wrap with the prose
    page.close()


# --- navigation on phones and tablets, the front page, search (issue 32) ---


@pytest.mark.parametrize("width,height", [(390, 844), (800, 1000)])
@pytest.mark.parametrize("drawer", ["primary", "secondary"])
def test_the_drawers_open_and_close_and_lead_to_a_chapter(server, browser, width, height, drawer):
    """The chapter list (primary) and the page contents (secondary) open from
    the buttons a reader sees on a phone and a tablet, close again, and a
    click on an entry in the drawer goes there. (The theme once bound its
    handler to a hidden copy of the button, and nothing opened.)"""
    page = browser.new_page()
    page.set_viewport_size({"width": width, "height": height})
    page.goto(f"{server}/chapters/02_sharding.html", wait_until="networkidle")
    _settle(page)
    modal = f"#pst-{drawer}-sidebar-modal"
    button = page.locator(f".{drawer}-toggle:visible")
    assert button.count() == 1, f"{drawer}: {button.count()} visible toggles at {width} px"
    assert not page.evaluate(f"document.querySelector('{modal}').open")
    button.click()
    page.wait_for_function(f"document.querySelector('{modal}').open")
    link = page.locator(f"{modal} a.reference.internal:visible, {modal} nav a:visible")
    assert link.count() > 3, f"{drawer} drawer at {width} px shows {link.count()} links"
    page.screenshot(path=str(SCREENSHOTS / f"drawer_{drawer}_{width}.png"))
    page.keyboard.press("Escape")
    page.wait_for_function(f"!document.querySelector('{modal}').open")
    button.click()
    page.wait_for_function(f"document.querySelector('{modal}').open")
    if drawer == "primary":
        page.locator(f"{modal} a", has_text="Choosing a mesh").first.click()
        page.wait_for_url("**/07_choosing_a_mesh.html*")
        assert "Choosing a mesh" in page.inner_text("h1")
    else:
        target = page.locator(f"{modal} a[href^='#']").nth(2)
        href = target.get_attribute("href")
        target.click()
        page.wait_for_function(f"location.hash === {json.dumps(href)}")
        top = page.evaluate(f"document.getElementById({json.dumps(href[1:])}).getBoundingClientRect().top")
        assert -5 <= top < height / 2, f"the section {href} is not in view after the click (top at {top}px)"
    page.close()


def test_the_front_page_says_what_the_book_is_and_shows_no_set_up_code(server, browser):
    """The landing page: the book's title in the first screen on a phone; who
    it is for, what a reader can do after it, prerequisites, a map of the
    chapters (a figure), the four ways to read it; no code cell shown, and no
    pointer to a panel the static page does not have."""
    page = browser.new_page()
    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{server}/index.html", wait_until="networkidle")
    _settle(page)
    assert page.url.endswith("chapters/00_introduction.html")
    title = page.locator(
        "main .shardbook-front-lead strong", has_text="Splitting Transformer Training Across Accelerators"
    )
    assert title.is_visible() and title.bounding_box()["y"] < 844, "the book's title is not in a phone's first screen"
    text = " ".join(page.text_content("main").split())  # innerText leaves out sections not yet laid out
    for heading in (
        "Who it is for",
        "What you will be able to do",
        "What you need first",
        "A map of the book",
        "Four ways to read it",
    ):
        assert page.locator("main h2", has_text=heading).count() == 1, f"no section {heading!r}"
    for way in ("On this site", "Live, in your browser", "In Jupyter", "On paper"):
        assert way in text, f"the front page does not name the way to read it {way!r}"
    assert page.locator("main div.cell_input:visible, main details.hide:visible").count() == 0, "set-up code is shown"
    assert "use_cpu_devices" not in text
    assert "panel below" not in text
    figure = page.locator("#fig-intro-map")
    assert figure.count() == 1 and figure.locator("img, svg").first.bounding_box()["height"] > 200
    alt = figure.locator("img").first.get_attribute("alt") or ""
    assert "Topology" in alt and "Choosing a mesh" in alt
    page.close()


def _search(page, server, query):
    page.goto(f"{server}/search.html?q={query}", wait_until="networkidle")
    page.wait_for_selector("#search-results ul.search li", timeout=30_000)
    page.wait_for_function("(document.querySelector('#search-progress') || {}).textContent !== 'Preparing search...'")
    page.wait_for_timeout(1500)  # snippets are filled in as their pages arrive
    _forget_search_terms(page)
    return page.evaluate(
        "[...document.querySelectorAll('#search-results ul.search > li')].map(li => ({"
        "href: li.querySelector('a').getAttribute('href'), kind: li.className,"
        "snippet: (li.querySelector('p.context') || {textContent: ''}).textContent}))"
    )


@pytest.mark.parametrize(
    "query,first,above",
    [
        ("FSDP", "03_data_parallel", "explorer"),
        ("all-gather", "01_topology", "05_expert_parallel"),
        ("bubble", "06_pipeline", "91_numbers"),
    ],
)
def test_search_ranks_chapters_above_api_objects(server, browser, query, first, above):
    """A chapter whose titles hold the query comes first; among chapters
    that only use it, the earliest (Sphinx keeps no word counts); then the
    glossary's definition; every page before any object of the package
    reference. "all-gather" is looked up whole: the chapter with
    "all-to-all" in a heading (5) no longer leads (the audit). No snippet
    shows a formula twice or as TeX."""
    page = browser.new_page()
    results = _search(page, server, query)
    assert results, f"nothing found for {query!r}"
    hrefs = [r["href"] for r in results]
    assert first in hrefs[0], f"{query!r}: the first result is {hrefs[0]}, not {first}"
    ranks = [i for i, h in enumerate(hrefs) if above in h]
    if ranks:
        assert ranks[0] > 0 and all(not h.startswith("chapters/9") for h in hrefs[: min(ranks[0], 3)]), hrefs[:8]
    if query == "all-gather":
        assert hrefs.index("chapters/02_sharding.html") < hrefs.index("chapters/05_expert_parallel.html"), hrefs[:8]
    kinds = ["object" if "kind-object" in r["kind"] else "page" for r in results]
    if "object" in kinds:
        assert "page" not in kinds[kinds.index("object") :], (
            f"{query!r}: an API object ranks above a page: {results[:8]}"
        )
    for r in results:
        snippet = r["snippet"]
        assert "\\" not in snippet and "{" not in snippet, f"TeX in a snippet: {snippet[:200]!r}"
        assert not re.search(r"(\S{3,})\1\1", snippet), f"a formula repeated in a snippet: {snippet[:200]!r}"
    page.close()


@pytest.mark.parametrize("query", ["FSDP", "MFU", "bubble", "mesh"])
def test_search_ranks_the_chapters_and_the_planner_above_the_errata(server, browser, query):
    """The errata log quotes every page it corrects (the reader's audit found it in the top five for most
    queries, with ledger keys in its snippets): every numbered chapter and the planner page it finds
    rank above it."""
    page = browser.new_page()
    hrefs = [r["href"] for r in _search(page, server, query)]
    page.close()
    assert hrefs, f"nothing found for {query!r}"
    if any("98_errata" in h for h in hrefs):
        errata = next(i for i, h in enumerate(hrefs) if "98_errata" in h)
        ahead = [h for h in hrefs[errata + 1 :] if re.search(r"chapters/(0\d_|99_planner)", h)]
        assert not ahead, f"{query!r}: {ahead[:3]} rank below the errata: {hrefs[:10]}"


@pytest.mark.parametrize("where", ["page", "dialog"])
def test_the_search_icon_does_not_cover_the_query(server, browser, where):
    """The magnifier sits left of the text typed into the search box, on
    the search page and in the Ctrl+K dialog."""
    page = browser.new_page()
    if where == "page":
        page.goto(f"{server}/search.html", wait_until="networkidle")
        box = page.locator("main form.bd-search input[name=q]").first
    else:
        page.goto(f"{server}/chapters/02_sharding.html", wait_until="networkidle")
        _settle(page)  # on a busy machine Ctrl+K once came before the theme's deferred script bound it
        page.keyboard.press("Control+k")
        box = page.locator("#pst-search-dialog input[name=q]")
        box.wait_for(state="visible")
    box.fill("all-gather")
    form = box.locator("xpath=ancestor::form[1]")
    icon = form.locator("i, svg").first.bounding_box()
    text_left = page.evaluate(
        "el => el.getBoundingClientRect().left + parseFloat(getComputedStyle(el).paddingLeft)", box.element_handle()
    )
    icon_right = icon["x"] + icon["width"]
    assert icon_right <= text_left + 0.5, f"{where}: the icon ends at {icon_right}, the text starts at {text_left}"
    page.close()


@pytest.mark.parametrize("width,height", [(1280, 800), (390, 844)])
def test_one_way_to_search_and_no_empty_bar_above_the_page(server, browser, width, height):
    """One search control on screen, and the page starts at the top: on a
    desktop, sphinx-book-theme 1.3 drew pydata's header bar, 64 px holding
    nothing but a second search field, over the sidebar's own
    (executablebooks/sphinx-book-theme#986); a phone keeps its magnifier in
    the article's header. Ctrl+K still opens the search dialog."""
    page = _open_at(browser, f"{server}/chapters/03_data_parallel.html", width, height)
    shown = page.evaluate(
        "[...document.querySelectorAll('.search-button-field, .search-button__button')].filter(e => {"
        " const r = e.getBoundingClientRect(), s = getComputedStyle(e);"
        " return r.width > 0 && r.height > 0 && s.visibility !== 'hidden'; }).length"
    )
    assert shown == 1, f"{width} px: {shown} search controls on screen"
    header = page.evaluate("(document.querySelector('#pst-header') || {offsetHeight: 0}).offsetHeight")
    assert header == 0, f"{width} px: a {header} px header bar above the page"
    page.keyboard.press("Control+k")
    page.locator("#pst-search-dialog input[name=q]").wait_for(state="visible")
    page.close()


@pytest.mark.parametrize("width,height", [(1280, 800), (768, 1024), (390, 844)])
def test_stacked_tables_stay_inside_the_text_column(server, browser, width, height):
    """Every table.shardbook-stack (chapter 7's candidates, chapter 97's
    runs) fits the text column: on a desktop a long run name wraps between
    words instead of pushing the last columns under the contents sidebar
    (a label kept on one line made chapter 97's tables 59 and 134 px too
    wide at 1,280 px), and on a phone a card's title wraps inside the card.
    A label is never squeezed to a word per line either: it keeps 9em, and a
    caption spans the table (as cards, it was one word wide)."""
    for chapter, least in (("01_topology", 1), ("06_pipeline", 1), ("07_choosing_a_mesh", 3), ("97_validation", 5)):
        page = _open_at(browser, f"{server}/chapters/{chapter}.html", width, height)
        tables = page.evaluate(
            "[...document.querySelectorAll('table.shardbook-stack')].map(t => {"
            " const th = t.querySelector('tbody th'), column = t.parentElement.getBoundingClientRect();"
            " return {label: th.textContent, right: t.getBoundingClientRect().right, column: column.right,"
            " wide: t.scrollWidth, room: t.parentElement.clientWidth,"
            " labelWidth: th.getBoundingClientRect().width, em: parseFloat(getComputedStyle(th).fontSize),"
            " caption: t.caption ? t.caption.getBoundingClientRect().width : null}; })"
        )
        assert len(tables) >= least, chapter
        for t in tables:
            where = f"{chapter} at {width} px, the table led by {t['label']!r}"
            assert t["right"] <= t["column"] + 1 and t["wide"] <= t["room"] + 1, f"{where}: wider than its column ({t})"
            if width > 640:  # a table, not cards: the label column keeps its 9em
                assert t["labelWidth"] >= 9 * t["em"] - 1, f"{where}: label column squeezed ({t})"
            if t["caption"] is not None:  # a caption spans the table (as cards, a block under them)
                assert t["caption"] >= 0.8 * t["room"], f"{where}: caption squeezed ({t})"
        page.close()
