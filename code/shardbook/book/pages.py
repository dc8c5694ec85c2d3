"""What each built page carries beyond what Sphinx and the theme write:

- each chapter's `.ipynb` download next to its `.md` source: the chapter
  converted by jupytext, as a reader's Jupyter would open it (the theme shows
  an ipynb button when the page context names `ipynb_source`);
- the colour-mode script, a description for search engines;
- each SVG figure in a frame that keeps it wide enough for its text to be
  at least 10 px and scrolls sideways where the column is narrower (a
  phone; the compiler's graphs everywhere);
- under each figure, a link to it full size; the accessibility fixes of
  PAGE_FIXES; on a live page, the live button's box under the title;
- on a page with a table, the first paint held until its opening section is
  parsed, so that a table streaming in does not push the text below it around.
"""

import math
import re
from pathlib import Path

# A figure wider than its column at a size that keeps its text readable
# scrolls sideways inside a frame (see _framed; a very tall one, a compiler
# graph wider than the desktop's column, also downwards, inside a window at
# most 80 % of the screen high); so do a table and a code block wider than
# the column (a phone; the planner's output everywhere), each put in the same
# frame when the page is parsed (the frame has no margin, border or padding:
# wrapping moves nothing).
# The frame is marked when it scrolls (a cue that takes no room, so nothing
# moves) and, only then, what scrolls joins the tab order so that a keyboard
# scrolls it (a table's or a code block's tab stop is otherwise the theme's);
# the edge's shade goes once the reader has scrolled to its end.
FRAME_SOURCE = (
    'addEventListener("DOMContentLoaded", () => {\n'
    "  // a frame's sizes are read, then its marks written: for many frames at once, every\n"
    "  // read first (a read after a write would lay the page out again, once per frame)\n"
    "  const measure = f => [f.scrollWidth - f.clientWidth, f.scrollHeight - f.clientHeight, f.scrollLeft];\n"
    "  const apply = (f, [over, down, left]) => {\n"
    '    const c = f.parentNode.classList, figure = !c.contains("shardbook-scroll-frame");\n'
    '    c.toggle("shardbook-wide", over > 1);\n'
    '    c.toggle("shardbook-tall", figure && down > 1);\n'
    '    c.toggle("shardbook-scrolled", left >= over - 1);\n'
    '    if (over > 0 || down > 0) { f.tabIndex = 0; } else if (figure) { f.removeAttribute("tabindex"); }\n'
    "  };\n"
    "  const mark = f => apply(f, measure(f));\n"
    "  // a panned graph opens on its middle, where graphviz centres the graph's first nodes\n"
    "  // (when the observer first measures it, after the page's own layout: centred at load,\n"
    "  // its read would force that layout into this script)\n"
    '  const uncentred = new Set(document.querySelectorAll(".shardbook-figure-pan > .shardbook-figure-scroll"));\n'
    "  // a frame's width follows the column, which the theme's own styles and scripts may still change\n"
    "  const resized = new ResizeObserver(entries => {\n"
    "    const sizes = entries.map(e => measure(e.target));\n"
    "    entries.forEach((e, i) => {\n"
    "      const f = e.target;\n"
    "      if (uncentred.delete(f)) { f.scrollLeft = sizes[i][2] = sizes[i][0] / 2; }\n"
    "      apply(f, sizes[i]);\n"
    "    });\n"
    "  });\n"
    '  const watch = f => { resized.observe(f); f.addEventListener("scroll", () => mark(f), {passive: true}); };\n'
    '  document.querySelectorAll(".shardbook-figure-scroll").forEach(watch);\n'
    "  // each table's and code block's scrolling box (itself or the nearest box around it that clips)\n"
    "  // goes in a frame when it comes within a screen of the window: finding the box reads styles,\n"
    "  // which for a whole chapter at once held a phone's main thread as the page loaded (and\n"
    "  // styled the sections content-visibility leaves for later); in each batch, every box is\n"
    "  // found before any is moved (a style read after a move restyles the page again)\n"
    "  const near = new IntersectionObserver(entries => {\n"
    "    const boxes = [];\n"
    "    entries.forEach(entry => {\n"
    "      if (!entry.isIntersecting) return;\n"
    "      near.unobserve(entry.target);\n"
    "      let c = entry.target;\n"
    '      while (c.tagName !== "MAIN" && getComputedStyle(c).overflowX === "visible") c = c.parentElement;\n'
    '      if (c.tagName === "MAIN" || c.closest(".shardbook-figure-frame") || boxes.includes(c)) return;\n'
    "      boxes.push(c);\n"
    "    });\n"
    "    const framed = boxes.filter(c => !boxes.some(o => o !== c && o.contains(c)));\n"
    "    framed.forEach(c => {\n"
    '      const frame = document.createElement("div");\n'
    '      frame.className = "shardbook-figure-frame shardbook-scroll-frame";\n'
    '      c.before(frame); frame.append(c); c.classList.add("shardbook-figure-scroll");\n'
    "    });\n"
    "    const sizes = framed.map(measure);\n"
    "    framed.forEach((f, i) => { apply(f, sizes[i]); watch(f); });\n"
    '  }, { rootMargin: "100% 0px" });\n'
    '  document.querySelectorAll("main table, main pre").forEach(e => near.observe(e));\n'
    "  // for a table a script draws later (the planner's result): put it in a frame and watch it\n"
    "  window.shardbookFrame = c => {\n"
    '    const frame = document.createElement("div");\n'
    '    frame.className = "shardbook-figure-frame shardbook-scroll-frame";\n'
    '    c.classList.add("shardbook-figure-scroll"); frame.append(c); watch(c); return frame;\n'
    "  };\n"
    "});\n"
)


