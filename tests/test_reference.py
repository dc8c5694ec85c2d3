"""The reader's reference: the package reference appendix (autodoc, grouped
by layer, every public name documented), names in code cells linked to it,
the glossary with the first use of each term linked, and the exercises
numbered with their solutions folded."""

import dataclasses
import importlib
import inspect
import re

import pytest

from conftest import CHAPTERS, HTML, ROOT
from shardbook import LAYERS
from shardbook.book import glossary, reference

# the reference's pages, one per part of the package (reference.PAGES)
REFERENCE_PAGES = {part: HTML / f"{docname}.html" for part, (docname, _t, _w) in reference.PAGES.items()}
GLOSSARY_PAGE = "96_glossary.html"
NUMBERED = [p for p in CHAPTERS if p.stem[:2].isdigit() and 1 <= int(p.stem[:2]) <= 9]


def _public(module_name):
    """(name, object) of the functions and classes `module_name` defines and
    makes public: those its `__all__` lists if it has one (as autodoc reads
    it), else those whose names do not start with an underscore."""
    module = importlib.import_module(module_name)
    listed = getattr(module, "__all__", None)
    for name, obj in vars(module).items():
        if name.startswith("_") or (listed is not None and name not in listed):
            continue
        if not (inspect.isfunction(obj) or inspect.isclass(obj)):
            continue
        if getattr(obj, "__module__", None) == module_name:
            yield name, obj


def _documented():
    return [m for layer in LAYERS for m in reference.documented_modules(layer)]


def test_every_module_of_the_first_two_layers_and_the_ledger_is_documented():
    names = set(_documented())
    for member in LAYERS["cost_model"]:
        assert member.startswith("_") or f"shardbook.{member}" in names, member
    for member in LAYERS["programs"]:
        assert f"shardbook.{member}" in names, member
    assert {"shardbook.programs.fixtures", "shardbook.hlo.capture", "shardbook.hlo.__main__"} <= names
    assert "shardbook.ledger" in names and not any(n.startswith("shardbook.book") for n in names)
    with pytest.raises(ValueError, match="layer: must be one of cost_model, programs, book, got 'nope'"):
        reference.documented_modules("nope")


def test_the_docstring_rule():
    def documented():
        """Says what it does."""

    def bare():
        pass

    @dataclasses.dataclass
    class Plain:
        x: int

    @dataclasses.dataclass
    class Explained:
        """A point."""

        x: int

    assert reference.missing_docstring("function", "m.bare", bare, [])
    assert not reference.missing_docstring("function", "m.documented", documented, ["Says what it does."])
    assert not reference.missing_docstring("function", "m._private", bare, [])
    assert not reference.missing_docstring("attribute", "m.Plain.x", None, [])
    # a dataclass without a docstring gets a generated one: its signature
    assert reference.missing_docstring("class", "m.Plain", Plain, (inspect.getdoc(Plain) or "").splitlines())
    assert not reference.missing_docstring("class", "m.Explained", Explained, ["A point."])


# the JAX layer's modules import JAX (1.8 s a process): checked where the jax tests run (make test)
@pytest.mark.parametrize(
    "layer", [pytest.param(lay, marks=pytest.mark.jax) if lay == "programs" else lay for lay in LAYERS]
)
def test_every_public_function_and_class_has_a_docstring(layer):
    """The rule the build enforces, checked without a build, layer by layer."""
    missing = []
    for module_name in reference.documented_modules(layer):
        for name, obj in _public(module_name):
            what = "class" if inspect.isclass(obj) else "function"
            if reference.missing_docstring(
                what, f"{module_name}.{name}", obj, (inspect.getdoc(obj) or "").splitlines()
            ):
                missing.append(f"{module_name}.{name}")
            if inspect.isclass(obj):
                for method_name, method in vars(obj).items():
                    qualified = f"{module_name}.{name}.{method_name}"
                    doc = (inspect.getdoc(method) or "").splitlines()
                    if inspect.isfunction(method) and reference.missing_docstring("method", qualified, method, doc):
                        missing.append(qualified)
    assert not missing, missing


