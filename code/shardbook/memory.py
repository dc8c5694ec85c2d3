"""Memory per device: the persistent training state (weights, gradients,
master weights, optimizer state) under data parallelism and ZeRO/FSDP, and
the activations a transformer layer keeps for its backward pass.

State: `state_bytes_per_device` is the book's original form (bytes per
parameter as arguments; defaults BF16 weights and gradients and 12 bytes of
FP32 master plus Adam moments); `StateRecipe` and `state_breakdown_bytes`
name what frameworks actually keep (Megatron's FP32 gradient buffers: 18
bytes per parameter) and split it by ZeRO stage. Activations:
`activation_bytes_per_layer` counts tensor by tensor as Korthikanti et al.
do, with FlashAttention-style kernels by default (no s² probabilities), the
recomputation policies of Megatron and MaxText, and what MaxText offloads to
host memory. Gather buffers, communication buffers and allocator overhead
are not included.
FP8 (`precision`): the tensors Transformer Engine saves in one byte
(TE_FP8_SAVED_BYTES) and its FP8 weights (te_fp8_weight_bytes).
Ref: rajbhandari2020zero, korthikanti2022reducing, dao2022flashattention,
megatron-distrib-optimizer, maxtext, distributed-training-notes,
transformer-engine, megatron-core-fp8.
"""

import functools
import math
import numbers
from dataclasses import dataclass

from . import _validate, models, pipeline

SCHEMES = ("dp", "zero1", "zero2", "zero3", "fsdp")

ADAM_MOMENT_BYTES = 8  # two FP32 moments
FP32_MASTER_BYTES = 4
ADAM_WITH_MASTER_BYTES = ADAM_MOMENT_BYTES + FP32_MASTER_BYTES


def state_bytes_per_device(n_params, scheme, n_shards, param_bytes=2, grad_bytes=2, optimizer_bytes=12):
    """Bytes of parameters, gradients and optimizer state on one device.

    ZeRO partitions cumulatively (rajbhandari2020zero): zero1 shards the
    optimizer state over `n_shards` devices, zero2 also the gradients, zero3
    (and FSDP's full shard) also the parameters. dp replicates everything.
    """
    _validate.non_negative("n_params", n_params)
    _validate.choice("scheme", scheme, SCHEMES)
    _validate.count("n_shards", n_shards)
    _validate.non_negative("param_bytes", param_bytes)
    _validate.non_negative("grad_bytes", grad_bytes)
    _validate.non_negative("optimizer_bytes", optimizer_bytes)
    n = n_shards
    p, g, o = n_params * param_bytes, n_params * grad_bytes, n_params * optimizer_bytes
    if scheme == "dp":
        return p + g + o
    if scheme == "zero1":
        return p + g + o / n
    if scheme == "zero2":
        return p + (g + o) / n
    return (p + g + o) / n  # zero3 and fsdp


def max_params_replicated(hbm_bytes, bytes_per_param):
    """The most parameters whose state fits one device when replicated."""
    _validate.positive("hbm_bytes", hbm_bytes)
    _validate.positive("bytes_per_param", bytes_per_param)
    return hbm_bytes / bytes_per_param


def checkpointed_activation_bytes(tokens, d_model, d_ff, n_layers, bytes_per_element=2):
    """Activations kept when checkpointing after the three big matmuls of each
    layer: two [B, F] and one [B, D] per layer, 2·L·B·(D + 2F) bytes in BF16.
    Ref: scaling-book-training."""
    _validate.non_negative("tokens", tokens)
    for name, value in (("d_model", d_model), ("d_ff", d_ff), ("n_layers", n_layers)):
        _validate.count(name, value)
    _validate.positive("bytes_per_element", bytes_per_element)
    return bytes_per_element * n_layers * tokens * (d_model + 2 * d_ff)


def min_shards_to_fit(n_params, scheme, hbm_bytes, param_bytes=2, grad_bytes=2, optimizer_bytes=12, max_shards=1 << 20):
    """Smallest number of shards for which the persistent state fits in
    `hbm_bytes`, or None if it never fits within `max_shards` (dp, or a
    replicated floor at or above the HBM size). Solved in closed form (the
    state falls as c + s/n), so any finite input answers at once.
    Activations and buffers are not counted."""
    _validate.non_negative("n_params", n_params)
    _validate.choice("scheme", scheme, SCHEMES)
    _validate.positive("hbm_bytes", hbm_bytes)
    _validate.non_negative("param_bytes", param_bytes)
    _validate.non_negative("grad_bytes", grad_bytes)
    _validate.non_negative("optimizer_bytes", optimizer_bytes)
    _validate.count("max_shards", max_shards)

    def fits(n):
        return state_bytes_per_device(n_params, scheme, n, param_bytes, grad_bytes, optimizer_bytes) <= hbm_bytes

    if fits(1):
        return 1
    if scheme == "dp":
        return None
    floor = {"zero1": n_params * (param_bytes + grad_bytes), "zero2": n_params * param_bytes}.get(scheme, 0)
    if floor >= hbm_bytes:
        return None
    sharded = state_bytes_per_device(n_params, scheme, 1, param_bytes, grad_bytes, optimizer_bytes) - floor
    estimate = sharded / (hbm_bytes - floor)
    if estimate > max_shards:
        return None
    n = max(1, math.ceil(estimate))
    for _ in range(4):  # float rounding of the estimate: step to the exact smallest n
        if not fits(n):
            n += 1
        elif n > 1 and fits(n - 1):
            n -= 1
    if not fits(n) or (n > 1 and fits(n - 1)):
        raise ValueError("min_shards_to_fit: the inputs are too large to solve exactly in floating point")
    return n if n <= max_shards else None


# --- state recipes --------------------------------------------------------------


@dataclass(frozen=True)
class StateRecipe:
    """Bytes per parameter a training framework keeps between steps: the
    weights the forward pass reads, the gradient buffer, an FP32 master copy
    (0 if the weights are the master) and the optimizer state (Adam's two
    moments). `source` is a references.bib key."""

    name: str
    weight_bytes: float
    gradient_bytes: float
    master_bytes: float
    optimizer_bytes: float
    source: str

    @property
    def total_bytes(self):
        """Bytes per parameter, replicated (no ZeRO)."""
        return self.weight_bytes + self.gradient_bytes + self.master_bytes + self.optimizer_bytes


