"""The planner held to sources it was not fitted on (shardbook.transfer):
leave one source out, the band every plan carries, the ties it marks, and
the memory reserve fitted on the runs that ran."""

import dataclasses
import json
import math

import pytest

from conftest import run_main
from shardbook import explorer, hardware, measured, transfer, validation
from shardbook.book import computed_once
from shardbook.planner import calibrate, cli


@pytest.fixture(scope="module")
def loso():
    """Every run priced by a fit that never saw it (about 35 s: nine folds),
    computed once per version of the package: the table chapters 7 and 97
    show (computed_once; `make test` computes it once for the build and the
    tests)."""
    return computed_once.leave_one_source_out()


@pytest.fixture(scope="module")
def folds(loso):
    """The table's Fold of each source left out, by source."""
    return {r.fold.left_out: r.fold for r in loso if not r.held_out}


def test_every_source_has_a_stack_family_and_the_families_are_named():
    for run in measured.VALIDATION_RUNS + measured.HELD_OUT_RUNS:
        assert transfer.stack_family(run) in transfer.STACK_FAMILIES
    assert set(calibrate.STACKS) == {"any", *transfer.STACK_FAMILIES}
    with pytest.raises(ValueError, match="no stack family"):
        transfer.stack_family(dataclasses.replace(measured.VALIDATION_RUNS[0], source="nowhere"))


def test_each_published_run_is_named_once_within_its_source():
    # the shared table (computed_once) names each row's run by its source and name
    runs = measured.VALIDATION_RUNS + measured.HELD_OUT_RUNS
    assert len({(r.source, r.name) for r in runs}) == len(runs)


def test_the_deepspeed_family_holds_bloom_priced_with_the_books_own_figures():
    # BigScience's Megatron-DeepSpeed run is held out: no figure of the book comes from its source
    (run,) = measured.BLOOM_A100_RUNS
    assert transfer.stack_family(run) == "deepspeed" and run in transfer.HELD_OUT_RUNS
    assert run.source not in transfer.sources() and run.source not in transfer.HELD_OUT_OWN_FIGURES
    assert transfer.held_out_fold(run.source) == transfer.book_fold()


def test_torchtitan_is_a_second_held_out_pytorch_source_priced_with_the_books_own_figures():
    # torchtitan-benchmarks: PyTorch's own FSDP2 stack, beside Meta's Llama 3 runs and MosaicML's MPT
    runs = measured.TORCHTITAN_H100_RUNS
    assert {r.source for r in runs} == {"torchtitan-benchmarks"}
    assert {transfer.stack_family(r) for r in runs} == {"pytorch"}
    pytorch = {s for s, f in transfer.STACK_OF_SOURCE.items() if f == "pytorch"}
    assert pytorch == {"dubey2024llama3", "llm-foundry-benchmarks", "torchtitan-benchmarks"}
    assert all(r in transfer.HELD_OUT_RUNS and r not in measured.VALIDATION_RUNS for r in runs)
    assert "torchtitan-benchmarks" not in transfer.sources()
    assert "torchtitan-benchmarks" not in transfer.HELD_OUT_OWN_FIGURES
    assert transfer.held_out_fold("torchtitan-benchmarks") == transfer.book_fold()


@pytest.mark.slow
def test_torchtitan_rows_of_the_table_are_held_out_and_expected_fast(loso):
    rows = [r for r in loso if r.run in measured.TORCHTITAN_H100_RUNS]
    assert len(rows) == len(measured.TORCHTITAN_H100_RUNS)
    assert all(r.held_out and r.family == "pytorch" and r.fold == transfer.book_fold() for r in rows)
    # every 8B run expected faster than it ran, by more than the tolerance (the Grand Teton part's power
    # limit is not priced); since the scores run at FlashAttention-2's share of η (calibrate.attention_share,
    # SDPA's first choice on H100), all but one 70B run within it; the plainest, 70B in BF16 with plain TP
    # (2025-06 file), among them
    eight = [r for r in rows if r.run.model == "LLaMA-3 8B"]
    seventy = [r for r in rows if r.run.model == "LLaMA-3 70B"]
    assert len(eight) + len(seventy) == len(rows)
    assert all(r.error < -validation.TOLERANCE for r in eight)
    assert sum(abs(r.error) <= validation.TOLERANCE for r in seventy) == len(seventy) - 1
    plain = next(r for r in rows if r.run.name == "torchtitan 2025-06 Llama 3 70B, 256 H100, BF16, vanilla TP")
    assert abs(plain.error) <= validation.TOLERANCE