def test_every_documented_module_is_on_exactly_one_page():
    on_pages = [m for part in reference.PAGES for m in reference.page_modules(part)]
    assert sorted(on_pages) == sorted(_documented()), "a module on no page, or on two"
    assert len(on_pages) == len(set(on_pages))
    assert reference.page_of("shardbook.collectives") == "chapters/95_reference_cost_model"
    assert reference.page_of("shardbook.planner.search") == "chapters/95_reference_planner"
    assert reference.page_of("shardbook.hlo.capture") == "chapters/95_reference_programs"
    assert reference.page_of("shardbook.ledger") == "chapters/95_reference_book"
    assert reference.page_of("shardbook.book.site") is None
    with pytest.raises(ValueError, match="part: must be one of cost_model, planner, programs, book, got 'nope'"):
        reference.page_modules("nope")
    # the reference's first page links every page and every module
    index = reference.index_source()
    for part, (docname, title, _what) in reference.PAGES.items():
        assert f"{{doc}}`{title} </{docname}>`" in index
        assert all(f"{{py:mod}}`{m}`" in index for m in reference.page_modules(part))
    # each page is in the table of contents and prints its own part
    toc = (ROOT / "_toc.yml").read_text()
    for part, (docname, title, _what) in reference.PAGES.items():
        assert f"file: {docname}\n" in toc, docname
        source = (ROOT / f"{docname}.md").read_text()
        assert f'reference.reference_source("{part}")' in source and f"# {title}" in source, docname


def test_the_reference_has_an_entry_for_every_public_name(built_book):
    absent = []
    for part, path in REFERENCE_PAGES.items():
        html = path.read_text()
        for module_name in reference.page_modules(part):
            if f'id="module-{module_name}"' not in html:
                absent.append(module_name)
            absent += [f"{module_name}.{n}" for n, _ in _public(module_name) if f'id="{module_name}.{n}"' not in html]
        title = reference.PAGES[part][1]
        assert title.replace("'", "\u2019") in html, title  # the theme's typographic apostrophe
    assert not absent, absent


def _autolinks(path):
    """(page, target, text) of the code-cell names linked to the reference's pages."""
    return re.findall(
        r'<a class="sphinx-codeautolink-a" href="(?:\.\./chapters/)?(95_reference_\w+)\.html#([\w.]+)"[^>]*>(.*?)</a>',
        path.read_text(),
    )


def test_names_in_code_cells_link_to_the_reference(built_book):
    linked = {p.stem: _autolinks(HTML / "chapters" / f"{p.stem}.html") for p in NUMBERED}
    assert sum(1 for links in linked.values() if links) >= 6, {k: len(v) for k, v in linked.items()}
    targets = {(page, t) for links in linked.values() for page, t, _ in links}
    assert ("95_reference_cost_model", "shardbook.collectives.all_reduce_s") in targets, sorted(targets)
    assert len({t.rsplit(".", 1)[0] for _, t in targets}) >= 5, sorted(targets)
    pages = {path.stem: path.read_text() for path in REFERENCE_PAGES.values()}
    missing = sorted((page, t) for page, t in targets if f'id="{t}"' not in pages.get(page, ""))
    assert not missing, missing


def test_the_glossary_has_every_term_and_chapters_link_first_uses(built_book):
    page = (HTML / "chapters" / GLOSSARY_PAGE).read_text()
    anchors = set(re.findall(r'<dt id="(term-[^"]+)"', page))
    assert len(anchors) == len(glossary.TERMS)
    used = set()
    for path in NUMBERED:
        links = re.findall(
            rf'href="{GLOSSARY_PAGE}#(term-[^"]+)"', (HTML / "chapters" / f"{path.stem}.html").read_text()
        )
        assert links, f"{path.name}: no term linked to the glossary"
        twice = {a for a in links if links.count(a) > 1}
        assert not twice, f"{path.name}: a term linked more than once (only its first use is): {twice}"
        assert set(links) <= anchors
        used |= set(links)
    assert len(used) >= len(anchors) * 3 // 4, sorted(anchors - used)


def test_exercises_are_numbered_per_chapter_with_folded_solutions(built_book):
    for path in NUMBERED:
        source = path.read_text()
        assert "{admonition} Answer" not in source, f"{path.name}: a hand-made answer dropdown is left"
        n = source.count(":::{exercise}")
        assert n >= 2, path.name
        html = (HTML / "chapters" / f"{path.stem}.html").read_text()
        chapter = int(path.stem[:2])
        for i in range(1, n + 1):
            assert re.search(rf"Exercise {chapter}\.{i}\b", html), f"{path.name}: no Exercise {chapter}.{i}"
        solutions = re.findall(r'<div class="solution[^"]*dropdown[^"]*"', html)
        assert len(solutions) == n, f"{path.name}: {len(solutions)} folded solutions for {n} exercises"


