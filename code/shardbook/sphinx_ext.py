"""A small Sphinx extension for the book (listed in _config.yml).

- Each chapter gets a `.ipynb` download next to its `.md` source: the chapter
  converted by jupytext, as a reader's Jupyter would open it. The theme shows
  an ipynb button when the page context names `ipynb_source`.
- MathJax is served from the site itself (the book reads offline): the files
  come from the pinned `sphinx-mathjax-offline` package (MathJax 3.2.2), and
  only what `tex-chtml.js` loads is copied: the component, its TeX
  extensions, the CommonHTML fonts and the menu.
"""

import importlib.util
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


def _copy_mathjax(app, exc):
    if exc is not None or app.builder.format != "html":
        return
    (Path(app.outdir) / "_static" / MODE_JS).write_text(MODE_SOURCE)
    source, target = _mathjax_source(), Path(app.outdir) / "_static" / "mathjax"
    for part in MATHJAX_PARTS:
        src, dst = source / part, target / part
        if dst.exists():
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst)
        else:
            shutil.copy2(src, dst)


def _use_local_mathjax(app, config):
    config.mathjax_path = MATHJAX_PATH


def setup(app):
    app.connect("config-inited", _use_local_mathjax)
    app.connect("build-finished", _copy_mathjax)
    app.add_js_file(MODE_JS, priority=900)
    # before sphinx-book-theme builds its header buttons (priority 501)
    app.connect("html-page-context", _add_ipynb_download, priority=500)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