@pytest.mark.slow
def test_a_fold_refits_every_figure_without_the_source(folds):
    # Megatron-Core's H100 table holds five of H100's calibration runs: without them H100's η is fitted
    # on the rest (Llama 3's 8K run), by the same procedure, at the fold's elementwise passes
    left_out = "megatron-lm-readme"
    fold = transfer.fit_fold(left_out)
    # fitted alone, it is the table's fold to the last bit (the table's folds share the terms they both compute)
    assert fold == folds[left_out]
    rest = [r for r in validation.calibration_runs() if r.source != left_out]
    h100 = [r for r in rest if r.accelerator == "H100" and r.precision != "fp8"]
    assert h100 and all(r.source != left_out for r in h100)
    every_h100 = [r for r in validation.calibration_runs() if r.accelerator == "H100" and r.precision != "fp8"]
    with validation.elementwise_passes_set(fold.elementwise_passes):
        with validation.figure_set("FP8 sustained speedup", "any", calibrate.FP8_SUSTAINED_SPEEDUP.value):
            alone = validation.fit_matmul_efficiency("H100", h100, tol=1e-3)
            # the same fit with the left-out table's runs in it, which the book's figure rounds
            with_them = validation.fit_matmul_efficiency("H100", every_h100, tol=1e-3)
    assert fold.efficiencies["H100"] == pytest.approx(alone, abs=2e-3)
    # and it is not the fit those runs helped make: apart by several times the fits' tolerance (the
    # book's rounded figure, 0.52 since the full recomputation's count and TPU ICI rate were mended, is
    # within 0.01 of the fold's by chance)
    assert abs(fold.efficiencies["H100"] - with_them) > 5e-3
    assert fold.unfitted == ()


@pytest.mark.slow
def test_a_left_out_sources_rows_are_priced_with_its_folds_figures(loso):
    left_out = "megatron-lm-readme"
    rows = [r for r in loso if r.run.source == left_out]
    assert rows and not any(r.held_out for r in rows)
    fold = rows[0].fold
    assert fold.left_out == left_out and all(r.fold is fold for r in rows)
    with validation.elementwise_passes_set(fold.elementwise_passes):
        with validation.matmul_efficiency_set("H100", fold.efficiencies["H100"]):
            with validation.figure_set("FP8 sustained speedup", "any", fold.fp8_speedup):
                for row in rows:
                    step = validation.expected_for_run(row.run).expected_step_s
                    assert row.expected_step_s == pytest.approx(step, rel=1e-12)
                    assert row.error == pytest.approx(step / row.run.step_s - 1, rel=1e-12)
    # the book's own fit prices them otherwise
    book = [validation.expected_for_run(r.run).expected_step_s for r in rows]
    assert any(abs(b / r.expected_step_s - 1) > 1e-3 for b, r in zip(book, rows, strict=True))


@pytest.mark.slow
def test_the_shared_table_reads_back_as_the_table_it_wrote(loso):
    # computed_once keeps the table as json: every run, fold and float comes back as it was
    records = json.loads(json.dumps(transfer.table_records(loso)))
    again = transfer.table_from_records(records)
    assert again == loso and [r.run for r in again] == [r.run for r in loso]
    # the rows of one fold share one Fold, as the table's do
    assert len({id(r.fold) for r in again}) == len({id(r.fold) for r in loso}) == len(records["folds"])
    for bad in (3.0, {"folds": records["folds"]}, {"folds": records["folds"], "rows": [[1, 2]]}):
        with pytest.raises(ValueError, match="records: must be what table_records gives"):
            transfer.table_from_records(bad)
    with pytest.raises(ValueError, match="no published run 'nowhere'"):
        transfer.table_from_records({"folds": records["folds"], "rows": [["nowhere", "nowhere", 0, False, 1.0]]})


@pytest.mark.slow
def test_an_accelerator_left_without_runs_takes_what_an_unseen_one_gets(folds):
    # the table's folds (transfer.fit_fold of each source, as the test above holds)
    # H800's only run is DeepSeek-V3: without it, H800 takes the fit of H100, the same GH100 die
    fold = folds["deepseek2024v3"]
    assert fold.unfitted == ("H800",) and fold.efficiencies["H800"] == fold.efficiencies["H100"]
    # v5e's runs are all MaxText's v5e table: without it, the seed's sustained fraction (0.67), times
    # what the fold's v5p η is of v5p's printed 0.72 (v5p: the one other TPU with a printed fraction)
    fold = folds["maxtext-v5e-perf"]
    assert fold.unfitted == ("TPU v5e",)
    assert fold.efficiencies["TPU v5e"] == pytest.approx(0.67 * fold.efficiencies["TPU v5p"] / 0.72, rel=1e-12)
    # every Blackwell run is Megatron Bridge's: without it each takes its printed fraction (0.69 for
    # B200, 0.70 for GB200 and GB300) times H100's fitted η over H100's printed 0.73; H800, also
    # printed, is fitted on one run and does not enter the ratio
    fold = folds["megatron-bridge-perf-summary"]
    assert set(fold.unfitted) == {"B200", "GB200 NVL72", "GB300 NVL72"}
    h100 = fold.efficiencies["H100"] / 0.73
    assert fold.efficiencies["B200"] == pytest.approx(0.69 * h100, rel=1e-12)
    assert fold.efficiencies["GB200 NVL72"] == fold.efficiencies["GB300 NVL72"] == pytest.approx(0.70 * h100, rel=1e-12)
    # Megatron Bridge's is the only FP8 run that fits the FP8 speedup: without it, the peak ratio
    assert fold.fp8_speedup == transfer.FP8_SPEEDUP_PRIOR == 2.0
    with pytest.raises(ValueError, match="left_out: unknown source 'nowhere'"):
        transfer.fit_fold("nowhere")


