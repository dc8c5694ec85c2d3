"""The expected-numbers file and the build it is checked against: collect
every ledger record (a number, or a glued phrase: words compared by their
exact text) from the executed notebooks, compare them with
tests/expected_numbers.json, bless a reviewed change, and refuse a build that
did not finish or is older than its sources (the build fingerprint).

    python -m shardbook.book.expected check   # compare the build with tests/expected_numbers.json
    python -m shardbook.book.expected bless   # rewrite it from the build; prints every entry it rewrites
    python -m shardbook.book.expected bless --reason "why"   # ... and records a changed text in errata/
    python -m shardbook.book.expected show    # list what the build shows

Bless keeps the stored entry of a value that is still within its tolerance
with the same text (a reference never creeps), lists every entry it does
rewrite, and refuses to change a value's printed text unless an entry of the
errata log (shardbook.book.errata) lists the value or `--reason` is given,
which it records as a new entry of the log. The file keeps the names of the
entries its values already reflect ("errata_applied"): an entry covers the
changes it describes, not every later change of the same value.

Standard library only.
"""

import argparse
import datetime
import hashlib
import json
import math
import os
import re
import sys
from pathlib import Path

from .. import _cli, _validate
from ..ledger import _NAME_RE, META_KEY
from . import errata, transaction

_CHAPTER_RE = re.compile(r"^[0-9]{2}_[a-z0-9_]+$")
_NON_FINITE_TEXT = {"inf": math.inf, "infinity": math.inf, "-inf": -math.inf, "-infinity": -math.inf, "nan": math.nan}

# --- after the build -------------------------------------------------------


def _outputs_of(path):
    """Outputs of an executed notebook, or of myst-nb's `<chapter>.glue.json`
    (myst-nb moves glued outputs there when it writes the build)."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(
            f"{path}: cannot be read as JSON ({exc.__class__.__name__}); rebuild with `make book`"
        ) from None
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: not a notebook or glue file; rebuild with `make book`")
    if path.name.endswith(".glue.json"):
        outputs = list(doc.values())
    else:
        cells = doc.get("cells", [])
        outputs = [out for cell in cells if isinstance(cell, dict) for out in cell.get("outputs", []) or []]
    return [out for out in outputs if isinstance(out, dict)]


def is_finite_number(value):
    """True for an int or float (not a bool) that is finite."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an int beyond a float's range
        return False


def _built_value(value):
    """A recorded value as a number: the kernel's JSON cleaning writes inf and
    NaN as the strings "inf" and "nan"; they come back as floats, which
    compare reports as moved and bless refuses."""
    if isinstance(value, str) and value.strip().lower() in _NON_FINITE_TEXT:
        return _NON_FINITE_TEXT[value.strip().lower()]
    return value


def collect(executed_dir, chapters=None):
    """Every ledger record in the executed notebooks under `executed_dir`,
    sorted by (chapter, name). `chapters` (stems), if given, keeps only
    those chapters: the outputs of a page removed from _toc.yml stay in the
    build folder, but no longer count."""
    root = Path(executed_dir)
    files = sorted(root.rglob("*.ipynb")) + sorted(root.rglob("*.glue.json"))
    if not files:
        raise FileNotFoundError(f"no executed notebooks under {root}; build the book first (make book)")
    keep = None if chapters is None else set(chapters)
    found = {}
    for path in files:
        chapter = path.name.split(".")[0]
        if keep is not None and chapter not in keep:
            continue
        for output in _outputs_of(path):
            metadata = output.get("metadata")
            entries = metadata.get(META_KEY, []) if isinstance(metadata, dict) else []
            for entry in entries if isinstance(entries, list) else [entries]:
                missing = [
                    k
                    for k in ("name", "value", "unit", "text", "rel_tol")
                    if not isinstance(entry, dict) or k not in entry
                ]
                if missing:
                    raise ValueError(
                        f"{path}: a ledger record without {', '.join(missing)} ({entry!r:.80}); rebuild with `make book`"
                    )
                key = (chapter, entry["name"])
                item = {"chapter": chapter}
                item.update({k: entry[k] for k in ("name", "value", "unit", "text", "rel_tol")})
                if entry.get("phrase"):
                    item["phrase"] = True  # its value is its text: "inf" stays words
                else:
                    item["value"] = _built_value(item["value"])
                if entry.get("measured"):
                    item["measured"] = True
                if key in found and not _same_record(found[key], item):
                    raise ValueError(f"ledger: {chapter} records {entry['name']!r} twice, with different values")
                found[key] = item
    return [found[k] for k in sorted(found, key=lambda k: (str(k[0]), str(k[1])))]


