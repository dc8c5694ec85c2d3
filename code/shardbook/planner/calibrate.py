"""Calibration: the per-accelerator and per-fabric efficiencies the expected
step time applies, kept as data, each with its source or its stated fit.

The optimistic bound (`Candidate.step_s`, `Candidate.mfu`) uses none of
these: peak FLOP/s, line-rate links, no latency. The expected step time
(`Candidate.expected_step_s`) divides the math by a sustained matmul
efficiency, prices every collective at an achieved bandwidth with a
per-message latency, and leaves a fraction of each overlappable collective
exposed. Every figure here belongs to an accelerator, a fabric or a kind of
collective, never to a published run.

Each entry is a :class:`Figure`: its value, a references.bib key (or
``"fit"``), a note saying what it is or on which calibration set it was
fitted, and ``provisional`` where the value is a placeholder awaiting the
validation appendix's fit (the ``valid`` helper tunes these; keep one entry
per line so a change is one line of diff).
"""

from dataclasses import dataclass

from .. import _validate, hardware


@dataclass(frozen=True)
class Figure:
    """One calibration figure: `value` (a fraction, or seconds for a
    latency), `source` (a references.bib key, or "fit" with the
    calibration set named in `note`), and whether it is `provisional`."""

    value: float
    source: str
    note: str
    provisional: bool = False


# --- sustained math -------------------------------------------------------------
# The fraction of the dense BF16 peak a well-tuned training step sustains over its
# math (matmuls, attention kernels); the elementwise work between them is priced
# apart, at the HBM bandwidth (ELEMENTWISE_PASSES, timing.math_s).
# Sourced: the interactive edition's hardware table (measured.SUSTAINED, compute), a
# matmul-only fraction; fitted (validation.fit_matmul_efficiency, the rule in
# shardbook.validation) where published runs exist: A100, H100, H800, TPU v5p, v5e, v6e.
# tests/test_validation.py holds each fitted value to its fit within 0.01.
MATMUL_EFFICIENCY = {
    "H100": Figure(
        0.50,
        "fit",
        "fitted on the H100 calibration runs (Llama 3 8K; Megatron-Core 1.7B, 16B, 70B, 177B, 462B); "
        "measured.SUSTAINED's 0.73 is matmuls alone",
    ),
    "H200": Figure(0.50, "fit", "as H100's fit: same GH100 die and clocks; no H200 run", provisional=True),
    "H800": Figure(
        0.40,
        "fit",
        "validation.fit_matmul_efficiency on DeepSeek-V3 (the only H800 run; FP8 matmuls, over the BF16 peak)",
    ),
    "B200": Figure(0.69, "parallelize-transformer", "sustained BF16 matmul fraction (measured.SUSTAINED)"),
    "GB200 NVL72": Figure(0.70, "parallelize-transformer", "printed approximate (≈)"),
    "GB300 NVL72": Figure(0.70, "parallelize-transformer", "printed approximate (≈)"),
    "TPU v5p": Figure(
        0.73,
        "fit",
        "validation.fit_matmul_efficiency on the v5p calibration runs (MaxText Llama 2 70B v5p-512; MaxText's "
        "v5p table: 32B v5p-128, 128B v5p-256, 256B v5p-1024, 1024B v5p-2048)",
    ),
    "TPU v5e": Figure(
        0.76,
        "fit",
        "validation.fit_matmul_efficiency on the v5e calibration runs (MaxText's v5e table: 16B and 64B on v5e-256); "
        "measured.SUSTAINED's 0.67 is printed approximate (≈)",
    ),
    "TPU v6e": Figure(
        0.59, "fit", "validation.fit_matmul_efficiency on the v6e calibration runs (MaxText Llama 3.1 8B, Mixtral 8x7B)"
    ),
    "Ironwood": Figure(0.70, "fit", "placeholder until fitted", provisional=True),
    "A100": Figure(
        0.65,
        "fit",
        "validation.fit_matmul_efficiency on the A100 calibration runs (SC21 GPT 1.7B, 7.5B, 39.1B, 145.6B, "
        "529.6B), with their eager attention's HBM traffic counted (timing.eager_scores_hbm_s)",
    ),
    "MI300X": Figure(0.60, "fit", "placeholder until fitted on the AMD runs", provisional=True),
    "MI355X": Figure(0.60, "fit", "placeholder until fitted on the AMD runs", provisional=True),
}
DEFAULT_MATMUL_EFFICIENCY = Figure(0.65, "fit", "any accelerator without its own entry", provisional=True)

