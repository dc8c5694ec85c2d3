"""What the cost model predicts each fixture's partitioned HLO contains,
from the mesh and the PartitionSpecs alone (no JAX). The rules are the
sharded-matmul rules of chapter 2: a contracting dimension sharded on one
operand only needs a gather; one sharded on both leaves partial sums that a
reduction completes; a spec change on a dimension is an all-to-all; a stage
boundary is a permute. Each fixture's declaration in
shardbook.programs.registry names its rule here; this module reads the
registry, never the other way round. Standard library only."""

import math
from typing import NamedTuple

from .. import sharding
from ..programs import registry
from .inventory import BYTES, mesh_groups, ring_bytes

HLO_DTYPE = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}


class Layout(NamedTuple):
    """What a prediction rule sees: the mesh {axis: size}, the specs and
    global shapes by argument name, the local shapes, and the HLO dtype."""

    mesh: dict
    specs: dict
    shapes: dict
    local: dict
    dtype: str


def collective(kind, layout, operand, result, axes):
    """One predicted collective of `kind` over mesh `axes`, as inventory.summary lists it."""
    groups = mesh_groups(layout.mesh, axes)
    entry = {
        "kind": kind,
        "dtype": layout.dtype,
        "operand_shape": list(operand),
        "result_shape": list(result),
        "group_size": len(groups[0]),
        "replica_groups": groups,
    }
    entry["bytes_sent_per_rank"] = ring_bytes(kind, layout.dtype, operand, result, len(groups[0]))
    return entry


def gather(layout, arg, axis):
    """The all-gather that makes argument `arg` whole along `axis`."""
    return collective("all_gather", layout, layout.local[arg], layout.shapes[arg], [axis])


# --- the rules: one per program, named by what the compiler must emit ----------


def no_collective(layout):
    """The contracting dimension is whole on both operands: nothing to exchange."""
    return []


def gather_weight_rows(layout):
    """w's rows (the contracting dimension) are sharded over fsdp: gather them."""
    return [gather(layout, "w", "fsdp")]


def all_reduce_partial_sums(layout):
    """The contracting dimension is split on both operands over tp: partial
    sums of the [rows of x, columns of w] output, completed by an all-reduce."""
    partial = (layout.local["x"][0], layout.local["w"][1])
    return [collective("all_reduce", layout, partial, partial, ["tp"])]


def fsdp_step_automatic(layout):
    """Forward gather of w; the gradient x^T·dy is a partial sum over the batch
    shards. This backend reduces it with an all-reduce (and slices its shard
    with a dynamic-slice); a GPU pipeline forms a reduce-scatter."""
    grad = layout.shapes["w"]
    return [gather(layout, "w", "fsdp"), collective("all_reduce", layout, grad, grad, ["fsdp"])]


