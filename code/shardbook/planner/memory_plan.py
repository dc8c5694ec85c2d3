"""Step 2 of the planner: what one device keeps, per part.

The formulas live in `shardbook.memory` (state recipes, ZeRO stages,
activations per layer under each recomputation policy and attention kernel,
logits, recomputed FLOPs) and `shardbook.pipeline` (the bubble and the
microbatches a schedule keeps in flight, the deepest stage of an uneven
pipeline, DualPipe's two stages per device); this module only assembles them
into the breakdown a Candidate shows: weights, gradients, master weights,
optimizer state, activations, logits, gathered-weight buffers, headroom.
Ref: korthikanti2022reducing, narayanan2021megatron, rajbhandari2020zero,
dao2022flashattention, deepseek2024v3, maxtext.
"""

import math

from .. import _validate, memory, pipeline, training
from . import calibrate
from .shape import check_layout

ATTENTION = tuple(memory.ATTENTION)
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


class Unusable(ValueError):
    """The mesh cannot run this batch under these options (too few
    microbatches for the schedule, a rank without a microbatch): the
    search leaves such meshes out; evaluate raises it with the reason."""


# --- state recipes ---------------------------------------------------------------
STATE_RECIPES = tuple(memory.STATE_RECIPES)
# The planner's default: 16 bytes per parameter, ZeRO's accounting (BF16 weights
# and gradients, an FP32 master copy and FP32 Adam moments) and the total MaxText
# keeps (FP32 weights, gradients and moments). Megatron runs name "megatron"
# (18 bytes: FP32 gradient buffers).
DEFAULT_STATE_RECIPE = "bf16_master"
ZERO_STAGES = tuple(memory.ZERO_STAGES)


def check_recipe(state_recipe):
    """ValueError naming `state_recipe` and the valid names when it is
    neither a name in STATE_RECIPES nor a memory.StateRecipe (a reader's
    own recipe)."""
    if isinstance(state_recipe, memory.StateRecipe):
        return
    _validate.choice("state_recipe", state_recipe, STATE_RECIPES)


def state_breakdown(params_per_device, state_recipe, zero=0, zero_shards=1):
    """Bytes of weights, gradients, master weights and optimizer state on one
    device holding `params_per_device` parameters, with ZeRO stage `zero`
    over `zero_shards` data-parallel ranks (memory.state_breakdown_bytes)."""
    check_recipe(state_recipe)
    return dict(memory.state_breakdown_bytes(params_per_device, state_recipe, zero=zero, zero_shards=zero_shards))


def gradient_bytes_per_param(state_recipe):
    """Bytes per parameter of the gradients the data-parallel reduction moves
    (FP32 under Megatron's and MaxText's recipes, BF16 otherwise)."""
    check_recipe(state_recipe)
    return memory.state_recipe(state_recipe).gradient_bytes


# --- activations -------------------------------------------------------------------
RECOMPUTE = tuple(memory.RECOMPUTE)
# Policies the search tries when none is given, cheapest in FLOPs first.
SEARCH_POLICIES = ("none", "selective", "full")


def check_recompute(recompute):
    """ValueError naming `recompute` and the valid policies when it is unknown."""
    _validate.choice("recompute", recompute, RECOMPUTE)


def check_attention(attention):
    """ValueError naming `attention` and the valid kernels when it is unknown."""
    _validate.choice("attention", attention, ATTENTION)


def activation_bytes_per_layer(
    model, seq_len, micro_batch_seqs, *, pp, tp, cp, sequence_parallel, recompute, attention
):
    """Bytes one layer keeps in HBM for its backward on one device, for one
    microbatch, as a stage of a `pp`-stage pipeline counts it
    (memory.activation_bytes_per_stage_layer: for an MoE model with dense
    first layers, the mean over the model's layers with pp = 1, the larger
    kind with pp > 1)."""
    check_recompute(recompute)
    check_attention(attention)
    return memory.activation_bytes_per_stage_layer(
        model,
        seq_len,
        micro_batch_seqs,
        pp=pp,
        tp=tp,
        cp=cp,
        sequence_parallel=sequence_parallel,
        recompute=recompute,
        attention=attention,
    )