def test_a_printed_fraction_is_scaled_by_what_its_familys_fits_are_of_theirs():
    runs = validation.calibration_runs()
    n_h100 = len(validation.efficiency_runs("H100", runs))
    n_v5p = len(validation.efficiency_runs("TPU v5p", runs))
    assert n_h100 >= transfer.RATIO_MIN_RUNS and n_v5p >= transfer.RATIO_MIN_RUNS
    assert len(validation.efficiency_runs("H800", runs)) == 1
    # by family: a TPU's fit says nothing of a GPU's printed fraction, and a one-run fit (H800) is left out
    fitted = {"H100": 0.5, "H800": 0.2, "TPU v5p": 0.9}
    assert transfer.printed_fraction_ratio("nvidia", fitted, runs) == pytest.approx(0.5 / 0.73)
    assert transfer.printed_fraction_ratio("tpu", fitted, runs) == pytest.approx(0.9 / 0.72)
    # each accelerator weighted by the runs that fit it: v5e (two runs) beside v5p
    both = {"TPU v5p": 0.72, "TPU v5e": 0.67 * 1.5}
    n_v5e = len(validation.efficiency_runs("TPU v5e", runs))
    assert n_v5e == 2
    assert transfer.printed_fraction_ratio("tpu", both, runs) == pytest.approx(
        (n_v5p * 1.0 + n_v5e * 1.5) / (n_v5p + n_v5e)
    )
    # nothing to scale by: no fitted accelerator of the family prints a fraction, or none is fitted on two runs
    assert transfer.printed_fraction_ratio("amd", fitted, runs) is None
    assert transfer.printed_fraction_ratio("nvidia", {"H800": 0.2, "A100": 0.7}, runs) is None
    assert transfer.unfitted_matmul_efficiency("B200", {"H800": 0.2}, runs) == 0.69
    assert transfer.unfitted_matmul_efficiency("B200", fitted, runs) == pytest.approx(0.69 * 0.5 / 0.73)
    # a same-die preset's fit comes first, and an accelerator nothing prints takes the default
    assert transfer.unfitted_matmul_efficiency("H200", fitted, runs) == 0.5
    assert transfer.unfitted_matmul_efficiency("MI300X", fitted, runs) == calibrate.DEFAULT_MATMUL_EFFICIENCY.value
    with pytest.raises(ValueError, match="kernels: must be one of nvidia, amd, tpu, got 'arm'"):
        transfer.printed_fraction_ratio("arm", fitted)


@pytest.mark.slow
def test_held_out_runs_are_priced_with_the_books_own_figures(loso):
    held = [r for r in loso if r.held_out]
    assert [r.run for r in held] == list(measured.HELD_OUT_RUNS)
    own = [r for r in held if r.run.source in transfer.HELD_OUT_OWN_FIGURES]
    calibrating = set(transfer.sources())
    for row in held:
        if row.run.source in transfer.HELD_OUT_OWN_FIGURES or row.run.source in calibrating:
            continue
        assert row.expected_step_s == pytest.approx(validation.expected_for_run(row.run).expected_step_s, rel=1e-12)
    # a held-out run of a source whose other runs calibrate (Megatron Bridge's MoE rows on H100, its
    # 405B rows on GB200 and GB300, its archive's B200 rows, whose Llama rows fit the FP8 speedup and
    # the η of GB200, GB300 and B200; Llama 3's long-context row, whose 8K rows fit H100's η) is
    # priced as that source's runs are: by the fold fitted without it
    of_calibrating = [r for r in held if r.run.source in calibrating]
    assert [r.run for r in of_calibrating] == list(
        measured.MEGATRON_BRIDGE_H100_MOE_RUNS
        + measured.MEGATRON_BRIDGE_GB200_HELD_OUT_RUNS
        + measured.MEGATRON_BRIDGE_GB300_HELD_OUT_RUNS
        + measured.MEGATRON_BRIDGE_B200_HELD_OUT_RUNS
        + measured.LLAMA3_LONG_CONTEXT_RUNS
    )
    left_out = {r.run.source: r.fold for r in loso if not r.held_out}
    for row in of_calibrating:
        assert row.fold is left_out[row.run.source] and row.fold.left_out == row.run.source
        if row.run.source == "megatron-bridge-perf-summary":
            assert row.fold.fp8_speedup == transfer.FP8_SPEEDUP_PRIOR  # no other FP8 run to fit it on
        with transfer._figures(row.fold):
            step = validation.expected_for_run(row.run).expected_step_s
        assert row.expected_step_s == pytest.approx(step, rel=1e-12)
        if row.run.source == "megatron-bridge-perf-summary":  # its fold's FP8 speedup and GB200 η are not the book's
            assert abs(step / validation.expected_for_run(row.run).expected_step_s - 1) > 0.01
    # the AMD seed's sweep fits MI355X's routed-expert efficiency (its endpoints) and gives its stack's
    # exchange overlap: its rows are priced without both (routed experts at η, exchanges exposed in full)
    assert [r.run.name for r in own] == [r.name for r in measured.AMD_MI355X_RUNS]
    for row in own:
        fold = row.fold
        assert fold.left_out == "scale-your-model-amd" and fold.without_own_figures == ("MI355X",)
        assert fold.efficiencies["MI355X"] == calibrate.matmul_efficiency("MI355X")  # assumed, not fitted on it
        with transfer._without_own_figures(("MI355X",)):
            assert calibrate.routed_expert_efficiency("MI355X") == 1.0
            assert calibrate.ep_exposed_fraction("MI355X") is None
            step = validation.expected_for_run(row.run).expected_step_s
        assert row.expected_step_s == pytest.approx(step, rel=1e-12)
        assert abs(step / validation.expected_for_run(row.run).expected_step_s - 1) > 0.2
    assert "MI355X" in calibrate.EP_EXPOSED_FRACTION and "MI355X" in calibrate.ROUTED_EXPERT_EFFICIENCY  # restored
    # no held-out run is in either set of the split
    names = {r.name for r in measured.VALIDATION_RUNS}
    assert not names & {r.name for r in measured.HELD_OUT_RUNS}