# On a phone, a chapter's sections below the first screen are not styled or
# laid out for the first paint (content-visibility: auto while html has
# .shardbook-defer, shardbook.css): laying out a whole chapter at once held a
# phone's main thread 0.3-0.6 s as it loaded (Lighthouse, chapters 2-4). After
# the first paint they are laid out one at a time, each in an idle moment of
# its own, outer sections before the ones inside them; when all are, the page
# is as it would have been (html[data-laid-out]; what measures the page, such
# as an accessibility checker reading colours behind text, waits for it). A
# page opened at a place in it (a #fragment, back, reload) is laid out whole
# at once, as before, so that the place is found exactly.
DEFER_SOURCE = (
    "(function (html) {\n"
    '  var nav = window.performance && performance.getEntriesByType && performance.getEntriesByType("navigation")[0];\n'
    '  if (!matchMedia("(max-width: 767.98px)").matches || location.hash || (nav && nav.type !== "navigate")\n'
    '      || !(window.CSS && CSS.supports("content-visibility", "auto"))) { html.dataset.laidOut = ""; return; }\n'
    '  html.classList.add("shardbook-defer");\n'
    "  var idle = window.requestIdleCallback || function (f) { return setTimeout(f, 1); };\n"
    "  var sections = [];\n"
    '  var whole = function () { sections = []; html.classList.remove("shardbook-defer"); html.dataset.laidOut = ""; };\n'
    "  // a link to a place in the page lays it out whole before the browser scrolls there: a section\n"
    "  // skipped above the place would otherwise move it when laid out (Safari anchors no scroll)\n"
    '  addEventListener("click", function (e) {\n'
    "    var a = e.target.closest && e.target.closest(\"a[href*='#']\");\n"
    '    if (a && a.pathname === location.pathname && !("laidOut" in html.dataset)) { whole(); }\n'
    "  }, true);\n"
    '  addEventListener("DOMContentLoaded", function () {\n'
    '    sections = [].slice.call(document.querySelectorAll(".bd-article section > section"));\n'
    "    var next = function () {\n"
    "      var s = sections.shift();\n"
    "      if (!s) { whole(); return; }\n"
    '      s.classList.add("shardbook-laid-out");\n'
    "      s.offsetHeight;  // its layout now, in this idle moment, on its own\n"
    "      idle(next, { timeout: 1000 });\n"
    "    };\n"
    "    requestAnimationFrame(function () { setTimeout(function () { idle(next, { timeout: 1000 }); }); });\n"
    "  });\n"
    "})(document.documentElement);\n"
)


