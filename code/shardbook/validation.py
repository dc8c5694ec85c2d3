"""The planner held to published runs: one row per run of
`measured.VALIDATION_RUNS` with the planner's optimistic bound and its
calibrated expectation for the run's own mesh and options, the split into a
calibration set and a validation set, and the fit of the per-accelerator
sustained matmul efficiency on the calibration set.

The split (stated before any number is looked at, and never per run):
within each source's table, runs are taken in the order the source prints
them; the first, third, fifth, ... calibrate and the second, fourth, ...
validate. A source with a single run calibrates only, and an accelerator
whose runs would all validate calibrates on its first (Megatron Bridge's
GB300 row, which follows the GB200 one in that source's table). No figure of
`planner.calibrate` belongs to a run: each belongs to an accelerator or a
fabric, and is sourced, fitted here on the calibration set, or marked
assumed where neither is possible (`assumed_in_use` says which of those the
published runs depend on; `identifiability` checks whether the calibration
set could fit one).

What is fitted: for each accelerator with calibration runs, the sustained
matmul efficiency η (the fraction of the dense BF16 peak the math runs at)
that minimises the sum of squared log errors of the expected step time over
that accelerator's calibration runs, everything else held at its
calibrate.py value; and one figure shared by every accelerator,
calibrate.ELEMENTWISE_PASSES (the HBM traffic of the work between the
matmuls over the least traffic of the tensors a layer keeps), the value
that minimises the same sum over the whole calibration set with each
accelerator's η refitted at every trial (fit_elementwise_passes). The
two kinds of figure separate because the elementwise work scales with the
bytes of a layer's activations (s·b·h per layer) and the matmuls with its
FLOPs (s·b·h² per layer): narrow models spend a larger share of their
step on the first. calibrate.py holds the fitted values (the tests hold
them to the fit); the interactive edition's sustained fractions
(measured.SUSTAINED) are shown beside them, not used.

Standard library only. Ref: narayanan2021megatron, megatron-lm-readme,
dubey2024llama3, deepseek2024v3, maxtext-tiering.
"""

import contextlib
import dataclasses
import math
from dataclasses import dataclass

from . import _validate, hardware, measured

SPLIT_RULE = (
    "within each source's table, in the order the source prints its runs, the first, third, "
    "fifth, ... run calibrates and the second, fourth, ... validates; a source with one run "
    "calibrates only; an accelerator whose runs would all validate calibrates on its first "
    "(a validation run priced with an unfitted figure checks no fit)"
)
TOLERANCE = 0.10  # the expected step time must land within ±10 % on the validation set


def _planner():
    from . import planner

    return planner


def split(runs=None):
    """{run name: 'calibration' or 'validation'} by SPLIT_RULE."""
    runs = measured.VALIDATION_RUNS if runs is None else runs
    by_source = {}
    for run in runs:
        by_source.setdefault(run.source, []).append(run)
    out = {}
    for group in by_source.values():
        for i, run in enumerate(group):
            out[run.name] = "calibration" if len(group) == 1 or i % 2 == 0 else "validation"
    calibrated = {run.accelerator for run in runs if out[run.name] == "calibration"}
    for run in runs:
        if run.accelerator not in calibrated:
            out[run.name] = "calibration"
            calibrated.add(run.accelerator)
    return out


def _runs_in(role, runs):
    runs = measured.VALIDATION_RUNS if runs is None else runs
    sets = split(runs)
    return [r for r in runs if sets[r.name] == role]


def calibration_runs(runs=None):
    """The runs of the calibration set, in order."""
    return _runs_in("calibration", runs)


def validation_runs(runs=None):
    """The runs of the validation set, in order."""
    return _runs_in("validation", runs)