@pytest.mark.slow  # four refits of H100's η: seconds of one core
def test_each_reading_refits_h100_and_prices_the_long_context_row_its_way():
    from shardbook import training

    (long_context,) = measured.LLAMA3_LONG_CONTEXT_RUNS
    out = {r.label: r for r in transfer.readings()}
    assert list(out) == [label for label, _ in transfer.READINGS]
    tokens_per_device_s = long_context.global_tokens / (long_context.n_devices * 380e12)  # 380 TFLOP/s, Table 4
    for label, causal in (("as the book reads them", False), ("Llama 3's TFLOP/s counted with causal attention", True)):
        reading = out[label]
        step = training.model_flops_per_token("LLaMA-3 405B", 131072, causal=causal) * tokens_per_device_s
        with validation.matmul_efficiency_set("H100", reading.h100_eta):
            expected = validation.expected_for_run(long_context).expected_step_s
        assert reading.long_context_error == pytest.approx(expected / step - 1, rel=1e-9), label
    # the causal count shortens the measured step by 29 %, so it moves this row's error far more than any 8K row's
    book, causal = out["as the book reads them"], out["Llama 3's TFLOP/s counted with causal attention"]
    moved = {name: abs(causal.errors[name] - book.errors[name]) for name in book.errors}
    assert causal.long_context_error - book.long_context_error > 0.2 > 2 * max(moved.values())
    # the other readings change Megatron-Core's rows only: the long-context row moves with H100's η alone
    for label in ("Megatron-Core's pipelined rows on 1F1B", "Megatron-Core at two sequences a microbatch"):
        with validation.matmul_efficiency_set("H100", out[label].h100_eta):
            expected = validation.expected_for_run(long_context).expected_step_s
        assert out[label].long_context_error == pytest.approx(expected / long_context.step_s - 1, rel=1e-9)


@pytest.mark.slow
def test_the_bands_are_the_leave_one_source_out_percentiles(loso):
    bands = transfer.step_bands(loso)
    assert set(bands) == set(calibrate.STEP_BANDS)
    for key, (low, high, n_runs) in bands.items():
        band = calibrate.STEP_BANDS[key]
        assert band.low_error == pytest.approx(low, abs=0.01), key
        assert band.high_error == pytest.approx(high, abs=0.01), key
        assert band.n_runs == n_runs, key
        assert band.source == "fit"
    # a family with fewer than MIN_BAND_RUNS dense runs has no band of its own
    for family in ("deepspeed", "deepseek"):
        assert family not in bands and calibrate.step_band(family, False) == calibrate.step_band("any", False)
    # the runs on accelerators whose η rests on one run or none (the Blackwell parts, each fitted on
    # one Megatron Bridge row) make the 'prior' band, and no family's: left out with their source,
    # they are priced at a scaled printed fraction, which says how far such an η misses, not the stack
    thin = [r for r in loso if transfer.on_a_thinly_fitted_accelerator(r) and not transfer._is_moe(r)]
    assert {r.run.accelerator for r in thin} == {"GB200 NVL72", "GB300 NVL72", "B200"}
    assert all(calibrate.single_run_caveat(r.run.accelerator) for r in thin)
    # torchtitan's Grand Teton H100 takes H100's fit (the same die): its runs count for the PyTorch family
    assert calibrate.single_run_caveat("H100 Grand Teton") and not calibrate.eta_rests_on_one_run_or_none(
        "H100 Grand Teton"
    )
    assert bands["prior"][2] == len(thin) and all(r.run.accelerator in r.fold.unfitted for r in thin)
    dense = [r for r in loso if not transfer._is_moe(r)]
    assert bands["any"][2] == len(dense) - len(thin)
    assert bands["megatron"][2] == sum(r.family == "megatron" for r in dense) - len(thin)


