"""The theme's heavy assets cut down, in the built site only, to what the
pages use, under the same file names:

- Font Awesome's script (about 1.5 MB, every icon of the free set) becomes a
  script of the few icons the pages use, drawn from the theme's own copy, so
  the icons look the same; its icon fonts keep only the glyphs the
  stylesheets and pages can show (fontTools);
- the big stylesheets (pydata-sphinx-theme's 397 kB of Bootstrap,
  sphinx-design's, myst-nb's, Sphinx's basic.css) keep only the rules whose
  selectors the pages and scripts name (PurgeCSS, pinned in package.json);
- sphinx-thebe's assets are left out of every page: the book's live mode is
  its own, and Thebe's config script was declared twice per page.
"""

import json
import os
import re
import shutil
from pathlib import Path

from . import transaction
from .node_files import node_package

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


def icons_used(outdir):
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


def trim_icons(app, icons_used):
    """Replace the theme's Font Awesome script, in the built site, by one that
    draws only `icons_used` (from :func:`icons_used`), same file name."""
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


def subset_icon_fonts(app, icons_used):
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
        # the original's head.modified is kept (fontTools would stamp the time
        # of saving), so a rebuild writes the same bytes
        font = TTFont(original, recalcTimestamp=False)
        present = set(font.getBestCmap()) & points
        options = subset.Options()
        options.flavor = "woff2"
        options.layout_features = ["*"]
        subsetter = subset.Subsetter(options)
        subsetter.populate(unicodes=sorted(present) or [0x20])
        subsetter.subset(font)
        partial = target.with_suffix(".woff2.part")
        font.save(partial)
        stat = original.stat()
        os.utime(partial, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the same Last-Modified
        partial.replace(target)


PURGED_STYLESHEETS = ("styles/pydata-sphinx-theme.css", "sphinx-design.min.css", "mystnb.*.css", "basic.css")


def purge_stylesheets(app):
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


# pydata-sphinx-theme makes every code block, output and table that scrolls
# focusable (tabIndex 0) by reading the size of each one when the page loads
# and whenever the page changes: on a phone that lays out the whole chapter,
# the sections content-visibility leaves for later included (Lighthouse: the
# theme's script held the main thread 300 ms on chapter 7). The check is
# routed through window.shardbookTabStop where the page defines it (pages.py:
# on a phone, each element is checked when it first comes near the screen).
THEME_TAB_STOP = "forEach(e=>{e.tabIndex=e.scrollWidth>e.clientWidth||e.scrollHeight>e.clientHeight?0:-1})"
THEME_TAB_STOP_ROUTED = (
    "forEach(window.shardbookTabStop||"
    "(e=>{e.tabIndex=e.scrollWidth>e.clientWidth||e.scrollHeight>e.clientHeight?0:-1}))"
)


def _patch_theme_script(app, name, *replacements):
    """Replace, in the built _static/scripts/`name`, each (code, patched)
    pair's theme `code` by `patched`, all in one atomic write; a second build
    finds them patched and leaves the script. False, writing nothing, if the
    script is missing or any `code` is neither patched nor there exactly once
    (the theme changed: a patch is never half applied)."""
    script = Path(app.outdir) / "_static" / "scripts" / name
    if not script.exists():
        return False
    original = text = script.read_text()
    for code, patched in replacements:
        if patched in text:
            continue
        if text.count(code) != 1:
            return False
        text = text.replace(code, patched)
    if text != original:
        transaction.commit_one(script, text)
    return True


def route_tab_stops(app):
    """Route the theme script's tab-stop check through window.shardbookTabStop
    (THEME_TAB_STOP); False if the theme's script no longer has that code."""
    return _patch_theme_script(app, "pydata-sphinx-theme.js", (THEME_TAB_STOP, THEME_TAB_STOP_ROUTED))


# pydata-sphinx-theme's back-to-top button reads the header's box as its
# script runs, before the page has been laid out: that read forces the whole
# chapter's first style and layout into the script (Lighthouse, a phone:
# 0.5-0.8 s of blocked main thread on chapters 3 and 4, half a second on the
# others). The box is read on the first scroll instead, when the page is laid
# out (the header is sticky or hidden: its bottom is the same then).
THEME_BACK_TO_TOP = (
    'var e=document.getElementsByClassName("bd-header")[0].getBoundingClientRect();'
    'window.addEventListener("scroll",function(){this.oldScroll'
)
THEME_BACK_TO_TOP_LAZY = (
    "var e;"
    'window.addEventListener("scroll",function(){'
    'e=e||document.getElementsByClassName("bd-header")[0].getBoundingClientRect();this.oldScroll'
)


def lazy_back_to_top(app):
    """Have the theme's back-to-top button read the header's box on the first
    scroll, not as bootstrap.js runs (THEME_BACK_TO_TOP); False if the
    theme's script no longer has that code."""
    return _patch_theme_script(app, "bootstrap.js", (THEME_BACK_TO_TOP, THEME_BACK_TO_TOP_LAZY))


# pydata-sphinx-theme's script, as it runs, reads three sizes before the page
# has been laid out, each forcing the whole chapter's first style and layout
# into the script (Lighthouse, a phone: 0.25-0.6 s of blocked main thread on
# chapters 2-4): the banners' height (there is no banner in this book: it reads
# 0), the sidebar's link positions, to scroll the chapter list to the current
# page, and the header's height, for the contents highlight. Each read is
# moved to the next rendering step (requestAnimationFrame), where the page is
# laid out anyway: the sidebar is still scrolled before the first paint; the
# banners and the highlight, which show nothing at load, a task after it.
AFTER_PAINT_JS = "(function(f){requestAnimationFrame(function(){setTimeout(f)})})"
THEME_BANNERS = "e(async function(){await Promise.allSettled([O(),N()]);"
THEME_BANNERS_LATER = f"e(async function(){{await Promise.allSettled([O(),N()]);await new Promise({AFTER_PAINT_JS});"
THEME_SIDEBAR_SCROLL = (
    'e(function(){if(!document.querySelector(".bd-docs-nav"))return;var e=document.querySelector("div.bd-sidebar");'
)
THEME_SIDEBAR_SCROLL_LATER = (
    'e(function(){requestAnimationFrame(function(){if(!document.querySelector(".bd-docs-nav"))return;'
    'var e=document.querySelector("div.bd-sidebar");'
)
# ... and the same function's end, to close the callback it now sits in
THEME_SIDEBAR_SCROLL_END = (
    'window.addEventListener("beforeunload",()=>{sessionStorage.setItem("sidebar-scroll-top",e.scrollTop)})}),'
)
THEME_SIDEBAR_SCROLL_END_LATER = (
    'window.addEventListener("beforeunload",()=>{sessionStorage.setItem("sidebar-scroll-top",e.scrollTop)})})}),'
)
THEME_TOC_HIGHLIGHT = 'window.addEventListener("resize",_(c,300)),c()}'
THEME_TOC_HIGHLIGHT_LATER = f'window.addEventListener("resize",_(c,300)),{AFTER_PAINT_JS}(c)}}'


def lazy_theme_reads(app):
    """Move pydata-sphinx-theme's three reads of sizes at load (banners,
    sidebar scroll, contents highlight) to the next rendering step; False,
    patching none, if the theme's script no longer has that code."""
    return _patch_theme_script(
        app,
        "pydata-sphinx-theme.js",
        (THEME_BANNERS, THEME_BANNERS_LATER),
        (THEME_SIDEBAR_SCROLL, THEME_SIDEBAR_SCROLL_LATER),
        (THEME_SIDEBAR_SCROLL_END, THEME_SIDEBAR_SCROLL_END_LATER),
        (THEME_TOC_HIGHLIGHT, THEME_TOC_HIGHLIGHT_LATER),
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


def setup(app):
    app.connect("html-page-context", _drop_thebe)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
