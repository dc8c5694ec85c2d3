"""Step 2 of the planner: what one device keeps, per part.

The formulas live in `shardbook.memory` (state recipes, ZeRO stages,
activations per layer under each recomputation policy and attention kernel,
logits, recomputed FLOPs) and `shardbook.pipeline` (the bubble and the
microbatches a schedule keeps in flight, the deepest stage of an uneven
pipeline, DualPipe's two stages per device); this module only assembles them
into the breakdown a Candidate shows: weights, gradients, master weights,
optimizer state, activations, logits, gathered-weight buffers, the reserve
held back for the framework (calibrate.memory_reserve_bytes), headroom.
Ref: korthikanti2022reducing, narayanan2021megatron, rajbhandari2020zero,
dao2022flashattention, deepseek2024v3, maxtext.
"""

import functools
import math

from .. import _validate, memory, pipeline
from . import calibrate
from .shape import check_layout

ATTENTION = tuple(memory.ATTENTION)
BREAKDOWN_KEYS = (
    "weights",
    "gradients",
    "master_weights",
    "optimizer_state",
    "activations",
    "layer_in_flight",
    "gradient_accumulator",
    "logits",
    "gathered_weight_buffers",
    "vocabulary_buffers",
    "reserve",
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
    (memory.STATE_RECIPES: FP32 under 'megatron', 'fp32', MaxText's default,
    and 'deepseek_v3'; BF16 under 'bf16_master' and 'pure_bf16')."""
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
    model, seq_len, micro_batch_seqs, *, pp, tp, cp, sequence_parallel, recompute, attention, precision="bf16"
):
    """Bytes one layer keeps in HBM for its backward on one device, for one
    microbatch, as a stage of a `pp`-stage pipeline counts it
    (memory.activation_bytes_per_stage_layer: for an MoE model with dense
    first layers, the mean over the model's layers with pp = 1, the larger
    kind with pp > 1); `precision` 'fp8': the GEMM inputs Transformer
    Engine saves in FP8 (memory.TE_FP8_SAVED_BYTES)."""
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
        precision=precision,
    )


LOSS_LOGITS = tuple(memory.LOSS_LOGITS)


def logits_bytes(model, seq_len, micro_batch_seqs, *, tp, cp, loss_logits="fp32_copy"):
    """Bytes of the output logits one device holds for one microbatch (the
    last pipeline stage, at the loss's peak): vocabulary-parallel over tp
    (V/tp, unpadded), tokens over cp, as the loss keeps them
    (`loss_logits`, memory.LOSS_LOGITS; memory.logits_bytes)."""
    return memory.logits_bytes(model, seq_len, micro_batch_seqs, tp=1, loss_logits=loss_logits) / tp / cp


def recomputed_forward_fraction(model, seq_len, recompute):
    """The share of the layers' forward FLOPs a recomputation policy runs
    again in the backward (0 for none, 1 for full): recomputed FLOPs over
    what 'full' reruns, every layer's forward (not the embedding or the
    output layer, which no policy reruns)."""
    layers_forward = memory.recomputed_flops_per_token(model, seq_len, "full", causal=True)
    return memory.recomputed_flops_per_token(model, seq_len, recompute, causal=True) / layers_forward


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
# State recipes whose weights are Megatron's BF16 compute copy, which Transformer Engine's FP8
# replaces in a transformer layer's linear weights (memory.te_fp8_weight_bytes); MaxText's
# recipes and DeepSeek-V3's own keep their weights as they say.
TE_FP8_RECIPES = ("megatron", "bf16_master")


def fp8_layer_weight_bytes(lay):
    """Bytes per parameter of a transformer layer's weights under the plan,
    or None where they are the state recipe's: with precision 'fp8' and a
    Megatron-style recipe (TE_FP8_RECIPES), Transformer Engine's FP8 weights
    as Megatron Bridge's FP8 recipes keep them (memory.te_fp8_weight_bytes,
    'primary': 2 bytes with the transpose a Hopper GEMM needs, 1 on
    Blackwell; an accelerator file, as the preset it is based on). The norms'
    few weights are counted with them. The embedding and the output layer
    stay BF16 (they are not Transformer Engine FP8 layers)."""
    check_layout(lay)
    if lay.precision != "fp8" or not isinstance(lay.state_recipe, str) or lay.state_recipe not in TE_FP8_RECIPES:
        return None
    non_tn = calibrate.preset_name(lay.accelerator) in memory.FP8_NON_TN_GEMM_ACCELERATORS
    return memory.te_fp8_weight_bytes(non_tn, "primary")


def precision_note(precision, state_recipe, recompute):
    """One line saying how a plan's memory counts its precision ('' in BF16):
    under 'fp8', which activations Transformer Engine keeps in one byte
    (memory.TE_FP8_SAVED_BYTES; a MaxText policy's named tensors and
    DeepSeek-V3's recipe as they say), the layers' weights
    (fp8_layer_weight_bytes) and the gradients (Transformer Engine writes a
    weight's gradient into main_grad in its own dtype, the state recipe's;
    activation gradients are BF16 and transient)."""
    check_recompute(recompute)
    if precision != "fp8":
        return ""
    kind = memory.recompute_policy(recompute).kind
    if kind == "korthikanti":
        kept = (
            "activations as Transformer Engine saves them (the FP8 matmuls' inputs it keeps in 1 byte, "
            "memory.TE_FP8_SAVED_BYTES; the rest BF16)"
        )
    elif kind == "recipe":
        kept = f"activations as the {recompute} recipe keeps them"
    else:
        kept = f"activations in BF16 as the {recompute} policy names them"
    if isinstance(state_recipe, str) and state_recipe in TE_FP8_RECIPES:
        weights = (
            "the layers' weights in FP8 (2 bytes a parameter with the transpose a Hopper GEMM needs, 1 on Blackwell)"
        )
    else:
        weights = "weights as the state recipe keeps them"
    return f"FP8: {kept}; {weights}; gradients in the state recipe's dtype."


def _state(lay, dense, expert, copies, ends=0.0):
    """Weights, gradients, master weights and optimizer state of one device
    holding `dense` and `expert` parameters (per device, every stage it runs
    together), which runs `copies` stages (`parameter_copies`: DualPipe's
    device i runs stage i and stage p−1−i, so every stage is held twice over
    the pipeline). The weights and the gradients are per copy, at every ZeRO
    stage: each copy accumulates its own gradients over the microbatches of
    its direction (DeepSeek-V3 keeps them in FP32 "for batch size
    accumulation"), and the pair sums them only at the step's end (DualPipe's
    example adds one rank's .grad to the other's), so a ZeRO-2/3 shard is
    held for each of the two stages, never one for the pair. The master
    weights and the optimizer state are counted once: the summed gradient is
    the same on both ranks of the pair, which can split the update between
    them (half of the pair's parameters each); the report's Table 2 and the
    DualPipe README give 2× for the parameters and say nothing of the
    optimizer, so no redundant copy is assumed. Ref: deepseek2024v3 §3.2.1
    (Table 2) and §3.3.3, deepseek-dualpipe."""
    state = state_breakdown(dense / copies, lay.state_recipe, lay.zero, lay.dense_replicas)
    for key, value in state_breakdown(expert / copies, lay.state_recipe, lay.zero, lay.expert_replicas).items():
        state[key] += value
    state["weights"] *= copies
    state["gradients"] *= copies
    fp8 = fp8_layer_weight_bytes(lay)
    if fp8 is not None:  # the layers' weights (all but the `ends`, embedding and output layer) in FP8
        extra = fp8 - memory.state_recipe(lay.state_recipe).weight_bytes
        sharded = lay.zero >= 3
        state["weights"] += extra * (dense - ends) / (lay.dense_replicas if sharded else 1)
        state["weights"] += extra * expert / (lay.expert_replicas if sharded else 1)
    return state


def _dense_gathered(lay):
    return lay.dense_shard > 1 or (lay.zero == 3 and lay.dense_replicas > 1)


def _gathered(lay, dense, expert, layers, ends=0.0):
    """FSDP's buffers on a device holding `dense` and `expert` parameters in
    `layers` transformer layers, of the weights it must gather: sharded over
    fsdp (dense ones over ep too with dense_over_ep), or over their
    data-parallel replicas by ZeRO-3, which is FSDP over those ranks. The
    layer being computed and the next one being gathered, each the device's
    mean transformer layer (`ends`, the embedding and output layer it holds,
    left out: `vocabulary_buffers` counts those), or (kept) every gathered
    BF16 weight it holds."""
    zero3 = lay.zero == 3
    dense_gathered = _dense_gathered(lay)
    expert_gathered = lay.mesh["fsdp"] > 1 or (zero3 and lay.expert_replicas > 1)
    full = (dense * lay.dense_shard if dense_gathered else 0.0) + (
        expert * lay.mesh["fsdp"] if expert_gathered else 0.0
    )
    if not full:
        return 0.0
    layer_full = full - (ends * lay.dense_shard if dense_gathered else 0.0)
    fp8 = fp8_layer_weight_bytes(lay)  # FP8 weights are gathered in FP8 (and transposed where the GEMM needs it)
    layer_bytes = WEIGHT_BYTES if fp8 is None else fp8
    if lay.keep_gathered_weights:
        return WEIGHT_BYTES * full if fp8 is None else WEIGHT_BYTES * (full - layer_full) + fp8 * layer_full
    return 2 * layer_bytes * layer_full / max(layers, 1)


def layer_in_flight_bytes(lay, recompute):
    """Bytes of the one layer a recomputing policy runs again at the peak:
    the backward of each layer first reruns its forward, so one layer
    (one microbatch) holds every activation 'none' keeps while the policy
    had kept less; Korthikanti et al. add exactly this layer to full
    recomputation's memory (§5, "plus the activations of one layer").
    With eager attention, the two score-sized BF16 buffers its backward
    forms (the gradients of the probabilities and of the scores) too.
    Both counts in the plan's precision (FP8: memory.TE_FP8_SAVED_BYTES).
    0 under 'none'. The TPU compiler places the peak of every 'full' plan
    inside the backward's recomputed layer. The breakdown shows what it
    holds beyond the loss's logits, which are freed before the layers'
    backward begins (the peak is the larger of the two phases).
    Ref: korthikanti2022reducing, chapter 97's compiled plans."""
    check_layout(lay)
    check_recompute(recompute)
    if recompute == "none":
        return 0.0
    kept = {}
    for policy in ("none", recompute):
        kept[policy] = activation_bytes_per_layer(
            lay.model,
            lay.seq_len,
            lay.micro_batch_seqs,
            pp=lay.mesh["pp"],
            tp=lay.mesh["tp"],
            cp=lay.mesh["cp"],
            sequence_parallel=lay.sequence_parallel,
            recompute=policy,
            attention=lay.attention,
            precision=lay.precision,
        )
    # eager attention's backward also forms the probabilities' and the scores' gradients (dP = dO·Vᵀ,
    # dS = P ⊙ (dP − rowsum)), each a BF16 score-sized buffer beside P; a flash kernel keeps them on chip
    m, mesh = lay.model, lay.mesh
    score_grads = 0.0
    if lay.attention == "eager":
        score_grads = 2 * 2 * m.n_heads * (lay.seq_len / mesh["cp"]) * lay.seq_len * lay.micro_batch_seqs / mesh["tp"]
    return max(0.0, kept["none"] - kept[recompute]) + score_grads


def scan_accumulates_gradients(accelerator):
    """Whether the accelerator's usual stack accumulates microbatch
    gradients in a scan beside the microbatch's own (JAX and MaxText on a
    TPU: the carry and the new gradient are both live when they are added,
    two gradient buffers), rather than into one buffer in place (Megatron's
    main_grad on a GPU)."""
    return calibrate.default_loss_logits(accelerator) == "fused_bf16"


def vocabulary_bytes(lay, embedding, below):
    """Whole-vocabulary buffers FSDP forms on a device holding `embedding`
    parameters (its shard of the input embedding), as the TPU compiler
    builds them: the embedding's gradient is formed whole by a scatter-add
    and all-reduced (two V × D/tp BF16 buffers, the table's size each) once
    the layers' backward is done, when the `below` bytes (activations, the
    layer in flight, the logits) are free: what that phase holds beyond
    them, 0 when the weights are not gathered or it holds less. (The
    compiler forms the output layer's gradient whole too, through the
    layers' backward, in the referee's program; the published tpu-recipes
    Llama 3.1 405B run on v5p-1024, which ran, would not fit with it, so
    that buffer is left to the program.) Ref: chapter 97's compiled plans."""
    check_layout(lay)
    _validate.non_negative("embedding", embedding)
    _validate.non_negative("below", below)
    if not _dense_gathered(lay):
        return 0.0
    return max(2 * WEIGHT_BYTES * embedding * lay.dense_shard - below, 0.0)


def devices(lay):
    """The devices whose memory differs, as {label: (dense, expert, layers,
    copies, held, logits)}: parameters per device (dense and routed-expert),
    transformer layers, stages run (parameter_copies), activations held at
    the peak in layer-microbatches (one layer's activations of one
    microbatch), and whether the device holds the loss's logits:

    - pp = 1: the one device (every parameter, one microbatch, the logits).
    - a pipeline: every stage s, with its layers (pipeline.uneven_chunk_layers
      for an uneven one), the input embedding on stage 0 and the output layer
      on stage p−1 (Megatron-LM; with tied embeddings its own copy of the
      table there), the activations its schedule keeps in flight
      (pipeline.stage_activation_layer_microbatches: under 1F1B the first
      stage the most microbatches, the last one; under ZB-H1 every stage
      as many as the first) and the logits on the last.
    - DualPipe: device i runs stages i and p−1−i, so device 0 holds the
      shallowest layers with the embedding and the deepest with the output
      layer (deepseek2024v3 §3.2.3), and the logits; each device p + 1
      microbatches of a stage's layers (Table 2). DeepSeek-V3's MTP module
      (one more MoE layer beside the output head) is not counted.

    Ref: narayanan2021megatron, dubey2024llama3, deepseek2024v3."""
    check_layout(lay)
    pp, v = lay.mesh["pp"], lay.n_virtual
    m = math.ceil(lay.n_micro)
    in_flight = activation_microbatches(lay.schedule, pp, m, v)  # also checks the schedule can run
    if pp == 1:
        return {"the device": (lay.dense_local, lay.expert_local, lay.deepest, 1, lay.deepest * in_flight, True)}
    layers = [sum(row) for row in lay.chunk_layers]
    out = {}
    if lay.schedule == "dualpipe":
        copies = parameter_copies(lay.schedule)
        for i in range(pp // 2):
            here = layers[i] + layers[pp - 1 - i]
            ends = lay.embedding_local + lay.head_local if i == 0 else 0.0
            dense = lay.dense_layer_local * here + ends
            out[f"device {i} (stages {i} and {pp - 1 - i})"] = (
                dense,
                lay.expert_layer_local * here,
                here,
                copies,
                lay.deepest * in_flight,
                i == 0,
            )
        return out
    held = _stage_peaks(lay.schedule, pp, m, v, lay.chunk_layers)
    for stage, here in enumerate(layers):
        ends = (lay.embedding_local if stage == 0 else 0.0) + (lay.head_local if stage == pp - 1 else 0.0)
        out[f"stage {stage}"] = (
            lay.dense_layer_local * here + ends,
            lay.expert_layer_local * here,
            here,
            1,
            held[stage],
            stage == pp - 1,
        )
    return out


@functools.lru_cache(maxsize=4096)
def _stage_peaks(schedule, pp, n_micro, n_virtual, chunk_layers):
    """pipeline.stage_activation_layer_microbatches, remembered: an uneven
    interleaved pipeline's peaks come from a timeline of its m·v·p chunk
    passes, the same for every recomputation policy, precision and weight
    handling the search tries on a mesh, and for meshes of the same
    pipeline and microbatch count."""
    return tuple(
        _schedule(pipeline.stage_activation_layer_microbatches, schedule, pp, n_micro, n_virtual, chunk_layers)
    )


_policy_free_last = [None, None]  # (the Layout, its parts): a candidate counts several policies on one Layout


def _policy_free(lay):
    """{label: (state, bytes of the embedding and head held, gathered weight
    buffers, layer-microbatches held, holds the logits)} for every device of `devices(lay)`: what does not
    depend on the recomputation policy, counted once for the last Layout
    asked about (evaluate counts each policy of a search on the same one)."""
    if _policy_free_last[0] is not lay:
        parts = {}
        for label, (dense, expert, layers, copies, held, has_logits) in devices(lay).items():
            ends = max(0.0, dense - lay.dense_layer_local * layers * copies)
            state = _state(lay, dense, expert, copies, ends)
            parts[label] = (state, ends, _gathered(lay, dense, expert, layers, ends), held, has_logits)
        _policy_free_last[:] = [lay, parts]
    return _policy_free_last[1]


def device_breakdowns(lay, recompute):
    """{label: breakdown} for every device of `devices(lay)` under the
    recomputation policy `recompute`: bytes of each of BREAKDOWN_KEYS."""
    check_layout(lay)
    check_recompute(recompute)
    m, mesh = lay.model, lay.mesh
    hbm = calibrate.hbm_capacity_bytes(lay.accelerator)
    per_layer = activation_bytes_per_layer(
        m,
        lay.seq_len,
        lay.micro_batch_seqs,
        pp=mesh["pp"],
        tp=mesh["tp"],
        cp=mesh["cp"],
        sequence_parallel=lay.sequence_parallel,
        recompute=recompute,
        attention=lay.attention,
        precision=lay.precision,
    )
    logits = logits_bytes(
        m, lay.seq_len, lay.micro_batch_seqs, tp=mesh["tp"], cp=mesh["cp"], loss_logits=lay.loss_logits
    )
    in_flight = layer_in_flight_bytes(lay, recompute)
    accumulates = math.ceil(lay.n_micro) > 1 and scan_accumulates_gradients(lay.accelerator)
    out = {}
    for label, (state, ends, gathered, held, has_logits) in _policy_free(lay).items():
        head = min(ends, lay.head_local) if has_logits else 0.0
        shown_logits = logits if has_logits else 0.0
        breakdown = dict(
            state,
            activations=per_layer * held,
            # the loss's logits are freed before the layers' backward starts: the two phases never
            # coexist, so the recomputed layer adds only what it holds beyond the logits
            layer_in_flight=max(0.0, in_flight - shown_logits),
            gradient_accumulator=state["gradients"] if accumulates else 0.0,
            logits=shown_logits,
            gathered_weight_buffers=gathered,
            vocabulary_buffers=vocabulary_bytes(lay, ends - head, per_layer * held + max(in_flight, shown_logits)),
            reserve=lay.reserve_bytes,
        )
        breakdown["headroom"] = hbm - sum(breakdown.values())
        out[label] = breakdown
    return out


def peak_device(lay, recompute):
    """(label, breakdown) of the device that holds the most under `recompute`
    (the first such in `devices` order on a tie)."""
    breakdowns = device_breakdowns(lay, recompute)
    label = min(breakdowns, key=lambda k: breakdowns[k]["headroom"])
    return label, breakdowns[label]


def device_memory(lay, recompute=None):
    """(breakdown, policy, fits, device) for a Layout: `breakdown` maps each
    of BREAKDOWN_KEYS to bytes on the device that holds the most
    (`peak_device` over `devices`: with a pipeline, the stage whose layers,
    embedding or output layer, activations in flight and logits add up to
    the most; under DualPipe the device pairs), `device` its label; `policy`
    is `recompute`, or with None the first of SEARCH_POLICIES that fits."""
    check_layout(lay)
    for policy in SEARCH_POLICIES if recompute is None else (recompute,):
        device, breakdown = peak_device(lay, policy)
        if breakdown["headroom"] >= 0:
            return breakdown, policy, True, device
    return breakdown, policy, False, device


_validate.guard_module(globals())
