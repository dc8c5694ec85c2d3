"""A small Sphinx extension for the book (listed in _config.yml).

It gives each chapter a `.ipynb` download next to its `.md` source: the
chapter converted by jupytext, as a reader's Jupyter would open it. The
theme shows an ipynb button when the page context names `ipynb_source`.
"""

from pathlib import Path


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


def setup(app):
    # before sphinx-book-theme builds its header buttons (priority 501)
    app.connect("html-page-context", _add_ipynb_download, priority=500)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