def hybrid_fsdp_step(layout):
    """FSDP inside a slice, data parallel across slices: w gathered over
    fsdp only; the gradient reduced over fsdp inside the slice (this
    backend: an all-reduce of the whole gradient, then its shard sliced
    out) and then only that shard all-reduced over replica, across slices:
    1/fsdp of the gradient crosses the slower network. XLA cuts that shard
    from the gradient as it computed it, [rows, columns/fsdp], where w's
    own shard is [rows/fsdp, columns]: the same bytes."""
    grad = layout.shapes["w"]
    shard = (grad[0], grad[1] // layout.mesh["fsdp"])
    return [
        gather(layout, "w", "fsdp"),
        collective("all_reduce", layout, grad, grad, ["fsdp"]),
        collective("all_reduce", layout, shard, shard, ["replica"]),
    ]


def fsdp_step_manual(layout):
    """The same step written with shard_map: all_gather, then psum_scatter."""
    return [
        gather(layout, "w", "fsdp"),
        collective("reduce_scatter", layout, layout.shapes["w"], layout.local["w"], ["fsdp"]),
    ]


def megatron_reduction(layout):
    """W_up by columns, W_down by rows: one all-reduce of the output."""
    out = (layout.local["x"][0], layout.local["w_down"][1])
    return [collective("all_reduce", layout, out, out, ["tp"])]


def megatron_sequence_parallel(layout):
    """Sequence parallelism: all-gather x's rows before, reduce-scatter after."""
    rows = (layout.shapes["x"][0], layout.local["w_down"][1])
    scattered = layout.local["x"][:1] + (layout.local["w_down"][1],)
    return [gather(layout, "x", "tp"), collective("reduce_scatter", layout, rows, scattered, ["tp"])]


def expert_dispatch(layout):
    """Routed tokens exchanged over the expert axis; expert weights gathered over fsdp."""
    tokens, w = layout.local["tokens"], layout.local["w"]
    gathered = (w[0], layout.shapes["w"][1], w[2])
    return [
        collective("all_to_all", layout, tokens, tokens, ["expert"]),
        collective("all_gather", layout, w, gathered, ["fsdp"]),
    ]


def ring_permute(layout, shape, axis, hops):
    """`hops` collective-permutes of a `shape` buffer, each rank to the next along `axis`."""
    n = layout.mesh[axis]
    return [
        {
            "kind": "collective_permute",
            "dtype": layout.dtype,
            "operand_shape": list(shape),
            "result_shape": list(shape),
            "group_size": n,
            "source_target_pairs": [[i, (i + 1) % n] for i in range(n)],
            "bytes_sent_per_rank": BYTES[layout.dtype] * math.prod(shape),
        }
        for _ in range(hops)
    ]


def collective_matmul_steps(layout):
    """The all-gather of x decomposed into n-1 hops around the tp ring, one
    row block each, the same bytes as the all-gather it replaces."""
    return ring_permute(layout, layout.local["x"], "tp", layout.mesh["tp"] - 1)


def stage_to_next_stage(layout):
    """Each stage sends its activations to the next (a ring over pp)."""
    n = layout.mesh["pp"]
    act = layout.local["x"]
    return [
        {
            "kind": "collective_permute",
            "dtype": layout.dtype,
            "operand_shape": list(act),
            "result_shape": list(act),
            "group_size": n,
            "source_target_pairs": [[i, (i + 1) % n] for i in range(n)],
            "bytes_sent_per_rank": BYTES[layout.dtype] * act[0] * act[1],
        }
    ]


def context_ring(layout):
    """Ring attention: n−1 hops of the local K chunk and n−1 of the V chunk."""
    hops = layout.mesh["cp"] - 1
    return ring_permute(layout, layout.local["k"], "cp", hops) + ring_permute(layout, layout.local["v"], "cp", hops)


def context_all_gather_kv(layout):
    """One all-gather of K and one of V along the sequence."""
    return [gather(layout, "k", "cp"), gather(layout, "v", "cp")]


def context_ulysses(layout):
    """All-to-alls of Q, K and V from sequence chunks [S/n, H, Q] to head
    groups, and one of the output [S, H/n, Q] back: four of the same size."""
    seq, heads, head_dim = layout.shapes["q"]
    head_group = (seq, heads // layout.mesh["cp"], head_dim)
    to_heads = [collective("all_to_all", layout, layout.local[a], layout.local[a], ["cp"]) for a in ("q", "k", "v")]
    return to_heads + [collective("all_to_all", layout, head_group, head_group, ["cp"])]


def dispatch_tokens_to_experts(layout):
    """Tokens resharded from rows over (fsdp, expert) to E over expert and
    rows over fsdp: an all-to-all over expert, of the local [E, T/8, D]
    block that the partitioner views as [ep, E/ep, 1, T/8, D] (one slab per
    destination; the same bytes); then the expert weights' input dimension
    gathered over fsdp."""
    experts, rows, d_model = layout.local["tokens"]
    ep = layout.mesh["expert"]
    slabs = (ep, experts // ep, 1, rows, d_model)
    w, gathered = layout.local["w"], (layout.local["w"][0], layout.shapes["w"][1], layout.local["w"][2])
    return [
        collective("all_to_all", layout, slabs, slabs, ["expert"]),
        collective("all_gather", layout, w, gathered, ["fsdp"]),
    ]


def dispatch_weights_to_tokens(layout):
    """Tokens keep expert on their rows, so every device needs every
    expert's weights: the weights are gathered, over fsdp (the input
    dimension) and then over expert (the expert dimension), 7/8 of them."""
    w = layout.local["w"]
    over_fsdp = (w[0], layout.shapes["w"][1], w[2])
    return [
        collective("all_gather", layout, w, over_fsdp, ["fsdp"]),
        collective("all_gather", layout, over_fsdp, layout.shapes["w"], ["expert"]),
    ]


# The prediction rules, by the name a fixture's declaration gives.
RULES = {
    rule.__name__: rule
    for rule in (
        no_collective,
        gather_weight_rows,
        all_reduce_partial_sums,
        fsdp_step_automatic,
        hybrid_fsdp_step,
        fsdp_step_manual,
        megatron_reduction,
        megatron_sequence_parallel,
        expert_dispatch,
        collective_matmul_steps,
        stage_to_next_stage,
        context_ring,
        context_all_gather_kv,
        context_ulysses,
        dispatch_tokens_to_experts,
        dispatch_weights_to_tokens,
    )
}


def rule(fixture):
    """The prediction rule a fixture's declaration names (a rule function
    itself is accepted too, as a test's throwaway declaration may give)."""
    if callable(fixture.predict):
        return fixture.predict
    if fixture.predict not in RULES:
        raise ValueError(
            f"{fixture.name}.predict: no prediction rule {fixture.predict!r} in shardbook.hlo.predict; "
            f"known: {', '.join(RULES)}"
        )
    return RULES[fixture.predict]


def predict(name, mesh, specs, shapes, dtype_name):
    """Predicted inventory (a list like inventory.summary) for fixture `name`
    with this layout, by the rule its declaration names (shardbook.programs.registry)."""
    dtype = HLO_DTYPE.get(dtype_name)
    if dtype not in BYTES:
        raise ValueError(f"dtype: unsupported {dtype_name!r}")
    local = {a: sharding.local_shape(shapes[a], specs[a], mesh) for a in shapes}
    fixture = registry.get(name)
    return rule(fixture)(Layout(mesh, specs, shapes, local, dtype))
