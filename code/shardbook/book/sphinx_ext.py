"""A small Sphinx extension for the book (listed in _config.yml).

- Each chapter gets a `.ipynb` download next to its `.md` source: the chapter
  converted by jupytext, as a reader's Jupyter would open it. The theme shows
  an ipynb button when the page context names `ipynb_source`.
- The theme's Font Awesome script (about 1.5 MB, every icon of the free
  set) is replaced, in the built site only, by a script of the few icons the
  pages use, with the same file name; the paths come from the theme's own
  copy of Font Awesome Free, so the icons look the same.
- Math is rendered to HTML at build time by KaTeX (sphinxcontrib-katex with
  `katex_prerender`, run by node): pages carry no math runtime, only KaTeX's
  stylesheet and the WOFF2 fonts it names, copied from the pinned npm package
  into `_static/katex/`. The book reads offline.
- The theme's large stylesheets (pydata-sphinx-theme's 397 kB of Bootstrap,
  sphinx-design's, myst-nb's, Sphinx's basic.css) keep only the rules whose
  selectors the pages and scripts name (PurgeCSS, pinned in package.json).
- sphinx-thebe's assets are left out of every page: the book's live mode is
  its own, and Thebe's config script was declared twice per page.
- A page with a table paints once its opening section is parsed, so that a
  table streaming in does not push the text below it around.
- The theme's icon fonts are cut down, in the built site only, to the glyphs
  its stylesheets and pages use (fontTools), under the same file names.
"""

import json
import re
import shutil
from pathlib import Path

from .. import BROWSER_MODULES, REPOSITORY_ROOT

KATEX_CSS = "katex/katex.min.css"
# pydata-sphinx-theme reads the colour mode from localStorage and, on a
# reader's first visit, finds "" and logs a console error; start from "auto".
MODE_JS = "shardbook-mode.js"
# It also marks the page as scripted (html.shardbook-js), so that the
# stylesheet can fold the answer dropdowns before sphinx-togglebutton does
# (which would otherwise move the page as it loads); without scripts they stay open.
MODE_SOURCE = (
    'if (!document.documentElement.dataset.mode) { document.documentElement.dataset.mode = "auto"; }\n'
    'document.documentElement.classList.add("shardbook-js");\n'
)
# The two KaTeX fonts nearly every formula uses, preloaded on pages with math:
# text set before they arrive would reflow when they do.
KATEX_PRELOAD = ("KaTeX_Main-Regular.woff2", "KaTeX_Math-Italic.woff2")


def _add_ipynb_download(app, pagename, templatename, context, doctree):
    if not pagename.startswith("chapters/") or context.get("page_source_suffix") != ".md":
        return
    source = Path(app.srcdir) / f"{pagename}.md"
    if not source.exists() or "jupytext:" not in source.read_text()[:400]:
        return
    import jupytext

    target = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    jupytext.write(jupytext.read(source), target, fmt="ipynb")
    context["ipynb_source"] = f"{pagename}.ipynb"


def node_package(srcdir, name, needed):
    """The folder of an npm package of package.json: in the project being
    built, else in the book's repository (a test's small Sphinx project)."""
    for root in (Path(srcdir), REPOSITORY_ROOT):
        folder = root / "node_modules" / name
        if (folder / needed).exists():
            return folder
    raise RuntimeError(f"{name} is missing from node_modules/: run `make book`, which installs package.json with npm")


def _katex_dist(srcdir):
    return node_package(srcdir, "katex", "dist/katex.min.js") / "dist"