@pytest.mark.slow
def test_summaries_count_the_runs_within_the_tolerance(loso):
    total = transfer.summarize(loso, "all")
    assert total.n_runs == len(measured.VALIDATION_RUNS) + len(measured.HELD_OUT_RUNS)
    assert total.n_within == sum(abs(r.error) <= validation.TOLERANCE for r in loso)
    assert total.min_error <= total.band_low <= total.median_error <= total.band_high <= total.max_error
    families = transfer.by_family(loso)
    assert sum(s.n_runs for s in families.values()) == total.n_runs
    assert list(families) == [f for f in transfer.STACK_FAMILIES if f in families]
    with pytest.raises(ValueError, match="non-empty list"):
        transfer.summarize([], "none")


def test_the_band_brackets_the_expected_step_by_the_families_errors():
    dense = explorer.evaluate("LLaMA-3 8B", "H100", {"fsdp": 64}, 2**22, stack="megatron")
    low_error, high_error = calibrate.step_band("megatron", False)
    low, high = dense.expected_step_range_s
    assert low == pytest.approx(dense.expected_step_s / (1 + high_error))
    assert high == pytest.approx(dense.expected_step_s / (1 + low_error))
    assert low < dense.expected_step_s < high
    # an MoE plan takes the MoE runs' band, whatever the stack: far wider on the slow side
    moe = explorer.evaluate("Mixtral 8x7B", "H100", {"fsdp": 64}, 2**22, stack="megatron")
    assert moe.is_moe and moe.expected_step_range_s[1] / moe.expected_step_s == pytest.approx(
        1 / (1 + calibrate.STEP_BANDS["moe"].low_error)
    )
    with pytest.raises(ValueError, match="stack: unknown value 'torch'"):
        explorer.evaluate("LLaMA-3 8B", "H100", {"fsdp": 64}, 2**22, stack="torch")


def test_a_band_of_errors_reads_as_the_measured_step_over_the_expected():
    # an error is expected / measured - 1: a run 20 % under its expectation took 1.25 times it
    assert calibrate.measured_over_expected(-0.2, 0.25) == pytest.approx((0.8, 1.25))
    assert calibrate.STEP_BANDS["moe"].measured_over_expected == calibrate.measured_over_expected(
        calibrate.STEP_BANDS["moe"].low_error, calibrate.STEP_BANDS["moe"].high_error
    )
    with pytest.raises(ValueError, match="low_error: an error expected / measured - 1 is above -1"):
        calibrate.measured_over_expected(-1.0, 0.1)


def test_a_plan_on_an_accelerator_fitted_on_one_run_takes_its_familys_band_stretched_over_prior():
    h100 = explorer.evaluate("LLaMA-3 8B", "H100", {"fsdp": 64}, 2**22, stack="megatron")
    gb200 = explorer.evaluate("LLaMA-3 8B", "GB200 NVL72", {"fsdp": 64}, 2**22, stack="megatron")
    assert not h100.eta_on_one_run_or_none and gb200.eta_on_one_run_or_none
    family, prior = calibrate.STEP_BANDS["megatron"], calibrate.STEP_BANDS["prior"]
    assert calibrate.step_band("megatron", False) == (family.low_error, family.high_error)
    stretched = (min(family.low_error, prior.low_error), max(family.high_error, prior.high_error))
    assert calibrate.step_band("megatron", False, True) == stretched
    low, high = gb200.expected_step_range_s
    assert (low, high) == pytest.approx(
        (gb200.expected_step_s / (1 + stretched[1]), gb200.expected_step_s / (1 + stretched[0]))
    )
    assert "as this one's does" in cli.band_line([gb200]) and "as this one's does" not in cli.band_line([h100])
    # an MoE plan takes the MoE band on any accelerator
    assert calibrate.step_band("megatron", True, True) == calibrate.step_band("any", True)


def test_rows_whose_band_overlaps_the_best_are_ties():
    best = explorer.evaluate("LLaMA-3 8B", "H100", {"fsdp": 64}, 2**22, stack="megatron")
    low_error, high_error = calibrate.step_band("megatron", False)
    # the slowest step whose band still reaches the best's: expected × (1 + high) / (1 + low)
    edge = best.expected_step_s * (1 + high_error) / (1 + low_error)
    inside = dataclasses.replace(best, expected_step_s=edge * (1 - 1e-6))
    outside = dataclasses.replace(best, expected_step_s=edge * (1 + 1e-6))
    unfit = dataclasses.replace(best, expected_step_s=best.expected_step_s * 0.5, fits=False)
    tied = cli.tied([best, inside, outside, unfit])
    assert tied == [best, inside]
    table = cli.format_table([best, inside, outside])
    assert [cli.TIE_MARK in line.split() for line in table.splitlines()[2:]] == [True, True, False]
    assert "the 2 rows marked 'tie'" in cli.band_line([best, inside, outside])


