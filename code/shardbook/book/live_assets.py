"""The live pages' files: the glue role that marks each number with its key
(so the live mode finds the numbers it recomputes), and the assets the
browser loads: the live script and stylesheet, the package's browser
modules and Pyodide, copied from the pinned npm package."""

import hashlib
import json
import re
from pathlib import Path

from .. import BROWSER_MODULES
from .node_files import copy_if_changed, node_package

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


# a glued figure: a number and at most a short unit ("37 s", "2,284 ms", "1.2 TB/s", "96", "8.3 %",
# "1.7×"); such a span is kept on one line, so a unit never starts the next line without its number
_FIGURE_TEXT = re.compile(r"[-−+]?\d[\d,.]*(?:\s?[A-Za-zµ%×][A-Za-zµ/%×]{0,9})?")


def is_figure_text(text):
    """Whether a glued text is one figure (a number, with or without a
    short unit), which the page keeps on one line (class glue-figure)."""
    return bool(_FIGURE_TEXT.fullmatch(text.strip()))


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
                if is_figure_text(node.astext()):
                    node["classes"].append("glue-figure")
            return result, messages

    NbGlueDomain.roles = dict(NbGlueDomain.roles, text=KeyedPasteTextRole())


def live_files():
    """The package's files the browser loads, relative to the package: one
    NAME.py per module of LIVE_MODULES, and every .py file of a subpackage
    (NAME/__init__.py, NAME/step.py, ...)."""
    package = Path(__file__).parent.parent
    files = []
    for name in LIVE_MODULES:
        if (package / name).is_dir():
            files += sorted(f"{name}/{p.name}" for p in (package / name).glob("*.py"))
        else:
            files.append(f"{name}.py")
    return files


def live_version():
    """A short hash of the package's files the browser loads (and of their
    list): the live pages fetch them as `NAME?v=<this>`, so a rebuild that
    changes one is fetched anew, never taken from a cache that a host lets
    keep files for ten minutes (the pages, revalidated on each visit, carry
    the version in a meta tag)."""
    package = Path(__file__).parent.parent
    digest = hashlib.sha256()
    for name in live_files():
        digest.update(name.encode() + b"\0" + (package / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


LIVE_VERSION_META = "shardbook-live-version"


def _version_meta(app, pagename, templatename, context, doctree):
    """Every page says which version of the package's files its live mode
    loads (a meta tag read by shardbook-live.js)."""
    version = getattr(app, "_shardbook_live_version", None)
    if version is None:
        version = app._shardbook_live_version = live_version()
    context["metatags"] = context.get("metatags", "") + f'\n<meta name="{LIVE_VERSION_META}" content="{version}" />'


def copy_live_assets(app):
    """The live script's static files, the package's browser modules (with
    their manifest) and Pyodide's files (with their sizes) into `_static/`."""
    out = Path(app.outdir) / "_static"
    package = Path(__file__).parent.parent  # the shardbook package
    copy_if_changed(STATIC, out)
    files = live_files()
    for name in files:
        copy_if_changed(package / name, out / "shardbook" / name)
    (out / "shardbook" / "manifest.json").write_text(json.dumps(files))
    pyodide = node_package(app.srcdir, "pyodide", "pyodide.js")
    for name in PYODIDE_FILES:
        copy_if_changed(pyodide / name, out / "pyodide" / name)
    sizes = {name: (pyodide / name).stat().st_size for name in PYODIDE_FILES}
    (out / "pyodide" / "sizes.json").write_text(json.dumps(sizes))


PLANNER_PAGE = "chapters/99_planner"


def _planner_script(app, pagename, templatename, context, doctree):
    """The planner page's script (its form, run with the live mode's
    loader), on that page only."""
    if pagename == PLANNER_PAGE:
        app.add_js_file("shardbook-planner.js", defer="defer")


def setup(app):
    _keyed_glue_role()
    app.add_js_file("shardbook-live.js", defer="defer")
    app.connect("html-page-context", _planner_script)
    app.connect("html-page-context", _version_meta)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
