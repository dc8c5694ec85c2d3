"""Calibration: the per-accelerator and per-fabric efficiencies the expected
step time applies, kept as data, each with its source or its stated fit.

The optimistic bound (`Candidate.step_s`, `Candidate.mfu`) uses none of
these: peak FLOP/s, line-rate links, no latency. The expected step time
(`Candidate.expected_step_s`) divides the math by a sustained matmul
efficiency, prices every collective at an achieved bandwidth with a
per-message latency, and leaves a fraction of each overlappable collective
exposed. Every figure here belongs to an accelerator, a fabric or a kind of
collective, never to a published run.

Each entry is a :class:`Figure`: its value, its source, a note saying
what it is or on which calibration set it was fitted, and ``provisional``
where the value is not established. The source is one of three kinds: a
references.bib key (a datasheet, benchmark or paper); ``"fit"``, fitted by
`shardbook.validation` on the calibration set the note names (the tests
hold each to its fit); or ``"assumed"``, a value nobody measured or fitted
(no calibration run can determine it, or none exists for that
accelerator), always provisional, its note beginning "not fitted:
assumed". `assumed()` lists them; the validation appendix prints them.
The parts of FSDP's, the gradient reduction's and the pipeline's traffic
that stay exposed are not figures here: `planner.timing` derives them
from the layout (fsdp_exposed_s, dp_exposed_s, pp_exposed_fraction).

The tables are keyed by preset name. An accelerator read from a file
(shardbook.accelerator_file) is calibrated by its file's [calibration] table,
which the Accelerator object carries (``Accelerator.calibration``, a
FileCalibration; ``with_calibration``): each lookup takes the file's
figure, else the figure of the preset it is ``based_on``, else the default
(or none); ``provenance`` says which, for the planner's header line.
"""

import dataclasses
import math
from dataclasses import dataclass

from .. import _validate, hardware


@dataclass(frozen=True)
class Figure:
    """One calibration figure: `value` (a fraction, a ratio, a count, bytes,
    bytes/s, seconds for a latency, or a boolean), `source` (a references.bib key, "fit" with the calibration
    set named in `note`, or "assumed"), and whether it is `provisional`."""

    value: float
    source: str
    note: str
    provisional: bool = False


SOURCE_KINDS = ("fit", "assumed")  # the two sources that are not references.bib keys
ASSUMED_NOTE = "not fitted: assumed"  # how an assumed figure's note begins


# --- sustained math -------------------------------------------------------------
# The fraction of the dense BF16 peak a well-tuned training step sustains over its
# math (matmuls, attention kernels); the elementwise work between them is priced
# apart, at the HBM bandwidth (ELEMENTWISE_PASSES, timing.math_s).
# Fitted (validation.fit_matmul_efficiency, the rule in shardbook.validation) where published
# runs exist: A100, H100, H800, B200, GB200 NVL72, GB300 NVL72, TPU v5p, v5e, v6e; assumed
# otherwise (Ironwood, MI300X, MI355X; H200 and the Grand Teton H100 take H100's fit).
# tests/test_validation.py holds each fitted value to its fit within 0.01.
MATMUL_EFFICIENCY = {
    "H100": Figure(
        0.53,
        "fit",
        "fitted on the H100 calibration runs (Llama 3 8K; Megatron-Core 1.7B, 16B, 70B, 177B, 462B); "
        "measured.SUSTAINED prints 0.73 for H100, a sustained share of peak it does not define further",
    ),
    "H800": Figure(
        0.33,
        "fit",
        "validation.fit_matmul_efficiency on DeepSeek-V3 (the only H800 run: FP8 matmuls with 1x128 and 128x128 "
        "scaling tiles, over the BF16 peak, at the FP8 speedup H100's FP8 run fits)",
    ),
    "B200": Figure(
        0.45,
        "fit",
        "validation.fit_matmul_efficiency on the B200 calibration run (Megatron Bridge Llama 3 8B, 8 GPUs, the 25.11 "
        "container's row in its archive: MXFP8 matmuls priced as FP8, over the BF16 peak, at the FP8 speedup H100's "
        "FP8 run fits); measured.SUSTAINED prints 0.69",
    ),
    "GB200 NVL72": Figure(
        0.44,
        "fit",
        "validation.fit_matmul_efficiency on the GB200 NVL72 calibration run (Megatron Bridge Llama 3 70B, 64 GPUs: "
        "MXFP8 matmuls priced as FP8, over the BF16 peak, at the FP8 speedup H100's FP8 run fits); "
        "measured.SUSTAINED's 0.70 is printed approximate (≈)",
    ),
    "GB300 NVL72": Figure(
        0.55,
        "fit",
        "validation.fit_matmul_efficiency on the GB300 NVL72 calibration run (Megatron Bridge Llama 3 70B, 64 GPUs: "
        "MXFP8 matmuls priced as FP8, over the BF16 peak, at the FP8 speedup H100's FP8 run fits); "
        "measured.SUSTAINED's 0.70 is printed approximate (≈)",
    ),
    "TPU v5p": Figure(
        0.72,
        "fit",
        "validation.fit_matmul_efficiency on the v5p calibration runs (MaxText's v5p table: 32B v5p-128, "
        "128B v5p-256, 256B v5p-1024, 1024B v5p-2048)",
    ),
    "TPU v5e": Figure(
        0.76,
        "fit",
        "validation.fit_matmul_efficiency on the v5e calibration runs (MaxText's v5e table: 16B and 64B on v5e-256); "
        "measured.SUSTAINED's 0.67 is printed approximate (≈)",
    ),
    "TPU v6e": Figure(
        0.65,
        "fit",
        "validation.fit_matmul_efficiency on the v6e calibration runs (MaxText Llama 2 70B, Llama 3.1 70B, Mixtral 8x22B)",
    ),
    "Ironwood": Figure(0.70, "assumed", "not fitted: assumed; no Ironwood run in the calibration set", True),
    "A100": Figure(
        0.69,
        "fit",
        "validation.fit_matmul_efficiency on the A100 calibration runs (SC21 GPT 1.7B, 7.5B, 39.1B, 145.6B, "
        "529.6B; Korthikanti et al.'s full-recomputation runs of 22B, 175B, 530B, 1T), with their eager "
        "attention's HBM traffic counted (timing.eager_scores_hbm_s)",
    ),
    "MI300X": Figure(0.60, "assumed", "not fitted: assumed; no MI300X run in the calibration set", True),
    "MI355X": Figure(0.60, "assumed", "not fitted: assumed; no MI355X run in the calibration set", True),
}
# H200: no run; assumed to sustain what H100's fit gives (the same GH100 die and clocks)
MATMUL_EFFICIENCY["H200"] = Figure(
    MATMUL_EFFICIENCY["H100"].value,
    "assumed",
    "not fitted: assumed equal to H100's fit (same GH100 die); no H200 run",
    True,
)
# The H100 of Meta's Grand Teton hosts (hardware.RUN_HARDWARE: 96 GB HBM2e, 500 W): no calibration
# run; assumed to sustain what H100's fit gives of the same peak (the same GH100 die). Its power
# limit lowers the clocks by an amount no source gives, which its runs (torchtitan's) carry.
MATMUL_EFFICIENCY["H100 Grand Teton"] = Figure(
    MATMUL_EFFICIENCY["H100"].value,
    "assumed",
    "not fitted: assumed equal to H100's fit (same GH100 die; its 500 W power limit not priced); no calibration run",
    True,
)