def test_the_table_shows_the_expected_steps_parts():
    cand = explorer.evaluate("LLaMA-3 70B", "H100", {"fsdp": 64, "tp": 8}, 2**22, stack="megatron")
    terms = cand.expected_terms
    exposed = sum(cand.expected_exposed_s.values())
    # matmuls, elementwise, exposed communication and bubble add up to the expected step
    assert (terms["math"] - terms["elementwise"]) + terms["elementwise"] + exposed + terms["bubble"] == pytest.approx(
        cand.expected_step_s
    )
    assert cand.tokens_per_s_per_device == pytest.approx(2**22 / (cand.expected_step_s * 512))
    assert cand.days_per_tokens(1e12) == pytest.approx(1e12 / (cand.tokens_per_s_per_device * 512) / 86_400)
    hidden = sum(terms[k] - v for k, v in cand.expected_exposed_s.items())
    assert cand.hidden_comm_s == pytest.approx(hidden) and cand.hidden_to_math == pytest.approx(hidden / terms["math"])


def test_the_memory_reserve_is_the_largest_no_run_that_ran_contradicts():
    for family, figure in calibrate.MEMORY_RESERVE_BYTES.items():
        assert figure.value == validation.fit_memory_reserve_bytes(family), family
    # every published run that ran fits under it (its own options, the default reserve)
    for run in measured.VALIDATION_RUNS + measured.HELD_OUT_RUNS:
        cand = validation.expected_for_run(run)
        assert cand.fits, run.name
        assert cand.memory_breakdown["reserve"] == calibrate.memory_reserve_bytes(run.accelerator)
    # one step more would call some GPU run unfit
    more = calibrate.MEMORY_RESERVE_BYTES["gpu"].value + calibrate.RESERVE_STEP_BYTES
    unfit = [
        r
        for r in measured.VALIDATION_RUNS + measured.HELD_OUT_RUNS
        if r.accelerator in ("H100", "H800", "A100")
        and not explorer.evaluate(
            r.model, r.accelerator, r.mesh, r.global_tokens, **dict(explorer.run_options(r), reserve_bytes=more)
        ).fits
    ]
    assert unfit


def test_a_reserve_outside_the_hbm_is_one_line():
    for value in (-1.0, 86e9, math.inf, True):
        with pytest.raises(ValueError, match=r"reserve_bytes: must lie in \[0, 85.5 GB\)"):
            explorer.evaluate("LLaMA-3 8B", "H100", {"fsdp": 8}, 2**20, reserve_bytes=value)
    small = explorer.evaluate("LLaMA-3 8B", "H100", {"fsdp": 8}, 2**20, reserve_bytes=0.0)
    assert small.memory_breakdown["reserve"] == 0.0


def _cli(*args):
    """`python -m shardbook.explorer ARGS`, run in this process (conftest.run_main)."""
    return run_main(explorer.main, *args)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--reserve", "90GB"), "error: --reserve: must lie in [0, 85.5 GB), the HBM one H100 reports, got 90.0 GB"),
        (("--reserve", "-1GB"), "error: --reserve: must be a finite size of at least 0 bytes, got '-1GB'"),
        (("--reserve", "8XB"), "error: --reserve: a size such as 8GB or 7.5GiB (units B, KB, MB, GB, TB, KiB, MiB, GiB, TiB), got '8XB'"),
        (("--stack", "torch"), "error: --stack: one of any, megatron, pytorch, maxtext, deepspeed, deepseek, got 'torch'"),
        (("--loss-logits", "fp16"), "error: --loss-logits: one of fp32_copy, fused_bf16, chunked_fp32_8, got 'fp16'"),
    ],
)  # fmt: skip
def test_bad_planner_options_are_one_line(args, message):
    result = _cli("LLaMA-3 8B", "H100", "64", "4M", *args)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == message + "\n"


@pytest.mark.slow  # two default searches of 70B on 512 H100 by the command line: seconds of one core (make test runs it)
def test_the_command_line_prints_the_band_the_reserve_and_what_to_decide_with():
    result = _cli("LLaMA-3 70B", "H100", "512", "4M", "--seq-len", "8192", "--top", "5", "--stack", "megatron")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "HBM held back for the framework (context, communication buffers, fragmentation): 3.0 GB" in out
    assert "Band: the measured step of most runs the planner was not fitted on (dense runs, the megatron stack" in out
    header = next(line for line in out.splitlines() if line.startswith("mesh"))
    for column in ("band ms", "tokens/s /device", "days /1T tokens", "matmul ms", "elementwise ms", "hidden /math"):
        assert column in header
    assert out.rstrip().endswith("add --assumptions")
    data = __import__("json").loads(_cli("LLaMA-3 70B", "H100", "512", "4M", "--json", "--top", "1").stdout)[0]
    for key in ("expected_step_s", "step_s", "fits", "memory_breakdown_bytes", "hbm_bytes", "recompute"):
        assert key in data  # the keys scripts read stay
    assert data["expected_step_range_s"][0] < data["expected_step_s"] < data["expected_step_range_s"][1]


