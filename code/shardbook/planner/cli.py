"""Step 6 of the planner: the command line, `python -m shardbook.explorer
MODEL ACCELERATOR N_DEVICES BATCH [options]`, and the ranked table.
MODEL may be the path of a Hugging Face config.json (or `--config PATH`),
ACCELERATOR the path of an accelerator file (or `--accelerator-file PATH`),
BATCH tokens (4194304, 4M) or `--batch-seqs N`; `--explain` with `--mesh`
prints one mesh's breakdown.

Bad input is one line on stderr and exit code 2, never a traceback.
"""

import argparse
import importlib
import json
import math
import re
import sys

from .. import _cli, _validate, hardware, models
from . import calibrate, inputs, memory_plan
from .assumptions import ASSUMPTIONS
from .placement import AXES, normalize_mesh
from .search import SEARCH_AXES, SEARCH_BUDGET_CANDIDATES, SEARCH_BUDGET_IDLE_S, SEARCHED_SCHEDULES, batch_divides

TIE_MARK = "tie"
FRAGILE_HIDDEN_TO_MATH = 0.7  # a row that hides more than this share of its math in communication


def tied(candidates):
    """The candidates whose band (Candidate.expected_step_range_s) overlaps
    the band of the best fitting one (by expected step), the best included:
    the data cannot tell them apart, so profile them. Empty when none fits."""
    fitting = [c for c in candidates if c.fits]
    if not fitting:
        return []
    best = min(fitting, key=lambda c: c.expected_step_s)
    ceiling = best.expected_step_range_s[1]
    return [c for c in fitting if c.expected_step_range_s[0] <= ceiling]


# The schedules as the table names them (pipeline.PLANNER_SCHEDULES): ZB-H1 is the zero-bubble schedule
# the planner prices (qi2024zerobubble)
SCHEDULE_NAMES = {"gpipe": "GPipe", "1f1b": "1F1B", "interleaved": "interleaved", "zero_bubble": "ZB-H1",
                  "dualpipe": "DualPipe"}  # fmt: skip


def schedule_text(cand):
    """The pipeline schedule a row runs, as the table shows it: '-' without
    a pipeline, 'interleaved v=16' with its virtual stages per device,
    else the schedule's name (1F1B, ZB-H1, DualPipe, GPipe)."""
    if cand.pp == 1:
        return "-"
    name = SCHEDULE_NAMES[cand.schedule]
    return f"{name} v={cand.n_virtual}" if cand.schedule == "interleaved" else name


def weights_text(cand):
    """What a row does with the weights it gathers (FSDP's, or ZeRO-3's):
    'kept' (gathered once and kept for the step), 'regathered' (gathered
    again for each use, forward and backward), '-' where it gathers none."""
    if not cand.memory_breakdown.get("gathered_weight_buffers", 0.0):
        return "-"
    return "kept" if cand.keep_gathered_weights else "regathered"