@dataclass(frozen=True)
class Row:
    """One published run beside the planner: `bound` and `expected` are the
    planner's Candidates for the run's own mesh (`bound` with every
    overlappable collective hidden, as `planner.bound_for_run` builds it;
    `expected` with the overlap the run declares, `expected_for_run`);
    `measured_mfu` is the run's step time in the planner's FLOP count
    (model FLOPs at peak / measured step), so it compares with `bound.mfu`
    and `expected_mfu` on one scale; `error` is expected / measured step − 1;
    `rank`, `count`, `slower_by` where the own mesh ranks among the
    planner's candidates (by expected step time, among those that fit),
    and `best`, the planner's best Candidate there (rows(with_rank=True))."""

    run: object
    role: str
    bound: object
    expected: object
    measured_mfu: float
    error: float
    rank: int | None = None
    count: int = 0
    slower_by: float | None = None
    best: object = None

    @property
    def best_adds_fsdp(self):
        """Whether the planner's best mesh shards the weights with FSDP
        where the run's own mesh does not (False without a rank)."""
        return self.best is not None and self.best.fsdp > 1 and self.run.mesh.get("fsdp", 1) == 1

    @property
    def expected_step_s(self):
        return self.expected.expected_step_s

    @property
    def expected_mfu(self):
        return self.expected.expected_mfu


def measured_mfu(run, candidate):
    """The run's measured step time as an MFU in the planner's FLOP count:
    candidate.mfu × candidate.step_s / run.step_s (the same model FLOPs
    over the same peak, at the measured step time)."""
    if not isinstance(run, measured.PublishedRun):
        raise TypeError(f"run: must be a measured.PublishedRun, got {type(run).__name__}")
    if not isinstance(candidate, _planner().Candidate):
        raise TypeError(f"candidate: must be a planner.Candidate, got {type(candidate).__name__}")
    return candidate.mfu * candidate.step_s / run.step_s


def hardware_flops_fraction(run):
    """The fraction of the dense BF16 peak a run sustains over the FLOPs it
    runs: the planner's hardware FLOPs per token (model FLOPs plus what the
    run's remat policy recomputes, training.hardware_flops_per_token, the
    causal half of the scores) × its tokens, over its measured step time ×
    devices × peak. Where a policy recomputes matmuls this is above the MFU."""
    from . import training

    if not isinstance(run, measured.PublishedRun):
        raise TypeError(f"run: must be a measured.PublishedRun, got {type(run).__name__}")
    flops = training.hardware_flops_per_token(run.model, run.seq_len, run.recompute, causal=True) * run.global_tokens
    return flops / (run.step_s * run.n_devices * hardware.get(run.accelerator).bf16_dense_flops_per_s)


def expected_for_run(run):
    """The planner's Candidate for a run's own mesh and options with the
    overlap the run declares: its tensor-parallel collectives hidden only
    where it overlaps them (`tp_comm_overlap`), its gradient reduction on
    the critical path where it does not overlap it (`grad_reduce_overlap`).
    Its `expected_step_s` is the planner's calibrated estimate of the run."""
    planner = _planner()
    options = planner.run_options(run)  # carries tp_comm_overlap and grad_reduce_overlap
    options["ideal_overlap"] = False
    return planner.evaluate(run.model, run.accelerator, run.mesh, run.global_tokens, **options)


def row(run, role=None, with_rank=False):
    """The Row of one published run."""
    if not isinstance(run, measured.PublishedRun):
        raise TypeError(f"run: must be a measured.PublishedRun, got {type(run).__name__}")
    planner = _planner()
    role = role or split().get(run.name, "validation")
    bound = planner.bound_for_run(run)
    expected = expected_for_run(run)
    rank = count = slower = best = None
    if with_rank:
        ranked = planner.rank_of_run(run)
        rank, count, slower, best = ranked.rank, ranked.count, ranked.slower_by, ranked.best
    return Row(
        run,
        role,
        bound,
        expected,
        measured_mfu(run, bound),
        expected.expected_step_s / run.step_s - 1,
        rank,
        count or 0,
        slower,
        best,
    )


def rows(runs=None, with_rank=False):
    """A Row for every published run, in the order of `runs`."""
    runs = measured.VALIDATION_RUNS if runs is None else runs
    sets = split(runs)
    return [row(r, sets[r.name], with_rank) for r in runs]


def largest_validation_error(table):
    """The Row of the validation set whose expected / measured − 1 is largest in absolute value."""
    if not isinstance(table, (list, tuple)) or not all(isinstance(r, Row) for r in table):
        raise TypeError("table: must be a list of validation.Row")
    valid = [r for r in table if r.role == "validation"]
    if not valid:
        raise ValueError("table: holds no run of the validation set")
    return max(valid, key=lambda r: abs(r.error))