def _start_katex_server_process(cls, rundir, timeout):
    """sphinxcontrib-katex 0.9.11 connects to its node server as soon as the
    socket file exists, which is before the server listens on it: on a busy
    machine the connection is refused, the build fails, and the node process,
    never stopped, keeps the build's output pipe open. The same start, with
    the connection retried until the timeout (as its TCP path does) and the
    process stopped if it never answers."""
    import socket
    import subprocess
    import time

    socket_path = rundir / "katex.sock"
    process = subprocess.Popen(
        cls.build_command(socket=socket_path), stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=rundir
    )
    deadline = time.monotonic() + timeout
    try:
        while True:
            if socket_path.is_socket():
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    sock.settimeout(max(deadline - time.monotonic(), 0.001))
                    sock.connect(str(socket_path))
                    sock.settimeout(None)
                    return process, sock
                except ConnectionRefusedError:
                    sock.close()  # bound, not listening yet
            if time.monotonic() > deadline:
                raise cls.timeout_error(timeout)
            time.sleep(0.001)
    except BaseException:
        process.kill()
        process.wait()
        raise


def _use_katex(app, config):
    """Math rendered at build time by the pinned npm KaTeX (the same version
    as the stylesheet the pages load)."""
    from sphinxcontrib import katex

    katex.KaTeXServer.start_server_process = classmethod(_start_katex_server_process)
    config.html_math_renderer = "katex"
    config.katex_prerender = True
    config.katex_css_path = KATEX_CSS
    config.katex_js_path = str(_katex_dist(app.srcdir) / "katex.min.js")


def _copy_katex_assets(app):
    dist = _katex_dist(app.srcdir)
    out = Path(app.outdir) / "_static" / "katex"
    _copy_if_changed(dist / "katex.min.css", out / "katex.min.css")
    for font in (dist / "fonts").glob("*.woff2"):  # every browser the theme supports reads WOFF2
        _copy_if_changed(font, out / "fonts" / font.name)


def _copy_if_changed(src, dst):
    """Copy a file, or every file of a folder, unless the copy is current."""
    if src.is_dir():
        for path in src.rglob("*"):
            if path.is_file():
                _copy_if_changed(path, dst / path.relative_to(src))
        return
    if dst.exists() and dst.stat().st_size == src.stat().st_size and dst.stat().st_mtime >= src.stat().st_mtime:
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)


_FIGURE_IMAGE = re.compile(
    r'(<figure\b[^>]*>\s*)(<img\b[^>]*?\bsrc="([^"]+)"[^>]*/?>)(?!\s*<a class="shardbook-full-size")'
)

# (pattern, replacement): fixes to the theme's and Sphinx's markup that axe-core
# reports as serious or critical, applied to every built page.
PAGE_FIXES = (
    # the search buttons are labelled "Search" but show "Search Ctrl + K": a
    # speech-input user says what they see, so the name comes from the text
    (re.compile(r'(<button class="btn search-button-field[^"]*"[^>]*?) aria-label="Search"'), r"\1"),
    # the same for the "Show code cell output" toggles, labelled "Toggle hidden content"
    (re.compile(r'<summary aria-label="Toggle hidden content">'), "<summary>"),
    # a role="list" whose children are citations and back-links is not a list
    (re.compile(r'<div role="list" class="citation-list">'), '<div class="citation-list">'),
    (re.compile(r' role="doc-biblioentry"'), ""),
    # the sidebar's title and search sit outside any landmark: name the sidebar
    (
        re.compile(r'(<div id="pst-primary-sidebar" class="bd-sidebar-primary bd-sidebar")(?! role=)'),
        r'\1 role="region" aria-label="Book navigation"',
    ),
)


_LIVE_DATA = re.compile(r'<script(?=[^>]*\bclass="shardbook-live")[^>]*>')
_ARTICLE_TITLE_END = re.compile(r'(<article class="bd-article".*?</h1>)', re.S)
LIVE_BOX = (
    '<div class="shardbook-live"><button type="button" class="shardbook-live-start" disabled>'
    "Make this page live</button></div>"
)


