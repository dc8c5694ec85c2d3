"""Measurements reported by the sources, kept as data with their source.

These are not results of this book: the book did not run them and cannot
rerun them. Chapters show them as cited evidence.
"""

from dataclasses import dataclass

from . import _validate


@dataclass(frozen=True)
class MeshRun:
    """One published training run on a mesh: the model, its FSDP and EP
    degrees, the measured step time and throughput per device, and (where
    the source profiled it) the time RCCL was active and how much of it
    overlapped computation."""

    model: str
    fsdp: int
    ep: int
    step_s: float
    tflops_per_s_per_device: float
    tokens_per_s_per_device: float
    rccl_active_s: float | None = None
    rccl_overlapped_fraction: float | None = None
    rccl_exposed_s: float | None = None
    source: str = "scale-your-model-amd"
    note: str = ""


# One complete v26.6 cell of Mixtral 8x22B on one 8-GPU MI355X node, fixed capacity.
MIXTRAL_8X22B_MI355X = (
    MeshRun("Mixtral 8x22B", 4, 2, 20.599, 385.3, 1590.7, note="the only complete cell; no variability reported"),
)

# deepseek2-16b on one 8-GPU MI355X node: mean of post-warmup steps 10-29; RCCL
# columns from separate rocprofv3 jobs over steps 10-12.
DEEPSEEK2_16B_MI355X = (
    MeshRun("deepseek2-16b", 8, 1, 0.9478, 283.6, 17286.2, 0.2352, 0.175, 0.1941),
    MeshRun("deepseek2-16b", 4, 2, 1.6856, 159.5, 9719.9, 1.3210, 0.396, 0.7981),
    MeshRun("deepseek2-16b", 2, 4, 1.4215, 189.1, 11526.6, 0.8901, 0.422, 0.5144),
    MeshRun("deepseek2-16b", 1, 8, 0.8591, 312.9, 19071.9, 0.2160, 0.793, 0.0447),
)


@dataclass(frozen=True)
class AchievedScaleUp:
    """A published achieved (not line-rate) scale-up bandwidth, one direction.

    per: 'link' (one peer link; a full mesh drives n-1 of them) or 'egress'
    (all of one device's links together, what a switch-limited group sees)."""

    accelerator: str
    per: str
    bytes_per_s: float
    source: str
    note: str


ACHIEVED_SCALE_UP = (
    # AMD: CRC and protocol overhead leave about 48 GB/s usable of each 64 GB/s xGMI link (about 75 %).
    AchievedScaleUp(
        "MI300X", "link", 48e9, "amd-rccl-xgmi-blog", "usable xGMI rate per peer link, about 75 % of 64 GB/s"
    ),
    # The interactive edition's hardware table: H100 NVLink achieves about 0.82 of its 450 GB/s.
    AchievedScaleUp(
        "H100", "egress", 0.82 * 450e9, "parallelize-transformer", "achieved factor 0.82 on 450 GB/s NVLink egress"
    ),
    # DeepSeek-V3: "NVLink offers a bandwidth of 160 GB/s" on its H800 nodes (spec 200 GB/s
    # per direction); the report does not say it was measured, the interactive edition reads it so.
    AchievedScaleUp(
        "H800", "egress", 160e9, "deepseek2024v3", "NVLink bandwidth DeepSeek's report gives for its H800 nodes"
    ),
)


def achieved_scale_up(accelerator):
    """The AchievedScaleUp record for a preset name, or None if none is published."""
    for entry in ACHIEVED_SCALE_UP:
        if entry.accelerator == accelerator:
            return entry
    return None