def step_s_per_sequence(table_row, without_fsdp=False):
    """A Row's measured step time per sequence each device trains, in
    seconds; with `without_fsdp`, less the planner's calibrated FSDP
    traffic of that step (the expectation's `fsdp` term, all of it, as if
    none were hidden). Runs of one model that train the same sequences per
    device in different microbatches compare on it."""
    if not isinstance(table_row, Row):
        raise TypeError(f"table_row: must be a validation.Row, got {type(table_row).__name__}")
    run = table_row.run
    step = run.step_s - (table_row.expected.expected_terms["fsdp"] if without_fsdp else 0.0)
    return step * run.n_devices / run.sequences_per_step


@dataclass(frozen=True)
class MultisliceRow:
    """A run spread over several slices (measured.MULTISLICE_RUNS) beside
    its one-slice run: `measured_loss` is the share of the one-slice
    throughput per chip the spread run lost (1 − the one-slice step time
    over the spread run's, the work per chip being the same),
    `expected_loss` the same from the planner's expected step times, and
    `error` the spread run's expected / measured step − 1; `dcn_s` the
    data-parallel reduction across the slices at line rate, in seconds,
    before any overlap (Candidate.dp_s)."""

    run: object
    one_slice: object
    measured_loss: float
    expected_loss: float
    error: float
    dcn_s: float


def multislice_rows(runs=None):
    """A MultisliceRow for every run of `runs` (default
    measured.MULTISLICE_RUNS), in their order."""
    runs = measured.MULTISLICE_RUNS if runs is None else list(runs)
    out, singles = [], {}  # a one-slice run stands beside up to five spread ones: priced once
    for run in runs:
        one = measured.one_slice_run(run)
        if one.name not in singles:
            singles[one.name] = expected_for_run(one)
        spread, single = expected_for_run(run), singles[one.name]
        out.append(
            MultisliceRow(
                run,
                one,
                1 - one.step_s / run.step_s,
                1 - single.expected_step_s / spread.expected_step_s,
                spread.expected_step_s / run.step_s - 1,
                spread.dp_s,
            )
        )
    return out


# ---------------------------------------------------------------- the fit


@contextlib.contextmanager
def matmul_efficiency_set(accelerator, value):
    """Within the block, calibrate.MATMUL_EFFICIENCY[accelerator] is `value`
    (a trial of the fit); restored afterwards."""
    planner = _planner()
    table = planner.calibrate.MATMUL_EFFICIENCY
    name = hardware.get(accelerator).name
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 2:
        raise ValueError(f"value: a matmul efficiency is a fraction of the peak in (0, 2], got {value!r}")
    had = name in table
    old = table.get(name)
    table[name] = planner.calibrate.Figure(value, "fit", "trial value of validation.fit_matmul_efficiency")
    try:
        yield
    finally:
        if had:
            table[name] = old
        else:
            del table[name]


def _sum_log_error_sq(runs):
    """Σ log²(expected / measured step) over `runs`, at the calibrate figures now in force."""
    return sum(math.log(expected_for_run(r).expected_step_s / r.step_s) ** 2 for r in runs)


def _log_error_sq(accelerator, runs, value):
    with matmul_efficiency_set(accelerator, value):
        return _sum_log_error_sq(runs)


def efficiency_runs(accelerator, runs=None):
    """The calibration runs (of `runs`, default calibration_runs()) that
    fit `accelerator`'s η: its BF16 runs, or, where it has none (H800:
    DeepSeek-V3 alone), its FP8 runs. An FP8 run's step also depends on
    calibrate.FP8_SUSTAINED_SPEEDUP, which the FP8 runs of an accelerator
    whose η its BF16 runs fix determine (fp8_speedup_runs)."""
    name = hardware.get(accelerator).name
    mine = [r for r in (calibration_runs() if runs is None else runs) if r.accelerator == name]
    bf16 = [r for r in mine if r.precision != "fp8"]
    return bf16 or mine


