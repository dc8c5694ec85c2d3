"""The package reference appendix (book machinery, layer 3): which modules it
documents, by the layers of DESIGN.md, as the MyST text of autodoc
directives. The reference is a page that lists the package's modules and
one page per part (`PAGES`: the cost model and presets, the planner, the JAX
programs and compiler-output tools, the book's machinery), each printing
`reference_source(part)`, so a module added to `shardbook.LAYERS` appears in
it without an edit there; the Sphinx extension fails the build on a public
function, class or method of these modules that has no docstring.

Documented: every module of the cost model and presets (layer 1), every
module of the JAX programs and compiler-output tools (layer 2, with
`shardbook.hlo`'s commands), and of the book's machinery only the ledger,
the one part the chapters call.
"""

import importlib
import pkgutil

from .. import LAYERS

LAYER_TITLES = {
    "cost_model": "The cost model and presets",
    "programs": "JAX programs and compiler-output tools",
    "book": "Book machinery",
}
# of layer 3, what the chapters and readers call; the rest is the build's own
BOOK_MODULES_DOCUMENTED = ("ledger",)

# The reference's pages, one per part: the first layer on two, the planner
# apart from the cost model it prices with. On one page the reference's first
# visit came to 999,751 bytes, 249 under the 1 MB budget; a part is at most
# about 0.8 MB (the cost model's 240 kB of entries, the theme's assets).
# part: (docname, title, what it holds)
PAGES = {
    "cost_model": (
        "chapters/95_reference_cost_model",
        "The cost model and presets",
        "units, accelerators and models, collectives over fabrics, memory, rooflines, pipelines, experts",
    ),
    "planner": (
        "chapters/95_reference_planner",
        "The planner",
        "the meshes it searches, how it places, prices and calibrates them, and its validation",
    ),
    "programs": (
        "chapters/95_reference_programs",
        "JAX programs and compiler-output tools",
        "the fixtures, the small model and its schemes, capture, inventory and prediction",
    ),
    "book": (
        "chapters/95_reference_book",
        "Book machinery",
        "the ledger, which the chapters call to show a computed value",
    ),
}
# the top-level members of the first layer that the planner's page documents
PLANNER_MEMBERS = ("explorer", "planner", "validation", "transfer")


def _with_submodules(name):
    module = importlib.import_module(name)
    names = [name]
    if hasattr(module, "__path__"):
        for info in sorted(pkgutil.iter_modules(module.__path__), key=lambda i: i.name):
            names.append(f"{name}.{info.name}")
    return names


def documented_modules(layer):
    """The dotted names of the modules the reference documents for `layer`
    (a key of shardbook.LAYERS), packages followed by their modules."""
    if layer not in LAYERS:
        raise ValueError(f"layer: must be one of {', '.join(LAYERS)}, got {layer!r}")
    members = BOOK_MODULES_DOCUMENTED if layer == "book" else LAYERS[layer]
    names = []
    for member in members:
        if member.startswith("_"):
            continue
        names += _with_submodules(f"shardbook.{member}")
    return [n for n in names if not n.rsplit(".", 1)[-1].startswith("_") or n.endswith(".__main__")]


def page_modules(part):
    """The dotted names of the modules that the reference page of `part` (a
    key of PAGES) documents: each documented module is on exactly one page."""
    if part not in PAGES:
        raise ValueError(f"part: must be one of {', '.join(PAGES)}, got {part!r}")
    if part in ("cost_model", "planner"):
        planner = [n for n in documented_modules("cost_model") if n.split(".")[1] in PLANNER_MEMBERS]
        if part == "planner":
            return planner
        return [n for n in documented_modules("cost_model") if n not in planner]
    return documented_modules(part)


def page_of(module):
    """The docname of the reference page that documents `module` (dotted), or None."""
    for part, (docname, _title, _what) in PAGES.items():
        if module in page_modules(part):
            return docname
    return None


def reference_source(part):
    """MyST text: one `automodule` directive (members defined in the module,
    undocumented ones too, so that a missing docstring fails the build) per module of
    the page of `part` (a key of PAGES), inside `eval-rst`, so that the docstrings
    are read as the reStructuredText they are written in rather than as Markdown."""
    lines = ["```{eval-rst}"]
    for name in page_modules(part):
        # each object once, where it is defined: a module's __all__ may re-export
        # (shardbook.explorer, shardbook.planner), and autodoc would document
        # those names a second time
        lines += [f".. automodule:: {name}", "   :members:", "   :undoc-members:", "   :ignore-module-all:", ""]
    return "\n".join(lines + ["```", ""])


