"""A small Sphinx extension for the book (listed in _config.yml).

- Each chapter gets a `.ipynb` download next to its `.md` source: the chapter
  converted by jupytext, as a reader's Jupyter would open it. The theme shows
  an ipynb button when the page context names `ipynb_source`.
- The theme's Font Awesome script (about 1.5 MB, every icon of the free
  set) is replaced, in the built site only, by a script of the few icons the
  pages use, with the same file name; the paths come from the theme's own
  copy of Font Awesome Free, so the icons look the same.
- MathJax is served from the site itself (the book reads offline): the files
  come from the pinned `sphinx-mathjax-offline` package (MathJax 3.2.2), and
  only what `tex-chtml.js` loads is copied: the component, its TeX
  extensions, the CommonHTML fonts and the menu.
"""

import importlib.util
import json
import re
import shutil
from pathlib import Path

MATHJAX_PATH = "mathjax/tex-chtml.js"
# pydata-sphinx-theme reads the colour mode from localStorage and, on a
# reader's first visit, finds "" and logs a console error; start from "auto".
MODE_JS = "shardbook-mode.js"
MODE_SOURCE = 'if (!document.documentElement.dataset.mode) { document.documentElement.dataset.mode = "auto"; }\n'

MATHJAX_PARTS = ("tex-chtml.js", "input/tex/extensions", "output/chtml/fonts/woff-v2", "ui", "a11y")


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


def _mathjax_source():
    spec = importlib.util.find_spec("sphinx-mathjax-offline")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the pinned package sphinx-mathjax-offline is missing: run `make book` to install requirements.txt")
    return Path(list(spec.submodule_search_locations)[0]) / "static" / "mathjax"


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


_FIGURE_IMAGE = re.compile(r'(<figure\b[^>]*>\s*)(<img\b[^>]*?\bsrc="([^"]+)"[^>]*/?>)(?!\s*<a class="shardbook-full-size")')


def _link_figures_full_size(outdir):
    """Under every figure's image, a link that opens it full size: the HLO
    graphs and wide plots are unreadable on a phone at page width."""
    for page in outdir.rglob("*.html"):
        text = page.read_text()
        linked = _FIGURE_IMAGE.sub(
            lambda m: f'{m.group(1)}{m.group(2)}<a class="shardbook-full-size" href="{m.group(3)}">Open full size</a>', text
        )
        if linked != text:
            page.write_text(linked)


def _fingerprint_file(app):
    from .ledger import FINGERPRINT_FILE

    return Path(app.outdir).parent / FINGERPRINT_FILE


def _forget_fingerprint(app):
    """A build that starts is not yet a build that finished: drop the record
    so that a failed build leaves nothing that looks current."""
    _fingerprint_file(app).unlink(missing_ok=True)


def _finish_site(app, exc):
    """After an HTML build: the colour-mode fix, the trimmed icons, the live
    mode's assets and the local MathJax; then the fingerprint of the sources
    this build read (shardbook.ledger.check_build compares it)."""
    if exc is not None or app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    (static / MODE_JS).write_text(MODE_SOURCE)
    _trim_icons(app)
    _copy_live_assets(app)
    for part in MATHJAX_PARTS:
        _copy_if_changed(_mathjax_source() / part, static / "mathjax" / part)
    _link_figures_full_size(Path(app.outdir))
    if app.statuscode == 0:
        from .ledger import source_fingerprint

        _fingerprint_file(app).write_text(source_fingerprint(app.srcdir) + "\n")


FA_PACKS = {"fab": "fab", "fa-brands": "fab", "far": "far", "fa-regular": "far", "fas": "fas", "fa-solid": "fas"}
ICON_CSS = (
    ".svg-inline--fa{display:inline-block;height:1em;overflow:visible;vertical-align:-.125em;box-sizing:content-box}"
    ".fa-lg{font-size:1.25em;line-height:.05em;vertical-align:-.075em}"
)


def _theme_fontawesome():
    import pydata_sphinx_theme

    return Path(pydata_sphinx_theme.__file__).parent / "theme" / "pydata_sphinx_theme" / "static" / "scripts" / "fontawesome.js"


def _icons_used(outdir):
    """Icons named by <i>/<span> class lists in the pages and by the theme's
    scripts (which add some icons, such as fa-xmark, at run time)."""
    used = set()
    sources = [p.read_text(errors="replace") for p in Path(outdir).rglob("*.html")]
    sources += [p.read_text(errors="replace") for p in (Path(outdir) / "_static" / "scripts").glob("*-theme.js")]
    for text in sources:
        found = re.findall(r'<(?:i|span) class="([^"]*\bfa-[^"]*)"', text) + re.findall(r'"((?:fa-solid|fa-brands|fa-regular|fas|fab|far) fa-[a-z0-9-]+)"', text)
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
        pattern = re.compile(r'(?:"%s"|(?<![\w-])%s):\[(\d+),(\d+),\[[^\]]*\],"[^"]*","([^"]+)"\]' % (re.escape(name), re.escape(name)))
        for m in pattern.finditer(bundle):
            owner = next((p for pos, p in calls if pos > m.start()), None)
            if owner == pack:
                found[f"{pack}:{name}"] = [int(m.group(1)), int(m.group(2)), m.group(3)]
                break
    return found