def _rewrite_pages(outdir):
    """Every page: under each figure's image, a link that opens it full size
    (HLO graphs and wide plots are unreadable on a phone at page width); the
    accessibility fixes of PAGE_FIXES; and, on a page with live values, the
    live button's box under the title, so that the page does not move when
    shardbook-live.js enables it."""
    for page in outdir.rglob("*.html"):
        if "_static" in page.parts:
            continue
        text = page.read_text()
        fixed = _FIGURE_IMAGE.sub(
            lambda m: f'{m.group(1)}{m.group(2)}<a class="shardbook-full-size" href="{m.group(3)}">Open full size</a>',
            text,
        )
        for pattern, replacement in PAGE_FIXES:
            fixed = pattern.sub(replacement, fixed)
        # attributes in any order: sphinx-codeautolink re-serializes a page's body
        if _LIVE_DATA.search(fixed) and 'div class="shardbook-live"' not in fixed:
            fixed = _ARTICLE_TITLE_END.sub(lambda m: m.group(1) + "\n" + LIVE_BOX, fixed, count=1)
        if fixed != text:
            page.write_text(fixed)


def _fingerprint_file(app):
    from .expected import FINGERPRINT_FILE

    return Path(app.outdir).parent / FINGERPRINT_FILE


def _share_html_visitors(app):
    """Sphinx gives a builder the node visitors registered under its own name
    if there are any, else those of its format: once sphinx-exercise registers
    its nodes for "singlehtml", that builder (make pdf) loses every other
    extension's HTML visitors (myst-nb's hidden cells). Give it those too."""
    handlers = app.registry.translation_handlers
    if "singlehtml" in handlers:
        for node_name, visitors in handlers.get("html", {}).items():
            handlers["singlehtml"].setdefault(node_name, visitors)


def _forget_fingerprint(app):
    """A build that starts is not yet a build that finished: drop the record
    so that a failed build leaves nothing that looks current. The record is
    the HTML site's: the single-page build of `make pdf` (another builder,
    another folder) leaves it alone, while the tests read the site."""
    if app.builder.name == "html":
        _fingerprint_file(app).unlink(missing_ok=True)


def _finish_site(app, exc):
    """After an HTML build: the colour-mode fix, the trimmed icons and icon
    fonts, the live mode's assets and KaTeX's stylesheet and fonts; then the fingerprint of the sources
    this build read (shardbook.book.expected.check_build compares it)."""
    if exc is not None or app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    (static / MODE_JS).write_text(MODE_SOURCE)
    icons = _icons_used(app.outdir)  # read the pages once for both
    _trim_icons(app, icons)
    _subset_icon_fonts(app, icons)
    _purge_stylesheets(app)
    _copy_live_assets(app)
    _copy_katex_assets(app)
    _rewrite_pages(Path(app.outdir))
    if app.statuscode == 0 and app.builder.name == "html":
        from .expected import source_fingerprint

        _fingerprint_file(app).write_text(source_fingerprint(app.srcdir) + "\n")


FA_PACKS = {"fab": "fab", "fa-brands": "fab", "far": "far", "fa-regular": "far", "fas": "fas", "fa-solid": "fas"}
ICON_CSS = (
    ".svg-inline--fa{display:inline-block;height:1em;overflow:visible;vertical-align:-.125em;box-sizing:content-box}"
    ".fa-lg{font-size:1.25em;line-height:.05em;vertical-align:-.075em}"
)


def _theme_fontawesome():
    import pydata_sphinx_theme

    return (
        Path(pydata_sphinx_theme.__file__).parent
        / "theme"
        / "pydata_sphinx_theme"
        / "static"
        / "scripts"
        / "fontawesome.js"
    )


def _icons_used(outdir):
    """Icons named by <i>/<span> class lists in the pages and by the theme's
    scripts (which add some icons, such as fa-xmark, at run time)."""
    used = set()
    sources = [p.read_text(errors="replace") for p in Path(outdir).rglob("*.html")]
    sources += [p.read_text(errors="replace") for p in (Path(outdir) / "_static" / "scripts").glob("*-theme.js")]
    for text in sources:
        found = re.findall(r'<(?:i|span) class="([^"]*\bfa-[^"]*)"', text) + re.findall(
            r'"((?:fa-solid|fa-brands|fa-regular|fas|fab|far) fa-[a-z0-9-]+)"', text
        )
        for classes in found:
            names = classes.split()
            pack = next((FA_PACKS[c] for c in names if c in FA_PACKS), "fas")
            for c in names:
                if c.startswith("fa-") and c not in FA_PACKS and c != "fa-lg":
                    used.add((pack, c[3:]))
    return used