# The accelerators whose η is fitted on a single calibration run, and that run, as the caveat
# names it (tests/test_validation.py holds the keys to validation.efficiency_runs).
ONE_RUN_FITS = {
    "H800": "DeepSeek-V3 (FP8 matmuls, 256 fine-grained experts)",
    "GB200 NVL72": "Megatron Bridge's Llama 3 70B on 64 GPUs (MXFP8 matmuls, at H100's fitted FP8 speedup)",
    "GB300 NVL72": "Megatron Bridge's Llama 3 70B on 64 GPUs (MXFP8 matmuls, at H100's fitted FP8 speedup)",
    "B200": "Megatron Bridge's Llama 3 8B on 8 GPUs (MXFP8 matmuls, at H100's fitted FP8 speedup)",
}


def single_run_caveat(accelerator):
    """'' or one line for an accelerator priced with an η that no published
    run supports as well as most plans' (the planner prints it under the
    header): one fitted on a single run (ONE_RUN_FITS), which carries what
    that run spends beyond the planner's terms (H800's, on DeepSeek-V3,
    its fine-grained MoE and FP8 costs); or an η no run was fitted on at
    all (assumed, or a sustained fraction taken from a source), for a
    preset or a file that takes it by based_on or by default."""
    figure, origin = _resolve("matmul_efficiency", accelerator)
    for name, run in ONE_RUN_FITS.items():
        if figure is MATMUL_EFFICIENCY[name]:
            fitted = (
                f"{name}'s matmul efficiency ({figure.value:.2f}) is fitted on one run, {run}, and carries what "
                "that run spends beyond the planner's terms; "
            )
            if name == "H800":
                return fitted + (
                    f"the same GH100 die sustains {MATMUL_EFFICIENCY['H100'].value:.2f} in H100's dense BF16 runs, "
                    "so a dense plan here is likely priced slow"
                )
            return fitted + (
                "runs held out from the fit check it (the validation appendix): time a few steps before "
                "trusting the ranking, the bound holds either way"
            )
    if figure is None or figure.source == "fit" or origin == "file":  # a reader's own figure is theirs to trust
        return ""
    name = hardware.get(accelerator).name
    how = "assumed" if figure.source == "assumed" else f"a sustained fraction a source prints ({figure.source})"
    return (
        f"{name}'s matmul efficiency ({figure.value:.2f}) is {how}, not fitted on any published run: its expected "
        "step times and their band rest on it (the validation appendix shows how far an unfitted accelerator "
        "can miss); time a few steps before trusting the ranking, the bound holds either way"
    )


# Accelerators built on the same die as another preset (hardware._hopper builds all three from
# GH100, at the same clocks; the Grand Teton H100 of hardware.RUN_HARDWARE too, its 500 W power
# limit unpriced): without runs of their own they take that preset's fitted η.
SAME_DIE = {"H800": "H100", "H200": "H100", "H100 Grand Teton": "H100"}


def eta_rests_on_one_run_or_none(accelerator):
    """Whether `accelerator`'s η is fitted on one run or on none
    (single_run_caveat has a line for it), other than a same-die preset's
    fit taken as it is (SAME_DIE: H200 and the Grand Teton H100 take
    H100's): the plans whose band step_band stretches over 'prior', and the
    runs that band is fitted on (transfer.on_a_thinly_fitted_accelerator)."""
    if not single_run_caveat(accelerator):
        return False
    twin = SAME_DIE.get(preset_name(accelerator))
    takes_twins = twin is not None and matmul_efficiency(accelerator) == matmul_efficiency(twin)
    return not (takes_twins and not single_run_caveat(twin))


DEFAULT_MATMUL_EFFICIENCY = Figure(0.65, "assumed", "not fitted: assumed; any accelerator without its own entry", True)

# --- the shape of a matmul ---------------------------------------------------------------
# η belongs to an accelerator; each matmul the planner prices runs at η times
# matmul_efficiency.shape_factor for its shape (timing.matmul_shape_factor): the smoothed
# roofline of the accelerator's family of kernels (the key: grouped_gemm_kernels), its ridge
# this figure times the accelerator's own spec ridge (BF16 peak over HBM_BYTES_PER_S), its
# sharpness the curve's (matmul_efficiency.CURVES). tests/test_matmul_efficiency.py holds the
# fitted ones to their curves.
MATMUL_SHAPE_CURVE = {
    "tpu": Figure(
        1.015,
        "shardbook-tpu-v5e-measured",
        "ridge / spec ridge of matmul_efficiency.CURVES['tpu'], fitted by matmul_efficiency.fit on one TPU v5e "
        "chip's BF16 matmuls (make measure: 55 shapes timed clear of the dispatch floor); sharpness 4.6",
    ),
    "nvidia": Figure(
        0.904,
        "deepgemm",
        "ridge / spec ridge of matmul_efficiency.CURVES['nvidia'], fitted by matmul_efficiency.fit on DeepGEMM's "
        "dense FP8 GEMMs on H800 (18 shapes; no NVIDIA GPU was lent to measure); sharpness 1.6",
    ),
    "amd": Figure(
        0.904,
        "assumed",
        "not fitted: assumed; NVIDIA's curve (DeepGEMM on H800) at each Instinct part's own spec ridge: no dense "
        "GEMM table by shape was found for MI300X or MI355X",
        True,
    ),
}
MATMUL_SHAPE_CURVE_OF = {"tpu": "tpu", "nvidia": "nvidia", "amd": "nvidia"}  # kernels -> matmul_efficiency.CURVES


def matmul_shape_curve(accelerator):
    """(key of matmul_efficiency.CURVES, ridge / spec ridge) that prices the
    shape of `accelerator`'s matmuls (MATMUL_SHAPE_CURVE)."""
    kernels = grouped_gemm_kernels(accelerator)
    return MATMUL_SHAPE_CURVE_OF[kernels], MATMUL_SHAPE_CURVE[kernels].value


# --- achieved bandwidth -----------------------------------------------------------
# Achieved / line rate on the scale-up fabric (what a large collective reaches).
SCALE_UP_EFFICIENCY = {
    "H100": Figure(0.82, "parallelize-transformer", "achieved 0.82 of NVLink egress (measured.ACHIEVED_SCALE_UP)"),
    "H200": Figure(0.82, "parallelize-transformer", "as H100 (same NVLink 4 switch)", provisional=True),
    "H100 Grand Teton": Figure(0.82, "parallelize-transformer", "as H100 (NVLink 4 within a host)", provisional=True),
    "H800": Figure(0.80, "deepseek2024v3", "160 of 200 GB/s NVLink DeepSeek reports"),
    "B200": Figure(0.82, "parallelize-transformer", "printed approximate (≈)"),
    "GB200 NVL72": Figure(0.82, "parallelize-transformer", "printed approximate (≈)"),
    "GB300 NVL72": Figure(0.82, "parallelize-transformer", "printed approximate (≈)"),
    "MI300X": Figure(0.75, "amd-rccl-xgmi-blog", "48 of 64 GB/s usable per xGMI link"),
    "MI355X": Figure(0.75, "amd-rccl-xgmi-blog", "as MI300X's xGMI until measured", provisional=True),
    # the seed prints ≈0.95 of the Scaling Book's ICI link rate (180 and 90 GB/s), which is 0.9 of
    # Google's (200 and 100 GB/s) that the presets carry: 171 and 85.5 GB/s achieved, 0.855 of the
    # presets' (measured.SustainedFactors)
    "TPU v5p": Figure(0.855, "parallelize-transformer", "ICI: ≈0.95 of 180 GB/s printed, 171 of Google's 200 GB/s"),
    "TPU v5e": Figure(0.855, "parallelize-transformer", "ICI: ≈0.95 of 90 GB/s printed, 85.5 of Google's 100 GB/s"),
    "TPU v6e": Figure(0.855, "parallelize-transformer", "as v5p/v5e ICI", provisional=True),
    "Ironwood": Figure(0.855, "parallelize-transformer", "as v5p ICI", provisional=True),
}
DEFAULT_SCALE_UP_EFFICIENCY = Figure(
    0.80,
    "assumed",
    "not fitted: assumed; any accelerator without its own entry (A100's NVLink 3 among them: its calibration "
    "runs cannot separate it from A100's η, the fit's error being flat from 0.7 to 1.0)",
    True,
)

