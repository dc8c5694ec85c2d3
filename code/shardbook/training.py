"""Training time, model FLOPs utilization and per-step traffic.
Ref: kaplan2020scaling (6·N FLOPs per token), scaling-book-training,
distributed-training-notes."""

from . import _validate, memory, models
from .units import SECONDS_PER_DAY


def training_flops(n_params, n_tokens, flops_per_param_token=6):
    """Total training FLOPs: 6 · N · tokens (forward 2, backward 4)."""
    _validate.positive("n_params", n_params)
    _validate.positive("n_tokens", n_tokens)
    _validate.positive("flops_per_param_token", flops_per_param_token)
    return flops_per_param_token * n_params * n_tokens


def training_time_s(n_params, n_tokens, n_devices, flops_per_s, mfu, flops_per_param_token=6):
    """Wall-clock seconds: training FLOPs / (devices · C · MFU)."""
    _validate.count("n_devices", n_devices)
    _validate.positive("flops_per_s", flops_per_s)
    _validate.fraction("mfu", mfu)
    return training_flops(n_params, n_tokens, flops_per_param_token) / (n_devices * flops_per_s * mfu)


def training_time_days(*args, **kwargs):
    """training_time_s in days."""
    return training_time_s(*args, **kwargs) / SECONDS_PER_DAY


def model_flops_utilization(n_params, tokens_per_s, n_devices, flops_per_s, flops_per_param_token=6):
    """MFU: model FLOPs per second achieved / peak FLOP/s of all devices."""
    _validate.positive("n_params", n_params)
    _validate.non_negative("tokens_per_s", tokens_per_s)
    _validate.count("n_devices", n_devices)
    _validate.positive("flops_per_s", flops_per_s)
    _validate.positive("flops_per_param_token", flops_per_param_token)
    return flops_per_param_token * n_params * tokens_per_s / (n_devices * flops_per_s)


def dp_step_bytes_per_rank(param_bytes, n_ranks):
    """Bytes each rank sends in one DP step: a ring all-reduce of the
    gradients (same bytes as the parameters), 2·V·(R−1)/R."""
    _validate.non_negative("param_bytes", param_bytes)
    _validate.count("n_ranks", n_ranks)
    return 2 * param_bytes * (n_ranks - 1) / n_ranks


def fsdp_step_bytes_per_rank(param_bytes, n_ranks, reshard_after_forward=True):
    """Bytes each rank sends in one full-shard step: a forward gather, a
    backward gather again when parameters were resharded after forward, and
    a gradient reduce-scatter, each V·(R−1)/R."""
    _validate.non_negative("param_bytes", param_bytes)
    _validate.count("n_ranks", n_ranks)
    phases = 3 if reshard_after_forward else 2
    return phases * param_bytes * (n_ranks - 1) / n_ranks


def dp_loss_scale(n_replicas, global_valid_tokens):
    """Factor for each replica's *summed* loss so that a framework that
    averages gradients over R replicas yields the mean over all valid
    tokens: R / global_count. Ref: distributed-training-notes."""
    _validate.count("n_replicas", n_replicas)
    _validate.count("global_valid_tokens", global_valid_tokens)
    return n_replicas / global_valid_tokens


def model_flops_per_token(model, seq_len, causal=False):
    """Model FLOPs per trained token: 6·N (N active parameters) plus the
    attention scores, 12·L·(heads · head_dim)·s (QKᵀ and the product with V,
    2·2·s·H·d_h per layer forward, H heads of width d_h, times 3 for forward and backward), PaLM's
    and Megatron-LM's count. N includes the input embedding table, which a
    token reads by lookup, not by a matmul: for a tied model (PaLM's, the
    GPT runs') the table is the output layer, counted once, as those counts
    do; for an untied one (LLaMA) this counts 6·V·D per token that Megatron's
    formula leaves out (a larger share the narrower the model and the larger
    its vocabulary: most for DeepSeek-V2-Lite, then LLaMA-3 8B; least for
    LLaMA-2 70B). predicted.step_flops, which prices a compiled program, takes it
    off. `causal` halves the attention term, crediting
    only the unmasked half as MaxText does since 2025 and as block-skipping
    kernels compute. No recomputation: this is the numerator of MFU.
    Ref: narayanan2021megatron, chowdhery2022palm, maxtext."""
    m = models.get(model)
    return 6 * models.active_param_count(m) + attention_flops_per_token(m, seq_len, causal)


def attention_flops_per_token(model, seq_len, causal=False):
    """The attention scores' share of model_flops_per_token: 12·L·H·d_h·s
    (QKᵀ and the product with V, forward and backward), halved when
    `causal`. The kernels that run it (FlashAttention, cuDNN's fused
    attention) sustain a share of peak of their own, which the planner
    prices apart from the matmuls (planner.calibrate.attention_share).
    Ref: narayanan2021megatron, chowdhery2022palm."""
    m = models.get(model)
    _validate.count("seq_len", seq_len)
    attention = 12 * m.n_layers * m.n_heads * m.head_dim * seq_len
    return attention / 2 if causal else attention


def hardware_flops_per_token(model, seq_len, recompute="none", causal=False):
    """FLOPs the devices actually run per token: the model FLOPs plus what
    recomputation repeats: 'selective' the attention-score forward
    (4·L·H·d_h·s, halved when causal), 'full' every layer's forward (2·N
    less the embedding and output layer, plus that),
    a MaxText policy what it neither saves nor offloads
    (memory.recomputed_flops_per_token). Ref: korthikanti2022reducing."""
    m = models.get(model)
    _validate.count("seq_len", seq_len)
    extra = memory.recomputed_flops_per_token(m, seq_len, recompute, causal)  # every policy in memory.RECOMPUTE
    return model_flops_per_token(m, seq_len, causal) + extra


_validate.guard_module(globals())