LOSS_LOGITS = tuple(memory.LOSS_LOGITS)


def logits_bytes(model, seq_len, micro_batch_seqs, *, tp, cp, loss_logits="fp32_copy"):
    """Bytes of the output logits one device holds for one microbatch (the
    last pipeline stage, at the loss's peak): vocabulary-parallel over tp
    (padded as Megatron pads it), tokens over cp, as the loss keeps them
    (`loss_logits`, memory.LOSS_LOGITS; memory.logits_bytes)."""
    return memory.logits_bytes(model, seq_len, micro_batch_seqs, tp=1, loss_logits=loss_logits) / tp / cp


def recomputed_forward_fraction(model, seq_len, recompute):
    """The share of the forward's FLOPs a recomputation policy runs again
    in the backward (0 for none, 1 for full): recomputed FLOPs over a
    third of the model FLOPs (the forward of forward + backward)."""
    forward = training.model_flops_per_token(model, seq_len, causal=True) / 3
    return memory.recomputed_flops_per_token(model, seq_len, recompute, causal=True) / forward


# --- pipeline schedules -----------------------------------------------------------------
SCHEDULES = tuple(pipeline.PLANNER_SCHEDULES)


def check_schedule(schedule):
    """ValueError naming `schedule` and the valid names when it is unknown."""
    _validate.choice("schedule", schedule, SCHEDULES)


def _schedule(function, *args):
    try:
        return function(*args)
    except ValueError as error:
        raise Unusable(str(error)) from None


def bubble_overhead(schedule, n_stages, n_microbatches, n_virtual=1):
    """Pipeline idle time over math time (pipeline.schedule_bubble_overhead);
    Unusable when the schedule cannot run that many microbatches."""
    check_schedule(schedule)
    return _schedule(pipeline.schedule_bubble_overhead, schedule, n_stages, n_microbatches, n_virtual)


def activation_microbatches(schedule, n_stages, n_microbatches, n_virtual=1):
    """Microbatches (of a whole stage's layers) whose activations the first
    stage holds at its peak (pipeline.schedule_activation_microbatches)."""
    check_schedule(schedule)
    return _schedule(pipeline.schedule_activation_microbatches, schedule, n_stages, n_microbatches, n_virtual)


def deepest_stage_layers(n_layers, n_stages, n_virtual=1, uneven=False):
    """Layers on the deepest pipeline stage (pipeline.deepest_stage_layers)."""
    return pipeline.deepest_stage_layers(n_layers, n_stages, n_virtual, uneven)


def parameter_copies(schedule):
    """Stages' weights (and gradient buffers) one device keeps under a
    schedule (DualPipe: 2; pipeline.schedule_parameter_copies)."""
    return pipeline.schedule_parameter_copies(schedule)


# --- the breakdown of one device ----------------------------------------------------------
WEIGHT_BYTES = 2  # the BF16 compute copy FSDP gathers


def _state(lay):
    """Weights, gradients, master weights and optimizer state of the deepest
    stage, times the stages a device runs (`parameter_copies`: DualPipe's
    device i runs stage i and stage p−1−i, so every stage is held twice over
    the pipeline). The weights and the gradients are per copy, at every ZeRO
    stage: each copy accumulates its own gradients over the microbatches of
    its direction (DeepSeek-V3 keeps them in FP32 "for batch size
    accumulation"), and the pair sums them only at the step's end (DualPipe's
    example adds one rank's .grad to the other's), so a ZeRO-2/3 shard is
    held for each of the two stages, never one for the pair. The master
    weights and the optimizer state are counted once: the summed gradient is
    the same on both ranks of the pair, which can split the update between
    them; the report's Table 2 and the DualPipe README give 2× for the
    parameters and say nothing of the optimizer, so no redundant copy is
    assumed. Ref: deepseek2024v3 §3.2.1 (Table 2) and §3.3.3, deepseek-dualpipe."""
    state = state_breakdown(lay.dense_local, lay.state_recipe, lay.zero, lay.dense_replicas)
    for key, value in state_breakdown(lay.expert_local, lay.state_recipe, lay.zero, lay.expert_replicas).items():
        state[key] += value
    if lay.mesh["pp"] > 1:
        copies = parameter_copies(lay.schedule)
        state["weights"] *= copies
        state["gradients"] *= copies
    return state


