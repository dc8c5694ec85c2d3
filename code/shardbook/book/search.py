"""The site's search (book machinery, layer 3): Sphinx's own index and
search page, with the book's ranking and snippets (search_scorer.js, given
to Sphinx as `html_search_scorer`): chapter and section titles above the
package reference's objects, whole words above parts of words, and snippets
without the hidden copies of each formula."""

from pathlib import Path

SCORER = Path(__file__).parent / "search_scorer.js"


def _use_scorer(app, config):
    if not config.html_search_scorer:
        config.html_search_scorer = str(SCORER)


def setup(app):
    app.connect("config-inited", _use_scorer)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