def fp8_speedup_runs(runs=None):
    """The FP8 calibration runs (of `runs`, default calibration_runs()) on
    accelerators that also have BF16 calibration runs: there η is fixed
    without FP8, so what the FP8 runs add is the FP8 speedup alone."""
    runs = calibration_runs() if runs is None else list(runs)
    with_bf16 = {r.accelerator for r in runs if r.precision != "fp8"}
    return [r for r in runs if r.precision == "fp8" and r.accelerator in with_bf16]


def fit_matmul_efficiency(accelerator, runs=None, low=0.2, high=1.0, tol=1e-4):
    """The η in [low, high] minimising Σ log²(expected / measured step) over
    `runs` (default: efficiency_runs(accelerator)), by golden-section
    search; everything else at its calibrate.py value."""
    name = hardware.get(accelerator).name
    _validate.positive("low", low)
    _check_tol(tol)
    if not low < high <= 2:
        raise ValueError(f"high: must lie above low ({low}) and at most 2, got {high}")
    runs = efficiency_runs(name) if runs is None else list(runs)
    if not all(isinstance(r, measured.PublishedRun) for r in runs):
        raise TypeError("runs: must be measured.PublishedRun records")
    if not runs:
        raise ValueError(f"accelerator: no calibration runs on {name!r}")
    return _golden(lambda value: _log_error_sq(name, runs, value), low, high, tol)


def fit_routed_expert_efficiency(accelerator, runs, low=0.02, high=1.0, tol=1e-4):
    """The planner.calibrate.ROUTED_EXPERT_EFFICIENCY of `accelerator` (an
    entry it holds) in [low, high] minimising Σ log²(expected / measured
    step) over `runs` (MoE runs on it), by golden-section search;
    everything else at its calibrate.py value."""
    name = hardware.get(accelerator).name
    _validate.positive("low", low)
    _check_tol(tol)
    if not low < high <= 1:
        raise ValueError(f"high: must lie above low ({low}) and at most 1, got {high}")
    runs = list(runs)
    if not runs or not all(isinstance(r, measured.PublishedRun) and r.accelerator == name for r in runs):
        raise ValueError(f"runs: must be one or more measured.PublishedRun records on {name!r}")

    def error(value):
        with figure_set("routed expert efficiency", name, value):
            return _sum_log_error_sq(runs)

    return _golden(error, low, high, tol)


@contextlib.contextmanager
def elementwise_passes_set(value):
    """Within the block, calibrate.ELEMENTWISE_PASSES is `value` (a trial of
    the fit); restored afterwards."""
    planner = _planner()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 50:
        raise ValueError(f"value: elementwise passes are a count of HBM passes in [0, 50], got {value!r}")
    old = planner.calibrate.ELEMENTWISE_PASSES
    planner.calibrate.ELEMENTWISE_PASSES = planner.calibrate.Figure(
        value, "fit", "trial value of validation.fit_elementwise_passes"
    )
    try:
        yield
    finally:
        planner.calibrate.ELEMENTWISE_PASSES = old


MIN_TOL = 1e-9  # below it the bracket stops shrinking in floating point, and the search never ends


def _check_tol(tol):
    _validate.positive("tol", tol)
    if tol < MIN_TOL:
        raise ValueError(f"tol: at least {MIN_TOL:g} (a finer bracket does not shrink in floating point), got {tol!r}")