# Achieved / line rate across domains (NIC or DCN), one direction.
SCALE_OUT_EFFICIENCY = {
    "gpu": Figure(0.90, "nccl-tests-performance", "inter-node bus bandwidth about 90 % of the NIC rate", True),
    "tpu": Figure(0.80, "assumed", "not fitted: assumed; DCN (no multislice run in the calibration set)", True),
}

# --- latency per message ------------------------------------------------------------
# Seconds per step of a ring (or per peer message of an all-to-all): a collective
# over n members pays (n-1) of them per phase (all-reduce: two phases; NVLink
# SHARP: two). Small-message NCCL/RCCL latencies and the TPU's per-hop ICI latency.
SCALE_UP_LATENCY_S = {
    "switch": Figure(1.0e-6, "nccl-tests-performance", "NVLink ring step, small-message NCCL latency", True),
    "full_mesh": Figure(1.5e-6, "amd-rccl-xgmi-blog", "xGMI ring step, small-message RCCL latency", True),
    "torus": Figure(1.0e-6, "scaling-book-tpus", "about 1 µs per ICI hop", provisional=True),
}
SCALE_OUT_LATENCY_S = {
    "gpu": Figure(5.0e-6, "nccl-tests-performance", "inter-node ring step over InfiniBand/RoCE", True),
    "tpu": Figure(20.0e-6, "assumed", "not fitted: assumed; DCN message latency (no multislice run)", True),
}

# --- exposed communication -------------------------------------------------------------
# The fraction of an overlappable collective that stays on the critical path even
# when the math around it is longer. Collectives that cannot overlap (TP without
# collective matmul, EP without DualPipe) are exposed in full. FSDP's, the gradient
# reduction's and the pipeline's exposed parts are derived from the layout in
# planner.timing (the first layer's gather and the last layer's reduce-scatter; the
# last gradient bucket, Megatron-Core's default size; the sends of the fill and drain
# where the schedule overlaps them, all of them where it does not), not kept here.
EXPOSED_FRACTION = {
    "cp": Figure(
        0.10, "assumed", "not fitted: assumed; ring-attention K/V exchange (no calibration run uses cp)", True
    ),
    "tp": Figure(1.00, "korthikanti2022reducing", "sequence-parallel gathers/scatters between the matmuls"),
    "tp_overlapped": Figure(0.30, "wang2023overlap", "TP with collective matmul (ideal_overlap)", True),
    "ep": Figure(1.00, "deepseek2024v3", "dispatch and combine between the router and the experts"),
    # DeepSeek-V3 reports its DualPipe exchanges hidden almost in full (deepseek2024v3, §3.2.1) but
    # prints no residual share; the tenth left exposed is this book's assumption
    "ep_overlapped": Figure(
        0.10,
        "assumed",
        "not fitted: assumed; an all-to-all DualPipe overlaps with another microbatch's math (deepseek2024v3 "
        "reports the overhead near zero but prints no residual share)",
        True,
    ),
}

# In-switch reduction (NVLink SHARP, NCCL's NVLS algorithm, NCCL >= 2.17) on the
# NVSwitch generations that have it: third-generation NVSwitch (HGX H100/H200) and
# the NVLink 5 switch (B200, NVL72). An all-reduce inside the domain then moves
# (n+1)/n of each device's buffer each way, not a ring's 2(n-1)/n
# (collectives.in_switch_all_reduce_s; timing.collective_s takes the cheaper).
# Ref: nccl-nvls, nccl-tests-nvls-allreduce; NVIDIA/nccl#1031 and nccl-tests#196
# ("On H100 we have NVLink SHARP").
NVLS_PRESETS = ("H100", "H200", "B200", "GB200 NVL72", "GB300 NVL72")


# FP8: the dense FP8 peak over the dense BF16 peak on the datasheets (2x on every
# GPU preset with FP8 tensor cores and on Ironwood; the other TPUs have none),
# and the speedup the matmuls sustain when they run in FP8 (fitted; attention,
# norms and the first and last layers stay in BF16, as DeepSeek-V3 keeps them).
FP8_PEAK_RATIO = {
    "H100": Figure(2.0, "nvidia-h100-datasheet", "1,979 vs 989 TFLOP/s dense"),
    "H200": Figure(2.0, "nvidia-h200-datasheet", "as H100"),
    "H800": Figure(2.0, "nvidia-h100-datasheet", "same GH100 tensor cores as H100"),
    "H100 Grand Teton": Figure(2.0, "nvidia-h100-datasheet", "same GH100 tensor cores as H100"),
    "B200": Figure(2.0, "nvidia-dgx-b200", "dense FP8 twice dense BF16"),
    "GB200 NVL72": Figure(2.0, "nvidia-gb200-nvl72", "dense FP8 twice dense BF16"),
    "GB300 NVL72": Figure(2.0, "nvidia-gb300-nvl72", "dense FP8 twice dense BF16"),
    "MI300X": Figure(2.0, "amd-mi300x-datasheet", "dense FP8 twice dense BF16"),
    "MI355X": Figure(2.0, "amd-mi355x-datasheet", "dense FP8 twice dense BF16"),
    "Ironwood": Figure(2.0, "google-tpu7x", "FP8 peak twice the BF16 figure", provisional=True),
}
FP8_SUSTAINED_SPEEDUP = Figure(
    1.91,
    "fit",
    "validation.fit_fp8_speedup on the FP8 calibration run of an accelerator whose BF16 runs fix its η "
    "(Megatron Bridge Llama 3 70B, 64 H100); the gain of the matmuls alone, their inputs' casts priced apart "
    "(FP8_CAST_BYTES_PER_ELEMENT), so above the 1.2-1.5x a whole step gains (megatron-bridge-performance-guide) "
    "and below the 2x of the FP8 peak",
)


# What FP8's casts move: before each FP8 matmul the recipe quantizes the BF16 input it is handed
# (the forward's activations, the backward's output gradients), bytes of HBM traffic per element
# quantized (timing.fp8_cast_s), by accelerator. The matmul's FLOPs grow with its width and the
# casts do not, so narrow matmuls (a fine-grained MoE's experts) lose most of FP8's gain to them.
# Hopper: Transformer Engine's current scaling (Megatron Bridge's H100 FP8 recipes) computes the
# tensor's amax in a pass of its own (reads 2 bytes an element), then casts (reads 2 again) into a
# row-wise FP8 copy and, before compute capability 10.0, a separate column-wise (transposed) copy
# for the weight-gradient GEMM (writes 1 + 1): 6. torchao's tensorwise Float8 (torchtitan's) scales
# the same way and is taken alike. Blackwell: one FP8 buffer serves both usages, 5. Without an
# entry (no FP8 run to check it on) the casts are not priced.
_HOPPER_CAST = (
    "Hopper: an amax pass reads the BF16 input (2), the cast reads it (2) and writes row- and column-wise FP8 (1 + 1)"
)
_BLACKWELL_CAST = (
    "Blackwell: the amax pass and the cast read the BF16 input (2 + 2); one FP8 buffer for both usages (1)"
)
FP8_CAST_BYTES_PER_ELEMENT = {
    "H100": Figure(6.0, "transformer-engine", _HOPPER_CAST),
    "H200": Figure(6.0, "transformer-engine", _HOPPER_CAST),
    "H800": Figure(6.0, "transformer-engine", _HOPPER_CAST),
    "H100 Grand Teton": Figure(6.0, "transformer-engine", _HOPPER_CAST),
    "B200": Figure(5.0, "transformer-engine", _BLACKWELL_CAST),
    "GB200 NVL72": Figure(5.0, "transformer-engine", _BLACKWELL_CAST),
    "GB300 NVL72": Figure(5.0, "transformer-engine", _BLACKWELL_CAST),
}