# --- achieved bandwidth -----------------------------------------------------------
# Achieved / line rate on the scale-up fabric (what a large collective reaches).
SCALE_UP_EFFICIENCY = {
    "H100": Figure(0.82, "parallelize-transformer", "achieved 0.82 of NVLink egress (measured.ACHIEVED_SCALE_UP)"),
    "H200": Figure(0.82, "parallelize-transformer", "as H100 (same NVLink 4 switch)", provisional=True),
    "H800": Figure(0.80, "deepseek2024v3", "160 of 200 GB/s NVLink DeepSeek reports"),
    "B200": Figure(0.82, "parallelize-transformer", "printed approximate (≈)"),
    "GB200 NVL72": Figure(0.82, "parallelize-transformer", "printed approximate (≈)"),
    "GB300 NVL72": Figure(0.82, "parallelize-transformer", "printed approximate (≈)"),
    "MI300X": Figure(0.75, "amd-rccl-xgmi-blog", "48 of 64 GB/s usable per xGMI link"),
    "MI355X": Figure(0.75, "amd-rccl-xgmi-blog", "as MI300X's xGMI until measured", provisional=True),
    "TPU v5p": Figure(0.95, "parallelize-transformer", "ICI, printed approximate (≈)"),
    "TPU v5e": Figure(0.95, "parallelize-transformer", "ICI, printed approximate (≈)"),
    "TPU v6e": Figure(0.95, "parallelize-transformer", "as v5p/v5e ICI", provisional=True),
    "Ironwood": Figure(0.95, "parallelize-transformer", "as v5p ICI", provisional=True),
}
DEFAULT_SCALE_UP_EFFICIENCY = Figure(0.80, "fit", "any accelerator without its own entry", provisional=True)

# Achieved / line rate across domains (NIC or DCN), one direction.
SCALE_OUT_EFFICIENCY = {
    "gpu": Figure(0.90, "nccl-tests-performance", "inter-node bus bandwidth about 90 % of the NIC rate", True),
    "tpu": Figure(0.80, "fit", "DCN placeholder until fitted", provisional=True),
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
    "tpu": Figure(20.0e-6, "fit", "DCN message latency placeholder", provisional=True),
}

# --- exposed communication -------------------------------------------------------------
# The fraction of an overlappable collective that stays on the critical path even
# when the math around it is longer (the first gather, the last bucket's reduction,
# interference with the math's HBM bandwidth). Collectives that cannot overlap
# (TP without collective matmul, EP without DualPipe) are exposed in full.
EXPOSED_FRACTION = {
    "fsdp": Figure(0.10, "fit", "weight gathers and gradient reduce-scatters", provisional=True),
    "dp": Figure(0.10, "fit", "the gradient reduction's tail after the last backward", provisional=True),
    "cp": Figure(0.10, "fit", "ring-attention K/V exchange", provisional=True),
    "pp": Figure(0.50, "fit", "stage-boundary sends", provisional=True),
    "tp": Figure(1.00, "korthikanti2022reducing", "sequence-parallel gathers/scatters between the matmuls"),
    "tp_overlapped": Figure(0.30, "wang2023overlap", "TP with collective matmul (ideal_overlap)", True),
    "ep": Figure(1.00, "deepseek2024v3", "dispatch and combine between the router and the experts"),
    "ep_overlapped": Figure(0.10, "deepseek2024v3", "DualPipe overlaps all-to-all with another microbatch", True),
}

