"""Measurements reported by the sources, kept as data with their source.

These are not results of this book: the book did not run them and cannot
rerun them. Chapters show them as cited evidence.
"""

from dataclasses import dataclass, replace

from . import _validate, memory


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
class GroupedGemmPoint:
    """One published grouped-GEMM benchmark point: `groups` experts of `m`
    rows each (the tokens routed to one expert), each [m, k]·[k, n], and the
    TFLOP/s the kernel sustained, on `accelerator` under `kernels` (the
    family of kernels the planner keys the curve by: 'nvidia' or 'amd')."""

    kernels: str
    accelerator: str
    label: str
    groups: int
    m: int
    n: int
    k: int
    tflops_per_s: float
    source: str
    where: str


def _deepgemm(label, groups, m, n, k, tflops):
    return GroupedGemmPoint(
        "nvidia", "H800", label, groups, m, n, k, tflops, "deepgemm",
        "README.md at 55ab91f, 'Grouped GEMMs for MoE models' (contiguous and masked layouts; FP8, H800 SXM5)",
    )  # fmt: skip


def _primus_turbo(label, m, n, k, tflops):
    return GroupedGemmPoint(
        "amd", "MI300X", label, 8, m, n, k, tflops, "primus-turbo-grouped-gemm",
        "benchmark/baselines/grouped_gemm.json at 23e36d6 (BF16, MI300X, balanced groups, 2026-04-02)",
    )  # fmt: skip


# Grouped GEMMs as MoE layers run them, by rows per group. DeepSeek's DeepGEMM README prints its
# grouped kernels on two expert shapes of DeepSeek-V3 (N x K = 4096 x 7168 and 7168 x 2048) from 256
# to 8,192 rows per group; AMD's Primus-Turbo keeps its BF16 baselines on MI300X for 8 groups of
# DeepSeek-V2-Lite's and Qwen3-30B-A3B's expert shapes (gate and up fused: N = 2·F) from 512 to
# 16,384 rows. moe.fit_grouped_gemm_half_rows fits the curve the planner prices routed experts by.
GROUPED_GEMM_POINTS = (
    _deepgemm("DeepSeek-V3 gate/up, masked", 4, 256, 4096, 7168, 932),
    _deepgemm("DeepSeek-V3 gate/up, masked", 2, 512, 4096, 7168, 1040),
    _deepgemm("DeepSeek-V3 gate/up, masked", 1, 1024, 4096, 7168, 1233),
    _deepgemm("DeepSeek-V3 gate/up, contiguous", 8, 4096, 4096, 7168, 1346),
    _deepgemm("DeepSeek-V3 gate/up, contiguous", 4, 8192, 4096, 7168, 1346),
    _deepgemm("DeepSeek-V3 down, masked", 4, 256, 7168, 2048, 815),
    _deepgemm("DeepSeek-V3 down, masked", 2, 512, 7168, 2048, 916),
    _deepgemm("DeepSeek-V3 down, masked", 1, 1024, 7168, 2048, 925),
    _deepgemm("DeepSeek-V3 down, contiguous", 8, 4096, 7168, 2048, 1214),
    _deepgemm("DeepSeek-V3 down, contiguous", 4, 8192, 7168, 2048, 1214),
    *(
        _primus_turbo(label, m, n, k, t)
        for label, n, k, values in (
            ("DeepSeek-V2-Lite gate/up", 2816, 2048, (348.6, 338.89, 447.02, 484.88, 493.24, 500.42)),
            ("DeepSeek-V2-Lite down", 2048, 1408, (275.6, 400.3, 421.85, 445.14, 472.93, 478.84)),
            ("Qwen3-30B-A3B gate/up", 4096, 2048, (418.24, 448.15, 462.47, 502.29, 502.15, 505.67)),
            ("Qwen3-30B-A3B down", 2048, 2048, (296.51, 420.13, 453.71, 464.67, 490.63, 492.18)),
        )
        for m, t in zip((512, 1024, 2048, 4096, 8192, 16384), values, strict=True)
    ),
)


# The attention kernels' own speed on one H100 SXM5 (80 GB), BF16, head dimension 128, by sequence
# length (batch x sequence = 16,384 tokens, 16 heads), as FlashAttention-3's paper prints it
# (shah2024flashattention3, the bar labels of its forward figure with the causal mask and of its
# backward figure): TFLOP/s by the paper's count, the backward's FLOPs 2.5 times the forward's
# (its five matmuls to the forward's two). FlashAttention-2 is what PyTorch's SDPA and the
# flash-attn package run on Hopper; cuDNN's fused attention is what Transformer Engine prefers
# there (planner.calibrate.ATTENTION_KERNEL_OF_STACK).
ATTENTION_KERNEL_SEQ_LENS = (512, 1024, 2048, 4096, 8192, 16384)
ATTENTION_KERNEL_TFLOPS_H100 = {
    # kernel: (forward, causal), (backward) TFLOP/s at each of ATTENTION_KERNEL_SEQ_LENS
    "fa2": ((191, 260, 298, 319, 333, 335), (214, 260, 291, 310, 318, 322)),
    "cudnn": ((315, 410, 484, 518, 529, 539), (305, 408, 465, 499, 518, 516)),
}
ATTENTION_BACKWARD_FLOPS_OVER_FORWARD = 2.5  # the paper's count: five matmuls to the forward's two


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


SCHEDULES = ("gpipe", "1f1b", "interleaved", "zero_bubble", "dualpipe")
PRECISIONS = memory.PRECISIONS  # the precisions memory counts and the planner prices


@dataclass(frozen=True)
class PublishedRun:
    """A training run whose hardware, mesh, batch and measured speed were
    published.

    - `mesh`: degrees over the planner's axes (dp, fsdp, tp, cp, ep, pp).
    - `sequences_per_step`, `micro_batch_seqs`, `seq_len`: the global batch
      in sequences, the sequences of one microbatch, tokens per sequence.
    - `mfu`: as the source publishes it (model FLOPs over the dense BF16
      peak; for Llama 3, the MFU the paper prints beside its TFLOP/s per
      GPU; for SC21, where the paper
      prints a percentage of peak that counts the recomputed forward, the
      model-FLOPs share derived from it, see `published_peak_fraction`).
    - `recompute`: the run's recomputation policy as memory.RECOMPUTE names
      it (Megatron's none/selective/full, MaxText's remat policies, host
      offloading included); `remat_policy` is the policy as the run declares
      it, in its own words.
    - `schedule`, `n_virtual`, `uneven_pipeline`: the pipeline schedule,
      virtual stages per device (None: not published), and whether stages
      hold unequal layer counts.
    - `attention` ('flash' or 'eager'), `state_recipe` (bytes per parameter
      of the training state, as the planner names them; None: not published,
      the planner's default of 16 bytes, which is also MaxText's FP32
      weights, gradients and Adam moments), `zero` (0-3, the optimizer
      sharding over the dp axis), `precision` ('bf16' or 'fp8').
    - `sequence_parallel`: Megatron's sequence parallelism with TP (None:
      not published, the planner's default; False for runs that predate it,
      korthikanti2022reducing).
    - `capacity_factor`: an MoE run that drops tokens computes each
      expert's capacity, this many times its share (None: dropless or not
      published).
    - `loss_logits`: what its loss keeps of the logits (memory.LOSS_LOGITS;
      None: the planner's default, Megatron's FP32 copy); MaxText's runs
      'fused_bf16'.
    - `tp_comm_overlap`: the run overlaps its tensor-parallel collectives
      with the matmuls (Megatron's --tp-comm-overlap, collective matmul);
      `grad_reduce_overlap`: its gradient reduction overlaps the backward
      pass (False for Megatron-LM before --overlap-grad-reduce, which
      all-reduced the gradient buffer after the last backward).
    - `slices`: a TPU run spread over this many slices, which talk over
      DCN (None: one slice, or as few as the job's size needs).
    - `tflops_per_s_per_device`, `tokens_per_s_per_device`, `step_s`: as
      published where published; `step_basis` says how `step_s` was
      obtained when it is derived (from the source's own FLOP count and
      TFLOP/s, from tokens/s, or from GPU hours).
    - `source` (a references.bib key) and `where` (table, page or file).
    """

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
    remat_policy: str = ""
    schedule: str = "1f1b"
    n_virtual: int | None = None
    attention: str = "flash"
    state_recipe: str | None = None
    zero: int = 0
    precision: str = "bf16"
    tp_comm_overlap: bool = False
    grad_reduce_overlap: bool = True
    sequence_parallel: bool | None = None
    capacity_factor: float | None = None
    loss_logits: str | None = None
    slices: int | None = None
    tflops_per_s_per_device: float | None = None
    published_peak_fraction: float | None = None
    step_s: float | None = None
    step_basis: str = ""
    where: str = ""

    def __post_init__(self):
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule: unknown value {self.schedule!r}; valid: {', '.join(SCHEDULES)}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision: unknown value {self.precision!r}; valid: {', '.join(PRECISIONS)}")
        object.__setattr__(self, "zero", memory.check_zero(self.zero))
        if self.attention not in ("flash", "eager"):
            raise ValueError(f"attention: must be 'flash' or 'eager', got {self.attention!r}")
        if self.step_s is None:
            # tokens/s per device is a measurement of the step itself
            if self.tokens_per_s_per_device is not None:
                step = self.sequences_per_step * self.seq_len / (self.n_devices * self.tokens_per_s_per_device)
                object.__setattr__(self, "step_s", step)
                object.__setattr__(self, "step_basis", self.step_basis or "tokens per step / (devices x tokens/s)")

    @property
    def n_devices(self):
        n = 1
        for degree in self.mesh.values():
            n *= degree
        return n

    @property
    def global_tokens(self):
        return self.sequences_per_step * self.seq_len

    @property
    def hardware(self):
        """The accelerator preset name (the same as `accelerator`)."""
        return self.accelerator


def _counts(batch_seqs, seq_len, n_layers, d_model, vocab_size):
    for name, value in (
        ("batch_seqs", batch_seqs),
        ("seq_len", seq_len),
        ("n_layers", n_layers),
        ("d_model", d_model),
        ("vocab_size", vocab_size),
    ):
        _validate.count(name, value)
    return batch_seqs, seq_len, n_layers, d_model, vocab_size


def sc21_flops_per_iteration(batch_seqs, seq_len, n_layers, d_model, vocab_size):
    """FLOPs of one training iteration as Narayanan et al. count them
    (SC21, equation 3): 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)): forward,
    backward and the recomputed forward of every transformer layer (matmuls
    only, attention scores over the full s × s square), and the logit layer
    forward and backward. Ref: narayanan2021megatron."""
    b, s, n, h, v = _counts(batch_seqs, seq_len, n_layers, d_model, vocab_size)
    return 96 * b * s * n * h * h * (1 + s / (6 * h) + v / (16 * n * h))


def sc21_model_flops_per_iteration(batch_seqs, seq_len, n_layers, d_model, vocab_size):
    """The same count without the recomputed forward of the transformer
    layers: 72·B·s·l·h²·(1 + s/(6h)) + 6·B·s·V·h (the logit layer is not
    recomputed). Ref: narayanan2021megatron, korthikanti2022reducing."""
    b, s, n, h, v = _counts(batch_seqs, seq_len, n_layers, d_model, vocab_size)
    return 72 * b * s * n * h * h * (1 + s / (6 * h)) + 6 * b * s * v * h


def mcore_flops_per_iteration(batch_seqs, seq_len, n_layers, d_model, vocab_size, ffn_ratio=4, kv_fraction=1.0):
    """FLOPs of one iteration as Megatron-Core r0.8 counts them for its
    printed teraFLOP/s (megatron/training/training.py,
    num_floating_point_operations): 12·B·s·l·h²·((1 + g + s/h) + F/h + V/(2·l·h))
    with g the KV-head fraction; attention scores over the full square, no
    recomputation. Ref: megatron-lm-readme."""
    b, s, n, h, v = _counts(batch_seqs, seq_len, n_layers, d_model, vocab_size)
    _validate.positive("ffn_ratio", ffn_ratio)
    _validate.non_negative("kv_fraction", kv_fraction)
    return 12 * b * s * n * h * h * ((1 + kv_fraction + s / h) + ffn_ratio + v / (2 * n * h))


# What the Llama 3 paper leaves out of its runs, as they are taken here
_LLAMA3_TAKEN = (
    "not published, taken at their simplest: one sequence per microbatch, no recomputation, the "
    "interleaved schedule in chunks of one layer (§3.3.2: the first stage's first chunk only the "
    "embedding), FSDP weights kept gathered (planner.search.PUBLISHED_LAYOUTS)"
)

