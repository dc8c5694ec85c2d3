"""Step 5 of the planner: enumerate the meshes and rank them.

Every mesh over the chosen axes (SEARCH_AXES unless named: data
parallelism, FSDP, tensor, expert and pipeline parallelism) whose degrees
multiply to the device count and divide what they split is evaluated.
Per mesh the search tries, unless the caller fixes them: the microbatch
size, the pipeline schedule (SEARCHED_SCHEDULES, interleaving at every
virtual-stage count the stage's layers allow), an uneven pipeline where pp
does not divide the layers, FSDP's weights kept gathered or gathered again,
the precision where the run asks for 'auto' (FP8 only on an accelerator
that has it), and the fastest recomputation policy that fits; the mesh's
row is its fastest variant that runs. Candidates that fit with a batch that
divides come first, then those that fit but whose batch does not divide
(they cannot run as priced), then the rest, each group by the calibrated
expected step time; the bound is shown beside it. Divisors come from the
device count's prime factorization, and a search that would exceed
MAX_MESHES meshes is refused rather than run for hours. The variants of a
mesh share their per-axis collective costs (timing.shared_costs) rather
than pricing each again.
"""

import math

from .. import _validate, hardware, models, pipeline
from . import calibrate, memory_plan, timing
from .candidate import Candidate, TooFewSequences, evaluate, evaluate_plan, fitting_policies, recompute_policies
from .layout import PRECISIONS, check_options
from .options import PlanOptions
from .placement import AXES, TUPLE_AXES, axis_rules, check_mesh, check_slices, divisors, normalize_mesh
from .timing import P2P_OVERLAP_SCHEDULES

MAX_MESHES = 100_000
MICRO_BATCH_CHOICES = (1, 2, 4, 8, 16, 32)
# The work the command line and the planner page give a search (explore's `budget_candidates`):
# candidates priced, one an evaluate call (a mesh under one schedule, virtual-stage count, weight
# handling, precision and microbatch size, the recomputation policies that fit priced inside it).
# A count, not seconds, so that the same inputs give the same table however busy the machine is:
# an idle core of the 2-core machine priced 930 to 1,550 a second (Mixtral 8x7B to LLaMA-3 70B on
# 64 H100), so 8,000 took about the 7 s the search had before; since each matmul is priced at its
# shape, about 800 a second in the largest searches (December 2026: DeepSeek-V3 on 2,048 H800,
# 8,000 in 10.2 s, of which its 1,189 meshes' base variants take 5,527), so about 10 s, and
# a search past it is refused with a line that says how to narrow it (a six-axis search of
# DeepSeek-V3 on 2**30 devices ran 99 s in the fourth audit, with no output). A chapter's search
# runs to its end (None).
SEARCH_BUDGET_CANDIDATES = 8_000
# what SEARCH_BUDGET_CANDIDATES costs one idle core of the 2-core machine, measured (above). Remeasured
# 6 December 2026, the command's CPU time with Python's start: DeepSeek-V3 on 2,048 H800 6.6-7.0 s; the
# audit's six-axis search on 2**30 H100, refused after its 8,000, 10.8-11.6 s (it had grown to 15-17 s
# as the cost model grew, until timing._fsdp_s was remembered per layout). On 7 December the 2-core
# machine was another (AMD EPYC): the same search at the same commit (2be5c58) took 20.9-22.1 s there,
# 1.6-1.7 s of it Python's start and the enumeration of its 84,241 meshes (`--budget 1`), so pricing a
# candidate costs about twice what it did; the figure is the slower machine's.
SEARCH_BUDGET_IDLE_S = 20
# The axes a search spans unless it is told otherwise: every scheme a team picks its mesh from
# (Meta's Llama 3: dp × tp × pp; DeepSeek-V3: dp × ep × pp); cp only when named.
SEARCH_AXES = ("dp", "fsdp", "tp", "ep", "pp")
# The schedules a pipelined mesh is tried under when none is named. GPipe is left out: its bubble
# is 1F1B's, (p−1)/m, with every microbatch's activations held where 1F1B holds min(p, m)
# (pipeline.schedule_bubble_overhead and schedule_activation_microbatches), so 1F1B is never
# slower and never needs more memory; it is priced when named. DualPipe only on an even pipeline.
SEARCHED_SCHEDULES = ("1f1b", "interleaved", "zero_bubble", "dualpipe")
# precision='auto': BF16, and FP8 matmuls where the accelerator has them
AUTO_PRECISION = "auto"