def _same_record(a, b):
    if a.keys() != b.keys():
        return False
    return all(a[k] == b[k] or (k == "value" and a[k] != a[k] and b[k] != b[k]) for k in a)  # NaN == NaN here


def is_phrase(entry):
    """True for a record of glued words (ledger.show_phrase): its value is
    its text, compared exactly, never as a number."""
    return entry.get("phrase") is True


def _phrase_change(e, g):
    """Why the phrase (or the value that became or stopped being one) `g`
    differs from the stored `e`, or None."""
    if is_phrase(e) != is_phrase(g):
        return "now a phrase" if is_phrase(g) else "no longer a phrase"
    return "text changed" if e["text"] != g["text"] else None


def _relative_change(ev, gv):
    return abs(gv - ev) / abs(ev) if ev else abs(gv)


def compare(expected, got):
    """Rows (chapter, name, expected, got, relative change, status) for every
    value that moved beyond its tolerance, disappeared, or is new. A
    measured value (a step time) must be there, but may take any value. A
    value that is not a finite number (inf, NaN) has moved, whatever it was.
    A phrase has changed when its text differs by a character."""
    exp = {(e["chapter"], e["name"]): e for e in expected}
    cur = {(g["chapter"], g["name"]): g for g in got}
    rows = []
    for key in sorted(set(exp) | set(cur)):
        e, g = exp.get(key), cur.get(key)
        if g is None:
            rows.append((*key, e["text"], "-", "", "missing"))
        elif e is None:
            finite = is_phrase(g) or is_finite_number(g["value"])
            rows.append((*key, "-", g["text"], "" if finite else "not finite", "new (no expected entry)"))
        elif is_phrase(e) or is_phrase(g):
            why = _phrase_change(e, g)
            if why:
                rows.append((*key, e["text"], g["text"], "", why))
        elif not is_finite_number(g["value"]):
            rows.append((*key, e["text"], g["text"], "not finite", "moved"))
        elif e.get("measured") or g.get("measured"):
            continue
        else:
            ev, gv = e["value"], g["value"]
            rel = _relative_change(ev, gv)
            if rel > e["rel_tol"] or e["text"] != g["text"]:
                status = "moved" if rel > e["rel_tol"] else "text changed"
                rows.append((*key, e["text"], g["text"], f"{(gv - ev) / ev:+.3%}" if ev else "", status))
    return rows


def format_rows(rows, header=("chapter", "name", "expected", "got", "rel. change", "status")):
    table_ = [header] + [tuple(str(c) for c in r) for r in rows]
    widths = [max(len(r[i]) for r in table_) for i in range(len(header))]
    out = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table_]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


_RECORD_KEYS = ("chapter", "name", "value", "unit", "text", "rel_tol")
_OPTIONAL_KEYS = ("measured", "phrase")


def record_problem(entry):
    """What is wrong with one expected-values record, or None: every field
    present and of its type, the value a finite number (a phrase's: its
    text, with no unit and tolerance 0), the tolerance a finite number in
    [0, 1)."""
    if not isinstance(entry, dict):
        return f"must be an object with {', '.join(_RECORD_KEYS)}, got {type(entry).__name__}"
    missing = [k for k in _RECORD_KEYS if k not in entry]
    if missing:
        return f"missing {', '.join(missing)}"
    unknown = sorted(set(entry) - set(_RECORD_KEYS) - set(_OPTIONAL_KEYS))
    if unknown:
        return f"unknown field {', '.join(map(repr, unknown))}"
    if not isinstance(entry["chapter"], str) or not _CHAPTER_RE.match(entry["chapter"]):
        return f"chapter: must be a chapter file stem such as '07_choosing_a_mesh', got {entry['chapter']!r}"
    if not isinstance(entry["name"], str) or not _NAME_RE.match(entry["name"]):
        return f"name: must be lower-case letters, digits and underscores, got {entry['name']!r}"
    problem = _value_problem(entry)
    if problem:
        return problem
    for field in ("unit", "text"):
        if not isinstance(entry[field], str):
            return f"{field}: must be a string, got {entry[field]!r}"
    tol = entry["rel_tol"]
    if not is_finite_number(tol) or not 0 <= tol < 1:
        return f"rel_tol: must be a finite number in [0, 1), got {tol!r}"
    if "measured" in entry and entry["measured"] is not True:
        return f"measured: must be true when present, got {entry['measured']!r}"
    return None