def _golden(function, low, high, tol):
    g = (math.sqrt(5) - 1) / 2
    a, b = low, high
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = function(c), function(d)
    while b - a > tol:
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = function(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = function(d)
    return (a + b) / 2


def _calibration_error_sq(passes, runs=None, eta_tol=1e-4, terms=None):
    """Σ log²(expected / measured step) over `runs` (default the
    calibration set) with ELEMENTWISE_PASSES at `passes` and every
    accelerator's η refitted on its efficiency_runs among them (to
    `eta_tol`; the FP8 speedup at the value in force). `terms`: a dict of
    each accelerator's term already computed, by (accelerator, its runs'
    names, passes, eta_tol, the FP8 speedup in force), for calls with every other figure the same
    (transfer's folds: most keep all of an accelerator's runs, and their
    searches try the same passes first)."""
    runs = calibration_runs() if runs is None else list(runs)
    # in the key too: a fold without FP8 runs prices at FP8_SPEEDUP_PRIOR
    fp8_speedup = _planner().calibrate.FP8_SUSTAINED_SPEEDUP.value
    total = 0.0
    with elementwise_passes_set(passes):
        for acc in dict.fromkeys(r.accelerator for r in runs):
            mine = [r for r in runs if r.accelerator == acc]
            key = (acc, tuple(r.name for r in mine), passes, eta_tol, fp8_speedup)
            term = None if terms is None else terms.get(key)
            if term is None:
                eta = fit_matmul_efficiency(acc, efficiency_runs(acc, runs), tol=eta_tol)
                term = _log_error_sq(acc, mine, eta)
                if terms is not None:
                    terms[key] = term
            total += term
    return total


def fit_elementwise_passes(low=0.5, high=8.0, tol=0.01, runs=None, eta_tol=1e-4, terms=None):
    """The calibrate.ELEMENTWISE_PASSES in [low, high] minimising
    Σ log²(expected / measured step) over `runs` (default the whole
    calibration set), each accelerator's matmul efficiency refitted
    (fit_matmul_efficiency, to `eta_tol`) at every trial; golden-section
    search. One figure for every accelerator: it counts the kernels between
    the matmuls, not a chip. `terms`: see _calibration_error_sq."""
    _validate.positive("low", low)
    _check_tol(tol)
    _check_tol(eta_tol)
    if not low < high <= 50:
        raise ValueError(f"high: must lie above low ({low}) and at most 50, got {high}")
    return _golden(lambda passes: _calibration_error_sq(passes, runs, eta_tol, terms), low, high, tol)


def fit_fp8_speedup(runs=None, low=1.0, high=2.0, tol=1e-4):
    """calibrate.FP8_SUSTAINED_SPEEDUP in [low, high] minimising
    Σ log²(expected / measured step) over `runs` (default: fp8_speedup_runs),
    every η at its calibrate.py value; golden-section search. The gain of
    the math (the matmuls) when they run in FP8, not of the whole step:
    the planner prices the work between the matmuls apart."""
    _validate.positive("low", low)
    _check_tol(tol)
    if not low < high <= 4:
        raise ValueError(f"high: must lie above low ({low}) and at most 4, got {high}")
    runs = fp8_speedup_runs() if runs is None else list(runs)
    if not all(isinstance(r, measured.PublishedRun) and r.precision == "fp8" for r in runs):
        raise TypeError("runs: must be measured.PublishedRun records of FP8 runs")
    if not runs:
        raise ValueError("runs: no FP8 calibration run on an accelerator with BF16 calibration runs")

    def error(value):
        with figure_set("FP8 sustained speedup", "any", value):
            return _sum_log_error_sq(runs)

    return _golden(error, low, high, tol)


@contextlib.contextmanager
def figure_set(table_name, key, value):
    """Within the block, the calibrate figure (table_name, key) of
    calibrate.table() has `value`; restored afterwards (and the achieved
    link rates the planner caches recomputed both times)."""
    planner = _planner()
    calibrate, timing = planner.calibrate, planner.timing
    names = dict(calibrate.TABLES)
    _validate.choice("table_name", table_name, tuple(names))
    _validate.positive("value", value)
    holder = getattr(calibrate, names[table_name])
    if isinstance(holder, dict):
        _validate.choice("key", key, tuple(holder))
        old = holder[key]
        holder[key] = dataclasses.replace(old, value=value)
    else:
        _validate.choice("key", key, ("any",))
        old = holder
        setattr(calibrate, names[table_name], dataclasses.replace(old, value=value))
    timing._scaled_rates.cache_clear()
    try:
        yield
    finally:
        if isinstance(holder, dict):
            holder[key] = old
        else:
            setattr(calibrate, names[table_name], old)
        timing._scaled_rates.cache_clear()


def assumed_in_use(runs=None, factor=1.25):
    """The (table, key) of each assumed calibrate figure (calibrate.assumed)
    whose change by `factor` moves the expected step time of some run of
    `runs` (default: every published run) by more than one part in 10⁹:
    the assumptions the validation table depends on."""
    runs = measured.VALIDATION_RUNS if runs is None else list(runs)
    _validate.positive("factor", factor)
    if factor == 1:
        raise ValueError("factor: must differ from 1, got 1")
    base = [expected_for_run(r).expected_step_s for r in runs]
    used = []
    for table_name, key, figure in _planner().calibrate.assumed():
        with figure_set(table_name, key, figure.value * factor):
            moved = [expected_for_run(r).expected_step_s for r in runs]
        if any(abs(m / b - 1) > 1e-9 for m, b in zip(moved, base, strict=True)):
            used.append((table_name, key))
    return used


def identifiability(table_name, key, accelerator, values):
    """{value: Σ log²(expected / measured step)} over `accelerator`'s
    calibration runs with the calibrate figure (table_name, key) at each of
    `values` and that accelerator's η refitted at each: a flat profile
    means the calibration set cannot determine the figure."""
    name = hardware.get(accelerator).name
    runs = [r for r in calibration_runs() if r.accelerator == name]
    if not runs:
        raise ValueError(f"accelerator: no calibration runs on {name!r}")
    out = {}
    for value in values:
        with figure_set(table_name, key, value):
            out[value] = _log_error_sq(name, runs, fit_matmul_efficiency(name, runs))
    return out


def fit_memory_reserve_bytes(family, runs=None):
    """The largest HBM reserve, in whole multiples of
    calibrate.RESERVE_STEP_BYTES, under which every published run of
    `family` ('gpu' or 'tpu') in `runs` (default: measured.VALIDATION_RUNS
    and measured.HELD_OUT_RUNS, every run that ran) still fits under its
    own options: the least spare HBM the planner counts in any of them,
    rounded down."""
    planner = _planner()
    _validate.choice("family", family, ("gpu", "tpu"))
    runs = list(measured.VALIDATION_RUNS) + list(measured.HELD_OUT_RUNS) if runs is None else list(runs)
    spare = []
    for run in runs:
        if hardware.get(run.accelerator).family != family:
            continue
        options = dict(planner.run_options(run), reserve_bytes=0.0)
        cand = planner.evaluate(run.model, run.accelerator, run.mesh, run.global_tokens, **options)
        spare.append(cand.memory_breakdown["headroom"])
    if not spare:
        raise ValueError(f"family: no published run on a {family}")
    step = planner.calibrate.RESERVE_STEP_BYTES
    return max(0.0, math.floor(min(spare) / step) * step)


def fitted_efficiencies(digits=2):
    """{accelerator: η fitted on its calibration runs, rounded to `digits`}."""
    _validate.count("digits", digits, minimum=0)
    if digits > 6:
        raise ValueError(f"digits: at most 6 (the fit's tolerance is 1e-4), got {digits}")
    accs = dict.fromkeys(r.accelerator for r in calibration_runs())  # in order of first appearance
    return {acc: round(fit_matmul_efficiency(acc), digits) for acc in accs}


def main(argv=None):
    """`python -m shardbook.validation`: print every run's error and the
    matmul efficiencies fitted on the calibration set (what
    planner.calibrate.MATMUL_EFFICIENCY should hold)."""
    import sys

    if argv is None:
        argv = sys.argv[1:]
    if argv:
        print(f"usage: python -m shardbook.validation (no arguments), got {' '.join(argv)}", file=sys.stderr)
        return 2
    for r in rows():
        print(f"{r.run.name:40s} {r.role:11s} expected/measured - 1 = {r.error:+.3f}")
    for acc, value in fitted_efficiencies().items():
        print(f"fitted matmul efficiency {acc}: {value:.2f}")
    print(f"fitted FP8 sustained speedup (the math): {fit_fp8_speedup():.2f}")
    passes = fit_elementwise_passes()
    print(f"fitted elementwise passes (every accelerator): {passes:.2f}")
    with elementwise_passes_set(passes):
        for acc, value in fitted_efficiencies().items():
            print(f"  with it, matmul efficiency {acc}: {value:.2f}")
    return 0


_validate.guard_module(globals(), exclude=("matmul_efficiency_set", "elementwise_passes_set", "figure_set", "main"))

if __name__ == "__main__":
    raise SystemExit(main())
