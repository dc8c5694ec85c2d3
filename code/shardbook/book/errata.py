"""The errata log: every correction of a printed value or of a claim, one
TOML file per correction in ``errata/`` (named ``YYYY-MM-DD-slug.toml``):

    date = "2026-12-01"
    chapter = "07_choosing_a_mesh"   # a chapter file stem, or "package"
    section = "Checked against published runs"
    said = "What the book said."
    says = "What it says now."
    why = "Why it was wrong."
    source = "llama3"                # references.bib key(s), comma-separated; "" if none
    review = "ch7-9 W1"              # the review item, if any ("" if none)
    values = ["07_choosing_a_mesh:name_of_ledger_value"]   # ledger values whose text this changes

Here: reading and checking the log (one line per bad file), the values each
entry covers (``make bless`` refuses to change a value's printed text that no
entry covers, shardbook.book.expected), writing a new entry, and the errata
appendix (chapters/98_errata.md) generated from the log.

    python -m shardbook.book.errata check      # every file valid, or one line per bad one
    python -m shardbook.book.errata list       # the log, newest first

Standard library only (tomllib).
"""

import argparse
import datetime
import json
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from .. import _cli, _validate
from . import transaction

ERRATA_DIR = "errata"
DEFAULT_LEDGER = "tests/expected_numbers.json"  # bless writes it with the log's new entries
PACKAGE = "package"  # a correction of the package itself rather than of one chapter
FIELDS = ("date", "chapter", "section", "said", "says", "why", "source", "review", "values")
_NOT_EMPTY = ("said", "says", "why")
_FILE_RE = re.compile(r"^(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2})-(?P<slug>[a-z0-9][a-z0-9_-]*)\.toml$")
_VALUE_RE = re.compile(r"^(?P<chapter>[0-9]{2}_[a-z0-9_]+):(?P<name>[a-z0-9_]+)$")
_BIB_KEY_RE = re.compile(r"^@\w+\s*\{\s*([^,\s]+)\s*,", re.M)


@dataclass(frozen=True)
class Entry:
    """One correction, as its file states it."""

    file: str  # the file's name in errata/
    date: str  # ISO date, YYYY-MM-DD
    chapter: str  # chapter file stem, or "package"
    section: str
    said: str
    says: str
    why: str
    sources: tuple  # references.bib keys
    review: str
    values: tuple  # "chapter:name" of each ledger value whose printed text this changes


def chapter_stems(root):
    """The stems of the book's chapter files (chapters/NN_slug.md)."""
    return sorted(p.stem for p in (Path(root) / "chapters").glob("[0-9][0-9]_*.md"))


def bib_keys(root):
    """The citation keys of references.bib (empty when there is none)."""
    bib = Path(root) / "references.bib"
    return set(_BIB_KEY_RE.findall(bib.read_text(encoding="utf-8"))) if bib.exists() else set()


def _shape_problem(doc):
    """Fields missing, unknown, of the wrong type, or empty where text is needed."""
    missing = [f for f in FIELDS if f not in doc]
    if missing:
        return (
            f"missing field{'s' if len(missing) > 1 else ''} {', '.join(missing)} (every entry has {', '.join(FIELDS)})"
        )
    extra = sorted(set(doc) - set(FIELDS))
    if extra:
        return f"unknown field{'s' if len(extra) > 1 else ''} {', '.join(extra)} (the fields are {', '.join(FIELDS)})"
    for name in FIELDS:
        want = list if name == "values" else str
        if not isinstance(doc[name], want):
            kind = "a list of strings" if want is list else "a string"
            return f"{name}: must be {kind}, got {type(doc[name]).__name__} {doc[name]!r}"
    empty = [name for name in _NOT_EMPTY if not doc[name].strip()]
    return f"{empty[0]}: must not be empty" if empty else None


def _date_problem(doc, file_date):
    try:
        date = datetime.date.fromisoformat(doc["date"])
    except ValueError:
        return f"date: must be a date YYYY-MM-DD, got {doc['date']!r}"
    if date.isoformat() != doc["date"]:
        return f"date: must be written YYYY-MM-DD, got {doc['date']!r}"
    if doc["date"] != file_date:
        return f"date: {doc['date']} differs from the date the file name starts with ({file_date})"
    return None


def _values_problem(values, chapters):
    for value in values:
        match = _VALUE_RE.match(value) if isinstance(value, str) else None
        if not match:
            return (
                f"values: {value!r} must name a ledger value as 'chapter:name' (e.g. '07_choosing_a_mesh:mesh_alpha')"
            )
        if match["chapter"] not in chapters:
            return f"values: {value!r} names chapter {match['chapter']!r}, which is not a chapter file stem"
    if len(set(values)) != len(values):
        return "values: names a ledger value twice"
    return None


