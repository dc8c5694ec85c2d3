"""Tables a chapter shows as HTML, for layouts Markdown cannot express.

`candidates` renders the planner's ranked meshes with the columns a reader
decides on first (the mesh, whether it fits, memory per device against the
device's HBM, the expected step time) and then the expected MFU and the
bound's. Every cell carries its column's name (`data-label`), so that on a
narrow screen the stylesheet (`.shardbook-stack` in static/shardbook.css)
stacks each row into a card of label-value lines instead of cutting
columns off the right edge; printed, it is a table again.

Each numeric cell is recorded in the ledger exactly as `ledger.table`
records it (``{name}__{row label}__{column}``), so a drift fails the build.
"""

import html
import re

from .. import ledger

__all__ = ["CANDIDATE_COLUMNS", "candidate_rows", "candidates", "html_table"]

CANDIDATE_COLUMNS = (
    "Mesh",
    "Fits",
    "Memory per device (GB)",
    "Expected step (s)",
    "Expected MFU (%)",
    "Bound MFU (%)",
)


def _slug(text):
    return re.sub(r"[^a-z0-9]+", "_", str(text).lower()).strip("_") or "x"


def html_table(name, columns, rows, *, css_class="shardbook-stack", caption=None):
    """Show `rows` as an HTML table whose cells carry their column's name
    (`data-label`) and record each numeric cell. A cell is a string (shown
    as is, escaped) or a (value, text) tuple as from `ledger.cell`. The
    first column labels the row (its ledger key and, stacked, the card's
    title). Displays the table and returns None, as ledger.table does."""
    if not columns:
        raise ValueError("columns: a table needs a header row")
    if not re.fullmatch(r"[a-z0-9_]+", str(name)):
        raise ValueError(f"name: must be lower-case letters, digits and underscores, got {name!r}")
    entries, body, seen = [], [], {}
    for i, row in enumerate(rows):
        if len(row) != len(columns):
            raise ValueError(f"rows[{i}]: has {len(row)} cells, the header has {len(columns)}")
        label = _slug(row[0][1] if isinstance(row[0], tuple) else row[0])
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            label = f"{label}_{seen[label]}"
        cells = []
        for j, cell in enumerate(row):
            if isinstance(cell, tuple):
                value, text = cell
                entries.append(ledger.record(f"{name}__{label}__{_slug(columns[j])}", value, text=text))
                numeric = ' class="num"'
            else:
                text, numeric = str(cell), ""
            tag = "th" if j == 0 else "td"
            scope = ' scope="row"' if j == 0 else ""
            shown = html.escape(text).replace("_", "_<wbr>")  # a long identifier may break after "_"
            cells.append(f'<{tag}{scope}{numeric} data-label="{html.escape(columns[j])}">{shown}</{tag}>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    head = "".join(f'<th scope="col">{html.escape(c)}</th>' for c in columns)
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    markup = (
        f'<table class="{html.escape(css_class)}">{cap}<thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )
    _display(markup, name, entries)


def _display(markup, name, entries):
    from IPython.display import display

    display({"text/html": markup}, raw=True)
    # the records travel as a hidden glue value, as ledger.table's do
    display(
        {ledger.GLUE_PREFIX + "text/plain": ""},
        raw=True,
        metadata={"scrapbook": {"name": f"{name}__table", "mime_prefix": ledger.GLUE_PREFIX}, ledger.META_KEY: entries},
    )


def candidate_rows(found, limit=8):
    """The first `limit` planner Candidates as rows of CANDIDATE_COLUMNS:
    memory as 'used of HBM' in GB, times in seconds, MFU in percent."""
    from ..planner import Candidate

    rows = []
    for cand in found[:limit]:
        if not isinstance(cand, Candidate):
            raise TypeError(f"found: must hold explorer.Candidate objects, got {type(cand).__name__}")
        used = cand.memory_bytes_per_device
        rows.append(
            [
                cand.label,
                "yes" if cand.fits else "no",
                (used, f"{ledger.format_value(used, scale=1e9, digits=0)} of {cand.hbm_bytes / 1e9:,.0f}"),
                ledger.cell(cand.expected_step_s, digits=2),
                ledger.cell(cand.expected_mfu * 100, digits=1),
                ledger.cell(cand.mfu * 100, digits=1),
            ]
        )
    return rows


def candidates(name, found, *, limit=8, caption=None):
    """Show the planner's first `limit` candidates (as ranked by
    `explorer.explore`) as a stacking HTML table and record its numbers."""
    html_table(name, list(CANDIDATE_COLUMNS), candidate_rows(found, limit), caption=caption)