@dataclass(frozen=True)
class SustainedFactors:
    """The fraction of a machine's spec that a well-tuned job sustains, as
    the interactive edition's hardware table prints it: `compute` of the
    dense BF16 peak, `link` of the W the same table prints beside it,
    `link_of_bytes_per_s` (the bidirectional torus axis for a TPU, the
    one-direction NVLink egress for a GPU). The `*_approximate` flags mark
    the entries that table prints with "≈".

    The factor belongs to that W, not to the presets': for TPU v5p and v5e
    the table's W is the Scaling Book's (180 and 90 GB/s), about 10 % below
    Google's (200 and 100 GB/s), so 0.95 of Google's figure would be above
    the table's own line rate."""

    accelerator: str
    compute: float
    compute_approximate: bool
    link: float
    link_approximate: bool
    link_of_bytes_per_s: float
    source: str = "parallelize-transformer"

    @property
    def achieved_link_bytes_per_s(self):
        """The achieved W in bytes/s: `link` × the W the factor was printed beside."""
        return self.link * self.link_of_bytes_per_s


SUSTAINED = (
    SustainedFactors("TPU v5p", 0.72, True, 0.95, True, 180e9),
    SustainedFactors("TPU v5e", 0.67, True, 0.95, True, 90e9),
    SustainedFactors("H100", 0.73, False, 0.82, False, 450e9),
    SustainedFactors("B200", 0.69, False, 0.82, True, 900e9),
    SustainedFactors("GB200 NVL72", 0.70, True, 0.82, True, 900e9),
    SustainedFactors("GB300 NVL72", 0.70, True, 0.82, True, 900e9),
    SustainedFactors("H800", 0.73, True, 0.80, False, 200e9),
)


def measured_alpha(factors, spec_flops_per_s):
    """α in the interactive edition's measured mode, FLOPs per byte:
    sustained C over achieved W, each factor applied to the figure it was
    printed beside (`spec_flops_per_s` is the preset's dense BF16 peak, the
    same C the table prints). Ref: parallelize-transformer (hardware table)."""
    if not isinstance(factors, SustainedFactors):
        raise ValueError(f"factors: must be a measured.SustainedFactors (an entry of SUSTAINED), got {factors!r}")
    _validate.positive("spec_flops_per_s", spec_flops_per_s)
    return spec_flops_per_s * factors.compute / factors.achieved_link_bytes_per_s


@dataclass(frozen=True)
class PublishedRun:
    """A training run whose hardware, mesh, batch and measured MFU were
    published. `mesh` uses the explorer's axes; `recompute` is the explorer
    policy closest to the run's from below (host offloading counts as none),
    so that the explorer's bound stays a bound; `mfu` is as published (for
    Llama 3, TFLOP/s per GPU over the H100's 989 TFLOP/s, as the paper
    reports it)."""

    name: str
    model: str
    accelerator: str
    mesh: dict
    seq_len: int
    sequences_per_step: int
    micro_batch_seqs: int
    mfu: float
    source: str
    recompute: str = "none"
    tokens_per_s_per_device: float | None = None
    uneven_pipeline: bool = False
    note: str = ""

    @property
    def n_devices(self):
        n = 1
        for degree in self.mesh.values():
            n *= degree
        return n

    @property
    def global_tokens(self):
        return self.sequences_per_step * self.seq_len