def _problem(path, doc, chapters, keys):
    """The first thing wrong with one parsed file, or None."""
    found = _FILE_RE.match(path.name)
    if not found:
        return "the file name must be YYYY-MM-DD-slug.toml (lower-case letters, digits, '-' and '_' in the slug)"
    problem = _shape_problem(doc) or _date_problem(doc, found["date"])
    if problem:
        return problem
    if doc["chapter"] != PACKAGE and doc["chapter"] not in chapters:
        return f"chapter: {doc['chapter']!r} is not a chapter file stem (chapters/*.md) or {PACKAGE!r}"
    problem = _values_problem(doc["values"], chapters)
    if problem:
        return problem
    unknown = [key for key in _sources(doc["source"]) if key not in keys]
    return f"source: {unknown[0]!r} is not a key of references.bib" if unknown else None


def _sources(text):
    return tuple(k.strip() for k in text.split(",") if k.strip())


def read(errata_dir, root="."):
    """(entries, problems): every valid entry of the log in `errata_dir`, and
    one line per file that is not one (its path, then what is wrong)."""
    folder = Path(errata_dir)
    if not folder.exists():
        return [], []
    if not folder.is_dir():
        return [], [f"{folder}: is not a folder (the errata log is a folder of .toml files)"]
    try:  # a bless that committed and stopped: its entries and its ledger go in together
        transaction.complete(Path(root) / DEFAULT_LEDGER)
    except (OSError, ValueError) as exc:
        return [], [str(exc)]
    chapters, keys = set(chapter_stems(root)), bib_keys(root)
    entries, problems = [], []
    for path in sorted(folder.iterdir()):
        if path.name.startswith(".") or path.name == "README.md":
            continue
        if path.suffix != ".toml" or not path.is_file():
            problems.append(f"{path}: not an errata entry (the log holds only YYYY-MM-DD-slug.toml files)")
            continue
        try:
            doc = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{path}: cannot be read ({exc.__class__.__name__})")
            continue
        except tomllib.TOMLDecodeError as exc:
            problems.append(f"{path}: not valid TOML ({exc})")
            continue
        problem = _problem(path, doc, chapters, keys)
        if problem:
            problems.append(f"{path}: {problem}")
            continue
        entries.append(
            Entry(
                file=path.name,
                date=doc["date"],
                chapter=doc["chapter"],
                section=doc["section"].strip(),
                said=doc["said"].strip(),
                says=doc["says"].strip(),
                why=doc["why"].strip(),
                sources=_sources(doc["source"]),
                review=doc["review"].strip(),
                values=tuple(doc["values"]),
            )
        )
    return entries, problems


def load(errata_dir, root="."):
    """Every entry of the log; ValueError with one line per bad file."""
    entries, problems = read(errata_dir, root)
    if problems:
        raise ValueError("\n".join(problems))
    return entries


def covered_values(entries):
    """{"chapter:name": [file, ...]}: the entries that list each value."""
    covered = {}
    for entry in entries:
        for value in entry.values:
            covered.setdefault(value, []).append(entry.file)
    return covered


def _toml_string(text):
    # a JSON string is a TOML basic string (the same escapes: \" \\ \n \t \uXXXX)
    return json.dumps(str(text), ensure_ascii=False)


def entry_text(*, date, chapter, section, said, says, why, source="", review="", values=()):
    """The TOML text of one entry, in the log's field order."""
    lines = [
        f"{name} = {_toml_string(v)}"
        for name, v in zip(FIELDS[:-1], (date, chapter, section, said, says, why, source, review), strict=True)
    ]
    lines.append("values = [" + ", ".join(_toml_string(v) for v in values) + "]")
    return "\n".join(lines) + "\n"


def _slug(text, words=6):
    parts = re.findall(r"[a-z0-9]+", str(text).lower())[:words]
    return "-".join(parts) or "correction"


def entry_file(errata_dir, root=".", taken=(), **fields):
    """(path, text) of a new entry of the log, not yet written: the first
    free name YYYY-MM-DD-slug[-N].toml (neither in the folder nor in
    `taken`); ValueError when the entry would not be valid. The slug comes
    from `why`."""
    folder = Path(errata_dir)
    text = entry_text(**fields)
    stem = f"{fields['date']}-{_slug(fields['why'])}"
    taken = {Path(t).name for t in taken}
    for n in range(1, 1000):
        path = folder / (f"{stem}.toml" if n == 1 else f"{stem}-{n}.toml")
        problem = _problem(path, tomllib.loads(text), set(chapter_stems(root)), bib_keys(root))
        if problem:
            raise ValueError(f"{path}: {problem}")
        if path.name not in taken and not path.exists():
            return path, text
    raise ValueError(f"{folder}: too many entries named {stem}-N.toml")