# pydata-sphinx-theme reads the colour mode from localStorage and, on a
# reader's first visit, finds "" and logs a console error; start from "auto".
# The theme too is set here, before the body is parsed, as the theme's script
# sets it at DOMContentLoaded (its setMode: the stored mode, or "auto" and the
# system's scheme): left empty, the first paint has no colour scheme and that
# script then restyles the whole page (on chapter 4, 0.2 s of a phone's main
# thread, which Lighthouse counts as blocking).
MODE_JS = "shardbook-mode.js"
# It also marks the page as scripted (html.shardbook-js), so that the
# stylesheet can fold the answer dropdowns before sphinx-togglebutton does
# (which would otherwise move the page as it loads); without scripts they stay open.
# And it mends the sidebar drawers: pydata-sphinx-theme (and sphinx-book-theme's
# wide-screen toggle) bind their handlers to the *first* .primary-toggle and
# .secondary-toggle in the page, pydata's header icons, which sphinx-book-theme
# hides; the buttons a reader sees got no handler, and on a phone or a tablet
# neither the chapter list nor the page contents opened. A click on any other
# copy of the button is passed to the first one, whose handlers open the drawer.
MODE_SOURCE = (
    "(function (d) {\n"
    '  if (d.mode !== "light" && d.mode !== "dark") { d.mode = "auto"; }\n'
    '  d.theme = d.mode !== "auto" ? d.mode : matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";\n'
    "})(document.documentElement.dataset);\n"
    'document.documentElement.classList.add("shardbook-js");\n'
    'document.addEventListener("DOMContentLoaded", function () {\n'
    '  [".primary-toggle", ".secondary-toggle"].forEach(function (selector) {\n'
    "    var all = document.querySelectorAll(selector);\n"
    "    [].slice.call(all, 1).forEach(function (button) {\n"
    '      button.addEventListener("click", function (event) {\n'
    "        event.preventDefault(); event.stopPropagation(); all[0].click();\n"
    "      });\n"
    "    });\n"
    "  });\n"
    "});\n"
    # on a phone, the theme's check of which blocks scroll (theme_assets.route_tab_stops)
    # reads each block's size when it first comes near the screen, not all at load
    'if (window.matchMedia("(max-width: 767.98px)").matches && "IntersectionObserver" in window) {\n'
    "  var shardbookTabStops = new IntersectionObserver(function (entries) {\n"
    "    entries.forEach(function (entry) {\n"
    "      if (!entry.isIntersecting) { return; }\n"
    "      var e = entry.target;\n"
    "      e.tabIndex = e.scrollWidth > e.clientWidth || e.scrollHeight > e.clientHeight ? 0 : -1;\n"
    "    });\n"
    '  }, { rootMargin: "200px 0px" });\n'
    "  window.shardbookTabStop = function (e) { shardbookTabStops.observe(e); };\n"
    "}\n" + DEFER_SOURCE + FRAME_SOURCE
)


def _add_ipynb_download(app, pagename, templatename, context, doctree):
    if not pagename.startswith("chapters/") or context.get("page_source_suffix") != ".md":
        return
    source = Path(app.srcdir) / f"{pagename}.md"
    if not source.exists() or "jupytext:" not in source.read_text()[:400]:
        return
    write_notebook(source, Path(app.outdir) / "_sources" / f"{pagename}.ipynb")
    context["ipynb_source"] = f"{pagename}.ipynb"


def write_notebook(source, target):
    """Chapter `source` (MyST with a jupytext header) as the `.ipynb` a reader
    downloads from its page: jupytext's conversion, unexecuted
    (tests/test_notebook_download.py runs one in a fresh environment)."""
    import jupytext

    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    jupytext.write(jupytext.read(source), target, fmt="ipynb")


_FIGURE_IMAGE = re.compile(
    r'(<figure\b[^>]*>\s*)(<img\b[^>]*?\bsrc="([^"]+)"[^>]*/?>)(?!\s*<a class="shardbook-full-size")'
)

_FIGURE_IMAGE_ANY = re.compile(r'(<figure\b[^>]*>\s*)(<img\b[^>]*?\bsrc="([^"]+)"[^>]*/?>)')

