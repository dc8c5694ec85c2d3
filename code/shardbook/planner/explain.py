"""One mesh's full breakdown: for each axis, where its groups sit, the
buffer bytes of its collectives in a step, its time at line rate (the bound) and
calibrated (the expectation), and how much of that the math hides; the
step's time by component (math, bubble, each exposed collective, summing to
the expected step time); and memory per device by component against HBM.

The bytes are read off the timing step itself: while `explain` prices the
step once more, it records each collective's buffer and call count as the
timing functions receive them (the buffer a device contributes, times the
calls in a step; a multi-axis collective counted once, at its full buffer).

Ref: as planner.timing and planner.memory_plan.
"""

import contextlib
import inspect
import math

from .. import _validate
from . import memory_plan, timing
from .candidate import evaluate
from .layout import layout
from .placement import AXES

COMM_TERMS = ("fsdp", "dp", "cp", "tp", "ep", "pp")
# the collective kind each inline term of timing.communication_s calls
_INLINE_TERM = {"all_gather": "cp", "all_reduce": "tp", "all_to_all": "ep"}


def ring_share(kind, degree):
    """The share of a collective's full buffer one device sends in a ring
    over `degree` members: 2(n-1)/n for an all-reduce, (n-1)/n for an
    all-gather, a reduce-scatter or an all-to-all, all of it for a send."""
    if kind == "send":
        return 1.0
    share = (degree - 1) / degree
    return 2 * share if kind == "all_reduce" else share


@contextlib.contextmanager
def _recording(into, kinds=None, ring=None):
    """Record (term, bytes) for each outermost collective timing prices;
    `kinds` {term: {kind: bytes}} and `ring` {term: bytes one device sends
    (ring_share)} too where given."""
    saved = {n: getattr(timing, n) for n in ("collective_s", "multi_axis_s", "send_s", "_fsdp_s", "_dp_s")}
    state = {"depth": 0, "term": None}

    def outer(name, term_of):
        inner = saved[name]

        def wrapped(acc, kind_or_bytes, *args, **kwargs):
            if state["depth"] == 0:
                if name == "send_s":
                    term, total = "pp", kind_or_bytes * (args[1] if len(args) > 1 else kwargs.get("n_calls", 1))
                else:
                    term = state["term"] or term_of(kind_or_bytes)
                    total = args[0] * (args[2] if len(args) > 2 else kwargs.get("n_calls", 1))
                placements = args[1] if name != "send_s" else args[0]
                groups = placements if isinstance(placements, list) else [placements]
                if any(p.degree > 1 for p in groups):
                    into[term] = into.get(term, 0.0) + total
                    kind = "send" if name == "send_s" else kind_or_bytes
                    if kinds is not None:
                        mine = kinds.setdefault(term, {})
                        mine[kind] = mine.get(kind, 0.0) + total
                    if ring is not None:
                        degree = 2 if name == "send_s" else math.prod(p.degree for p in groups)
                        ring[term] = ring.get(term, 0.0) + total * ring_share(kind, degree)
            state["depth"] += 1
            try:
                return inner(acc, kind_or_bytes, *args, **kwargs)
            finally:
                state["depth"] -= 1

        return wrapped

    def term_fn(name, term):
        inner = saved[name]

        def wrapped(*args, **kwargs):
            state["term"] = term
            try:
                return inner(*args, **kwargs)
            finally:
                state["term"] = None

        return wrapped

    try:
        timing.collective_s = outer("collective_s", lambda kind: _INLINE_TERM[kind])
        timing.multi_axis_s = outer("multi_axis_s", lambda kind: _INLINE_TERM[kind])
        timing.send_s = outer("send_s", None)
        timing._fsdp_s = term_fn("_fsdp_s", "fsdp")
        timing._dp_s = term_fn("_dp_s", "dp")
        yield into
    finally:
        for n, f in saved.items():
            setattr(timing, n, f)


def time_parts(cand, hidden, fractions):
    """The expected step of a Candidate by component: math (with the
    elementwise work), bubble, and the exposed part of each collective
    term (a hidden term's larger of its exposed fraction (timing.exposed_fractions) and
    what the math cannot cover: cand.expected_uncovered_s where the
    candidate works it out, else the term less the math). They sum to
    cand.expected_step_s."""
    terms = cand.expected_terms
    parts = {"math": terms["math"], "bubble": terms["bubble"]}
    for name in COMM_TERMS:
        seconds = terms[name]
        uncovered = cand.expected_uncovered_s.get(name, seconds - terms["math"])
        parts[name] = max(fractions[name] * seconds, uncovered) if name in hidden else seconds
    return parts