# In-switch reduction (NVLink SHARP, NCCL's NVLS algorithm, NCCL >= 2.17) on the
# NVSwitch generations that have it: third-generation NVSwitch (HGX H100/H200) and
# the NVLink 5 switch (B200, NVL72). An all-reduce inside the domain then moves
# each device's buffer once out and once in, not 2(n-1)/n times.
# Ref: nccl-tests-performance; NVIDIA/nccl#1031 and nccl-tests#196 ("On H100 we have NVLink SHARP").
NVLS_PRESETS = ("H100", "H200", "B200", "GB200 NVL72", "GB300 NVL72")


# FP8: the dense FP8 peak over the dense BF16 peak on the datasheets (2x on every
# GPU preset with FP8 tensor cores and on Ironwood; the other TPUs have none),
# and the speedup a whole step sustains when its GEMMs run in FP8 (attention,
# norms and the first and last layers stay in BF16, as DeepSeek-V3 keeps them).
FP8_PEAK_RATIO = {
    "H100": Figure(2.0, "nvidia-h100-datasheet", "1,979 vs 989 TFLOP/s dense"),
    "H200": Figure(2.0, "nvidia-h200-datasheet", "as H100"),
    "H800": Figure(2.0, "nvidia-h100-datasheet", "same GH100 tensor cores as H100"),
    "B200": Figure(2.0, "nvidia-dgx-b200", "dense FP8 twice dense BF16"),
    "GB200 NVL72": Figure(2.0, "nvidia-gb200-nvl72", "dense FP8 twice dense BF16"),
    "GB300 NVL72": Figure(2.0, "nvidia-gb300-nvl72", "dense FP8 twice dense BF16"),
    "MI300X": Figure(2.0, "amd-mi300x-datasheet", "dense FP8 twice dense BF16"),
    "MI355X": Figure(2.0, "amd-mi355x-datasheet", "dense FP8 twice dense BF16"),
    "Ironwood": Figure(2.0, "google-tpu7x", "FP8 peak twice the BF16 figure", provisional=True),
}
FP8_SUSTAINED_SPEEDUP = Figure(1.3, "fit", "step-level gain of FP8 GEMMs; placeholder until fitted", True)


# HBM bandwidth, one device (vendor spec). Each microbatch streams a device's
# weights from HBM at least three times (forward, and the backward's input and
# weight gradients), so a layout that leaves few tokens per device per
# microbatch is bound by HBM, not by FLOPs.
HBM_BYTES_PER_S = {
    "A100": Figure(2.039e12, "nvidia-a100-datasheet", "A100 80GB SXM: 2,039 GB/s"),
    "H100": Figure(3.35e12, "nvidia-h100-datasheet", "H100 SXM: 3.35 TB/s"),
    "H200": Figure(4.8e12, "nvidia-h200-datasheet", "4.8 TB/s"),
    "H800": Figure(3.35e12, "nvidia-h100-datasheet", "H800 SXM keeps H100 SXM's HBM3"),
    "B200": Figure(8e12, "nvidia-dgx-b200", "64 TB/s over 8 GPUs"),
    "GB200 NVL72": Figure(8e12, "nvidia-gb200-nvl72", "576 TB/s over 72 GPUs"),
    "GB300 NVL72": Figure(8e12, "nvidia-gb300-nvl72", "576 TB/s over 72 GPUs"),
    "MI300X": Figure(5.3e12, "amd-mi300x-datasheet", "5.3 TB/s"),
    "MI355X": Figure(8e12, "amd-mi355x-datasheet", "8 TB/s"),
    "TPU v5p": Figure(2.765e12, "google-tpu-v5p", "2,765 GB/s"),
    "TPU v5e": Figure(8.19e11, "google-tpu-v5e", "819 GB/s"),
    "TPU v6e": Figure(1.64e12, "google-tpu-v6e", "1,640 GB/s"),
    "Ironwood": Figure(7.37e12, "google-tpu7x", "7.37 TB/s"),
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
    2.62,
    "fit",
    "validation.fit_elementwise_passes on the whole calibration set (every accelerator's η refitted at each trial)",
)
HBM_EFFICIENCY = Figure(0.85, "fit", "achieved / spec HBM bandwidth of weight streaming; placeholder", True)
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