def write_entry(errata_dir, root=".", **fields):
    """Add one entry to the log (a new file, never overwriting one) and
    return its path; ValueError when the entry would not be valid. The slug
    comes from `why`. (Bless writes its entries with the ledger, in one
    transaction: shardbook.book.expected.)"""
    folder = Path(errata_dir)
    folder.mkdir(parents=True, exist_ok=True)
    taken = set()
    while True:
        path, text = entry_file(folder, root, taken, **fields)
        try:
            with open(path, "x", encoding="utf-8") as fh:
                fh.write(text)
        except FileExistsError:
            taken.add(path.name)
            continue
        return path


# --- the appendix -------------------------------------------------------------


def _chapter_info(root, stem):
    """(label, title, text) of a chapter file, or None."""
    path = Path(root) / "chapters" / f"{stem}.md"
    if not path.exists():
        return None
    text = path.read_text(encoding="utf-8")
    label = re.search(r"^\(([A-Za-z0-9_-]+)\)=\s*\n# (.+)$", text, re.M)
    if not label:
        return None
    return label[1], label[2].strip(), text


def _bare_heading(text):
    """A heading's words without its number, emphasis or trailing colon."""
    text = re.sub(r"^[0-9]+(\.[0-9]+)*\.?\s+", "", text.strip())
    return re.sub(r"[*_`]", "", text).strip().rstrip(":").casefold()


def _section_label(chapter_text, section):
    """The MyST target on the line before the heading named `section`, or None."""
    want = _bare_heading(section)
    if not want:
        return None
    previous = ""
    for line in chapter_text.splitlines():
        heading = re.match(r"^#{2,6}\s+(.+)$", line)
        if heading and _bare_heading(heading[1]) == want:
            target = re.match(r"^\(([A-Za-z0-9_-]+)\)=$", previous.strip())
            return target[1] if target else None
        previous = line
    return None


def place(entry, root="."):
    """Where the correction stands, in MyST: the chapter (linked) and its
    section (linked when the section has a target)."""
    if entry.chapter == PACKAGE:
        where = "The `shardbook` package"
        if _chapter_info(root, "95_reference"):
            where = "The `shardbook` package ({ref}`ch-reference`)"
        return f"{where}, {entry.section}" if entry.section else where
    info = _chapter_info(root, entry.chapter)
    if info is None:
        return f"`{entry.chapter}`" + (f", {entry.section}" if entry.section else "")
    label, _title, text = info
    where = f"{{ref}}`{label}`"
    if entry.section:
        target = _section_label(text, entry.section)
        # a role's text cannot hold backticks: a heading's inline code is linked as plain words
        shown = entry.section.replace("`", "")
        where += f", {{ref}}`{shown} <{target}>`" if target else f", “{entry.section}”"
    return where


def _long_date(iso):
    day = datetime.date.fromisoformat(iso)
    return f"{day.day} {day.strftime('%B')} {day.year}"


def ordered(entries, root="."):
    """Newest first; within a day, in the book's chapter order (the package last)."""
    order = {stem: i for i, stem in enumerate(chapter_stems(root))}
    return sorted(
        entries,
        key=lambda e: (
            -datetime.date.fromisoformat(e.date).toordinal(),
            order.get(e.chapter, len(order)),
            e.file,
        ),
    )


# An entry that `make bless --reason` wrote lists every value it moved, "name printed “a”" one after
# another; the page shows the first few of a long list and says how many more the entry file holds
LONG_LIST = 8
SHOWN_OF_LONG_LIST = 3
_BLESSED_FRAGMENT = re.compile(r"^\S+ (printed|prints) “")


def _shortened(text, file):
    """`text` itself, or the first SHOWN_OF_LONG_LIST fragments of a long
    list of blessed values and how many more the entry file holds."""
    fragments = text.rstrip(".").split("; ")
    if len(fragments) <= LONG_LIST or not all(_BLESSED_FRAGMENT.match(f) for f in fragments):
        return text
    rest = len(fragments) - SHOWN_OF_LONG_LIST
    return "; ".join(fragments[:SHOWN_OF_LONG_LIST]) + f"; and {rest} more (entry `{file}`)."


# The page shows this many of the newest entries in full, and the earlier ones a line each (where,
# when, why in brief, the entry's file, which names the sources): at 2.1 KB of HTML an entry, the
# page's first visit reached 955 KB of its 1 MB budget with 246 entries in full
FULL_ENTRIES = 100
BRIEF_WHY_CHARS = 160


