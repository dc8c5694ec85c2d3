"""Instant charts: a chapter's trade-off drawn as curves the reader moves
with sliders, redrawn in the browser from values the package computed at
build time.

A chart is one function of keyword arguments (its defaults are the printed
inputs, like a live function's; it imports what it needs inside its body and
uses only the standard library and the cost-model layer) returning
{series key: value in SI units}. :func:`slider_chart` calls it at every point
of the sliders' grid (the product of each slider's values and the x axis's
values) and ships the results with the page as JSON beside the function's
source. The page's script (static/shardbook-charts.js) only looks values up
in that grid and draws them as SVG; a value the reader types off the grid
is computed by the same function in the browser's Python (the live mode's
loader), on request. Ref: the reader audit of 2026-12-05 (instant charts).
"""

import html
import inspect
import itertools
import json
import textwrap

from .. import ledger

# Values are shipped with this many significant digits: the relative error
# of a shipped value is at most half a unit in the last digit, 5e-6
# (SHIPPED_REL_ERROR); tests/test_charts.py holds the grid to that bound.
SHIPPED_DIGITS = 6
SHIPPED_REL_ERROR = 0.5 * 10 ** (1 - SHIPPED_DIGITS)

# the colours of the book's figures (figures.INK, ACCENT2, green, ACCENT), then more
COLORS = ("#1f2a44", "#e0a030", "#2e7d32", "#c0392b", "#4e79a7", "#b07aa1")
SCRIPT = "shardbook-charts.js"
STYLESHEET = "shardbook-charts.css"
MARKER_CLASS = "shardbook-chart"


def slider(values, spec):
    """One slider: the grid `values` it steps through (numbers, or a
    choice's options) and the input `spec` (ledger.number_input or
    ledger.choice_input) whose domain a typed value must lie in. Every grid
    value must lie in the domain."""
    values = list(values)
    if not values:
        raise ValueError("values: a slider needs at least one grid value")
    if not isinstance(spec, dict) or spec.get("kind") not in ("choice", "integer", "number"):
        raise ValueError(f"spec: must be ledger.number_input(...) or ledger.choice_input(...), got {spec!r}")
    if spec["kind"] != "choice" and list(values) != sorted(set(values)):
        raise ValueError(f"values: a numeric slider's grid must increase strictly, got {values!r}")
    for v in values:
        ledger.check_input(spec, v)
    return {"values": values, "spec": spec}


def series(key, label, *, dash=False, color=None):
    """One curve: the function's result `key`, its legend `label`, dashed
    or not (a limit such as HBM is dashed)."""
    return {"key": key, "label": label, "dash": bool(dash), "color": color}


def _shipped(value):
    """A value as shipped: SHIPPED_DIGITS significant digits, or None where
    the cost model refuses the point (drawn as a gap)."""
    if value is None:
        return None
    return float(f"{value:.{SHIPPED_DIGITS}g}")


def grid_points(spec):
    """Every point of a chart's grid, in the order its values are shipped:
    a list of {parameter: value}, the sliders in their order with the x axis
    last (varying fastest)."""
    names = [s["name"] for s in spec["sliders"]] + [spec["x"]["name"]]
    grids = [s["values"] for s in spec["sliders"]] + [spec["x"]["values"]]
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*grids)]


def evaluate(function, point, keys):
    """The function's series at one point: {key: SI value or None}. None
    where the cost model refuses the point (its ValueError: a schedule that
    needs more microbatches than stages)."""
    try:
        out = function(**point)
    except ValueError:
        return dict.fromkeys(keys)
    missing = set(keys) - set(out)
    if missing:
        raise ValueError(f"function: returned no value for series {sorted(missing)} at {point}")
    return {k: out[k] for k in keys}


