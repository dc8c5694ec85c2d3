"""The shape of one training step on one mesh, which every step of the
planner reads: the model and accelerator, the mesh and where its axes sit,
the options it runs under, the microbatches, and the parameters one
device holds (dense and routed-expert: per layer, the embedding and the
output layer, and the deepest pipeline stage's share by layer count).
"""

import math

from .. import _validate, hardware, memory, models, pipeline
from . import calibrate, memory_plan
from .options import NAMES, PlanOptions
from .placement import DEFAULT_ORDER, check_mesh, normalize_mesh, place
from .shape import Layout, check_layout

__all__ = ["Layout", "TooFewSequences", "check_layout", "check_options", "layout", "layout_plan", "stage_chunk_layers"]

PRECISIONS = memory.PRECISIONS  # the precisions memory counts, one list for the planner and the run records


class TooFewSequences(memory_plan.Unusable):
    """The batch leaves a data-parallel rank less than one microbatch: the
    mesh is not usable for it (the search skips such meshes)."""


def check_options(schedule, n_virtual, recompute, attention, state_recipe, zero, pp):
    """ValueError naming the argument and the valid values for an unknown
    schedule, recomputation policy, attention kernel, state recipe or ZeRO
    stage, or virtual stages without an interleaved schedule."""
    memory_plan.check_schedule(schedule)
    _validate.count("n_virtual", n_virtual)
    if n_virtual > 1 and schedule != "interleaved":
        raise ValueError(f"n_virtual: {n_virtual} virtual stages need schedule='interleaved', got {schedule!r}")
    if recompute is not None:
        memory_plan.check_recompute(recompute)
    memory_plan.check_attention(attention)
    memory_plan.check_recipe(state_recipe)
    memory.check_zero(zero)
    if schedule == "dualpipe" and pp > 1 and pp % 2:
        raise ValueError(f"schedule: 'dualpipe' needs an even number of stages, got pp={pp}")


