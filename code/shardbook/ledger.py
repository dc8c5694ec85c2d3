"""The ledger of numbers: every computed number a chapter shows.

A chapter shows a computed value with :func:`show` (prose refers to it with
``{glue:text}`name```) or a table with :func:`table`. Both write a record
into the executed notebook's output metadata. After a build, :func:`collect`
reads those records from the executed notebooks (no second execution) and
:func:`compare` checks them against the committed expected file.

    python -m shardbook.ledger check   # compare the build with tests/expected_numbers.json
    python -m shardbook.ledger bless   # rewrite it from the build; prints what changed

Standard library only (IPython is imported when a chapter displays a value).
"""

import argparse
import hashlib
import inspect
import json
import math
import os
import re
import sys
import tempfile
import textwrap
from pathlib import Path

from . import _validate
from .units import format_number

GLUE_PREFIX = "application/papermill.record/"
META_KEY = "shardbook_ledger"
DEFAULT_REL_TOL = 1e-9
_NAME_RE = re.compile(r"^[a-z0-9_]+$")


def format_value(value, *, digits=None, sig=None, scale=1.0, unit="", trim=False):
    """Display text: value/scale with `digits` decimals or `sig` significant
    digits (integers exactly), then the unit."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"value: must be a number, got {value!r}")
    _validate.positive("scale", scale)
    shown = value / scale if scale != 1 else value
    if isinstance(shown, float) and digits is None and sig is None:
        digits = 0 if float(shown).is_integer() else 3
    text = format_number(shown, digits if digits is not None else 3, sig=sig, trim=trim)
    return f"{text} {unit}".strip() if unit else text


def record(name, value, *, unit="", text, rel_tol=DEFAULT_REL_TOL, live=False):
    """The ledger entry for one value (without the chapter, added at collect)."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(f"name: must be lower-case letters, digits and underscores, got {name!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"value ({name}): must be a number, got {value!r}")
    if not (isinstance(rel_tol, (int, float)) and 0 <= rel_tol < 1):
        raise ValueError(f"rel_tol ({name}): must lie in [0, 1), got {rel_tol!r}")
    return {"name": name, "value": float(value), "unit": unit, "text": text, "rel_tol": rel_tol, "live": bool(live)}


def _display(bundle, metadata):
    from IPython.display import display

    display(bundle, raw=True, metadata=metadata)


# Texts shown in this Python session, for JupyterLab's inline expressions
# (shardbook.lab turns {glue:text}`name` into {eval}`ledger.glued("name")`).
_SHOWN = {}


def glued(name):
    """The text this session last showed under `name` (with :func:`show`,
    :func:`live` or :func:`show_phrase`), for prose in JupyterLab."""
    if name not in _SHOWN:
        return f"[{name}: run the cell that computes it]"
    return _SHOWN[name]


def show(name, value, unit="", *, digits=None, sig=None, scale=1.0, rel_tol=DEFAULT_REL_TOL, text=None, live=False):
    """Glue `value` under `name` for ``{glue:text}`name``` and record it.

    `scale` divides the SI value for display (value in bytes, scale=1e9,
    unit='GB'); the ledger keeps the unscaled value. Returns None, so a
    cell that ends with it shows nothing but the glued value."""
    if text is None:
        text = format_value(value, digits=digits, sig=sig, scale=scale, unit=unit)
    entry = record(name, value, unit=unit, text=text, rel_tol=rel_tol, live=live)
    entry["scale"] = scale
    _SHOWN[name] = text
    # repr(): myst-nb literal-evaluates text/plain, which would turn "2,550"
    # into the tuple (2, 550); a quoted string evaluates back to itself.
    _display(
        {GLUE_PREFIX + "text/plain": repr(text)},
        {"scrapbook": {"name": name, "mime_prefix": GLUE_PREFIX}, META_KEY: [entry]},
    )


def _slug(text):
    return re.sub(r"[^a-z0-9]+", "_", str(text).lower()).strip("_") or "x"


