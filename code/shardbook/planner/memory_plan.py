"""Step 2 of the planner: what one device keeps, per part.

The formulas live in `shardbook.memory` (state recipes, ZeRO stages,
activations per layer under each recomputation policy and attention kernel,
logits) and `shardbook.pipeline` (the microbatches a schedule keeps in
flight, the deepest stage of an uneven pipeline); this module only
assembles them into the breakdown a Candidate shows: weights, gradients,
master weights, optimizer state, activations, logits, gathered-weight
buffers, headroom.

Until `memory` and `pipeline` carry the planner contract (STATE_RECIPES,
state_breakdown_bytes, activation_bytes_per_layer with `attention` and
`cp`, logits_bytes; schedule_bubble_overhead,
schedule_activation_microbatches, deepest_stage_layers), the functions
below fall back to a provisional adapter over what those modules already
offer; each fallback is marked. Ref: korthikanti2022reducing,
narayanan2021megatron, rajbhandari2020zero, dao2022flashattention,
deepseek2024v3.
"""

import dataclasses
import inspect
import math

from .. import _validate, memory, models, pipeline, training

ATTENTION = ("flash", "eager")
BREAKDOWN_KEYS = (
    "weights",
    "gradients",
    "master_weights",
    "optimizer_state",
    "activations",
    "logits",
    "gathered_weight_buffers",
    "headroom",
)

# --- state recipes ---------------------------------------------------------------
# Provisional adapter: bytes per parameter (weights, gradients, master copy,
# optimizer) until memory.STATE_RECIPES lands.
_FALLBACK_RECIPES = {
    # Megatron mixed precision: BF16 weights, FP32 gradient buffers (main_grad),
    # FP32 master copy, two FP32 Adam moments: 2 + 4 + 4 + 8 = 18 (korthikanti2022reducing)
    "megatron": (2, 4, 4, 8),
    # BF16 weights and gradients, FP32 master and moments: 16 (rajbhandari2020zero)
    "bf16_master": (2, 2, 4, 8),
    # BF16 weights, gradients and moments, no master copy: 8
    "pure_bf16": (2, 2, 0, 4),
}
STATE_RECIPES = tuple(getattr(memory, "STATE_RECIPES", _FALLBACK_RECIPES))
# The planner's default: 16 bytes per parameter (BF16 weights and gradients, an
# FP32 master copy and FP32 Adam moments), ZeRO's accounting and the total MaxText
# keeps (FP32 weights and gradients, no separate master). Megatron runs name
# "megatron" (18 bytes: FP32 gradient buffers).
DEFAULT_STATE_RECIPE = "bf16_master"
ZERO_STAGES = (0, 1, 2, 3)


def check_recipe(state_recipe):
    """ValueError naming `state_recipe` and the valid names when it is unknown."""
    _validate.choice("state_recipe", state_recipe, STATE_RECIPES)


def check_zero(zero):
    """ValueError unless `zero` is a ZeRO stage 0-3."""
    if not isinstance(zero, int) or isinstance(zero, bool) or zero not in ZERO_STAGES:
        raise ValueError(f"zero: must be one of 0, 1, 2, 3 (ZeRO stage over the data-parallel ranks), got {zero!r}")


def state_breakdown(params_per_device, state_recipe, zero=0, zero_shards=1):
    """Bytes of weights, gradients, master weights and optimizer state on one
    device holding `params_per_device` parameters, with ZeRO stage `zero`
    over `zero_shards` data-parallel ranks (1: optimizer and master
    sharded; 2: gradients too; 3: weights too)."""
    check_recipe(state_recipe)
    check_zero(zero)
    if hasattr(memory, "state_breakdown_bytes"):
        return dict(memory.state_breakdown_bytes(params_per_device, state_recipe, zero=zero, zero_shards=zero_shards))
    # provisional adapter
    _validate.non_negative("params_per_device", params_per_device)
    _validate.count("zero_shards", zero_shards)
    w, g, master, opt = (params_per_device * b for b in _FALLBACK_RECIPES[state_recipe])
    z = zero_shards
    return {
        "weights": w / z if zero >= 3 else w,
        "gradients": g / z if zero >= 2 else g,
        "master_weights": master / z if zero >= 1 else master,
        "optimizer_state": opt / z if zero >= 1 else opt,
    }


def gradient_bytes_per_param(state_recipe):
    """Bytes per parameter of the gradients the data-parallel reduction moves
    (FP32 under Megatron's recipe, BF16 otherwise)."""
    return state_breakdown(1, state_recipe)["gradients"]


# --- activations -------------------------------------------------------------------
RECOMPUTE = tuple(memory.RECOMPUTE)
# Policies the search tries, cheapest in FLOPs first.
SEARCH_POLICIES = tuple(p for p in ("none", "selective", "full") if p in RECOMPUTE)
# Policies beyond Korthikanti's three (MaxText's) are priced in FLOPs as the
# nearest of the three that recomputes at most as much.
_FLOPS_AS = {"none": "none", "selective": "selective", "full": "full"}