class SearchTooLong(ValueError):
    """A search whose base pass would price more candidates than its
    budget_candidates: the message says how far it got and how to narrow it."""


class _Work:
    """The candidates a search has priced (evaluate calls) against its
    budget (None: no limit)."""

    def __init__(self, budget_candidates=None):
        self.budget_candidates, self.priced = budget_candidates, 0

    def spent(self):
        return self.budget_candidates is not None and self.priced >= self.budget_candidates


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
    layers when uneven; `uneven_pipeline` None, as the search's default,
    allows an uneven pipeline), cp the sequence length."""
    uneven_pipeline = uneven_pipeline is None or uneven_pipeline
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
    uneven_pipeline = uneven_pipeline is None or uneven_pipeline  # None: uneven where pp does not divide
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


# What explore, best_for_mesh and candidates_by_micro_batch search when the caller does not fix
# it (None): the microbatch size, the schedule and its virtual stages, an uneven pipeline where pp
# does not divide the layers, FSDP's weights kept gathered or not. evaluate's own defaults are
# fixed values (1F1B, one virtual stage, an even pipeline, weights gathered again).
SEARCHED_OPTIONS = ("micro_batch_seqs", "schedule", "n_virtual", "uneven_pipeline", "keep_gathered_weights")


def _searched(options):
    """A PlanOptions of `options` (evaluate's keywords) with every
    SEARCHED_OPTIONS the caller left out set to None (searched): built once
    where the search is entered and carried to each evaluate_plan."""
    return PlanOptions.of({**dict.fromkeys(SEARCHED_OPTIONS), **options})


def virtual_stage_choices(model, pp, uneven_pipeline=False):
    """The virtual-stage counts above one that an interleaved schedule may
    run on a pipeline of pp stages, smallest first: divisors of the deepest
    stage's layers; on an uneven pipeline only those whose chunks
    pipeline.uneven_chunk_layers can lay out (the missing layers taken from
    the first stage's first chunks and the last stage's last ones)."""
    m = models.get(model)
    _validate.count("pp", pp)
    if pp == 1 or pp > m.n_layers or (m.n_layers % pp and not uneven_pipeline):
        return []
    deepest = memory_plan.deepest_stage_layers(m.n_layers, pp, 1, uneven_pipeline)
    out = []
    for v in range(2, deepest + 1):
        if deepest % v:
            continue
        if m.n_layers % pp:
            try:
                pipeline.uneven_chunk_layers(m.n_layers, pp, v)
            except ValueError:
                continue
        out.append(v)
    return out


def _schedules(model, pp, uneven, schedule, n_virtual):
    """[(schedule, n_virtual)] a mesh with pp stages is priced under. A
    named schedule with a named virtual-stage count: as given, the count
    capped at a divisor of the stage's layers (1F1B where only one is left);
    'interleaved' without a count: every count virtual_stage_choices allows;
    no schedule: SEARCHED_SCHEDULES (interleaving at each allowed count, or
    only at `n_virtual` capped as above when it is named; DualPipe only on an
    even pipeline). [] when the named schedule cannot run on the mesh
    (DualPipe on an odd pipeline)."""
    if pp == 1:
        return [("1f1b", 1) if schedule is None or (n_virtual or 1) > 1 else (schedule, 1)]
    if schedule == "dualpipe" and pp % 2:
        return []
    choices = virtual_stage_choices(model, pp, uneven)
    if n_virtual is not None and n_virtual > 1:
        fitting = [v for v in choices if v <= n_virtual and max(choices) % v == 0]
        choices = [max(fitting)] if fitting else []
    interleaved = [("interleaved", v) for v in choices]
    if schedule == "interleaved" or (schedule is None and n_virtual is not None and n_virtual > 1):
        return interleaved or [("1f1b", 1)]
    if schedule is not None:
        return [(schedule, n_virtual or 1)]
    out = [("1f1b", 1), *interleaved, ("zero_bubble", 1)]
    return out + ([("dualpipe", 1)] if pp % 2 == 0 else [])


def _gathers_weights(mesh, options):
    """Whether a mesh gathers weights before it computes (FSDP, dense weights
    sharded over ep, ZeRO-3), so that keeping them gathered changes its step."""
    return mesh.get("fsdp", 1) > 1 or (mesh.get("ep", 1) > 1 and options.dense_over_ep) or options.zero == 3


def _variants(m, acc, mesh, options):
    """The option sets the search prices `mesh` under (each with its
    microbatch size searched or given): its schedules (_schedules), FSDP's
    weights kept gathered and gathered again where the mesh gathers any
    (unless keep_gathered_weights is given), BF16 and, with precision
    'auto', FP8 where the accelerator has it; uneven_pipeline None becomes
    True where pp does not divide the layers. `m` and `acc`: the model and
    the accelerator, resolved where the search was entered."""
    pp = mesh.get("pp", 1)
    uneven = options.uneven_pipeline
    if uneven is None:
        uneven = bool(m.n_layers % pp)
    keep = options.keep_gathered_weights
    keeps = (keep,) if keep is not None else ((False, True) if _gathers_weights(mesh, options) else (False,))
    precision = options.precision
    if precision == AUTO_PRECISION:
        precisions = PRECISIONS if calibrate.fp8_peak_ratio(acc) > 1 else ("bf16",)
    else:
        precisions = (precision,)
    return [
        options.replace(uneven_pipeline=uneven, schedule=s, n_virtual=v, keep_gathered_weights=k, precision=p)
        for s, v in _schedules(m, pp, uneven, options.schedule, options.n_virtual)
        for k in keeps
        for p in precisions
    ]


def batch_divides(candidate):
    """Whether a Candidate gives every data-parallel rank a whole number of
    microbatches (the batch divides over the ranks and the microbatch
    divides each rank's share): a run needs both."""
    if not isinstance(candidate, Candidate):
        raise TypeError(f"candidate: must be an explorer.Candidate, got {type(candidate).__name__}")
    return abs(candidate.n_microbatches - round(candidate.n_microbatches)) < 1e-9


def _mesh_key(cand):
    """A mesh's variants: fitting with a batch that divides first, then
    fitting, each by the shortest expected step; if none fits, the least
    memory (what the mesh needs at best)."""
    if not cand.fits:
        return (2, cand.memory_bytes_per_device)
    return (0 if batch_divides(cand) else 1, cand.expected_step_s)


# Variants the search can tell, without pricing them, are never faster than one it has priced
# (_dominated), or cannot fit because a smaller microbatch of theirs did not (_priced); tests price
# them anyway (False) and compare.
SKIP_DOMINATED = True


def _dominated(opts, done, same_fit):
    """Whether the variant `opts` can be skipped at a microbatch size, given
    `done`, {(schedule, n_virtual, keep_gathered_weights, precision):
    Candidate} priced at the same size: 1F1B where ZB-H1 ran and
    `same_fit(ZB-H1's Candidate)` says 1F1B fits under no more policies
    (_same_fit); FSDP's weights kept gathered where gathering them again
    left no FSDP traffic (nor, under ZeRO-3, gradient-reduction traffic)
    exposed beyond the part no math can cover (keeping them then shortens
    nothing, and holds more): the backward's gathers, which keeping
    removes, count only there."""
    if not SKIP_DOMINATED:
        return False
    s, v, keep, p = opts.schedule, opts.n_virtual, opts.keep_gathered_weights, opts.precision
    if s == "1f1b" and ("zero_bubble", 1, keep, p) in done:
        return same_fit(done[("zero_bubble", 1, keep, p)])
    regathered = done.get((s, v, False, p))
    if keep and regathered is not None:
        terms, exposed = regathered.expected_terms, regathered.expected_exposed_s
        uncovered = regathered.expected_uncovered_s
        axes = ("fsdp", "dp") if opts.zero == 3 else ("fsdp",)
        # exposed is max(fraction · t, what no math covers): kept weights shorten the latter only
        return all(uncovered.get(a, terms[a] - terms["math"]) < exposed[a] * (1 - 1e-9) or not exposed[a] for a in axes)
    return False


def _same_fit(model, accelerator, mesh, global_tokens, opts, n_devices, zero_bubble):
    """Whether 1F1B (`opts`) fits under exactly the policies that ZB-H1's
    Candidate `zero_bubble`, at the same microbatch, weights and precision,
    fits under: then, with the same blocking sends and three times the
    bubble, it is never faster and can be skipped. ZB-H1 holds min(p, m)
    microbatches on every stage, 1F1B min(p − s, m) on stage s, so 1F1B
    fits at least where ZB-H1 does, and under a cheaper policy where
    ZB-H1's peak is a later stage. Where ZB-H1 fits under every policy, so
    does 1F1B; else 1F1B's memory alone is counted
    (candidate.fitting_policies: no timing)."""
    if zero_bubble.fitting_policies == recompute_policies(opts):
        return True
    try:
        return (
            fitting_policies(model, accelerator, mesh, global_tokens, opts, n_devices) == zero_bubble.fitting_policies
        )
    except (memory_plan.Unusable, TooFewSequences, ValueError):
        return False  # evaluate_plan says why, or prices it


def _variant_key(opts):
    return (opts.schedule, opts.n_virtual, opts.keep_gathered_weights, opts.precision)


def _outgrown(opts, outgrown):
    """Whether `opts` did not fit at a smaller microbatch."""
    return _variant_key(opts) in outgrown


def _priced(model, accelerator, mesh, global_tokens, n_devices, options, variants=None, work=None, every_size=False):
    """({microbatch size: [Candidate of each variant priced]}, the first
    Unusable met): each size of MICRO_BATCH_CHOICES (or the one given),
    smallest first, up to the first that leaves a data-parallel rank no
    whole microbatch, every variant of _variants (ZB-H1 before 1F1B, weights
    gathered again before kept, so that _dominated can skip); variants
    whose memory cannot be counted or whose schedule cannot run are left
    out, and so is a variant at every size above one where it did not fit:
    a device holds no less at a larger microbatch (the weights and their
    state do not change; what each microbatch keeps grows with its size
    while the microbatches a schedule holds in flight, min(p, m), p + 1 or
    interleaving's count, shrink no faster than the size grows: the tokens
    in flight never fall), so it cannot fit there either, unless
    `every_size` (what each size holds, to show). `work`, a _Work, counts each evaluate call."""
    variants = sorted(
        _variants(model, accelerator, mesh, options) if variants is None else variants,
        key=lambda o: (o.schedule == "1f1b", o.keep_gathered_weights),
    )
    given = options.micro_batch_seqs
    out, error = {}, None
    outgrown = set()  # variants that did not fit at a smaller microbatch
    skip_outgrown = SKIP_DOMINATED and not every_size
    for micro in MICRO_BATCH_CHOICES if given is None else (given,):
        if skip_outgrown and all(_outgrown(o, outgrown) for o in variants):
            break
        done, too_few = {}, False
        for opts in variants:
            sized = opts.replace(micro_batch_seqs=micro)

            def same_fit(zero_bubble, sized=sized):
                return _same_fit(model, accelerator, mesh, global_tokens, sized, n_devices, zero_bubble)

            if _dominated(opts, done, same_fit) or (skip_outgrown and _outgrown(opts, outgrown)):
                continue
            if work is not None:
                work.priced += 1
            try:
                cand = evaluate_plan(model, accelerator, mesh, global_tokens, sized, n_devices)
            except TooFewSequences as unusable:
                too_few, error = True, error or unusable
                break  # the same for every variant: the batch over the data-parallel ranks
            except memory_plan.Unusable as unusable:
                error = error or unusable
                continue
            done[_variant_key(opts)] = cand
            if not cand.fits:
                outgrown.add(_variant_key(opts))
        if too_few:
            break
        if done:
            out[micro] = list(done.values())
    return out, error


def _best_of(model, accelerator, mesh, global_tokens, n_devices, options, variants=None, tried=None, work=None):
    """The mesh's best Candidate over its variants (or those given) and
    microbatch sizes; `tried`, a list, receives every Candidate priced;
    `work`, a _Work, counts the evaluate calls."""
    if not _variants(model, accelerator, mesh, options):
        raise TooFewSequences("schedule: cannot run on this mesh")
    priced, error = _priced(model, accelerator, mesh, global_tokens, n_devices, options, variants, work)
    tried = [] if tried is None else tried
    tried += [c for cands in priced.values() for c in cands]
    if tried:
        return min(tried, key=_mesh_key)  # min keeps the first (smallest size, first variant) on a tie
    if options.micro_batch_seqs is not None:
        raise error
    ranks = mesh.get("dp", 1) * mesh.get("fsdp", 1) * mesh.get("ep", 1)
    seq_len = options.seq_len
    if global_tokens / seq_len / ranks >= 1:
        # each rank has a sequence, yet no size the search tries runs: the smallest says why
        first = _variants(model, accelerator, mesh, options)[0].replace(micro_batch_seqs=MICRO_BATCH_CHOICES[0])
        if work is not None:
            work.priced += 1
        evaluate_plan(model, accelerator, mesh, global_tokens, first, n_devices)
    raise TooFewSequences(
        f"batch: {global_tokens / seq_len:g} sequences of {seq_len} over {ranks} data-parallel ranks "
        "(dp × fsdp × ep) leave less than one sequence per rank"
    )


def _by_micro_batch(model, accelerator, mesh, global_tokens, n_devices, options):
    """{microbatch size: the best Candidate of the mesh's variants at that size}, every size priced."""
    priced, _ = _priced(model, accelerator, mesh, global_tokens, n_devices, options, every_size=True)
    return {micro: min(cands, key=_mesh_key) for micro, cands in priced.items()}


def candidates_by_micro_batch(model, accelerator, mesh, global_tokens, *, n_devices, **options):
    """{microbatch size: Candidate} for every size the search tries on
    `mesh` (`micro_batch_seqs` is set per size), in the order it tries them,
    each the best of the mesh's variants at that size (schedule, weights
    kept gathered or not, precision, as explore searches them unless given):
    what `best_for_mesh` chooses among."""
    model, accelerator = models.get(model), hardware.get(accelerator)  # resolved once, here
    with timing.shared_costs():
        return _by_micro_batch(model, accelerator, normalize_mesh(mesh), global_tokens, n_devices, _searched(options))


def best_for_mesh(model, accelerator, mesh, global_tokens, *, n_devices, **options):
    """The Candidate `explore` ranks for `mesh`: every option of
    SEARCHED_OPTIONS not given is searched as explore searches it (the
    microbatch size, the schedule, ...), and the row is the mesh's fastest
    variant that fits and divides the batch (the smallest microbatch on a
    tie). The command line's --mesh and --explain price a mesh this way, so
    that they show the row the table showed."""
    model, accelerator = models.get(model), hardware.get(accelerator)  # resolved once, here
    with timing.shared_costs():
        return _best_of(model, accelerator, normalize_mesh(mesh), global_tokens, n_devices, _searched(options))


def chosen_options(candidate):
    """The options a Candidate was priced under that the search may choose:
    schedule, n_virtual, uneven_pipeline, keep_gathered_weights, precision,
    micro_batch_seqs (evaluate with these and the search's other options
    prices the same row)."""
    if not isinstance(candidate, Candidate):
        raise TypeError(f"candidate: must be an explorer.Candidate, got {type(candidate).__name__}")
    return dict(
        schedule=candidate.schedule,
        n_virtual=candidate.n_virtual,
        uneven_pipeline=candidate.uneven_pipeline,
        keep_gathered_weights=candidate.keep_gathered_weights,
        precision=candidate.precision,
        micro_batch_seqs=candidate.micro_batch_seqs,
    )


class Ranked(list):
    """explore's answer, a list of Candidates ranked by rank_key, with the
    work it took, `priced` (candidates priced: evaluate calls), and what
    the search left out under its budget: `unrefined`, the meshes
    priced only under their base variants (ZB-H1, or 1F1B where it cannot
    run, with FSDP's weights gathered again) because the budget ran out
    before their other variants were priced; `proven`, whether the first
    row is the best over every variant of every mesh (the meshes not
    refined cannot beat it: the least math any of their variants runs is
    already longer than its expected step)."""

    unrefined = 0
    proven = True
    priced = 0


def _base(variants):
    """The variants that hold the least memory and are priced for every
    mesh first: ZB-H1 and 1F1B (min(p, m) microbatches in flight at most,
    where interleaving holds p + (p − 1)/v and DualPipe p + 1 with two stages'
    weights), weights gathered again rather than kept; every variant if
    none is of that kind."""
    base = [o for o in variants if o.schedule in ("1f1b", "zero_bubble", "gpipe")]
    base = [o for o in base if not o.keep_gathered_weights] or base
    return base or variants


def _usable(model, accelerator, n_devices, global_tokens, axes, options, budget_candidates=None):
    """A Ranked list with a Candidate for every mesh over `axes` that leaves
    each data-parallel rank at least one microbatch. Every mesh is priced
    first under its base variants (_base; SearchTooLong if that alone would
    price more than `budget_candidates` candidates, evaluate calls; None: no
    limit), then the meshes whose floor (the least math of their base
    candidates) is lowest are priced under every variant (in the order of
    _promise, skipping those whose floor is at or above the best expected
    step found: no variant of theirs can be faster) until none is left (the
    first row is the best of the whole search) or the budget is spent (the
    Ranked list says how many candidates were priced, how many meshes kept
    their base rows and whether the first row is proven the best). The
    budget counts work, not seconds: the same inputs give the same list."""
    meshes = factorizations(n_devices, model, axes, options.seq_len, options.uneven_pipeline)
    meshes = [dict(zip(TUPLE_AXES, m, strict=True)) if isinstance(m, tuple) else m for m in meshes]
    work = _Work(budget_candidates)
    rows, promise = {}, {}
    with timing.shared_costs():
        for done, mesh in enumerate(meshes):
            if work.spent():
                raise SearchTooLong(
                    f"search: {len(meshes):,} meshes of {n_devices:,} devices over {','.join(axes)}; {done:,} priced "
                    f"before the {budget_candidates:,} candidates a search is given were spent; narrow it: fewer "
                    f"axes (--axes, default {','.join(SEARCH_AXES)}), one mesh (--mesh), fix the schedule "
                    "(--schedule) or the microbatch (--micro-batch), or fewer devices (or raise --budget)"
                )
            try:
                floor, best, complete, promise[done] = _floor_and_best(
                    model, accelerator, mesh, global_tokens, n_devices, options, work
                )
                rows[done] = (floor, best, complete)
            except memory_plan.Unusable:
                pass
        found = Ranked(best for _, best, _ in rows.values())
        refined = {i for i, (_, _, complete) in rows.items() if complete}
        # the most promising first: what a base candidate would take without what the mesh's other
        # variants may remove where they have the memory to (_promise)
        order = sorted((i for i in rows if i not in refined), key=lambda i: (promise[i], rows[i][0]))
        runs = [c for c in found if c.fits and batch_divides(c)]
        best_s = min((c.expected_step_s for c in runs), default=math.inf)
        for i in order:
            if work.spent():
                break
            if rows[i][0] >= best_s:
                continue  # no variant of this mesh can beat the best
            cand = _best_of(model, accelerator, meshes[i], global_tokens, n_devices, options, work=work)
            rows[i] = (rows[i][0], cand, True)
            if cand.fits and batch_divides(cand):
                best_s = min(best_s, cand.expected_step_s)
        found = Ranked(best for _, best, _ in rows.values())
        found.unrefined = sum(1 for _, _, complete in rows.values() if not complete)
        found.proven = all(complete or floor >= best_s for floor, _, complete in rows.values())
        found.priced = work.priced
    return found


def _room_for(cand, schedule, n_virtual):
    """Whether the base candidate `cand` leaves the HBM that `schedule`
    would add at the same microbatch and recomputation: the activations of
    the microbatches it holds in flight beyond the base's
    (memory_plan.activation_microbatches), and its extra copies of the
    weights and their gradients (DualPipe's second stage,
    memory_plan.parameter_copies), against the base's headroom; False where
    the schedule cannot run that many microbatches. An estimate (DualPipe's
    first device also holds the last stage's logits, left out), for the
    order of the refinement only."""
    pp, n_micro = cand.pp, math.ceil(cand.n_microbatches)
    try:
        held = memory_plan.activation_microbatches(schedule, pp, n_micro, n_virtual)
        base = memory_plan.activation_microbatches(cand.schedule, pp, n_micro, cand.n_virtual)
    except memory_plan.Unusable:
        return False
    memory = cand.memory_breakdown
    extra = memory["activations"] * (held / base - 1)
    extra += (memory_plan.parameter_copies(schedule) - 1) * (memory["weights"] + memory["gradients"])
    return extra <= memory["headroom"]


def _promise(tried, variants, accelerator):
    """The order in which the staged search refines a mesh, from its base
    candidates (`tried`, every microbatch size priced) and its variants
    (_variants): meshes with a base candidate that runs first, by the least,
    over those candidates, of the expected step less the parts the mesh's
    other variants may remove where the candidate leaves them the memory to
    run at its microbatch and recomputation (_room_for): the bubble and the
    exposed pipeline sends under interleaving or DualPipe (which overlap
    their sends), EP traffic under DualPipe (which hides it); FSDP traffic
    where the mesh may keep its weights gathered. A part that no variant of
    the mesh can remove, or only with more recomputation than the base
    candidate runs, is not credited (EP on a mesh without a pipeline, which
    cannot run DualPipe; EP on a pipeline whose DualPipe must recompute
    what its base keeps), or such meshes would be refined before the ones
    that can remove it. A heuristic order only: which rows are refined
    never changes a refined row, and the proof that the first row is the
    best rests on the floors."""
    runs = [c for c in tried if c.fits and batch_divides(c)]
    if not runs:
        return (1, min((c.expected_step_s for c in tried), default=math.inf))
    overlapped = sorted({(o.schedule, o.n_virtual) for o in variants if o.schedule in P2P_OVERLAP_SCHEDULES})
    keeps = any(o.keep_gathered_weights for o in variants)
    best = math.inf
    for cand in runs:
        exposed = cand.expected_exposed_s
        removable = 0.0
        for schedule, n_virtual in overlapped:
            if cand.pp > 1 and _room_for(cand, schedule, n_virtual):
                removed = exposed.get("pp", 0.0) + cand.expected_terms["bubble"]
                if schedule == "dualpipe":
                    # DualPipe hides the exchanges but for the share that stays exposed (timing's
                    # ep fraction under it): crediting all of it ranked meshes with more EP traffic first
                    left = timing.ep_exposed_share(accelerator, overlapped=True) * cand.expected_terms["ep"]
                    removed += max(0.0, exposed.get("ep", 0.0) - left)
                removable = max(removable, removed)
        if keeps:
            removable += exposed.get("fsdp", 0.0)
        best = min(best, cand.expected_step_s - removable)
    return (0, best)


def _floor_and_best(model, accelerator, mesh, global_tokens, n_devices, options, work=None):
    """(floor, best Candidate, whether every variant was priced, promise)
    for one mesh priced under its _base variants: the floor is the least
    expected math of their fitting candidates (inf when none fits: no
    variant holds less memory), 0 when the base is every variant; the
    promise orders the refinement (_promise)."""
    variants = _variants(model, accelerator, mesh, options)
    if not variants:
        raise TooFewSequences("schedule: cannot run on this mesh")
    base = _base(variants)
    complete = len(base) == len(variants)
    tried = []
    best = _best_of(model, accelerator, mesh, global_tokens, n_devices, options, base, tried, work)
    floor = min((c.expected_terms["math"] for c in tried if c.fits), default=math.inf)
    return (0.0 if complete else floor), best, complete, _promise(tried, variants, accelerator)


def rank_key(candidate):
    """Candidates that run first (they fit and their batch divides: a whole
    number of microbatches per data-parallel rank), then those that fit but
    whose batch does not divide, then those that do not fit; each group by
    expected step time, then by the bound."""
    if not isinstance(candidate, Candidate):
        raise TypeError(f"candidate: must be an explorer.Candidate, got {type(candidate).__name__}")
    runs = candidate.fits and batch_divides(candidate)
    return (not runs, not candidate.fits, candidate.expected_step_s, candidate.step_s)


def explore(model, accelerator, n_devices, global_tokens, *, axes=SEARCH_AXES, budget_candidates=None, **options):
    """Every usable mesh over `axes` (default SEARCH_AXES), those that run
    first (they fit and divide the batch), then those that fit, then the
    rest, each group by expected step time (the bound beside it). What is
    not given is searched per mesh (SEARCHED_OPTIONS: the microbatch size,
    the schedule and its virtual stages, an uneven pipeline where pp does
    not divide the layers, FSDP's weights kept gathered or not; the
    recomputation, `recompute` None, is the fastest that fits), and
    precision 'auto' tries FP8 where the accelerator has it; other options
    as evaluate. Meshes that leave a data-parallel rank less than one
    microbatch are left out. `budget_candidates`: the candidates (evaluate
    calls) the search may price (the command line and the planner page give
    SEARCH_BUDGET_CANDIDATES): past it the meshes not yet refined keep
    their base rows (the list's `unrefined` and `proven` say so), and a
    base pass past it is SearchTooLong, a ValueError that says how to
    narrow it; None, no limit. Work, not seconds: the same inputs give the
    same list on an idle machine or a busy one."""
    if budget_candidates is not None:
        _validate.count("budget_candidates", budget_candidates)
    model, accelerator = models.get(model), hardware.get(accelerator)  # unknown presets fail here, by name, once
    _validate.positive("global_tokens", global_tokens)
    options = _searched(options)
    _check_axes(axes)
    schedule, n_virtual = options.schedule, options.n_virtual
    if n_virtual is not None:
        _validate.count("n_virtual", n_virtual)
    if schedule is None:
        schedule = "interleaved" if (n_virtual or 1) > 1 else "1f1b"
    if options.micro_batch_seqs is not None:
        _validate.count("micro_batch_seqs", options.micro_batch_seqs)
    for name in ("uneven_pipeline", "keep_gathered_weights"):
        if getattr(options, name) is not None:
            _validate.boolean(name, getattr(options, name))
    check_options(
        schedule,
        n_virtual or 1,
        options.recompute,
        options.attention,
        options.state_recipe,
        options.zero,
        1,
    )
    _validate.choice("precision", options.precision, (*PRECISIONS, AUTO_PRECISION))
    if options.slices is not None:
        check_slices(accelerator, _validate.count("n_devices", n_devices), options.slices)
    if options.routing_node_limit is not None:
        _validate.count("routing_node_limit", options.routing_node_limit)
    found = _usable(model, accelerator, n_devices, global_tokens, axes, options, budget_candidates)
    ranked = Ranked(sorted(found, key=rank_key))
    ranked.unrefined, ranked.proven, ranked.priced = found.unrefined, found.proven, found.priced
    return ranked


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
    # megatron-bridge-perf-summary (measured.MEGATRON_BRIDGE_H100_MOE_RUNS): Megatron's EP is carved
    # from the data-parallel ranks, which replicate the dense weights (the distributed optimizer
    # shards their state). Qwen3-30B-A3B's recipe dispatches with HybridEP, which sends a token
    # once to each node holding one of its experts and forwards it there over NVLink: the one
    # copy per node that node-limited routing sends, at a limit of the EP group's two nodes
    # (which restricts no routing); Qwen3-235B-A22B's sends one copy per routed expert (alltoall).
    ("Qwen3-30B-A3B", "H100"): {"dense_over_ep": False, "routing_node_limit": 2},
    ("Qwen3-235B-A22B", "H100"): {"dense_over_ep": False},
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
    microbatch, recomputation and pipeline layout, its source's stack family
    (measured.STACK_OF_SOURCE; 'any' where the source has none), and any
    planner option the run record carries (schedule, n_virtual,
    state_recipe, zero, ...)."""
    from ..measured import STACK_OF_SOURCE, PublishedRun

    if not isinstance(run, PublishedRun):
        raise TypeError(f"run: must be a measured.PublishedRun, got {type(run).__name__}")
    options = dict(
        seq_len=run.seq_len,
        micro_batch_seqs=run.micro_batch_seqs,
        recompute=run.recompute,
        uneven_pipeline=run.uneven_pipeline,
        stack=STACK_OF_SOURCE.get(run.source, "any"),  # its kernels (the attention's on Hopper) and its band
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
    # every mesh under the run's own layout: its schedule (1F1B where it names none), virtual
    # stages, pipeline and weight handling, not the variants explore searches
    options = {"schedule": "1f1b", "n_virtual": 1, "keep_gathered_weights": False, **run_options(run)}
    if axes is None:
        axes = tuple(a for a in AXES if a in TUPLE_AXES or a in run.mesh)
    model, accelerator = models.get(run.model), hardware.get(run.accelerator)  # resolved once, here
    found = _usable(model, accelerator, run.n_devices, run.global_tokens, axes, PlanOptions.of(options))
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