def table(name, columns, rows, *, rel_tol=DEFAULT_REL_TOL, caption=None):
    """Show a Markdown table and record each numeric cell.

    `rows` holds, per cell, either a string (shown as is, not recorded) or a
    tuple (value, text) whose text is shown and whose value is recorded as
    ``{name}__{row label}__{column}`` (labels from the first cell and the
    header, lower-cased, other characters as '_'). Displays the table and
    returns None."""
    if not columns:
        raise ValueError("columns: a table needs a header row")
    entries, lines = [], []
    lines.append("| " + " | ".join(columns) + " |")
    lines.append("|" + "|".join("---" for _ in columns) + "|")
    seen = {}
    for i, row in enumerate(rows):
        if len(row) != len(columns):
            raise ValueError(f"rows[{i}]: has {len(row)} cells, the header has {len(columns)}")
        cells = []
        label = _slug(row[0][1] if isinstance(row[0], tuple) else row[0])
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:  # rows that share a first cell are numbered
            label = f"{label}_{seen[label]}"
        for j, cell in enumerate(row):
            if isinstance(cell, tuple):
                value, text = cell
                key = f"{name}__{label}__{_slug(columns[j])}"
                entries.append(record(key, value, text=text, rel_tol=rel_tol))
                cells.append(text)
            else:
                cells.append(str(cell))
        lines.append("| " + " | ".join(cells) + " |")
    markdown = "\n".join(lines)
    if caption:
        markdown = f"{markdown}\n\n{caption}"
    _display({"text/markdown": markdown}, {})
    # The records travel as a hidden glue value: myst-nb keeps glue data (in
    # <chapter>.glue.json) also when a page is rebuilt from its execution cache.
    _display(
        {GLUE_PREFIX + "text/plain": ""},
        {"scrapbook": {"name": f"{name}__table", "mime_prefix": GLUE_PREFIX}, META_KEY: entries},
    )


def cell(value, **fmt):
    """A (value, text) table cell formatted like :func:`show`."""
    return (value, format_value(value, **fmt))


# --- live values: the same Python recomputes them in the reader's browser ---


def value(number, unit="", *, digits=None, sig=None, scale=1.0, trim=False, rel_tol=DEFAULT_REL_TOL):
    """A live value and how to display it (see :func:`show`)."""
    return {
        "value": number,
        "unit": unit,
        "digits": digits,
        "sig": sig,
        "scale": scale,
        "trim": trim,
        "rel_tol": rel_tol,
    }


def choice_input(options, label=None):
    """A live input chosen from `options` (strings)."""
    options = list(options)
    if not options:
        raise ValueError("options: a choice needs at least one option")
    return {"kind": "choice", "options": options, "label": label}


def number_input(label=None, integer=False, step=None):
    """A live numeric input. Its range is not checked here: the cost model's
    own ValueError tells the reader what is wrong."""
    return {"kind": "integer" if integer else "number", "label": label, "step": step or (1 if integer else "any")}


def phrase(text, options):
    """A live wording that depends on the numbers: the function picks `text`
    from `options`, every wording the sentence can take, so that a reader
    who changes the inputs never reads a sentence the new numbers
    contradict ("compute-bound" next to a ratio below one)."""
    options = list(options)
    if not options or not all(isinstance(o, str) and o for o in options):
        raise ValueError(f"options: a phrase needs one or more non-empty strings, got {options!r}")
    if text not in options:
        raise ValueError(f"text: {text!r} is not one of the phrase's options {options}")
    return {"phrase": text, "options": options}


def _is_phrase(v):
    return isinstance(v, dict) and "phrase" in v


def _texts(results):
    return {
        name: v["phrase"]
        if _is_phrase(v)
        else format_value(
            v["value"], digits=v["digits"], sig=v["sig"], scale=v["scale"], unit=v["unit"], trim=v["trim"]
        )
        for name, v in results.items()
    }


