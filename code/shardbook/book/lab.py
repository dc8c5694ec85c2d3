"""The chapters in JupyterLab (`make lab`): a jupytext contents manager that
shows the book's prose numbers instead of their glue keys.

Three roles that only the book's Sphinx build resolves are rewritten on the
way into JupyterLab and restored on the way back to disk:

- ``{glue:text}`key``` (a computed number, see below);
- ``{cite}`keys``` becomes a link reading "Author et al., year" (from
  references.bib) to the source;
- ``{ref}`label``` becomes a link to the chapter that defines the label.

A chapter's prose names each computed number by a glue key,
``{glue:text}`intro_params```, which myst-nb fills in when it builds the
site. JupyterLab's MyST renderer (jupyterlab-myst) has no glue role, but it
evaluates MyST's inline ``{eval}`` role in the kernel. So, when a chapter is
opened, each glue role becomes ``{eval}`ledger.glued("intro_params")``` and
the cell's `user_expressions` metadata is filled with the number the last
build printed (the committed ledger, tests/expected_numbers.json, which
keeps numbers and phrases, completed by the build's glue files): the
chapter shows its numbers as soon as it opens, and running it recomputes
them in the kernel. When the chapter
is saved, the roles go back and the metadata is dropped, so the `.md`
source on disk never holds a number.

Start it with `make lab`, or by hand::

    jupyter lab --ServerApp.contents_manager_class=shardbook.book.lab.ChapterContentsManager chapters
"""

import json
import re
from pathlib import Path

from jupytext import AsyncTextFileContentsManager

from .. import REPOSITORY_ROOT

EXPECTED_NUMBERS = REPOSITORY_ROOT / "tests" / "expected_numbers.json"
BUILD_GLUE = REPOSITORY_ROOT / "_build" / "jupyter_execute" / "chapters"
METADATA_KEY = "user_expressions"  # where jupyterlab-myst keeps inline results

_GLUE_ROLE = re.compile(r"\{glue:text\}`([a-z0-9_]+)`")
_EVAL_ROLE = re.compile(r'\{eval\}`ledger\.glued\("([a-z0-9_]+)"\)`')
# {cite}`a,b` and {ref}`label` / {ref}`text <label>`; in JupyterLab, links whose
# title keeps the role's exact text, so that saving restores it
_SPHINX_ROLE = re.compile(r'\{(cite|ref)\}`([^`"]+)`')
_ROLE_LINK = re.compile(r'\[[^\]]*\]\([^ )]* "(cite|ref):([^"]+)"\)')
_LABEL = re.compile(r"^\(([A-Za-z0-9_-]+)\)=\s*$", re.M)


def expression(name):
    """The kernel expression that stands for glue key `name` in JupyterLab."""
    return f'ledger.glued("{name}")'


def printed_texts(chapter):
    """{glue key: text} of `chapter` (a file stem such as 00_introduction) as
    the last build printed them: the committed ledger (numbers and
    phrases), completed by the build's glue files where a build exists."""
    texts = {}
    glue_file = BUILD_GLUE / f"{chapter}.glue.json"
    if glue_file.exists():
        try:
            for name, output in json.loads(glue_file.read_text()).items():
                plain = output.get("data", {}).get("text/plain")
                if isinstance(plain, str):
                    texts[name] = plain.strip("'\"")
        except (ValueError, AttributeError):
            pass  # a damaged build: the committed ledger still answers
    if EXPECTED_NUMBERS.exists():
        from . import expected

        for entry in expected.load(EXPECTED_NUMBERS):
            if entry["chapter"] == chapter:
                texts[entry["name"]] = entry["text"]
    return texts


def _citation_label(entry):
    """ "Author et al., year" for a references.bib entry."""
    people = [" ".join(p.last_names) or " ".join(p.first_names) for p in entry.persons.get("author", [])]
    if len(people) > 2 or (len(people) == 2 and people[1] == "others"):
        who = f"{people[0]} et al."
    elif people:
        who = " and ".join(people)
    else:
        who = entry.fields.get("organization") or entry.fields.get("institution") or entry.fields.get("title", "?")
    return f"{who.replace('{', '').replace('}', '')}, {entry.fields.get('year', 'n.d.')}"


def citations(bib=REPOSITORY_ROOT / "references.bib"):
    """{key: (label, url)} for every entry of the book's bibliography."""
    from pybtex.database import parse_file

    found = {}
    for key, entry in parse_file(str(bib)).entries.items():
        url = entry.fields.get("url") or "".join(re.findall(r"\\url\{([^}]*)\}", entry.fields.get("howpublished", "")))
        found[key] = (_citation_label(entry), url.replace("\\_", "_"))
    return found