def _icon_definitions(bundle, wanted):
    """{(pack, name): [width, height, path]} from the Font Awesome bundle: a
    definition belongs to the pack of the next d("pack", ...) call after it."""
    calls = [(m.start(), m.group(1)) for m in re.finditer(r'd\("(fa[brs])",', bundle)]
    found = {}
    for pack, name in wanted:
        pattern = re.compile(
            rf'(?:"{re.escape(name)}"|(?<![\w-]){re.escape(name)}):\[(\d+),(\d+),\[[^\]]*\],"[^"]*","([^"]+)"\]'
        )
        for m in pattern.finditer(bundle):
            owner = next((p for pos, p in calls if pos > m.start()), None)
            if owner == pack:
                found[f"{pack}:{name}"] = [int(m.group(1)), int(m.group(2)), m.group(3)]
                break
    return found


def _trim_icons(app, icons_used):
    bundle = _theme_fontawesome().read_text()
    icons = _icon_definitions(bundle, icons_used)
    template = (Path(__file__).parent / "fontawesome_icons.js").read_text()
    script = template.replace("__ICONS__", json.dumps(icons, separators=(",", ":"))).replace(
        "__ICON_CSS__", json.dumps(ICON_CSS)
    )
    scripts = Path(app.outdir) / "_static" / "scripts"
    (scripts / "fontawesome.js").write_text(script)
    (scripts / "fontawesome.js.map").unlink(missing_ok=True)


_ICON_CHAR = re.compile(r"\\(f[0-9a-f]{3}|e[0-9a-f]{3})|([\ue000-\uf8ff])", re.I)
_CSS_RULE = re.compile(r"([^{}]+)\{([^{}]*)\}")
_FA_CLASS_RULE = re.compile(r"^\.fa-([a-z0-9-]+)(?:::?(?:before|after))?$")


def _icon_codepoints(css, used_names):
    """Code points of the icon-font glyphs a stylesheet can show: those in
    its own rules (admonition and link icons, the theme's variables) and
    those of the `.fa-NAME` classes the pages use; the other two thousand
    `.fa-NAME` rules are left out."""
    points = set()
    for selectors, body in _CSS_RULE.findall(css):
        names = [_FA_CLASS_RULE.match(sel.strip()) for sel in selectors.split(",")]
        if all(names) and not any(m.group(1) in used_names for m in names):
            continue
        for escaped, literal in _ICON_CHAR.findall(body):
            points.add(int(escaped, 16) if escaped else ord(literal))
    return points


PURGED_STYLESHEETS = ("styles/pydata-sphinx-theme.css", "sphinx-design.min.css", "mystnb.*.css", "basic.css")


def _purge_stylesheets(app):
    """Keep the rules of the big stylesheets whose classes, ids and elements
    occur in the built pages or the scripts that change them; Sphinx copies
    the theme's originals at every build, so this never purges a purged file."""
    import subprocess
    import tempfile

    out = Path(app.outdir)
    static = out / "_static"
    sheets = [str(p) for pattern in PURGED_STYLESHEETS for p in static.glob(pattern)]
    purgecss = node_package(app.srcdir, "purgecss", "bin/purgecss.js") / "bin" / "purgecss.js"
    scripts = [str(p) for p in static.rglob("*.js") if not {"pyodide", "shardbook"} & set(p.relative_to(static).parts)]
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(__file__).parent / "purgecss.config.cjs"
        cmd = [
            "node",
            str(purgecss),
            "--config",
            str(config),
            "--css",
            *sheets,
            "--content",
            str(out / "**" / "*.html"),
            *scripts,
            "--output",
            tmp,
        ]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode:
            raise RuntimeError(f"PurgeCSS failed on the built stylesheets: {result.stderr.strip()[-500:]}")
        for sheet in sheets:
            purged = Path(tmp) / Path(sheet).name
            partial = Path(sheet + ".part")
            shutil.copyfile(purged, partial)
            partial.replace(sheet)