def fp8_cast_bytes_per_element(accelerator):
    """FP8_CAST_BYTES_PER_ELEMENT of `accelerator` (a preset's entry), 0 without one."""
    entry = FP8_CAST_BYTES_PER_ELEMENT.get(preset_name(accelerator))
    return entry.value if entry else 0.0


# --- routed experts ---------------------------------------------------------------------
# A routed expert's matmuls run as one grouped GEMM over the device's experts, each group the
# rows routed to one expert. Few rows per group run far below the plateau a large matmul reaches
# (each group pays its partly empty last tile and its weights' loads), so the planner prices the
# routed experts' FLOPs at η × M / (M + M½), M the rows per expert per device per microbatch
# (moe.grouped_gemm_factor; timing.math_s). M½ is fitted per family of kernels by
# moe.fit_grouped_gemm_half_rows on the published tables in measured.GROUPED_GEMM_POINTS (each
# shape scaled by its own plateau; TPU's on the book's own measurement of one v5e chip,
# moe.measured_grouped_gemm_points); tests/test_moe.py holds each to its fit within 1 %.
GROUPED_GEMM_HALF_ROWS = {
    "nvidia": Figure(
        132.0,
        "fit",
        "moe.fit_grouped_gemm_half_rows on DeepGEMM's grouped FP8 kernels on H800 (deepgemm: DeepSeek-V3's "
        "two expert shapes, 256 to 8,192 rows per group)",
    ),
    "amd": Figure(
        269.0,
        "fit",
        "moe.fit_grouped_gemm_half_rows on Primus-Turbo's BF16 grouped GEMMs on MI300X (primus-turbo-grouped-gemm: "
        "DeepSeek-V2-Lite's and Qwen3-30B-A3B's expert shapes, 8 groups of 512 to 16,384 rows)",
    ),
    "tpu": Figure(
        187.0,
        "fit",
        "moe.fit_grouped_gemm_half_rows on jax.lax.ragged_dot on one TPU v5e chip (data/measured_tpu_v5e_moe.json, "
        "make measure --section moe: DeepSeek-V2-Lite's and Mixtral 8x7B's expert-up shapes, 8 groups of 64 to "
        "8,192 rows, calls under matmul_efficiency.FLOOR_MULTIPLE times the dispatch floor left out); ragged_dot is "
        "MaxText's megablox=False path: its default (megablox: true) runs the megablox Pallas GMM kernel, not "
        "measured here, and v5p, v6e and Ironwood take v5e's curve",
    ),
}

# The share of the expert all-to-alls a stack leaves on the critical path where its scheduler
# overlaps them with independent math (XLA's async collectives: the backward's exchanges behind
# the experts' weight gradients, the forward's behind the shared experts), by accelerator; without
# an entry the exchanges are exposed in full (EXPOSED_FRACTION["ep"]) unless DualPipe or
# ideal_overlap hides them. MI355X: the AMD seed profiled MaxText's sweep with rocprofv3, and at
# ep 8, where nearly all of the RCCL time is the expert exchanges (the dense weights' FSDP traffic
# over ep is a tenth of it in the planner's count), 79.3 % of it overlapped other work: 0.207
# exposed. A figure of the same source as the sweep the MI355X routed-expert efficiency is
# fitted on; the leave-one-source-out table prices the sweep without it (shardbook.transfer).
EP_EXPOSED_FRACTION = {
    "MI355X": Figure(
        0.207,
        "scale-your-model-amd",
        "1 − 0.793: RCCL time overlapped at fsdp 1 × ep 8 in the seed's rocprofv3 profile of MaxText on ROCm",
        True,
    ),
}


def preset_name(accelerator):
    """The preset whose per-accelerator figures `accelerator` takes: its
    own name, or for an accelerator file the preset it is ``based_on``."""
    acc = hardware.get(accelerator)
    own = acc.calibration
    return own.based_on if own is not None and own.based_on else acc.name


def ep_exposed_fraction(accelerator):
    """EP_EXPOSED_FRACTION of `accelerator` (a preset's entry), or None where its stack is taken to
    leave the expert exchanges exposed in full."""
    entry = EP_EXPOSED_FRACTION.get(preset_name(accelerator))
    return entry.value if entry else None


# The plateau a stack's grouped GEMMs reach, as a share of the accelerator's dense η, where it is
# not η itself: DeepGEMM's grouped kernels on H800 reach its dense kernels' TFLOP/s at 4,096 rows
# a group (deepgemm), so without an entry the share is 1. TPUs keep 1: XLA's ragged_dot levels
# off at 0.73 of a dense matmul of the same FLOPs on the book's v5e chip (moe.grouped_gemm_plateau_share on
# data/measured_tpu_v5e_moe.json), but MaxText runs its megablox kernel, which that does not time, and at
# that share MaxText's Mixtral runs on v6e go from +0.3 % and +9.5 % to +28 % and +37 % under
# leave-one-source-out, so ragged_dot's plateau is carried to no TPU. MI355X: fitted by
# validation.fit_routed_expert_efficiency on the two endpoints of the AMD seed's MaxText sweep
# (DeepSeek-V2-Lite on 8 MI355X, fsdp 8 and ep 8: measured.AMD_MI355X_RUNS), every other term at
# its value (MI355X's assumed η among them); one source, one model: it carries whatever MaxText on
# ROCm spent in those MoE layers beyond the planner's terms (the fsdp 8 run's exposed FSDP
# traffic among them), and applies to routed experts only, so a dense plan there keeps the
# assumed η. The leave-one-source-out table prices the sweep without it (shardbook.transfer).
# tests/test_moe.py holds it to its fit.
ROUTED_EXPERT_EFFICIENCY = {
    "MI355X": Figure(
        0.134,
        "fit",
        "validation.fit_routed_expert_efficiency on the AMD seed's sweep's two endpoints (fsdp 8, ep 8), with "
        "the grouped-GEMM curve, the sorts and the stack's exchange overlap priced apart",
    ),
}


def routed_expert_efficiency(accelerator):
    """The share of η the routed experts' grouped GEMMs reach at their
    plateau on `accelerator` (ROUTED_EXPERT_EFFICIENCY; 1 without an entry)."""
    entry = ROUTED_EXPERT_EFFICIENCY.get(preset_name(accelerator))
    return entry.value if entry else 1.0


def grouped_gemm_kernels(accelerator):
    """The family of grouped-GEMM kernels `accelerator` runs (a key of
    GROUPED_GEMM_HALF_ROWS): 'tpu' for a TPU, 'amd' for an Instinct part
    (a preset or a file based on one whose name begins with MI), else
    'nvidia'."""
    acc = hardware.get(accelerator)
    if acc.family == "tpu":
        return "tpu"
    return "amd" if preset_name(acc).startswith("MI") else "nvidia"