def format_table(candidates, top=None):
    """The ranked candidates as a plain-text table: the mesh and how it
    runs (schedule_text, the sequences per microbatch, the recomputation,
    weights_text, and the matmuls' precision where a row runs FP8), fits,
    memory per device against HBM, the expected step with its band and
    whether it ties the best, throughput, the expected step's parts
    (matmuls, elementwise, exposed communication, bubble), the
    communication hidden over the math, then the bound."""
    from .candidate import Candidate

    if not isinstance(candidates, (list, tuple)) or not all(isinstance(c, Candidate) for c in candidates):
        raise TypeError("candidates: must be a list of explorer.Candidate")
    if top is not None:
        _validate.count("top", top)
    shown = candidates[:top] if top else candidates
    precision = any(c.precision != "bf16" for c in shown)  # a column only where some row runs FP8
    header = (
        "mesh",
        "schedule",
        "micro",
        "recompute",
        "weights",
        *(("precision",) if precision else ()),
        "fits",
        MEMORY_COLUMN,
        "expected step ms",
        "band ms",
        "",
        "tokens/s /device",
        "days /1T tokens",
        "expected MFU",
        "matmul ms",
        "elementwise ms",
        "exposed comm ms",
        "bubble ms",
        "hidden /math",
        "bound step ms",
        "bound MFU",
    )
    ties = {id(c) for c in tied(candidates)}
    rows = []
    for cand in shown:
        low, high = cand.expected_step_range_s
        terms = cand.expected_terms
        rows.append(
            (
                cand.label,
                schedule_text(cand),
                str(cand.micro_batch_seqs),
                cand.recompute,
                weights_text(cand),
                *((cand.precision.upper(),) if precision else ()),
                fits_text(cand),
                memory_text(cand),
                f"{cand.expected_step_s * 1e3:,.0f}",
                f"{low * 1e3:,.0f}-{high * 1e3:,.0f}",
                TIE_MARK if id(cand) in ties and len(ties) > 1 else "",
                f"{cand.tokens_per_s_per_device:,.0f}",
                f"{cand.days_per_tokens(1e12):,.1f}",
                f"{cand.expected_mfu:.1%}",
                f"{(terms['math'] - terms['elementwise']) * 1e3:,.0f}",
                f"{terms['elementwise'] * 1e3:,.0f}",
                f"{sum(cand.expected_exposed_s.values()) * 1e3:,.0f}",
                f"{terms['bubble'] * 1e3:,.0f}",
                f"{cand.hidden_to_math:.2f}" + ("!" if cand.hidden_to_math > FRAGILE_HIDDEN_TO_MATH else ""),
                f"{cand.step_s * 1e3:,.0f}",
                f"{cand.mfu:.1%}",
            )
        )
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    # words left-aligned, figures (and whether it fits, as before) right-aligned
    left = [name in ("mesh", "schedule", "recompute", "weights", "precision") for name in header]
    lines = [
        "  ".join(
            str(v).ljust(w) if left[i] else str(v).rjust(w) for i, (v, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


TIGHT_SHARE = 0.95  # a plan above this share of HBM (with the reserve) is 'tight', never just 'yes'


MEMORY_COLUMN = "memory+reserve / HBM GB"


def _used_bytes(cand):
    """The step's memory and the reserve: what must fit, as --explain's total."""
    return cand.memory_bytes_per_device + cand.reserve_bytes


def _used_share(cand):
    return _used_bytes(cand) / cand.hbm_bytes


def memory_text(cand):
    """The memory column: the step's memory with the reserve, over HBM, in GB."""
    return f"{_used_bytes(cand) / 1e9:,.1f} / {cand.hbm_bytes / 1e9:,.1f}"


def fits_text(cand):
    """'yes', 'tight' (fits, but the step and the reserve take more than
    TIGHT_SHARE of HBM) or 'no'."""
    if not cand.fits:
        return "no"
    return "tight" if _used_share(cand) > TIGHT_SHARE else "yes"


def band_line(candidates, how="--stack names yours"):
    """One line under the table: what the band is (`how` says how to name
    one's stack), and which rows tie."""
    if not candidates:
        return ""
    first = candidates[0]
    low_error, high_error = calibrate.step_band(first.stack, first.is_moe, first.eta_on_one_run_or_none)
    kind = "MoE" if first.is_moe else "dense"
    if first.is_moe:  # calibrate.step_band: one band of every MoE run, whatever the stack
        stack = "any stack" + (
            "" if first.stack == "any" else f": too few {first.stack} MoE runs for a band of their own"
        )
    elif first.stack == "any":
        stack = "any stack"
    elif first.stack in calibrate.STEP_BANDS:
        stack = f"the {first.stack} stack family"
    else:
        stack = f"any stack: too few {first.stack} runs for a band of their own"
    if not first.is_moe and first.eta_on_one_run_or_none:  # calibrate.step_band stretches it over 'prior'
        stack += ", and the runs on accelerators whose efficiency rests on one run or none, as this one's does"
    least, most = calibrate.measured_over_expected(low_error, high_error)
    ties = tied(candidates)
    tie = (
        f"; the {len(ties)} rows marked '{TIE_MARK}' overlap the best's band: the data cannot rank them, so profile them"
        if len(ties) > 1
        else ""
    )
    return (
        f"Band: the measured step of most runs the planner was not fitted on ({kind} runs, {stack}) lay between "
        f"{least:.2f} and {most:.2f} times the expected step (leave-one-source-out, "
        f"10th to 90th percentile; {how}){tie}"
    )


def tp_across_domains(cand):
    """The scale-up domains a Candidate's TP groups span on a GPU (1: inside
    one NVLink domain, or off a GPU)."""
    where = cand.placement.get("tp")
    if cand.tp == 1 or where is None or where.torus_span:
        return 1
    return where.n_domains


def search_line(found):
    """'' or one line saying what the search left out under its budget of
    candidates priced (search.Ranked: meshes priced only under their base
    variants, and whether the first row is proven the best of every
    variant)."""
    unrefined = getattr(found, "unrefined", 0)
    if not unrefined:
        return ""
    if getattr(found, "proven", True):
        return (
            f"Searched in full where it could matter: {unrefined:,} meshes kept the rows of their base variants "
            "(ZB-H1 or 1F1B, weights gathered again); the least math any of their other variants runs is above "
            "the first row's expected step, so none of them can beat it"
        )
    return (
        f"Left out: {unrefined:,} meshes were priced only under their base variants (ZB-H1 or 1F1B, weights "
        f"gathered again) when the search had priced the {getattr(found, 'priced', 0):,} candidates it was given, "
        "and some of their other variants might beat the first row; fix the schedule (--schedule), the weights "
        "(--keep-gathered-weights or --no-keep-gathered-weights), fewer --axes or a larger --budget to search "
        "them all"
    )


def cross_domain_tp_note(candidates, accelerator):
    """'' or one line naming the rows whose TP groups span scale-up domains
    on a GPU: every layer's TP collectives then cross the NICs; Megatron,
    Meta and DeepSeek keep TP inside an NVLink domain on every published H100
    and A100 run."""
    if hardware.get(accelerator).family != "gpu":
        return ""
    crossing = [c for c in candidates if c.tp > 1 and c.placement.get("tp") and c.placement["tp"].n_domains > 1]
    if not crossing:
        return ""
    shown = ", ".join(f"{c.label} (TP over {c.placement['tp'].n_domains} domains)" for c in crossing[:3])
    more = f" and {len(crossing) - 3} more" if len(crossing) > 3 else ""
    return (
        f"TP across scale-up domains: {shown}{more}; every layer's TP collectives cross the NICs, which no "
        "published run on these GPUs does (their TP stays inside the NVLink domain), so profile such a row "
        "before trusting its place"
    )


def fragile_line(candidates):
    """'' or one line naming the rows whose hidden communication exceeds
    FRAGILE_HIDDEN_TO_MATH of their math: their expectation relies on
    overlap that a stack which exposes re-gathers (PyTorch FSDP under
    activation checkpointing, say) does not give."""
    fragile = [c for c in candidates if c.hidden_to_math > FRAGILE_HIDDEN_TO_MATH]
    if not fragile:
        return ""
    shown = ", ".join(
        f"{c.label} ({c.hidden_comm_s * 1e3:,.0f} ms behind {c.expected_terms['math'] * 1e3:,.0f} ms)"
        for c in fragile[:3]
    )
    more = f" and {len(fragile) - 3} more" if len(fragile) > 3 else ""
    return (
        f"Fragile overlap (hidden / math above {FRAGILE_HIDDEN_TO_MATH:.1f}, marked '!'): {shown}{more}; these rows "
        "are fast only while the stack hides that much communication behind the math"
    )


def exposure_to_overtake(first, other):
    """The share x of hidden communication at which `other` is expected no
    slower than `first` when each loses x of its own hidden communication
    (hidden_comm_s) to the critical path: step + x · hidden for both, so
    x = (other's step − first's) / (first's hidden − other's hidden). The
    same x reads as an overlap slowdown: math that runs x slower for as
    long as it overlaps communication adds the same x · hidden. 0 where
    `other` is already no slower; None where it hides no less than `first`
    (no share lets it catch up)."""
    gap = other.expected_step_s - first.expected_step_s
    if gap <= 0:
        return 0.0
    spare = first.hidden_comm_s - other.hidden_comm_s
    return gap / spare if spare > 0 else None


def ep_overtake_line(candidates):
    """'' or one line for an MoE model whose fastest fitting mesh has no
    expert parallelism: the least share of hidden communication
    (exposure_to_overtake) at which a fitting mesh with ep would be
    expected faster, and which one; or that none would at any share."""
    fitting = [c for c in candidates if c.fits and batch_divides(c)]
    if not fitting:
        return ""
    first = min(fitting, key=lambda c: c.expected_step_s)
    with_ep = [c for c in fitting if c.ep > 1]
    if not first.is_moe or first.ep > 1 or not with_ep:
        return ""
    shares = [
        (x, c.expected_step_s, i) for i, c in enumerate(with_ep) if (x := exposure_to_overtake(first, c)) is not None
    ]
    if not shares:
        return (
            f"Against expert parallelism: no fitting mesh with ep overtakes {first.label} at any share of hidden "
            "communication exposed, since each hides no less and is slower"
        )
    share, _, i = min(shares)
    other = with_ep[i]
    return (
        f"Against expert parallelism: {first.label} ({first.expected_step_s * 1e3:,.0f} ms, "
        f"{first.hidden_comm_s * 1e3:,.0f} ms hidden) stays ahead of every fitting mesh with ep only while each row "
        f"loses less than {share:.1%} of its hidden communication to the critical path (or its math slows by less "
        f"than that while it overlaps communication); beyond that {other.label} ({other.expected_step_s * 1e3:,.0f} ms, "
        f"{other.hidden_comm_s * 1e3:,.0f} ms hidden) is expected faster"
    )


def rank_line(candidates, mesh, refused=None, axes=None):
    """One line saying where `mesh` ranks among ranked `candidates` (fitting
    ones by expected step time) and how much slower than the best it is.
    `refused`: why pricing the mesh on its own is refused (the ValueError's
    text), said when the mesh is not among the candidates; `axes`: the
    axes the search ran over (default: those some candidate uses)."""
    target = normalize_mesh(mesh)
    label = " × ".join(f"{k} {v}" for k, v in target.items() if v > 1) or "1 device"
    own = next((c for c in candidates if c.mesh == target), None)
    if own is None:
        devices = {math.prod(c.mesh.values()) for c in candidates}
        given = math.prod(target.values())
        if len(devices) == 1 and given not in devices:
            return f"{label}: not among the candidates: its degrees multiply to {given}, not to the device count {devices.pop()}"
        searched = set(axes) if axes is not None else {a for c in candidates for a, d in c.mesh.items() if d > 1}
        off = [a for a, d in target.items() if d > 1 and a not in searched]
        if refused and not off:
            return f"{label}: not among the candidates: {refused}"
        why = (
            f"no candidate uses {', '.join(off)} (name it in --axes)"
            if off
            else "the model or the batch does not allow one of its degrees (--mesh says which)"
        )
        return f"{label}: not among the candidates: {why}"
    fitting = [c for c in candidates if c.fits]
    if not fitting:
        return f"{label} does not fit, nor does any candidate: expected {own.expected_step_s * 1e3:,.0f} ms; bound MFU {own.mfu:.1%}"
    faster = sum(c.expected_step_s < own.expected_step_s * (1 - 1e-9) for c in fitting if c is not own)
    best = min(fitting, key=lambda c: c.expected_step_s)
    slower = own.expected_step_s / best.expected_step_s - 1
    place = (
        f"ranks {1 + faster} of the {len(fitting)} that fit"
        if own.fits
        else f"does not fit; by its expected step it would rank {1 + faster} of the {len(fitting) + 1}"
    )
    return (
        f"{label} {place}: expected {own.expected_step_s * 1e3:,.0f} ms, "
        f"{slower:.1%} slower than the best ({best.label}); bound MFU {own.mfu:.1%}"
    )


def adapted_line(candidates, schedule, n_virtual):
    """'' or one line naming the pipelined candidates the search ran under
    another schedule than the one asked for (search._schedules: virtual
    stages capped at a divisor of the mesh's layers per stage, 1F1B where
    only one is left); '' when the schedule or the virtual stages were
    searched. A count named without a schedule asks for interleaving at that
    count (search._schedules), so the meshes that run otherwise are named too."""
    if n_virtual is None or (schedule is None and n_virtual == 1):
        return ""  # searched: each mesh runs the schedule and virtual stages it priced fastest under
    asked = (schedule or "interleaved", n_virtual)
    adapted = [c for c in candidates if c.mesh.get("pp", 1) > 1 and (c.schedule, c.n_virtual) != asked]
    if not adapted:
        return ""
    shown = "; ".join(
        f"{c.label}: {c.schedule}" + (f" with {c.n_virtual} virtual stages" if c.schedule == "interleaved" else "")
        for c in adapted[:4]
    )
    more = f"; and {len(adapted) - 4} more (--json gives each one's schedule)" if len(adapted) > 4 else ""
    return (
        f"--n-virtual {n_virtual} does not divide the layers per stage of {len(adapted)} of these meshes, "
        f"which run otherwise: {shown}{more}"
    )


def _as_json(cand):
    return {
        "mesh": cand.mesh,
        "fits": cand.fits,
        "memory_breakdown_bytes": cand.memory_breakdown,
        "memory_device": cand.memory_device,
        "hbm_bytes": cand.hbm_bytes,
        "expected_step_s": cand.expected_step_s,
        "expected_mfu": cand.expected_mfu,
        "step_s": cand.step_s,
        "mfu": cand.mfu,
        "micro_batch_seqs": cand.micro_batch_seqs,
        "n_microbatches": cand.n_microbatches,
        "recompute": cand.recompute,
        "schedule": cand.schedule,
        "n_virtual": cand.n_virtual,
        "state_recipe": cand.state_recipe,
        "zero": cand.zero,
        "terms_s": {
            "math": cand.math_s,
            "fsdp": cand.fsdp_s,
            "dp": cand.dp_s,
            "tp": cand.tp_s,
            "cp": cand.cp_s,
            "ep": cand.ep_s,
            "pp": cand.pp_s,
            "bubble": cand.bubble_s,
        },
        "expected_terms_s": cand.expected_terms,
        "expected_exposed_s": cand.expected_exposed_s,
        "expected_step_range_s": list(cand.expected_step_range_s),
        "stack": cand.stack,
        "hidden_comm_to_math": cand.hidden_to_math,
        "tokens_per_s_per_device": cand.tokens_per_s_per_device,
        "days_per_trillion_tokens": cand.days_per_tokens(1e12),
        "precision": cand.precision,
        "uneven_pipeline": cand.uneven_pipeline,
        "keep_gathered_weights": cand.keep_gathered_weights,
        "batch_divides": batch_divides(cand),
        "tp_across_domains": tp_across_domains(cand),
    }


def _parse_mesh(text, flag="--mesh"):
    """The mesh `text` names (axis=degree pairs); errors name `flag`, the option it came from."""
    mesh = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValueError(f"{flag}: write axis=degree pairs separated by commas (fsdp=32,tp=8), got {text!r}")
        if name in mesh:
            raise ValueError(f"{flag}: axis {name!r} is given twice")
        try:
            mesh[name] = int(value)
        except ValueError:
            raise ValueError(f"{flag}: the degree of {name!r} must be an integer, got {value.strip()!r}") from None
    return normalize_mesh(mesh)


def _parse_axes(text):
    axes = tuple(a.strip() for a in text.split(","))
    if not text.strip() or any(not a for a in axes):
        raise ValueError(f"--axes: name axes separated by commas (any of {','.join(AXES)}), got {text!r}")
    return axes


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"error: {message}\n")


DEFAULT_SEQ_LEN = "4096"  # tokens a sequence, where --seq-len is not given


def _parser():
    parser = _Parser(
        prog="python -m shardbook.explorer",
        description="Rank the meshes of a model on a number of accelerators with the book's planner: "
        "memory per device, a calibrated expected step time, and the optimistic bound.",
    )
    parser.add_argument(
        "inputs",
        nargs="*",
        metavar="MODEL ACCELERATOR N_DEVICES BATCH",
        help=f"MODEL: a preset ({', '.join(models.names())}), a published run's model "
        f"({len(models.gpt_names())} of them, from {models.gpt_names()[0]!r} to {models.gpt_names()[-1]!r}: "
        "shardbook.models.gpt_names() lists them) or the path of a Hugging Face config.json "
        "(or --config); ACCELERATOR: a preset "
        f"({', '.join(hardware.names())}) or the path of an accelerator file, .toml or .json "
        "(or --accelerator-file); N_DEVICES; BATCH: the global batch in tokens (4194304, 4M: K, M, G are "
        "2**10, 2**20, 2**30), or --batch-seqs",
    )
    parser.add_argument("--config", default=None, help="a Hugging Face config.json (MODEL is then left out)")
    parser.add_argument(
        "--accelerator-file", default=None, help="an accelerator file, .toml or .json (ACCELERATOR is then left out)"
    )
    parser.add_argument("--batch-seqs", default=None, help="the global batch in sequences (BATCH is then left out)")
    parser.add_argument(
        "--explain",
        action="store_true",
        help="with --mesh: per axis where its groups sit, bytes, time and how much hides; time and memory by component",
    )
    parser.add_argument("--top", type=int, default=10, help="rows to print (default 10)")
    parser.add_argument("--seq-len", default=None, help=f"sequence length in tokens (default {DEFAULT_SEQ_LEN})")
    parser.add_argument(
        "--axes",
        default=None,
        help=f"comma-separated mesh axes to search (default {','.join(SEARCH_AXES)}; any of {','.join(AXES)})",
    )
    parser.add_argument("--mesh", default=None, help="evaluate one mesh, e.g. fsdp=32,tp=8 (axes not named are 1)")
    parser.add_argument(
        "--rank", default=None, help="also say where this mesh (e.g. fsdp=128,tp=8,pp=16) ranks among the candidates"
    )
    parser.add_argument("--micro-batch", type=int, default=None, help="sequences per microbatch (default: searched)")
    parser.add_argument(
        "--schedule",
        default=None,
        help=f"pipeline schedule: {', '.join(memory_plan.SCHEDULES)} (default: searched per mesh, "
        f"{', '.join(SEARCHED_SCHEDULES)}, interleaving at every virtual-stage count the stage's layers allow)",
    )
    parser.add_argument(
        "--n-virtual", type=int, default=None, help="virtual stages per device (interleaved; default: searched)"
    )
    parser.add_argument(
        "--recompute",
        default=None,
        help=f"one of {', '.join(memory_plan.RECOMPUTE)} (default: of "
        f"{', '.join(memory_plan.SEARCH_POLICIES)}, the fastest that fits; the others are priced only when named)",
    )
    parser.add_argument("--attention", default="flash", help="flash (default) or eager")
    parser.add_argument(
        "--state-recipe",
        default=memory_plan.DEFAULT_STATE_RECIPE,
        help=f"bytes per parameter: {', '.join(memory_plan.STATE_RECIPES)} (default {memory_plan.DEFAULT_STATE_RECIPE})",
    )
    parser.add_argument("--zero", type=int, default=0, help="ZeRO stage 0-3 over the data-parallel ranks")
    parser.add_argument(
        "--uneven-pipeline",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="pp need not divide the layers (default: uneven where pp does not divide them)",
    )
    parser.add_argument(
        "--keep-gathered-weights",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="FSDP gathers once per step and keeps the weights (default: both tried where a mesh gathers weights)",
    )
    parser.add_argument("--ideal-overlap", action="store_true", help="TP and EP collectives hide too")
    parser.add_argument("--no-sequence-parallel", action="store_true", help="TP without sequence parallelism")
    parser.add_argument("--tp-comm-overlap", action="store_true", help="TP collectives overlapped with the matmuls")
    parser.add_argument(
        "--no-grad-reduce-overlap", action="store_true", help="the gradient reduction runs after the backward pass"
    )
    parser.add_argument(
        "--dense-replicated-over-ep",
        action="store_true",
        help="dense weights replicated over ep (default: sharded over it, as MaxText does)",
    )
    parser.add_argument(
        "--routing-node-limit", type=int, default=None, help="domains a token may reach (DeepSeek-V3: 4)"
    )
    parser.add_argument("--fp8-dispatch", action="store_true", help="expert dispatch in FP8")
    parser.add_argument(
        "--precision",
        default="bf16",
        help="bf16 (default) or fp8 matmuls, or auto: both tried, FP8 only where the accelerator has it",
    )
    parser.add_argument(
        "--slices",
        default=None,
        help="a TPU job spread over this many equal slices, which talk over DCN (default: as few as fit)",
    )
    parser.add_argument(
        "--reserve",
        default=None,
        help="HBM held back for the framework's context, communication buffers and fragmentation, e.g. 8GB "
        "(default: the family's, fitted on the published runs that ran; 0 keeps none)",
    )
    parser.add_argument(
        "--loss-logits",
        default=None,
        help=f"what the loss keeps of the logits: {', '.join(memory_plan.LOSS_LOGITS)} "
        "(default: fused_bf16 on a TPU, as MaxText; fp32_copy on a GPU, as Megatron; chunked_fp32_8 is "
        "torchtitan's loss in eight chunks)",
    )
    parser.add_argument(
        "--stack",
        default="any",
        help=f"the software stack that will run it, for the band around the expected step and, on Hopper, the "
        f"attention kernel it calls (FlashAttention-2 or cuDNN's): {', '.join(calibrate.STACKS)} (default any)",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="with --mesh on a TPU: compile the plan's training step for its topology with libtpu and print the "
        "compiler's memory and collectives beside the planner's (run with .venv-tpu/bin/python: make tpu-artifacts)",
    )
    parser.add_argument(
        "--topology", default=None, help="with --compile: the libtpu topology (default: from the devices)"
    )
    parser.add_argument(
        "--budget",
        default=None,
        help="the work the search may do, in candidates priced: one candidate is one mesh under one schedule, "
        "virtual-stage count, weight handling, precision and microbatch size, with its recomputation policies "
        f"(default {SEARCH_BUDGET_CANDIDATES:,}, about {SEARCH_BUDGET_IDLE_S} s of one idle core; a count, not seconds, so the same "
        "command prints the same table on a busy machine)",
    )
    parser.add_argument("--assumptions", action="store_true", help="print the planner's assumptions under the result")
    parser.add_argument(
        "--sweep",
        default=None,
        help="the best fitting mesh at each of several batches or sequence lengths: batch=1M,2M,4M "
        "(tokens, as BATCH) or seq=2048,4096,8192 (the batch in tokens held)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the first --top candidates as JSON (all: a large --top)"
    )
    return parser


def _positionals(args):
    """MODEL, ACCELERATOR, N_DEVICES and BATCH from the positionals and the
    flags that stand for some of them."""
    names = [
        n
        for n, flag in (
            ("MODEL", args.config),
            ("ACCELERATOR", args.accelerator_file),
            ("N_DEVICES", None),
            ("BATCH", args.batch_seqs),
        )
        if flag is None
    ]
    if len(args.inputs) != len(names):
        raise ValueError(
            f"arguments: expected {' '.join(names)} ({len(names)} values), got {len(args.inputs)}: "
            f"{' '.join(repr(a) for a in args.inputs) or 'none'}"
        )
    given = dict(zip(names, args.inputs, strict=True))
    model = inputs.read_model(given["MODEL"]) if "MODEL" in given else inputs.read_model(_json_path(args.config))
    if "ACCELERATOR" in given:
        accelerator = inputs.read_accelerator(given["ACCELERATOR"])
    else:
        if not args.accelerator_file.lower().endswith((".toml", ".json")):
            raise ValueError(f"--accelerator-file: must end in .toml or .json, got {args.accelerator_file!r}")
        accelerator = inputs.read_accelerator(args.accelerator_file)
    n_devices = inputs.parse_count("n_devices", given["N_DEVICES"], unit="devices")
    tokens = inputs.batch_tokens(args.seq_len, given.get("BATCH"), args.batch_seqs)
    return model, accelerator, n_devices, tokens


def _negative_sizes(argv):
    """A negative size argparse would take for an option ('-4M', '-1e6',
    '-inf', '-nan'): written with a minus sign (U+2212), so that it reaches
    the field it was given for and is refused there, by name."""
    plain_negative = re.compile(r"^-\d+$|^-\d*\.\d+$")  # argparse reads these as numbers already
    negative = re.compile(r"^-(\.?\d|inf(inity)?$|nan$)", re.IGNORECASE)
    return ["\u2212" + a[1:] if negative.match(a) and not plain_negative.match(a) else a for a in argv]


RESERVE_UNITLESS_MIN_BYTES = 1e6  # a plain number below a megabyte is a unit forgotten, not a reserve


def _reserve_bytes(text):
    """--reserve in bytes; a plain number under RESERVE_UNITLESS_MIN_BYTES
    other than 0 is refused ('8' meant 8 GB, and would hold back 8 bytes)."""
    text = text.replace("\u2212", "-")  # _negative_sizes' sign, echoed as the reader typed it
    value = inputs.parse_bytes("--reserve", text)
    if 0 < value < RESERVE_UNITLESS_MIN_BYTES and inputs.is_plain_number(text):
        raise ValueError(f"--reserve: a plain number is bytes; give a unit, e.g. {text}GB, got {text!r}")
    return value


def _print_json(found, explained):
    if explained is not None:
        cand, rows, parts, _ = explained
        print(json.dumps({**_as_json(cand), "axes": rows, "time_parts_s": parts}, indent=1))
    else:
        print(json.dumps([_as_json(c) for c in found], indent=1))
    return 0


def _json_path(path):
    if not path.lower().endswith(".json"):
        raise ValueError(f"--config: must be the path of a config.json, got {path!r}")
    return path


def _one_mesh(args, model, accelerator, tokens, n_devices, options):
    """([Candidate], explain()'s answer or None) for --mesh: at the
    microbatch the search would pick for the mesh, as its row in the table
    shows, unless --micro-batch names one."""
    from .candidate import evaluate
    from .explain import explain
    from .search import AUTO_PRECISION, best_for_mesh, chosen_options

    mesh = _parse_mesh(args.mesh)
    searched = best_for_mesh(model, accelerator, mesh, tokens, n_devices=n_devices, **options)
    # what the reader left to the search (the microbatch, the schedule, ...) as the search chose it
    chosen = chosen_options(searched)
    options = dict(options, **{k: v for k, v in chosen.items() if options.get(k) in (None, AUTO_PRECISION)})
    # priced again with the reader's own options: the search adapts some to the mesh (n_virtual),
    # and a reader's value that does not fit the mesh must be refused, not silently changed
    if args.explain:
        explained = explain(model, accelerator, mesh, tokens, n_devices=n_devices, **options)
        return [explained[0]], explained
    return [evaluate(model, accelerator, mesh, tokens, n_devices=n_devices, **options)], None


# the options that change what is priced, as the command line names them; shown in the header when not at their defaults
PRICED_OPTIONS = (
    "micro_batch", "schedule", "n_virtual", "recompute", "attention", "state_recipe", "zero", "uneven_pipeline",
    "keep_gathered_weights", "ideal_overlap", "no_sequence_parallel", "tp_comm_overlap", "no_grad_reduce_overlap",
    "dense_replicated_over_ep", "routing_node_limit", "fp8_dispatch", "precision", "slices", "stack", "reserve",
    "loss_logits",
)  # fmt: skip
MOE_ONLY_OPTIONS = ("dense_replicated_over_ep", "routing_node_limit", "fp8_dispatch")


def options_line(args, model):
    """'' or one line naming the options given away from their defaults
    (`--precision fp8`, `--ideal-overlap`), those that change nothing for
    this model (a dense model's expert options) said so."""
    defaults = vars(_parser().parse_args([]))
    given, idle = [], []
    for name in PRICED_OPTIONS:
        value = getattr(args, name)
        if value == defaults[name]:
            continue
        flag = "--" + name.replace("_", "-")
        text = flag if value is True else "--no-" + flag[2:] if value is False else f"{flag} {value}"
        (idle if name in MOE_ONLY_OPTIONS and not models.get(model).is_moe else given).append(text)
    line = ", ".join(given)
    if idle:
        line += ("; " if line else "") + f"no effect on a dense model: {', '.join(idle)}"
    return f"Options: {line}" if line else ""


def _whole(x):
    return abs(x - round(x)) < 1e-9


def uneven_batch_note(candidates):
    """'' or one line for candidates whose data-parallel ranks do not get a
    whole number of microbatches, saying which does not divide: the batch
    over the ranks, or the microbatch into a rank's sequences. The math and
    the communication are priced at the average count, the bubble and the
    activations at the count rounded up; a run needs both to divide."""
    uneven = [c for c in candidates if not _whole(c.n_microbatches)]
    if not uneven:
        return ""

    def why(c):
        per_rank = c.n_microbatches * c.micro_batch_seqs
        if not _whole(per_rank):
            return f"{c.label}: {per_rank:.4g} sequences per data-parallel rank"
        return f"{c.label}: microbatches of {c.micro_batch_seqs} in {round(per_rank)} sequences per rank"

    shown = "; ".join(why(c) for c in uneven[:3]) + (f"; and {len(uneven) - 3} more" if len(uneven) > 3 else "")
    return (
        f"Not a whole number of microbatches per rank ({shown}): the math and the communication are priced "
        "at the average, the bubble and the activations at the count rounded up; a run needs the batch to "
        "divide over the data-parallel ranks and the microbatch to divide each rank's share"
    )


def tight_memory_note(candidates, share=TIGHT_SHARE):
    """'' or one line naming the fitting candidates whose step and reserve
    take more than `share` of the HBM the device reports (marked 'tight')."""
    tight = [c for c in candidates if c.fits and _used_share(c) > share]
    if not tight:
        return ""
    shown = ", ".join(f"{c.label} ({_used_share(c):.0%})" for c in tight[:3])
    more = f" and {len(tight) - 3} more" if len(tight) > 3 else ""
    reserve = tight[0].reserve_bytes
    return (
        f"Tight, over {share:.0%} of HBM with the {reserve / 1e9:,.1f} GB reserve: {shown}{more}; a framework "
        "that needs more for its context, communication buffers or fragmentation will not fit these (--reserve)"
    )


def _refusal(model, accelerator, mesh, tokens, n_devices, options):
    """Why the search could not price `mesh` (the first line of the error),
    or None: priced as the search prices a mesh (best_for_mesh: its options
    adapted to the mesh, the microbatch searched unless given)."""
    from .search import best_for_mesh

    try:
        best_for_mesh(model, accelerator, mesh, tokens, n_devices=n_devices, **options)
    except (ValueError, TypeError) as error:
        return str(error).splitlines()[0]
    return None


def _loss_logits(text):
    if text is not None and text not in memory_plan.LOSS_LOGITS:
        raise ValueError(f"--loss-logits: one of {', '.join(memory_plan.LOSS_LOGITS)}, got {text!r}")
    return text


def _stack(text):
    if text not in calibrate.STACKS:
        raise ValueError(f"--stack: one of {', '.join(calibrate.STACKS)}, got {text!r}")
    return text


SWEEP_KEYS = ("batch", "seq")
MAX_SWEEP_VALUES = 12  # each value is a whole search


def parse_sweep(text):
    """(key, [values as given]) from 'batch=1M,2M' or 'seq=2048,4096'; a
    ValueError naming --sweep and the rule otherwise."""
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or key not in SWEEP_KEYS:
        raise ValueError(f"--sweep: write batch=V1,V2,... or seq=V1,V2,... (e.g. seq=2048,4096), got {text!r}")
    items = [v.strip() for v in values.split(",")]
    if not values.strip() or any(not v for v in items):
        raise ValueError(f"--sweep: {key}= needs one or more values separated by commas, got {text!r}")
    if len(items) > MAX_SWEEP_VALUES:
        raise ValueError(f"--sweep: at most {MAX_SWEEP_VALUES} values (each is a whole search), got {len(items)}")
    name = "--sweep batch" if key == "batch" else "--sweep seq"
    for v in items:  # each must read as a count (K, M, G allowed for the batch)
        inputs.parse_count(name, v, maximum=1e30 if key == "batch" else 2**53)
    return key, items


def sweep_rows(key, values, model, accelerator, n_devices, tokens, axes, options, budget_candidates=None):
    """One row a value: (batch tokens, seq_len, best fitting Candidate or
    None, meshes searched, why none was found or ''), the other of batch and
    sequence length held. The sweep shares one search's work
    (`budget_candidates`, candidates priced; default SEARCH_BUDGET_CANDIDATES):
    past it, SearchTooLong."""
    from .search import SearchTooLong, explore

    budget = SEARCH_BUDGET_CANDIDATES if budget_candidates is None else budget_candidates
    rows, spent = [], 0
    for text in values:
        opts = dict(options)
        if key == "seq":
            opts["seq_len"] = inputs.parse_count("--sweep seq", text)
        batch = tokens if key == "seq" else None
        try:
            batch = inputs.batch_tokens(opts["seq_len"], tokens if key == "seq" else text)
            # the whole sweep shares one search's work, so that it answers as one search does;
            # each value gets an equal share of what is left, so that the first does not spend it all refining
            share = (budget - spent) // (len(values) - len(rows))
            if share < 1:
                raise SearchTooLong(
                    f"--sweep: its searches priced the {budget:,} candidates a search is given after "
                    f"{len(rows)} of {len(values)} values; sweep fewer values or narrow the search (--axes, fewer devices)"
                )
            found = explore(model, accelerator, n_devices, batch, axes=axes, budget_candidates=share, **opts)
        except SearchTooLong:
            raise
        except (ValueError, TypeError) as error:
            rows.append((batch, opts["seq_len"], None, 0, str(error).splitlines()[0]))
            continue
        spent += found.priced
        fitting = [c for c in found if c.fits]
        rows.append(
            (batch, opts["seq_len"], fitting[0] if fitting else None, len(found), "" if fitting else "none fits")
        )
    return rows


def format_sweep(rows):
    """The sweep as a plain-text table."""
    header = ("batch tokens", "seq len", "best mesh", "expected step ms", "band ms", "tokens/s /device",
              "days /1T tokens", MEMORY_COLUMN)  # fmt: skip
    out = []
    for batch, seq_len, cand, _, why in rows:
        if cand is None:
            shown = f"{batch:,}" if batch is not None else "-"
            out.append((shown, f"{seq_len:,}", why[:90], "", "", "", "", ""))
            continue
        low, high = cand.expected_step_range_s
        out.append((
            f"{batch:,}", f"{seq_len:,}", cand.label, f"{cand.expected_step_s * 1e3:,.0f}",
            f"{low * 1e3:,.0f}-{high * 1e3:,.0f}", f"{cand.tokens_per_s_per_device:,.0f}",
            f"{cand.days_per_tokens(1e12):,.1f}",
            memory_text(cand),
        ))  # fmt: skip
    widths = [max(len(r[i]) for r in [header, *out]) for i in range(len(header))]
    lines = ["  ".join(v.ljust(w) if i == 2 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths, strict=True)))
             for r in [header, *out]]  # fmt: skip
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _check_sweep_flags(args):
    """One ValueError where a flag gives what --sweep varies, or shapes a
    search beside --mesh (each was dropped without a word); then the
    defaults of --seq-len, --axes and --budget."""
    if args.sweep is not None:
        key, _ = parse_sweep(args.sweep)
        if key == "seq" and args.seq_len is not None:
            raise ValueError("--sweep seq=...: varies the sequence length; drop --seq-len")
        if key == "batch" and args.batch_seqs is not None:
            raise ValueError("--sweep batch=...: varies the batch; drop --batch-seqs")
    if args.seq_len is None:
        args.seq_len = DEFAULT_SEQ_LEN
    for flag, value in (("--axes", args.axes), ("--budget", args.budget)):
        # ignored beside --mesh before, without a word: a reader who narrowed the search thought it applied
        if value is not None and args.mesh is not None:
            raise ValueError(f"{flag}: shapes the search, which --mesh skips; drop {flag} or --mesh")
    args.axes = ",".join(SEARCH_AXES) if args.axes is None else args.axes
    args.budget = str(SEARCH_BUDGET_CANDIDATES) if args.budget is None else args.budget