def hbm_capacity_bytes(accelerator):
    """HBM bytes one device offers the framework: HBM_CAPACITY_BYTES where
    the reported capacity is known, else the preset's datasheet figure."""
    acc = hardware.get(accelerator)
    entry = HBM_CAPACITY_BYTES.get(acc.name)
    return entry.value if entry else float(acc.hbm_bytes)


def hbm_bytes_per_s(accelerator):
    """Spec HBM bandwidth of one device (None where no figure is stored)."""
    entry = HBM_BYTES_PER_S.get(hardware.get(accelerator).name)
    return entry.value if entry else None


def fp8_peak_ratio(accelerator):
    """Dense FP8 peak / dense BF16 peak (1 where the accelerator has no FP8)."""
    entry = FP8_PEAK_RATIO.get(hardware.get(accelerator).name)
    return entry.value if entry else 1.0


def fp8_sustained_speedup(accelerator):
    """The calibrated step-level math speedup of FP8 GEMMs (1 without FP8)."""
    return FP8_SUSTAINED_SPEEDUP.value if fp8_peak_ratio(accelerator) > 1 else 1.0


def _lookup(table, key, default):
    return table.get(key, default)


def matmul_efficiency(accelerator):
    """The sustained fraction of the dense BF16 peak for `accelerator`."""
    return _lookup(MATMUL_EFFICIENCY, hardware.get(accelerator).name, DEFAULT_MATMUL_EFFICIENCY).value


def scale_up_efficiency(accelerator):
    """Achieved / line rate of the scale-up links of `accelerator`."""
    return _lookup(SCALE_UP_EFFICIENCY, hardware.get(accelerator).name, DEFAULT_SCALE_UP_EFFICIENCY).value


def scale_out_efficiency(accelerator):
    """Achieved / line rate of the scale-out path (NIC or DCN) of `accelerator`."""
    return SCALE_OUT_EFFICIENCY[hardware.get(accelerator).family].value


def scale_up_latency_s(accelerator):
    """Seconds per ring step inside one scale-up domain of `accelerator`."""
    return SCALE_UP_LATENCY_S[hardware.get(accelerator).scale_up_fabric].value


def scale_out_latency_s(accelerator):
    """Seconds per ring step across domains (NIC or DCN) of `accelerator`."""
    return SCALE_OUT_LATENCY_S[hardware.get(accelerator).family].value


def exposed_fraction(what):
    """The exposed fraction of one kind of communication (a key of EXPOSED_FRACTION)."""
    _validate.choice("what", what, tuple(EXPOSED_FRACTION))
    return EXPOSED_FRACTION[what].value


def has_in_switch_reduction(accelerator):
    """Whether all-reduce inside a scale-up domain of `accelerator` can use
    NVLink SHARP (NCCL's NVLS): the presets in NVLS_PRESETS."""
    return hardware.get(accelerator).name in NVLS_PRESETS


def table():
    """Every calibration figure as (table, key, Figure) rows, for the book."""
    rows = []
    for name, tab in (
        ("matmul efficiency", MATMUL_EFFICIENCY),
        ("scale-up efficiency", SCALE_UP_EFFICIENCY),
        ("scale-out efficiency", SCALE_OUT_EFFICIENCY),
        ("scale-up latency (s)", SCALE_UP_LATENCY_S),
        ("scale-out latency (s)", SCALE_OUT_LATENCY_S),
        ("exposed fraction", EXPOSED_FRACTION),
        ("FP8 peak ratio", FP8_PEAK_RATIO),
        ("FP8 sustained speedup", {"any": FP8_SUSTAINED_SPEEDUP}),
        ("HBM bandwidth (B/s)", HBM_BYTES_PER_S),
        ("HBM capacity (B)", HBM_CAPACITY_BYTES),
        ("HBM efficiency", {"any": HBM_EFFICIENCY}),
        ("elementwise passes", {"any": ELEMENTWISE_PASSES}),
    ):
        rows += [(name, key, fig) for key, fig in tab.items()]
    return rows


_validate.guard_module(globals())