STATE_RECIPES = {
    # Megatron-LM with --bf16: BF16 weights, FP32 main-gradient buffers
    # (accumulate-and-reduce in FP32), FP32 main params, two FP32 Adam
    # moments; its table gives 18 bytes, and 6 + 12/d with the distributed
    # optimizer (ZeRO-1: master and moments sharded)
    "megatron": StateRecipe("megatron", 2, 4, 4, 8, "megatron-distrib-optimizer"),
    # ZeRO's mixed-precision Adam: FP16/BF16 weights and gradients, an FP32
    # master copy and two FP32 moments, 2 + 2 + 12 = 16 bytes (their "K = 12")
    "bf16_master": StateRecipe("bf16_master", 2, 2, 4, 8, "rajbhandari2020zero"),
    # MaxText's defaults: weight_dtype and grad_dtype float32 (the weights
    # are their own master), Adam moments in the weight dtype: 4 + 4 + 8
    "fp32": StateRecipe("fp32", 4, 4, 0, 8, "maxtext"),
    # everything BF16: MaxText with weight_dtype bfloat16 and grad_dtype
    # bfloat16 (mu_dtype inherits the weight dtype): 2 + 2 + 4
    "pure_bf16": StateRecipe("pure_bf16", 2, 2, 0, 4, "maxtext"),
    # DeepSeek-V3 (§3.3.3): BF16 weights, "master weights ... and gradients (used for batch
    # size accumulation) are still retained in FP32", AdamW's moments in BF16: 2 + 4 + 4 + 4
    "deepseek_v3": StateRecipe("deepseek_v3", 2, 4, 4, 4, "deepseek2024v3"),
}

ZERO_STAGES = (0, 1, 2, 3)

# The layers' linear weights under Transformer Engine's FP8. Megatron Bridge's FP8 recipes hold
# them in FP8 only (mixed_precision.py, bf16_with_fp8_current_scaling_mixed: fp8_param_gather =
# True, which scripts/performance/utils/precision.py gives every fp8_cs run, Megatron-Bridge at
# 17a381f9), the FP32 master in the optimizer: one byte each, and a transposed copy where the FP8
# GEMM takes only the TN layout: TE's post_all_gather_processing (tensor/utils.py at d0067d0d)
# calls _create_transpose unless is_non_tn_fp8_gemm_supported() (utils.py: compute capability
# 10.x, 11.x or 13+, the Blackwell parts), and float8_tensor.py backs both usages with one
# buffer there. Megatron-LM's default (fp8_param_gather off) keeps the BF16 weights and caches
# their FP8 copy, row-wise and column-wise, across microbatches (linear.py: `_fp8_workspaces`,
# refreshed on the first microbatch).
FP8_NON_TN_GEMM_ACCELERATORS = ("B200", "GB200 NVL72", "GB300 NVL72")  # sm100/sm103
FP8_WEIGHTS = ("primary", "cached")


def te_fp8_weight_bytes(non_tn_gemm, fp8_weights="primary"):
    """Bytes per parameter of a transformer layer's linear weight under
    Transformer Engine's FP8: 'primary' (Megatron Bridge's FP8 recipes,
    fp8_param_gather): the FP8 weight, 1 byte, plus its 1-byte transpose
    unless the accelerator's FP8 GEMM takes non-TN layouts (`non_tn_gemm`,
    Blackwell): 2 on Hopper, 1 on Blackwell. 'cached' (Megatron-LM's
    default): the BF16 weight, 2, and TE's cached FP8 copy beside it: 4 on
    Hopper, 3 on Blackwell. Ref: transformer-engine, megatron-bridge-perf-summary."""
    if not isinstance(non_tn_gemm, bool):
        raise ValueError(f"non_tn_gemm: must be True or False, got {non_tn_gemm!r}")
    _validate.choice("fp8_weights", fp8_weights, FP8_WEIGHTS)
    fp8 = 1 if non_tn_gemm else 2
    return fp8 if fp8_weights == "primary" else 2 + fp8


def state_recipe(recipe):
    """The StateRecipe called `recipe` (or `recipe` itself if it is one)."""
    if isinstance(recipe, StateRecipe):
        return recipe
    if not isinstance(recipe, str) or recipe not in STATE_RECIPES:
        raise ValueError(f"recipe: unknown value {recipe!r}; valid: {', '.join(STATE_RECIPES)}")
    return STATE_RECIPES[recipe]


def check_zero(zero):
    """The ZeRO stage `zero` as a Python int, or a ValueError naming `zero`
    and the valid stages. The one rule every path uses (this module, the
    planner, measured.PublishedRun): an integer in ZERO_STAGES; numpy
    integers count, a bool, a float (even 1.0) or a string ("1") does not.
    Stage 1 shards the master weights and optimizer state over the
    data-parallel ranks, 2 the gradients too, 3 the weights too (what an
    fsdp axis does). Ref: rajbhandari2020zero."""
    if not isinstance(zero, numbers.Integral) or isinstance(zero, bool) or int(zero) not in ZERO_STAGES:
        stages = ", ".join(map(str, ZERO_STAGES))
        raise ValueError(
            f"zero: must be one of {stages} (the ZeRO stage over the data-parallel ranks, an integer), got {zero!r}"
        )
    return int(zero)


def state_breakdown_bytes(params_per_device, recipe="megatron", zero=0, zero_shards=1):
    """Persistent state on one device, by kind, in bytes: a dict with
    "weights", "gradients", "master_weights" and "optimizer_state" for
    `params_per_device` parameters (those left after tensor, pipeline and
    expert splits) under `recipe` (a STATE_RECIPES name or a StateRecipe).
    ZeRO over `zero_shards` data-parallel ranks: stage 1 shards the master
    weights and optimizer state (Megatron's distributed optimizer is stage
    1: 6 + 12/d bytes for its recipe), stage 2 the gradients too, stage 3
    (FSDP) the weights too. Ref: rajbhandari2020zero,
    megatron-distrib-optimizer."""
    _validate.non_negative("params_per_device", params_per_device)
    r = state_recipe(recipe)
    zero = check_zero(zero)
    n = _validate.count("zero_shards", zero_shards)
    p = params_per_device
    return {
        "weights": p * r.weight_bytes / (n if zero >= 3 else 1),
        "gradients": p * r.gradient_bytes / (n if zero >= 2 else 1),
        "master_weights": p * r.master_bytes / (n if zero >= 1 else 1),
        "optimizer_state": p * r.optimizer_bytes / (n if zero >= 1 else 1),
    }


# --- activations ---------------------------------------------------------------


@dataclass(frozen=True)
class RecomputePolicy:
    """What one layer keeps for its backward pass. `kind` 'korthikanti':
    Megatron's policies as Korthikanti et al. count them ('none' keeps every
    tensor the backward reads, 'selective' recomputes the attention core,
    'full' keeps only the layer input). `kind` 'named': a MaxText
    remat_policy, which keeps the layer input (the scan carry) and the
    tensors named in `saves` in HBM, moves those in `offloads` to pinned
    host memory, and recomputes the rest. Names are MaxText's
    checkpoint_name tags: query_proj, key_proj, value_proj (Q, K, V),
    context (attention output), out_proj (output projection's output),
    mlpwi_0 and mlpwi_1 (gate and up outputs), mlpwo (MLP output), and
    decoder_layer_input (the layer input itself, which MaxText's 'custom'
    policy can offload too: then the layer keeps nothing in HBM). `kind`
    'recipe': a run's own published recipe of what it keeps and in which
    precision (DeepSeek-V3's, DEEPSEEK_V3_RECIPE). `moe_saves`: what a
    named policy keeps of an MoE layer where that differs from `saves`
    (None: the same)."""

    name: str
    kind: str
    saves: tuple = ()
    offloads: tuple = ()
    source: str = "korthikanti2022reducing"
    moe_saves: tuple | None = None

    def saves_of(self, m, dense_layer):
        """The names this policy keeps of one layer of model `m` (an MoE
        layer unless `dense_layer`, or unless `m` has no experts)."""
        if self.moe_saves is None or dense_layer or not m.is_moe:
            return self.saves
        return self.moe_saves


