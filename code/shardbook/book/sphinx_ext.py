"""The book's Sphinx extension (listed in _config.yml): it sets up the
book's own extensions, one concern each, and runs their steps after a build
in the order they need:

- `katex_math`: math rendered to HTML at build time by KaTeX;
- `pages`: what each page carries (ipynb download, colour mode, full-size
  figure links, accessibility fixes, the live box, the held first paint);
- `theme_assets`: the theme's icons, icon fonts and stylesheets cut down to
  what the pages use, and sphinx-thebe's assets left out;
- `live_assets`: the live pages' glue role and the files the browser loads;
- `reference` and `glossary`: the package reference and the glossary;
- `search`: the search page's ranking and snippets.

Here: the fingerprint of a finished HTML build (which the tests and `make
serve` check), the single-page builder's share of the HTML visitors, the
repository's address, a faster citation lookup, and the pages that wait for
the small model's records read last.
"""

import re
from pathlib import Path

from . import katex_math, live_assets, pages, theme_assets

# A page that reads the small model's records (shardbook.programs.runs): under
# `make test` the background trainer is still writing them when the build
# starts, and such a page waits for the ones it needs.
READS_MODEL_RECORDS = re.compile(r"\bruns\.reports?\(")


def _read_record_pages_last(app, env, docnames):
    """Read, and so execute, the pages that read the model's records after
    every other page (the others keep their order): the build runs the rest
    while the records are written, instead of waiting half-way."""

    def reads_records(docname):
        try:
            return bool(READS_MODEL_RECORDS.search(Path(env.doc2path(docname)).read_text()))
        except OSError:
            return False

    docnames.sort(key=reads_records)


def _records_before_their_pages(app, docname, source):
    """Before the first page that reads the model's records is executed:
    wait for the background trainer and train what is missing, outside any
    cell, so that no cell waits on training under the cell timeout
    (shardbook.programs.runs.ensure_records); a failure stops the build
    with one line naming the scheme and the log."""
    if getattr(app, "_shardbook_records_ready", False) or not READS_MODEL_RECORDS.search(source[0]):
        return
    import sys

    from sphinx.errors import ExtensionError

    from ..programs.runs import ensure_records

    def progress(line):  # shown under `-q` too, and never a Sphinx warning (-W)
        print(line, file=sys.stderr, flush=True)

    try:
        ensure_records(Path(app.outdir).parent, log=progress)
    except RuntimeError as exc:
        raise ExtensionError(str(exc)) from None
    app._shardbook_records_ready = True


def _pages_depend_on_the_bibliography(app, docname, source):
    """Every page's citations (the text of their tooltips) come from
    references.bib: note it as a dependency of each page read, so that an
    edit to it rebuilds the pages that cite it (sphinxcontrib-bibtex notes
    it only for the page that prints the bibliography; the others kept the
    old title through any number of builds)."""
    bib = Path(app.srcdir) / "references.bib"
    if bib.is_file():
        app.env.note_dependency(str(bib))


def _remember_site(app):
    """When an HTML build starts: what each file of the site holds
    (shardbook.book.buildcache.snapshot), for _keep_unchanged_files."""
    if app.builder.name == "html":
        from .buildcache import snapshot

        app._shardbook_site_before = snapshot(app.outdir)


def _keep_unchanged_files(app, exc):
    """After every other step of a finished HTML build: a file rewritten
    with the bytes it had keeps its old times, so a build that changed
    nothing rewrites no file of the site."""
    before = getattr(app, "_shardbook_site_before", None)
    if exc is None and before:
        from .buildcache import keep_unchanged

        keep_unchanged(app.outdir, before)


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
    so that a failed build leaves nothing that looks current, and take the
    fingerprint of the sources now, before any page is read (a chapter
    edited while the build runs then leaves a record that no longer matches
    the sources). The record is the HTML site's: the single-page build of
    `make pdf` (another builder, another folder) leaves it alone, while the
    tests read the site."""
    if app.builder.name == "html":
        from .expected import source_fingerprint

        _fingerprint_file(app).unlink(missing_ok=True)
        app._shardbook_start_fingerprint = source_fingerprint(app.srcdir)


def record_fingerprint(app):
    """After a finished HTML build: write the fingerprint of the sources as
    they were when the build started (shardbook.book.expected.check_build
    compares it with the working tree), and say so in one line when a
    source changed while the build ran: that build is stale at once."""
    if app.statuscode != 0 or app.builder.name != "html":
        return
    from .expected import source_fingerprint

    start = getattr(app, "_shardbook_start_fingerprint", None)
    if start is None:  # the build was not started through builder-inited
        return
    _fingerprint_file(app).write_text(start + "\n")
    if source_fingerprint(app.srcdir) != start:
        from sphinx.util import logging

        logging.getLogger(__name__).warning(
            "shardbook: a source (a chapter, the package, the bibliography, the artifacts or the errata log) changed while the "
            "build ran; the build is recorded as stale: run the build again"
        )


def _finish_site(app, exc):
    """After an HTML build: the colour-mode script, the trimmed icons and icon
    fonts and stylesheets, the live mode's assets, KaTeX's stylesheet and
    fonts, the pages' rewrites; then the fingerprint of the sources as the
    build started (see record_fingerprint)."""
    if exc is not None or app.builder.format != "html":
        return
    pages.write_mode_script(app.outdir)
    icons = theme_assets.icons_used(app.outdir)  # read the pages once for both
    theme_assets.trim_icons(app, icons)
    theme_assets.subset_icon_fonts(app, icons)
    theme_assets.purge_stylesheets(app)
    for patch in (theme_assets.route_tab_stops, theme_assets.lazy_back_to_top, theme_assets.lazy_theme_reads):
        if not patch(app):
            from sphinx.util import logging

            logging.getLogger(__name__).warning(
                f"shardbook: theme_assets.{patch.__name__} left the theme's script as it is: its code changed"
            )
    live_assets.copy_live_assets(app)
    katex_math.copy_katex_assets(app)
    pages.rewrite_pages(Path(app.outdir))
    if app.builder.name == "html":
        from .expected import remove_orphans

        remove_orphans(Path(app.outdir).parent, app.srcdir)  # a chapter taken out of _toc.yml: its page goes
    record_fingerprint(app)


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
    app.setup_extension("shardbook.book.reference")  # autodoc, and no public name without a docstring
    app.setup_extension("shardbook.book.glossary")
    app.setup_extension("shardbook.book.search")  # ranking and snippets
    app.add_css_file("shardbook.css")  # live panel, full-size links, narrow screens
    app.setup_extension("shardbook.book.live_assets")
    app.setup_extension("shardbook.book.charts")  # instant charts: their script and stylesheet
    app.setup_extension("shardbook.book.theme_assets")
    app.setup_extension("shardbook.book.katex_math")
    app.setup_extension("shardbook.book.pages")
    app.connect("config-inited", _use_repository_url)
    app.connect("env-before-read-docs", _read_record_pages_last)
    app.connect("source-read", _records_before_their_pages)
    app.connect("source-read", _pages_depend_on_the_bibliography)
    app.connect("builder-inited", _remember_site)
    app.connect("build-finished", _keep_unchanged_files, priority=900)  # after _finish_site's steps
    app.connect("builder-inited", _forget_fingerprint)
    app.connect("builder-inited", _share_html_visitors)
    app.connect("build-finished", _finish_site)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