def test_loss_logits_default_to_what_each_familys_stack_keeps():
    assert calibrate.default_loss_logits("TPU v5p") == "fused_bf16"
    assert calibrate.default_loss_logits("H100") == "fp32_copy"
    tpu = explorer.evaluate("LLaMA-3 8B", "TPU v5p", {"fsdp": 64}, 2**22)
    fp32 = explorer.evaluate("LLaMA-3 8B", "TPU v5p", {"fsdp": 64}, 2**22, loss_logits="fp32_copy")
    # one BF16 buffer, the logits then their gradient (2 bytes a logit), against Megatron's FP32 copy (6)
    assert tpu.memory_breakdown["logits"] == pytest.approx(fp32.memory_breakdown["logits"] * 2 / 6)


def test_the_amd_sweep_is_recorded_as_the_seed_prints_it():
    # scale-your-model-amd, chapter 5, "Successful measurements": deepseek2-16b on eight MI355X
    printed = {(8, 1): (0.9478, 283.6, 17286.2), (4, 2): (1.6856, 159.5, 9719.9),
               (2, 4): (1.4215, 189.1, 11526.6), (1, 8): (0.8591, 312.9, 19071.9)}  # fmt: skip
    assert len(measured.AMD_MI355X_RUNS) == 4
    for run in measured.AMD_MI355X_RUNS:
        step, tflops, tokens = printed[(run.mesh["fsdp"], run.mesh["ep"])]
        assert (run.step_s, run.tflops_per_s_per_device, run.tokens_per_s_per_device) == (step, tflops, tokens)
        assert run.global_tokens == 131_072 and run.model == "DeepSeek-V2-Lite" and run.accelerator == "MI355X"
        assert run.global_tokens / (run.step_s * 8) == pytest.approx(tokens, rel=1e-3)


@pytest.mark.slow  # a sweep spends a whole search's budget, then two more searches: seconds of one core (make test runs it)
def test_a_sweep_prints_the_best_fitting_mesh_at_each_value():
    result = _cli("LLaMA-3 8B", "H100", "64", "4M", "--sweep", "seq=2048,4096,1000000")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "LLaMA-3 8B on 64 × H100: the best fitting mesh at each seq"
    rows = lines[4:]
    assert len(rows) == 3
    # each row is what the search ranks first among the meshes that fit at that sequence length
    for row, seq_len in zip(rows[:2], (2048, 4096), strict=True):
        best = next(c for c in explorer.explore("LLaMA-3 8B", "H100", 64, 2**22, seq_len=seq_len) if c.fits)
        assert f"{seq_len:,}" in row and best.label in row and f"{best.expected_step_s * 1e3:,.0f}" in row
    # a value the batch does not divide says why in its row, not as a traceback
    assert "is not a whole number of sequences of 1,000,000" in rows[2]


@pytest.mark.parametrize(
    ("sweep", "message"),
    [
        ("seq=", "error: --sweep: seq= needs one or more values separated by commas, got 'seq='"),
        ("len=1,2", "error: --sweep: write batch=V1,V2,... or seq=V1,V2,... (e.g. seq=2048,4096), got 'len=1,2'"),
        ("seq=a,b", "error: --sweep seq: must be a whole number (digits, or with K, M, G = 2**10, 2**20, 2**30), got 'a'"),
        ("batch=1M,,2M", "error: --sweep: batch= needs one or more values separated by commas, got 'batch=1M,,2M'"),
    ],
)  # fmt: skip
def test_a_bad_sweep_is_one_line(sweep, message):
    result = _cli("LLaMA-3 8B", "H100", "64", "4M", "--sweep", sweep)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", message + "\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # the flag was dropped without a word: the sweep varies what it gives
        (("4M", "--sweep", "seq=4096", "--seq-len", "2048"), "error: --sweep seq=...: varies the sequence length; drop --seq-len"),
        (("--batch-seqs", "256", "--sweep", "batch=1M,2M"), "error: --sweep batch=...: varies the batch; drop --batch-seqs"),
    ],
)  # fmt: skip
def test_a_sweep_refuses_a_flag_that_gives_what_it_varies(args, message):
    result = _cli("LLaMA-3 8B", "H100", "8", *args)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", message + "\n")


def test_a_sweep_whose_every_value_is_refused_exits_2():
    # each row said why (below one sequence of 4,096 tokens), and the command exited 0 as if it had answered
    result = _cli("LLaMA-3 8B", "H100", "8", "1M", "--sweep", "batch=1,2")
    assert result.returncode == 2 and result.stdout.count("is below one sequence of 4,096 tokens") == 2, result.stdout
    assert result.stderr == "error: --sweep: every value was refused (the table says why); give values that can run\n"