_QKV = ("query_proj", "key_proj", "value_proj")
_MINIMAL = _QKV + ("out_proj", "mlpwi_0", "mlpwi_1", "mlpwo")
NAMED_TENSORS = _QKV + ("context", "out_proj", "mlpwi_0", "mlpwi_1", "mlpwo")

# MaxText's remat policies, from Decoder.get_remat_policy and
# maxtext_utils.get_save_and_offload_names (kv_proj and qkv_proj, the fused
# forms, hold the same bytes as key_proj + value_proj and Q + K + V)
RECOMPUTE = {
    "none": RecomputePolicy("none", "korthikanti"),
    "selective": RecomputePolicy("selective", "korthikanti"),
    "full": RecomputePolicy("full", "korthikanti"),
    "minimal_with_context": RecomputePolicy("minimal_with_context", "named", _MINIMAL + ("context",), (), "maxtext"),
    "minimal": RecomputePolicy("minimal", "named", _MINIMAL, (), "maxtext"),
    "save_dot_with_context_except_mlp": RecomputePolicy(
        "save_dot_with_context_except_mlp", "named", _QKV + ("context", "out_proj"), (), "maxtext"
    ),
    "save_dot_except_mlpwi": RecomputePolicy(
        "save_dot_except_mlpwi", "named", _QKV + ("out_proj", "mlpwo"), (), "maxtext"
    ),
    "save_dot_except_mlp": RecomputePolicy("save_dot_except_mlp", "named", _QKV + ("out_proj",), (), "maxtext"),
    "save_qkv_proj": RecomputePolicy("save_qkv_proj", "named", _QKV, (), "maxtext"),
    "save_out_proj": RecomputePolicy("save_out_proj", "named", ("out_proj",), (), "maxtext"),
    "qkv_proj_offloaded": RecomputePolicy("qkv_proj_offloaded", "named", (), _QKV, "maxtext"),
    # remat_policy 'custom' as MaxText's Trillium benchmark configs declare it
    # (benchmarks/maxtext_trillium_model_configs.py: llama3_1_8b_8192 and the Mixtral
    # configs offload the layer input, Q, K, V and out_proj; llama3_1_70b_8192 the
    # layer input, Q, K and V)
    "custom_offload_input_qkv_out": RecomputePolicy(
        "custom_offload_input_qkv_out", "named", (), ("decoder_layer_input",) + _QKV + ("out_proj",), "maxtext"
    ),
    "custom_offload_input_qkv": RecomputePolicy(
        "custom_offload_input_qkv", "named", (), ("decoder_layer_input",) + _QKV, "maxtext"
    ),
    # as MaxText's v5p benchmark configs at 3eb77db3 declare it (benchmarks/maxtext_v5p_model_configs.py,
    # base.yml: a name not given is rematerialized, the layer input stays on device):
    # llama3_1_405b_8192_v5p_1024 offloads the attention output (context) and the MLP's output;
    # deepseek3_671b_v5p_1024 the layer input and out_proj
    "custom_offload_context_mlpwo": RecomputePolicy(
        "custom_offload_context_mlpwo", "named", (), ("context", "mlpwo"), "maxtext"
    ),
    "custom_offload_input_out": RecomputePolicy(
        "custom_offload_input_out", "named", (), ("decoder_layer_input", "out_proj"), "maxtext"
    ),
    "minimal_offloaded": RecomputePolicy("minimal_offloaded", "named", (), _MINIMAL, "maxtext"),
    # MaxText's remat_policy 'full' (nn.remat with policy None: JAX's nothing_saveable). Unlike
    # Megatron's 'full', which reruns the layer's whole forward (torch.utils.checkpoint), the
    # backward reruns only what it reads: XLA drops the rest (a dense MLP's last matmul, not the
    # routed experts', whose outputs the router's gradient reads; in a parallel block the output
    # projection too). It keeps the layer input, as 'full' does.
    "nothing_saveable": RecomputePolicy("nothing_saveable", "named", (), (), "maxtext"),
    # torchtitan's selective activation checkpointing 'op' (selective_ac_option = 'op', the default of
    # its Llama 3 8B config; torchtitan/parallelisms/parallelize_llama.py at 9dec370, the same policy
    # at 820504e): within each block PyTorch's selective checkpointing saves the output of every mm but
    # every second one, and the attention kernel's; the rest reruns in the backward. A Llama block
    # runs wq, wk, wv, wo, w1 (gate), w3 (up), w2 in that order: it keeps Q, V, the attention output,
    # the gate and the MLP's output beside the block input, and reruns wk, wo (the MLP's input needs
    # it) and w3, as a named policy counts them. An MoE block's routed experts run
    # torch._grouped_mm (torchtitan/models/common/moe.py at b5bcd76), which the saved ops leave out
    # (torchtitan/distributed/activation_checkpoint.py at b5bcd76: PyTorch's compute_intensive_ops,
    # mm, bmm, addmm, _scaled_mm and the attention kernels, and the linear ops; the router's gate is
    # forced to recompute and not counted). Its MoE models fuse Q, K and V into one matmul (fuse_qkv,
    # the default since 3396a4b, 2026-06-24; Qwen3-30B-A3B's flavour at b5bcd76), the block's first
    # mm, saved; wo, the second, reruns: such a layer keeps Q, K, V and the attention output, and
    # wo and its experts' gate, up and down matmuls run again (the router's top-k indices and
    # scores, which it saves, are left out: k numbers a token). Ref: torchtitan-moe-sac-loss. Not
    # modelled: MLA's projections (DeepSeek-V3's), which alternate otherwise, and the fused QKV of an
    # MoE model's dense layers, which keep what the Llama runs' separate wq, wk, wv kept.
    "torchtitan_op_sac": RecomputePolicy(
        "torchtitan_op_sac",
        "named",
        ("query_proj", "value_proj", "context", "mlpwi_0", "mlpwo"),
        (),
        "torchtitan-benchmarks",
        moe_saves=("query_proj", "key_proj", "value_proj", "context"),
    ),
    # DeepSeek-V3's own recipe (deepseek2024v3 §3.2.3 and §3.3): see DEEPSEEK_V3_RECIPE
    "deepseek_v3": RecomputePolicy("deepseek_v3", "recipe", (), (), "deepseek2024v3"),
}
# What DeepSeek-V3 keeps of a layer for its backward, as its report lists it:
# §3.2.3 "we recompute all RMSNorm operations and MLA up-projections during back-propagation"
# (no norm outputs, no Q, K or V: the norm inputs, the MLA latents and the shared RoPE key stay);
# §3.3.3 the input of the Linear after the attention operator cached in E5M6 (12 bits), the
# inputs of the MoE's SwiGLU cached in FP8 and its output recomputed, the dispatched activations
# in FP8 (the experts' up-projection inputs). Its "combine in BF16" is the precision of the
# combine's communication, not a cached tensor. Bytes per element of each.
DEEPSEEK_V3_RECIPE = {
    "norm_inputs": 2,  # the layer input and the attention block's output (residual stream), BF16
    "norm_outputs": 0,  # recomputed
    "mla_latents": 2,  # c_q, c_kv and the shared RoPE key, BF16 (their norms recomputed)
    "qkv": 0,  # MLA up-projections recomputed
    "attention_output": 1.5,  # E5M6, the input of the output projection
    "dispatched_inputs": 1,  # FP8
    # The combine y = Σ g_i·E_i(x), E_i(x) = W2_i·h_i, h_i the SwiGLU output. The gate's gradient
    # dg_i = <dy, E_i(x)> = <W2_iᵀ·dy, h_i>: W2_iᵀ·dy is the expert's own backward (dh_i = g_i·W2_iᵀ·dy)
    # and h_i is recomputed from the cached SwiGLU inputs, so no expert output is kept (§3.3.3 lists none)
    "expert_outputs": 0,
    "swiglu_inputs": 1,  # FP8
    "swiglu_output": 0,  # recomputed
}
# What Transformer Engine's FP8 path (Megatron-Core's, FP8 current scaling; precision 'fp8') keeps
# of a layer for its backward, bytes per element, where BF16 keeps 2 of each. Read in
# TransformerEngine at d0067d0d (transformer_engine/pytorch/module/*.py) and Megatron-LM at
# d98e8a64 (megatron/core); only the Korthikanti policies (none, selective, full) take it: a
# MaxText policy keeps what it names in BF16, and DeepSeek-V3's recipe is its own precision.
TE_FP8_SAVED_BYTES = {
    # The input of an FP8 GEMM whose weight needs a gradient is saved quantized, one copy:
    # linear.py `_linear_forward_impl` keeps the column-wise (on Hopper transposed) data and drops
    # the row-wise ("Discard row-wise data since it is not needed in backward pass"); with
    # sequence parallelism the local shard row-wise, gathered again in the backward (current
    # scaling cannot all-gather column-wise data). layernorm_linear.py saves its ln_out the same
    # way (`ln_out.update_usage(rowwise_usage=False)`) beside its BF16 input: so the attention's
    # input (the QKV projection's) and a dense MLP's input (fc1's) are FP8 ...
    "norm_output": 1,
    # ... and so are the input of the MLP's last matmul (fc2: the SwiGLU or GELU output) and an
    # MoE layer's dispatched tokens (grouped_linear.py: `inputmat.update_usage(rowwise_usage=False,
    # columnwise_usage=True)`, the experts' fc1 input).
    "fc2_input": 1,
    "dispatched_inputs": 1,
    # The activation's input (fc1's output: gate and up) stays BF16: Megatron's bias_swiglu and
    # bias_gelu save it in the activation dtype (activation_func_fp8_input_store False by default;
    # layernorm_mlp.py keeps fc1_out in the activation dtype too).
    "fc1_output": 2,
    # The attention's output, the output projection's input, stays BF16 once: Megatron-Core sets
    # save_original_input on linear_proj for FP8 recipes other than delayed scaling (attention.py:
    # "linear_proj also saves the quantized tensor of this output ... to avoid the extra memory"),
    # so the projection saves the BF16 tensor the attention kernel keeps (fp8_dpa off: Q, K, V
    # BF16 too). Under delayed scaling it would add an FP8 copy (1 more byte).
    "attention_output": 2,
    # An MoE layer's MLP input stays BF16: the router saves it, and Megatron-Core sets
    # save_original_input on the shared experts' fc1 (shared_experts.py: "the output of
    # pre_mlp_layernorm is saved by router"). The norms' inputs (layernorm_linear.py saves
    # `inputmat` in the activation dtype), the experts' outputs (BF16 GEMM outputs the combine's
    # backward reads) and the router's FP32 probabilities are unchanged.
    "moe_mlp_input": 2,
}
PRECISIONS = ("bf16", "fp8")
KORTHIKANTI_POLICIES = ("none", "selective", "full")
ATTENTION = ("flash", "eager")
LSE_BYTES = 4  # FlashAttention keeps one FP32 log-sum-exp per query row and head