def _preload_math_fonts(app, pagename, templatename, context, doctree):
    from docutils import nodes

    if doctree is None or not any(
        True for _ in doctree.findall(lambda n: isinstance(n, (nodes.math, nodes.math_block)))
    ):
        return
    links = "".join(
        f'<link rel="preload" href="{context["pathto"]("_static/katex/fonts/" + font, 1)}" as="font" '
        'type="font/woff2" crossorigin>\n'
        for font in KATEX_PRELOAD
    )
    context["metatags"] = context.get("metatags", "") + links


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


THEBE_ASSETS = ("sphinx-thebe.js", "sphinx-thebe.css")


def _drop_thebe(app, pagename, templatename, context, doctree):
    """sphinx-thebe (loaded by Jupyter Book whatever the settings) adds a
    config script, declared twice, and its own files to every page."""
    for key in ("script_files", "css_files"):
        if key in context:
            context[key] = [
                asset
                for asset in context[key]
                if str(getattr(asset, "filename", asset) or "").split("?")[0].rsplit("/", 1)[-1] not in THEBE_ASSETS
                and "THEBE_JS_URL" not in str(getattr(asset, "attributes", {}).get("body", ""))
            ]


def _subset_icon_fonts(app, icons_used):
    """Replace the theme's Font Awesome webfonts (157 kB and 118 kB) by
    subsets holding only the glyphs this site can show, same file names.
    Runs on the theme's originals each build, so it never subsets a subset."""
    import pydata_sphinx_theme
    from fontTools import subset
    from fontTools.ttLib import TTFont

    theme_static = Path(pydata_sphinx_theme.__file__).parent / "theme" / "pydata_sphinx_theme" / "static"
    css = (theme_static / "styles" / "pydata-sphinx-theme.css").read_text()
    used_names = {name for _, name in icons_used}
    points = _icon_codepoints(css, used_names)
    fonts_out = Path(app.outdir) / "_static" / "vendor" / "fontawesome" / "webfonts"
    for original in sorted((theme_static / "vendor" / "fontawesome" / "webfonts").glob("*.woff2")):
        target = fonts_out / original.name
        if not target.exists():
            continue
        font = TTFont(original)
        present = set(font.getBestCmap()) & points
        options = subset.Options()
        options.flavor = "woff2"
        options.layout_features = ["*"]
        subsetter = subset.Subsetter(options)
        subsetter.populate(unicodes=sorted(present) or [0x20])
        subsetter.subset(font)
        partial = target.with_suffix(".woff2.part")
        font.save(partial)
        partial.replace(target)


REPOSITORY_ENV = "SHARDBOOK_REPOSITORY_URL"


def repository_url(srcdir):
    """The book's repository, from one setting: the SHARDBOOK_REPOSITORY_URL
    environment variable if set (the publishing workflow sets it to the
    repository it runs in), else `repository: url:` in _config.yml."""
    import os
    import re

    if os.environ.get(REPOSITORY_ENV):
        return os.environ[REPOSITORY_ENV]
    config = Path(srcdir) / "_config.yml"
    if not config.exists():  # a plain Sphinx project, not the book
        return None
    found = re.search(r"^repository:\s*\n\s+url:\s*(\S+)", config.read_text(), re.M)
    return found.group(1) if found else None


def _use_repository_url(app, config):
    url = repository_url(app.srcdir)
    if url:
        config.html_theme_options = dict(config.html_theme_options, repository_url=url)


# --- live pages -------------------------------------------------------------

STATIC = Path(__file__).parent / "static"
# The modules the browser loads: the cost-model layer and the ledger
# (shardbook.BROWSER_MODULES, derived from shardbook.LAYERS).
LIVE_MODULES = BROWSER_MODULES

