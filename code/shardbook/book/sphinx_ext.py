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
    """After an HTML build: the colour-mode script, the trimmed icons and icon
    fonts and stylesheets, the live mode's assets, KaTeX's stylesheet and
    fonts, the pages' rewrites; then the fingerprint of the sources this build
    read (shardbook.book.expected.check_build compares it)."""
    if exc is not None or app.builder.format != "html":
        return
    pages.write_mode_script(app.outdir)
    icons = theme_assets.icons_used(app.outdir)  # read the pages once for both
    theme_assets.trim_icons(app, icons)
    theme_assets.subset_icon_fonts(app, icons)
    theme_assets.purge_stylesheets(app)
    theme_assets.route_tab_stops(app)
    live_assets.copy_live_assets(app)
    katex_math.copy_katex_assets(app)
    pages.rewrite_pages(Path(app.outdir))
    if app.statuscode == 0 and app.builder.name == "html":
        from .expected import source_fingerprint

        _fingerprint_file(app).write_text(source_fingerprint(app.srcdir) + "\n")


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
    app.setup_extension("shardbook.book.theme_assets")
    app.setup_extension("shardbook.book.katex_math")
    app.setup_extension("shardbook.book.pages")
    app.connect("config-inited", _use_repository_url)
    app.connect("env-before-read-docs", _read_record_pages_last)
    app.connect("builder-inited", _forget_fingerprint)
    app.connect("builder-inited", _share_html_visitors)
    app.connect("build-finished", _finish_site)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