def grouped_gemm_half_rows(accelerator):
    """M½ of the grouped-GEMM curve for `accelerator`'s kernels (GROUPED_GEMM_HALF_ROWS)."""
    return GROUPED_GEMM_HALF_ROWS[grouped_gemm_kernels(accelerator)].value


# --- how far the expectation carries ---------------------------------------------------
# The software stack that runs a plan brings its own kernels, overlap and memory habits: the
# families of shardbook.transfer.STACK_FAMILIES, or "any" where the reader does not say.
STACKS = ("any", "megatron", "pytorch", "maxtext", "deepspeed", "deepseek")


def check_stack(stack):
    """`stack` if it is one of STACKS, else a ValueError naming the valid ones."""
    _validate.choice("stack", stack, STACKS)
    return stack


# --- the attention kernels ---------------------------------------------------------------
# The attention scores (QKᵀ and the product with V, training.attention_flops_per_token) run in a
# kernel of their own, which sustains less of the peak than the matmuls around it, and how much
# less depends on the kernel the stack calls. On Hopper the planner prices them at η times the
# kernel's speed (measured.ATTENTION_KERNEL_TFLOPS_H100, FlashAttention-3's paper) over the share
# of the dense BF16 peak a tuned job's math sustains there (measured.SUSTAINED, 0.73 for H100):
# the overheads η carries beyond the kernels carry over, the kernel's own speed is the paper's.
# Each stack's kernel on Hopper: Transformer Engine prefers cuDNN's fused attention there
# (nemo-flash-attention: Megatron-Core, NeMo, Megatron Bridge; MaxText on GPU calls it through
# Transformer Engine too); PyTorch's scaled_dot_product_attention tries FlashAttention-2 first
# and cuDNN's only when asked (pytorch-sdpa-cudnn-opt-in; torchtitan asks on B200 alone,
# torchtitan-sdpa-backends), and DeepSpeed's runs call the flash-attn package (FlashAttention-2).
# MosaicML's MPT tables ran the FlashAttention repository's experimental Triton kernel (llm-foundry-benchmark-sweeps),
# which no source times on H100: they take their family's FlashAttention-2, likely faster than what
# ran. DeepSeek-V3's own kernels are not published: taken as cuDNN's (assumed).
# Where no stack is named ("any") the planner takes FlashAttention-2, what both PyTorch and the
# flash-attn package run unless asked otherwise. Off Hopper (Ampere, Blackwell, Instinct, TPUs)
# no source times the kernels against the matmuls here: the scores run at η, as the rest.
ATTENTION_KERNEL_OF_STACK = {
    "any": "fa2",
    "megatron": "cudnn",
    "pytorch": "fa2",
    "maxtext": "cudnn",
    "deepspeed": "fa2",
    "deepseek": "cudnn",
}
ATTENTION_KERNEL_PRESETS = ("H100", "H200", "H800", "H100 Grand Teton")  # Hopper: the paper's GPU and its die


def attention_kernel(accelerator, stack):
    """The attention kernel `stack` runs on `accelerator` (a key of
    measured.ATTENTION_KERNEL_TFLOPS_H100), or None where the planner has
    no kernel timing for that accelerator and prices the scores at η."""
    check_stack(stack)
    if preset_name(accelerator) not in ATTENTION_KERNEL_PRESETS:
        return None
    return ATTENTION_KERNEL_OF_STACK[stack]


def attention_share(accelerator, stack, seq_len):
    """The share of η the attention scores sustain on `accelerator` under
    `stack` at `seq_len` tokens a sequence (a device's share under cp): the
    kernel's forward and backward together (measured.ATTENTION_KERNEL_TFLOPS_H100
    at the nearest printed length, by its logarithm; the shortest and longest
    beyond them) in the model's FLOP count (the backward twice the forward),
    over the share of H100's dense BF16 peak measured.SUSTAINED prints (the
    die of every preset in ATTENTION_KERNEL_PRESETS); 1 where
    attention_kernel is None."""
    from .. import measured

    _validate.positive("seq_len", seq_len)
    kernel = attention_kernel(accelerator, stack)
    if kernel is None:
        return 1.0
    lengths = measured.ATTENTION_KERNEL_SEQ_LENS
    clamped = min(max(float(seq_len), lengths[0]), lengths[-1])
    i = min(range(len(lengths)), key=lambda j: abs(math.log(lengths[j] / clamped)))
    forward, backward = (series[i] * 1e12 for series in measured.ATTENTION_KERNEL_TFLOPS_H100[kernel])
    # the model counts the backward as twice the forward; the kernel runs 2.5 forwards' worth in it
    seconds_per_forward_flop = 1 / forward + measured.ATTENTION_BACKWARD_FLOPS_OVER_FORWARD / backward
    sustained = 3 / seconds_per_forward_flop
    h100 = next(e for e in measured.SUSTAINED if e.accelerator == "H100")
    return sustained / (h100.compute * hardware.get("H100").bf16_dense_flops_per_s)


@dataclass(frozen=True)
class Band:
    """The errors (expected / measured step − 1) that bracket most runs the
    planner was not fitted on: `low_error` and `high_error`, the 10th and
    90th percentiles of `n_runs` leave-one-source-out errors
    (transfer.step_bands), with the `note` saying which runs."""

    low_error: float
    high_error: float
    n_runs: int
    note: str
    source: str = "fit"

    @property
    def measured_over_expected(self):
        """(least, most) of the measured step over the expected one (measured_over_expected)."""
        return measured_over_expected(self.low_error, self.high_error)


def measured_over_expected(low_error, high_error):
    """The band of errors (expected / measured step − 1) from `low_error` to
    `high_error` as the measured step over the expected one, (least, most):
    the high error's run ran fastest against its expectation."""
    for name, error in (("low_error", low_error), ("high_error", high_error)):
        if not error > -1:
            raise ValueError(f"{name}: an error expected / measured - 1 is above -1, got {error!r}")
    return 1 / (1 + high_error), 1 / (1 + low_error)


# Fitted by shardbook.transfer.step_bands on the leave-one-source-out table (every source's runs
# priced by a fit without that source; the runs held out from every fit priced by the book's own
# figures); tests/test_transfer.py holds each to it within 0.01. A dense plan takes its stack
# family's band where the family has five dense runs or more, else "any", both on the runs of
# accelerators fitted on several runs; a dense plan on an accelerator whose η rests on one run or
# none (eta_rests_on_one_run_or_none) takes that band stretched over "prior", the dense runs on such
# accelerators (transfer.on_a_thinly_fitted_accelerator: the Blackwell parts, each fitted on one
# Megatron Bridge row, so priced at a printed fraction scaled by H100's fit when that source is left
# out: transfer.unfitted_matmul_efficiency); an MoE plan
# takes "moe" (MoE runs of every stack: too few in any one).
STEP_BANDS = {
    "megatron": Band(
        -0.09, 0.05, 29, "the dense runs of Megatron-LM, Megatron-Core and Megatron Bridge on A100 and H100"
    ),
    "pytorch": Band(
        -0.14, 0.17, 53, "the dense runs of Meta's Llama 3 stack, MosaicML's llm-foundry (MPT) and torchtitan"
    ),
    "maxtext": Band(-0.12, 0.17, 17, "the dense runs of MaxText (v5e, v5p, v6e; tpu-recipes)"),
    "any": Band(-0.13, 0.16, 100, "every dense run on an accelerator fitted on several runs"),
    "prior": Band(
        -0.16,
        0.10,
        10,
        "the dense runs on GB200 NVL72, GB300 NVL72 and B200, each fitted on one row of Megatron Bridge's "
        "table and so priced at its printed fraction, scaled by what H100's fit is of its own, when that "
        "source is left out",
    ),
    "moe": Band(
        -0.68,
        0.12,
        10,
        "every MoE run (Mixtral on v6e, DeepSeek-V3 on H800 and v5p, DeepSeek-V2-Lite on MI355X, Qwen3 on H100)",
    ),
}


