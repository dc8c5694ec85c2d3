"""The expected-numbers file and the build it is checked against: collect
every ledger record from the executed notebooks, compare them with
tests/expected_numbers.json, bless a reviewed change, and refuse a build that
did not finish or is older than its sources (the build fingerprint).

    python -m shardbook.book.expected check   # compare the build with tests/expected_numbers.json
    python -m shardbook.book.expected bless   # rewrite it from the build; prints what changed
    python -m shardbook.book.expected show    # list what the build shows

Standard library only.
"""

import argparse
import hashlib
import json
import os
import re
import sys
import tempfile
from pathlib import Path

from .. import _validate
from ..ledger import META_KEY

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
        return list(doc.values())
    return [out for cell in doc.get("cells", []) for out in cell.get("outputs", [])]


def collect(executed_dir):
    """Every ledger record in the executed notebooks under `executed_dir`,
    sorted by (chapter, name)."""
    root = Path(executed_dir)
    files = sorted(root.rglob("*.ipynb")) + sorted(root.rglob("*.glue.json"))
    if not files:
        raise FileNotFoundError(f"no executed notebooks under {root}; build the book first (make book)")
    found = {}
    for path in files:
        chapter = path.name.split(".")[0]
        for output in _outputs_of(path):
            for entry in output.get("metadata", {}).get(META_KEY, []):
                key = (chapter, entry["name"])
                item = {"chapter": chapter}
                item.update({k: entry[k] for k in ("name", "value", "unit", "text", "rel_tol")})
                if entry.get("measured"):
                    item["measured"] = True
                if key in found and found[key] != item:
                    raise ValueError(f"ledger: {chapter} records {entry['name']!r} twice, with different values")
                found[key] = item
    return [found[k] for k in sorted(found)]


def compare(expected, got):
    """Rows (chapter, name, expected, got, relative change, status) for every
    value that moved beyond its tolerance, disappeared, or is new. A
    measured value (a step time) must be there, but may take any value."""
    exp = {(e["chapter"], e["name"]): e for e in expected}
    cur = {(g["chapter"], g["name"]): g for g in got}
    rows = []
    for key in sorted(set(exp) | set(cur)):
        e, g = exp.get(key), cur.get(key)
        if g is None:
            rows.append((*key, e["text"], "-", "", "missing"))
        elif e is None:
            rows.append((*key, "-", g["text"], "", "new (no expected entry)"))
        elif e.get("measured") or g.get("measured"):
            continue
        else:
            ev, gv = e["value"], g["value"]
            rel = abs(gv - ev) / abs(ev) if ev else abs(gv)
            if rel > e["rel_tol"] or e["text"] != g["text"]:
                status = "moved" if rel > e["rel_tol"] else "text changed"
                rows.append((*key, e["text"], g["text"], f"{(gv - ev) / ev:+.3%}" if ev else "", status))
    return rows


def format_rows(rows):
    header = ("chapter", "name", "expected", "got", "rel. change", "status")
    table_ = [header] + [tuple(str(c) for c in r) for r in rows]
    widths = [max(len(r[i]) for r in table_) for i in range(len(header))]
    out = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table_]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


_RECORD_KEYS = {"chapter", "name", "value", "text", "rel_tol"}


def load(path):
    """The expected values, checked: ValueError naming the file when it is
    missing, a folder, not JSON, or not a list of ledger records."""
    path = Path(path)
    doc = _validate.read_json(
        path,
        missing="`make bless` writes it from a finished build",
        remedy="restore it from git, or delete it and run `make bless`",
        folder="the expected-values file",
    )
    values = doc.get("values") if isinstance(doc, dict) else None
    if not isinstance(values, list) or not all(isinstance(v, dict) and _RECORD_KEYS <= v.keys() for v in values):
        raise ValueError(
            f"{path}: not an expected-values file (a JSON object whose 'values' is a list of records "
            f"with {', '.join(sorted(_RECORD_KEYS))}); restore it from git, or delete it and run `make bless`"
        )
    return values


def write(path, values):
    """Write atomically: a temporary file in the same folder, then replace."""
    path = Path(path)
    doc = {
        "about": "Expected values of every number the book shows. Rewrite with `make bless` after review.",
        "values": values,
    }
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".ledger-", suffix=".json")
    with os.fdopen(fd, "w") as fh:
        json.dump(doc, fh, indent=1, ensure_ascii=False)
        fh.write("\n")
    os.replace(tmp, path)


# --- build fingerprint -----------------------------------------------------

FINGERPRINT_FILE = ".build-fingerprint"
_FINGERPRINT_GLOBS = ("_toc.yml", "_config.yml", "chapters/*.md", "code/shardbook/**/*.py", "hlo_artifacts/*/meta.json")


def source_fingerprint(root):
    """sha256 over the sources a build reads (chapters, table of contents,
    config, the package, the artifacts' meta.json): equal fingerprints mean
    the build saw these exact files."""
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
            f"{stamp}: the build is older than the sources (chapters, shardbook or the artifacts changed since); "
            "run `make book`"
        )
    built = {p.name.split(".")[0] for p in list(executed.rglob("*.ipynb")) + list(executed.rglob("*.glue.json"))}
    missing = [c for c in toc_chapters(root) if c not in built]
    if missing:
        raise ValueError(
            f"{executed}: the build has no output for {', '.join(missing)} (listed in _toc.yml); run `make book`"
        )


# --- command line ----------------------------------------------------------


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m shardbook.book.expected",
        description="Check the built book's numbers against tests/expected_numbers.json.",
    )
    parser.add_argument("command", choices=["check", "bless", "show"])
    parser.add_argument("--executed", default="_build/jupyter_execute", help="folder of executed notebooks")
    parser.add_argument("--expected", default="tests/expected_numbers.json", help="committed expected values")
    parser.add_argument("--root", default=".", help="the book's folder (for _toc.yml and the build fingerprint)")
    parser.add_argument(
        "--drop",
        action="append",
        default=[],
        metavar="NAME",
        help="with bless: let this expected value disappear (repeat for each; 'all' for every one)",
    )
    args = parser.parse_args(argv)
    try:
        if args.command != "show":
            check_build(args.executed, args.root)
        got = collect(args.executed)
        creating = args.command == "bless" and not Path(args.expected).exists()
        expected = [] if args.command == "show" or creating else load(args.expected)
    except (OSError, ValueError, KeyError) as exc:
        print(f"ledger: {exc}", file=sys.stderr)
        return 2
    if args.command == "show":
        print(format_rows([(g["chapter"], g["name"], "", g["text"], "", "") for g in got]))
        return 0
    rows = compare(expected, got)
    if args.command == "bless":
        gone = [r for r in rows if r[5] == "missing" and "all" not in args.drop and r[1] not in args.drop]
        if gone:
            print(format_rows(gone), file=sys.stderr)
            print(
                f"ledger: {len(gone)} expected values are not in the build; nothing written. If they were removed "
                "on purpose, bless again with --drop NAME for each (or --drop all).",
                file=sys.stderr,
            )
            return 2
        write(args.expected, got)
        if rows:
            print(format_rows(rows))
        print(f"ledger: blessed {len(got)} values into {args.expected} ({len(rows)} changed)")
        return 0
    if rows:
        print(format_rows(rows))
        print(f"\nledger: {len(rows)} of {len(got)} values differ from {args.expected}.")
        print("If the change is intended, review it and run `make bless`.")
        return 1
    print(f"ledger: all {len(got)} values match {args.expected}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