def build_spec(
    name,
    function,
    *,
    x,
    sliders,
    lines,
    title,
    x_label,
    y_label,
    unit,
    scale=1.0,
    digits=1,
    log_x=False,
    log_y=False,
    y_zero=True,
):
    """The chart's whole description and grid as the page ships it (a
    dict that json.dumps writes): see :func:`slider_chart`."""
    if not callable(function):
        raise ValueError(f"function: must be callable, got {function!r}")
    if not name or not name.replace("_", "").isalnum() or not name.islower():
        raise ValueError(f"name: lower-case letters, digits and underscores, got {name!r}")
    params = inspect.signature(function).parameters
    controls = dict(sliders, **{x[0]: x[1]})
    for pname, param in params.items():
        if param.default is inspect.Parameter.empty:
            raise ValueError(f"function: parameter {pname!r} needs a default (the printed input)")
        if pname not in controls:
            raise ValueError(f"sliders: no slider for parameter {pname!r}")
        if param.default not in controls[pname]["values"]:
            raise ValueError(f"sliders: the printed input {pname}={param.default!r} is not on its grid")
    extra = set(controls) - set(params)
    if extra:
        raise ValueError(f"sliders: {sorted(extra)} are not parameters of {function.__name__}")
    if not lines:
        raise ValueError("lines: a chart needs at least one series")
    keys = [line["key"] for line in lines]
    spec = {
        "name": name,
        "function": function.__name__,
        "source": textwrap.dedent(inspect.getsource(function)),
        "title": title,
        "x_label": x_label,
        "y_label": y_label,
        "unit": unit,
        "scale": scale,
        "digits": digits,
        "log_x": bool(log_x),
        "log_y": bool(log_y),
        "y_zero": bool(y_zero),
        "x": dict(x[1], name=x[0], default=params[x[0]].default),
        "sliders": [dict(s, name=n, default=params[n].default) for n, s in sliders.items()],
        "series": [dict(line, color=line["color"] or COLORS[i % len(COLORS)]) for i, line in enumerate(lines)],
    }
    data = {k: [] for k in keys}
    for point in grid_points(spec):
        values = evaluate(function, point, keys)
        for k in keys:
            data[k].append(_shipped(values[k]))
    if all(v is None for column in data.values() for v in column):
        raise ValueError("function: the cost model refused every point of the grid")
    spec["data"] = data
    return spec


def lookup(spec, point, key):
    """The shipped value of series `key` at a grid point ({parameter:
    value}), as the page's script finds it (row-major, x fastest)."""
    index = 0
    for control in [*spec["sliders"], spec["x"]]:
        values = control["values"]
        index = index * len(values) + values.index(point[control["name"]])
    return spec["data"][key][index]


def html_block(spec, caption):
    """The figure the page shows: the grid as JSON, the places of the
    sliders, the plot and the readout, each of a height reserved by the
    stylesheet (nothing below moves when the script fills them), and the
    caption."""
    blob = json.dumps(spec, separators=(",", ":")).replace("</", "<\\/")
    name = spec["name"]
    # the rows the script will fill, so that the stylesheet reserves their height
    rows = f"--controls: {len(spec['sliders']) + 1}; --series: {len(spec['series'])}"
    return (
        f'<figure class="{MARKER_CLASS}" id="chart-{name}" data-chart="{name}" style="{rows}">'
        f'<script type="application/json" class="shardbook-chart-data">{blob}</script>'
        f'<div class="shardbook-chart-controls"></div>'
        f'<div class="shardbook-chart-plot" role="img" aria-label="{html.escape(spec["title"])}"></div>'
        f'<p class="shardbook-chart-readout" aria-live="polite"></p>'
        f'<p class="shardbook-chart-offgrid" aria-live="polite"></p>'
        f"<figcaption>{html.escape(caption)}</figcaption>"
        "</figure>"
    )


def slider_chart(name, function, *, x, sliders, lines, caption, **options):
    """Show an instant chart in a chapter cell.

    `function(**inputs)` returns {series key: SI value}; `x` is
    (parameter, :func:`slider`) for the horizontal axis, `sliders`
    {parameter: :func:`slider`} for the others, `lines` a list of
    :func:`series`. Options: `title`, `x_label`, `y_label`, `unit` (of the
    readout), `scale` (SI value / scale is shown), `digits` (readout
    decimals), `log_x`, `log_y`, `y_zero` (a linear y axis starts at 0).
    Returns the spec (its grid included) for tests and notebooks."""
    spec = build_spec(name, function, x=x, sliders=sliders, lines=lines, **options)
    from IPython.display import HTML, display

    display(HTML(html_block(spec, caption)))
    return spec


def _chart_assets(app, pagename, templatename, context, doctree):
    """The chart script and stylesheet, on the pages that have a chart."""
    if f'class="{MARKER_CLASS}"' in context.get("body", ""):
        app.add_js_file(SCRIPT, defer="defer")
        app.add_css_file(STYLESHEET)


def setup(app):
    app.connect("html-page-context", _chart_assets)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