# MaxText's tiering table (docs/reference/models/tiering.md) gives chips, sequence length,
# MFU and tokens/s/device; the meshes and batches come from the benchmark configs it links
# (benchmarks/maxtext_v5p_model_configs.py and maxtext_trillium_model_configs.py):
# ici_fsdp_parallelism -1 is every chip; per_device_batch_size sequences per chip per step.
PUBLISHED_RUNS = (
    # The tiering table links the tpu-recipes Trillium recipe, which runs llama2_70b_4096_sc
    # (remat qkv_proj_offloaded, ici_fsdp_transpose_parallelism -1). Its printed config says
    # per_device_batch_size 3, but the log it shows, whose 905 tokens/s the table's 900 rounds,
    # has total_weights 2,097,152 = 256 x 2 x 4,096 tokens and 9.052 s per step: 2 per device.
    PublishedRun(
        "MaxText Llama 2 70B, v6e-256",
        "LLaMA-2 70B",
        "TPU v6e",
        {"fsdp": 256},
        4096,
        256 * 2,
        2,
        0.438,
        "maxtext-tiering",
        loss_logits="fused_bf16",
        recompute="qkv_proj_offloaded",
        tokens_per_s_per_device=900,
        note="remat qkv_proj_offloaded; 2 sequences per chip as the recipe's log ran",
        remat_policy="qkv_proj_offloaded",
        tflops_per_s_per_device=402.274,
        step_s=9.052,
        step_basis="measured (the recipe's log: 9.052 s, total_weights 2,097,152)",
        where="tiering.md, Llama2-70B on v6e-256; tpu-recipes training/trillium/Llama2-70B-MaxText at 8239ba3",
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
        loss_logits="fused_bf16",
        recompute="custom_offload_input_qkv_out",
        tokens_per_s_per_device=7207,
        note="activations offloaded to the host",
        remat_policy="custom: decoder_layer_input, query_proj, key_proj, value_proj, out_proj offloaded",
        where="tiering.md, Llama3.1-8B on v6e-256; benchmarks/maxtext_trillium_model_configs.py",
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
        loss_logits="fused_bf16",
        recompute="custom_offload_input_qkv",
        tokens_per_s_per_device=960,
        note="activations offloaded to the host",
        remat_policy="custom: decoder_layer_input, query_proj, key_proj, value_proj offloaded",
        where="tiering.md, Llama3.1-70B on v6e-256; benchmarks/maxtext_trillium_model_configs.py",
    ),
    # The tiering table's 3,899 tokens/s is used; the recipe it links logs 3,645 tokens/s (13.484 s a
    # step, the same batch), 7 % slower, without saying which software either measured.
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
        loss_logits="fused_bf16",
        recompute="custom_offload_input_qkv_out",
        tokens_per_s_per_device=3899,
        capacity_factor=1.25,
        note="dropped tokens, activations offloaded",
        remat_policy="custom: decoder_layer_input, query_proj, key_proj, value_proj, out_proj offloaded",
        where="tiering.md, Mixtral-8x7B on v6e-256; benchmarks/maxtext_trillium_model_configs.py",
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
        loss_logits="fused_bf16",
        recompute="custom_offload_input_qkv_out",
        tokens_per_s_per_device=1326,
        capacity_factor=1.25,
        # mixtral_8x22b_dropped sets weight_dtype bfloat16 (the only tiering config that does), and
        # base.yml's Adam moments follow the weights: 8 bytes of state per parameter
        state_recipe="pure_bf16",
        note="capacity factor 1.25, activations offloaded, BF16 weights and optimizer state",
        remat_policy="custom: decoder_layer_input, query_proj, key_proj, value_proj, out_proj offloaded",
        where="tiering.md, Mixtral-8x22B on v6e-256; benchmarks/maxtext_trillium_model_configs.py "
        "(mixtral_8x22b_dropped: weight_dtype bfloat16)",
    ),
    # v5p, printed after the Trillium rows: the split rule counts a source's runs in the order
    # it prints them
    PublishedRun(
        "MaxText Llama 2 70B, v5p-1024",
        "LLaMA-2 70B",
        "TPU v5p",
        {"fsdp": 512},
        4096,
        512 * 4,
        4,
        0.654,
        "maxtext-tiering",
        loss_logits="fused_bf16",
        recompute="save_dot_except_mlpwi",
        tokens_per_s_per_device=692,
        note="remat save_dot_except_mlpwi",
        remat_policy="save_dot_except_mlpwi",
        where='tiering.md, Llama2-70B on v5p, "512 Chips" (v5p-1024 in the TensorCores the slice names count); '
        "benchmarks/maxtext_v5p_model_configs.py",
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
        note=f"430 TFLOP/s per GPU; {_LLAMA3_TAKEN}",
        remat_policy="none",
        schedule="interleaved",
        tflops_per_s_per_device=430,
        where="Table 4, row 1 (8,192 GPUs, TP 8, CP 1, PP 16, DP 64, batch size/DP 32)",
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
        note=f"400 TFLOP/s per GPU; {_LLAMA3_TAKEN}",
        remat_policy="none",
        schedule="interleaved",
        tflops_per_s_per_device=400,
        where="Table 4, row 2 (16,384 GPUs, TP 8, CP 1, PP 16, DP 128, batch size/DP 16)",
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


def deepseek_v3_step_s():
    """DeepSeek-V3's mean pre-training step time derived from its report:
    2.664M H800 GPU hours on 2,048 GPUs over 14.8T tokens at 15,360
    sequences of 4,096 per step (the batch after its ramp-up; the ramp's
    smaller steps make this a slight overestimate of the steady step)."""
    steps = 14.8e12 / (15360 * 4096)
    return 2.664e6 * 3600 / 2048 / steps


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
        recompute="deepseek_v3",
        uneven_pipeline=True,
        note="derived from 2.664M GPU hours for 14.8T tokens; FP8 matmuls; the report's memory recipe "
        "(memory.DEEPSEEK_V3_RECIPE, memory.STATE_RECIPES['deepseek_v3'])",
        remat_policy="deepseek_v3",
        state_recipe="deepseek_v3",
        schedule="dualpipe",
        zero=1,
        precision="fp8",
        step_s=deepseek_v3_step_s(),
        step_basis="2.664M GPU hours x 3,600 s / 2,048 GPUs over 14.8T / (15,360 x 4,096) steps",
        where="sections 3.2-3.3 (PP 16, EP 64, ZeRO-1 DP, DualPipe, FP8); Table 1 (2.664M GPU hours)",
    ),
)


# Narayanan et al. SC21, Table 1 (narayanan2021megatron): GPT models on Selene, DGX A100 80GB
# nodes, sequence 2,048, vocabulary 51,200, mixed precision, activation recomputation.
# Per row: (model size, tensor-parallel size, pipeline-parallel size, GPUs, batch size,
# achieved teraFLOP/s per GPU, percentage of theoretical peak, aggregate petaFLOP/s).
SC21_TABLE_1 = (
    ("1.7B", 1, 1, 32, 512, 137, 0.44, 4.4),
    ("3.6B", 2, 1, 64, 512, 138, 0.44, 8.8),
    ("7.5B", 4, 1, 128, 512, 142, 0.46, 18.2),
    ("18.4B", 8, 1, 256, 1024, 135, 0.43, 34.6),
    ("39.1B", 8, 2, 512, 1536, 138, 0.44, 70.8),
    ("76.1B", 8, 4, 1024, 1792, 140, 0.45, 143.8),
    ("145.6B", 8, 8, 1536, 2304, 148, 0.47, 227.1),
    ("310.1B", 8, 16, 1920, 2160, 155, 0.50, 297.4),
    ("529.6B", 8, 35, 2520, 2520, 163, 0.52, 410.2),
    ("1008.0B", 8, 64, 3072, 3072, 163, 0.52, 502.0),
)

# How the SC21 authors ran each Table 1 row (megatron-lm-sc21-scripts:
# examples/academic_paper_scripts/sc21/run_table_1.sh, for Megatron-LM commit 6985e58938):
# (microbatch size, layers per virtual pipeline stage or None, DDP implementation). PyTorch's
# DDP reduces the gradients during the last microbatch's backward; Megatron's 'local' DDP
# all-reduces its gradient buffer after forward_backward_func (megatron/training.py).
SC21_SCRIPT_CONFIG = {
    "1.7B": (16, None, "torch"),
    "3.6B": (16, None, "torch"),
    "7.5B": (16, None, "torch"),
    "18.4B": (8, None, "torch"),
    "39.1B": (4, None, "local"),
    "76.1B": (2, 5, "local"),
    "145.6B": (2, 5, "local"),
    "310.1B": (1, 3, "local"),
    "529.6B": (1, 1, "local"),
    "1008.0B": (1, None, "local"),
}

# The Megatron-LM README's H100 table (megatron-lm-readme, images/model_table.png, Megatron-Core
# r0.8.0): sequence 4,096, vocabulary 131,072, data-parallel size 48 throughout. Per row:
# (model size, tensor-parallel size, pipeline-parallel size, GPUs, batch size, per-GPU
# teraFLOP/s, MFU, aggregate petaFLOP/s).
MCORE_H100_TABLE = (
    ("1.7B", 1, 1, 48, 192, 408.8, 0.41, 19.6),
    ("7.1B", 2, 1, 96, 192, 465.9, 0.47, 44.7),
    ("16B", 4, 1, 192, 192, 489.1, 0.49, 93.9),
    ("32B", 8, 1, 384, 192, 459.6, 0.46, 176.5),
    ("70B", 8, 2, 768, 384, 419.7, 0.42, 322.3),
    ("119B", 8, 4, 1536, 768, 420.5, 0.43, 645.9),
    ("177B", 8, 6, 2304, 1152, 432.8, 0.44, 997.2),
    ("314B", 8, 8, 3072, 1536, 474.4, 0.48, 1457.4),
    ("462B", 8, 16, 6144, 3072, 459.9, 0.47, 2825.6),
)


# The table's pipeline schedule. The README overlaps "pipeline-parallel communication (enabled
# by default)"; at the commit that published the table (f2e5db402c, July 2024),
# megatron/training/arguments.py turns that overlap (overlap_p2p_comm) off "since non-interleaved
# schedule does not support overlapping p2p communication" unless --num-layers-per-virtual-pipeline-stage
# is set: the pipelined rows ran the interleaved schedule. The table gives no virtual size; the rows
# hold 42, 23, 16, 12 and 7 layers per stage, and 23 and 7 are prime, so one value of
# --num-layers-per-virtual-pipeline-stage serves every row only if it is 1 (a weak-scaling study's
# one setting): one layer per virtual stage is taken.
MCORE_TABLE_SCHEDULE = ("interleaved", "layers per virtual stage", 1)


