"""The planner held to sources it was not fitted on: leave one source out.

For each source (a references.bib key) of `measured.VALIDATION_RUNS`,
every fitted figure is fitted again, by validation's procedure, on the
calibration runs of the other sources (`fit_fold`), and that source's runs
are priced with them; the runs held out from the split
(`measured.HELD_OUT_RUNS`) are priced with the book's own figures, less
those taken from their own source (`held_out_fold`), or by the fit without
their source where its other runs calibrate. Errors
are reported per stack family (`STACK_FAMILIES`) and per accelerator; their
spread is the band every plan carries (`planner.calibrate.STEP_BANDS`).
Chapter 97 (sec-valid-transfer) says why and shows the result.

Standard library only. Ref: the sources of measured.VALIDATION_RUNS.
"""

import contextlib
import dataclasses
import math
import statistics
from dataclasses import dataclass

from . import _validate, hardware, measured, validation
from .planner import calibrate

# The software stack family of each source's runs, and its label.
STACK_FAMILIES = {
    "megatron": "Megatron/NeMo",
    "pytorch": "PyTorch FSDP stacks",
    "maxtext": "MaxText/JAX",
    "deepspeed": "DeepSpeed",
    "deepseek": "DeepSeek's own",
}
STACK_OF_SOURCE = measured.STACK_OF_SOURCE  # each source's stack family (kept beside the runs)

HELD_OUT_RUNS = measured.HELD_OUT_RUNS  # priced with the book's own figures (or without their source's)

# Without a run to fit it on, the FP8 speedup of the matmuls is taken as the FP8 peak ratio: FP8
# matmuls sustain the share of their own peak that BF16 ones sustain of theirs.
FP8_SPEEDUP_PRIOR = 2.0


def stack_family(run):
    """The stack family (a key of STACK_FAMILIES) of a published run, by its source."""
    if not isinstance(run, measured.PublishedRun):
        raise TypeError(f"run: must be a measured.PublishedRun, got {type(run).__name__}")
    if run.source not in STACK_OF_SOURCE:
        raise ValueError(f"run: source {run.source!r} of {run.name!r} has no stack family in STACK_OF_SOURCE")
    return STACK_OF_SOURCE[run.source]


SAME_DIE = calibrate.SAME_DIE  # a preset on another's die takes that one's η when no run fits it


def unfitted_matmul_efficiency(accelerator, fitted=None, runs=None):
    """The η a leave-one-source-out fold gives an accelerator none of the
    fold's runs fits (the planner's own figure is calibrate.matmul_efficiency): the
    fitted η of a preset on the same die (SAME_DIE, where `fitted`,
    {accelerator: η}, holds it); else the seed's sustained compute fraction
    where it prints one (measured.SUSTAINED), times printed_fraction_ratio
    of its family of kernels over `fitted` and `runs` (the calibration runs
    the η were fitted on) where that has a value, as it is where not; else
    calibrate.DEFAULT_MATMUL_EFFICIENCY."""
    from .planner import calibrate

    name = hardware.get(accelerator).name
    fitted = {} if fitted is None else fitted
    if SAME_DIE.get(name) in fitted:
        return fitted[SAME_DIE[name]]
    for entry in measured.SUSTAINED:
        if entry.accelerator == name:
            ratio = printed_fraction_ratio(calibrate.grouped_gemm_kernels(name), fitted, runs)
            return entry.compute * (1.0 if ratio is None else ratio)
    return calibrate.DEFAULT_MATMUL_EFFICIENCY.value


# An accelerator's η enters printed_fraction_ratio only where this many calibration runs fit it: one
# run's η carries what that run spends beyond the planner's terms (calibrate.ONE_RUN_FITS).
RATIO_MIN_RUNS = 2