# (pattern, replacement): fixes to the theme's and Sphinx's markup that axe-core
# reports as serious or critical, applied to every built page.
PAGE_FIXES = (
    # the sidebar's toggle of an entry with pages under it (the package reference's)
    # is a <summary> holding only an icon: axe-core's summary-name wants it named
    (
        re.compile(r'<summary><span class="toctree-toggle" role="presentation">'),
        '<summary aria-label="Pages under this entry"><span class="toctree-toggle" role="presentation">',
    ),
    # the search buttons are labelled "Search" but show "Search Ctrl + K": a
    # speech-input user says what they see, so the name comes from the text
    (re.compile(r'(<button class="btn search-button-field[^"]*"[^>]*?) aria-label="Search"'), r"\1"),
    # the same for the "Show code cell output" toggles, labelled "Toggle hidden content"
    (re.compile(r'<summary aria-label="Toggle hidden content">'), "<summary>"),
    # a role="list" whose children are citations and back-links is not a list
    # (docutils writes the two attributes in either order)
    (
        re.compile(r'<div (?:role="list" class="citation-list"|class="citation-list" role="list")>'),
        '<div class="citation-list">',
    ),
    (re.compile(r' role="doc-biblioentry"'), ""),
    # the sidebar's title and search sit outside any landmark: name the sidebar
    (
        re.compile(r'(<div id="pst-primary-sidebar" class="bd-sidebar-primary bd-sidebar")(?! role=)'),
        r'\1 role="region" aria-label="Book navigation"',
    ),
)


# pydata-sphinx-theme loads Sphinx's search tools and the whole search index
# (about 100 kB) on every page, render-blocking, for a search-as-you-type
# dialog this book does not turn on: its Ctrl+K dialog sends the query to
# search.html, which loads them itself. Every other page drops them.
_SEARCH_ASSETS = re.compile(
    r'\s*<script src="[^"]*(?:_static/searchtools\.js|_static/language_data\.js|searchindex\.js)"></script>'
)
# Scripts in <head> that block the first paint and need not: deferred, they
# still run in order, before DOMContentLoaded, which is when they act.
_DEFERRABLE = (
    "documentation_options.js",
    "doctools.js",
    "sphinx_highlight.js",
    "clipboard.min.js",
    "copybutton.js",
    "sphinx-book-theme.js",
    "togglebutton.js",
    "design-tabs.js",
)
_BLOCKING_SCRIPT = re.compile(
    r'<script((?:(?! defer| async)[^>])*) src="([^"]*/(?:'
    + "|".join(re.escape(n) for n in _DEFERRABLE)
    + r')(?:\?[^"]*)?)"'
)


def lighter_head(text, pagename):
    """A page's HTML without the search assets it does not use (every page
    but search.html) and with its deferrable head scripts deferred."""
    if pagename == "search.html":
        return text
    head_end = text.find("</head>")
    if head_end < 0:
        return text
    head = _SEARCH_ASSETS.sub("", text[:head_end])
    head = _BLOCKING_SCRIPT.sub(r'<script\1 defer src="\2"', head)
    return head + text[head_end:]


# An object's signature in the package reference wraps each name, bracket and default value in
# a <span class="pre"> of its own (about 100 kB of the page's markup, to no effect: the site's
# stylesheet lets a signature wrap anyway). Only inside a signature's <dt>, where the words carry
# no other markup that needs the wrapper.
_SIGNATURE = re.compile(r'(<dt class="sig sig-object[^>]*>)(.*?)(</dt>)', re.S)
_PRE_SPAN = re.compile(r'<span class="pre">([^<]*)</span>')


def plain_signatures(text):
    """A page's HTML with the <span class="pre"> wrappers inside every object
    signature (<dt class="sig sig-object ...">) removed, their text kept."""
    return _SIGNATURE.sub(lambda m: m.group(1) + _PRE_SPAN.sub(r"\1", m.group(2)) + m.group(3), text)


_LIVE_DATA = re.compile(r'<script(?=[^>]*\bclass="shardbook-live")[^>]*>')
_ARTICLE_TITLE_END = re.compile(r'(<article class="bd-article".*?</h1>)', re.S)
LIVE_BOX = (
    '<div class="shardbook-live"><button type="button" class="shardbook-live-start" disabled>'
    "Make this page live</button></div>"
)


STILL_MEDIA = "(prefers-reduced-motion: reduce), print"


def _still_where_asked(image, target, src):
    """An animated SVG figure (shardbook.book.svg) inside a <picture> whose
    source, for a reader who asks for no motion and for print, is its final
    frame written beside it (NAME.still.svg): an SVG loaded as an image does
    not see the page's media queries, so it cannot stop itself."""
    from . import svg

    if not src.endswith(".svg") or not target.is_file():
        return image
    text = target.read_text()
    if not svg.is_animated(text):
        return image
    still = target.with_name(target.stem + ".still.svg")
    still.write_text(svg.final_frame(text))
    still_src = src[: -len(".svg")] + ".still.svg"
    return f'<picture><source media="{STILL_MEDIA}" srcset="{still_src}" type="image/svg+xml">{image}</picture>'