def step_band(stack, is_moe, eta_on_one_run_or_none=False):
    """(low error, high error) of the Band a plan of `stack` takes (see
    STEP_BANDS): 'moe' for an MoE plan; else its stack family's, or 'any';
    for a dense plan on an accelerator whose η rests on one run or none
    (`eta_on_one_run_or_none`: eta_rests_on_one_run_or_none), that
    band stretched to cover 'prior' too, the errors of the runs on such
    accelerators (the stack's uncertainty and the η's together)."""
    check_stack(stack)
    if is_moe:
        return STEP_BANDS["moe"].low_error, STEP_BANDS["moe"].high_error
    band = STEP_BANDS.get(stack, STEP_BANDS["any"])
    if not eta_on_one_run_or_none:
        return band.low_error, band.high_error
    prior = STEP_BANDS["prior"]
    return min(band.low_error, prior.low_error), max(band.high_error, prior.high_error)


# HBM bandwidth, one device (vendor spec). Each microbatch streams a device's
# weights from HBM at least three times (forward, and the backward's input and
# weight gradients), so a layout that leaves few tokens per device per
# microbatch is bound by HBM, not by FLOPs.
HBM_BYTES_PER_S = {
    "A100": Figure(2.039e12, "nvidia-a100-datasheet", "A100 80GB SXM: 2,039 GB/s"),
    "H100": Figure(3.35e12, "nvidia-h100-datasheet", "H100 SXM: 3.35 TB/s"),
    "H200": Figure(4.8e12, "nvidia-h200-datasheet", "4.8 TB/s"),
    "H800": Figure(3.35e12, "nvidia-h100-datasheet", "H800 SXM keeps H100 SXM's HBM3"),
    "H100 Grand Teton": Figure(2.4e12, "torchtitan-benchmarks", "96GB HBM2e with 2.4 TB/sec peak memory bandwidth"),
    "B200": Figure(8e12, "nvidia-dgx-b200", "64 TB/s over 8 GPUs"),
    "GB200 NVL72": Figure(8e12, "nvidia-gb200-nvl72", "576 TB/s over 72 GPUs"),
    "GB300 NVL72": Figure(8e12, "nvidia-gb300-nvl72", "576 TB/s over 72 GPUs"),
    "MI300X": Figure(5.3e12, "amd-mi300x-datasheet", "5.3 TB/s"),
    "MI355X": Figure(8e12, "amd-mi355x-datasheet", "8 TB/s"),
    "TPU v5p": Figure(2.765e12, "google-tpu-v5p", "2,765 GB/s"),
    "TPU v5e": Figure(8.19e11, "google-tpu-v5e", "819 GB/s"),
    "TPU v6e": Figure(1.64e12, "google-tpu-v6e", "1,640 GB/s"),
    "Ironwood": Figure(7.38e12, "google-tpu7x", "7,380 GB/s"),
}
# The work between the matmuls (norms, activation functions, residual adds,
# dropout, the softmax statistics, eager attention's s² scores) is bound by HBM
# bandwidth, not FLOPs. The least it moves is what a layer keeps for its backward
# (memory.activation_bytes_per_layer): written by the forward, read by the
# backward, written again where the policy reruns the forward. Kernels that are
# not fused into the matmuls move ELEMENTWISE_PASSES times that (timing.math_s).
# One figure for every accelerator, fitted on the whole calibration set
# (validation.fit_elementwise_passes). It makes narrow models (d_model of a few
# thousand) slower per FLOP than wide ones, as both Megatron tables show
# (narayanan2021megatron Table 1: 44 % of peak at 1.7B, 52 % at 1T;
# megatron-lm-readme: 41 % MFU at 1.7B, 47-48 % for the largest).
ELEMENTWISE_PASSES = Figure(
    2.98,
    "fit",
    "validation.fit_elementwise_passes on the whole calibration set (every accelerator's η refitted at each trial)",
)
HBM_EFFICIENCY = Figure(
    0.85,
    "assumed",
    "not fitted: assumed; achieved / spec HBM bandwidth. The calibration set cannot determine it: the "
    "elementwise work scales with ELEMENTWISE_PASSES / HBM_EFFICIENCY, so the fit of the passes absorbs it",
    True,
)
WEIGHT_PASSES = 3  # forward, backward input gradient, backward weight gradient


# HBM capacity as the device reports it (NVML's total, what a framework can allocate
# from before its own context), where it differs from the datasheet's round figure: the
# "80 GB" of an A100 or H100 is five 16 GiB stacks, reported as 81,920 MiB (A100) and
# 81,559 MiB (H100), 85.9 and 85.5 × 10⁹ bytes, not 80 × 10⁹. The planner's fit check
# and headroom use these; the presets keep the datasheet figure.
MIB = 2**20
HBM_CAPACITY_BYTES = {
    "A100": Figure(81_920 * MIB, "modal-gpu-memory", "A100 80GB: 81,920 MiB in nvidia-smi"),
    "H100": Figure(81_559 * MIB, "modal-gpu-memory", "H100 80GB: 81,559 MiB in nvidia-smi"),
    "H800": Figure(81_559 * MIB, "modal-gpu-memory", "as H100 SXM: the same five HBM3 stacks", provisional=True),
    "H200": Figure(143_771 * MIB, "modal-gpu-memory", "H200 141GB: 143,771 MiB in nvidia-smi"),
}


# HBM a plan leaves to the framework: the CUDA or ROCm context, communication buffers (NCCL,
# RCCL) and the allocator's fragmentation on a GPU; the runtime's own buffers on a TPU, whose
# compiler assigns every buffer ahead of time. No source gives one figure for them, so each is
# fitted as the largest reserve, in whole half-gigabytes, under which every published run that
# ran (measured.VALIDATION_RUNS and transfer.HELD_OUT_RUNS) still fits
# (validation.fit_memory_reserve_bytes; the tests hold each to it). The tightest GPU run is Llama
# 3 405B on 8,192 H100 (3.2 GB to spare in the planner's count), the tightest TPU run tpu-recipes'
# Llama 3.1 405B on v5p-1024 (0.9 GB).
MEMORY_RESERVE_BYTES = {
    "gpu": Figure(3.0e9, "fit", "validation.fit_memory_reserve_bytes over every published GPU run that ran"),
    "tpu": Figure(0.5e9, "fit", "validation.fit_memory_reserve_bytes over every published TPU run that ran"),
}
RESERVE_STEP_BYTES = 0.5e9  # the fit's granularity


def memory_reserve_bytes(accelerator):
    """The default HBM reserve of `accelerator`'s family, bytes (MEMORY_RESERVE_BYTES)."""
    return MEMORY_RESERVE_BYTES[hardware.get(accelerator).family].value