def printed_fraction_ratio(kernels, fitted, runs=None):
    """What the planner's η is of the seed's printed sustained fraction
    (measured.SUSTAINED) on the accelerators of one family of kernels
    (`kernels`, calibrate.grouped_gemm_kernels: 'nvidia', 'amd', 'tpu'):
    the mean of fitted η / printed fraction over the accelerators of
    `fitted` ({accelerator: η}) that print one and that at least
    RATIO_MIN_RUNS of `runs` (default validation.calibration_runs()) fit,
    each weighted by those runs; None where none does. The seed prints its
    fraction without saying over what work; η is what the planner's terms
    leave of a whole step, and this carries the ratio of the two, where
    runs fit both, to a part of the family no run fits. Ref: the seed's
    figures in measured.SUSTAINED."""
    from .planner import calibrate

    if kernels not in calibrate.GROUPED_GEMM_HALF_ROWS:
        raise ValueError(f"kernels: must be one of {', '.join(calibrate.GROUPED_GEMM_HALF_ROWS)}, got {kernels!r}")
    printed = {entry.accelerator: entry.compute for entry in measured.SUSTAINED}
    total = weight = 0.0
    for accelerator, eta in fitted.items():
        if accelerator not in printed or calibrate.grouped_gemm_kernels(accelerator) != kernels:
            continue
        n_runs = len(validation.efficiency_runs(accelerator, runs))
        if n_runs >= RATIO_MIN_RUNS:
            total += n_runs * eta / printed[accelerator]
            weight += n_runs
    return total / weight if weight else None


@dataclass(frozen=True)
class Fold:
    """The figures fitted without one source: `left_out` (a references.bib
    key, or None for the book's own fit), `elementwise_passes`,
    `fp8_speedup`, `efficiencies` ({accelerator: η}) and `unfitted`, the
    accelerators of the left-out runs that no run of the fold fits;
    `without_own_figures`, the accelerators whose figures taken from a
    held-out source (calibrate.EP_EXPOSED_FRACTION,
    calibrate.ROUTED_EXPERT_EFFICIENCY) the fold does not know."""

    left_out: str | None
    elementwise_passes: float
    fp8_speedup: float
    efficiencies: dict
    unfitted: tuple
    without_own_figures: tuple = ()


def sources():
    """The sources of measured.VALIDATION_RUNS, in order of first appearance."""
    return list(dict.fromkeys(r.source for r in measured.VALIDATION_RUNS))