def _value_problem(entry):
    """What is wrong with a stored value, or None: a finite number, or for a
    phrase its text (one copy of the words could drift from the other), with
    no unit and no tolerance."""
    if "phrase" not in entry:
        return None if is_finite_number(entry["value"]) else f"value: must be a finite number, got {entry['value']!r}"
    if entry["phrase"] is not True:
        return f"phrase: must be true when present, got {entry['phrase']!r}"
    if "measured" in entry:
        return "measured: a phrase is words the page prints, never a measurement"
    if entry["value"] != entry["text"] or not isinstance(entry["value"], str):
        return f"value: a phrase's value must be its text, got {entry['value']!r} for {entry['text']!r}"
    if entry["unit"] != "" or entry["rel_tol"] != 0:
        return f"unit, rel_tol: a phrase has no unit and tolerance 0, got {entry['unit']!r} and {entry['rel_tol']!r}"
    return None


def load(path):
    """The expected values, checked: ValueError in one line naming the file
    (and the entry) when it is missing, a folder, not JSON, not a list of
    ledger records, or when a record has a field missing, of the wrong type,
    a value or tolerance that is not a finite number, or a second entry for
    the same value."""
    path = Path(path)
    doc = _validate.read_json(
        path,
        missing="`make bless` writes it from a finished build",
        remedy="restore it from git, or delete it and run `make bless`",
        folder="the expected-values file",
    )
    values = doc.get("values") if isinstance(doc, dict) else None
    if not isinstance(values, list) or not all(
        isinstance(v, dict) and {"chapter", "name", "value", "text", "rel_tol"} <= v.keys() for v in values
    ):
        raise ValueError(
            f"{path}: not an expected-values file (a JSON object whose 'values' is a list of records "
            f"with {', '.join(sorted(_RECORD_KEYS))}); restore it from git, or delete it and run `make bless`"
        )
    seen = {}
    for i, entry in enumerate(values):
        where = f"values[{i}]"
        if isinstance(entry.get("chapter"), str) and isinstance(entry.get("name"), str):
            where += f" ({entry['chapter']}:{entry['name']})"
        problem = record_problem(entry)
        if problem is None:
            key = (entry["chapter"], entry["name"])
            if key in seen:
                problem = f"a second entry for this value (the first is values[{seen[key]}])"
            seen[key] = i
        if problem:
            raise ValueError(f"{path}: {where}: {problem}; restore it from git, or correct the entry by hand")
    return values


def load_applied(path):
    """The errata entries (file names) the stored values already reflect:
    bless writes them, and an entry covers a changed text only once."""
    doc = _validate.read_json(path, missing="", remedy="restore it from git")
    applied = doc.get(APPLIED_KEY, []) if isinstance(doc, dict) else []
    if not isinstance(applied, list) or not all(isinstance(a, str) for a in applied):
        raise ValueError(f"{path}: {APPLIED_KEY}: must be a list of errata file names; restore it from git")
    return applied


APPLIED_KEY = "errata_applied"