def check_recompute(recompute):
    """ValueError naming `recompute` and the valid policies when it is unknown."""
    _validate.choice("recompute", recompute, RECOMPUTE)


def check_attention(attention):
    """ValueError naming `attention` and the valid kernels when it is unknown."""
    _validate.choice("attention", attention, ATTENTION)


def _new_activation_api():
    return "attention" in inspect.signature(memory.activation_bytes_per_layer).parameters


def _kv_replicated(m, tp):
    """The model as one TP rank sees its K and V: with tp beyond the KV heads
    Megatron replicates them, each rank keeping one KV head (the same
    activations as a model with tp KV heads)."""
    if tp > m.n_kv_heads and tp % m.n_kv_heads == 0 and m.n_heads % tp == 0:
        return dataclasses.replace(m, n_kv_heads=tp)
    return m


def activation_bytes_per_layer(model, seq_len, micro_batch_seqs, *, tp, cp, sequence_parallel, recompute, attention):
    """Bytes one layer keeps for its backward on one device, for one
    microbatch of `micro_batch_seqs` sequences of `seq_len` tokens (the
    seq_len/cp a context-parallel rank owns)."""
    m = _kv_replicated(models.get(model), tp)
    check_recompute(recompute)
    check_attention(attention)
    if _new_activation_api():
        return memory.activation_bytes_per_layer(
            m,
            seq_len,
            micro_batch_seqs,
            tp=tp,
            cp=cp,
            sequence_parallel=sequence_parallel,
            recompute=recompute,
            attention=attention,
        )
    # provisional adapter: a flash kernel keeps no s² probabilities, which is
    # what Korthikanti's 'selective' count leaves out
    policy = "selective" if attention == "flash" and recompute == "none" else recompute
    return memory._layer_bytes(m, seq_len // cp, seq_len, micro_batch_seqs, tp, sequence_parallel, policy)


def offloaded_fraction(recompute):
    """The share of the kept activations a policy moves to host memory (0
    unless memory says otherwise)."""
    if hasattr(memory, "offloaded_fraction"):
        return memory.offloaded_fraction(recompute)
    return 0.0


def logits_bytes(model, seq_len, micro_batch_seqs, *, tp, cp):
    """Bytes of the output logits one device holds for one microbatch (the
    last pipeline stage): vocabulary-parallel over tp, tokens over cp."""
    m = models.get(model)
    if hasattr(memory, "logits_bytes"):
        return memory.logits_bytes(m, seq_len, micro_batch_seqs, tp=tp) / cp
    # provisional adapter: FP32 logits for the loss, vocabulary split over tp
    return 4 * seq_len * micro_batch_seqs * m.vocab_size / tp / cp


def hardware_flops_per_token(model, seq_len, recompute, attention):
    """FLOPs the devices run per token under a policy and attention kernel:
    a flash kernel's backward recomputes the attention scores, which is what
    'selective' adds (training.hardware_flops_per_token, causal)."""
    if hasattr(memory, "recomputed_flops_per_token"):
        # what the policy runs again (memory counts MaxText's named policies
        # tensor by tensor), plus the scores a flash kernel's backward
        # recomputes when the policy does not already repeat them
        m = models.get(model)
        extra = memory.recomputed_flops_per_token(m, seq_len, recompute, causal=True)
        if attention == "flash":
            scores = memory.recomputed_flops_per_token(m, seq_len, "selective", causal=True)
            policy = memory.recompute_policy(recompute)
            if policy.name == "none" or (policy.kind == "named" and "context" in policy.saves + policy.offloads):
                extra += scores
        return training.model_flops_per_token(m, seq_len, causal=True) + extra
    policy = _FLOPS_AS.get(recompute, "full")
    if attention == "flash" and policy == "none":
        policy = "selective"
    return training.hardware_flops_per_token(model, seq_len, policy, causal=True)


# --- pipeline schedules -----------------------------------------------------------------
SCHEDULES = tuple(getattr(pipeline, "PLANNER_SCHEDULES", ("gpipe", "1f1b", "interleaved", "zero_bubble", "dualpipe")))


def check_schedule(schedule):
    """ValueError naming `schedule` and the valid names when it is unknown."""
    _validate.choice("schedule", schedule, SCHEDULES)


def bubble_overhead(schedule, n_stages, n_microbatches, n_virtual=1):
    """Pipeline idle time over math time for a schedule."""
    check_schedule(schedule)
    if n_stages == 1:
        return 0.0
    if hasattr(pipeline, "schedule_bubble_overhead"):
        return pipeline.schedule_bubble_overhead(schedule, n_stages, n_microbatches, n_virtual)
    # provisional adapter
    p, m, v = n_stages, n_microbatches, n_virtual
    if schedule == "interleaved":
        return (p - 1) / (v * m)
    if schedule == "zero_bubble":  # ZB-H1: (p-1)(T_F + T_B - T_W) with equal thirds (qi2024zerobubble)
        return (p - 1) / (3 * m)
    if schedule == "dualpipe":  # (p/2-1)(F&B + B - 3W) with F = B = W and F&B <= F + B (deepseek2024v3)
        return 0.0
    return (p - 1) / m


def activation_microbatches(schedule, n_stages, n_microbatches, n_virtual=1):
    """Microbatches (of a whole stage's layers) whose activations the first
    stage holds at its peak."""
    check_schedule(schedule)
    if n_stages == 1:
        return 1.0
    if hasattr(pipeline, "schedule_activation_microbatches"):
        return pipeline.schedule_activation_microbatches(schedule, n_stages, n_microbatches, n_virtual)
    # provisional adapter
    p, m, v = n_stages, n_microbatches, n_virtual
    if schedule == "gpipe":
        return float(m)
    if schedule == "interleaved":
        return float(min(m, p * (1 + (p - 1) / (p * v))))
    if schedule == "dualpipe":
        return float(min(m, p + 1))
    return float(min(p, m))


def deepest_stage_layers(n_layers, n_stages, n_virtual=1, uneven=False):
    """Layers on the deepest pipeline stage (all its virtual chunks)."""
    if hasattr(pipeline, "deepest_stage_layers"):
        return pipeline.deepest_stage_layers(n_layers, n_stages, n_virtual, uneven)
    # provisional adapter: an uneven pipeline gives no device more than ceil(L/p) layers
    if uneven:
        return math.ceil(n_layers / n_stages)
    if n_layers % (n_stages * n_virtual):
        raise ValueError(
            f"n_virtual: {n_virtual} must divide the layers per stage ({n_layers} layers on {n_stages} stages)"
        )
    return n_layers // n_stages


def parameter_copies(schedule):
    """Copies of a stage's weights a schedule keeps (DualPipe: 2, its two
    directions; deepseek2024v3 Table 2)."""
    check_schedule(schedule)
    return 2 if schedule == "dualpipe" else 1


# --- the breakdown of one device ----------------------------------------------------------
WEIGHT_BYTES = 2  # the BF16 compute copy FSDP gathers


def _state(lay):
    """Weights, gradients, master weights and optimizer state of the deepest stage."""
    state = state_breakdown(lay.dense_local, lay.state_recipe, lay.zero, lay.dense_replicas)
    for key, value in state_breakdown(lay.expert_local, lay.state_recipe, lay.zero, lay.expert_replicas).items():
        state[key] += value
    if lay.mesh["pp"] > 1:
        state["weights"] *= parameter_copies(lay.schedule)
    return state


def _gathered(lay):
    """FSDP's buffers: the layer being computed and the next one being
    gathered, or (kept) the whole stage's weights and an unsharded gradient
    buffer."""
    dense_full = lay.dense_local * lay.dense_shard
    expert_full = lay.expert_local * lay.mesh["fsdp"]
    if lay.dense_shard == 1 and lay.mesh["fsdp"] == 1:
        return 0.0
    if lay.keep_gathered_weights:
        return (WEIGHT_BYTES + gradient_bytes_per_param(lay.state_recipe)) * (dense_full + expert_full)
    return 2 * WEIGHT_BYTES * (dense_full + expert_full) / lay.deepest


def device_memory(lay, recompute=None):
    """(breakdown, policy, fits) for a Layout: `breakdown` maps each of
    BREAKDOWN_KEYS to bytes on the device that holds the most (the first
    stage, whose schedule keeps the most microbatches in flight, or the last,
    which also holds the logits); `policy` is `recompute`, or with None the
    first of SEARCH_POLICIES that fits."""
    m, mesh = lay.model, lay.mesh
    state = _state(lay)
    gathered = _gathered(lay)
    in_flight = activation_microbatches(lay.schedule, mesh["pp"], math.ceil(lay.n_micro), lay.n_virtual)
    hbm = lay.accelerator.hbm_bytes
    for policy in SEARCH_POLICIES if recompute is None else (recompute,):
        per_layer = activation_bytes_per_layer(
            m,
            lay.seq_len,
            lay.micro_batch_seqs,
            tp=mesh["tp"],
            cp=mesh["cp"],
            sequence_parallel=lay.sequence_parallel,
            recompute=policy,
            attention=lay.attention,
        ) * (1 - offloaded_fraction(policy))
        logits = logits_bytes(m, lay.seq_len, lay.micro_batch_seqs, tp=mesh["tp"], cp=mesh["cp"])
        first_stage = per_layer * lay.deepest * in_flight
        last_stage = per_layer * lay.deepest + logits  # one microbatch in flight, and its logits
        if mesh["pp"] > 1 and first_stage >= last_stage:
            activations, kept_logits = first_stage, 0.0
        else:
            activations, kept_logits = (first_stage if mesh["pp"] == 1 else per_layer * lay.deepest), logits
        breakdown = dict(state, activations=activations, logits=kept_logits, gathered_weight_buffers=gathered)
        used = sum(breakdown.values())
        breakdown["headroom"] = hbm - used
        if used <= hbm:
            return breakdown, policy, True
    return breakdown, policy, False


_validate.guard_module(globals())