# MaxText's tiering table (docs/reference/models/tiering.md) gives chips, sequence length,
# MFU and tokens/s/device; the meshes and batches come from the benchmark configs it links
# (benchmarks/maxtext_v5p_model_configs.py and maxtext_trillium_model_configs.py):
# ici_fsdp_parallelism -1 is every chip; per_device_batch_size sequences per chip per step.
PUBLISHED_RUNS = (
    PublishedRun(
        "MaxText Llama 2 70B, v5p-512",
        "LLaMA-2 70B",
        "TPU v5p",
        {"fsdp": 512},
        4096,
        512 * 4,
        4,
        0.654,
        "maxtext-tiering",
        tokens_per_s_per_device=692,
        note="remat save_dot_except_mlpwi",
    ),
    PublishedRun(
        "MaxText Llama 2 70B, v6e-256",
        "LLaMA-2 70B",
        "TPU v6e",
        {"fsdp": 256},
        4096,
        256 * 4,
        4,
        0.438,
        "maxtext-tiering",
        recompute="full",
        tokens_per_s_per_device=900,
        note="remat full",
    ),
    PublishedRun(
        "MaxText Llama 3.1 8B, v6e-256",
        "LLaMA-3 8B",
        "TPU v6e",
        {"fsdp": 256},
        8192,
        256 * 4,
        4,
        0.4546,
        "maxtext-tiering",
        tokens_per_s_per_device=7207,
        note="activations offloaded to the host",
    ),
    PublishedRun(
        "MaxText Llama 3.1 70B, v6e-256",
        "LLaMA-3 70B",
        "TPU v6e",
        {"fsdp": 256},
        8192,
        256 * 5,
        5,
        0.5033,
        "maxtext-tiering",
        tokens_per_s_per_device=960,
        note="activations offloaded to the host",
    ),
    PublishedRun(
        "MaxText Mixtral 8x7B, v6e-256",
        "Mixtral 8x7B",
        "TPU v6e",
        {"fsdp": 256},
        4096,
        256 * 12,
        12,
        0.3523,
        "maxtext-tiering",
        tokens_per_s_per_device=3899,
        note="dropped tokens, activations offloaded",
    ),
    PublishedRun(
        "MaxText Mixtral 8x22B, v6e-256",
        "Mixtral 8x22B",
        "TPU v6e",
        {"fsdp": 64, "ep": 4},
        4096,
        256 * 8,
        8,
        0.362,
        "maxtext-tiering",
        tokens_per_s_per_device=1326,
        note="capacity factor 1.25, activations offloaded",
    ),
    # Llama 3 405B pre-training (dubey2024llama3, Table 4): 16M tokens per step in sequences of 8,192,
    # TP 8, PP 16, the rest data parallel (FSDP), 430 and 400 TFLOP/s per GPU; 126 layers on 16 stages.
    PublishedRun(
        "Llama 3 405B, 8,192 H100",
        "LLaMA-3 405B",
        "H100",
        {"tp": 8, "pp": 16, "fsdp": 64},
        8192,
        2048,
        1,
        0.43,
        "dubey2024llama3",
        uneven_pipeline=True,
        note="430 TFLOP/s per GPU",
    ),
    PublishedRun(
        "Llama 3 405B, 16,384 H100",
        "LLaMA-3 405B",
        "H100",
        {"tp": 8, "pp": 16, "fsdp": 128},
        8192,
        2048,
        1,
        0.41,
        "dubey2024llama3",
        uneven_pipeline=True,
        note="400 TFLOP/s per GPU",
    ),
)


def deepseek_v3_mfu():
    """DeepSeek-V3's pre-training utilization derived from its report:
    14.8T tokens in 2.664M H800 GPU hours (deepseek2024v3), model FLOPs per
    token as training.model_flops_per_token (causal), over the H800's BF16
    peak. The run computed its matmuls in FP8, so this is utilization of the
    BF16 peak, and the GPU hours include every stall of the run."""
    from . import hardware, training

    flops = training.model_flops_per_token("DeepSeek-V3", 4096, causal=True) * 14.8e12
    return flops / (2.664e6 * 3600 * hardware.get("H800").bf16_dense_flops_per_s)


PUBLISHED_RUNS += (
    # deepseek2024v3: 2,048 H800, PP 16, EP 64 (over 8 nodes), ZeRO-1 data parallelism over the
    # remaining 2; 15,360 sequences of 4,096 per step at steady state; 61 layers on 16 stages.
    PublishedRun(
        "DeepSeek-V3, 2,048 H800",
        "DeepSeek-V3",
        "H800",
        {"pp": 16, "ep": 64, "dp": 2},
        4096,
        15360,
        1,
        deepseek_v3_mfu(),
        "deepseek2024v3",
        recompute="selective",
        uneven_pipeline=True,
        note="derived from 2.664M GPU hours for 14.8T tokens; FP8 matmuls",
    ),
)
