"""When does each parallel scheme stay compute-bound?

Notation: C = FLOP/s per device, W = the bandwidth a collective sees per
device along one mesh axis (bidirectional per TPU torus axis; one-direction
egress on GPUs), α = C/W, B = global batch in tokens, D = d_model, F = d_ff,
N = devices, X = FSDP/DP degree, Y = TP degree. The layer is the Scaling
Book's two matmuls In[B,D]·W_in[D,F]·W_out[F,D] in BF16 (2 bytes per element),
gating ignored. Ref: scaling-book-training, scaling-book-gpus, choosing-a-mesh.
"""

import math
from typing import NamedTuple

from . import _validate


def intensity(flops_per_s, bytes_per_s):
    """α = C/W: FLOPs a device must do per byte it moves to stay compute-bound."""
    _validate.positive("flops_per_s", flops_per_s)
    _validate.positive("bytes_per_s", bytes_per_s)
    return flops_per_s / bytes_per_s


def dp_min_tokens_per_device(flops_per_s, bytes_per_s, n_axes=1, n_replicas=None, n_experts=1, top_k=1):
    """Tokens per device above which DP/FSDP hides its gradient (and weight)
    traffic: C/(W·n_axes) · (E/k), times (R−1)/R for a ring of R replicas
    (the small-group correction; R = 2 halves the floor)."""
    alpha = intensity(flops_per_s, bytes_per_s)
    _validate.count("n_axes", n_axes)
    _validate.count("n_experts", n_experts)
    _validate.count("top_k", top_k)
    if top_k > n_experts:
        raise ValueError(f"top_k: must be <= n_experts ({n_experts}), got {top_k}")
    tokens = alpha / n_axes * (n_experts / top_k)
    if n_replicas is not None:
        _validate.count("n_replicas", n_replicas, minimum=2)
        tokens *= (n_replicas - 1) / n_replicas
    return tokens


def fsdp_min_tokens_per_device(flops_per_s, bytes_per_s, weight_bytes=2, grad_bytes=2, n_axes=1):
    """Tokens per device above which an FSDP layer's backward math hides its
    collectives when the weights are gathered with `weight_bytes` per element
    and the gradients reduce-scattered with `grad_bytes` (FP8 compute sets C
    at its FP8 rate). Backward math 8·B·D·F/X FLOPs against a gather and a
    reduce-scatter of the 2·D·F weights: B/X > C·(s_w + s_g)/(4·W·n_axes).
    BF16 for both (2 + 2) gives α/n_axes, dp_min_tokens_per_device.
    Ref: scaling-book-training."""
    alpha = intensity(flops_per_s, bytes_per_s)
    _validate.positive("weight_bytes", weight_bytes)
    _validate.positive("grad_bytes", grad_bytes)
    _validate.count("n_axes", n_axes)
    return alpha * (weight_bytes + grad_bytes) / (4 * n_axes)


def tp_max_degree(d_ff, flops_per_s, bytes_per_s, n_axes=1):
    """Largest TP degree whose collectives can hide behind its matmuls
    (hidden if overlapped; serialized they add Y/(this) of the math):
    Y < F·W·n_axes/C. Independent of the batch. Not of the precision: FP8 math doubles C, and
    the limit stays put only if both TP collectives carry FP8 too (half the
    bytes per element); an FP8 gather with a BF16 or FP32 reduction moves
    more than half the bytes and lowers it. `bytes_per_s` counts BF16
    elements, so pass W·2/(average bytes per element) for other precisions.
    Ref: scaling-book-training, deepseek2024v3 (which collectives stay BF16)."""
    _validate.count("d_ff", d_ff)
    _validate.count("n_axes", n_axes)
    return d_ff * n_axes / intensity(flops_per_s, bytes_per_s)