def show_phrase(name, text):
    """Glue a live wording under `name` for ``{glue:text}`name```. Words are
    not numbers: the ledger keeps the numbers that choose them."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(f"name: must be lower-case letters, digits and underscores, got {name!r}")
    _SHOWN[name] = text
    _display({GLUE_PREFIX + "text/plain": repr(text)}, {"scrapbook": {"name": name, "mime_prefix": GLUE_PREFIX}})


def evaluate_live(function, arguments):
    """Call a live function and format every value it returns: {name: text}."""
    return _texts(function(**arguments))


def live(function, **inputs):
    """Declare a chapter's live inputs and values in one place.

    `function` takes the inputs as keyword arguments whose defaults are the
    page's printed inputs, imports what it needs inside its body (it is also
    run by Python in the reader's browser, so it may use only the standard
    library and shardbook's cost-model modules) and returns {name: value(...)
    or phrase(...)}. Every value is shown with :func:`show` as a live value,
    every phrase with :func:`show_phrase`; the function's
    source and the input specs are embedded in the page for its live mode; in
    Jupyter (outside the book build) the inputs appear as ipywidgets."""
    if not callable(function):
        raise ValueError(f"function: must be callable, got {function!r}")
    params = inspect.signature(function).parameters
    for name, param in params.items():
        if param.default is inspect.Parameter.empty:
            raise ValueError(f"function: parameter {name!r} needs a default (the page's printed input)")
        if name not in inputs:
            raise ValueError(f"inputs: no input spec for parameter {name!r}")
    extra = set(inputs) - set(params)
    if extra:
        raise ValueError(f"inputs: {sorted(extra)} are not parameters of {function.__name__}")
    defaults = {name: p.default for name, p in params.items()}
    results = function(**defaults)
    for name, v in results.items():
        if not (isinstance(v, dict) and ("value" in v or _is_phrase(v))):
            raise ValueError(
                f"function: {name!r} must be returned as ledger.value(...) or ledger.phrase(...), got {v!r}"
            )
    texts = _texts(results)
    for name, v in results.items():
        if _is_phrase(v):
            show_phrase(name, texts[name])
        else:
            show(name, v["value"], v["unit"], scale=v["scale"], text=texts[name], rel_tol=v["rel_tol"], live=True)
    payload = {
        "function": function.__name__,
        "source": textwrap.dedent(inspect.getsource(function)),
        "inputs": [dict(spec, name=name, default=defaults[name]) for name, spec in inputs.items()],
        "values": list(results),
        "phrases": {name: v["options"] for name, v in results.items() if _is_phrase(v)},
    }
    blob = json.dumps(payload).replace("</", "<\\/")
    _display({"text/html": f'<script type="application/json" class="shardbook-live">{blob}</script>'}, {})
    if os.environ.get("SHARDBOOK_BUILD") != "1":
        _widgets(function, inputs, defaults)


def _widgets(function, inputs, defaults):
    try:
        import ipywidgets
        from IPython.display import display
    except ImportError:  # plain Python, or Jupyter without ipywidgets
        return
    controls = {}
    for name, spec in inputs.items():
        label = spec.get("label") or name
        if spec["kind"] == "choice":
            controls[name] = ipywidgets.Dropdown(options=spec["options"], value=defaults[name], description=label)
        elif spec["kind"] == "integer":
            controls[name] = ipywidgets.IntText(value=defaults[name], description=label)
        else:
            controls[name] = ipywidgets.FloatText(value=defaults[name], description=label)

    def show_values(**arguments):
        try:
            for name, text in evaluate_live(function, arguments).items():
                print(f"{name}: {text}")
        except ValueError as err:
            print(f"refused: {err}")

    display(ipywidgets.interactive(show_values, **controls))


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
                if key in found and found[key] != item:
                    raise ValueError(f"ledger: {chapter} records {entry['name']!r} twice, with different values")
                found[key] = item
    return [found[k] for k in sorted(found)]


def compare(expected, got):
    """Rows (chapter, name, expected, got, relative change, status) for every
    value that moved beyond its tolerance, disappeared, or is new."""
    exp = {(e["chapter"], e["name"]): e for e in expected}
    cur = {(g["chapter"], g["name"]): g for g in got}
    rows = []
    for key in sorted(set(exp) | set(cur)):
        e, g = exp.get(key), cur.get(key)
        if g is None:
            rows.append((*key, e["text"], "-", "", "missing"))
        elif e is None:
            rows.append((*key, "-", g["text"], "", "new (no expected entry)"))
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
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file; `make bless` writes it from a finished build") from None
    except IsADirectoryError:
        raise ValueError(f"{path}: is a folder, not the expected-values file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot be read ({exc.__class__.__name__})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"{path}: not valid JSON ({exc.msg}, line {exc.lineno}); restore it from git, "
            "or delete it and run `make bless`"
        ) from None
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


# --- lint: numbers typed into prose ----------------------------------------

# A number in prose: grouped or plain digits with optional decimals, or a
# leading point (.4321), with an optional exponent (4.321e12). It may stick to
# a unit (18.35ms, 123x), a sign or an emphasis mark; digits inside names
# (H100, v5p, 8x22B, bf16) are not numbers: no letter or digit right before;
# nor are model and batch sizes (405B, 16M-token): a lone B, M, K or T after.
_NUMBER_RE = re.compile(
    r"(?<![A-Za-z0-9.,/#])(?:(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?|\.(\d+))(?:[eE][+-]?\d+(?![A-Za-z]))?"
    r"(?![0-9])(?![BMKT](?![A-Za-z]))"
)
_EXEMPT_MARK = re.compile(r"<!--\s*typed-number:\s*(.+?)\s*-->")


def _blank(match):
    return re.sub(r"[^\n]", " ", match.group(0))


_NON_PROSE = [
    (re.compile(r"\A---\n.*?\n---\n", re.S), "front matter"),
    (
        re.compile(
            r"^[ \t]*(`{3,}|:{3,})(?:[a-z0-9+-]*|\{(?:code-cell|literalinclude|bibliography|code-block|code)\}[^\n]*)\n.*?^[ \t]*\1\s*$",
            re.S | re.M,
        ),
        "code cells and code fences",
    ),
    (re.compile(r"^[ \t]*(`{3,}|:{3,}).*$", re.M), "other directive fences (their prose is linted)"),
    (re.compile(r"^[ \t]*:[a-z-]+:.*$", re.M), "directive options"),
    (re.compile(r"\$\$.*?\$\$", re.S), "display math"),
    (re.compile(r"\$[^$\n]+\$"), "inline math"),
    (re.compile(r"\{[a-z:-]+\}`[^`]*`"), "roles (glue, cite, ref)"),
    (re.compile(r"`[^`]+`"), "inline code (may wrap a line)"),
    (re.compile(r"\]\([^)]*\)"), "link targets"),
    (re.compile(r"^\([^)]*\)=\s*$", re.M), "labels"),
    (re.compile(r"^%.*$", re.M), "comments"),
    (re.compile(r"<!--.*?-->", re.S), "HTML comments"),
    (re.compile(r"^\s*\d+\.(?=\s)", re.M), "numbered-list markers"),
]


def _strip_non_prose(markdown):
    """Blank out (keeping line breaks) what the lint must not read: front
    matter, code cells and fences, math, roles, code, link targets, labels
    and comments."""
    for pattern, _ in _NON_PROSE:
        markdown = pattern.sub(_blank, markdown)
    return markdown


def _significant_digits(integer, fraction):
    digits = ((integer or "").replace(",", "") + (fraction or "")).lstrip("0")
    if not fraction:
        digits = digits.rstrip("0")
    return len(digits)


def lint(markdown, glued_texts=()):
    """Numbers typed into prose that look computed: three or more significant
    digits, or equal to a glued value's text (two digits or more). A line carrying
    ``<!-- typed-number: reason -->`` is exempt (the reason stays visible in
    the source). Returns (line number, number, why) tuples."""
    glued_numbers = set()
    for text in glued_texts:
        glued_numbers.update(m.group(0) for m in _NUMBER_RE.finditer(text))
    findings = []
    original = markdown.splitlines()
    prose_lines = _strip_non_prose(markdown).splitlines()
    for lineno, (line, prose) in enumerate(zip(original, prose_lines, strict=True), 1):
        if _EXEMPT_MARK.search(line):
            continue
        for m in _NUMBER_RE.finditer(prose):
            number = m.group(0)
            if _significant_digits(m.group(1), m.group(2) or m.group(3)) >= 3:
                findings.append((lineno, number, "three or more significant digits"))
            elif number in glued_numbers and not re.fullmatch(r"\d", number):
                # single digits (byte widths, stage numbers, counts of things)
                # are too common in prose to be evidence of a typed result
                findings.append((lineno, number, "equals a glued value of this chapter"))
    return findings


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


def _main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m shardbook.ledger", description=__doc__.split("\n\n")[0])
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
    sys.exit(_main())