def recompute_policy(recompute):
    """The RecomputePolicy called `recompute`."""
    if not isinstance(recompute, str) or recompute not in RECOMPUTE:
        raise ValueError(f"recompute: unknown value {recompute!r}; valid: {', '.join(RECOMPUTE)}")
    return RECOMPUTE[recompute]


def _widths(m, tp):
    """Per-token elements of Q, K, V and the attention output on one TP
    rank, and of the replicated MLA latents. With tp above the KV-head count
    (tp a multiple of it) each rank keeps one KV head, replicated as
    Megatron does."""
    if m.mla is not None:
        a = m.mla
        q = m.n_heads * (a.qk_nope_head_dim + a.qk_rope_head_dim)
        v = m.n_heads * a.v_head_dim
        latent = (a.q_lora_rank + a.kv_lora_rank, a.qk_rope_head_dim)
        return q / tp, q / tp, v / tp, v / tp, latent
    kv = m.n_kv_heads * m.head_dim / min(tp, m.n_kv_heads)
    q = m.n_heads * m.head_dim / tp
    return q, kv, kv, q, (0, 0)


def _check_tp(m, tp, dense_layer):
    if m.n_heads % tp:
        raise ValueError(f"tp: must divide the heads ({m.n_heads}) of {m.name}, got {tp}")
    if m.mla is None and m.n_kv_heads % tp and tp % m.n_kv_heads:
        raise ValueError(
            f"tp: must divide the KV heads ({m.n_kv_heads}) of {m.name} or be a multiple of them "
            f"(KV heads replicated), got {tp}"
        )
    d_ff = m.d_ff_dense if dense_layer else m.d_ff
    if d_ff % tp:
        raise ValueError(f"tp: must divide F ({d_ff}) of {m.name}, got {tp}")


def _mlp_shape(m, dense_layer):
    """(F-wide elements per token through the gate/up outputs, routed copies
    of each token k, experts E) for one layer's MLP."""
    if dense_layer or not m.is_moe:
        return (m.d_ff_dense if dense_layer else m.d_ff), 0, 0
    return (m.top_k + m.n_shared_experts) * m.d_ff, m.top_k, m.n_experts


def _named_bytes(m, name, s, b, tp, sequence_parallel, dense_layer):
    """Bytes of one MaxText-named tensor of a layer on one device."""
    q, k, v, ctx, _ = _widths(m, tp)
    f_tokens, routed, _ = _mlp_shape(m, dense_layer)
    token_wise = s * b * m.d_model * 2 / (tp if sequence_parallel else 1)  # [b, s, D], BF16
    if name == "query_proj":
        return 2 * s * b * q
    if name == "key_proj":
        return 2 * s * b * k
    if name == "value_proj":
        return 2 * s * b * v
    if name == "context":
        return 2 * s * b * ctx
    if name == "out_proj" and m.parallel_block:
        return 0  # summed straight into the residual: the backward does not read it
    if name in ("out_proj", "decoder_layer_input"):
        return token_wise
    if name == "mlpwi_0":
        return 2 * s * b * f_tokens / tp
    if name == "mlpwi_1":
        return 2 * s * b * f_tokens / tp if m.gated_mlp else 0
    # mlpwo: the MLP's output; an MoE layer keeps each routed expert's
    # output (k per token, the router weights' gradient reads them). A dense
    # MLP's output, and the shared experts' sum, go straight into the
    # residual ungated and the backward never reads them: JAX saves a named
    # tensor only where the backward reads it (a residual), so it keeps none.
    return token_wise * routed