def checked_reserve_bytes(accelerator, reserve_bytes, name="reserve_bytes"):
    """`reserve_bytes` (None: the family's default) if it lies in [0, HBM), else a ValueError naming `name`."""
    if reserve_bytes is None:
        return memory_reserve_bytes(accelerator)
    hbm = hbm_capacity_bytes(accelerator)
    if isinstance(reserve_bytes, bool) or not isinstance(reserve_bytes, (int, float)) or not 0 <= reserve_bytes < hbm:
        raise ValueError(
            f"{name}: must lie in [0, {hbm / 1e9:,.1f} GB), the HBM one {hardware.get(accelerator).name} "
            f"reports, got {reserve_bytes / 1e9 if isinstance(reserve_bytes, (int, float)) else reserve_bytes!r}"
            + (" GB" if isinstance(reserve_bytes, (int, float)) and not isinstance(reserve_bytes, bool) else "")
        )
    return float(reserve_bytes)


def default_loss_logits(accelerator):
    """What the loss keeps of the logits on `accelerator`'s usual stack
    (memory.LOSS_LOGITS): 'fused_bf16' on a TPU (MaxText's loss, compiled
    by XLA: BF16 logits and gradient), 'fp32_copy' on a GPU (Megatron's
    FP32 softmax)."""
    return "fused_bf16" if hardware.get(accelerator).family == "tpu" else "fp32_copy"


def hbm_capacity_bytes(accelerator):
    """HBM bytes one device offers the framework: HBM_CAPACITY_BYTES where
    the reported capacity is known (or the accelerator file's calibration
    gives it), else the datasheet figure (`hbm_bytes`)."""
    entry, _ = _resolve("hbm_capacity_bytes", accelerator)
    return entry.value if entry else float(hardware.get(accelerator).hbm_bytes)


def hbm_bytes_per_s(accelerator):
    """Spec HBM bandwidth of one device (None where no figure is stored)."""
    entry, _ = _resolve("hbm_bytes_per_s", accelerator)
    return entry.value if entry else None


def fp8_peak_ratio(accelerator):
    """Dense FP8 peak / dense BF16 peak (1 where the accelerator has no FP8)."""
    entry, _ = _resolve("fp8_peak_ratio", accelerator)
    return entry.value if entry else 1.0


def fp8_sustained_speedup(accelerator):
    """The fitted speedup of the matmuls when they run in FP8 (1 without FP8)."""
    return FP8_SUSTAINED_SPEEDUP.value if fp8_peak_ratio(accelerator) > 1 else 1.0


def matmul_efficiency(accelerator):
    """The sustained fraction of the dense BF16 peak for `accelerator`."""
    return _resolve("matmul_efficiency", accelerator)[0].value


def scale_up_efficiency(accelerator):
    """Achieved / line rate of the scale-up links of `accelerator`."""
    return _resolve("scale_up_efficiency", accelerator)[0].value


def scale_out_efficiency(accelerator):
    """Achieved / line rate of the scale-out path (NIC or DCN) of `accelerator`."""
    return _resolve("scale_out_efficiency", accelerator)[0].value


def scale_up_latency_s(accelerator):
    """Seconds per ring step inside one scale-up domain of `accelerator`."""
    return _resolve("scale_up_latency_s", accelerator)[0].value


def scale_out_latency_s(accelerator):
    """Seconds per ring step across domains (NIC or DCN) of `accelerator`."""
    return _resolve("scale_out_latency_s", accelerator)[0].value


def exposed_fraction(what):
    """The exposed fraction of one kind of communication (a key of EXPOSED_FRACTION)."""
    _validate.choice("what", what, tuple(EXPOSED_FRACTION))
    return EXPOSED_FRACTION[what].value


def has_in_switch_reduction(accelerator):
    """Whether all-reduce inside a scale-up domain of `accelerator` can use
    NVLink SHARP (NCCL's NVLS): the presets in NVLS_PRESETS, or what an
    accelerator file's calibration says."""
    return bool(_resolve("in_switch_reduction", accelerator)[0].value)


# --- an accelerator read from a file ------------------------------------------------
# An accelerator file (shardbook.accelerator_file) may carry a [calibration] table:
# `based_on` (a preset whose per-accelerator figures it takes) and any of the
# figures below, each a value with its source. The figures keyed by preset name
# come from the file, else from `based_on`, else the default (or none); those keyed
# by family or fabric (scale-out efficiency, the latencies) come from the file, else
# from the accelerator's own family and fabric, as for a preset. The table travels
# with the Accelerator the file was read into (Accelerator.calibration), never by
# name: two files read under one name each price their own accelerator, and one
# without [calibration] has none. A preset's name cannot be calibrated.
FILE_FIGURES = {
    # key: (label, rule, keyed by: "preset", "family" or "fabric")
    "matmul_efficiency": ("matmul efficiency", "a fraction in [0.01, 1]", "preset"),
    "scale_up_efficiency": ("scale-up efficiency", "a fraction in [0.01, 1]", "preset"),
    "scale_out_efficiency": ("scale-out efficiency", "a fraction in [0.01, 1]", "family"),
    "hbm_bytes_per_s": ("HBM bandwidth", "a bandwidth > 0", "preset"),
    "hbm_capacity_bytes": ("HBM capacity", "a size > 0", "preset"),
    "fp8_peak_ratio": ("FP8 peak ratio", "a ratio from 1 (no FP8) to 100", "preset"),
    "in_switch_reduction": ("in-switch all-reduce", "true or false", "preset"),
    "scale_up_latency_s": ("scale-up latency", "seconds >= 0", "fabric"),
    "scale_out_latency_s": ("scale-out latency", "seconds >= 0", "family"),
}


@dataclass(frozen=True)
class FileCalibration:
    """The [calibration] table of an accelerator file: `based_on` (a preset
    name, or None) and `figures` ({key of FILE_FIGURES: Figure})."""

    based_on: str | None
    figures: dict

    def __hash__(self):  # the figures are a dict: hash their items (the Accelerator that carries it is hashed)
        return hash((self.based_on, tuple(sorted(self.figures.items()))))


MIN_EFFICIENCY = 0.01  # an accelerator file's efficiency; the lowest measured is several times higher


def _in_range(key, value):
    if key == "in_switch_reduction":
        return isinstance(value, bool)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    if key.endswith("_efficiency"):
        return MIN_EFFICIENCY <= value <= 1  # below it the step time runs to hundreds of digits
    if key == "fp8_peak_ratio":
        return 1 <= value <= 100
    if key.endswith("_latency_s"):
        return value >= 0
    return value > 0