def _check_flag_combinations(args):
    """One ValueError for flags that cannot go together."""
    if args.sweep is not None and (args.mesh is not None or args.rank is not None or args.json):
        raise ValueError("--sweep: prints the best mesh at each value; drop --mesh, --rank and --json")
    if args.explain and args.mesh is None:
        raise ValueError("--explain: name the mesh to explain with --mesh (e.g. --mesh fsdp=32,tp=8)")
    if args.rank is not None and args.mesh is not None:
        raise ValueError("--rank: ranks a mesh among the search's candidates; drop --mesh, which prices one mesh")
    if args.compile and (args.mesh is None or args.json or args.explain):
        raise ValueError("--compile: compiles one plan; name its mesh with --mesh, without --json and --explain")
    if args.topology is not None and not args.compile:
        raise ValueError("--topology: names the slice --compile compiles for; add --compile")
    if args.rank is not None and args.json:
        raise ValueError("--rank: prints a line under the table, which --json does not print; drop one of them")


def as_flag(message):
    """A library's 'name: rule' message as the command line's '--name: rule'
    where --name is one of its options (`slices` is --slices, `seq_len`
    --seq-len); any other message as it is."""
    return _cli.as_flag(_parser(), message)


def main(argv=None):
    """`python -m shardbook.explorer MODEL ACCELERATOR N_DEVICES BATCH`:
    print the ranked meshes (or one, with --mesh; its breakdown with
    --explain); bad input is one line on stderr and exit code 2."""
    from .candidate import TooFewSequences
    from .search import explore

    # intermixed: MODEL, N_DEVICES and BATCH may stand on either side of a flag that stands for another
    args = _parser().parse_intermixed_args(_negative_sizes(sys.argv[1:] if argv is None else list(argv)))
    try:
        _check_sweep_flags(args)
        model, accelerator, n_devices, tokens = _positionals(args)
        seq_len = inputs.parse_count("seq_len", args.seq_len)
        _validate.count("--top", args.top)
        budget = inputs.parse_count("--budget", args.budget, unit="candidates")
        if tokens < n_devices:
            raise ValueError(f"tokens: {tokens:g} is below one token per device ({n_devices} devices)")
        _check_flag_combinations(args)
        options = dict(
            seq_len=seq_len,
            micro_batch_seqs=args.micro_batch,
            schedule=args.schedule,
            n_virtual=args.n_virtual,
            recompute=args.recompute,
            attention=args.attention,
            state_recipe=args.state_recipe,
            zero=args.zero,
            uneven_pipeline=args.uneven_pipeline,
            keep_gathered_weights=args.keep_gathered_weights,
            ideal_overlap=args.ideal_overlap,
            sequence_parallel=not args.no_sequence_parallel,
            tp_comm_overlap=args.tp_comm_overlap,
            grad_reduce_overlap=not args.no_grad_reduce_overlap,
            dense_over_ep=not args.dense_replicated_over_ep,
            routing_node_limit=args.routing_node_limit,
            fp8_dispatch=args.fp8_dispatch,
            precision=args.precision,
            slices=None if args.slices is None else inputs.parse_count("slices", args.slices, unit="slices"),
            stack=_stack(args.stack),
            reserve_bytes=None
            if args.reserve is None
            else calibrate.checked_reserve_bytes(accelerator, _reserve_bytes(args.reserve), "--reserve"),
            loss_logits=_loss_logits(args.loss_logits),
        )
        target = _parse_mesh(args.rank, "--rank") if args.rank is not None else None
        axes = _parse_axes(args.axes)
        explained = refused = None
        if args.sweep is not None:
            key, values = parse_sweep(args.sweep)
            rows = sweep_rows(key, values, model, accelerator, n_devices, tokens, axes, options, budget)
            print(f"{model.name} on {n_devices} × {accelerator.name}: the best fitting mesh at each {key}")
            print()
            print(format_sweep(rows))
            if all(cand is None and why != "none fits" for _, _, cand, _, why in rows):
                raise ValueError("--sweep: every value was refused (the table says why); give values that can run")
            return 0
        if args.compile:
            compiled = _compiled(args, model, accelerator, tokens, n_devices, options)
        if args.mesh is not None:
            found, explained = _one_mesh(args, model, accelerator, tokens, n_devices, options)
        else:
            found = explore(model, accelerator, n_devices, tokens, axes=axes, budget_candidates=budget, **options)
            if not found:
                raise ValueError(
                    inputs.no_mesh_reason(
                        model, accelerator, n_devices, tokens, seq_len, axes, dict(options, budget_candidates=budget)
                    )
                )
            if target is not None and all(c.mesh != target for c in found):
                refused = _refusal(model, accelerator, target, tokens, n_devices, options)
    except TooFewSequences as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except (ValueError, TypeError, RuntimeError) as error:
        print(f"error: {as_flag(str(error).splitlines()[0][:500])}", file=sys.stderr)
        return 2
    if args.json:
        return _print_json(found[: args.top], explained)
    if args.compile:
        _print_text(args, model, accelerator, n_devices, tokens, seq_len, found, explained, target, refused)
        print("\n" + compiled(found[0]))
        return 0
    return _print_text(args, model, accelerator, n_devices, tokens, seq_len, found, explained, target, refused)