MIN_TEXT_PX = 10  # issue 32: text in every figure at least 10 px as a reader sees it

_FRAMED = re.compile(
    r'(<figure\b[^>]*>\s*)((?:<picture>(?:(?!</picture>).)*</picture>)|<img\b[^>]*?\bsrc="[^"]+"[^>]*/?>)', re.S
)


def svg_size_px(svg_text):
    """(width, height) in CSS px at which an SVG draws itself (its width and
    height attributes, px or pt), or None when it does not say."""
    import xml.etree.ElementTree as ET

    root = ET.fromstring(svg_text)
    units = {"pt": 4 / 3, "px": 1.0, "": 1.0}
    size = []
    for name in ("width", "height"):
        match = re.fullmatch(r"([0-9.]+)(pt|px|)", (root.get(name) or "").strip())
        if not match:
            return None
        size.append(float(match.group(1)) * units[match.group(2)])
    return tuple(size)


def readable_width_px(svg_text, min_text_px=MIN_TEXT_PX):
    """The narrowest width (CSS px) at which an SVG's smallest text is
    `min_text_px`: its own width scaled by (min_text_px / its smallest text
    at its own width). None when it has no sized text or no size."""
    from . import svg

    size = svg_size_px(svg_text)
    smallest = svg.min_font_px(svg_text, column_px=float("inf"))
    if size is None or not smallest:
        return None
    return size[0] * min_text_px / smallest


def _framed(m, page):
    """A figure's image (or <picture>) inside a frame that keeps it at least
    as wide as its text needs to stay readable (readable_width_px) and, where
    the column is narrower, scrolls sideways (shardbook.css, FRAME_SOURCE):
    a phone gets the same drawing, never text under MIN_TEXT_PX. The image
    gets its width and height, so the page keeps its place before it loads."""
    from . import svg

    image = m.group(2)
    src = re.search(r'<img\b[^>]*?\bsrc="([^"]+)"', image).group(1)
    target = page.parent / src
    if not src.endswith(".svg") or not target.is_file():
        return m.group(0)
    text = target.read_text()
    size, need = svg_size_px(text), readable_width_px(text)
    if size is None or need is None:
        return m.group(0)
    if " width=" not in image.split("<img", 1)[1].split(">", 1)[0]:
        image = re.sub(r"<img\b", f'<img width="{round(size[0])}" height="{round(size[1])}"', image, count=1)
    alt = re.search(r'<img\b[^>]*?\balt="([^"]*)"', image)
    label = (alt.group(1) if alt else "Figure") or "Figure"
    # wider than the desktop's column: panned in a window (shardbook.css), not laid along the page
    pan = " shardbook-figure-pan" if need > svg.TEXT_COLUMN_PX else ""
    return (
        f'{m.group(1)}<div class="shardbook-figure-frame{pan}"><div class="shardbook-figure-scroll" role="group" '
        f'aria-label="{label}" style="--shardbook-min-width:{math.ceil(need)}px">{image}</div></div>'
    )


def rewrite_pages(outdir):
    """Every page: under each figure's image, a link that opens it full size
    (HLO graphs and wide plots are unreadable on a phone at page width), and
    every figure after the first loaded lazily (`loading="lazy"`), an
    animated one with its final frame for no motion and print; the
    accessibility fixes of PAGE_FIXES; and, on a page with live values, the
    live button's box under the title, so that the page does not move when
    shardbook-live.js enables it. Also the stylesheet without its comments
    (bare_stylesheet)."""
    bare_stylesheet(outdir)
    for page in outdir.rglob("*.html"):
        if "_static" in page.parts:
            continue
        text = page.read_text()
        seen = []

        def full_size(m, seen=seen, page=page):
            # figures after a page's first load when the reader scrolls to them (a page
            # has up to ten; the first may be on the first screen and stays eager)
            image = m.group(2)
            if seen and " loading=" not in image:
                image = image.replace("<img ", '<img loading="lazy" decoding="async" ', 1)
            seen.append(m.group(3))
            return f'{m.group(1)}{image}<a class="shardbook-full-size" href="{m.group(3)}">Open full size</a>'

        fixed = _FIGURE_IMAGE.sub(full_size, text)
        # separately, so that a page written before (its links in place) gets it too;
        # a wrapped image no longer follows its <figure> directly, so this runs once
        fixed = _FIGURE_IMAGE_ANY.sub(
            lambda m, page=page: m.group(1) + _still_where_asked(m.group(2), page.parent / m.group(3), m.group(3)),
            fixed,
        )
        # and last, each SVG figure in its frame (a framed one is no longer
        # right after its <figure>, so a second pass leaves it alone)
        fixed = _FRAMED.sub(lambda m, page=page: _framed(m, page), fixed)
        for pattern, replacement in PAGE_FIXES:
            fixed = pattern.sub(replacement, fixed)
        fixed = lighter_head(fixed, page.name)
        fixed = plain_signatures(fixed)
        # attributes in any order: sphinx-codeautolink re-serializes a page's body
        if _LIVE_DATA.search(fixed) and 'div class="shardbook-live"' not in fixed:
            fixed = _ARTICLE_TITLE_END.sub(lambda m: m.group(1) + "\n" + LIVE_BOX, fixed, count=1)
        if fixed != text:
            page.write_text(fixed)