def file_calibration(where, accelerator, based_on, figures):
    """A FileCalibration for `accelerator` (a hardware.Accelerator read from
    a file) from its [calibration] table: `based_on` (a preset name or None)
    and `figures` ({key: Figure}, values in SI base units). Every rule
    broken is a ValueError naming `where`, the key and the rule."""
    acc = hardware.get(accelerator)
    if acc.name in hardware.PRESETS:
        raise ValueError(
            f"{where}: calibration: the accelerator's name {acc.name!r} is a preset's, whose calibration is fixed; "
            f"name it otherwise (based_on = {acc.name!r} takes the preset's figures)"
        )
    if based_on is not None:
        if not isinstance(based_on, str) or based_on not in hardware.PRESETS:
            raise ValueError(
                f"{where}: calibration.based_on: must name a preset, got {based_on!r}; presets: "
                f"{', '.join(hardware.PRESETS)}"
            )
        if hardware.PRESETS[based_on].family != acc.family:
            raise ValueError(
                f"{where}: calibration.based_on: {based_on!r} is a {hardware.PRESETS[based_on].family}, "
                f"this accelerator a {acc.family}; base it on a preset of its family"
            )
    for key, figure in figures.items():
        if key not in FILE_FIGURES:
            raise ValueError(f"{where}: calibration: unknown key {key!r}; keys: based_on, {', '.join(FILE_FIGURES)}")
        if not isinstance(figure, Figure) or not isinstance(figure.source, str) or not figure.source.strip():
            raise ValueError(f"{where}: calibration.{key}: needs a value and its source")
        if not _in_range(key, figure.value):
            raise ValueError(f"{where}: calibration.{key}: must be {FILE_FIGURES[key][1]}, got {figure.value!r}")
    capacity = figures.get("hbm_capacity_bytes")
    if capacity is not None and capacity.value > float(acc.hbm_bytes) * 2**30 / 1e9:
        # datasheets print GiB as "GB" (an 80 GB H100 reports 81,559 MiB, 85.5 GB): a device reports
        # at most its printed HBM read as GiB
        raise ValueError(
            f"{where}: calibration.hbm_capacity_bytes: {capacity.value / 1e9:,.1f} GB is more than the file's "
            f"hbm_bytes ({float(acc.hbm_bytes) / 1e9:,.1f} GB) even read as GiB; a device reports at most that"
        )
    if figures.get("in_switch_reduction") and figures["in_switch_reduction"].value and acc.scale_up_fabric != "switch":
        raise ValueError(
            f"{where}: calibration.in_switch_reduction: true needs scale_up_fabric 'switch' (NVLink SHARP), "
            f"got {acc.scale_up_fabric!r}"
        )
    return FileCalibration(based_on, dict(figures))


def with_calibration(accelerator, calibration):
    """`accelerator` (an Accelerator read from a file) carrying `calibration`
    (a FileCalibration), or none (None). A preset's calibration is fixed."""
    acc = hardware.get(accelerator)
    if acc.name in hardware.PRESETS and calibration is not None:
        raise ValueError(f"accelerator: {acc.name!r} is a preset; its calibration is fixed")
    if calibration is not None and not isinstance(calibration, FileCalibration):
        raise ValueError(f"calibration: must be a calibrate.FileCalibration or None, got {calibration!r}")
    return dataclasses.replace(acc, calibration=calibration)


def _by_preset(key, name):
    """The figure of `key` keyed by the preset `name` (None where none is stored)."""
    if key == "in_switch_reduction":
        return Figure(name in NVLS_PRESETS, "nccl-tests-performance", "NVLS_PRESETS")
    table = {
        "matmul_efficiency": MATMUL_EFFICIENCY,
        "scale_up_efficiency": SCALE_UP_EFFICIENCY,
        "hbm_bytes_per_s": HBM_BYTES_PER_S,
        "hbm_capacity_bytes": HBM_CAPACITY_BYTES,
        "fp8_peak_ratio": FP8_PEAK_RATIO,
    }[key]
    return table.get(name)


# the default of each figure that has one, by the name of the module attribute holding it (read at
# each lookup, so that a figure replaced in the module, as shardbook.validation's trials do, applies)
_DEFAULT_NAMES = {
    "matmul_efficiency": "DEFAULT_MATMUL_EFFICIENCY",
    "scale_up_efficiency": "DEFAULT_SCALE_UP_EFFICIENCY",
    "in_switch_reduction": "_NO_IN_SWITCH",
}
_NO_IN_SWITCH = Figure(False, "default", "no in-switch reduction without a figure")


def _default(key):
    name = _DEFAULT_NAMES.get(key)
    return globals()[name] if name else None


def _resolve(key, accelerator):
    """(Figure or None, where it came from) for `key` of FILE_FIGURES:
    'file', 'based_on', 'preset', 'family' (keyed by family or fabric) or
    'default' (DEFAULT_*, or None where the figure has no default)."""
    acc = hardware.get(accelerator)
    own = acc.calibration
    if own is not None and key in own.figures:
        return own.figures[key], "file"
    keyed_by = FILE_FIGURES[key][2]
    if keyed_by == "family":
        table = SCALE_OUT_EFFICIENCY if key == "scale_out_efficiency" else SCALE_OUT_LATENCY_S
        return table[acc.family], "family"
    if keyed_by == "fabric":
        return SCALE_UP_LATENCY_S[acc.scale_up_fabric], "family"
    if own is not None:
        if own.based_on is not None:
            preset = hardware.PRESETS[own.based_on]
            # a reported capacity belongs to the datasheet capacity it was reported for,
            # in-switch reduction to a switch fabric
            if (key != "hbm_capacity_bytes" or float(preset.hbm_bytes) == float(acc.hbm_bytes)) and (
                key != "in_switch_reduction" or acc.scale_up_fabric == "switch"
            ):
                entry = _by_preset(key, own.based_on)
                if entry is not None:
                    return entry, "based_on"
        return _default(key), "default"
    entry = _by_preset(key, acc.name)  # a preset's figure (or one a caller stored under the name)
    if entry is not None and acc.name in hardware.PRESETS:
        return entry, "preset"
    if entry is not None and key != "in_switch_reduction":
        return entry, "preset"
    return _default(key), "default"


def provenance(accelerator):
    """[(key, label, Figure or None, origin)] for every key of FILE_FIGURES:
    where `accelerator`'s calibration takes each figure from (see _resolve)."""
    return [(key, spec[0], *_resolve(key, accelerator)) for key, spec in FILE_FIGURES.items()]


def assumed():
    """The (table, key, Figure) rows whose value is assumed, not sourced or fitted."""
    return [row for row in table() if row[2].source == "assumed"]


# (the book's name for a table, the module attribute: a dict of Figures, or one Figure)
TABLES = (
    ("matmul efficiency", "MATMUL_EFFICIENCY"),
    ("matmul efficiency (default)", "DEFAULT_MATMUL_EFFICIENCY"),
    ("matmul shape curve (ridge / spec ridge)", "MATMUL_SHAPE_CURVE"),
    ("scale-up efficiency", "SCALE_UP_EFFICIENCY"),
    ("scale-up efficiency (default)", "DEFAULT_SCALE_UP_EFFICIENCY"),
    ("scale-out efficiency", "SCALE_OUT_EFFICIENCY"),
    ("scale-up latency (s)", "SCALE_UP_LATENCY_S"),
    ("scale-out latency (s)", "SCALE_OUT_LATENCY_S"),
    ("exposed fraction", "EXPOSED_FRACTION"),
    ("FP8 peak ratio", "FP8_PEAK_RATIO"),
    ("FP8 sustained speedup", "FP8_SUSTAINED_SPEEDUP"),
    ("FP8 cast bytes per element", "FP8_CAST_BYTES_PER_ELEMENT"),
    ("HBM bandwidth (B/s)", "HBM_BYTES_PER_S"),
    ("HBM capacity (B)", "HBM_CAPACITY_BYTES"),
    ("HBM efficiency", "HBM_EFFICIENCY"),
    ("elementwise passes", "ELEMENTWISE_PASSES"),
    ("grouped GEMM half rows", "GROUPED_GEMM_HALF_ROWS"),
    ("EP exposed fraction", "EP_EXPOSED_FRACTION"),
    ("routed expert efficiency", "ROUTED_EXPERT_EFFICIENCY"),
)


def table():
    """Every calibration figure as (table, key, Figure) rows, for the book
    (a single figure's key is "any")."""
    rows = []
    for name, attribute in TABLES:
        tab = globals()[attribute]
        tab = tab if isinstance(tab, dict) else {"any": tab}
        rows += [(name, key, fig) for key, fig in tab.items()]
    return rows


_validate.guard_module(globals())