def _trim_icons(app):
    bundle = _theme_fontawesome().read_text()
    icons = _icon_definitions(bundle, _icons_used(app.outdir))
    script = (
        "/* The icons this site uses, from Font Awesome Free (icons CC BY 4.0, code MIT; fontawesome.com/license/free),\n"
        "   written by shardbook.sphinx_ext in place of the theme's full bundle. */\n"
        "(function(){var I=" + json.dumps(icons, separators=(",", ":")) + ";\n"
        "var P={fab:'fab','fa-brands':'fab',far:'far','fa-regular':'far',fas:'fas','fa-solid':'fas'};\n"
        "function swap(root){(root||document).querySelectorAll('i[class*=\"fa-\"],span[class*=\"fa-\"]').forEach(function(el){var cs=[].slice.call(el.classList),pack='fas',name=null;\n"
        "cs.forEach(function(c){if(P[c])pack=P[c];else if(c.indexOf('fa-')===0&&c!=='fa-lg'&&!name)name=c.slice(3);});\n"
        "var d=I[pack+':'+name];if(!d)return;var ns='http://www.w3.org/2000/svg',svg=document.createElementNS(ns,'svg');\n"
        "[].slice.call(el.attributes).forEach(function(a){svg.setAttribute(a.name,a.value);});\n"
        "svg.setAttribute('viewBox','0 0 '+d[0]+' '+d[1]);svg.setAttribute('aria-hidden','true');svg.setAttribute('class',el.getAttribute('class')+' svg-inline--fa');\n"
        "var path=document.createElementNS(ns,'path');path.setAttribute('fill','currentColor');path.setAttribute('d',d[2]);svg.appendChild(path);\n"
        "el.parentNode.replaceChild(svg,el);});}\n"
        "function start(){var s=document.createElement('style');s.textContent=" + json.dumps(ICON_CSS) + ";document.head.appendChild(s);swap();\n"
        "new MutationObserver(function(ms){ms.forEach(function(m){m.addedNodes.forEach(function(n){if(n.nodeType===1)swap(n.parentNode||n);});});}).observe(document.body,{childList:true,subtree:true});}\n"
        "if(document.readyState==='loading')document.addEventListener('DOMContentLoaded',start);else start();})();\n"
    )
    scripts = Path(app.outdir) / "_static" / "scripts"
    (scripts / "fontawesome.js").write_text(script)
    (scripts / "fontawesome.js.map").unlink(missing_ok=True)


def _use_local_mathjax(app, config):
    config.mathjax_path = MATHJAX_PATH


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
# The modules the browser loads: the standard-library-only part of shardbook.
LIVE_MODULES = ("__init__", "_validate", "units", "hardware", "models", "sharding", "collectives", "memory",
                "roofline", "pipeline", "moe", "training", "ledger", "attention", "maxtext", "explorer", "measured",
                "fabric")
PYODIDE_FILES = ("pyodide.js", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json", "package.json")


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
    package = Path(__file__).parent
    _copy_if_changed(STATIC, out)
    for name in LIVE_MODULES:
        _copy_if_changed(package / f"{name}.py", out / "shardbook" / f"{name}.py")
    (out / "shardbook" / "manifest.json").write_text(json.dumps([f"{n}.py" for n in LIVE_MODULES]))
    pyodide = Path(app.srcdir) / "node_modules" / "pyodide"
    if not (pyodide / "pyodide.js").exists():
        raise RuntimeError("Pyodide is missing from node_modules/: run `make book`, which installs package.json with npm")
    for name in PYODIDE_FILES:
        _copy_if_changed(pyodide / name, out / "pyodide" / name)


def setup(app):
    _keyed_glue_role()
    app.add_js_file("shardbook-live.js", defer="defer")
    app.add_css_file("shardbook.css")  # live panel, full-size links, narrow screens

    app.connect("config-inited", _use_local_mathjax)
    app.connect("config-inited", _use_repository_url)
    app.connect("builder-inited", _forget_fingerprint)
    app.connect("build-finished", _finish_site)
    app.add_js_file(MODE_JS, priority=900)
    # before sphinx-book-theme builds its header buttons (priority 501)
    app.connect("html-page-context", _add_ipynb_download, priority=500)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