def test_the_first_use_of_a_term_is_linked_and_only_that_one():
    from docutils import nodes
    from docutils.frontend import get_default_settings
    from docutils.parsers.rst import Parser
    from docutils.utils import new_document
    from sphinx import addnodes

    document = new_document("test", get_default_settings(Parser))
    first = nodes.paragraph("", "", nodes.Text("Each layer's weights are all-gathered; then an all-gather again."))
    heading = nodes.section("", nodes.title("", "", nodes.Text("The bubble")))
    later = nodes.paragraph("", "", nodes.Text("The bubble shrinks; the bubble is gone."))
    code = nodes.paragraph("", "", nodes.literal("", "", nodes.Text("FSDP")), nodes.Text(" and then FSDP."))
    document += [first, heading, later, code]

    class App:
        class env:
            docname = "chapters/03_data_parallel"

    glossary.link_first_uses(App, document)
    refs = list(document.findall(addnodes.pending_xref))
    assert [(r["reftarget"], r.astext()) for r in refs] == [
        ("all-gather", "all-gathered"),
        ("bubble", "bubble"),
        ("FSDP (ZeRO-3)", "FSDP"),
    ]
    assert refs[1].parent is later and refs[2].parent is code  # not the heading's, not the code's
    assert later.astext() == "The bubble shrinks; the bubble is gone."


def test_signatures_lose_their_pre_wrappers_and_nothing_else():
    # pages.plain_signatures: about 100 kB of the reference page's markup, with no effect on what
    # a reader sees (the stylesheet lets a signature wrap); text outside a signature keeps them
    from shardbook.book import pages

    page = (
        '<dt class="sig sig-object py" id="m.f"><span class="sig-name descname"><span class="pre">f</span></span>'
        '<span class="sig-paren">(</span><em class="sig-param"><span class="n"><span class="pre">x</span></span>'
        '<span class="o"><span class="pre">=</span></span><span class="default_value"><span class="pre">(1,</span> '
        '<span class="pre">2)</span></span></em><span class="sig-paren">)</span></dt>'
        '<p><code class="literal"><span class="pre">f(x)</span></code></p>'
    )
    plain = pages.plain_signatures(page)
    assert plain == page.replace('<span class="pre">f</span>', "f").replace('<span class="pre">x</span>', "x").replace(
        '<span class="pre">=</span>', "="
    ).replace('<span class="pre">(1,</span> <span class="pre">2)</span>', "(1, 2)")
    assert '<code class="literal"><span class="pre">f(x)</span></code>' in plain
    assert pages.plain_signatures(plain) == plain


def _reference_html_and_signatures():
    """The reference pages' HTML, joined, and every object signature in it."""
    html = "".join(path.read_text() for path in REFERENCE_PAGES.values())
    return html, re.findall(r'<dt class="sig sig-object[^>]*>.*?</dt>', html, re.S)


def test_the_reference_page_signatures_are_plain(built_book):
    _, signatures = _reference_html_and_signatures()
    assert len(signatures) > 400
    assert not any('<span class="pre">' in s for s in signatures)
    assert 'id="shardbook.planner.candidate.evaluate"' in REFERENCE_PAGES["planner"].read_text()


def test_signatures_show_defaults_as_written_not_the_builders_values(built_book):
    # a default such as environ=os.environ printed by its value put the build machine's
    # environment variables (and the checkout's absolute path) into the published page
    html, signatures = _reference_html_and_signatures()
    text = re.sub(r"<[^>]+>", "", "".join(signatures))
    assert "environ=os.environ" in text  # programs.runs.default_cache_dir, as its source writes it
    assert "environ({" not in html
    assert str(ROOT) not in html
    assert "PosixPath(" not in text


def test_the_sidebar_toggle_of_the_references_pages_is_named():
    # axe-core's summary-name: the theme's toggle of an entry with pages under it holds only an icon
    from shardbook.book import pages

    toggle = '<details open="open"><summary><span class="toctree-toggle" role="presentation"><i></i></span></summary>'
    fixed = toggle
    for pattern, replacement in pages.PAGE_FIXES:
        fixed = pattern.sub(replacement, fixed)
    assert '<summary aria-label="Pages under this entry"><span class="toctree-toggle"' in fixed
    again = fixed
    for pattern, replacement in pages.PAGE_FIXES:
        again = pattern.sub(replacement, again)
    assert again == fixed
