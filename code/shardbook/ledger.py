"""The ledger of numbers: every computed number a chapter shows.

A chapter shows a computed value with :func:`show` (prose refers to it by
name with MyST-NB's ``glue:text`` role), a computed wording with
:func:`show_phrase`, or a table with :func:`table`. Each writes a record
into the executed notebook's output metadata. After a build, ``collect``
reads those records from the executed notebooks (no second execution) and
``compare`` checks them against the committed expected file; both live
in ``shardbook.book.expected``, and the prose lint in ``shardbook.book.prose_lint``.

    python -m shardbook.book.expected check   # compare the build with tests/expected_numbers.json
    python -m shardbook.book.expected bless   # rewrite it from the build; prints what changed

This module is what a chapter calls (show, table, live) and what the live
pages run in the browser: standard library only (IPython is imported when a
chapter displays a value, ipywidgets when Jupyter shows live inputs).
"""

import inspect
import json
import math
import os
import re
import textwrap

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


def _check_value(name, value):
    """ValueError naming the key unless `value` is a finite int or float:
    inf and NaN would reach the expected-values file as strings."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"value ({name}): must be a number, got {value!r}")
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an integer beyond a float's range
        raise ValueError(
            f"value ({name}): must be a finite number, got an integer of {len(str(abs(value)))} digits"
        ) from None
    if not finite:
        raise ValueError(f"value ({name}): must be a finite number, got {value!r}")


def record(name, value, *, unit="", text, rel_tol=DEFAULT_REL_TOL, live=False, measured=False):
    """The ledger entry for one value (without the chapter, added at collect).
    `measured`: a value measured on the machine that built the page (a step
    time): recorded and shown, never compared for drift."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(f"name: must be lower-case letters, digits and underscores, got {name!r}")
    _check_value(name, value)
    if isinstance(rel_tol, bool) or not isinstance(rel_tol, (int, float)) or not 0 <= rel_tol < 1:
        raise ValueError(f"rel_tol ({name}): must be a finite number in [0, 1), got {rel_tol!r}")
    entry = {"name": name, "value": float(value), "unit": unit, "text": text, "rel_tol": rel_tol, "live": bool(live)}
    if measured:
        entry["measured"] = True
    return entry


def _display(bundle, metadata):
    from IPython.display import display

    display(bundle, raw=True, metadata=metadata)


# Texts shown in this Python session, for JupyterLab's inline expressions
# (shardbook.book.lab turns {glue:text}`name` into {eval}`ledger.glued("name")`).
_SHOWN = {}


def glued(name):
    """The text this session last showed under `name` (with :func:`show`,
    :func:`live` or :func:`show_phrase`), for prose in JupyterLab."""
    if name not in _SHOWN:
        return f"[{name}: run the cell that computes it]"
    return _SHOWN[name]


def show(
    name,
    value,
    unit="",
    *,
    digits=None,
    sig=None,
    scale=1.0,
    rel_tol=DEFAULT_REL_TOL,
    text=None,
    live=False,
    measured=False,
):
    """Glue `value` under `name` (for the prose's ``glue:text`` role) and record it.

    `scale` divides the SI value for display (value in bytes, scale=1e9,
    unit='GB'); the ledger keeps the unscaled value. Returns None, so a
    cell that ends with it shows nothing but the glued value."""
    _check_value(name, value)  # before formatting: the key is named, not the formatter's complaint
    if text is None:
        text = format_value(value, digits=digits, sig=sig, scale=scale, unit=unit)
    entry = record(name, value, unit=unit, text=text, rel_tol=rel_tol, live=live, measured=measured)
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


def table(name, columns, rows, *, rel_tol=DEFAULT_REL_TOL, caption=None, measured_columns=()):
    """Show a Markdown table and record each numeric cell.

    `rows` holds, per cell, either a string (shown as is, not recorded) or a
    tuple (value, text) whose text is shown and whose value is recorded as
    ``{name}__{row label}__{column}`` (labels from the first cell and the
    header, lower-cased, other characters as '_'); the cells of
    `measured_columns` are recorded as measured (see :func:`record`).
    Displays the table and returns None."""
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
                measured = columns[j] in measured_columns
                entries.append(record(key, value, text=text, rel_tol=rel_tol, measured=measured))
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


# the largest integer a browser's number (IEEE double) holds exactly: a live
# integer input beyond it would be rounded before Python saw it
MAX_EXACT_INTEGER = 2**53


def number_input(label, *, minimum, maximum, unit="", integer=False):
    """A live numeric input and its domain, declared once: `label` as the
    reader reads it, `unit` shown after it ("GB", "tokens"; "" for a count),
    whole numbers only if `integer`, and the closed range [`minimum`,
    `maximum`]. The live page refuses a value outside it beside the input
    and keeps its last good numbers (:func:`check_input`); the cost model's
    own ValueError still refuses what only it can judge (a divisor)."""
    if not isinstance(label, str) or not label:
        raise ValueError(f"label: a live input needs a label, got {label!r}")
    for name, bound in (("minimum", minimum), ("maximum", maximum)):
        if isinstance(bound, bool) or not isinstance(bound, (int, float)) or not math.isfinite(bound):
            raise ValueError(f"{name}: must be a finite number, got {bound!r}")
        if integer and (not float(bound).is_integer() or abs(bound) > MAX_EXACT_INTEGER):
            raise ValueError(f"{name}: an integer input's bound must be a whole number within ±2**53, got {bound!r}")
    if not minimum < maximum:
        raise ValueError(f"minimum: must be below maximum, got {minimum!r} and {maximum!r}")
    if integer:
        minimum, maximum = int(minimum), int(maximum)
    return {
        "kind": "integer" if integer else "number",
        "label": label,
        "unit": unit,
        "minimum": minimum,
        "maximum": maximum,
        "step": 1 if integer else "any",
    }