def test_tp_across_scale_up_domains_is_flagged_on_gpus_and_no_published_gpu_run_does_it():
    # what the note claims: every published GPU run keeps its TP groups inside one scale-up domain
    for run in measured.VALIDATION_RUNS + measured.HELD_OUT_RUNS:
        if run.mesh.get("tp", 1) > 1 and hardware.get(run.accelerator).family == "gpu":
            assert validation.expected_for_run(run).placement["tp"].n_domains == 1, run.name
    inside = explorer.evaluate("LLaMA-3 405B", "H100", {"fsdp": 2048, "tp": 8}, 2**24, seq_len=8192)
    across = explorer.evaluate("LLaMA-3 405B", "H100", {"fsdp": 1024, "tp": 16}, 2**24, seq_len=8192)
    note = cli.cross_domain_tp_note([inside, across], "H100")
    assert note.startswith("TP across scale-up domains: fsdp 1024 × tp 16 (TP over 2 domains);")
    assert "fsdp 2048 × tp 8" not in note
    assert cli.cross_domain_tp_note([inside], "H100") == ""
    tpu = explorer.evaluate("LLaMA-3 70B", "TPU v5p", {"fsdp": 64, "tp": 8}, 2**22)
    assert cli.cross_domain_tp_note([tpu], "TPU v5p") == ""  # a torus has no NVLink domain to leave


@pytest.mark.parametrize(
    ("model", "accelerator", "mesh", "tokens", "seq_len"),
    [
        ("LLaMA-3 70B", "H100", {"fsdp": 64, "tp": 4}, 2**22, 8192),
        ("LLaMA-3 70B", "TPU v5e", {"fsdp": 64, "tp": 4}, 2**22, 8192),
        ("Mixtral 8x7B", "H100", {"fsdp": 16, "ep": 8}, 2**21, 4096),
    ],
)
def test_the_search_takes_the_fastest_recompute_and_microbatch_that_fit(model, accelerator, mesh, tokens, seq_len):
    """Not the first policy that fits: every (microbatch, policy) pair that fits is priced, and the row
    the search shows is the fastest of them (none, selective and full are nested, so at one microbatch
    the first that fits is also the fastest; across microbatches the search compares them)."""
    from shardbook.planner import memory_plan, search

    row = search.best_for_mesh(model, accelerator, mesh, tokens, n_devices=math.prod(mesh.values()), seq_len=seq_len)
    fitting = []
    for micro in search.MICRO_BATCH_CHOICES:
        for policy in memory_plan.SEARCH_POLICIES:
            try:
                cand = explorer.evaluate(model, accelerator, mesh, tokens, seq_len=seq_len, micro_batch_seqs=micro,
                                         recompute=policy)  # fmt: skip
            except ValueError:
                continue
            if cand.fits:
                fitting.append(cand)
    assert fitting and row.fits
    fastest = min(fitting, key=lambda c: c.expected_step_s)
    assert row.expected_step_s == pytest.approx(fastest.expected_step_s, rel=1e-12)


def test_the_planner_page_takes_the_command_lines_options_and_gives_its_notes():
    from shardbook.planner import page

    form = {"model": "LLaMA-3 70B", "accelerator": "H100", "n_devices": "256", "batch": "4M", "seq_len": "8192",
            "stack": "megatron", "reserve": "8GB", "precision": "fp8", "schedule": "interleaved", "n_virtual": "2"}  # fmt: skip
    result = page.plan(form)
    assert result["ok"], result
    options = dict(seq_len=8192, stack="megatron", reserve_bytes=8e9, precision="fp8", schedule="interleaved",
                   n_virtual=2)  # fmt: skip
    found = explorer.explore("LLaMA-3 70B", "H100", 256, 2**22, **options)  # over the default axes, as the page
    for row, cand in zip(result["top"], found, strict=False):
        assert row["label"] == cand.label and row["expected_step_s"] == pytest.approx(cand.expected_step_s)
        assert row["band_s"] == pytest.approx(list(cand.expected_step_range_s))
        assert row["reserve_bytes"] == 8e9 and row["fits_text"] == cli.fits_text(cand)
    assert result["notes"][0] == cli.band_line(found, how="the stack field names yours")
    assert result["reserve"].endswith("8.0 GB a device, counted in the memory column")
    # a bad choice is one sentence naming the field
    for key, value, message in (("stack", "torch", "stack: one of any, megatron"), ("reserve", "90GB", "reserve: must lie in"),
                                ("precision", "fp4", "precision: one of bf16, fp8"), ("n_virtual", "0", "n_virtual: must be")):  # fmt: skip
        bad = page.plan(dict(form, **{key: value}))
        assert not bad["ok"] and bad["error"].startswith(message), bad