def stage_chunk_layers(n_layers, pp, n_virtual, uneven_pipeline):
    """Layers in each chunk of each stage, [stage][chunk]: equal stages, or
    with `uneven_pipeline` pipeline.uneven_chunk_layers (the missing layers
    from the first stage's first chunks and the last stage's last ones, as
    Llama 3 takes them). Where those two stages cannot give up enough
    layers (a pipeline nearly as deep as the model), one chunk per stage
    takes them from the stages next in from either end, alternately, each
    keeping one layer; with virtual stages such a mesh is Unusable."""
    deepest = pipeline.deepest_stage_layers(n_layers, pp, n_virtual, uneven_pipeline)
    if pp == 1 or not uneven_pipeline or pp * deepest == n_layers:
        return [[deepest // n_virtual] * n_virtual for _ in range(pp)]
    try:
        return pipeline.uneven_chunk_layers(n_layers, pp, n_virtual)
    except ValueError as error:
        if n_virtual > 1:
            raise memory_plan.Unusable(str(error)) from None
    layers = [deepest] * pp
    missing = pp * deepest - n_layers  # at most pp·(deepest − 1), since pp <= n_layers
    inward = [s for pair in zip(range(pp), reversed(range(pp)), strict=True) for s in pair][:pp]
    while missing:
        for stage in inward:
            if missing and layers[stage] > 1:
                layers[stage] -= 1
                missing -= 1
    return [[n] for n in layers]


def layout(
    model,
    accelerator,
    mesh,
    global_tokens,
    *,
    seq_len,
    micro_batch_seqs,
    recompute,
    order=DEFAULT_ORDER,
    schedule,
    n_virtual,
    sequence_parallel,
    attention,
    state_recipe,
    zero,
    n_devices,
    uneven_pipeline,
    keep_gathered_weights,
    ideal_overlap,
    grad_reduce_overlap,
    capacity_factor=1.0,
    dense_over_ep,
    routing_node_limit,
    fp8_dispatch,
    precision="bf16",
    tp_comm_overlap=False,
    loss_logits=None,
    slices=None,
    reserve_bytes=None,
    stack="any",
):
    """The Layout of a step, or a ValueError naming the argument and the
    rule (TooFewSequences when a data-parallel rank gets less than one
    microbatch). The keywords' boundary: `model` and `accelerator` (presets'
    names or objects) are resolved here, the keywords become a PlanOptions,
    and layout_plan builds the step."""
    arguments = dict(locals())  # the arguments as they arrived: no other name is bound yet
    options = PlanOptions.of({name: value for name, value in arguments.items() if name in NAMES})
    return layout_plan(models.get(model), hardware.get(accelerator), mesh, global_tokens, options, n_devices)


def _check_resolved(m, acc, options):
    """TypeError unless the model, the accelerator and the options are the objects layout_plan takes."""
    if not isinstance(m, models.Model):
        raise TypeError(f"m: must be a models.Model (layout resolves a name), got {type(m).__name__}")
    if not isinstance(acc, hardware.Accelerator):
        raise TypeError(f"acc: must be a hardware.Accelerator (layout resolves a name), got {type(acc).__name__}")
    if not isinstance(options, PlanOptions):
        raise TypeError(f"options: must be a PlanOptions, got {type(options).__name__}")


def layout_plan(m, acc, mesh, global_tokens, options, n_devices=None):
    """The Layout of a step of model `m` (a models.Model) on accelerator
    `acc` (a hardware.Accelerator), both resolved by the caller, under
    `options` (a PlanOptions with every field concrete), or a ValueError as
    `layout` says."""
    _check_resolved(m, acc, options)
    seq_len, micro_batch_seqs, recompute = options.seq_len, options.micro_batch_seqs, options.recompute
    order, schedule, n_virtual = options.order, options.schedule, options.n_virtual
    sequence_parallel, attention, state_recipe = options.sequence_parallel, options.attention, options.state_recipe
    zero, uneven_pipeline, keep_gathered_weights = options.zero, options.uneven_pipeline, options.keep_gathered_weights
    ideal_overlap, grad_reduce_overlap = options.ideal_overlap, options.grad_reduce_overlap
    dense_over_ep, routing_node_limit, fp8_dispatch = (
        options.dense_over_ep,
        options.routing_node_limit,
        options.fp8_dispatch,
    )
    precision, tp_comm_overlap, capacity_factor = options.precision, options.tp_comm_overlap, options.capacity_factor
    loss_logits, slices, reserve_bytes = options.loss_logits, options.slices, options.reserve_bytes
    mesh = normalize_mesh(mesh)
    options.check_flags()
    _validate.positive("global_tokens", global_tokens)
    _validate.count("seq_len", seq_len)
    _validate.count("micro_batch_seqs", micro_batch_seqs)
    n = math.prod(mesh.values())
    if n_devices is not None and n != n_devices:
        raise ValueError(f"mesh: degrees multiply to {n}, not to the device count {n_devices}")
    check_mesh(m, mesh, seq_len, uneven_pipeline)
    check_options(schedule, n_virtual, recompute, attention, state_recipe, zero, mesh["pp"])
    zero = memory.check_zero(zero)  # a numpy integer becomes an int
    _validate.choice("precision", precision, PRECISIONS)
    if precision == "fp8" and calibrate.fp8_peak_ratio(acc) <= 1:
        raise ValueError(
            f"precision: 'fp8' needs FP8 matmuls, which {acc.name} does not have "
            f"(none in planner.calibrate.FP8_PEAK_RATIO or its file's calibration); use 'bf16'"
        )
    _validate.positive("capacity_factor", capacity_factor)
    if m.is_moe and capacity_factor > m.n_experts / m.top_k:
        # capacity c·k·T/E above T: an expert would hold room for more tokens than the batch has
        raise ValueError(
            f"capacity_factor: at most n_experts / top_k = {m.n_experts / m.top_k:g} for {m.name} "
            f"(an expert's capacity c·k·T/E cannot exceed the T tokens), got {capacity_factor!r}"
        )
    if loss_logits is None:
        loss_logits = calibrate.default_loss_logits(acc)
    _validate.choice("loss_logits", loss_logits, memory_plan.LOSS_LOGITS)
    reserve_bytes = calibrate.checked_reserve_bytes(acc, reserve_bytes)
    if routing_node_limit is not None:
        _validate.count("routing_node_limit", routing_node_limit)
    if global_tokens < n:
        raise ValueError(f"global_tokens: {global_tokens:g} is below one token per device ({n} devices)")
    pp, tp, ep, fsdp = mesh["pp"], mesh["tp"], mesh["ep"], mesh["fsdp"]
    seqs_per_replica = global_tokens / seq_len / (mesh["dp"] * fsdp * ep)
    if seqs_per_replica < micro_batch_seqs:
        raise TooFewSequences(
            f"global_tokens: leaves {seqs_per_replica:g} sequences of {seq_len} per data-parallel rank, "
            f"fewer than micro_batch_seqs={micro_batch_seqs}"
        )
    if seqs_per_replica > 2**53:
        raise ValueError(f"global_tokens: {global_tokens:g} tokens is more than 2**53 sequences per rank")
    deepest = memory_plan.deepest_stage_layers(m.n_layers, pp, n_virtual if pp > 1 else 1, uneven_pipeline)
    expert_params = models.routed_expert_param_count(m)
    dense_params = models.param_count(m) - expert_params
    stage_share = deepest / m.n_layers  # the deepest stage's share of the layers
    dense_shard = fsdp * (ep if dense_over_ep else 1)
    dense_split = tp * dense_shard  # the embedding and output layer are vocabulary-parallel over tp
    # the input embedding sits on the first stage, the output layer (final norm and projection)
    # on the last; with tied embeddings and pp > 1 the last stage keeps its own copy of the
    # table (Megatron-LM; its gradient is all-reduced between the two): narayanan2021megatron
    input_params, output_params = models.end_param_counts(m)
    layer_dense_params = dense_params - input_params - output_params
    if m.tied_embeddings and pp > 1:
        output_params += input_params
    chunk_layers = stage_chunk_layers(m.n_layers, pp, n_virtual if pp > 1 else 1, uneven_pipeline)
    # TP beyond the KV heads replicates K and V: each rank keeps one KV head's projections whole
    # (2·d·head_dim, and its biases) where sharding would leave it 1/tp of all of them
    kv_extra = 0.0
    if m.mla is None and tp > m.n_kv_heads:
        kv_layer = 2 * m.n_kv_heads * m.head_dim * (m.d_model + (1 if m.qkv_bias else 0))
        kv_extra = kv_layer * (1 / m.n_kv_heads - 1 / tp) / dense_shard
    return Layout(
        model=m,
        accelerator=acc,
        mesh=mesh,
        placement=place(acc, mesh, order, slices),
        global_tokens=global_tokens,
        seq_len=seq_len,
        micro_batch_seqs=micro_batch_seqs,
        # one virtual stage per device is 1F1B (its bubble, its activations in flight, its
        # blocking sends), whatever the schedule is called
        schedule="1f1b" if schedule == "interleaved" and n_virtual == 1 else schedule,
        n_virtual=n_virtual,
        sequence_parallel=sequence_parallel and tp > 1,
        attention=attention,
        state_recipe=state_recipe,
        zero=zero,
        uneven_pipeline=uneven_pipeline,
        keep_gathered_weights=keep_gathered_weights,
        ideal_overlap=ideal_overlap,
        grad_reduce_overlap=grad_reduce_overlap,
        capacity_factor=capacity_factor,
        loss_logits=loss_logits,
        dense_over_ep=dense_over_ep,
        routing_node_limit=routing_node_limit,
        fp8_dispatch=fp8_dispatch,
        precision=precision,
        tp_comm_overlap=tp_comm_overlap,
        n_micro=seqs_per_replica / micro_batch_seqs,
        deepest=deepest,
        chunk_layers=tuple(tuple(row) for row in chunk_layers),
        dense_layer_local=layer_dense_params / m.n_layers / dense_split + kv_extra,
        expert_layer_local=expert_params / m.n_layers / (tp * fsdp * ep),
        embedding_local=input_params / dense_split,
        head_local=output_params / dense_split,
        dense_local=dense_params * stage_share / (tp * dense_shard) + kv_extra * deepest,
        expert_local=expert_params * stage_share / (tp * fsdp * ep),
        dense_shard=dense_shard,
        dense_replicas=mesh["dp"] * mesh["cp"] * (1 if dense_over_ep else ep),
        expert_replicas=mesh["dp"] * mesh["cp"],
        reserve_bytes=reserve_bytes,
        stack=calibrate.check_stack(options.stack),
    )


_validate.guard_module(globals())