def _gathered(lay):
    """FSDP's buffers: the layer being computed and the next one being
    gathered, or (kept) the whole stage's BF16 weights, of the weights a
    device must gather: sharded over fsdp (dense ones over ep too with
    dense_over_ep), or over their data-parallel replicas by ZeRO-3, which
    is FSDP over those ranks."""
    zero3 = lay.zero == 3
    dense_full = lay.dense_local * lay.dense_shard
    expert_full = lay.expert_local * lay.mesh["fsdp"]
    dense_gathered = lay.dense_shard > 1 or (zero3 and lay.dense_replicas > 1)
    expert_gathered = lay.mesh["fsdp"] > 1 or (zero3 and lay.expert_replicas > 1)
    full = (dense_full if dense_gathered else 0.0) + (expert_full if expert_gathered else 0.0)
    if lay.keep_gathered_weights:
        return WEIGHT_BYTES * full
    return 2 * WEIGHT_BYTES * full / lay.deepest


def device_memory(lay, recompute=None):
    """(breakdown, policy, fits) for a Layout: `breakdown` maps each of
    BREAKDOWN_KEYS to bytes on the device that holds the most (the first
    stage, whose schedule keeps the most microbatches in flight, or the last,
    which also holds the logits; under DualPipe the first device runs the
    last stage too, and holds both); `policy` is `recompute`, or with None the
    first of SEARCH_POLICIES that fits."""

    check_layout(lay)
    m, mesh = lay.model, lay.mesh
    state = _state(lay)
    gathered = _gathered(lay)
    in_flight = activation_microbatches(lay.schedule, mesh["pp"], math.ceil(lay.n_micro), lay.n_virtual)
    hbm = calibrate.hbm_capacity_bytes(lay.accelerator)
    for policy in SEARCH_POLICIES if recompute is None else (recompute,):
        per_layer = activation_bytes_per_layer(
            m,
            lay.seq_len,
            lay.micro_batch_seqs,
            pp=mesh["pp"],
            tp=mesh["tp"],
            cp=mesh["cp"],
            sequence_parallel=lay.sequence_parallel,
            recompute=policy,
            attention=lay.attention,
        )
        logits = logits_bytes(
            m, lay.seq_len, lay.micro_batch_seqs, tp=mesh["tp"], cp=mesh["cp"], loss_logits=lay.loss_logits
        )
        if lay.schedule == "interleaved" and lay.uneven_pipeline and mesh["pp"] > 1:
            # the layers the pipeline lacks come out of the first stage's first chunk and the
            # last stage's last chunk (Llama 3): the device that holds most may be the second
            chunks = pipeline.uneven_chunk_layers(m.n_layers, mesh["pp"], lay.n_virtual)
            first_stage = per_layer * pipeline.interleaved_peak_layer_microbatches(
                mesh["pp"], math.ceil(lay.n_micro), lay.n_virtual, chunks
            )
        else:
            first_stage = per_layer * lay.deepest * in_flight
        last_stage = per_layer * lay.deepest + logits  # one microbatch in flight, and its logits
        if mesh["pp"] > 1 and lay.schedule == "dualpipe":
            # DualPipe's first device runs the last stage too (the shallowest and deepest layers
            # on one rank, deepseek2024v3 §3.2.3): its p + 1 microbatches and the loss's logits
            activations, kept_logits = first_stage, logits
        elif mesh["pp"] > 1 and first_stage >= last_stage:
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