def write_mode_script(outdir):
    """The colour-mode script (MODE_SOURCE) into the site's _static folder."""
    (Path(outdir) / "_static" / MODE_JS).write_text(MODE_SOURCE)


def bare_stylesheet(outdir):
    """The site's stylesheet in _static without its comments (every first
    visit loads it; its source keeps them). After live_assets has copied the
    static files, which rewrites it."""
    sheet = Path(outdir) / "_static" / "shardbook.css"
    if sheet.exists():
        text = sheet.read_text()
        bare = strip_css_comments(text)
        if bare != text:
            sheet.write_text(bare)


_CSS_COMMENT = re.compile(r"/\*.*?\*/\s*", re.S)


def strip_css_comments(css):
    """`css` without its /* comments */ (none sits inside a string in the
    site's stylesheet: a test checks that the rules are unchanged)."""
    return _CSS_COMMENT.sub("", css)


# While a long page streams in, a table near its top is painted before its last
# rows arrive; the browser widens its columns as they come and the text below
# jumps (layout shift, seen on the tablet width under load). The page holds its
# first paint until the opening section is parsed (the HTML standard's
# render-blocking `expect` link); the rest still streams.
FIRST_SECTION_END_ID = "shardbook-first-section-end"


def end_of_first_section(body):
    """Index in a page's `body` HTML just after the first section nested in
    the page's own (the intro and its first `##`), or the end of the body."""
    opening = [m.start() for m in re.finditer(r"<section\b", body)]
    if len(opening) < 2:
        return len(body)
    depth = 0
    for tag in re.finditer(r"<section\b|</section>", body[opening[1] :]):
        depth += 1 if tag.group() != "</section>" else -1
        if depth == 0:
            return opening[1] + tag.end()
    return len(body)


def _paint_after_the_first_section(app, pagename, templatename, context, doctree):
    body = context.get("body")
    if doctree is None or not body or "<table" not in body:
        return
    at = end_of_first_section(body)
    context["body"] = body[:at] + f'<span id="{FIRST_SECTION_END_ID}"></span>' + body[at:]
    context["metatags"] = (
        context.get("metatags", "") + f'<link rel="expect" href="#{FIRST_SECTION_END_ID}" blocking="render">\n'
    )


DESCRIPTION_CHARS = 160


def page_description(doctree, limit=DESCRIPTION_CHARS):
    """The page's first paragraph as plain text, cut at a word boundary to
    at most `limit` characters: the summary search engines show."""
    from docutils import nodes

    for paragraph in doctree.findall(nodes.paragraph):
        text = " ".join(paragraph.astext().split())
        if len(text) >= 40:
            break
    else:
        return None
    if len(text) <= limit:
        return text
    return text[: limit - 1].rsplit(" ", 1)[0].rstrip(",;:") + "…"


def _describe_page(app, pagename, templatename, context, doctree):
    import html

    description = page_description(doctree) if doctree is not None else None
    if description:
        context["metatags"] = (
            context.get("metatags", "") + f'<meta name="description" content="{html.escape(description)}">\n'
        )


def setup(app):
    app.add_js_file(MODE_JS, priority=900)
    # before sphinx-book-theme builds its header buttons (priority 501)
    app.connect("html-page-context", _add_ipynb_download, priority=500)
    app.connect("html-page-context", _paint_after_the_first_section)
    app.connect("html-page-context", _describe_page)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