def missing_docstring(what, name, obj, lines):
    """True when autodoc is documenting a public function, class or method
    of `name` whose docstring is empty (a dataclass's generated signature
    does not count as one)."""
    if what not in ("function", "class", "method", "exception"):
        return False
    if name.rsplit(".", 1)[-1].startswith("_"):
        return False
    if what in ("class", "exception"):
        # its own docstring: not one inherited (an exception's from its base),
        # nor the signature a dataclass or NamedTuple is given without one
        own = (vars(obj).get("__doc__") or "").strip()
        return not own or own.startswith(f"{obj.__name__}(")
    return not any(line.strip() for line in lines)


def _check_docstring(app, what, name, obj, options, lines):
    from sphinx.util import logging

    if missing_docstring(what, name, obj, lines):
        logging.getLogger(__name__).warning(
            f"{name}: a public {what} without a docstring (the package reference documents every one)",
            type="shardbook",
            subtype="docstring",
        )


def code_preface():
    """The imports sphinx-codeautolink assumes before every code block: the
    chapters import the package in cells they hide, so their visible cells'
    names (`roofline.dp_min_tokens_per_device`) resolve through these."""
    lines = ["import shardbook"]
    for layer in LAYERS:
        for name in documented_modules(layer):
            package, _, module = name.rpartition(".")
            if module != "__main__":
                lines.append(f"from {package} import {module}")
    return "\n".join(lines)


def _set_code_preface(app, config):
    config.codeautolink_global_preface = code_preface()
    # a dataclass field's annotation (registry.Fixture.predict) that no inventory holds
    config.nitpick_ignore = [*config.nitpick_ignore, ("py:class", "collections.abc.Callable")]


def _untitled_sections_kept_apart():
    """sphinx-codeautolink 0.20 pops a section title on leaving every
    section, but sphinx-exercise 1.2 wraps each exercise's and solution's
    content in a section without one: the pop fails on an empty stack. Pop
    only for a section that opened with a title."""
    from docutils import nodes
    from sphinx_codeautolink.extension.block import CodeBlockAnalyser

    def depart_section(self, node):
        if node.children and isinstance(node.children[0], nodes.title):
            self.title_stack.pop()

    CodeBlockAnalyser.depart_section = depart_section


REFERENCE_DOCNAME = "chapters/95_reference"  # the list of modules, linked to their pages
REFERENCE_DOCNAMES = tuple(docname for docname, _title, _what in PAGES.values())


def index_source():
    """MyST text for the reference's first page: per part, a link to its
    page, what it holds, and its modules, each linked to its entry."""
    lines = []
    for part, (docname, title, what) in PAGES.items():
        modules = ", ".join(f"{{py:mod}}`{name}`" for name in page_modules(part))
        lines += [f"- {{doc}}`{title} </{docname}>`: {what}. Modules: {modules}.", ""]
    return "\n".join(lines)


def _names_only_in_search(app, doctree):
    """Every page loads the search index: the reference's docstrings would
    add about 90 kB to each first visit. Its objects stay in the index (a
    search for `all_gather_s` finds its entry); its running text does not."""
    if app.env.docname in REFERENCE_DOCNAMES:
        app.env.metadata[app.env.docname]["nosearch"] = True


# a module-level value longer than this is not printed beside its name: the
# data tables (measured.PUBLISHED_RUNS, memory.RECOMPUTE, ...) are shown in the
# chapters that use them, and printed whole they made the reference page pass
# the 1 MB first-visit budget
LONGEST_VALUE_SHOWN = 200


def _short_value_documenter():
    from sphinx.ext.autodoc import DataDocumenter
    from sphinx.util.inspect import object_description

    class ShortValueDataDocumenter(DataDocumenter):
        """A module-level name with its value when the value is short."""

        def should_suppress_value_header(self):
            if super().should_suppress_value_header():
                return True
            try:
                return len(object_description(self.object)) > LONGEST_VALUE_SHOWN
            except ValueError:
                return False

    return ShortValueDataDocumenter


def _fieldless_class_documenter():
    import dataclasses

    from sphinx.ext.autodoc import ClassDocumenter

    class FieldlessClassDocumenter(ClassDocumenter):
        """A class; a dataclass without an entry per field: its signature
        lists the fields and its docstring says what they hold (263 bare
        `name: type = default` entries pushed the page past 1 MB)."""

        def filter_members(self, members, want_all):
            if dataclasses.is_dataclass(self.object):
                fields = {f.name for f in dataclasses.fields(self.object)}
                members = [m for m in members if m.__name__ not in fields]
            return super().filter_members(members, want_all)

    return FieldlessClassDocumenter


def setup(app):
    # also listed in _config.yml; loaded here too for a project that lists only the book's extension
    app.setup_extension("sphinx.ext.autodoc")
    app.add_autodocumenter(_short_value_documenter(), override=True)
    app.add_autodocumenter(_fieldless_class_documenter(), override=True)
    app.setup_extension("sphinx_codeautolink")
    _untitled_sections_kept_apart()
    app.connect("doctree-read", _names_only_in_search)
    app.connect("config-inited", _set_code_preface)
    app.connect("autodoc-process-docstring", _check_docstring)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