def chapter_labels(chapters=REPOSITORY_ROOT / "chapters"):
    """{label: (chapter file name, its title)} for every `(label)=` target."""
    labels = {}
    for path in sorted(Path(chapters).glob("[0-9][0-9]_*.md")):
        text = path.read_text()
        title = re.search(r"^# (.+)$", text, re.M)
        for label in _LABEL.findall(text):
            labels[label] = (path.name, title.group(1).strip() if title else path.stem)
    return labels


def _role_as_link(kind, content, cites, labels):
    if kind == "cite":
        keys = [k.strip() for k in content.split(",")]
        text = "; ".join(cites.get(k, (k, ""))[0] for k in keys)
        url = next((cites[k][1] for k in keys if k in cites and cites[k][1]), "#")
    else:
        shown, _, target = content.partition(" <")
        label = target.rstrip(">") if target else content
        file_name, title = labels.get(label, ("#", label))
        text, url = (shown if target else title), file_name
    return f'[{text}]({url} "{kind}:{content}")'


def to_lab(notebook, texts, cites=None, labels=None):
    """In place: glue roles become inline expressions, with the printed
    numbers as their results; cite and ref roles become links. Returns the
    number of glue roles rewritten."""
    cites = citations() if cites is None else cites
    labels = chapter_labels() if labels is None else labels
    count = 0
    for cell in notebook.cells:
        if cell.cell_type != "markdown":
            continue
        cell.source = _SPHINX_ROLE.sub(lambda m: _role_as_link(m.group(1), m.group(2), cites, labels), cell.source)
        names = _GLUE_ROLE.findall(cell.source)
        if not names:
            continue
        cell.source = _GLUE_ROLE.sub(lambda m: "{eval}`" + expression(m.group(1)) + "`", cell.source)
        count += len(names)
        results = []
        for name in dict.fromkeys(names):
            if name in texts:
                results.append(
                    {
                        "expression": expression(name),
                        "result": {"status": "ok", "data": {"text/plain": repr(texts[name])}, "metadata": {}},
                    }
                )
        if results:
            cell.metadata[METADATA_KEY] = results
    return count


def to_source(notebook):
    """In place, the inverse of :func:`to_lab`: the roles as the book writes
    them and no stored results."""
    for cell in notebook.cells:
        if cell.cell_type != "markdown":
            continue
        cell.source = _EVAL_ROLE.sub(lambda m: "{glue:text}`" + m.group(1) + "`", cell.source)
        cell.source = _ROLE_LINK.sub(lambda m: "{" + m.group(1) + "}`" + m.group(2) + "`", cell.source)
        cell.metadata.pop(METADATA_KEY, None)
    for cell in notebook.cells:
        cell.metadata.pop("trusted", None)  # the notebook's signature state, not the chapter's


def _is_chapter(model, path):
    return model.get("type") == "notebook" and str(path).endswith(".md") and model.get("content") is not None


class ChapterContentsManager(AsyncTextFileContentsManager):
    """jupytext's contents manager (the asynchronous one Jupyter Server
    uses), plus the glue-to-eval view of chapters."""

    async def get(self, path, content=True, type=None, format=None, **kwargs):
        model = await super().get(path, content=content, type=type, format=format, **kwargs)
        if content and _is_chapter(model, path):
            to_lab(model["content"], printed_texts(Path(path).stem))
        return model

    async def save(self, model, path=""):
        if _is_chapter(model, path):
            from nbformat import from_dict

            notebook = from_dict(model["content"])
            to_source(notebook)
            if self._unchanged(notebook, path):
                # nothing to write: the file stays byte for byte as it is
                # (jupytext would re-wrap YAML options, add blank lines and
                # stamp its own version into the header)
                return await self.get(path, content=False)
            model = dict(model, content=notebook)
        return await super().save(model, path)

    def _unchanged(self, notebook, path):
        """True when `notebook` says what the chapter on disk says: both
        written out by jupytext in the chapter's format give the same text
        (so metadata that jupytext does not keep, a kernel's language_info
        say, is no change)."""
        import jupytext

        os_path = Path(self._get_os_path(path.strip("/")))
        if not os_path.is_file():
            return False
        try:
            on_disk = jupytext.read(os_path)
            fmt = on_disk.metadata.get("jupytext", {}).get("text_representation", {}).get("format_name", "myst")
            return jupytext.writes(notebook, fmt=f"md:{fmt}") == jupytext.writes(on_disk, fmt=f"md:{fmt}")
        except Exception:  # unreadable: let the ordinary save write it
            return False