def _brief(text, limit=BRIEF_WHY_CHARS):
    """`text`'s first sentence, cut at a word before `limit` characters (an ellipsis marks the cut)."""
    first = re.split(r"(?<=\.)\s+(?=[A-Z(])", text.strip(), maxsplit=1)[0]
    if len(first) <= limit:
        return first
    cut = first[:limit].rsplit(" ", 1)[0]
    if cut.count("`") % 2:  # never inside a code span or a role's target: cut before it
        cut = re.sub(r"\{[\w:-]+\}$", "", cut[: cut.rindex("`")])
    return cut.rstrip(",;: ") + "…"


def _brief_line(entry, root="."):
    """An earlier entry in one line: its date, where it stands, why in brief and its file (which
    names its sources: a citation's tooltip carries the whole reference, some 600 bytes)."""
    return f"- {_long_date(entry.date)}, {place(entry, root)}: {_brief(entry.why)} (`{ERRATA_DIR}/{entry.file}`)"


def markdown(entries, root=".", full=FULL_ENTRIES):
    """The appendix's body in MyST (myst-nb parses a cell's Markdown output as
    MyST): one heading per date, newest first, one entry per correction with
    where it stands, what the book said, what it says now, why, and its
    source as a citation; past the newest `full` entries, one line each
    under "Earlier corrections". The nitpicky build fails on a target or
    citation key that does not exist."""
    if not entries:
        return "The log has no entries yet."
    _validate.count("full", full)
    newest_first = ordered(entries, root)
    shown, earlier = newest_first[:full], newest_first[full:]
    lines = []
    current = None
    for entry in shown:
        if entry.date != current:
            current = entry.date
            lines += [f"## {_long_date(entry.date)}", ""]
        lines.append(place(entry, root))
        lines.append(f": **Said:** {_shortened(entry.said, entry.file)}")
        lines.append("")
        lines.append(f"  **Says now:** {_shortened(entry.says, entry.file)}")
        lines.append("")
        why = f"  **Why:** {entry.why}"
        if entry.sources:
            why += f" Source: {{cite:p}}`{','.join(entry.sources)}`."
        lines.append(why)
        if entry.review or entry.values:
            lines.append("")
            notes = []
            if entry.review:
                notes.append(f"review item {entry.review}")
            if len(entry.values) > LONG_LIST:
                notes.append(f"{len(entry.values)} ledger values, listed in the entry")
            elif entry.values:
                noun = "value" if len(entry.values) == 1 else "values"
                notes.append(f"ledger {noun} " + ", ".join(f"`{v}`" for v in entry.values))
            note = "; ".join(notes)
            lines.append(f"  *{note[0].upper()}{note[1:]}; entry `{entry.file}`.*")
        else:
            lines.append("")
            lines.append(f"  *Entry `{entry.file}`.*")
        lines.append("")
    if earlier:
        lines += [
            "## Earlier corrections",
            "",
            f"The {len(earlier)} corrections before these, newest first, one line each; each entry's file in "
            f"the repository's `{ERRATA_DIR}/` folder holds what the book said, what it says now, the whole "
            "reason and its sources.",
            "",
        ]
        lines += [_brief_line(entry, root) for entry in earlier]
    return "\n".join(lines).rstrip() + "\n"


# --- command line ---------------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m shardbook.book.errata", description="Check or list the errata log."
    )
    parser.add_argument("command", choices=["check", "list"])
    parser.add_argument("--root", default=".", help="the book's folder")
    parser.add_argument("--errata", default=None, help="the log's folder (default: ROOT/errata)")
    args = parser.parse_args(argv)
    if not (Path(args.root) / "_toc.yml").is_file():
        print(f"errata: --root: must be the book's folder (one holding _toc.yml), got {args.root!r}", file=sys.stderr)
        return 2
    folder = Path(args.errata) if args.errata else Path(args.root) / ERRATA_DIR
    if not folder.is_dir():
        print(f"errata: --errata: no folder {str(folder)!r}", file=sys.stderr)
        return 2
    entries, problems = read(folder, args.root)
    for line in problems:
        print(f"errata: {line}", file=sys.stderr)
    if problems:
        return 2
    if args.command == "list":
        for entry in ordered(entries, args.root):
            print(f"{entry.date}  {entry.chapter:22}  {entry.section or '-'}: {entry.says}")
        return 0
    print(f"errata: {len(entries)} entries in {folder}, all valid")
    return 0


if __name__ == "__main__":
    _cli.exit_with(main)