def _is_preset(lookup, thing):
    """Whether `thing` (a Model or an Accelerator) is the preset of its name,
    shapes and figures alike."""
    try:
        return lookup(thing.name) == thing
    except (KeyError, ValueError):
        return False


def _compiled(args, model, accelerator, tokens, n_devices, options):
    """For --compile: refuse in one line what cannot be compiled (a GPU, no
    libtpu, flash attention, a ZeRO stage), then a function of the priced
    Candidate that compiles its plan (shardbook.hlo.compile_plan, imported
    here: only .venv-tpu has libtpu) and returns the comparison's lines."""
    # The JAX layer, reached only here, on the command line: the browser, which loads this module,
    # never runs --compile, and the compile module needs libtpu, which only .venv-tpu has.
    compile_plan = importlib.import_module("shardbook.hlo.compile_plan")

    if accelerator.family != "tpu":
        raise ValueError(
            f"--compile: compiles for TPU topologies only ({', '.join(compile_plan.TOPOLOGY_PREFIX)}); "
            f"{accelerator.name} is a {accelerator.family.upper()}"
        )
    # the compiler builds presets by name: a file's model or accelerator, even under a preset's name,
    # would compile the preset's shapes beside the planner's figures for the file's
    if not _is_preset(hardware.get, accelerator):
        raise ValueError(
            f"--compile: compiles the TPU presets only; {accelerator.name!r} comes from --accelerator-file, not a preset"
        )
    if not _is_preset(models.get, model):
        raise ValueError(
            f"--compile: compiles the model presets only; {model.name!r} comes from --config and its shapes are "
            "not a preset's"
        )
    if options["zero"]:
        raise ValueError("--compile: shards the state over the fsdp axis only; drop --zero")
    if options["attention"] != "eager":
        raise ValueError(
            "--compile: the compiled step keeps eager attention's probabilities (the planner's --attention eager); "
            "add --attention eager"
        )
    mesh = _parse_mesh(args.mesh)
    probe = compile_plan.Plan(
        model.name, accelerator.name, mesh, options["seq_len"], tokens // options["seq_len"],
        options["micro_batch_seqs"] or 1, options["recompute"] or "full", options["state_recipe"], args.topology,
    )  # fmt: skip
    compile_plan.check_plan(probe)
    compile_plan.compiler_mesh(probe, args.topology or compile_plan.topology_for(accelerator.name, probe.n_devices))
    compile_plan.check_libtpu()

    def run(cand):
        plan = compile_plan.Plan(
            model.name, accelerator.name, {a: d for a, d in cand.mesh.items() if d > 1}, options["seq_len"],
            tokens // options["seq_len"], cand.micro_batch_seqs, cand.recompute, cand.state_recipe, args.topology,
        )  # fmt: skip
        return compile_plan.format_comparison(compile_plan.compile_plan(plan))

    return run