def _args(m, seq_len, micro_batch_seqs, tp, cp, recompute, attention, dense_layer, precision="bf16"):
    _validate.count("seq_len", seq_len)
    _validate.choice("precision", precision, PRECISIONS)
    _validate.count("micro_batch_seqs", micro_batch_seqs)
    _validate.count("tp", tp)
    _validate.count("cp", cp)
    policy = recompute_policy(recompute)
    _validate.choice("attention", attention, ATTENTION)
    if dense_layer and not m.n_dense_layers:
        raise ValueError(f"dense_layer: {m.name} has no dense layers (n_dense_layers = 0)")
    if seq_len % cp:
        raise ValueError(f"cp: must divide seq_len ({seq_len}), got {cp}")
    _check_tp(m, tp, dense_layer)
    return policy


def activation_bytes_per_layer(
    model,
    seq_len,
    micro_batch_seqs,
    *,
    tp=1,
    cp=1,
    sequence_parallel=False,
    recompute="none",
    attention="flash",
    dense_layer=False,
    precision="bf16",
):
    """Bytes of activations one transformer layer keeps in HBM for its
    backward pass, per device, for `micro_batch_seqs` sequences of `seq_len`
    tokens (seq_len/cp of them local under context parallelism), with
    16-bit activations and 1-byte dropout masks.

    Counted as Korthikanti et al. count it (s tokens, b sequences, h =
    d_model, a heads): the two norm inputs (4sbh); attention: its input
    (2sbh), Q, K and V, the output projection's input (2sbh) and a dropout
    mask (sbh); MLP: its input (2sbh), the intermediate tensors (non-gated:
    the activation's input and output, 2sbF each; gated SwiGLU: gate, up and
    their product, 2sbF each) and a dropout mask (sbh). The attention core:
    `attention="eager"` stores the softmax output (2as²b), with dropout its
    mask (as²b) and output (2as²b), Korthikanti's 5as²b; `"flash"` (the
    default, what FlashAttention-style kernels such as cuDNN fused
    attention, Megatron's flash path and MaxText's splash attention keep)
    stores no probabilities, only one FP32 log-sum-exp per row and head
    (4asb), and recomputes the rest inside its backward. For their GPT
    models (F = 4h, no GQA, dropout) eager gives sbh(34 + 5as/h).
    Tensor parallelism (tp) splits the heads and F; `sequence_parallel` also
    splits the parts TP leaves replicated (norms, block inputs, masks):
    sbh(10 + 24/t + 5as/(ht)) without, sbh·34/t + 5as²b/t with. With cp the
    local queries still attend every key: the eager scores are a·(s/cp)·s·b.
    MoE layers keep, per token, the router's FP32 probabilities (4E), the k
    dispatched inputs and expert outputs (2h each) and the gate/up tensors
    of the k routed and the shared experts; MLA layers their latents.
    recompute (see RECOMPUTE): 'none'; 'selective' (the attention core
    recomputed: the as² terms and the LSE vanish); 'full' (only the layer
    input, 2sbh, /t with SP); a MaxText remat_policy: the layer input plus
    the named tensors it saves where the backward reads them (never a dense
    MLP's output; in a parallel block not the output projection's either;
    see `offloaded_activation_bytes_per_layer` for what it moves to host).
    A parallel block (model.parallel_block) keeps one norm input and one
    input shared by attention and MLP, and one dropout mask. `dense_layer`:
    one of the first dense layers of an MoE model instead of an MoE layer.
    `precision` 'fp8': the matmuls in FP8 through Transformer Engine, which
    saves an FP8 GEMM's input in one byte (TE_FP8_SAVED_BYTES): under a
    Korthikanti policy the attention's and a dense MLP's inputs and the
    MLP's last matmul's input (the SwiGLU product, or the GELU output) and
    an MoE layer's dispatched tokens take 1 byte per element, all else as
    in BF16 (without SP, a dense SwiGLU layer without dropout keeps
    sbh·(4 + 1 + 1) + 2·sb·(Q + K + V + O)/t + sb·F·(2 + 2 + 1)/t and the
    log-sum-exp; an MLA model's attention side stays as in BF16).
    Ref: korthikanti2022reducing, dao2022flashattention, maxtext,
    transformer-engine, megatron-core-fp8.
    """
    m = models.get(model)
    policy = _args(m, seq_len, micro_batch_seqs, tp, cp, recompute, attention, dense_layer, precision)
    return _kept_bytes(
        m, seq_len, micro_batch_seqs, tp, cp, sequence_parallel, policy, attention, dense_layer, False, precision
    )


def offloaded_activation_bytes_per_layer(
    model,
    seq_len,
    micro_batch_seqs,
    *,
    tp=1,
    cp=1,
    sequence_parallel=False,
    recompute="none",
    attention="flash",
    dense_layer=False,
    precision="bf16",
):
    """Bytes of one layer's activations a remat policy moves to pinned host
    memory instead of HBM (MaxText's qkv_proj_offloaded, minimal_offloaded
    and the custom_offload_* policies; 0 for a policy that offloads
    nothing), per device; arguments as
    activation_bytes_per_layer (a MaxText policy keeps what it names in
    BF16 whatever the `precision`). Ref: maxtext."""
    m = models.get(model)
    policy = _args(m, seq_len, micro_batch_seqs, tp, cp, recompute, attention, dense_layer, precision)
    return _kept_bytes(
        m, seq_len, micro_batch_seqs, tp, cp, sequence_parallel, policy, attention, dense_layer, True, precision
    )


def _kept_bytes(
    m, seq_len, micro_batch_seqs, tp, cp, sequence_parallel, policy, attention, dense_layer, offloaded, precision="bf16"
):
    """One layer's activation bytes per device, its seq_len/cp local queries
    attending all seq_len keys: those kept in HBM, or (`offloaded`) those
    the policy moves to host memory; arguments already checked (_args)."""
    s = seq_len // cp
    if offloaded:
        return sum(_named_bytes(m, n, s, micro_batch_seqs, tp, sequence_parallel, dense_layer) for n in policy.offloads)
    return _layer_bytes(
        m, s, seq_len, micro_batch_seqs, tp, sequence_parallel, policy, attention, dense_layer, precision
    )