def fsdp_tp_min_tokens_per_device(d_ff, flops_per_s, bytes_per_s, m_fsdp=2, m_tp=1, overlap_collectives=True):
    """Tokens per device needed by mixed FSDP+TP at its best split, with m_*
    the torus axes each degree spans. At X_opt the weight gathers and the
    activation collectives take equal time T; the forward math must beat
    max(T, T) = T when the two kinds of collective overlap each other (the
    Scaling Book's assumption): α² / (m_fsdp · m_tp · F); serialized it must
    beat 2T, which needs four times the tokens: 4α² / (m_fsdp · m_tp · F)."""
    _validate.count("d_ff", d_ff)
    _validate.count("m_fsdp", m_fsdp)
    _validate.count("m_tp", m_tp)
    alpha = intensity(flops_per_s, bytes_per_s)
    factor = 1 if overlap_collectives else 4
    return factor * alpha**2 / (m_fsdp * m_tp * d_ff)


def fsdp_tp_optimal_fsdp(global_tokens, n_devices, d_ff, m_fsdp=2, m_tp=1):
    """The FSDP degree that balances weight and activation traffic:
    X_opt = sqrt(B·N·(m_fsdp/m_tp)/F). A continuous candidate: round it to a
    divisor of N and measure nearby meshes."""
    _validate.positive("global_tokens", global_tokens)
    _validate.count("n_devices", n_devices)
    _validate.count("d_ff", d_ff)
    _validate.count("m_fsdp", m_fsdp)
    _validate.count("m_tp", m_tp)
    return math.sqrt(global_tokens * n_devices * (m_fsdp / m_tp) / d_ff)


def dcn_min_tokens_per_slice(flops_per_s, dcn_bytes_per_s):
    """Tokens each slice (pod) must hold for pure DP across DCN to stay
    compute-bound: C / W_dcn, W_dcn per chip."""
    return intensity(flops_per_s, dcn_bytes_per_s)


def _layer_args(global_tokens, d_model, d_ff, flops_per_s, bytes_per_s):
    _validate.positive("global_tokens", global_tokens)
    _validate.count("d_model", d_model)
    _validate.count("d_ff", d_ff)
    _validate.positive("flops_per_s", flops_per_s)
    _validate.positive("bytes_per_s", bytes_per_s)


class LayerTimes(NamedTuple):
    """One layer's seconds of arithmetic and of communication on one device."""

    math_s: float
    comms_s: float


def dp_layer_s(global_tokens, d_model, d_ff, n_dp, flops_per_s, bytes_per_s, n_axes=1):
    """LayerTimes(math_s, comms_s) of one layer's backward pass under pure DP: 8BDF/(X·C)
    of matmuls against an all-reduce of the 4DF-byte gradient buffer (dW_in
    and dW_out in BF16), whose ring time is 2·4DF/(W·n_axes) = 8DF/(W·n_axes)."""
    _layer_args(global_tokens, d_model, d_ff, flops_per_s, bytes_per_s)
    _validate.count("n_dp", n_dp)
    _validate.count("n_axes", n_axes)
    math_s = 8 * global_tokens * d_model * d_ff / (n_dp * flops_per_s)
    gradient_bytes = 2 * 2 * d_model * d_ff
    comms_s = 2 * gradient_bytes / (bytes_per_s * n_axes)
    return LayerTimes(math_s, comms_s)


def fsdp_layer_s(global_tokens, d_model, d_ff, n_fsdp, flops_per_s, bytes_per_s, n_axes=1):
    """LayerTimes(math_s, comms_s) of one layer's backward pass under FSDP: the weight
    all-gather plus gradient reduce-scatter cost what DP's all-reduce costs,
    so the terms equal dp_layer_s; only memory differs."""
    return dp_layer_s(global_tokens, d_model, d_ff, n_fsdp, flops_per_s, bytes_per_s, n_axes)


