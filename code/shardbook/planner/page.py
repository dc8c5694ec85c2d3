"""The planner page's one call: the form's fields in, the ranked meshes and
their breakdowns out (as JSON-ready dicts), or one sentence saying why not.
The page runs this module in the reader's browser (Pyodide), the same code
the command line runs (planner.inputs, search.explore, explain).

Ref: as planner.search and planner.explain.
"""

import json

from .. import _validate, accelerator_file, hardware, models
from . import calibrate, cli, inputs, memory_plan
from .explain import explain
from .search import AUTO_PRECISION, SEARCH_AXES, SEARCH_BUDGET_CANDIDATES, chosen_options, explore

TOP = 5  # candidates drawn on the page
# What the page's fields may hold, checked before anything parses them: a config.json or an
# accelerator file is a few KB; a name, a count or a batch a few characters
FIELD_CHARS = {"config": 2**20, "accelerator_file": accelerator_file.MAX_FILE_CHARS}
SHORT_FIELD_CHARS = 200
MAX_FORM_CHARS = 2 * 2**20 + 64 * 1024  # the two texts, escaped, and the rest


def plan(form):
    """`form` (a dict, or its JSON): model (a preset name) or config (the
    text of a config.json), accelerator (a preset) or accelerator_file (the
    text of a TOML or JSON accelerator file), n_devices, batch (tokens,
    '4M' or digits) or batch_seqs, seq_len. Returns {"ok": True, ...} with
    the model's line and, for the first TOP candidates, their rows' fields
    with memory and expected time by component; or {"ok": False, "error":
    one line}."""
    try:
        if isinstance(form, str):
            # bounded before it is parsed: in Pyodide a deep document kills the interpreter
            _validate.bounded_text("form", form, "the page's form", max_chars=MAX_FORM_CHARS)
            form = json.loads(form)
        return _plan(form)
    except RecursionError:
        return {"ok": False, "error": "form: nested too deeply"}
    except (ValueError, TypeError) as error:
        return {"ok": False, "error": str(error).splitlines()[0][:500]}


def _text(form, key):
    """The form's field `key` as a string ('' when absent), or a ValueError
    naming it (not text, or longer than its FIELD_CHARS)."""
    value = form.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{key}: must be text, got {type(value).__name__}")
    most = FIELD_CHARS.get(key, SHORT_FIELD_CHARS)
    if len(value) > most:
        raise ValueError(f"{key}: at most {most:,} characters, got {len(value):,}")
    return value