def _element_bytes(m, precision, dense_layer):
    """Bytes per element of the tensors a Korthikanti-counted layer keeps
    whose precision FP8 changes: all 2 in BF16; under 'fp8' as
    TE_FP8_SAVED_BYTES says. Left at 2 under FP8: an MLA model's attention
    input and latents (Megatron-Core's MLA feeds the norm output to two down
    projections, each saving its own FP8 copy unless a fused variant is
    chosen: 2 bytes is the larger of the two), a parallel block's shared
    input (read by the QKV and fc1 GEMMs, one FP8 copy each), and an MoE
    layer's MLP input (TE_FP8_SAVED_BYTES["moe_mlp_input"])."""
    bf16 = dict.fromkeys(("attention_input", "mlp_input", "fc1_output", "fc2_input", "dispatched_inputs"), 2)
    if precision == "bf16":
        return bf16
    t = TE_FP8_SAVED_BYTES
    moe_layer = m.is_moe and not dense_layer
    return {
        "attention_input": 2 if m.mla is not None else t["norm_output"],
        "mlp_input": t["moe_mlp_input"] if moe_layer else t["norm_output"],
        "fc1_output": t["fc1_output"],
        "fc2_input": t["fc2_input"],
        "dispatched_inputs": t["dispatched_inputs"],
    }


def _layer_bytes(
    m, query_tokens, key_tokens, micro_batch_seqs, tp, sequence_parallel, policy, attention, dense_layer, precision
):
    """activation_bytes_per_layer for `query_tokens` local tokens whose
    queries attend `key_tokens` keys (they differ under context parallelism)."""
    s, b, h = query_tokens, micro_batch_seqs, m.d_model
    sbh = s * b * h
    replicated_divisor = tp if sequence_parallel else 1
    layer_input = 2 * sbh / replicated_divisor
    if policy.name == "full":
        return layer_input
    if policy.kind == "named":
        kept_input = 0 if "decoder_layer_input" in policy.offloads else layer_input
        saves = policy.saves_of(m, dense_layer)
        return kept_input + sum(_named_bytes(m, n, s, b, tp, sequence_parallel, dense_layer) for n in saves)
    q, k, v, ctx, (latent, rope_key) = _widths(m, tp)
    f_tokens, routed, n_experts = _mlp_shape(m, dense_layer)
    if policy.kind == "recipe":
        return _recipe_bytes(m, s, b, tp, sequence_parallel, ctx, latent, rope_key, f_tokens, routed, n_experts)
    e = _element_bytes(m, precision, dense_layer)
    mask = 1 if m.dropout else 0
    # kept whole on every TP rank unless sequence parallelism splits them:
    # two norm inputs, the attention and MLP inputs, two dropout masks; MLA's
    # latents (norm input and output) and its shared RoPE key; an MoE
    # layer's router probabilities (FP32), dispatched inputs and expert outputs
    replicated = 2 * 2 * sbh + e["attention_input"] * sbh + e["mlp_input"] * sbh + 2 * mask * sbh
    if m.parallel_block:  # one norm input, one input shared by attention and MLP, one dropout on their sum
        replicated = 2 * sbh + 2 * sbh + mask * sbh
    replicated += 2 * 2 * s * b * latent + 2 * s * b * rope_key
    replicated += 4 * s * b * n_experts + routed * (e["dispatched_inputs"] + 2) * sbh
    # split by TP: Q, K, V, the output projection's input, the MLP intermediates (gated: gate and
    # up, the activation's input, and their product, fc2's input; else the activation's input and output)
    intermediates = ((2 if m.gated_mlp else 1) * e["fc1_output"] + e["fc2_input"]) * s * b * f_tokens / tp
    sharded = 2 * s * b * (q + k + v + ctx) + intermediates
    if policy.name == "selective":
        core = 0
    elif attention == "eager":  # softmax output (2 bytes), with dropout its mask (1) and output (2)
        core = (2 + 3 * mask) * m.n_heads * s * key_tokens * b / tp
    else:  # flash: one FP32 log-sum-exp per query row and head
        core = LSE_BYTES * m.n_heads * s * b / tp
    return replicated / replicated_divisor + sharded + core


# What a loss keeps of the logits, bytes per logit element: at its peak and for the backward.
# 'fp32_copy': Megatron's vocab-parallel cross-entropy casts the BF16 logits to FP32 and keeps
# the FP32 softmax for its backward (korthikanti2022reducing §4.3: 4sbv/t), the BF16 logits still
# alive at the cast (6 at the peak). 'fused_bf16': a loss XLA compiles (MaxText's
# cross_entropy_with_logits, cast_logits_to_fp32): the cast, the exponentials and the one-hot are
# elementwise producers XLA fuses into the loss's reductions and into the one kernel that writes
# the gradient. The TPU compiler keeps one BF16 [b, S, V/t] buffer, the output matmul's logits,
# and writes their gradient into the same buffer (2 at the peak, 2 kept): the referee's compiled
# Llama-3 steps (2.10 GB where 4 B/logit gives 4.20) and chapter 97's compiled plans. (Before the
# TPU compiler was consulted this was 4 at the peak: the logits and a separate BF16 gradient.)
# 'chunked_fp32_8': torchtitan's ChunkedLossWrapper at its default of eight chunks
# (torchtitan/components/loss.py at b5bcd76): the output layer and the FP32 cross-entropy run on an
# eighth of the tokens at a time, each chunk's backward at once, so the peak is an eighth of
# 'fp32_copy''s and nothing waits for the layers' backward. Its FP32 accumulator of the hidden
# states' gradient (4 bytes a token and model dimension: for Qwen3-30B-A3B, whose vocabulary is 74
# times its width, 0.5 GiB against the chunk's 7.0 GiB at 65,536 tokens a device) is left out.
LOSS_LOGITS = {"fp32_copy": (6, 4), "fused_bf16": (2, 2), "chunked_fp32_8": (6 / 8, 0)}


def _recipe_bytes(m, s, b, tp, sequence_parallel, ctx, latent, rope_key, f_tokens, routed, n_experts):
    """DeepSeek-V3's layer under DEEPSEEK_V3_RECIPE: the two norm inputs,
    the MLA latents and RoPE key, the attention output (E5M6), FlashAttention's
    log-sum-exp, and for an MoE layer the FP32 router probabilities, the
    dispatched inputs (FP8) of the k routed copies and the SwiGLU inputs
    (FP8) of the routed and shared experts (the experts' outputs are not
    kept: see DEEPSEEK_V3_RECIPE)."""
    r = DEEPSEEK_V3_RECIPE
    if m.mla is None or m.dropout:
        raise ValueError(
            f"recompute: 'deepseek_v3' is DeepSeek-V3's recipe for an MLA model without dropout, got {m.name}"
        )
    sbh = s * b * m.d_model
    replicated = 2 * r["norm_inputs"] * sbh
    replicated += r["mla_latents"] * s * b * (latent + rope_key)
    replicated += 4 * s * b * n_experts + routed * (r["dispatched_inputs"] + r["expert_outputs"]) * sbh
    sharded = r["attention_output"] * s * b * ctx + 2 * r["swiglu_inputs"] * s * b * f_tokens / tp
    lse = LSE_BYTES * m.n_heads * s * b / tp
    return replicated / (tp if sequence_parallel else 1) + sharded + lse