def explain(model, accelerator, mesh, global_tokens, **options):
    """(Candidate, axes, time, memory) for one mesh: `axes` a list of dicts
    (axis, degree, where, bytes per device per step, the same by
    collective kind, the bytes one device sends in rings (ring_bytes),
    bound_s, expected_s, exposed_s, hidden_s) for each axis of degree > 1; `time` the expected
    step by component (time_parts); `memory` the bytes per device by
    component with the headroom, against `cand.hbm_bytes`. Options as
    evaluate."""
    cand = evaluate(model, accelerator, mesh, global_tokens, **options)
    defaults = {
        k: p.default
        for k, p in inspect.signature(evaluate).parameters.items()
        if p.kind is p.KEYWORD_ONLY and k != "capacity_factor"
    }
    takes = inspect.signature(layout).parameters  # evaluate's own options (stack) stay behind
    given = {k: v for k, v in {**defaults, **options}.items() if k in takes}
    lay = layout(model, accelerator, mesh, global_tokens, **given)
    sent, kinds, ring = {}, {}, {}
    with _recording(sent, kinds, ring):
        timing.communication_s(lay, cand.recompute, calibrated=False)
    hidden, fractions = timing.hidden_terms(lay), timing.exposed_fractions(lay)
    parts = time_parts(cand, hidden, fractions)
    bound = {
        "fsdp": cand.fsdp_s,
        "dp": cand.dp_s,
        "cp": cand.cp_s,
        "tp": cand.tp_s,
        "ep": cand.ep_s,
        "pp": cand.pp_s,
    }
    rows = []
    for axis in AXES:
        degree = cand.mesh[axis]
        if degree == 1:
            continue
        row = {
            "axis": axis,
            "degree": degree,
            "where": cand.placement[axis].where if axis in cand.placement else "-",
            "bytes": sent.get(axis, 0.0),
            "kinds": kinds.get(axis, {}),
            "ring_bytes": ring.get(axis, 0.0),
            "bound_s": bound[axis],
            "expected_s": cand.expected_terms[axis],
            "exposed_s": parts[axis],
        }
        row["hidden_s"] = max(0.0, row["expected_s"] - row["exposed_s"])
        rows.append(row)
    return cand, rows, parts, dict(cand.memory_breakdown)


def _fmt_bytes(n):
    return f"{n / 1e9:,.2f} GB" if n >= 1e8 else f"{n / 1e6:,.1f} MB"


def format_explain(cand, rows, parts, memory):
    """The breakdown of `explain` as text."""
    lines = [
        f"Mesh {cand.label}: {cand.micro_batch_seqs} sequence(s) per microbatch, "
        f"{cand.n_microbatches:g} microbatches, recompute {cand.recompute}, schedule {cand.schedule}",
        f"Expected step {cand.expected_step_s * 1e3:,.0f} ms (MFU {cand.expected_mfu:.1%}); "
        f"bound {cand.step_s * 1e3:,.0f} ms (MFU {cand.mfu:.1%}), which no run under these options may beat",
        "",
        "Per axis (bytes: its collectives' buffers times their calls in a step; a device moves about"
        " twice that in a ring all-reduce, about once in an all-gather or reduce-scatter):",
    ]
    header = ("axis", "degree", "where its groups sit", "bytes", "bound ms", "expected ms", "hidden ms", "exposed ms")
    table = [header]
    for r in rows:
        table.append(
            (
                r["axis"],
                str(r["degree"]),
                r["where"],
                _fmt_bytes(r["bytes"]),
                f"{r['bound_s'] * 1e3:,.1f}",
                f"{r['expected_s'] * 1e3:,.1f}",
                f"{r['hidden_s'] * 1e3:,.1f}",
                f"{r['exposed_s'] * 1e3:,.1f}",
            )
        )
    if len(table) == 1:
        table.append(("(one device: no collectives)", "", "", "", "", "", "", ""))
    lines += _columns(table)
    lines += ["", "Expected step by component:"]
    total = sum(parts.values())
    lines += _columns(
        [("component", "ms", "share")]
        + [(k, f"{v * 1e3:,.1f}", f"{v / total:.1%}") for k, v in parts.items() if v > 0]
        + [("total", f"{total * 1e3:,.1f}", "")]
    )
    where = f" ({cand.memory_device}, the device that holds the most)" if cand.pp > 1 else ""
    lines += ["", f"Memory per device against {cand.hbm_bytes / 1e9:,.1f} GB of HBM{where}:"]
    used = {k: v for k, v in memory.items() if k != "headroom"}
    lines += _columns(
        [("component", "GB", "of HBM")]
        + [(k, f"{v / 1e9:,.2f}", f"{v / cand.hbm_bytes:.1%}") for k, v in used.items()]
        + [
            ("total", f"{sum(used.values()) / 1e9:,.2f}", f"{sum(used.values()) / cand.hbm_bytes:.1%}"),
            ("headroom", f"{memory.get('headroom', 0.0) / 1e9:,.2f}", "" if cand.fits else "does not fit"),
        ]
    )
    note = memory_plan.precision_note(cand.precision, cand.state_recipe, cand.recompute)
    return "\n".join(lines + ([note] if note else []))


def _columns(table):
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    left = {0, 2} if len(table[0]) > 3 else {0}  # names and places read from the left
    out = [
        "  ".join(
            v.ljust(w) if i in left else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths, strict=True))
        ).rstrip()
        for r in table
    ]
    out.insert(1, "  ".join("-" * w for w in widths))
    return out


_validate.guard_module(globals(), exclude=("time_parts",))