def _plan(form):
    if not isinstance(form, dict):
        raise ValueError(f"form: must be an object of the page's fields, got {type(form).__name__}")
    for key in form:
        _text(form, key)  # every field is text of its size, before anything reads one
    if _text(form, "config").strip():
        model = inputs.read_model_text(form["config"])
    else:
        model = models.get(form.get("model"))
    if _text(form, "accelerator_file").strip():
        accelerator = inputs.read_accelerator_text(form["accelerator_file"])
    else:
        accelerator = hardware.get(form.get("accelerator"))
    n_devices = inputs.parse_count("n_devices", form.get("n_devices"), unit="devices")
    seq_len = inputs.parse_count("seq_len", form.get("seq_len"))
    seqs = _text(form, "batch_seqs").strip() or None
    tokens = inputs.batch_tokens(seq_len, None if seqs else form.get("batch"), seqs)
    axes = SEARCH_AXES
    options = dict(_options(form, accelerator), seq_len=seq_len)
    # the tab stays responsive: a search is bounded, by the command line's count of candidates, so that
    # the page shows the table the command prints
    found = explore(
        model, accelerator, n_devices, tokens, axes=axes, budget_candidates=SEARCH_BUDGET_CANDIDATES, **options
    )
    if not found:
        bounded = dict(options, budget_candidates=SEARCH_BUDGET_CANDIDATES)
        raise ValueError(inputs.no_mesh_reason(model, accelerator, n_devices, tokens, seq_len, axes, bounded))
    ties = {id(c) for c in cli.tied(found)}
    top = []
    for cand in found[:TOP]:
        _, rows, parts, memory = explain(
            model,
            accelerator,
            cand.mesh,
            tokens,
            n_devices=n_devices,
            **dict(options, recompute=cand.recompute, **chosen_options(cand)),
        )  # fmt: skip
        top.append(
            {
                "label": cand.label,
                "fits": cand.fits,
                "fits_text": cli.fits_text(cand),
                "band_s": list(cand.expected_step_range_s),
                "tie": id(cand) in ties and len(ties) > 1,
                "tokens_per_s_per_device": cand.tokens_per_s_per_device,
                "days_per_trillion_tokens": cand.days_per_tokens(1e12),
                "memory_bytes": {k: v for k, v in memory.items() if k not in ("headroom", "reserve")},
                "reserve_bytes": cand.reserve_bytes,
                "hbm_bytes": cand.hbm_bytes,
                "time_s": parts,
                "expected_step_s": cand.expected_step_s,
                "step_s": cand.step_s,
                "expected_mfu": cand.expected_mfu,
                "mfu": cand.mfu,
                "micro_batch_seqs": cand.micro_batch_seqs,
                "recompute": cand.recompute,
                "schedule_text": cli.schedule_text(cand),
                "weights_text": cli.weights_text(cand),
                "schedule": cand.schedule,
                "n_virtual": cand.n_virtual,
                "precision": cand.precision,
                "keep_gathered_weights": cand.keep_gathered_weights,
                "tp_across_domains": cli.tp_across_domains(cand),
                "axes": rows,
            }
        )
    fitting = sum(c.fits for c in found)
    note = inputs.no_fit_note(found)
    shown = found[:TOP]
    notes = [
        cli.band_line(found, how="the stack field names yours"),
        cli.cross_domain_tp_note(shown, accelerator),
        cli.fragile_line(shown),
        cli.ep_overtake_line(found),
        cli.tight_memory_note(shown),
        cli.uneven_batch_note(shown),
        cli.adapted_line(found, options.get("schedule"), options.get("n_virtual")),
        cli.search_line(found),
    ]
    return {
        "ok": True,
        "title": (
            f"{model.name} on {n_devices:,} × {accelerator.name}, {tokens:,} tokens per step "
            f"({tokens // seq_len:,} sequences of {seq_len:,}): {len(found)} meshes, {fitting} fit"
        ),
        "model": inputs.model_line(model),
        "accelerator_note": inputs.accelerator_note(accelerator),
        "note": note,
        "notes": [n for n in notes if n],
        "reserve": (
            f"HBM held back for the framework (context, communication buffers, fragmentation): "
            f"{found[0].memory_breakdown.get('reserve', 0.0) / 1e9:,.1f} GB a device, counted in the memory column"
        ),
        "top": top,
    }


# The page's choices beside the model, the cluster and the batch: what the command line's flags of
# the same names take ('' is the flag left out).
CHOICES = {
    "schedule": memory_plan.SCHEDULES,
    "precision": ("bf16", "fp8", AUTO_PRECISION),
    "recompute": memory_plan.RECOMPUTE,
    "stack": calibrate.STACKS,
}
# yes/no fields ('' searched, as the command line's --x / --no-x left out)
SWITCHES = ("uneven_pipeline", "keep_gathered_weights")


def _options(form, accelerator):
    """evaluate's options from the page's optional fields: schedule,
    n_virtual, uneven_pipeline and keep_gathered_weights ('yes' or 'no'),
    and recompute (each searched when empty), precision (bf16, fp8 or
    auto), stack, and reserve ('8GB'; the family's when empty)."""
    options = {}
    for key, valid in CHOICES.items():
        value = _text(form, key).strip()
        if value and value not in valid:
            raise ValueError(f"{key}: one of {', '.join(valid)}, got {value!r}")
        if value:
            options[key] = value
    for key in SWITCHES:
        value = _text(form, key).strip()
        if value and value not in ("yes", "no"):
            raise ValueError(f"{key}: yes, no or empty (searched), got {value!r}")
        if value:
            options[key] = value == "yes"
    virtual = _text(form, "n_virtual").strip()
    if virtual:
        options["n_virtual"] = inputs.parse_count("n_virtual", virtual)
    reserve = _text(form, "reserve").strip()
    if reserve:
        options["reserve_bytes"] = calibrate.checked_reserve_bytes(
            accelerator, inputs.parse_bytes("reserve", reserve), "reserve"
        )
    return options