def logits_bytes(model, seq_len, micro_batch_seqs, tp=1, peak=True, loss_logits="fp32_copy"):
    """Bytes of the output logits on the last pipeline stage, per device, for
    `micro_batch_seqs` sequences of `seq_len` tokens, with the vocabulary
    split over `tp` (Megatron's vocab-parallel output layer). The
    cross-entropy keeps the logits in FP32 for its backward (Korthikanti et
    al. §4.3: 4sbv/t); with `peak` the BF16 logits the output matmul produced
    are still alive when the FP32 copy is made, 6sbv/t at that moment. The
    inputs of the final norm and output projection (4sbh/t) and the
    embedding's gradient (part of the state's gradients) are not included.
    `loss_logits` (LOSS_LOGITS): 'fused_bf16' for a loss XLA compiles,
    which materialises no FP32 copy and writes the gradient over the BF16
    logits (2 bytes per element, at the peak and kept); 'chunked_fp32_8'
    for torchtitan's chunked loss (an eighth of 'fp32_copy' at the peak,
    none kept). Ref: korthikanti2022reducing, maxtext, torchtitan-moe-sac-loss."""
    m = models.get(model)
    _validate.count("seq_len", seq_len)
    _validate.count("micro_batch_seqs", micro_batch_seqs)
    _validate.count("tp", tp)
    if m.vocab_size % tp:
        raise ValueError(f"tp: must divide the vocabulary ({m.vocab_size}) of {m.name}, got {tp}")
    _validate.choice("loss_logits", loss_logits, tuple(LOSS_LOGITS))
    at_peak, kept = LOSS_LOGITS[loss_logits]
    return (at_peak if peak else kept) * seq_len * micro_batch_seqs * m.vocab_size / tp


def recomputed_flops_per_token(model, seq_len, recompute="none", causal=False):
    """Forward FLOPs per trained token that a recomputation policy runs again
    during the backward pass, over all layers. 'selective' repeats the
    attention scores (4·L·a·d_head·s, halved when causal); 'full' every
    layer's forward (2·N_active less the embedding table and the output
    layer, models.end_param_counts, plus that): per-layer checkpoints rerun
    the transformer layers, not the lookup or the logits. A MaxText policy recomputes what the
    backward needs and the policy neither saved nor offloaded: the Q/K/V
    projections, the attention core (unless `context` is saved), the output
    projection (unless out_proj is, since the MLP's input depends on it;
    never in a parallel block, where it does not) and the gate/up matmuls;
    never a dense MLP's last matmul or the shared experts', whose outputs
    join the residual ungated, but each routed expert's down matmul unless
    mlpwo is kept: the router weights' gradient reads its output.
    Under 'none' and flash attention the kernel's own recomputation is part
    of its backward and not counted.
    Ref: korthikanti2022reducing, maxtext."""
    m = models.get(model)
    _validate.count("seq_len", seq_len)
    policy = recompute_policy(recompute)
    scores = _scores_forward_flops(m, seq_len, causal)
    if policy.name == "none":
        return 0
    if policy.name == "selective":
        return m.n_layers * scores
    if policy.name == "full":
        # the layers' forward only: the embedding lookup and the output layer are not rerun
        # (Korthikanti et al.'s hardware count keeps the logits' term at its model value)
        layers = models.active_param_count(m) - sum(models.end_param_counts(m))
        return 2 * layers + m.n_layers * scores
    if policy.kind == "recipe":  # DeepSeek-V3: the MLA up-projections run again
        if m.mla is None:
            raise ValueError(f"recompute: 'deepseek_v3' recomputes MLA up-projections; {m.name} has no MLA")
        a = m.mla
        up = a.q_lora_rank * m.n_heads * (a.qk_nope_head_dim + a.qk_rope_head_dim) if a.q_lora_rank else 0
        up += a.kv_lora_rank * m.n_heads * (a.qk_nope_head_dim + a.v_head_dim)
        return m.n_layers * 2 * up
    return _named_policy_rerun_flops(m, policy, scores)


def recomputed_attention_flops_per_token(model, seq_len, recompute="none", causal=False):
    """The attention scores' share of recomputed_flops_per_token: the
    forward of QKᵀ and the product with V that a policy runs again
    ('selective' and 'full': every layer's; a MaxText policy: each layer's
    that does not keep `context`; 'none' and DeepSeek-V3's recipe: none)."""
    m = models.get(model)
    _validate.count("seq_len", seq_len)
    policy = recompute_policy(recompute)
    scores = _scores_forward_flops(m, seq_len, causal)
    if policy.name == "none" or policy.kind == "recipe":
        return 0
    if policy.name in ("selective", "full"):
        return m.n_layers * scores
    return sum(n * scores for dense_layer, n in _layers_by_kind(m) if "context" not in _kept(policy, m, dense_layer))


def _scores_forward_flops(m, seq_len, causal):
    """One layer's forward of the attention scores per token, QKᵀ and PV:
    4·a·d_head·s with the head width training.model_flops_per_token counts,
    halved when causal."""
    return 4 * m.n_heads * m.head_dim * seq_len / (2 if causal else 1)


def _layers_by_kind(m):
    """(dense_layer, count) of a model's layers as the named policies tell them apart: its MoE layers
    (every layer of a dense model) and its dense ones."""
    return ((False, m.n_layers - m.n_dense_layers), (True, m.n_dense_layers))


def _kept(policy, m, dense_layer):
    """What a named policy keeps of one layer of the kind, in HBM or on the host."""
    return set(policy.saves_of(m, dense_layer)) | set(policy.offloads)


def _named_policy_rerun_flops(m, policy, scores):
    """recomputed_flops_per_token for a MaxText named policy; `scores` the
    attention core's forward FLOPs per token of one layer."""
    ctx = m.n_heads * (m.head_dim if m.mla is None else m.mla.v_head_dim)
    out_proj = ctx * m.d_model
    qkv = models._attention_params(m) - out_proj
    total = 0
    for dense_layer, n in _layers_by_kind(m):
        kept = _kept(policy, m, dense_layer)
        f_tokens, _, _ = _mlp_shape(m, dense_layer) if n else (0, 0, 0)
        per_layer = 0
        if m.mla is None and set(_QKV) & kept and not set(_QKV) <= kept:
            # some projections kept (torchtitan's 'op' policy): each other one reruns
            widths = {"query_proj": m.n_heads, "key_proj": m.n_kv_heads, "value_proj": m.n_kv_heads}
            per_layer += sum(2 * m.d_model * n * m.head_dim for name, n in widths.items() if name not in kept)
        elif not set(_QKV) <= kept:
            per_layer += 2 * qkv
        if "context" not in kept:
            per_layer += scores
        if "out_proj" not in kept and not m.parallel_block:
            per_layer += 2 * out_proj
        if "mlpwi_0" not in kept:
            per_layer += 2 * m.d_model * f_tokens
        if m.gated_mlp and "mlpwi_1" not in kept:
            per_layer += 2 * m.d_model * f_tokens
        if m.is_moe and not dense_layer and "mlpwo" not in kept:
            # the router weights' gradient reads each routed expert's output (the combine
            # Σ g_i·E_i(x) under autodiff): each routed expert's down matmul runs again
            per_layer += 2 * m.d_model * m.top_k * m.d_ff
        total += n * per_layer
    return total