PYODIDE_FILES = (
    "pyodide.js",
    "pyodide.asm.mjs",
    "pyodide.asm.wasm",
    "python_stdlib.zip",
    "pyodide-lock.json",
    "package.json",
)


def _keyed_glue_role():
    """{glue:text} spans carry the glued key as a class (glue-key-NAME) so the
    live mode can find the numbers it recomputes."""
    from myst_nb.ext.glue.domain import NbGlueDomain
    from myst_nb.ext.glue.roles import PasteTextRole
    from sphinx.errors import ExtensionError

    class KeyedPasteTextRole(PasteTextRole):
        def run(self):
            result, messages = super().run()
            key = self.text.split("::")[-1].split(":")[0]  # [doc::]key[:format]
            if not result and "::" not in self.text:
                # myst-nb leaves an empty span and no warning the build reports:
                # a sentence would silently lose its number, so stop the build
                source = self.source or "this page"
                raise ExtensionError(
                    f"{source}:{self.line}: glue key {key!r} is used in prose but no cell of that page glues it "
                    "(ledger.show / ledger.live)"
                )
            for node in result:
                node["classes"].append(f"glue-key-{key}")
            return result, messages

    NbGlueDomain.roles = dict(NbGlueDomain.roles, text=KeyedPasteTextRole())


def _copy_live_assets(app):
    out = Path(app.outdir) / "_static"
    package = Path(__file__).parent.parent  # the shardbook package
    _copy_if_changed(STATIC, out)
    for name in LIVE_MODULES:
        _copy_if_changed(package / f"{name}.py", out / "shardbook" / f"{name}.py")
    (out / "shardbook" / "manifest.json").write_text(json.dumps([f"{n}.py" for n in LIVE_MODULES]))
    pyodide = node_package(app.srcdir, "pyodide", "pyodide.js")
    for name in PYODIDE_FILES:
        _copy_if_changed(pyodide / name, out / "pyodide" / name)
    sizes = {name: (pyodide / name).stat().st_size for name in PYODIDE_FILES}
    (out / "pyodide" / "sizes.json").write_text(json.dumps(sizes))


def _cache_pybtex_plugin_lookups():
    """sphinxcontrib-bibtex asks pybtex for its style plugins again for every
    citation, and pybtex answers each time by scanning the entry points of
    every installed distribution (25 ms here, with about 170): some 180
    lookups cost a build seconds. The installed plugins do not change while
    a build runs, so the lookup is cached: a private function of pybtex 0.26,
    which `find_plugin` calls by its module-level name (if a later pybtex
    drops it, the build is only slower; a test notices)."""
    import functools

    import pybtex.plugin

    lookup = getattr(pybtex.plugin, "_load_entry_point", None)
    if lookup is not None and not hasattr(lookup, "cache_info"):
        pybtex.plugin._load_entry_point = functools.cache(lookup)


def setup(app):
    _cache_pybtex_plugin_lookups()
    app.setup_extension("sphinxcontrib.katex")
    app.setup_extension("shardbook.book.reference")  # autodoc, and no public name without a docstring
    app.setup_extension("shardbook.book.glossary")
    _keyed_glue_role()
    app.add_js_file("shardbook-live.js", defer="defer")
    app.add_css_file("shardbook.css")  # live panel, full-size links, narrow screens

    app.connect("config-inited", _use_katex)
    app.connect("config-inited", _use_repository_url)
    app.connect("builder-inited", _forget_fingerprint)
    app.connect("builder-inited", _share_html_visitors)
    app.connect("build-finished", _finish_site)
    app.add_js_file(MODE_JS, priority=900)
    # before sphinx-book-theme builds its header buttons (priority 501)
    app.connect("html-page-context", _add_ipynb_download, priority=500)
    app.connect("html-page-context", _drop_thebe)
    app.connect("html-page-context", _preload_math_fonts)
    app.connect("html-page-context", _paint_after_the_first_section)
    app.connect("html-page-context", _describe_page)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