@contextlib.contextmanager
def _figures(fold):
    """Within the block, the planner prices with `fold`'s figures."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(validation.elementwise_passes_set(fold.elementwise_passes))
        stack.enter_context(validation.figure_set("FP8 sustained speedup", "any", fold.fp8_speedup))
        for accelerator, value in fold.efficiencies.items():
            stack.enter_context(validation.matmul_efficiency_set(accelerator, value))
        stack.enter_context(_without_own_figures(fold.without_own_figures))
        yield


@contextlib.contextmanager
def _without_own_figures(accelerators):
    """Within the block, calibrate.EP_EXPOSED_FRACTION and
    calibrate.ROUTED_EXPERT_EFFICIENCY have no entry for `accelerators`."""
    from .planner import calibrate

    tables = (calibrate.EP_EXPOSED_FRACTION, calibrate.ROUTED_EXPERT_EFFICIENCY)
    removed = [{name: table.pop(name) for name in accelerators if name in table} for table in tables]
    try:
        yield
    finally:
        for table, entries in zip(tables, removed, strict=True):
            table.update(entries)


# Figures of the book taken from the runs of a held-out source (the AMD seed's sweep fits MI355X's
# routed-expert efficiency, and its profile gives the stack's expert-exchange overlap there): that
# source's runs are priced without them (routed experts on the grouped-GEMM curve at its full
# plateau, exchanges exposed in full).
HELD_OUT_OWN_FIGURES = {"scale-your-model-amd": ("MI355X",)}


def held_out_fold(source):
    """The Fold a held-out run of `source` is priced by: the book's own
    figures (book_fold), less those taken from that source's runs
    (HELD_OUT_OWN_FIGURES)."""
    book = book_fold()
    accelerators = HELD_OUT_OWN_FIGURES.get(source, ())
    if not accelerators:
        return book
    return dataclasses.replace(book, left_out=source, without_own_figures=accelerators)


PASSES_BRACKET = (1.0, 6.0)  # every fold's fit lies between 2.5 and 3.1; an edge is refused


def fit_fold(left_out, tol=1e-3, terms=None):
    """The Fold fitted on the calibration set without `left_out`'s runs
    (None: the whole set): the elementwise passes with every η refitted at
    each trial (FP8's speedup at its value, or FP8_SPEEDUP_PRIOR where no
    FP8 run is left), each η at those passes, then the FP8 speedup at those
    η; an accelerator with no run left takes unfitted_matmul_efficiency
    (its family's printed_fraction_ratio fitted on the fold's runs).
    `tol`: the golden-section tolerance of every η and of the FP8 speedup
    (the passes', searched in PASSES_BRACKET, is twenty times it).
    `terms`: a dict the folds of one table share (leave_one_source_out):
    an accelerator's error at a trial of the passes, computed once for
    every fold that keeps all its runs and tries those passes."""
    from .planner import calibrate

    known = sources()
    if left_out is not None and left_out not in known:
        raise ValueError(f"left_out: unknown source {left_out!r}; sources: {', '.join(known)}")
    validation._check_tol(tol)
    runs = [r for r in validation.calibration_runs() if r.source != left_out]
    accelerators = list(dict.fromkeys(r.accelerator for r in runs))
    fp8_runs = validation.fp8_speedup_runs(runs)
    fp8 = calibrate.FP8_SUSTAINED_SPEEDUP.value if fp8_runs else FP8_SPEEDUP_PRIOR
    with validation.figure_set("FP8 sustained speedup", "any", fp8):
        shared = None if terms is None else terms.setdefault(fp8, {})  # folds at this FP8 speedup: all else the same
        passes = validation.fit_elementwise_passes(*PASSES_BRACKET, tol * 20, runs=runs, eta_tol=tol, terms=shared)
        if not PASSES_BRACKET[0] + tol * 20 < passes < PASSES_BRACKET[1] - tol * 20:
            raise ValueError(f"left_out: without {left_out!r} the passes fit at the bracket's edge ({passes:.2f})")
        with validation.elementwise_passes_set(passes):
            etas = {
                acc: validation.fit_matmul_efficiency(acc, validation.efficiency_runs(acc, runs), tol=tol)
                for acc in accelerators
            }
    if fp8_runs:
        with contextlib.ExitStack() as stack:
            stack.enter_context(validation.elementwise_passes_set(passes))
            for acc, value in etas.items():
                stack.enter_context(validation.matmul_efficiency_set(acc, value))
            fp8 = validation.fit_fp8_speedup(fp8_runs, tol=tol)
    held = [r for r in measured.VALIDATION_RUNS if r.source == left_out]
    unfitted = tuple(dict.fromkeys(r.accelerator for r in held if r.accelerator not in etas))
    fitted = dict(etas)
    for acc in unfitted:
        etas[acc] = unfitted_matmul_efficiency(acc, fitted, runs)
    return Fold(left_out, passes, fp8, etas, unfitted)


@dataclass(frozen=True)
class TransferRow:
    """One run priced by a fit that never saw it: `fold` (the Fold used:
    its source left out, or the book's own fit for a held-out run),
    `held_out` (in no fit at all), `family` (STACK_FAMILIES key), the
    expected step (s) and `error`, expected / measured step − 1."""

    run: object
    fold: Fold
    held_out: bool
    family: str
    expected_step_s: float
    error: float


def _priced(run, fold, held_out):
    with _figures(fold):
        expected = validation.expected_for_run(run).expected_step_s
    return TransferRow(run, fold, held_out, stack_family(run), expected, expected / run.step_s - 1)


def book_fold():
    """The book's own figures (planner.calibrate) as a Fold."""
    from .planner import calibrate

    etas = {acc: calibrate.matmul_efficiency(acc) for acc in dict.fromkeys(r.accelerator for r in HELD_OUT_RUNS)}
    return Fold(None, calibrate.ELEMENTWISE_PASSES.value, calibrate.FP8_SUSTAINED_SPEEDUP.value, etas, ())


def leave_one_source_out(tol=1e-3, held_out=True):
    """A TransferRow for every run of measured.VALIDATION_RUNS, each priced
    by the Fold without its source, then (with `held_out`) for every run of
    HELD_OUT_RUNS, priced by the book's own figures less any taken from its
    own source (held_out_fold), or, where its source's other runs calibrate
    (Megatron Bridge's MoE and Blackwell rows, Llama 3's long-context row),
    by the Fold without that source."""
    out, terms, left_out = [], {}, {}
    for source in sources():
        fold = left_out[source] = fit_fold(source, tol, terms)
        out += [_priced(r, fold, False) for r in measured.VALIDATION_RUNS if r.source == source]
    if held_out:
        folds = {
            source: left_out.get(source) or held_out_fold(source)
            for source in dict.fromkeys(r.source for r in HELD_OUT_RUNS)
        }
        out += [_priced(r, folds[r.source], True) for r in HELD_OUT_RUNS]
    return out


def table_records(table):
    """`table` (TransferRows) as plain data (lists, dicts, strings and
    floats) that json writes and reads back exactly: each Fold once, each
    row naming its run (by source and name) and its fold by position."""
    folds, fold_index, rows = [], {}, []
    for row in table:
        if id(row.fold) not in fold_index:
            fold_index[id(row.fold)] = len(folds)
            folds.append(dataclasses.asdict(row.fold))
        rows.append([row.run.source, row.run.name, fold_index[id(row.fold)], row.held_out, row.expected_step_s])
    return {"folds": folds, "rows": rows}


def table_from_records(records):
    """The TransferRows of table_records' output: the runs are those of
    measured.VALIDATION_RUNS and HELD_OUT_RUNS, the rows of one fold share
    one Fold, the errors are computed again from the expected steps."""
    shape = "records: must be what table_records gives: a dict of 'folds' (dicts) and 'rows' (lists of five)"
    if not isinstance(records, dict) or not isinstance(records.get("folds"), list):
        raise ValueError(shape)
    if not isinstance(records.get("rows"), list) or not all(isinstance(f, dict) for f in records["folds"]):
        raise ValueError(shape)
    if not all(isinstance(r, list) and len(r) == 5 for r in records["rows"]):
        raise ValueError(shape)
    runs = {(r.source, r.name): r for r in measured.VALIDATION_RUNS + HELD_OUT_RUNS}
    folds = [
        Fold(**{**f, "unfitted": tuple(f["unfitted"]), "without_own_figures": tuple(f["without_own_figures"])})
        for f in records["folds"]
    ]
    out = []
    for source, name, fold, held_out, expected in records["rows"]:
        if (source, name) not in runs:
            raise ValueError(f"records: no published run {name!r} of {source!r}")
        run = runs[source, name]
        out.append(TransferRow(run, folds[fold], held_out, stack_family(run), expected, expected / run.step_s - 1))
    return out


@dataclass(frozen=True)
class Summary:
    """A group of TransferRows: how many, how many within `tolerance`, the
    median and extreme errors, and the errors' 10th and 90th percentiles
    (the band, `band_low` ≤ 0 ≤ `band_high` not guaranteed)."""

    label: str
    n_runs: int
    n_within: int
    median_error: float
    min_error: float
    max_error: float
    band_low: float
    band_high: float

    @property
    def share_within(self):
        return self.n_within / self.n_runs


def _quantile(sorted_values, q):
    """The q-quantile of sorted values, linear between order statistics."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    position = q * (len(sorted_values) - 1)
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (position - low) * (sorted_values[high] - sorted_values[low])


def summarize(table, label, tolerance=validation.TOLERANCE):
    """The Summary of TransferRows `table` (at least one row)."""
    if not isinstance(table, (list, tuple)) or not table or not all(isinstance(r, TransferRow) for r in table):
        raise ValueError("table: must be a non-empty list of transfer.TransferRow")
    _validate.positive("tolerance", tolerance)
    errors = sorted(r.error for r in table)
    return Summary(
        label,
        len(errors),
        sum(abs(e) <= tolerance for e in errors),
        statistics.median(errors),
        errors[0],
        errors[-1],
        _quantile(errors, 0.1),
        _quantile(errors, 0.9),
    )


def by_family(table, tolerance=validation.TOLERANCE):
    """{family: Summary} of the rows of each stack family, in STACK_FAMILIES' order."""
    out = {}
    for family, label in STACK_FAMILIES.items():
        mine = [r for r in table if r.family == family]
        if mine:
            out[family] = summarize(mine, label, tolerance)
    return out


def by_accelerator(table, tolerance=validation.TOLERANCE):
    """{accelerator: Summary} of the rows of each accelerator, in order of first appearance."""
    out = {}
    for acc in dict.fromkeys(r.run.accelerator for r in table):
        out[acc] = summarize([r for r in table if r.run.accelerator == acc], acc, tolerance)
    return out


# --- what the runs leave unpublished --------------------------------------------------
# Two details the fit depends on are not printed by their sources and are taken at their simplest
# (chapter 97, "The runs"): Megatron-Core's table gives neither the schedule nor the microbatch of
# its rows, and Llama 3's step times are derived from TFLOP/s counted with full-square attention.
# Each alternative below rebuilds the runs under another reading and refits H100's η, whose
# calibration runs they are, everything else held.
def _mcore_1f1b(run):
    if run.source != "megatron-lm-readme" or run.mesh.get("pp", 1) == 1:
        return run
    return dataclasses.replace(run, schedule="1f1b", n_virtual=None)


def _mcore_micro_2(run):
    if run.source != "megatron-lm-readme":
        return run
    return dataclasses.replace(run, micro_batch_seqs=2)


def _llama3_causal(run):
    from . import training

    if run.source != "dubey2024llama3":
        return run
    flops = training.model_flops_per_token(run.model, run.seq_len, causal=True) * run.global_tokens
    step = flops / (run.n_devices * run.tflops_per_s_per_device * 1e12)
    return dataclasses.replace(run, step_s=step, step_basis="model FLOPs with causal attention / (GPUs x TFLOP/s)")


READINGS = (
    ("as the book reads them", None),
    ("Megatron-Core's pipelined rows on 1F1B", _mcore_1f1b),
    ("Megatron-Core at two sequences a microbatch", _mcore_micro_2),
    ("Llama 3's TFLOP/s counted with causal attention", _llama3_causal),
)


@dataclass(frozen=True)
class Reading:
    """One reading of the unpublished details: `label`, H100's η refitted
    under it, {run name: error} of H100's BF16 runs under that η, and the
    error of Llama 3's long-context row (measured.LLAMA3_LONG_CONTEXT_RUNS,
    held out of the split) under that η, its step read the same way."""

    label: str
    h100_eta: float
    errors: dict
    long_context_error: float


def readings(tol=1e-3):
    """A Reading for each of READINGS."""
    out = []
    for label, change in READINGS:
        runs = [change(r) if change else r for r in measured.VALIDATION_RUNS]
        h100 = [r for r in runs if r.accelerator == "H100" and r.precision != "fp8"]
        fit_on = [r for r in validation.calibration_runs(runs) if r in h100]
        eta = validation.fit_matmul_efficiency("H100", fit_on, tol=tol)
        (long_context,) = [change(r) if change else r for r in measured.LLAMA3_LONG_CONTEXT_RUNS]
        with validation.matmul_efficiency_set("H100", eta):
            errors = {r.name: validation.expected_for_run(r).expected_step_s / r.step_s - 1 for r in h100}
            long_context_error = validation.expected_for_run(long_context).expected_step_s / long_context.step_s - 1
        out.append(Reading(label, eta, errors, long_context_error))
    return out


MIN_BAND_RUNS = 5  # a stack family with fewer dense runs takes the band of every dense run
BAND_QUANTILES = (0.1, 0.9)


def _is_moe(row):
    from . import models

    return models.get(row.run.model).is_moe


def on_a_thinly_fitted_accelerator(row):
    """Whether `row` (a TransferRow) ran on an accelerator whose η the book
    fits on one run or none (calibrate.eta_rests_on_one_run_or_none): the
    plans such an accelerator gets take the band of these rows, each priced
    without its own source, so at a printed or assumed fraction wherever
    that source was the η's only one."""
    if not isinstance(row, TransferRow):
        raise TypeError(f"row: must be a transfer.TransferRow, got {type(row).__name__}")
    return calibrate.eta_rests_on_one_run_or_none(row.run.accelerator)


def step_bands(table):
    """{key: (low error, high error, runs)}: the 10th and 90th percentiles
    of the errors of `table`'s rows (TransferRows) for each key of
    planner.calibrate.STEP_BANDS. Dense runs on accelerators the book fits
    on several runs: each stack family's where it has at least
    MIN_BAND_RUNS, and 'any' for all of them; 'prior' for the dense runs on
    accelerators it fits on one run or none (on_a_thinly_fitted_accelerator:
    what a plan on such an accelerator can expect); 'moe' for every MoE run
    (of any stack: too few in each)."""
    if not isinstance(table, (list, tuple)) or not all(isinstance(r, TransferRow) for r in table):
        raise ValueError("table: must be a list of transfer.TransferRow")
    dense = [r for r in table if not _is_moe(r)]
    fitted = [r for r in dense if not on_a_thinly_fitted_accelerator(r)]
    groups = {family: [r for r in fitted if r.family == family] for family in STACK_FAMILIES}
    groups = {k: v for k, v in groups.items() if len(v) >= MIN_BAND_RUNS}
    groups["any"] = fitted
    groups["prior"] = [r for r in dense if on_a_thinly_fitted_accelerator(r)]
    groups["moe"] = [r for r in table if _is_moe(r)]
    out = {}
    for key, rows in groups.items():
        if not rows:
            raise ValueError(f"table: no run for the band {key!r}")
        errors = sorted(r.error for r in rows)
        out[key] = (_quantile(errors, BAND_QUANTILES[0]), _quantile(errors, BAND_QUANTILES[1]), len(rows))
    return out


_validate.guard_module(globals())
