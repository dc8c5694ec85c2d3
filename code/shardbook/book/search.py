"""The site's search (book machinery, layer 3): Sphinx's own index and
search page, with the book's ranking and snippets (search_scorer.js, given
to Sphinx as `html_search_scorer`): chapter and section titles above the
package reference's objects, whole words above parts of words, and snippets
without the hidden copies of each formula.

The index also keeps the book's hyphenated terms whole ("all-gather",
"reduce-scatter", "all-to-all") beside their words, and the search page
looks such a query up whole: Sphinx alone split "all-gather" into "all"
and "gather", and ranked the chapter with "all-to-all" in a heading first.
"""

import re
from pathlib import Path

SCORER = Path(__file__).parent / "search_scorer.js"


def _use_scorer(app, config):
    if not config.html_search_scorer:
        config.html_search_scorer = str(SCORER)


def _english_with_compounds():
    from sphinx.search.en import SearchEnglish

    class SearchEnglishWithCompounds(SearchEnglish):
        """English, with each hyphenated term indexed whole as well."""

        _compound_re = re.compile(r"\w+(?:-\w+)+")

        def split(self, input):
            return super().split(input) + self._compound_re.findall(input)

    return SearchEnglishWithCompounds


def setup(app):
    app.add_search_language(_english_with_compounds())
    app.connect("config-inited", _use_scorer)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