def _mesh(tp, pp, n_devices):
    mesh = {"tp": tp, "pp": pp, "dp": n_devices // (tp * pp)}
    return {axis: degree for axis, degree in mesh.items() if degree > 1} or {"dp": 1}


def _sc21_run(size, tp, pp, n_gpus, batch, tflops, peak_fraction, _aggregate):
    from . import models

    m = models.get(f"GPT {size} (SC21)")
    micro, layers_per_virtual, ddp = SC21_SCRIPT_CONFIG[size]
    n_virtual = m.n_layers // pp // layers_per_virtual if layers_per_virtual else 1
    hw_flops = sc21_flops_per_iteration(batch, 2048, m.n_layers, m.d_model, m.vocab_size)
    model_flops = sc21_model_flops_per_iteration(batch, 2048, m.n_layers, m.d_model, m.vocab_size)
    step_s = hw_flops / (n_gpus * tflops * 1e12)
    return PublishedRun(
        f"Megatron GPT {size}, {n_gpus:,} A100",
        m.name,
        "A100",
        _mesh(tp, pp, n_gpus),
        2048,
        batch,
        micro,
        model_flops / (step_s * n_gpus * 312e12),
        "narayanan2021megatron",
        recompute="full",
        note=f"microbatch {micro}, {n_virtual} virtual stage(s) per device, {ddp} DDP, uniform full "
        "recomputation, FP16, as run_table_1.sh runs this row (megatron-lm-sc21-scripts; section 5.1 says "
        "the interleaved schedule, which the script sets for 76B to 530B only)",
        remat_policy="full",
        schedule="interleaved" if n_virtual > 1 else "1f1b",
        n_virtual=n_virtual,
        attention="eager",
        grad_reduce_overlap=ddp == "torch",
        sequence_parallel=False,
        state_recipe="megatron",
        tflops_per_s_per_device=tflops,
        published_peak_fraction=peak_fraction,
        step_s=step_s,
        step_basis="equation 3's FLOPs per iteration / (GPUs x achieved teraFLOP/s)",
        where=f"Table 1, {size} row",
    )


def _mcore_run(size, tp, pp, n_gpus, batch, tflops, mfu, _aggregate):
    from . import models

    m = models.get(f"GPT {size} (Megatron-Core)")
    flops = mcore_flops_per_iteration(batch, 4096, m.n_layers, m.d_model, m.vocab_size)
    # MCORE_TABLE_SCHEDULE: with a pipeline, the interleaved schedule at one layer per virtual stage
    n_virtual = m.n_layers // pp if pp > 1 else 1
    return PublishedRun(
        f"Megatron-Core GPT {size}, {n_gpus:,} H100",
        m.name,
        "H100",
        _mesh(tp, pp, n_gpus),
        4096,
        batch,
        1,
        mfu,
        "megatron-lm-readme",
        note="microbatch 1 and no recomputation assumed (not in the table); with a pipeline, the interleaved "
        "schedule at one layer per virtual stage (MCORE_TABLE_SCHEDULE); distributed optimizer, as "
        "--overlap-param-gather requires; DP, TP and PP communication overlapped",
        remat_policy="none",
        schedule="interleaved" if n_virtual > 1 else "1f1b",
        n_virtual=n_virtual,
        state_recipe="megatron",
        zero=1,
        tp_comm_overlap=True,
        tflops_per_s_per_device=tflops,
        step_s=flops / (n_gpus * tflops * 1e12),
        step_basis="num_floating_point_operations per iteration / (GPUs x per-GPU teraFLOP/s)",
        where=f"README, Performance Benchmarking table, {size} row",
    )


# Korthikanti et al. 2022 (korthikanti2022reducing): GPT models on DGX A100 80GB, sequence 2,048,
# vocabulary 51,200, mixed precision, no data parallelism. Table 3 gives each model's layout:
# (model size, tensor-parallel size, pipeline-parallel size, GPUs, global batch, microbatch,
# virtual stages per device: "interleaving" with three stages for 175B and 530B); Table 5 the
# iteration time in seconds under full recomputation (the baseline, tensor parallelism without
# sequence parallelism) and under the present work (sequence parallelism and selective
# recomputation). The runs keep Table 5's order: each size's baseline, then its present work.
KORTHIKANTI_TABLE_3 = (
    ("22B", 8, 1, 8, 4, 4, 1),
    ("175B", 8, 8, 64, 64, 1, 3),
    ("530B", 8, 35, 280, 280, 1, 3),
    ("1T", 8, 64, 512, 512, 1, 1),
)
KORTHIKANTI_TABLE_5_S = {
    "22B": (1.42, 1.10),
    "175B": (18.13, 13.75),
    "530B": (49.05, 37.83),
    "1T": (94.42, 71.49),
}


def _korthikanti_run(size, tp, pp, n_gpus, batch, micro, n_virtual, present_work):
    from . import models

    m = models.get(f"GPT {size} (Korthikanti)")
    step_s = KORTHIKANTI_TABLE_5_S[size][1 if present_work else 0]
    flops = sc21_model_flops_per_iteration(batch, 2048, m.n_layers, m.d_model, m.vocab_size)
    policy = "selective" if present_work else "full"
    return PublishedRun(
        f"Megatron GPT {size}, {n_gpus:,} A100, {'selective + SP' if present_work else 'full recompute'}",
        m.name,
        "A100",
        _mesh(tp, pp, n_gpus),
        2048,
        batch,
        micro,
        flops / (step_s * n_gpus * 312e12),
        "korthikanti2022reducing",
        recompute=policy,
        note=f"microbatch {micro}, {n_virtual} virtual stage(s) per device; "
        + ("sequence parallelism and selective recomputation" if present_work else "full recomputation, no SP")
        + "; eager attention (2022, before FlashAttention in Megatron); no data parallelism",
        remat_policy=policy,
        schedule="interleaved" if n_virtual > 1 else "1f1b",
        n_virtual=n_virtual,
        attention="eager",
        sequence_parallel=present_work,
        state_recipe="megatron",
        step_s=step_s,
        step_basis="Table 5's iteration time, seconds",
        where=f"Table 3 ({size} layout), Table 5 ({size}, {'present work' if present_work else 'full recompute'})",
    )


SC21_RUNS = tuple(_sc21_run(*row) for row in SC21_TABLE_1)
MCORE_H100_RUNS = tuple(_mcore_run(*row) for row in MCORE_H100_TABLE)
KORTHIKANTI_RUNS = tuple(_korthikanti_run(*row, present) for row in KORTHIKANTI_TABLE_3 for present in (False, True))


# MaxText's TPU v5p performance table (maxtext-v5p-perf): MaxText/configs/v5p/README.md as
# commit 76bd53b0f44caf989c88189afadeb1062f9254f0 of google/maxtext (2023-12-15) published it, with the scripts that ran it
# (configs/v5p/<size>.sh) and the base.yml they read in the same commit. Per row, in the table's
# order: (size, slice, TFLOP/chip/sec, MFU) for one slice ("1x"); "v5p-N" counts TensorCores,
# N / 2 chips, one JAX device per chip. The README's "Runtime Performance Results" (04262f3c,
# 2024-03-22) reprints five of these rows unchanged (32B, 64B, 128B on v5p-256, 512B, 1024B on
# v5p-4096), prints other values for three without saying with which configuration, and adds
# two 1160B rows for which the repository never held a configuration: the table published with
# its scripts is the one used. The table's "2x" rows, the same jobs on two slices over the
# data-center network, are MAXTEXT_V5P_MULTISLICE_TABLE.
MAXTEXT_V5P_TABLE = (
    ("32B", "v5p-128", 328, 0.7147),
    ("64B", "v5p-128", 323, 0.7031),
    ("128B", "v5p-256", 315, 0.6868),
    ("128B", "v5p-512", 316, 0.6883),
    ("256B", "v5p-1024", 308, 0.6709),
    ("512B", "v5p-1024", 294, 0.6399),
    ("1024B", "v5p-2048", 254, 0.5535),
    ("1024B", "v5p-4096", 297, 0.6480),
)
# The three rows the 2024 reprint (the README's "Runtime Performance Results" at 04262f3c)
# prints with other values, as it prints them: (size, slice, TFLOP/chip/sec, MFU). Not used
# as runs: the reprint names no configuration. Its 1024B v5p-2048 row is not consistent with
# itself: 249 TFLOP/s is 54 % of v5p's 459, not the 64.05 % beside it.
MAXTEXT_V5P_REPRINTED = (
    ("128B", "v5p-512", 315, 0.6853),
    ("256B", "v5p-1024", 316, 0.6882),
    ("1024B", "v5p-2048", 249, 0.6405),
)

# How MaxText/configs/v5p/<size>.sh ran each size at 76bd53b0: (per_device_batch_size,
# remat_policy, ici_tensor_parallelism); every script sets ici_fsdp_parallelism=-1 (the rest of
# the slice), max_target_length=2048 and attention='flash', and leaves base.yml's
# dcn_data_parallelism -1 (one slice here), FP32 parameters with AdamW (16 bytes of state per
# parameter, the planner's default) and BF16 logits from the tied embedding (Embed.attend in the
# activation dtype) into a loss XLA compiles ('fused_bf16', as the other MaxText runs). The batch is
# sharded over every device (data_sharding), activations over fsdp only (activation_batch), so
# a tensor-parallel group of t chips trains t x per_device_batch_size sequences together. Each
# script sets the XLA flags that overlap collectives with computation
# (xla_tpu_enable_async_collective_fusion and its _multiple_steps, xla_enable_async_all_gather,
# xla_tpu_overlap_compute_collective_tc: configs/README.md describes each).
MAXTEXT_V5P_CONFIG = {
    "32B": (8, "minimal", 4),
    "64B": (4, "minimal", 4),
    "128B": (2, "minimal", 8),
    "256B": (2, "minimal", 8),
    "512B": (2, "full", 16),
    "1024B": (2, "full", 16),
}


def maxtext_tflops_per_device_step(model, seq_len, per_device_batch):
    """TFLOPs of one step on one device as MaxText counted them when it
    printed its v5p table (train.py calculate_training_tflops at 76bd53b0,
    after PaLM's appendix B): 6·N·s·b with N every parameter of the model
    (the embedding table, which is also the output layer, counted once, as
    calculate_num_params_from_pytree counts it) plus the causal half of the
    attention scores, 12·heads·layers·head_dim·s²·b / 2. In the book's count
    that is training.model_flops_per_token(model, s, causal=True) per token.
    Ref: maxtext-v5p-perf."""
    from . import models

    m = models.get(model)
    _validate.count("seq_len", seq_len)
    _validate.count("per_device_batch", per_device_batch)
    weights = 6 * models.param_count(m) * seq_len * per_device_batch
    attention = 12 * m.n_heads * m.n_layers * m.head_dim * seq_len**2 * per_device_batch / 2
    return (weights + attention) / 1e12


def _maxtext_slices(mesh, slices, chips):
    """(mesh, label, note, slices field) of a MaxText table row run on
    `slices` slices of `chips` chips: base.yml's dcn_data_parallelism -1
    makes the slices the data-parallel axis; one slice leaves the mesh as
    it is and the run's `slices` unset."""
    if slices == 1:
        return mesh, "", f"one slice of {chips} chips", None
    return {"dp": slices, **mesh}, f"{slices}x ", f"{slices} slices of {chips} chips over DCN", slices


def _maxtext_v5p_run(size, slice_type, tflops, _printed_mfu, slices=1):
    from . import hardware

    chips = int(slice_type.split("-")[1]) // 2
    per_device, remat, tp = MAXTEXT_V5P_CONFIG[size]
    model = f"MaxText {size}"
    # MaxText's 'full' is JAX's nothing_saveable (memory.RECOMPUTE), not Megatron's whole rerun
    recompute = "nothing_saveable" if remat == "full" else remat
    step_tflops = maxtext_tflops_per_device_step(model, 2048, per_device)
    mesh, label, spread, slices_field = _maxtext_slices({"fsdp": chips // tp, "tp": tp}, slices, chips)
    return PublishedRun(
        f"MaxText {size}, {label}{slice_type}",
        model,
        "TPU v5p",
        mesh,
        2048,
        per_device * chips * slices,
        per_device * tp,
        tflops * 1e12 / hardware.get("TPU v5p").bf16_dense_flops_per_s,
        "maxtext-v5p-perf",
        recompute=recompute,
        loss_logits="fused_bf16",
        note=f"{spread}; per_device_batch_size {per_device}, remat {remat}, ici_tensor_parallelism {tp}; MFU here "
        "is the TFLOP/s over 459",
        remat_policy=remat if remat != "full" else "full (nn.remat, policy None: nothing saveable)",
        tp_comm_overlap=True,
        slices=slices_field,
        tflops_per_s_per_device=tflops,
        published_peak_fraction=_printed_mfu,
        step_s=step_tflops / tflops,
        step_basis="MaxText's TFLOPs per device per step (6N + causal attention) / TFLOP/chip/sec",
        where=f"configs/v5p/README.md, {size} model, {slices}x {slice_type} row; configs/v5p/{size.lower()}.sh",
    )


MAXTEXT_V5P_RUNS = tuple(_maxtext_v5p_run(*row) for row in MAXTEXT_V5P_TABLE)


# MaxText's TPU v5e table (maxtext-v5e-perf): the README's "Runtime Performance Results" as commit
# e47fa1b5d377ee1043e663f1414024f4d0f12df0 of google/maxtext (2023-11-01) printed it, run by
# MaxText/configs/largest_job/<size>.sh of the same commit on the same base.yml model and parallel
# block as the v5p table (models.MAXTEXT_V5P_SHAPES). Per size, the one-slice row ("1x v5e-256",
# 256 chips, one TensorCore each): (size, slice, TFLOP/sec/chip, MFU). Its 2x to 32x rows, which
# span slices over the data-center network, are MAXTEXT_V5E_MULTISLICE_TABLE; the README prints
# the sizes as columns, read here row by row as printed.
MAXTEXT_V5E_TABLE = (
    ("16B", "v5e-256", 120, 0.6110),
    ("32B", "v5e-256", 132, 0.6686),
    ("64B", "v5e-256", 118, 0.5990),
    ("128B", "v5e-256", 110, 0.5606),
)
# configs/largest_job/<size>.sh at e47fa1b5: (per_device_batch_size, remat_policy,
# ici_tensor_parallelism); ici_fsdp_parallelism -1 (the whole slice) but for 128B (16, with
# tensor 16), max_target_length 2048, enable_flash_attention true, and the XLA flags that
# overlap collectives with computation (as the v5p scripts).
MAXTEXT_V5E_CONFIG = {
    "16B": (6, "full", 1),
    "32B": (4, "full", 1),
    "64B": (2, "full", 1),
    "128B": (1, "full", 16),
}


def maxtext_2023_tflops_per_device_step(model, seq_len, per_device_batch):
    """TFLOPs of one step on one device as MaxText counted them when it
    printed its v5e table (train.py calculate_training_tflops at e47fa1b5,
    before 64ee4e93 halved the attention term): 6·N·s·b plus the attention
    scores over the full square, 12·heads·layers·head_dim·s²·b; in the
    book's count training.model_flops_per_token(model, s) per token.
    Ref: maxtext-v5e-perf."""
    from . import models

    m = models.get(model)
    _validate.count("seq_len", seq_len)
    _validate.count("per_device_batch", per_device_batch)
    weights = 6 * models.param_count(m) * seq_len * per_device_batch
    attention = 12 * m.n_heads * m.n_layers * m.head_dim * seq_len**2 * per_device_batch
    return (weights + attention) / 1e12


def _maxtext_v5e_run(size, slice_type, tflops, printed_mfu, slices=1):
    from . import hardware

    chips = int(slice_type.split("-")[1])
    per_device, remat, tp = MAXTEXT_V5E_CONFIG[size]
    model = f"MaxText {size}"
    one_slice = {"fsdp": chips // tp, "tp": tp} if tp > 1 else {"fsdp": chips}
    mesh, label, spread, slices_field = _maxtext_slices(one_slice, slices, chips)
    return PublishedRun(
        f"MaxText {size}, {label}{slice_type}",
        model,
        "TPU v5e",
        mesh,
        2048,
        per_device * chips * slices,
        per_device * tp,
        tflops * 1e12 / hardware.get("TPU v5e").bf16_dense_flops_per_s,
        "maxtext-v5e-perf",
        recompute="nothing_saveable",
        loss_logits="fused_bf16",
        note=f"{spread}; per_device_batch_size {per_device}, remat {remat}, ici_tensor_parallelism {tp}; MFU here "
        "is the TFLOP/s over 197",
        remat_policy="full (nn.remat, policy None: nothing saveable)",
        tp_comm_overlap=True,
        slices=slices_field,
        tflops_per_s_per_device=tflops,
        published_peak_fraction=printed_mfu,
        step_s=maxtext_2023_tflops_per_device_step(model, 2048, per_device) / tflops,
        step_basis="MaxText's TFLOPs per device per step (6N + full-square attention) / TFLOP/sec/chip",
        where=f"README, Runtime Performance Results, TPU v5e, {slices}x v5e-256 row, {size}; "
        f"configs/largest_job/{size.lower()}.sh",
    )


MAXTEXT_V5E_RUNS = tuple(_maxtext_v5e_run(*row) for row in MAXTEXT_V5E_TABLE)


# Megatron Bridge's performance summary (megatron-bridge-perf-summary: docs/performance-summary.md
# at 17a381f9, the 26.04.01 NeMo container), its DGX-H100 pre-training rows for the models the
# book has: (model, GPUs, GBS, MBS, sequence length, TP, PP, CP, VP, tokens/s/GPU, model
# TFLOP/s/GPU), all FP8 with current scaling. The recipes of the same commit
# (scripts/performance/configs/llama/*_workload_base_configs.py, H100 FP8_CS V2;
# src/megatron/bridge/recipes/llama/llama3.py) keep no recomputation, use Megatron's distributed
# optimizer (ZeRO-1) with BF16 gradients (llama3_llm_pretrain.py and llama31_llm_pretrain.py set
# grad_reduce_in_fp32 False, so Megatron's gradient buffer takes the parameters' dtype: the
# planner's 'bf16_master' recipe, 16 bytes per parameter), sequence parallelism, TP
# communication overlapped with userbuffers, the gradient reduction overlapped, and for 405B count
# the embedding and the loss as pipeline layers (account_for_*_in_pipeline_split): 126 layers in
# 64 chunks of two, the first chunk's and the last's one layer short, as the planner's uneven
# pipeline takes them.
MEGATRON_BRIDGE_H100_TABLE = (
    ("LLaMA-3 70B", 64, 256, 1, 8192, 4, 8, 1, 5, 1664, 735),
    ("LLaMA-3 405B", 1024, 1536, 1, 8192, 8, 8, 2, 8, 328, 827),
)


# The table's precision as its recipes name it (scripts/performance/utils/precision.py): FP8 with
# current scaling (one scale per tensor) and MXFP8 (one E8M0 scale per 32 values, which Blackwell's
# tensor cores apply in the matmul: transformer-engine-mxfp8). Both multiply E4M3 operands at the
# FP8 peak, so the planner prices both as 'fp8'; what MXFP8 adds (the block scales, a copy quantized
# along the other dimension for the backward) is elementwise work a fitted η carries.
MEGATRON_BRIDGE_PRECISIONS = {
    "FP8": ("FP8_CS", "FP8 (current scaling)"),
    "MXFP8": ("FP8_MX", "MXFP8 (1x32 blocks, E8M0 scales; priced as FP8)"),
}
MEGATRON_BRIDGE_SYSTEMS = {
    "H100": "DGX-H100",
    "GB200 NVL72": "DGX-GB200",
    "GB300 NVL72": "DGX-GB300",
    "B200": "DGX-B200",
}


def _megatron_bridge_run(
    model,
    n_gpus,
    gbs,
    mbs,
    seq_len,
    tp,
    pp,
    cp,
    vp,
    tokens_per_s,
    tflops,
    accelerator="H100",
    printed="FP8",
    variant="V2",
    container="26.04.01",
):
    """A row of Megatron Bridge's summary (container 26.04.01, performance-summary.md) or of its
    archive (an earlier container, performance-summary-archive.md), run by the recipe `variant`.
    A row without pipeline stages (pp 1) runs plain 1F1B over data parallelism; TP overlap and
    sequence parallelism need TP above 1 (llama3_llm_pretrain.py: tp_comm_overlap=TP > 1)."""
    from . import hardware

    mesh = {"dp": n_gpus // (tp * pp * cp), "tp": tp, "cp": cp, "pp": pp}
    if cp == 1:
        del mesh["cp"]
    size = model.split()[-1]
    config, precision_note = MEGATRON_BRIDGE_PRECISIONS[printed]
    pipeline = f"{vp} virtual stages" if vp else "no pipeline"
    overlap = "; TP overlap (userbuffers)" if tp > 1 else ""
    document = "performance-summary.md" if container == "26.04.01" else "performance-summary-archive.md"
    return PublishedRun(
        f"Megatron Bridge Llama 3 {size}, {n_gpus:,} {accelerator}, {printed}",
        model,
        accelerator,
        mesh,
        seq_len,
        gbs,
        mbs,
        tflops * 1e12 / hardware.get(accelerator).bf16_dense_flops_per_s,
        "megatron-bridge-perf-summary",
        uneven_pipeline=model == "LLaMA-3 405B",
        note=f"{precision_note}; {pipeline}; distributed optimizer; no recomputation{overlap}",
        remat_policy="none",
        schedule="interleaved" if vp else "1f1b",
        n_virtual=vp,
        state_recipe="bf16_master",
        zero=1,
        precision="fp8",
        tp_comm_overlap=tp > 1,
        sequence_parallel=tp > 1,
        tokens_per_s_per_device=tokens_per_s,
        tflops_per_s_per_device=tflops,
        where=f"{document}, {container}, {model.replace('LLaMA-3', 'LLAMA3')} "
        f"{MEGATRON_BRIDGE_SYSTEMS[accelerator]} {printed} row; "
        f"llama3(1)_workload_base_configs.py {accelerator.split()[0]} {config} {variant}",
    )


MEGATRON_BRIDGE_H100_RUNS = tuple(_megatron_bridge_run(*row) for row in MEGATRON_BRIDGE_H100_TABLE)

# The same table's DGX-GB200 rows (GB200 NVL72, 72 GPUs in one NVLink domain) for the same
# models: (model, GPUs, GBS, MBS, sequence length, TP, PP, CP, VP, tokens/s/GPU, model
# TFLOP/s/GPU, precision as printed). The table's GBS and GPUs name the recipe: its V2 configs
# (70B: GBS 256, V1 128; 405B: 256 GPUs and GBS 1536, V1 128 and 64), whose settings beyond the
# mesh are the H100 rows' (no recomputation, the distributed optimizer, sequence parallelism, TP
# overlap with userbuffers). Appended after the H100 rows, so those keep their roles in the split.
# The planner prices three of them as they ran, one fitted on and two held out:
# - Llama 3 70B on 64 GPUs in MXFP8 (llama3_workload_base_configs.py GB200 FP8_MX V2: TP 2, PP 4,
#   VP 5, data parallelism 8). It calibrates GB200's η.
# Left out:
# - the NVFP4 rows: 4-bit matmuls, a precision the planner does not have.
# - Llama 3 70B in FP8 (GB200 FP8_CS V2): Megatron-FSDP with the activations of 40 of the 80
#   layers offloaded to the Grace CPU's memory (cpu_offloading_num_layers). The planner has no
#   host offloading on a GPU: it counts those activations in HBM, far more than a GPU holds, and
#   prices no transfer to the host.
# Held out:
# - Llama 3.1 405B in FP8 and MXFP8 (GB200 FP8_CS V2 and FP8_MX V2: TP 4, PP 16, VP 4 and 8, data
#   parallelism 4): MEGATRON_BRIDGE_GB200_HELD_OUT_TABLE. They fit as the planner counts memory (FP8
#   activations as Transformer Engine keeps them, memory.TE_FP8_SAVED_BYTES; BF16 gradients); they
#   came in after GB200's η was fitted on the 70B row, so they stay out of the split (in
#   HELD_OUT_RUNS) as the runs that check that one-run fit.
MEGATRON_BRIDGE_GB200_TABLE = (("LLaMA-3 70B", 64, 256, 1, 8192, 2, 4, 1, 5, 3840, 1699, "MXFP8"),)
MEGATRON_BRIDGE_GB200_HELD_OUT_TABLE = (
    ("LLaMA-3 405B", 256, 1536, 1, 8192, 4, 16, 1, 4, 832, 2065, "FP8"),
    ("LLaMA-3 405B", 256, 1536, 1, 8192, 4, 16, 1, 8, 800, 2004, "MXFP8"),
)


def _megatron_bridge_runs(accelerator, table, **recipe):
    """The runs of a table of one system's rows (the columns of the GB200 rows, the printed
    precision last); `recipe`: _megatron_bridge_run's variant and container where not 26.04.01's V2."""
    return tuple(_megatron_bridge_run(*row[:-1], accelerator=accelerator, printed=row[-1], **recipe) for row in table)


MEGATRON_BRIDGE_GB200_RUNS = _megatron_bridge_runs("GB200 NVL72", MEGATRON_BRIDGE_GB200_TABLE)
MEGATRON_BRIDGE_GB200_HELD_OUT_RUNS = _megatron_bridge_runs("GB200 NVL72", MEGATRON_BRIDGE_GB200_HELD_OUT_TABLE)

# The same table's DGX-GB300 rows (GB300 NVL72: Blackwell Ultra, 288 GB of HBM, 72 GPUs in one
# NVLink domain), in the same columns as the GB200 rows. Their recipes (GB300 V2 configs of the
# same files; llama3_llm_pretrain.py and llama31_llm_pretrain.py build GB300 as GB200: BF16
# gradients, no recomputation, the distributed optimizer, TP overlap with userbuffers; these configs
# set no CUDA graphs) are priced as GB200's are:
# - Llama 3 70B on 64 GPUs in MXFP8 (GB300 FP8_MX V2: TP 1, PP 4, VP 5, data parallelism 16),
#   the twin of GB200's calibration row. It calibrates GB300's η.
# Left out, as GB200's are: the NVFP4 rows (4-bit matmuls), and Llama 3 70B in FP8 (GB300 FP8_CS
# V2: Megatron-FSDP with 20 of the 80 layers' activations offloaded to the Grace CPU, which the
# planner neither counts off the GPU nor prices).
# Held out, as GB200's 405B rows are (they check the one-run fit):
# - Llama 3.1 405B in FP8 (GB300 FP8_CS V2: TP 4, PP 8, VP 4, data parallelism 8; the V2 config
#   turns V1's Megatron-FSDP and offloading off) and in MXFP8 (GB300 FP8_MX V2: TP 2, PP 8, CP 2,
#   VP 4, data parallelism 8).
MEGATRON_BRIDGE_GB300_TABLE = (("LLaMA-3 70B", 64, 256, 1, 8192, 1, 4, 1, 5, 4736, 2156, "MXFP8"),)
MEGATRON_BRIDGE_GB300_HELD_OUT_TABLE = (
    ("LLaMA-3 405B", 256, 1536, 1, 8192, 4, 8, 1, 4, 1024, 2599, "FP8"),
    ("LLaMA-3 405B", 256, 1536, 1, 8192, 2, 8, 2, 4, 960, 2442, "MXFP8"),
)


MEGATRON_BRIDGE_GB300_RUNS = _megatron_bridge_runs("GB300 NVL72", MEGATRON_BRIDGE_GB300_TABLE)
MEGATRON_BRIDGE_GB300_HELD_OUT_RUNS = _megatron_bridge_runs("GB300 NVL72", MEGATRON_BRIDGE_GB300_HELD_OUT_TABLE)

# DGX-B200 (eight B200 in one NVLink domain a node): the 26.04.01 table has no dense row for it
# (its B200 rows are mixtures of experts), but the same source's archive does
# (docs/performance-summary-archive.md at the same commit, "25.11 NeMo Container", System:
# DGX-B200), each row FP8 with current scaling and, in parentheses, MXFP8: (model, GPUs, GBS, MBS,
# sequence length, TP, PP, CP, VP (None: no pipeline), tokens/s/GPU, model TFLOP/s/GPU,
# precision). Their recipes are the V1 configs (the only B200 ones; the same at v0.2.1, the tag
# that first printed the 25.11 table): no recomputation, the distributed optimizer, BF16
# gradients; the 8B one TP 1 with CUDA graphs over the whole iteration, the 405B one TP overlap
# with userbuffers and the 405B uneven pipeline of the H100 row (128 layers in 64 chunks).
# - Llama 3 8B on 8 GPUs in MXFP8 (B200 FP8_MX V1: data parallelism 8, MBS 2), MXFP8 as
#   GB200's and GB300's calibration rows are. It calibrates B200's η.
# Held out (they check the one-run fit): the same 8B run in FP8 with current scaling (B200
#   FP8_CS V1), and Llama 3.1 405B on 128 GPUs in both precisions (B200 FP8_CS V1 and FP8_MX V1:
#   TP 4, PP 8, CP 2, VP 8, data parallelism 2).
# Not taken: the same rows of the 25.09 container (same recipes, an older container).
MEGATRON_BRIDGE_B200_TABLE = (("LLaMA-3 8B", 8, 128, 2, 8192, 1, 1, 1, None, 29521, 1519, "MXFP8"),)
MEGATRON_BRIDGE_B200_HELD_OUT_TABLE = (
    ("LLaMA-3 8B", 8, 128, 2, 8192, 1, 1, 1, None, 30624, 1576, "FP8"),
    ("LLaMA-3 405B", 128, 64, 1, 8192, 4, 8, 2, 8, 661, 1667, "FP8"),
    ("LLaMA-3 405B", 128, 64, 1, 8192, 4, 8, 2, 8, 624, 1576, "MXFP8"),
)


_B200_RECIPE = {"variant": "V1", "container": "25.11"}  # the archive's 25.11 rows, their V1 configs
MEGATRON_BRIDGE_B200_RUNS = _megatron_bridge_runs("B200", MEGATRON_BRIDGE_B200_TABLE, **_B200_RECIPE)
MEGATRON_BRIDGE_B200_HELD_OUT_RUNS = _megatron_bridge_runs("B200", MEGATRON_BRIDGE_B200_HELD_OUT_TABLE, **_B200_RECIPE)


# The same tables' rows for jobs spread over several slices that talk over the data-center
# network (DCN), each the one-slice job repeated, its batch with it: (size, slice, slices,
# TFLOP/chip/sec, MFU), in the order the tables print them (maxtext-v5p-perf, configs/v5p/README.md
# at 76bd53b0; maxtext-v5e-perf, README.md at e47fa1b5, sizes as columns, read row by row).
# base.yml's dcn_data_parallelism -1 makes the slices the data-parallel axis. They are not in
# VALIDATION_RUNS: the validation appendix sets them beside their one-slice rows, since the
# planner's DCN term does not account for what they lose (shardbook.validation.multislice_rows).
MAXTEXT_V5P_MULTISLICE_TABLE = (
    ("32B", "v5p-128", 2, 319, 0.6943),
    ("64B", "v5p-128", 2, 309, 0.6726),
    ("128B", "v5p-256", 2, 305, 0.6634),
    ("128B", "v5p-512", 2, 274, 0.5966),
    ("256B", "v5p-1024", 2, 289, 0.6299),
    ("512B", "v5p-1024", 2, 282, 0.6145),
    ("1024B", "v5p-2048", 2, 237, 0.5155),
    ("1024B", "v5p-4096", 2, 279, 0.6083),
)
MAXTEXT_V5E_MULTISLICE_TABLE = (
    ("16B", "v5e-256", 2, 117, 0.5937),
    ("32B", "v5e-256", 2, 128, 0.6481),
    ("64B", "v5e-256", 2, 112, 0.5666),
    ("128B", "v5e-256", 2, 110, 0.5582),
    ("16B", "v5e-256", 4, 117, 0.5914),
    ("32B", "v5e-256", 4, 126, 0.6410),
    ("64B", "v5e-256", 4, 110, 0.5585),
    ("128B", "v5e-256", 4, 108, 0.5493),
    ("16B", "v5e-256", 8, 115, 0.5827),
    ("32B", "v5e-256", 8, 125, 0.6367),
    ("64B", "v5e-256", 8, 108, 0.5496),
    ("128B", "v5e-256", 8, 104, 0.5293),
    ("16B", "v5e-256", 16, 111, 0.5656),
    ("32B", "v5e-256", 16, 123, 0.6226),
    ("64B", "v5e-256", 16, 105, 0.5329),
    ("128B", "v5e-256", 16, 100, 0.5086),
    ("16B", "v5e-256", 32, 108, 0.5465),
    ("32B", "v5e-256", 32, 119, 0.6040),
    ("64B", "v5e-256", 32, 99, 0.5018),
    ("128B", "v5e-256", 32, 91, 0.4625),
)
MULTISLICE_RUNS = tuple(
    _maxtext_v5p_run(size, slice_type, tflops, mfu, slices)
    for size, slice_type, slices, tflops, mfu in MAXTEXT_V5P_MULTISLICE_TABLE
) + tuple(
    _maxtext_v5e_run(size, slice_type, tflops, mfu, slices)
    for size, slice_type, slices, tflops, mfu in MAXTEXT_V5E_MULTISLICE_TABLE
)


# MosaicML's MPT benchmark table (llm-foundry-benchmarks): scripts/train/benchmarking/README.md of
# mosaicml/llm-foundry at 495218376830947dce625efabc4d86be7c47cc45, its "H100 80GB BF16" table,
# every row at sequence length 2,048, in the table's order: (size, GPUs, MFU %, microbatch,
# gradient accumulation, global batch in sequences, tokens/s, activation checkpointing). PyTorch
# FSDP, FULL_SHARD over every GPU (the planner's fsdp axis; weights gathered again for each
# microbatch), amp_bf16, llm-foundry's Triton FlashAttention (attn_impl 'triton', submit_benchmarks.py's
# default when the table was made: llm-foundry-benchmark-sweeps; priced as FlashAttention-2); activation
# checkpointing reruns each block's forward (the planner's 'full'). The table's MFU is
# (6·N + 6·layers·2·D·s) FLOPs per token, N with MPT's learned position table, over 989 TFLOP/s.
# Not validation runs: none calibrates or validates (PyTorch FSDP alone, which no fitted run trains with);
# chapter 97 sets them beside the planner as a held-out check, and the tests hold the bound and
# the memory to them as to every published run.
# tests/data/sources/llm-foundry-benchmarks-h100.md holds this table and the next as the README prints
# them, and test_validation checks every row here against it.
MPT_H100_TABLE = (
    ("70B", 64, 42.57, 8, 4, 2048, 66523, True),
    ("70B", 32, 36.15, 2, 16, 1024, 28242, True),
    ("30B", 32, 43.92, 14, 3, 1344, 73860, True),
    ("30B", 16, 43.07, 10, 3, 480, 36209, True),
    ("30B", 8, 38.11, 3, 21, 504, 16022, True),
    ("13B", 64, 39.86, 2, 1, 128, 307209, False),
    ("13B", 32, 39.95, 2, 1, 64, 153960, False),
    ("13B", 16, 39.58, 2, 1, 32, 76280, False),
    ("13B", 8, 39.79, 2, 1, 16, 38336, False),
    ("7B", 8, 46.44, 6, 1, 48, 85144, False),
    ("3B", 64, 40.8, 6, 3, 1152, 1441663, False),
    ("3B", 32, 41.7, 6, 3, 576, 736701, False),
    ("3B", 16, 43.73, 10, 3, 480, 386285, False),
    ("1B", 64, 40.85, 20, 1, 1280, 2841754, False),
    ("1B", 32, 41.52, 20, 1, 640, 1444183, False),
    ("1B", 16, 42.36, 20, 1, 320, 736596, False),
    ("1B", 8, 41.82, 14, 1, 112, 363645, False),
    ("760M", 32, 37.57, 24, 1, 768, 2175091, False),
    ("760M", 16, 37.89, 24, 1, 384, 1096819, False),
    ("760M", 8, 34.9, 24, 2, 384, 505177, False),
)


# The same README's other H100 BF16 table, "H100 80GB BF16 (Large Scale, >= 128 GPUs)": the same
# columns, the same MFU convention and the same models (NumParams equal to the first table's rows at
# 2,048 tokens), every row at 2,048 tokens with no gradient accumulation, on 128, 256 and 512 GPUs.
# Rows as above, and a ninth field, the table's Sharding Strategy: its 1B and 3B rows ran
# SHARD_GRAD_OP (PyTorch FSDP's ZeRO-2: gradients and optimizer state sharded, the weights gathered
# once for the forward and kept through the backward), which the planner prices as ZeRO-2 over a
# dp axis (with one microbatch a step, one all-gather and one reduce-scatter of the weights' bytes,
# as SHARD_GRAD_OP moves them); the rest FULL_SHARD, as the first table's. Held out as the first
# table's rows are (MPT_H100_RUNS holds both tables' runs). Its sweep (llm-foundry-benchmark-sweeps)
# asked for llm-foundry's Triton FlashAttention on 13B and 30B and the flash-attn package on the rest;
# the planner prices every row's scores as FlashAttention-2.
MPT_H100_LARGE_SCALE_TABLE = (
    ("70B", 512, 41.25, 8, 1, 4096, 515636, True, "FULL_SHARD"),
    ("70B", 256, 42.42, 8, 1, 2048, 265149, True, "FULL_SHARD"),
    ("70B", 128, 43.36, 8, 1, 1024, 135490, True, "FULL_SHARD"),
    ("30B", 512, 40.27, 8, 1, 4096, 1083366, True, "FULL_SHARD"),
    ("30B", 256, 40.89, 8, 1, 2048, 550022, True, "FULL_SHARD"),
    ("30B", 128, 41.85, 8, 1, 1024, 281491, True, "FULL_SHARD"),
    ("13B", 512, 41.12, 16, 1, 8192, 2535811, True, "FULL_SHARD"),
    ("13B", 256, 41.42, 16, 1, 4096, 1277214, True, "FULL_SHARD"),
    ("13B", 128, 42.18, 16, 1, 2048, 650264, True, "FULL_SHARD"),
    ("7B", 512, 42.2, 6, 1, 3072, 4951479, False, "FULL_SHARD"),
    ("7B", 256, 44.15, 6, 1, 1536, 2590548, False, "FULL_SHARD"),
    ("7B", 128, 45.71, 6, 1, 768, 1340830, False, "FULL_SHARD"),
    ("3B", 512, 39.24, 8, 1, 4096, 11092218, False, "SHARD_GRAD_OP"),
    ("3B", 256, 41.25, 8, 1, 2048, 5829686, False, "SHARD_GRAD_OP"),
    ("3B", 128, 42.43, 8, 1, 1024, 2998098, False, "SHARD_GRAD_OP"),
    ("1B", 512, 36.65, 12, 1, 6144, 20396905, False, "SHARD_GRAD_OP"),
    ("1B", 256, 39.15, 12, 1, 3072, 10894207, False, "SHARD_GRAD_OP"),
    ("1B", 128, 40.6, 12, 1, 1536, 5647854, False, "SHARD_GRAD_OP"),
)
MPT_TABLE_TITLES = {"main": "H100 80GB BF16", "large": "H100 80GB BF16 (Large Scale, >= 128 GPUs)"}
# PyTorch FSDP's sharding strategies as the planner prices them: the mesh axis and the ZeRO stage
_MPT_SHARDING = {"FULL_SHARD": ("fsdp", 0), "SHARD_GRAD_OP": ("dp", 2)}


def _mpt_run(
    size,
    n_gpus,
    mfu_percent,
    micro,
    accumulation,
    batch,
    tokens_per_s,
    checkpointing,
    sharding="FULL_SHARD",
    table="main",
    seq_len=2048,
):
    if micro * accumulation * n_gpus != batch:
        raise ValueError(f"batch: {size} on {n_gpus} GPUs: microbatch x accumulation x GPUs != {batch}")
    if sharding not in _MPT_SHARDING:
        raise ValueError(f"sharding: unknown strategy {sharding!r}; valid: {', '.join(_MPT_SHARDING)}")
    axis, zero = _MPT_SHARDING[sharding]
    title = MPT_TABLE_TITLES[table]
    length = "" if seq_len == 2048 else f", {seq_len:,} tokens"
    return PublishedRun(
        f"MPT {size}, {n_gpus} H100{length}",
        f"MPT {size}",
        "H100",
        {axis: n_gpus},
        seq_len,
        batch,
        micro,
        mfu_percent / 100,
        "llm-foundry-benchmarks",
        recompute="full" if checkpointing else "none",
        zero=zero,
        tokens_per_s_per_device=tokens_per_s / n_gpus,
        note=f"PyTorch FSDP {sharding} over {n_gpus} GPUs, amp_bf16; microbatch {micro}, "
        f"gradient accumulation {accumulation}",
        remat_policy="activation_checkpointing: every block" if checkpointing else "none",
        where=f"README, {title} table, {size.lower()} row at {seq_len} tokens on {n_gpus} GPUs",
    )


MPT_H100_MAIN_RUNS = tuple(_mpt_run(*row) for row in MPT_H100_TABLE)
MPT_H100_LARGE_SCALE_RUNS = tuple(_mpt_run(*row, table="large") for row in MPT_H100_LARGE_SCALE_TABLE)
MPT_H100_RUNS = MPT_H100_MAIN_RUNS + MPT_H100_LARGE_SCALE_RUNS


# The first table's other rows: eight GPUs at 512 to 65,536 tokens a sequence, each model's position
# table grown to the length (NumParams as printed), in the table's order: (size, tokens a sequence,
# GPUs, MFU %, microbatch, gradient accumulation, global batch in sequences, tokens/s, activation
# checkpointing), FULL_SHARD. Not in MPT_H100_RUNS (the held-out set keeps the 2,048-token rows both
# tables share): chapter 97 (sec-valid-held-out) prices them to show how the error moves with the
# sequence, where the scores' kernel (llm-foundry's Triton FlashAttention) weighs more.
MPT_H100_OTHER_LENGTHS_TABLE = (
    ("30B", 8192, 8, 29.92, 1, 21, 168, 11072, True),
    ("30B", 4096, 8, 35.86, 1, 21, 168, 14419, True),
    ("30B", 1024, 8, 38.76, 6, 21, 1008, 16672, True),
    ("13B", 32768, 8, 31.68, 1, 3, 24, 15812, True),
    ("13B", 16384, 8, 35.55, 3, 3, 72, 23881, True),
    ("13B", 4096, 8, 41.6, 10, 3, 240, 37740, True),
    ("13B", 1024, 8, 44.27, 40, 3, 960, 44019, True),
    ("7B", 65536, 8, 28.59, 1, 2, 16, 15654, True),
    ("7B", 32768, 8, 30.94, 2, 2, 32, 26550, True),
    ("7B", 8192, 8, 37.14, 8, 2, 128, 55481, True),
    ("7B", 4096, 8, 40.42, 16, 2, 256, 68893, True),
    ("7B", 1024, 8, 42.83, 64, 2, 1024, 81628, True),
    ("3B", 65536, 8, 26.81, 1, 2, 16, 26099, True),
    ("3B", 32768, 8, 28.84, 3, 6, 144, 46984, True),
    ("3B", 16384, 8, 36.34, 1, 6, 48, 89223, False),
    ("3B", 8192, 8, 40.31, 3, 6, 144, 132626, False),
    ("3B", 4096, 8, 42.31, 5, 6, 240, 167712, False),
    ("3B", 1024, 8, 46.2, 20, 6, 960, 216369, False),
    ("3B", 512, 8, 46.32, 40, 6, 1920, 223721, False),
    ("1B", 65536, 8, 26.34, 1, 2, 16, 44050, True),
    ("1B", 32768, 8, 33.54, 1, 4, 32, 96203, False),
    ("1B", 16384, 8, 35.22, 2, 4, 64, 157194, False),
    ("1B", 8192, 8, 37.73, 3, 4, 96, 233256, False),
    ("1B", 4096, 8, 40.26, 7, 4, 224, 308282, False),
    ("1B", 1024, 8, 41.95, 18, 4, 576, 391287, False),
    ("1B", 512, 8, 43.21, 56, 4, 1792, 418201, False),
    ("760M", 32768, 8, 31.84, 1, 2, 16, 130333, False),
    ("760M", 16384, 8, 33.57, 3, 2, 48, 222521, False),
    ("760M", 8192, 8, 34.84, 6, 2, 96, 334602, False),
    ("760M", 4096, 8, 35.83, 12, 2, 192, 443674, False),
    ("760M", 1024, 8, 39.76, 48, 2, 768, 628648, False),
    ("760M", 512, 8, 40.42, 96, 2, 1536, 669998, False),
)
MPT_H100_OTHER_LENGTH_RUNS = tuple(
    _mpt_run(size, gpus, mfu, micro, accumulation, batch, tokens_per_s, checkpointing, seq_len=seq_len)
    for size, seq_len, gpus, mfu, micro, accumulation, batch, tokens_per_s, checkpointing in MPT_H100_OTHER_LENGTHS_TABLE
)


# torchtitan's published benchmarks (torchtitan-benchmarks: benchmarks/ of pytorch/torchtitan, read at
# b5bcd76c66d0acb1a08b176d9639425bc55e0b2a), the second PyTorch FSDP source beside MPT: FSDP2 (each
# block its own unit, resharded after the forward but the last), BF16 weights gathered and gradients
# reduce-scattered in FP32 (torchtitan-job-config), TP with sequence parallelism, Float8 on the
# nn.Linear matmuls (torchao, tensorwise scaling). Every row at 8,192 tokens a sequence (seq_len of
# train_configs/llama3_8b.toml and llama3_70b.toml at 9dec370ad26b5f8e9a7333a0e36165018262644b, and of
# torchtitan/models/llama3/train_configs/ at 820504e20d1149fbf0b98c567af24c4b0433b22d), one
# microbatch a step (no gradient accumulation at either date); TPS/GPU is tokens per second per GPU
# (train.py at 9dec370: a rank's tokens over the step time and tp·cp·pp), read at the 90th iteration.
# Rows: (the file's date, TORCHTITAN_FILES; table; row as printed (2025-06: the column, vanilla or
# async TP, follows from async TP); model, mesh, local batch, checkpointing as memory.RECOMPUTE names
# it, precision, async TP, compiled, TPS/GPU, memory GiB as printed):
# - llama3_h100_202412_torchtitan.md (torchtitan 9dec370): Table 1 (8 GPUs) and Table 3 (128 GPUs),
#   "1D Parallelism (FSDP)", Llama 3.1 8B, local batch 2, selective checkpointing (the config's 'op'
#   policy: memory.RECOMPUTE 'torchtitan_op_sac'), the row "FSDP" (eager, BF16); its rows with
#   torch.compile are left out, since the planner cannot tell compiled kernels from eager ones and
#   would price the row with and without compile alike. Table 4, "2D parallelism (FSDP + TP) +
#   torch.compile + Float8", Llama 3.1 70B on 256 GPUs, FSDP 32 × TP 8, local batch 16, full
#   checkpointing, both rows (2D, 2D + AsyncTP).
# - asyncTP_llama3_h100_2025-06_torchtitan.md (torchtitan 820504e, the same hosts): Llama 3 70B on 256
#   GPUs (FSDP 32, TP 8, torch.compile, full AC, local batch 16) and Llama 3 8B on 64 GPUs (FSDP 8, TP
#   8, torch.compile, "per op SAC", local batch 12), vanilla and async TP, "None (bfloat16)" and "float8
#   tensorwise"; the "float8 rowwise" rows are left out (rowwise scaling, whose vanilla baseline the
#   file says is being fixed, is a recipe the planner's one FP8 speedup does not price).
# Left out: Table 2 and Table 6 (context parallelism at 32K to 262K tokens: the attention-FLOP
# convention and CP's assumed exposed share, which these rows could not separate from FSDP's), Table 5
# (405B with PP 8: the microbatches and the stages' split are not printed), and the 2025-06 H200 file
# of Trainy on WhiteFiber (Float8 weights gathered by FSDP in FP8, which the planner does not count).
# Hardware: Meta's Grand Teton hosts, H100 with 96GB HBM2e at 2.4 TB/s under a 500 W power limit,
# which no preset describes (H100's 80 GB would not hold Table 1's 82.4 GiB): hardware.RUN_HARDWARE's
# "H100 Grand Teton", priced at H100's η (transfer.SAME_DIE; the power limit unpriced).
# Held out (HELD_OUT_RUNS), as MPT: they came into the book after the planner's figures were fixed,
# only one run of their family calibrates (Meta's Llama 3 at 8K, FSDP beside TP, PP and CP), and
# their hardware is no calibrated preset's, so a fit on them would set H100's η from a part that
# runs below H100's clocks.
TORCHTITAN_FILES = {
    "2024-12": "llama3_h100_202412_torchtitan.md",
    "2025-06": "asyncTP_llama3_h100_2025-06_torchtitan.md",
}
_TT_8B, _TT_70B, _TT_SAC = "LLaMA-3 8B", "LLaMA-3 70B", "torchtitan_op_sac"
_TT_BF16, _TT_FP8 = "None (bfloat16)", "float8 tensorwise"  # the 2025-06 tables' rows; the column: vanilla or async TP
TORCHTITAN_H100_TABLE = (
    ("2024-12", "Table 1", "FSDP", _TT_8B, {"fsdp": 8}, 2, _TT_SAC, "bf16", False, False, 5762, 82.4),
    ("2024-12", "Table 3", "FSDP", _TT_8B, {"fsdp": 128}, 2, _TT_SAC, "bf16", False, False, 5605, 67.0),
    ("2024-12", "Table 4", "2D", _TT_70B, {"fsdp": 32, "tp": 8}, 16, "full", "fp8", False, True, 829, 71.9),
    ("2024-12", "Table 4", "2D + AsyncTP", _TT_70B, {"fsdp": 32, "tp": 8}, 16, "full", "fp8", True, True, 876, 67.6),
    ("2025-06", "Llama3 70b", _TT_BF16, _TT_70B, {"fsdp": 32, "tp": 8}, 16, "full", "bf16", False, True, 597.3, None),
    ("2025-06", "Llama3 70b", _TT_BF16, _TT_70B, {"fsdp": 32, "tp": 8}, 16, "full", "bf16", True, True, 652.4, None),
    ("2025-06", "Llama3 70b", _TT_FP8, _TT_70B, {"fsdp": 32, "tp": 8}, 16, "full", "fp8", False, True, 809.8, None),
    ("2025-06", "Llama3 70b", _TT_FP8, _TT_70B, {"fsdp": 32, "tp": 8}, 16, "full", "fp8", True, True, 942.4, None),
    ("2025-06", "Llama3 8b", _TT_BF16, _TT_8B, {"fsdp": 8, "tp": 8}, 12, _TT_SAC, "bf16", False, True, 4378, None),
    ("2025-06", "Llama3 8b", _TT_BF16, _TT_8B, {"fsdp": 8, "tp": 8}, 12, _TT_SAC, "bf16", True, True, 4809.4, None),
    ("2025-06", "Llama3 8b", _TT_FP8, _TT_8B, {"fsdp": 8, "tp": 8}, 12, _TT_SAC, "fp8", False, True, 5078.1, None),
    ("2025-06", "Llama3 8b", _TT_FP8, _TT_8B, {"fsdp": 8, "tp": 8}, 12, _TT_SAC, "fp8", True, True, 5570.1, None),
)  # fmt: skip
# The rows of Table 1 and Table 3 left out, "FSDP + torch.compile" (BF16): TPS/GPU as printed, beside
# the eager "FSDP" rows the runs take; the same model, mesh and batch, compiled.
TORCHTITAN_COMPILED_8B_TPS = {"Table 1": 6667, "Table 3": 6514}
TORCHTITAN_SEQ_LEN = 8192
TORCHTITAN_PEAK_FLOPS_PER_S = 989e12  # torchtitan/utils.py get_peak_flops at 9dec370: H100 SXM's, as its MFU divides


def torchtitan_flops_per_token(model, seq_len):
    """FLOPs per token as torchtitan counts them for its MFU (train.py, and
    get_num_params and get_num_flop_per_token of torchtitan/utils.py, at
    9dec370): 6·N, N without the input embedding table, plus 12·L·H·d_h·s
    for the attention scores over the full square ("we follow the
    convention and do not account for sparsity in causal attention")."""
    from . import models

    m = models.get(model)
    _validate.count("seq_len", seq_len)
    return 6 * (models.param_count(m) - m.vocab_size * m.d_model) + 12 * m.n_layers * m.n_heads * m.head_dim * seq_len


def _torchtitan_run(
    date, table, row, model, mesh, local_batch, recompute, precision, async_tp, compiled, tps, memory_gib
):
    n_gpus = 1
    for degree in mesh.values():
        n_gpus *= degree
    replicas = n_gpus // mesh.get("tp", 1)
    size = model.split()[-1]
    policy = "selective ('op')" if recompute == "torchtitan_op_sac" else recompute
    done = ", ".join(
        x
        for x in (
            "torch.compile" if compiled else "eager",
            "Float8 (tensorwise)" if precision == "fp8" else "BF16",
            "async TP" if async_tp else ("vanilla TP" if "tp" in mesh else ""),
        )
        if x
    )
    memory_note = f"; {memory_gib} GiB peak memory as printed" if memory_gib is not None else ""
    label = (
        f"{row}, {'Float8' if precision == 'fp8' else 'BF16'}"
        if date == "2024-12"
        else f"{'Float8' if precision == 'fp8' else 'BF16'}, {'async' if async_tp else 'vanilla'} TP"
    )
    return PublishedRun(
        f"torchtitan {date} Llama 3 {size}, {n_gpus} H100, {label}",
        model,
        "H100 Grand Teton",
        dict(mesh),
        TORCHTITAN_SEQ_LEN,
        replicas * local_batch,
        local_batch,
        torchtitan_flops_per_token(model, TORCHTITAN_SEQ_LEN) * tps / TORCHTITAN_PEAK_FLOPS_PER_S,
        "torchtitan-benchmarks",
        recompute=recompute,
        tokens_per_s_per_device=tps,
        precision=precision,
        tp_comm_overlap=async_tp,
        sequence_parallel=True if "tp" in mesh else None,
        note=f"FSDP2 over {mesh['fsdp']}{', TP ' + str(mesh['tp']) if 'tp' in mesh else ''}; {done}; "
        f"local batch {local_batch}; {policy} activation checkpointing{memory_note}",
        remat_policy=policy,
        where=f"{TORCHTITAN_FILES[date]}, {table}, row '{row}'"
        + ("" if date == "2024-12" else f", column '{'Async' if async_tp else 'Vanilla'} TP tokens/sec'"),
    )


TORCHTITAN_H100_RUNS = tuple(_torchtitan_run(*row) for row in TORCHTITAN_H100_TABLE)


# Two v5p recipes added to tpu-recipes in 7e88b6d (tpu-recipes-v5p: training/v5p/<model>/README.md
# of AI-Hypercomputer/tpu-recipes, 2025-10-08), run by MaxText at 3eb77db3 (2025-10-07)
# with benchmarks/maxtext_v5p_model_configs.py of that commit. Each README prints one line of
# the log its run wrote ("completed step: N, seconds: ..."), the measured step time used here.
# Both on v5p-1024 (512 chips), ici_fsdp_parallelism -1 (every chip), 8,192 tokens per
# sequence, flash attention, FP32 weights with AdamW (16 bytes per parameter), remat 'custom'.
# Not validation runs: they came into the book after the planner's figures were fixed, and
# chapter 97 sets them beside it as a check held out from everything, as the MPT runs. The
# other MaxText LLM recipes for v5p are left out: Llama 4 Scout and Maverick (no preset for the
# model), GPT-3 175B (trained in int8, quantization=int8), Mixtral 8x7B and Llama 2 7B (no log
# line). Offloading mlpwo (the 405B) changes nothing for a dense MLP, whose output the backward
# does not read; the splash attention kernel keeps its output and logsumexp under the name
# 'context', so offloading context spares the attention's rerun.
TPU_RECIPES_V5P_TABLE = (
    # (run, model, per_device_batch_size, remat as memory.RECOMPUTE names it, the log's seconds,
    # its total_weights (tokens per step), TFLOP/s/device and Tokens/s/device, the config, the
    # README's folder, what else the config sets)
    (
        "Llama 3.1 405B",
        "LLaMA-3 405B",
        2,
        "custom_offload_context_mlpwo",
        131.474,
        8_388_608,
        314.530,
        124.618,
        "llama3_1_405b_8192_v5p_1024",
        "Llama3.1-405B-MaxText",
        "the attention output and the MLP's output offloaded to host, the rest rematerialized; the "
        "loss over the vocabulary in 4 tiles (num_vocab_tiling)",
    ),
    (
        "DeepSeek-V3",
        "DeepSeek-V3",
        6,
        "custom_offload_input_out",
        90.668,
        25_165_824,
        152.415,
        542.108,
        "deepseek3_671b_v5p_1024",
        "DeepSeek3-671B-MaxText",
        "the layer input and out_proj offloaded to host, the rest rematerialized; dropless experts "
        "in grouped matmuls (megablox, sparse_matmul), no expert parallelism",
    ),
)


def _tpu_recipes_v5p_run(
    label, model, per_device, recompute, step_s, tokens, tflops, tokens_per_s, config, folder, config_notes
):
    from . import hardware

    chips, seq_len = 512, 8192
    if tokens != chips * per_device * seq_len:
        raise ValueError(f"tokens: {label}: {chips} chips x {per_device} x {seq_len} != total_weights {tokens}")
    from_step = tokens / (chips * step_s)
    if abs(from_step / tokens_per_s - 1) > 1e-4:
        raise ValueError(
            f"tokens_per_s: {label}: the log prints {tokens_per_s} per device, its step time gives {from_step:.3f}"
        )
    return PublishedRun(
        f"tpu-recipes {label}, v5p-1024",
        model,
        "TPU v5p",
        {"fsdp": chips},
        seq_len,
        chips * per_device,
        per_device,
        tflops * 1e12 / hardware.get("TPU v5p").bf16_dense_flops_per_s,
        "tpu-recipes-v5p",
        recompute=recompute,
        loss_logits="fused_bf16",
        tokens_per_s_per_device=tokens_per_s,
        tflops_per_s_per_device=tflops,
        note=f"per_device_batch_size {per_device}; {config_notes}",
        remat_policy=f"custom ({recompute})",
        step_s=step_s,
        step_basis=f"measured (the recipe's log: {step_s} s, total_weights {tokens:,})",
        where=f"training/v5p/{folder}/README.md; {config}",
    )


TPU_RECIPES_V5P_RUNS = tuple(_tpu_recipes_v5p_run(*row) for row in TPU_RECIPES_V5P_TABLE)


# The AMD seed's controlled sweep (DEEPSEEK2_16B_MI355X) as runs the planner can be held to: one
# eight-GPU MI355X node, MaxText on ROCm, the same workload on four FSDP x EP meshes. The seed gives
# the step time, TFLOP/s and tokens/s per device; tokens per step follow (16,384 per device, 131,072
# in all). It gives neither the sequence length nor the microbatch: the runs take 4,096 tokens in
# sequences of 4 per device, as the maintainers' check of the planner does, and no recomputation.
# In neither set of the split; MI355X's routed-expert efficiency is fitted on the two endpoints
# (fsdp 8, ep 8) and the stack's expert-exchange overlap read from the seed's profile of the sweep
# (planner.calibrate), so the leave-one-source-out table prices all four without those figures
# (transfer.held_out_fold).
def _amd_mi355x_run(mesh_run, seq_len=4096, per_device_seqs=4):
    from . import hardware

    n_devices = mesh_run.fsdp * mesh_run.ep
    tokens = mesh_run.tokens_per_s_per_device * mesh_run.step_s * n_devices  # the printed figures' rounding: 1e-3
    if abs(tokens / (n_devices * per_device_seqs * seq_len) - 1) > 1e-3:
        raise ValueError(
            f"tokens: the sweep's {tokens:,.0f} tokens per step are not {n_devices} x {per_device_seqs} x {seq_len}"
        )
    return PublishedRun(
        f"MaxText DeepSeek-V2-Lite, 8 MI355X, fsdp {mesh_run.fsdp} × ep {mesh_run.ep}",
        "DeepSeek-V2-Lite",
        "MI355X",
        {"fsdp": mesh_run.fsdp, "ep": mesh_run.ep},
        seq_len,
        n_devices * per_device_seqs,
        per_device_seqs,
        mesh_run.tflops_per_s_per_device * 1e12 / hardware.get("MI355X").bf16_dense_flops_per_s,
        mesh_run.source,
        tokens_per_s_per_device=mesh_run.tokens_per_s_per_device,
        tflops_per_s_per_device=mesh_run.tflops_per_s_per_device,
        loss_logits="fused_bf16",
        step_s=mesh_run.step_s,
        step_basis=f"measured (mean of post-warmup steps 10-29: {mesh_run.step_s} s)",
        note="sequence length and microbatch not published: 4,096 tokens, 4 sequences per device taken",
        where="Chapter 5, 'Successful measurements', the deepseek2-16b sweep",
    )


AMD_MI355X_RUNS = tuple(_amd_mi355x_run(r) for r in DEEPSEEK2_16B_MI355X)


# BLOOM 176B as BigScience trained it (bigscience-tr11-176b): Megatron-DeepSpeed on 48 nodes of
# eight A100 80GB at IDRIS's Jean Zay, train/tr11-176B-ml of bigscience-workshop/bigscience. The
# README's "Replica setup" gives TP 4, PP 12, DP 8 and MBS 2 on 384 GPUs; tr11-176B-ml.slurm as
# it ran on 48 nodes (1698fa0, the commit before the switch to 24 nodes) global batch 2,048
# sequences of 2,048 tokens, --checkpoint-activations with DeepSpeed's activation checkpointing
# (every layer's forward run again: the planner's 'full'), --bf16, ZERO_STAGE 0 with DeepSpeed's
# BF16_Optimizer, which "implements its own ZeRO Stage 1" and keeps an unsharded FP32 gradient
# buffer (the planner's 'megatron' recipe, 18 bytes, at zero 1), and --pp-partition-method
# 'type:transformer|embedding': the first and last stages hold 5 layers and the embedding, the
# rest 6, as the planner's uneven pipeline places 70 layers on 12 stages. DeepSpeed's pipeline
# engine runs its own 1F1B-like TrainSchedule and reduces the gradients after the last
# microbatch's backward (ReduceGrads at the schedule's final step, deepspeed/runtime/pipe/schedule.py),
# so nothing hides the reduction; the fused softmax kernels of 2022 keep the attention eager; no
# sequence parallelism, no TP overlap. The README's "Important checkpoints" prints the log line
# that ended the first epoch, at full batch, on 48 nodes: its elapsed time per iteration is the
# measured step. The log's TFLOPs count as SC21's equation 3 does (megatron/training.py of
# bigscience-workshop/Megatron-DeepSpeed since #251: the recomputed forward included, the
# padded vocabulary), sc21_flops_per_iteration. Not a validation run: it came into the book after
# the planner's figures were fixed, and chapter 97 sets it beside them, held out from everything.
# The planner prices a DGX A100 node (NVSwitch, eight HDR InfiniBand links); Jean Zay's nodes
# have "NVLink 4 inter-gpu connects, 4 OmniPath links" (the README), which it does not model.
BLOOM_TR11_LOG = {"iteration": 85376, "step_s": 104.70, "global_batch": 2048, "samples_per_s": 19.561, "tflops": 149.77}


def _bloom_run(log=BLOOM_TR11_LOG, tp=4, pp=12, dp=8, micro=2, seq_len=2048):
    from . import models

    m = models.get("BLOOM 176B")
    n_gpus, batch, step_s = tp * pp * dp, log["global_batch"], log["step_s"]
    tflops = sc21_flops_per_iteration(batch, seq_len, m.n_layers, m.d_model, m.vocab_size) / (n_gpus * step_s * 1e12)
    # the log's own figures agree with each other to their printed rounding
    if abs(tflops / log["tflops"] - 1) > 1e-4 or abs(batch / step_s / log["samples_per_s"] - 1) > 1e-4:
        raise ValueError(f"log: {log} is not one step of {batch} sequences on {n_gpus} GPUs in {step_s} s")
    model_flops = sc21_model_flops_per_iteration(batch, seq_len, m.n_layers, m.d_model, m.vocab_size)
    return PublishedRun(
        f"BLOOM 176B, {n_gpus} A100",
        m.name,
        "A100",
        {"tp": tp, "pp": pp, "dp": dp},
        seq_len,
        batch,
        micro,
        model_flops / (step_s * n_gpus * 312e12),
        "bigscience-tr11-176b",
        recompute="full",
        uneven_pipeline=True,
        note=f"Megatron-DeepSpeed, BF16; microbatch {micro}, DeepSpeed's pipeline schedule; every layer "
        "checkpointed; BF16_Optimizer (ZeRO-1 over DP, FP32 gradient buffer unsharded); gradients reduced "
        "after the last microbatch; eager attention with ALiBi; Jean Zay's Omni-Path network not modelled",
        remat_policy="full",
        schedule="1f1b",
        n_virtual=1,
        attention="eager",
        state_recipe="megatron",
        zero=1,
        grad_reduce_overlap=False,
        sequence_parallel=False,
        tflops_per_s_per_device=log["tflops"],
        step_s=step_s,
        step_basis=f"measured (the log's elapsed time per iteration at iteration {log['iteration']:,}: {step_s} s)",
        where="train/tr11-176B-ml/README.md ('Replica setup'; 'Important checkpoints', iteration "
        f"{log['iteration']}); tr11-176B-ml.slurm at 1698fa0",
    )


BLOOM_A100_RUNS = (_bloom_run(),)
# Megatron Bridge's DGX-H100 rows of two mixtures of experts (megatron-bridge-perf-summary,
# docs/performance-summary.md at 17a381f9, the 26.04.01 NeMo container), as printed: (model, GPUs,
# GBS, MBS, sequence length, TP, PP, VP, EP, tokens/s/GPU, model TFLOP/s/GPU); FSDP 0 and CP 1 in
# both rows, FP8 (current scaling). The recipes (scripts/performance/configs/qwen/
# qwen3_workload_base_configs.py and qwen3_llm_pretrain.py, src/megatron/bridge/recipes/qwen/
# qwen3_moe.py, same commit) run both with expert TP 1, no recomputation (recompute_granularity
# None), the distributed optimizer with FP32 main weights and Adam moments and BF16 gradients
# (grad_reduce_in_fp32 False: the planner's 'bf16_master' recipe), grouped GEMMs, permute fusion,
# and routing forced to balance ("required for token dropless"). Not validation runs: they came
# into the book after the planner's figures were fixed, and chapter 97 sets them beside it as a
# check held out from the split; since their
# source's Llama rows calibrate, leave-one-source-out prices them without that source.
# Left out: GPT OSS 120B (64 GPUs, BF16, TP 1, PP 4, EP 8: 5,824 tokens/s, 159 TFLOP/s), whose
# layers alternate 128-token sliding-window and full attention and carry attention sinks, neither
# of which the planner's attention models; Nemotron 3 Nano, a hybrid of Mamba and attention layers.
MEGATRON_BRIDGE_H100_MOE_TABLE = (
    ("Qwen3-30B-A3B", 16, 1024, 1, 4096, 1, 1, None, 16, 8960, 204),
    ("Qwen3-235B-A22B", 256, 8192, 1, 4096, 2, 8, 4, 32, 1696, 252),
)

# What each recipe sets beyond the table, and how the planner prices it: (the summary's heading,
# the workload config, tp_comm_overlap, the rest). The planner's ep axis is
# orthogonal to tp (planner.layout: the experts split over tp × ep, the tokens over ep); Megatron
# carves its EP group from a stage's TP × DP ranks with expert TP 1. The runs take ep = EP / TP:
# the same expert parameters per device and the same routed bytes per device, in the same share
# off the node. The dense weights are replicated over the ep ranks, as Megatron's DP replicates
# them (planner.search.PUBLISHED_LAYOUTS: dense_over_ep False).
_MEGATRON_BRIDGE_MOE_RECIPES = {
    "Qwen3-30B-A3B": (
        "Qwen3_30B_a3B",
        "QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1",
        True,
        "the flex dispatcher with HybridEP (on 32 SMs), which sends a token once to each node that holds one of its "
        "experts and forwards it over NVLink: priced as one copy per node over the network "
        "(planner.search.PUBLISHED_LAYOUTS: routing_node_limit 2, the nodes of the EP group, which restricts "
        "no routing); no overlap of the expert exchanges (moe_a2a_overlap False): priced exposed",
    ),
    "Qwen3-235B-A22B": (
        "Qwen3_235B_a22B",
        "QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V2",
        False,
        "EP 32 over TP 2 x DP 16 with expert TP 1 taken as tp 2 x ep 16: each expert split over the two TP "
        "ranks, its grouped GEMM at half the width on the same 4,096 rows a microbatch, and TP's gather and "
        "scatter around the MoE block, which expert TP 1 skips, counted; the alltoall dispatcher (one copy per "
        "routed expert, as the planner prices it); the expert exchanges overlapped across microbatches "
        "(moe_a2a_overlap True: overlap_moe_expert_parallel_comm, delay_wgrad_compute), an overlap the "
        "planner has no figure for on H100: priced exposed; 94 layers and the embedding and loss as one layer "
        "each in 32 chunks of three (account_for_*_in_pipeline_split)",
    ),
}


def _megatron_bridge_moe_run(model, n_gpus, gbs, mbs, seq_len, tp, pp, vp, ep, tokens_per_s, tflops):
    from . import hardware, models

    if ep % tp or (n_gpus // pp) % ep:
        raise ValueError(
            f"ep: {model}: EP {ep} must be a multiple of TP {tp} and divide the {n_gpus // pp} GPUs a stage"
        )
    mesh = {"dp": n_gpus // (pp * ep), "tp": tp, "ep": ep // tp, "pp": pp}
    mesh = {axis: degree for axis, degree in mesh.items() if degree > 1}
    heading, config, tp_comm_overlap, how = _MEGATRON_BRIDGE_MOE_RECIPES[model]
    virtual = f"; {vp} virtual stages" if vp else ""
    return PublishedRun(
        f"Megatron Bridge {model}, {n_gpus:,} H100, FP8",
        model,
        "H100",
        mesh,
        seq_len,
        gbs,
        mbs,
        tflops * 1e12 / hardware.get("H100").bf16_dense_flops_per_s,
        "megatron-bridge-perf-summary",
        uneven_pipeline=pp > 1 and models.get(model).n_layers % (pp * (vp or 1)) != 0,
        note=f"FP8 (current scaling); TP {tp}, PP {pp}, EP {ep}, expert TP 1{virtual}; distributed optimizer; "
        f"no recomputation; routing forced to balance; {how}",
        remat_policy="none",
        schedule="interleaved" if vp else "1f1b",
        n_virtual=vp,
        state_recipe="bf16_master",
        zero=1,
        precision="fp8",
        tp_comm_overlap=tp_comm_overlap,
        sequence_parallel=tp > 1,
        tokens_per_s_per_device=tokens_per_s,
        tflops_per_s_per_device=tflops,
        where=f"performance-summary.md, 26.04.01, {heading} DGX-H100 row; qwen3_workload_base_configs.py {config}",
    )


MEGATRON_BRIDGE_H100_MOE_RUNS = tuple(_megatron_bridge_moe_run(*row) for row in MEGATRON_BRIDGE_H100_MOE_TABLE)


# The one head-to-head of FSDP and expert parallelism on a fine-grained mixture of experts this book
# knows of: Qwen3-30B-A3B on one node of 8 B200, in one GitHub thread (pithtrain-issue-79). A user's
# torchtitan run, FSDP over the 8 GPUs (BF16, sequences of 8,192, 8 a microbatch, 64 a step, its
# selective 'op' checkpointing, the blocks and the loss compiled, the loss in eight chunks), at the
# three stable steps it printed; and PithTrain's maintainers' runs of their own framework (BF16,
# routing forced to balance and dropless, 1 sequence a microbatch, 1,024 a step, no recomputation).
# PithTrain's DP is FSDP2 with the experts sharded over it and every other weight over dp x ep
# (the planner's fsdp axis, dense_over_ep), and its DualPipeV schedule overlaps one microbatch's
# expert exchanges with another's computation (pithtrain-architecture). Two frameworks, two batch
# geometries, one node: not fitted on, not in the validation tables; chapter 97 sets them beside
# the planner (sec-valid-bridge-moe).
QWEN3_B200_TORCHTITAN_STEPS_TOKENS_PER_S = (19_410.0, 19_530.0, 19_520.0)
QWEN3_B200_TORCHTITAN_PEAK_GIB = 141.79
# (PithTrain's PP-DP-EP label, the planner's mesh, tokens/s per GPU); PithTrain runs DualPipeV
# at every pipeline depth (at one stage it changes nothing the planner prices)
QWEN3_B200_PITHTRAIN_TABLE = (
    ("PP1-DP2-EP4", {"fsdp": 2, "ep": 4}, 20_300.0),
    ("PP2-DP1-EP4", {"ep": 4, "pp": 2}, 19_740.0),
    ("PP1-DP1-EP8", {"ep": 8}, 19_400.0),
)
# PithTrain's own PP2-DP1-EP4 recipe in FP8 (tokens/s per GPU): the reporter's run, its routing left
# to the data (a load-balancing loss of 1.87, "approximately 17.5k"), and the maintainer's with the
# routing forced to balance; the maintainer names routing balance first among the reasons for the gap
QWEN3_B200_PITHTRAIN_FP8_TOKENS_PER_S = {"as routed": 17_500.0, "forced to balance": 18_200.0}


def _derived_mfu(model, accelerator, seq_len, tokens_per_s):
    """Model FLOPs per token (training.model_flops_per_token) times
    tokens/s over the accelerator's dense BF16 peak: for a source that
    prints tokens/s and no MFU."""
    from . import hardware, training

    return (
        training.model_flops_per_token(model, seq_len) * tokens_per_s / hardware.get(accelerator).bf16_dense_flops_per_s
    )


def _qwen3_b200_head_to_head():
    model, seq_len = "Qwen3-30B-A3B", 8192
    steps = QWEN3_B200_TORCHTITAN_STEPS_TOKENS_PER_S
    mean = sum(steps) / len(steps)
    torchtitan = PublishedRun(
        "torchtitan Qwen3-30B-A3B, 8 B200, FSDP 8",
        model,
        "B200",
        {"fsdp": 8},
        seq_len,
        64,
        8,
        _derived_mfu(model, "B200", seq_len, mean),
        "pithtrain-issue-79",
        recompute="torchtitan_op_sac",
        loss_logits="chunked_fp32_8",
        tokens_per_s_per_device=mean,
        note=f"BF16; selective ('op') checkpointing; the blocks and the loss compiled; the loss in eight chunks; "
        f"{QWEN3_B200_TORCHTITAN_PEAK_GIB} GiB peak; tokens/s the mean of its three stable steps; MFU derived",
        remat_policy="selective ('op')",
        where="the issue's first comment (2026-07-22)",
    )
    pithtrain = tuple(
        PublishedRun(
            f"PithTrain Qwen3-30B-A3B, 8 B200, {label}",
            model,
            "B200",
            mesh,
            seq_len,
            1024,
            1,
            _derived_mfu(model, "B200", seq_len, tokens_per_s),
            "pithtrain-issue-79",
            tokens_per_s_per_device=tokens_per_s,
            note="BF16; routing forced to balance, dropless; no recomputation; DualPipeV overlaps the expert "
            "exchanges; MFU derived",
            remat_policy="none",
            schedule="dualpipe",
            where="a maintainer's comment (2026-07-29)",
        )
        for label, mesh, tokens_per_s in QWEN3_B200_PITHTRAIN_TABLE
    )
    return (torchtitan, *pithtrain)


QWEN3_B200_HEAD_TO_HEAD = _qwen3_b200_head_to_head()


def one_slice_run(run):
    """The one-slice run of MULTISLICE_RUNS's `run`: the same size on the
    same slice, from VALIDATION_RUNS."""
    if not isinstance(run, PublishedRun) or not run.slices:
        raise ValueError(f"run: must be one of MULTISLICE_RUNS, got {getattr(run, 'name', run)!r}")
    name = run.name.replace(f"{run.slices}x ", "")
    for candidate in VALIDATION_RUNS:
        if candidate.name == name:
            return candidate
    raise ValueError(f"run: no one-slice run {name!r} in VALIDATION_RUNS")


def _with_llama3_step(run):
    """A Llama 3 run with its step time from its TFLOP/s per GPU: model
    FLOPs of the step (6·N·tokens plus attention scores over the full
    square, the PaLM/Megatron count) over GPUs × TFLOP/s."""
    from . import training

    flops = training.model_flops_per_token(run.model, run.seq_len) * run.global_tokens
    return replace(
        run,
        step_s=flops / (run.n_devices * run.tflops_per_s_per_device * 1e12),
        step_basis="model FLOPs per step (6N + full-square attention) / (GPUs x TFLOP/s per GPU)",
    )


PUBLISHED_RUNS = tuple(_with_llama3_step(run) if run.source == "dubey2024llama3" else run for run in PUBLISHED_RUNS)

# Every published run the validation appendix sets beside the planner.
VALIDATION_RUNS = (
    PUBLISHED_RUNS
    + SC21_RUNS
    + MCORE_H100_RUNS
    + KORTHIKANTI_RUNS
    + MAXTEXT_V5P_RUNS
    + MAXTEXT_V5E_RUNS
    + MEGATRON_BRIDGE_H100_RUNS
    + MEGATRON_BRIDGE_GB200_RUNS
    + MEGATRON_BRIDGE_GB300_RUNS
    + MEGATRON_BRIDGE_B200_RUNS
)


# Llama 3 405B's long-context stage (dubey2024llama3, Table 4, row 3): 16,384 GPUs, TP 8, CP 16,
# PP 16, DP 8, sequences of 131,072, 16 sequences a data-parallel rank (16M tokens a step), 380
# TFLOP/s per GPU. CP gathers K and V over the CP group and computes the local queries against them
# (§3.3.2), as the planner's cp axis prices it. The step time follows from the TFLOP/s as for the
# other two rows (full-square attention FLOPs; torchtitan's MFU count, "we follow the convention and
# do not account for sparsity in causal attention", is the same). At 131,072 tokens the attention
# scores are more of the step's FLOPs than the weights' matmuls, so the reading decides this run far
# more than the 8K rows: counted causally, its step would be 29 % shorter (transfer.READINGS shows
# both). Held out of the split: the source's 8K rows calibrate H100, and leave-one-source-out prices
# this row, as theirs, by the fit without them.
LLAMA3_LONG_CONTEXT_RUNS = tuple(
    _with_llama3_step(run)
    for run in (
        PublishedRun(
            "Llama 3 405B, 16,384 H100, 131K context",
            "LLaMA-3 405B",
            "H100",
            {"tp": 8, "cp": 16, "pp": 16, "fsdp": 8},
            131072,
            128,
            1,
            0.38,
            "dubey2024llama3",
            uneven_pipeline=True,
            note=f"380 TFLOP/s per GPU; {_LLAMA3_TAKEN}",
            remat_policy="none",
            schedule="interleaved",
            tflops_per_s_per_device=380,
            where="Table 4, row 3 (16,384 GPUs, TP 8, CP 16, PP 16, DP 8, seq. len. 131,072, batch size/DP 16)",
        ),
    )
)


# The runs held out from the split (in neither set), which the planner is held to with the book's
# own figures: MosaicML's two MPT tables on H100, torchtitan's benchmarks, tpu-recipes' 2025 v5p jobs, the AMD seed's sweep (whose own
# figures, MI355X's η and overlap, leave-one-source-out leaves out: transfer.held_out_fold),
# BigScience's BLOOM on Megatron-DeepSpeed, Megatron Bridge's Qwen3 MoE rows on H100 and its Llama
# 3.1 405B rows on GB200, GB300 and B200 (with B200's 8B run in FP8), and Llama 3's long-context row
# (whose sources' other rows calibrate: leave-one-source-out prices them without that source).
HELD_OUT_RUNS = (
    MPT_H100_RUNS
    + TORCHTITAN_H100_RUNS
    + TPU_RECIPES_V5P_RUNS
    + AMD_MI355X_RUNS
    + BLOOM_A100_RUNS
    + MEGATRON_BRIDGE_H100_MOE_RUNS
    + MEGATRON_BRIDGE_GB200_HELD_OUT_RUNS
    + MEGATRON_BRIDGE_GB300_HELD_OUT_RUNS
    + MEGATRON_BRIDGE_B200_HELD_OUT_RUNS
    + LLAMA3_LONG_CONTEXT_RUNS
)


# The software stack family (a key of transfer.STACK_FAMILIES) each source's runs trained with:
# the band a plan carries is its family's (transfer), and so is the attention kernel the planner
# prices on Hopper (planner.calibrate.ATTENTION_KERNEL_OF_STACK, through search.run_options).
STACK_OF_SOURCE = {
    "narayanan2021megatron": "megatron",
    "korthikanti2022reducing": "megatron",
    "megatron-lm-readme": "megatron",
    "megatron-bridge-perf-summary": "megatron",
    # Meta trained Llama 3 on its own PyTorch stack (FSDP with TP, PP and CP), not Megatron-LM
    "dubey2024llama3": "pytorch",
    "llm-foundry-benchmarks": "pytorch",
    # torchtitan: PyTorch's own FSDP2, TP and Float8 (held out, measured.TORCHTITAN_H100_RUNS)
    "torchtitan-benchmarks": "pytorch",
    "maxtext-tiering": "maxtext",
    "maxtext-v5p-perf": "maxtext",
    "maxtext-v5e-perf": "maxtext",
    "tpu-recipes-v5p": "maxtext",
    # the AMD seed's sweep ran MaxText on ROCm
    "scale-your-model-amd": "maxtext",
    "deepseek2024v3": "deepseek",
    # BigScience trained BLOOM with its fork of Megatron-DeepSpeed: DeepSpeed's pipeline engine and optimizer
    "bigscience-tr11-176b": "deepspeed",
}


def run_named(name):
    """The published run called `name` (ValueError listing the names otherwise)."""
    for run in VALIDATION_RUNS:
        if run.name == name:
            return run
    raise ValueError(f"name: unknown run {name!r}; known: {', '.join(r.name for r in VALIDATION_RUNS)}")


_validate.guard_module(globals())