def microbatches_in_flight(n_stages, n_microbatches, schedule="1f1b", n_virtual=1):
    """Microbatches of a whole stage's activations the first pipeline stage
    holds at its peak: pipeline.schedule_activation_microbatches (GPipe m,
    1F1B min(p, m), interleaved p(1 + (p−1)/(p·v)) where p divides m (its
    general form there), ZB-H1 min(p, m), DualPipe p + 1).
    Ref: narayanan2021megatron, korthikanti2022reducing, qi2024zerobubble,
    deepseek2024v3."""
    return pipeline.schedule_activation_microbatches(schedule, n_stages, n_microbatches, n_virtual)


def _stage_layer_bytes(*args):
    """activation_bytes_per_stage_layer (or, `offloaded`, what the policy
    moves to host) for a models.Model; arguments checked here. Remembered
    by argument (and its type): a planner search asks for the same split
    of the same model for every schedule and pipeline depth it tries."""
    try:
        hash(args)
    except TypeError:  # an unhashable argument: checked (and refused) without the memory
        return _stage_layer_bytes_of(*args)
    return _remembered_stage_layer_bytes(*args)


def _stage_layer_bytes_of(
    m, seq_len, micro_batch_seqs, pp, tp, cp, sequence_parallel, recompute, attention, offloaded, precision="bf16"
):
    _validate.count("pp", pp)
    kinds = (False, True) if m.n_dense_layers else (False,)
    policy = None
    for dense_layer in kinds:
        policy = _args(m, seq_len, micro_batch_seqs, tp, cp, recompute, attention, dense_layer, precision)

    def one(dense_layer):
        return _kept_bytes(
            m,
            seq_len,
            micro_batch_seqs,
            tp,
            cp,
            sequence_parallel,
            policy,
            attention,
            dense_layer,
            offloaded,
            precision,
        )

    if len(kinds) == 1:
        return one(False)
    if pp > 1:
        return max(one(False), one(True))
    return (m.n_dense_layers * one(True) + (m.n_layers - m.n_dense_layers) * one(False)) / m.n_layers


_remembered_stage_layer_bytes = functools.lru_cache(maxsize=4096, typed=True)(_stage_layer_bytes_of)


def activation_bytes_per_stage_layer(
    model,
    seq_len,
    micro_batch_seqs,
    *,
    pp=1,
    tp=1,
    cp=1,
    sequence_parallel=False,
    recompute="none",
    attention="flash",
    precision="bf16",
):
    """Bytes per layer, for one microbatch on one device, that the book
    multiplies by the layers of a pipeline stage: for a model whose layers
    are of one kind, `activation_bytes_per_layer`. For an MoE model with
    dense first layers (DeepSeek-V3: 3 of 61) the one rule every count uses:
    with pp = 1 the mean over the model's layers, so that times the layers
    it is the exact sum over its dense and MoE layers; with pp > 1 the
    larger of the two kinds, since the stage at the peak holds particular
    layers and which ones depends on a placement the runs do not publish
    (the conservative choice: no stage holds more). Arguments as
    activation_bytes_per_layer; `pp` the pipeline stages.
    Ref: korthikanti2022reducing, deepseek2024v3."""
    m = models.get(model)
    return _stage_layer_bytes(
        m, seq_len, micro_batch_seqs, pp, tp, cp, sequence_parallel, recompute, attention, False, precision
    )


def _per_device(
    model,
    seq_len,
    micro_batch_seqs,
    tp,
    cp,
    pp,
    sequence_parallel,
    recompute,
    n_microbatches,
    schedule,
    attention,
    n_virtual,
    uneven_pipeline,
    offloaded,
    precision="bf16",
):
    m = models.get(model)
    _validate.count("pp", pp)
    _validate.count("n_microbatches", n_microbatches)
    if not uneven_pipeline and m.n_layers % pp:
        raise ValueError(f"pp: must divide the layers ({m.n_layers}) of {m.name}, got {pp} (or set uneven_pipeline)")
    per_layer = _stage_layer_bytes(
        m, seq_len, micro_batch_seqs, pp, tp, cp, sequence_parallel, recompute, attention, offloaded, precision
    )
    layers = pipeline.deepest_stage_layers(m.n_layers, pp, n_virtual, uneven=uneven_pipeline)
    in_flight = microbatches_in_flight(pp, n_microbatches, schedule, n_virtual) if pp > 1 else 1
    return per_layer * layers * in_flight


def activation_bytes_per_device(
    model,
    seq_len,
    micro_batch_seqs,
    *,
    tp=1,
    cp=1,
    pp=1,
    sequence_parallel=False,
    recompute="none",
    n_microbatches=1,
    schedule="1f1b",
    attention="flash",
    n_virtual=1,
    uneven_pipeline=False,
    precision="bf16",
):
    """Peak activation bytes in HBM on one device: the layers of the deepest
    pipeline stage (pipeline.deepest_stage_layers; `uneven_pipeline` lets pp
    not divide the layers, as Llama 3's 126 layers on 16 stages), each
    holding `activation_bytes_per_layer` for the seq_len/cp tokens it owns
    (with context parallelism a local query still attends every key), times
    the microbatches the schedule keeps in flight on the first stage
    (`microbatches_in_flight`). For an MoE model with dense first layers
    each layer is counted as `activation_bytes_per_stage_layer` says (the
    exact sum over the model with pp = 1, every layer at the larger of its
    two kinds with pp > 1). Embeddings, the
    output logits (`logits_bytes`) and what a policy offloads to host
    (`offloaded_activation_bytes_per_device`) are not counted; `precision`
    as activation_bytes_per_layer.
    Ref: korthikanti2022reducing, narayanan2021megatron.
    """
    return _per_device(
        model,
        seq_len,
        micro_batch_seqs,
        tp,
        cp,
        pp,
        sequence_parallel,
        recompute,
        n_microbatches,
        schedule,
        attention,
        n_virtual,
        uneven_pipeline,
        offloaded=False,
        precision=precision,
    )


def offloaded_activation_bytes_per_device(
    model,
    seq_len,
    micro_batch_seqs,
    *,
    tp=1,
    cp=1,
    pp=1,
    sequence_parallel=False,
    recompute="none",
    n_microbatches=1,
    schedule="1f1b",
    attention="flash",
    n_virtual=1,
    uneven_pipeline=False,
    precision="bf16",
):
    """Peak bytes of activations in pinned host memory for one device under
    an offloading remat policy (0 for the others): as
    activation_bytes_per_device, with `offloaded_activation_bytes_per_layer`
    per layer. Ref: maxtext."""
    return _per_device(
        model,
        seq_len,
        micro_batch_seqs,
        tp,
        cp,
        pp,
        sequence_parallel,
        recompute,
        n_microbatches,
        schedule,
        attention,
        n_virtual,
        uneven_pipeline,
        offloaded=True,
        precision=precision,
    )


_validate.guard_module(globals())
