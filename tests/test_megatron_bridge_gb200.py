"""GB200 NVL72 held to Megatron Bridge's published runs: the DGX-GB200 rows
of its performance summary as printed, which of them the planner prices and
why the others are left out, and GB200's η fitted on its calibration run."""

import dataclasses

import pytest

from shardbook import measured, training, validation
from shardbook.planner import calibrate

GB200 = "GB200 NVL72"

# megatron-bridge-perf-summary (docs/performance-summary.md at 17a381f9, "26.04.01 NeMo Container"):
# the DGX-GB200 pre-training rows of LLAMA3_70B and LLAMA3.1_405B as printed, by model and
# precision: GPUs, GBS, MBS, sequence length, FSDP, TP, PP, CP, VP (None: n/a), tokens/s/GPU,
# model TFLOP/s/GPU. (A later commit, 21d102f5, printed other figures for the same container:
# the book cites 17a381f9, as for its H100 rows.)
GB200_ROWS = {
    ("LLaMA-3 70B", "FP8"): (64, 256, 2, 8192, 64, 1, 1, 1, None, 4352, 1970),
    ("LLaMA-3 70B", "MXFP8"): (64, 256, 1, 8192, 0, 2, 4, 1, 5, 3840, 1699),
    ("LLaMA-3 405B", "FP8"): (256, 1536, 1, 8192, 0, 4, 16, 1, 4, 832, 2065),
    ("LLaMA-3 405B", "MXFP8"): (256, 1536, 1, 8192, 0, 4, 16, 1, 8, 800, 2004),
}
# The recipe that ran each row (scripts/performance/configs/llama/llama3_workload_base_configs.py
# and llama31_workload_base_configs.py at 17a381f9): the V2 configs, the only GB200 ones at the
# row's GBS and GPUs (70B V1: GBS 128; 405B V1: 128 GPUs, GBS 64). The FP8 70B one runs
# Megatron-FSDP with cpu_offloading_num_layers=40.
RECIPES = {
    ("LLaMA-3 70B", "FP8"): "GB200 FP8_CS V2",
    ("LLaMA-3 70B", "MXFP8"): "GB200 FP8_MX V2",
    ("LLaMA-3 405B", "FP8"): "GB200 FP8_CS V2",
    ("LLaMA-3 405B", "MXFP8"): "GB200 FP8_MX V2",
}


def _printed(run):
    return run.name.rsplit(", ", 1)[1]


def test_gb200_rows_as_published():
    runs = measured.MEGATRON_BRIDGE_GB200_RUNS + measured.MEGATRON_BRIDGE_GB200_HELD_OUT_RUNS
    # every row but the FSDP one with activations offloaded to the host, which the planner cannot price
    assert {(r.model, _printed(r)) for r in runs} == set(GB200_ROWS) - {("LLaMA-3 70B", "FP8")}
    for run in runs:
        key = (run.model, _printed(run))
        n, gbs, mbs, seq, fsdp, tp, pp, cp, vp, tokens, tflops = GB200_ROWS[key]
        assert run.source == "megatron-bridge-perf-summary" and run.accelerator == GB200
        assert fsdp == 0 and run.mesh.get("fsdp", 1) == 1 and run.zero == 1 and run.state_recipe == "bf16_master"
        assert run.n_devices == n and run.mesh["dp"] == n // (tp * pp * cp)
        assert (run.mesh["tp"], run.mesh["pp"], run.mesh.get("cp", 1), run.n_virtual) == (tp, pp, cp, vp)
        assert (run.sequences_per_step, run.micro_batch_seqs, run.seq_len) == (gbs, mbs, seq)
        # MXFP8 and FP8 with current scaling both multiply E4M3 operands at the FP8 peak: priced as FP8
        assert run.precision == "fp8" and key[1] in run.note
        assert run.schedule == "interleaved" and run.recompute == "none" and run.tp_comm_overlap
        assert run.uneven_pipeline == (training.models.get(run.model).n_layers % (pp * vp) != 0)
        assert run.tokens_per_s_per_device == tokens and run.tflops_per_s_per_device == tflops
        assert run.step_s == pytest.approx(gbs * seq / (n * tokens), rel=1e-12)
        assert run.where.endswith(RECIPES[key]) and "DGX-GB200" in run.where
        # the row's two rates describe one step (the planner's FLOP count, causal scores, within 4 %)
        per_token = training.model_flops_per_token(run.model, seq, causal=True)
        assert tokens * per_token / 1e12 == pytest.approx(tflops, rel=0.04)