def _print_text(args, model, accelerator, n_devices, tokens, seq_len, found, explained, target, refused):
    """The header, the table (or --explain's breakdown), the notes under it
    and the assumptions; 0."""
    from .explain import format_explain

    usable = calibrate.hbm_capacity_bytes(accelerator)
    reported = "" if usable == accelerator.hbm_bytes else f", {usable / 1e9:,.1f} GB as the device reports it"
    print(
        f"{model.name} on {n_devices} × {accelerator.name} ({accelerator.hbm_bytes / 1e9:,.0f} GB HBM each{reported}), "
        f"{tokens:,} tokens per step ({tokens // seq_len:,} sequences of {seq_len:,}): "
        f"{len(found)} mesh{'' if len(found) == 1 else 'es'}"
    )
    print(inputs.model_line(model))
    for line in (inputs.accelerator_note(accelerator), options_line(args, model)):
        if line:
            print(line)
    if found:
        print(
            f"HBM held back for the framework (context, communication buffers, fragmentation): "
            f"{found[0].memory_breakdown.get('reserve', 0.0) / 1e9:,.1f} GB a device (--reserve), counted in the "
            "memory column"
        )
    print()
    if explained is not None:
        print(format_explain(*explained))
        for note in filter(None, (uneven_batch_note(found), tight_memory_note(found))):
            print("\n" + note)
        _print_assumptions(args)
        return 0
    print(format_table(found, args.top))
    notes = (adapted_line(found, args.schedule, args.n_virtual), search_line(found), inputs.no_fit_note(found))
    notes += (uneven_batch_note(found[: args.top]), tight_memory_note(found[: args.top]))
    notes += (rank_line(found, target, refused, _parse_axes(args.axes)) if target is not None else "",)
    notes = (
        band_line(found),
        cross_domain_tp_note(found[: args.top], accelerator),
        fragile_line(found[: args.top]),
        ep_overtake_line(found),
    ) + notes
    for note in filter(None, notes):
        print("\n" + note)
    _print_assumptions(args)
    return 0


def _print_assumptions(args):
    if args.assumptions:
        print("\nAssumptions:\n" + ASSUMPTIONS)
    else:
        print("\nWhat the planner assumes (overlap, kernels, what it leaves out): add --assumptions")


_validate.guard_module(globals(), exclude=("main",))