def tp_layer_s(global_tokens, d_model, d_ff, n_tp, flops_per_s, bytes_per_s, n_axes=1, regather_input=False):
    """LayerTimes(math_s, comms_s) of one layer's backward pass under Megatron TP:
    8BDF/(Y·C) of matmuls against the transposes of the forward's two
    activation collectives, a reduce-scatter of dIn and an all-gather of
    dOut, 2BD bytes each in BF16: 4BD over W·n_axes; 6BD when the forward
    input is not kept and is all-gathered again for dW_in (regather_input).
    The forward pass moves the same 4BD against half the math, so it sets
    tp_max_degree."""
    _layer_args(global_tokens, d_model, d_ff, flops_per_s, bytes_per_s)
    _validate.count("n_tp", n_tp)
    _validate.count("n_axes", n_axes)
    math_s = 8 * global_tokens * d_model * d_ff / (n_tp * flops_per_s)
    activation_bytes = 2 * global_tokens * d_model
    collectives_moved = 3 if regather_input else 2
    comms_s = collectives_moved * activation_bytes / (bytes_per_s * n_axes)
    return LayerTimes(math_s, comms_s)


def fsdp_tp_layer_s(
    global_tokens, d_model, d_ff, n_fsdp, n_tp, flops_per_s, bytes_per_s, m_fsdp=2, m_tp=1, overlap_collectives=True
):
    """LayerTimes(math_s, comms_s) of one layer's forward pass on an X×Y mesh: math
    4BDF/(N·C); the FSDP all-gathers of W_in and W_out, 2·2·D·F/Y bytes
    over W·m_fsdp; the TP all-gather of In and reduce-scatter of Out,
    2·2·B·D/X bytes over W·m_tp. comms_s is the larger of the two when
    they overlap each other (the Scaling Book's assumption, which gives its
    published X_opt and α²/(m_fsdp·m_tp·F)), their sum when serialized."""
    _layer_args(global_tokens, d_model, d_ff, flops_per_s, bytes_per_s)
    _validate.count("n_fsdp", n_fsdp)
    _validate.count("n_tp", n_tp)
    _validate.count("m_fsdp", m_fsdp)
    _validate.count("m_tp", m_tp)
    n = n_fsdp * n_tp
    math_s = 4 * global_tokens * d_model * d_ff / (n * flops_per_s)
    weight_s = 4 * d_model * d_ff / (n_tp * m_fsdp * bytes_per_s)
    activation_s = 4 * global_tokens * d_model / (n_fsdp * m_tp * bytes_per_s)
    comms_s = max(weight_s, activation_s) if overlap_collectives else weight_s + activation_s
    return LayerTimes(math_s, comms_s)


def fsdp_tp_best_ratio(
    global_tokens, n_devices, d_ff, flops_per_s, bytes_per_s, m_fsdp=2, m_tp=1, overlap_collectives=True
):
    """math/comms of FSDP+TP at the continuous optimum X_opt (>= 1 is
    compute-bound): sqrt((B/N) / fsdp_tp_min_tokens_per_device)."""
    _validate.positive("global_tokens", global_tokens)
    _validate.count("n_devices", n_devices)
    threshold = fsdp_tp_min_tokens_per_device(d_ff, flops_per_s, bytes_per_s, m_fsdp, m_tp, overlap_collectives)
    return math.sqrt(global_tokens / n_devices / threshold)


def fsdp_tp_max_devices(global_tokens, d_ff, flops_per_s, bytes_per_s, m_fsdp=2, m_tp=1, overlap_collectives=True):
    """Most devices a batch of `global_tokens` keeps compute-bound under
    FSDP+TP: B / threshold."""
    _validate.positive("global_tokens", global_tokens)
    return global_tokens / fsdp_tp_min_tokens_per_device(
        d_ff, flops_per_s, bytes_per_s, m_fsdp, m_tp, overlap_collectives
    )


def attainable_flops_per_s(intensity_flops_per_byte, flops_per_s, hbm_bytes_per_s):
    """The roofline of one device: min(C, I · B_HBM), the FLOP/s a kernel of
    arithmetic intensity I (FLOPs per byte of HBM it moves) can reach at
    peak C and HBM bandwidth B_HBM. Ref: williams2009roofline."""
    _validate.positive("intensity_flops_per_byte", intensity_flops_per_byte)
    _validate.positive("flops_per_s", flops_per_s)
    _validate.positive("hbm_bytes_per_s", hbm_bytes_per_s)
    return min(flops_per_s, intensity_flops_per_byte * hbm_bytes_per_s)


_validate.guard_module(globals())
