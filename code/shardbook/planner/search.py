"""Step 5 of the planner: enumerate the meshes and rank them.

Every mesh over the chosen axes whose degrees multiply to the device count
and divide what they split is evaluated; the microbatch size and the
recomputation policy are searched per mesh unless given. Candidates that
fit come first, ranked by the calibrated expected step time; the bound is
shown beside it. Divisors come from the device count's prime
factorization, and a search that would exceed MAX_MESHES meshes is refused
rather than run for hours.
"""

import time

from .. import _validate, hardware, models, pipeline
from . import memory_plan
from .candidate import Candidate, TooFewSequences, evaluate
from .layout import check_options
from .placement import AXES, TUPLE_AXES, axis_rules, check_mesh, check_slices, divisors, normalize_mesh

MAX_MESHES = 100_000
MICRO_BATCH_CHOICES = (1, 2, 4, 8, 16, 32)
# The time the command line and the planner page give a search (explore's `budget_s`) before
# refusing it with a line that says how to narrow it: with Python's start and the enumeration
# it answers within 10 s (a six-axis search of DeepSeek-V3 on 2**30 devices ran 99 s in the
# fourth audit, with no output). A chapter's search runs to its end (budget_s None).
SEARCH_BUDGET_S = 7.0


class SearchTooLong(ValueError):
    """A search that ran past its budget_s: the message says how far it got
    and how to narrow it."""


def _check_axes(axes):
    if not isinstance(axes, (tuple, list)) or not axes:
        raise ValueError(f"axes: name at least one of {', '.join(AXES)}, got {axes!r}")
    seen = set()
    for axis in axes:
        _validate.choice("axes", axis, AXES)
        if axis in seen:
            raise ValueError(f"axes: {axis!r} is given twice; name each axis once")
        seen.add(axis)


def allowed_degrees(n_devices, model, axis, seq_len=4096, uneven_pipeline=False):
    """The divisors of n_devices (from its prime factorization) that `axis`
    may take on its own: tp dividing the heads and F and a divisor or
    multiple of the KV heads, ep the experts, pp the layers (at most the
    layers when uneven), cp the sequence length."""
    m = models.get(model)
    _validate.choice("axis", axis, AXES)
    options = divisors(n_devices)
    for rule_axis, total, _ in axis_rules(m, seq_len):
        if rule_axis == axis and not (axis == "pp" and uneven_pipeline):
            options = [d for d in options if total % d == 0]
    if axis == "pp":
        options = [d for d in options if d <= m.n_layers]
    if axis == "tp":
        options = [d for d in options if m.n_kv_heads % d == 0 or d % m.n_kv_heads == 0]
    return options