def _bound_text(value):
    return f"{value:,}" if isinstance(value, int) else f"{value:,.12g}"


def domain_text(spec):
    """A numeric input's domain in words: "a whole number from 1 to 1,024 nodes"."""
    kind = "a whole number" if spec["kind"] == "integer" else "a number"
    unit = f" {spec['unit']}" if spec.get("unit") else ""
    return f"{kind} from {_bound_text(spec['minimum'])} to {_bound_text(spec['maximum'])}{unit}"


def check_input(spec, value):
    """`value` if it lies in the live input `spec`'s domain, else a
    ValueError naming the input (its label) and the domain."""
    label = spec.get("label") or "input"
    if spec["kind"] == "choice":
        if value not in spec["options"]:
            raise ValueError(f"{label}: must be one of {', '.join(spec['options'])}, got {value!r}")
        return value
    integer = spec["kind"] == "integer"
    ok = not isinstance(value, bool) and isinstance(value, (int, float))
    ok = ok and math.isfinite(value) and (not integer or float(value).is_integer())
    ok = ok and spec["minimum"] <= value <= spec["maximum"]
    if not ok:
        raise ValueError(f"{label}: must be {domain_text(spec)}, got {value!r}")
    return int(value) if integer else value


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


def phrase_record(name, text, *, live=False):
    """The ledger entry for one glued wording: its value is its text, compared
    exactly (a planner's chosen mesh printed in words drifts like a number)."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(f"name: must be lower-case letters, digits and underscores, got {name!r}")
    if not isinstance(text, str):
        raise ValueError(f"text ({name}): a phrase must be a string, got {text!r}")
    return {"name": name, "value": text, "unit": "", "text": text, "rel_tol": 0, "live": bool(live), "phrase": True}


def show_phrase(name, text, *, live=False):
    """Glue a wording under `name` (for a ``glue:text`` role) and record it:
    the ledger keeps words as it keeps numbers, by their exact text, so a
    changed wording (a mesh the planner picks, a list of figures) fails the
    check until it is blessed. A glued text is shown bold, as every computed
    value is; a whole sentence of prose is named ``..._sentence`` and shown in
    the text's weight (shardbook.css)."""
    entry = phrase_record(name, text, live=live)
    _SHOWN[name] = text
    _display(
        {GLUE_PREFIX + "text/plain": repr(text)},
        {"scrapbook": {"name": name, "mime_prefix": GLUE_PREFIX}, META_KEY: [entry]},
    )


def evaluate_live(function, arguments, inputs=None):
    """Call a live function and format every value it returns: {name: text}.
    With `inputs` ({name: spec} or the page's list of specs with their
    names), each argument is first checked against its domain
    (:func:`check_input`)."""
    if inputs is not None:
        specs = inputs if isinstance(inputs, dict) else {spec["name"]: spec for spec in inputs}
        arguments = {name: check_input(specs[name], v) if name in specs else v for name, v in arguments.items()}
    return _texts(function(**arguments))


def _check_printed_inputs(inputs, defaults):
    """Each input spec is one of ledger's, and each printed input lies in its domain."""
    for name, spec in inputs.items():
        if not (isinstance(spec, dict) and spec.get("kind") in ("choice", "integer", "number")):
            raise ValueError(f"inputs: {name!r} must be ledger.number_input(...) or ledger.choice_input(...)")
        try:
            check_input(spec, defaults[name])
        except ValueError as err:
            raise ValueError(
                f"function: the printed input {name}={defaults[name]!r} lies outside its domain ({err})"
            ) from None


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
    _check_printed_inputs(inputs, defaults)
    results = function(**defaults)
    for name, v in results.items():
        if not (isinstance(v, dict) and ("value" in v or _is_phrase(v))):
            raise ValueError(
                f"function: {name!r} must be returned as ledger.value(...) or ledger.phrase(...), got {v!r}"
            )
    texts = _texts(results)
    for name, v in results.items():
        if _is_phrase(v):
            show_phrase(name, texts[name], live=True)
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
        if spec.get("unit"):
            label = f"{label} ({spec['unit']})"
        if spec["kind"] == "choice":
            controls[name] = ipywidgets.Dropdown(options=spec["options"], value=defaults[name], description=label)
        elif spec["kind"] == "integer":
            controls[name] = ipywidgets.IntText(value=defaults[name], description=label)
        else:
            controls[name] = ipywidgets.FloatText(value=defaults[name], description=label)

    def show_values(**arguments):
        try:
            for name, text in evaluate_live(function, arguments, inputs).items():
                print(f"{name}: {text}")
        except ValueError as err:
            print(f"refused: {err}")

    display(ipywidgets.interactive(show_values, **controls))
