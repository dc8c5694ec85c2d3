"""The planner page's one call: the form's fields in, the ranked meshes and
their breakdowns out (as JSON-ready dicts), or one sentence saying why not.
The page runs this module in the reader's browser (Pyodide), the same code
the command line runs (planner.inputs, search.explore, explain).

Ref: as planner.search and planner.explain.
"""

import json

from .. import _validate, accelerator_file, hardware, models
from . import inputs
from .explain import explain
from .search import SEARCH_BUDGET_S, explore

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
    the model's line, the table's rows and, for the top candidates, memory
    and expected time by component; or {"ok": False, "error": one line}."""
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
    axes = ("fsdp", "tp", "ep", "pp")
    budget = {"seq_len": seq_len, "budget_s": SEARCH_BUDGET_S}  # the tab stays responsive: a search is bounded
    found = explore(model, accelerator, n_devices, tokens, axes=axes, **budget)
    if not found:
        raise ValueError(inputs.no_mesh_reason(model, accelerator, n_devices, tokens, seq_len, axes, budget))
    top = []
    for cand in found[:TOP]:
        _, rows, parts, memory = explain(
            model,
            accelerator,
            cand.mesh,
            tokens,
            seq_len=seq_len,
            n_devices=n_devices,
            micro_batch_seqs=cand.micro_batch_seqs,
            recompute=cand.recompute,
        )
        top.append(
            {
                "label": cand.label,
                "fits": cand.fits,
                "memory_bytes": {k: v for k, v in memory.items() if k != "headroom"},
                "hbm_bytes": cand.hbm_bytes,
                "time_s": parts,
                "expected_step_s": cand.expected_step_s,
                "step_s": cand.step_s,
                "expected_mfu": cand.expected_mfu,
                "mfu": cand.mfu,
                "micro_batch_seqs": cand.micro_batch_seqs,
                "recompute": cand.recompute,
                "axes": rows,
            }
        )
    fitting = sum(c.fits for c in found)
    note = inputs.no_fit_note(found)
    return {
        "ok": True,
        "title": (
            f"{model.name} on {n_devices:,} × {accelerator.name}, {tokens:,} tokens per step "
            f"({tokens // seq_len:,} sequences of {seq_len:,}): {len(found)} meshes, {fitting} fit"
        ),
        "model": inputs.model_line(model),
        "accelerator_note": inputs.accelerator_note(accelerator),
        "note": note,
        "top": top,
    }