def test_gb200_rows_follow_the_h100_rows_in_the_split():
    bridge = [r for r in measured.VALIDATION_RUNS if r.source == "megatron-bridge-perf-summary"]
    assert bridge[: len(measured.MEGATRON_BRIDGE_H100_RUNS)] == list(measured.MEGATRON_BRIDGE_H100_RUNS)
    n_h100 = len(measured.MEGATRON_BRIDGE_H100_RUNS)
    assert bridge[n_h100 : n_h100 + len(measured.MEGATRON_BRIDGE_GB200_RUNS)] == list(
        measured.MEGATRON_BRIDGE_GB200_RUNS
    )
    roles = validation.split()
    # the H100 rows keep their roles (the 70B one fits the FP8 speedup, the 405B one validates it);
    # GB300's and B200's rows follow (tests/test_megatron_bridge_gb300_b200.py)
    assert [roles[r.name] for r in bridge[: n_h100 + 1]] == ["calibration", "validation", "calibration"]
    assert validation.efficiency_runs(GB200) == list(measured.MEGATRON_BRIDGE_GB200_RUNS)
    # GB200 has no BF16 run, so its FP8 run fits its η and leaves the FP8 speedup to H100's runs
    assert GB200 not in {r.accelerator for r in validation.fp8_speedup_runs()}


def test_gb200_eta_holds_its_fit():
    figure = calibrate.MATMUL_EFFICIENCY[GB200]
    assert figure.source == "fit" and not figure.provisional
    assert figure.value == pytest.approx(validation.fit_matmul_efficiency(GB200), abs=0.01)
    # an accelerator without a calibration run has nothing to fit on
    with pytest.raises(ValueError, match="no calibration runs on 'Ironwood'"):
        validation.fit_matmul_efficiency("Ironwood")


def test_the_405b_rows_fit_with_fp8_activations_and_are_held_out_of_the_fit():
    # with the matmuls' inputs counted in one byte, as Transformer Engine keeps them
    # (memory.TE_FP8_SAVED_BYTES), and BF16 gradients (grad_reduce_in_fp32 False in
    # llama31_llm_pretrain.py at 17a381f9), both 405B rows fit; counted in BF16 they would not
    held = measured.MEGATRON_BRIDGE_GB200_HELD_OUT_RUNS
    assert {(r.model, _printed(r)) for r in held} == {("LLaMA-3 405B", "FP8"), ("LLaMA-3 405B", "MXFP8")}
    for run in held:
        assert run in measured.HELD_OUT_RUNS and run not in measured.VALIDATION_RUNS
        assert validation.expected_for_run(run).fits, run.name
        assert not validation.expected_for_run(dataclasses.replace(run, precision="bf16")).fits, run.name
    for run in measured.MEGATRON_BRIDGE_GB200_RUNS:
        assert validation.expected_for_run(run).fits, run.name
    # GB200's η is fitted without them: on the 70B row alone
    assert [r.name for r in validation.efficiency_runs(GB200)] == [r.name for r in measured.MEGATRON_BRIDGE_GB200_RUNS]


def test_accelerators_fitted_on_one_run_carry_the_caveat():
    fitted = validation.fitted_efficiencies()
    assert set(calibrate.ONE_RUN_FITS) == {acc for acc in fitted if len(validation.efficiency_runs(acc)) == 1}
    for acc in calibrate.ONE_RUN_FITS:
        value = calibrate.MATMUL_EFFICIENCY[acc].value
        assert calibrate.single_run_caveat(acc).startswith(
            f"{acc}'s matmul efficiency ({value:.2f}) is fitted on one run"
        )
    # GB200's η is no longer a sustained fraction taken from a source; Ironwood's is still assumed
    assert "not fitted on any published run" not in calibrate.single_run_caveat(GB200)
    assert "not fitted on any published run" in calibrate.single_run_caveat("Ironwood")