def ledger_text(path, values, errata_applied=None):
    """The text of the expected-values file for `values` (ValueError naming
    the entry, and `path`, if a value is not a finite number) and the
    errata entries they reflect (see load_applied)."""
    doc = {
        "about": "Expected values of every number and glued phrase the book shows. Rewrite with `make bless` after review.",
        "values": values,
    }
    if errata_applied:
        doc[APPLIED_KEY] = sorted(errata_applied)
    try:
        return json.dumps(doc, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
    except ValueError:
        bad = next(
            f"{v.get('chapter')}:{v.get('name')}"
            for v in values
            if not (is_phrase(v) or is_finite_number(v.get("value"))) or not is_finite_number(v.get("rel_tol"))
        )
        raise ValueError(f"{bad}: not a finite number; nothing written to {path}") from None


def write(path, values, errata_applied=None):
    """Write atomically, keeping the file's mode: a hidden temporary file
    beside it (`.NAME.XXXXXXXX.tmp`, which .gitignore covers), removed if
    anything stops the write, then an atomic replace. A value that is not a
    finite number is never written (ValueError). `errata_applied`: the
    errata entries the values reflect (see load_applied)."""
    path = Path(path)
    text = ledger_text(path, values, errata_applied)
    try:
        transaction.commit_one(path, text)
    except OSError as exc:
        raise ValueError(_unwritable(path, exc)) from None


def _unwritable(path, exc):
    return f"{path}: cannot be written ({exc.strerror or exc.__class__.__name__}); nothing changed"


# --- bless -----------------------------------------------------------------


def _differs(e, g):
    """Why the build's record `g` would rewrite the stored `e`, or None when
    the stored entry stays (same text, unit, tolerance, kind, and a value
    within the tolerance: the stored number is kept, so it never creeps; a
    phrase stays while its text does)."""
    if is_phrase(e) or is_phrase(g):
        return _phrase_change(e, g)
    if bool(e.get("measured")) != bool(g.get("measured")):
        return "now measured" if g.get("measured") else "no longer measured"
    if e.get("measured"):
        return None  # a measurement of the machine that built the page: kept as stored
    if not is_finite_number(g["value"]):
        return "moved"
    rel = _relative_change(e["value"], g["value"])
    if rel > e["rel_tol"]:
        return "moved"
    if e["text"] != g["text"]:
        return "text changed"
    if e["unit"] != g["unit"]:
        return "unit changed"
    if e["rel_tol"] != g["rel_tol"]:
        return "tolerance changed"
    return None


def plan_bless(expected, got, drop=()):
    """What bless would write: (values, rewritten, text_changes, problems).

    `rewritten` has a row (chapter, name, stored text, new text, rel.
    change, why) for every entry written differently from the stored one
    (new, moved, text, unit or tolerance changed, dropped); `text_changes`
    the (chapter, name, old text, new text) of every computed value whose
    printed text changes; `problems` one line each for what stops the bless
    (a value that is not a finite number, a missing value not dropped, a
    --drop that names nothing missing)."""
    exp = {(e["chapter"], e["name"]): e for e in expected}
    cur = {(g["chapter"], g["name"]): g for g in got}
    drop = set(drop)
    values, rewritten, text_changes, problems, dropped = [], [], [], [], set()
    for key in sorted(set(exp) | set(cur)):
        e, g = exp.get(key), cur.get(key)
        label = f"{key[0]}:{key[1]}"
        if g is None:
            names = {"all", key[1], label} & drop
            if names:
                dropped |= names
                rewritten.append((*key, e["text"], "-", "", "dropped"))
            else:
                problems.append(
                    f"{label}: expected but not in the build; if it was removed on purpose, "
                    f"bless again with --drop {key[1]} (or --drop all)"
                )
            continue
        if not is_phrase(g) and not is_finite_number(g["value"]):
            problems.append(
                f"{label}: the build shows {g['text']!r}, value {g['value']!r}, not a finite number; fix the cell that computes it"
            )
            continue
        if e is None:
            values.append(g)
            rewritten.append((*key, "-", g["text"], "", "new"))
            continue
        why = _differs(e, g)
        if why is None:
            values.append(e)
            continue
        values.append(g)
        numbers = not (is_phrase(e) or is_phrase(g))  # a phrase changes by its text, not by a ratio
        rel = f"{(g['value'] - e['value']) / e['value']:+.3%}" if numbers and e["value"] else ""
        rewritten.append((*key, e["text"], g["text"], rel, why))
        if e["text"] != g["text"] and not (e.get("measured") or g.get("measured")):
            text_changes.append((*key, e["text"], g["text"]))
    unused = sorted(drop - dropped - {"all"})
    for name in unused:
        problems.append(f"--drop {name}: no expected value of that name is missing from the build")
    return values, rewritten, text_changes, problems


def _reason_entries(errata_dir, root, reason, uncovered):
    """(path, text) of one new errata entry per chapter for the changed
    texts no entry covered (written with the ledger, by bless)."""
    today = datetime.date.today().isoformat()
    by_chapter = {}
    for chapter, name, old, new in uncovered:
        by_chapter.setdefault(chapter, []).append((name, old, new))
    files = []
    for chapter, changes in by_chapter.items():
        files.append(
            errata.entry_file(
                errata_dir,
                root,
                [path for path, _ in files],
                date=today,
                chapter=chapter,
                section="",
                said="; ".join(f"{name} printed “{old}”" for name, old, _ in changes) + ".",
                says="; ".join(f"{name} prints “{new}”" for name, _, new in changes) + ".",
                why=reason,
                source="",
                review="",
                values=[f"{chapter}:{name}" for name, _, _ in changes],
            )
        )
    return files


def bless(expected_path, got, *, root=".", errata_dir=None, drop=(), reason=None, out=None, err=None, _at_commit=None):
    """Rewrite `expected_path` from the build's records `got` (see the
    module's docstring); returns the exit status (0 written, 2 refused).
    One bless at a time (a lock in the errata folder): a second waits, then
    sees what the first wrote. The ledger and any errata entry it records
    are written in one transaction (shardbook.book.transaction): both or
    neither, a bless interrupted after it committed completed by the next
    bless, check or reading of the log."""
    out = out or sys.stdout
    err = err or sys.stderr
    expected_path = Path(expected_path)
    errata_dir = Path(errata_dir) if errata_dir else Path(root) / errata.ERRATA_DIR

    def waiting():
        print(f"ledger: another bless holds {transaction.lock_for(expected_path)}; waiting for it to finish", file=err)

    try:
        with transaction.locked(transaction.lock_for(expected_path), waiting):
            return _bless_locked(expected_path, got, root, errata_dir, drop, reason, out, err, _at_commit)
    except OSError as exc:
        raise ValueError(_unwritable(expected_path, exc)) from None


def _bless_locked(expected_path, got, root, errata_dir, drop, reason, out, err, at_commit):
    errata_debris = Path(errata_dir).glob(".*.toml.*.tmp") if Path(errata_dir).is_dir() else ()
    if transaction.complete_locked(expected_path, errata_debris) == "finished":
        print("ledger: completed an interrupted bless (its ledger and errata entries, together)", file=out)
    expected = load(expected_path) if expected_path.exists() else []
    applied = set(load_applied(expected_path)) if expected_path.exists() else set()
    values, rewritten, text_changes, problems = plan_bless(expected, got, drop)
    entries, errata_problems = errata.read(errata_dir, root)
    problems += errata_problems
    # an entry covers a changed text until a bless has applied it: the next
    # change of the same value needs an entry of its own
    covered = errata.covered_values([e for e in entries if e.file not in applied])
    uncovered = [c for c in text_changes if f"{c[0]}:{c[1]}" not in covered]
    if uncovered and not reason:
        problems += [
            f"{chapter}:{name}: its printed text would change from “{old}” to “{new}”, and no entry of {errata_dir} "
            'lists it in values; add one (format in errata/README.md), or give the reason: make bless REASON="why" (bless --reason "why")'
            for chapter, name, old, new in uncovered
        ]
    if problems:
        for line in problems:
            print(f"ledger: bless refused, nothing written: {line}", file=err)
        return 2
    recorded = _reason_entries(errata_dir, root, reason, uncovered) if uncovered else []
    text = ledger_text(expected_path, values, {e.file for e in entries} | {p.name for p, _ in recorded})
    try:
        if recorded:
            errata_dir.mkdir(parents=True, exist_ok=True)
        # the ledger first: a bless stopped between the renames never shows an entry its ledger lacks
        transaction.commit(transaction.journal_for(expected_path), [(expected_path, text), *recorded], at_commit)
    except transaction.Committed as exc:
        raise ValueError(
            f"{expected_path}: the bless is committed but not complete ({exc}); the next bless or check completes it"
        ) from None
    except OSError as exc:
        raise ValueError(_unwritable(expected_path, exc)) from None
    if rewritten:
        print(format_rows(rewritten, ("chapter", "name", "stored", "written", "rel. change", "why")), file=out)
    for path, _ in recorded:
        print(f"ledger: recorded the reason in {path}", file=out)
    kept = len(values) - sum(1 for r in rewritten if r[5] != "dropped")
    print(
        f"ledger: blessed {len(values)} values into {expected_path} "
        f"({len(rewritten)} rewritten, {kept} kept as stored)",
        file=out,
    )
    return 0


# --- build fingerprint -----------------------------------------------------

FINGERPRINT_FILE = ".build-fingerprint"
_FINGERPRINT_GLOBS = (
    "_toc.yml",
    "_config.yml",
    "chapters/*.md",
    "code/shardbook/**/*.py",
    "hlo_artifacts/*/meta.json",
    "hlo_artifacts/*/tpu/meta.json",  # the TPU captures (shardbook.hlo.tpu_capture)
    "code/shardbook/data/*.json",  # measurements on real chips (make measure), which chapters plot
    "errata/*.toml",  # the errata appendix is generated from the log
    # every other input of a page: the citations' text, the scripts and styles the site
    # copies (the live pages' and the planner's among them), what npm installs for it
    # (Pyodide, KaTeX) and the pinned Python packages that build it, the favicon
    "references.bib",
    "code/shardbook/**/*.js",
    "code/shardbook/**/*.cjs",
    "code/shardbook/**/*.css",
    "code/shardbook/**/*.json",
    "package.json",
    "package-lock.json",
    "requirements.lock",
    "figures/*",
)


def source_fingerprint(root):
    """sha256 over the sources a build reads (chapters, table of contents,
    config, the package and its static files, the artifacts' meta.json, the
    chips' measurements, the errata log, the bibliography, the npm and Python locks, the figures):
    equal fingerprints mean the build saw these exact files."""
    root = Path(root)
    digest = hashlib.sha256()
    for pattern in _FINGERPRINT_GLOBS:
        for path in sorted(root.glob(pattern)):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def toc_chapters(root):
    """The chapter stems _toc.yml lists (chapters/NN_slug entries)."""
    toc = Path(root) / "_toc.yml"
    return re.findall(r"^\s*(?:-\s*file|root):\s*chapters/([0-9]{2}_[a-z0-9_]+)\s*$", toc.read_text(), re.M)


def check_build(executed_dir, root="."):
    """Refuse a build that cannot be trusted: one that did not finish (no
    fingerprint), one made from older sources than the working tree, or one
    missing a chapter of _toc.yml. Returns None; raises ValueError saying
    what to do."""
    executed = Path(executed_dir)
    stamp = executed.parent / FINGERPRINT_FILE
    if not stamp.exists():
        raise ValueError(
            f"{stamp}: no record of a finished build (the last build failed or never ran); run `make book`"
        )
    if stamp.read_text().strip() != source_fingerprint(root):
        raise ValueError(
            f"{stamp}: the build is older than the sources (a chapter, the package or its static files, the "
            "bibliography, the config, the locks, the artifacts or the errata log changed since it started); "
            "run `make book`"
        )
    built = {p.name.split(".")[0] for p in list(executed.rglob("*.ipynb")) + list(executed.rglob("*.glue.json"))}
    missing = [c for c in toc_chapters(root) if c not in built]
    if missing:
        raise ValueError(
            f"{executed}: the build has no output for {', '.join(missing)} (listed in _toc.yml); run `make book`"
        )
    orphans = orphaned_pages(executed.parent, root)
    if orphans:
        raise ValueError(
            f"{executed.parent / 'html'}: holds pages of chapters no longer in _toc.yml "
            f"({', '.join(orphans)}); run `make book`, which removes them"
        )


def orphaned_pages(build, root="."):
    """The chapter stems whose page is in the build's site (html/chapters/)
    but not in _toc.yml: a chapter taken out of the book whose old page a
    server would still serve."""
    pages = Path(build) / "html" / "chapters"
    listed = set(toc_chapters(root))
    return sorted(p.stem for p in pages.glob("*.html") if p.stem not in listed) if pages.is_dir() else []


def remove_orphans(build, root="."):
    """Remove what the build holds of chapters no longer in _toc.yml: their
    pages, page sources and executed notebooks (called when an HTML build
    finishes). Returns the stems removed."""
    build = Path(build)
    orphans = orphaned_pages(build, root)
    for stem in orphans:
        pages = [build / "html" / "chapters", build / "html" / "_sources" / "chapters"]
        found = [p for folder in pages for p in folder.glob(f"{stem}.*")]
        found += (build / "jupyter_execute").rglob(f"{stem}.*")  # where collect() reads notebooks
        for path in found:
            if path.is_file():
                path.unlink()
    return orphans


# --- command line ----------------------------------------------------------

REASON_ENV = "SHARDBOOK_BLESS_REASON"  # what `make bless REASON="..."` sets
DROP_ENV = "SHARDBOOK_BLESS_DROP"  # what `make bless DROP="name ..."` sets: names split at spaces


def _bless_options_refusal(args):
    """Why --drop or --reason cannot be used as given, or None."""
    if args.command != "bless" and (args.drop or args.reason is not None):
        return "--drop and --reason go with bless only"
    if args.reason is not None and not args.reason.strip():
        return "--reason: must say why the printed values change (it is recorded in the errata log)"
    return None


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m shardbook.book.expected",
        description="Check the built book's numbers against tests/expected_numbers.json.",
    )
    parser.add_argument("command", choices=["check", "bless", "show"])
    parser.add_argument("--executed", default="_build/jupyter_execute", help="folder of executed notebooks")
    parser.add_argument("--expected", default="tests/expected_numbers.json", help="committed expected values")
    parser.add_argument("--root", default=".", help="the book's folder (for _toc.yml and the build fingerprint)")
    parser.add_argument("--errata", default=None, help="the errata log (default: ROOT/errata)")
    parser.add_argument(
        "--drop",
        action="append",
        default=[],
        metavar="NAME",
        help="with bless: let this expected value disappear (repeat for each; 'all' for every one)",
    )
    parser.add_argument(
        "--reason",
        default=None,
        help=f"with bless: why printed texts change; recorded as a new entry of the errata log (default: ${REASON_ENV})",
    )
    args = parser.parse_args(argv)
    if args.reason is None and args.command == "bless":
        args.reason = os.environ.get(REASON_ENV) or None  # `make bless REASON="..."`
        args.drop += os.environ.get(DROP_ENV, "").split()  # `make bless DROP="..."`
    refusal = _bless_options_refusal(args)
    if refusal:
        print(f"ledger: {refusal}", file=sys.stderr)
        return 2
    try:
        if not (Path(args.root) / "_toc.yml").is_file():
            raise ValueError(f"--root {args.root}: no _toc.yml there; run from the book's folder or give its path")
        if not Path(args.executed).is_dir():
            raise ValueError(f"--executed {args.executed}: no such folder; build the book first (make book)")
        if args.command != "show":
            check_build(args.executed, args.root)
        got = collect(args.executed, toc_chapters(args.root))
        if args.command == "show":
            print(format_rows([(g["chapter"], g["name"], "", g["text"], "", "") for g in got]))
            return 0
        if args.command == "bless":
            return bless(args.expected, got, root=args.root, errata_dir=args.errata, drop=args.drop, reason=args.reason)
        transaction.complete(args.expected)  # a bless committed, then stopped: complete it first
        expected = load(args.expected)
    except BrokenPipeError:
        raise  # the reader's pipe closed (| head): _cli ends quietly
    except OSError as exc:
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        print(f"ledger: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"ledger: {exc}", file=sys.stderr)
        return 2
    rows = compare(expected, got)
    if rows:
        print(format_rows(rows))
        print(f"\nledger: {len(rows)} of {len(got)} values differ from {args.expected}.")
        print("If the change is intended, review it and run `make bless`.")
        return 1
    print(f"ledger: all {len(got)} values match {args.expected}")
    return 0


if __name__ == "__main__":
    _cli.exit_with(main)