def factorizations(n_devices, model, axes=TUPLE_AXES, seq_len=4096, uneven_pipeline=False):
    """Every (fsdp, tp, ep, pp) tuple (or, with `axes`, every dict over those
    axes) whose product is n_devices and that the model can use. Degrees
    are drawn from allowed_degrees; more than MAX_MESHES meshes is a
    ValueError."""
    _validate.count("n_devices", n_devices)
    m = models.get(model)
    _check_axes(axes)
    _validate.count("seq_len", seq_len)
    allowed = {axis: allowed_degrees(n_devices, m, axis, seq_len, uneven_pipeline) for axis in axes}
    out = []

    def keep(mesh):
        try:
            check_mesh(m, mesh, seq_len, uneven_pipeline)
        except ValueError:
            return
        out.append(tuple(mesh[a] for a in TUPLE_AXES) if tuple(axes) == TUPLE_AXES else mesh)
        if len(out) > MAX_MESHES:
            raise ValueError(
                f"n_devices: {n_devices} devices over {len(axes)} axes give more than {MAX_MESHES} meshes; "
                f"search fewer axes"
            )

    def rec(i, remaining, chosen):
        if i == len(axes) - 1:
            if remaining in allowed[axes[i]]:
                keep(normalize_mesh(dict(chosen, **{axes[i]: remaining})))
            return
        for d in allowed[axes[i]]:
            if d > remaining:
                break
            if remaining % d == 0:
                rec(i + 1, remaining // d, dict(chosen, **{axes[i]: d}))

    rec(0, n_devices, {})
    return out


def _for_mesh(model, mesh, options):
    """The options adapted to one mesh: an interleaved schedule's virtual
    stages capped at what the mesh's pipeline allows; TooFewSequences when
    the schedule cannot run on the mesh (DualPipe on an odd pipeline)."""
    pp = mesh.get("pp", 1)
    schedule = options.get("schedule", "1f1b")
    if schedule == "dualpipe" and pp > 1 and pp % 2:
        raise TooFewSequences("schedule: cannot run on this mesh")
    v = options.get("n_virtual", 1)
    if v > 1:
        most = largest_n_virtual(model, pp, options.get("uneven_pipeline", False)) if pp > 1 else 1
        v = max(d for d in range(1, min(v, most) + 1) if most % d == 0)  # a divisor of the stage's layers
        options = dict(options, n_virtual=v, schedule=options["schedule"] if v > 1 else "1f1b")
    return options


def _best_of(model, accelerator, mesh, global_tokens, n_devices, options):
    """The mesh's best Candidate over the microbatch sizes (when not given)."""
    options = _for_mesh(model, mesh, options)
    if options.get("micro_batch_seqs") is not None:
        return evaluate(model, accelerator, mesh, global_tokens, n_devices=n_devices, **options)
    tried = _by_micro_batch(model, accelerator, mesh, global_tokens, n_devices, options)
    if not tried:
        ranks = mesh.get("dp", 1) * mesh.get("fsdp", 1) * mesh.get("ep", 1)
        seq_len = options.get("seq_len", 4096)  # evaluate's default, as _usable reads it
        if global_tokens / seq_len / ranks >= 1:
            # each rank has a sequence, yet no size the search tries runs: the smallest says why
            first = dict(options, micro_batch_seqs=MICRO_BATCH_CHOICES[0])
            evaluate(model, accelerator, mesh, global_tokens, n_devices=n_devices, **first)
        raise TooFewSequences(
            f"batch: {global_tokens / seq_len:g} sequences of {seq_len} over {ranks} data-parallel ranks "
            "(dp × fsdp × ep) leave less than one sequence per rank"
        )
    # fitting first, by the shortest expected step; if none fits, the least memory (what the mesh
    # needs at best); min keeps the first (smallest) size on a tie
    return min(
        tried.values(),
        key=lambda cand: (not cand.fits, cand.expected_step_s if cand.fits else cand.memory_bytes_per_device),
    )


def _by_micro_batch(model, accelerator, mesh, global_tokens, n_devices, options):
    """{microbatch size: Candidate} for each size of MICRO_BATCH_CHOICES,
    smallest first, up to the first that leaves a data-parallel rank no
    whole microbatch; sizes whose memory cannot be counted are left out."""
    tried = {}
    for micro in MICRO_BATCH_CHOICES:
        try:
            tried[micro] = evaluate(
                model, accelerator, mesh, global_tokens, n_devices=n_devices, **dict(options, micro_batch_seqs=micro)
            )
        except TooFewSequences:
            break
        except memory_plan.Unusable:
            continue
    return tried


def candidates_by_micro_batch(model, accelerator, mesh, global_tokens, *, n_devices, **options):
    """{microbatch size: Candidate} for every size the search tries on
    `mesh` (`micro_batch_seqs` is set per size), in the order it tries them:
    what `best_for_mesh` chooses among."""
    mesh = normalize_mesh(mesh)
    options = _for_mesh(model, mesh, options)
    return _by_micro_batch(model, accelerator, mesh, global_tokens, n_devices, options)


def best_for_mesh(model, accelerator, mesh, global_tokens, *, n_devices, **options):
    """The Candidate `explore` ranks for `mesh`: with `micro_batch_seqs`
    None, at the microbatch size the search picks (fitting first, then the
    shortest expected step, the smallest size on a tie). The command line's
    --mesh and --explain price a mesh this way, so that they show the row
    the table showed."""
    options.setdefault("micro_batch_seqs", None)
    return _best_of(model, accelerator, normalize_mesh(mesh), global_tokens, n_devices, options)


def _usable(model, accelerator, n_devices, global_tokens, axes, options, budget_s=None):
    """A Candidate for every mesh over `axes` that leaves each data-parallel
    rank at least one microbatch; SearchTooLong once `budget_s` seconds
    (None: no limit) have passed."""
    found = []
    start = time.monotonic()
    meshes = factorizations(n_devices, model, axes, options.get("seq_len", 4096), options.get("uneven_pipeline", False))
    for done, mesh in enumerate(meshes):
        if budget_s is not None and time.monotonic() - start > budget_s:
            raise SearchTooLong(
                f"search: {len(meshes):,} meshes of {n_devices:,} devices over {','.join(axes)}; {done:,} priced in "
                f"{budget_s:g} s, the time a search is given; narrow it: fewer axes (--axes, default "
                f"{','.join(TUPLE_AXES)}), one mesh (--mesh), or fewer devices"
            )
        mesh = dict(zip(TUPLE_AXES, mesh, strict=True)) if isinstance(mesh, tuple) else mesh
        try:
            found.append(_best_of(model, accelerator, mesh, global_tokens, n_devices, options))
        except memory_plan.Unusable:
            pass
    return found


def rank_key(candidate):
    """Fitting candidates first, each group by expected step time, then by the bound."""
    if not isinstance(candidate, Candidate):
        raise TypeError(f"candidate: must be an explorer.Candidate, got {type(candidate).__name__}")
    return (not candidate.fits, candidate.expected_step_s, candidate.step_s)


def explore(model, accelerator, n_devices, global_tokens, *, axes=TUPLE_AXES, budget_s=None, **options):
    """Every usable mesh over `axes`, fitting ones first, each group by
    expected step time (the bound beside it). `micro_batch_seqs` None (the
    default here) searches the microbatch size; other options as evaluate.
    Meshes that leave a data-parallel rank less than one microbatch are left
    out. `budget_s`: seconds the search may take (the command line and the
    planner page give SEARCH_BUDGET_S), else SearchTooLong, a ValueError
    that says how to narrow it; None, no limit."""
    if budget_s is not None:
        _validate.positive("budget_s", budget_s)
    models.get(model), hardware.get(accelerator)  # unknown presets fail here, by name
    _validate.positive("global_tokens", global_tokens)
    options.setdefault("micro_batch_seqs", None)
    _check_axes(axes)
    check_options(
        options.get("schedule", "1f1b"),
        options.get("n_virtual", 1),
        options.get("recompute"),
        options.get("attention", "flash"),
        options.get("state_recipe", memory_plan.DEFAULT_STATE_RECIPE),
        options.get("zero", 0),
        1,
    )
    _validate.choice("precision", options.get("precision", "bf16"), ("bf16", "fp8"))
    if options.get("slices") is not None:
        check_slices(accelerator, _validate.count("n_devices", n_devices), options["slices"])
    if options.get("routing_node_limit") is not None:
        _validate.count("routing_node_limit", options["routing_node_limit"])
    found = _usable(model, accelerator, n_devices, global_tokens, axes, options, budget_s)
    return sorted(found, key=rank_key)


RUN_OPTIONS = (
    "schedule",
    "n_virtual",
    "state_recipe",
    "zero",
    "attention",
    "sequence_parallel",
    "keep_gathered_weights",
    "dense_over_ep",
    "routing_node_limit",
    "fp8_dispatch",
    "precision",
    "tp_comm_overlap",
    "grad_reduce_overlap",
    "capacity_factor",
    "loss_logits",
    "slices",
)


# What the sources say about a published run's layout beyond its mesh, for runs
# whose measured.PublishedRun record does not carry these fields (a field the
# record carries wins). Keyed by the run's model and accelerator.
PUBLISHED_LAYOUTS = {
    # dubey2024llama3 §3.3.2: "an interleaved schedule ... with V pipeline stages on one
    # pipeline rank"; one layer each is taken from the first and last stages so that "the
    # first model chunk on the first stage has only the embedding": chunks of one layer, so
    # V = 128 / 16 = 8, the first stage's first chunk and the last stage's last chunk empty
    # (pipeline.uneven_chunk_layers). FSDP "does not reshard after forward": weights gathered
    # once per step.
    ("LLaMA-3 405B", "H100"): {"schedule": "interleaved", "n_virtual": 8, "keep_gathered_weights": True},
    # deepseek2024v3 §3.2: DualPipe, ZeRO-1 data parallelism, attention replicated over the
    # EP ranks, each token sent to at most 4 nodes, the dispatch in FP8.
    ("DeepSeek-V3", "H800"): {
        "schedule": "dualpipe",
        "zero": 1,
        "dense_over_ep": False,
        "routing_node_limit": 4,
        "fp8_dispatch": True,
    },
}


def largest_n_virtual(model, pp, uneven_pipeline=False):
    """The most virtual stages per device a pipeline of pp stages allows: a
    divisor of the deepest stage's layers. An even pipeline splits every
    stage alike; an uneven one takes the layers it lacks out of the first
    stage's first chunks and the last stage's last chunks
    (pipeline.uneven_chunk_layers), which may leave such a chunk with no
    transformer layer: Llama 3's first chunk holds only the embedding, its
    126 layers on 16 stages run chunks of one layer, v = 8 (dubey2024llama3
    §3.3.2)."""
    m = models.get(model)
    _validate.count("pp", pp)
    if pp > m.n_layers or (m.n_layers % pp and not uneven_pipeline):
        return 1
    deepest = memory_plan.deepest_stage_layers(m.n_layers, pp, 1, uneven_pipeline)
    for v in sorted((v for v in range(1, deepest + 1) if deepest % v == 0), reverse=True):
        if not uneven_pipeline:
            return v
        try:
            pipeline.uneven_chunk_layers(m.n_layers, pp, v)
        except ValueError:
            continue
        return v
    return 1


def run_options(run):
    """The evaluate options a published run declares: its sequence length,
    microbatch, recomputation and pipeline layout, and any planner option
    the run record carries (schedule, n_virtual, state_recipe, zero, ...)."""
    from ..measured import PublishedRun

    if not isinstance(run, PublishedRun):
        raise TypeError(f"run: must be a measured.PublishedRun, got {type(run).__name__}")
    options = dict(
        seq_len=run.seq_len,
        micro_batch_seqs=run.micro_batch_seqs,
        recompute=run.recompute,
        uneven_pipeline=run.uneven_pipeline,
    )
    if getattr(run, "remat_policy", "") in memory_plan.RECOMPUTE:
        options["recompute"] = run.remat_policy  # the policy the run declares, where the planner knows it
    options.update(PUBLISHED_LAYOUTS.get((run.model, run.accelerator), {}))
    for name in RUN_OPTIONS:
        value = getattr(run, name, None)
        if value is not None:
            options[name] = value
    pp = run.mesh.get("pp", 1)
    if options.get("schedule") == "interleaved" and "n_virtual" not in options and pp > 1:
        options["n_virtual"] = largest_n_virtual(run.model, pp, run.uneven_pipeline)
    return options


def bound_for_run(run):
    """The planner's Candidate for a published run's own mesh under the
    options it declares, with every collective that any implementation has
    overlapped taken as hidden (ideal_overlap): its `mfu` is the bound the
    run must not beat, its `expected_step_s` the calibrated estimate."""
    options = run_options(run)
    options.setdefault("ideal_overlap", True)
    return evaluate(run.model, run.accelerator, run.mesh, run.global_tokens, **options)


class RunRank(tuple):
    """(rank, count) of a run's own mesh, by expected step time among the
    candidates that fit (1 = best; its own mesh counted even if it does not
    fit), with `own` and `best` Candidates and `slower_by`, the own mesh's
    expected step time over the best's, minus one."""

    def __new__(cls, rank, count, own, best):
        self = super().__new__(cls, (rank, count))
        self.own, self.best = own, best
        return self

    @property
    def rank(self):
        """1 for the best."""
        return self[0]

    @property
    def count(self):
        """Candidates ranked."""
        return self[1]

    @property
    def slower_by(self):
        """Own expected step time / best's, minus one (0 when it is the best)."""
        if self.own is None or self.best is None:
            return None
        return self.own.expected_step_s / self.best.expected_step_s - 1


def rank_of_run(run, axes=None):
    """Where a published run's own mesh ranks among the planner's candidates
    for the same model, devices and batch (over fsdp, tp, ep, pp and any
    other axis the run uses), with the run's own options (its microbatch
    size, schedule and recomputation for every mesh), by expected step time
    among the candidates that fit: a RunRank (rank, count) with `own`,
    `best` and `slower_by`; rank None if the mesh is not among them."""
    options = run_options(run)
    if axes is None:
        axes = tuple(a for a in AXES if a in TUPLE_AXES or a in run.mesh)
    found = _usable(run.model, run.accelerator, run.n_devices, run.global_tokens, axes, options)
    target = normalize_mesh(run.mesh)
    own = next((c for c in found if c.mesh == target), None)
    fitting = [c for c in found if c.fits]
    best = min(fitting, key=rank_key) if fitting else None
    if own is None:
        return RunRank(None, len(fitting), None, best)
    faster = sum(c.expected_step_s < own.expected_step_s * (1 - 1e-9) for c in fitting if c is not own)
    count = len(fitting) + (0 if own.fits else 1)
    return RunRank(1 + faster, count, own, best)


def predicted_collectives(candidate):
    """The collectives the cost model expects in one training step of a
    two-matmul layer on this mesh, as (kind, mesh axis) pairs; the gradient
    reduction is listed as reduce_scatter (what a GPU pipeline forms)."""
    if not isinstance(candidate, Candidate):
        raise TypeError(f"candidate: must be an explorer.Candidate, got {type(candidate).__name__}")
    out = []
    if candidate.fsdp > 1:
        out += [("all_gather", "fsdp"), ("reduce_scatter", "fsdp")]
    if candidate.dp > 1:
        out += [("all_reduce", "dp")]
    if candidate.tp > 1:
        out += [("all_reduce", "tp")]
    if candidate.cp > 1:
        out += [("all_gather", "cp")]
    if candidate.ep > 1:
        out += [("all_to_all", "ep")]
    if candidate.pp > 1:
        out += [("collective_permute", "pp")]
    return out


_validate.guard_module(globals())
