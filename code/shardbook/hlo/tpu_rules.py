"""Where the TPU compiler's program differs from the cost model's rules.

The prediction rules of shardbook.hlo.predict are written for what the SPMD
partitioner emits, and the CPU captures match them exactly. The TPU
compiler (libtpu, compiling ahead of time for a v5p:2x2x2 slice) runs
further passes after partitioning, and for nine fixtures its optimized
program differs from the rule. Each difference is declared here, per
fixture, as a named rewrite of the predicted inventory with the reason:
the TPU capture must then equal the rewritten prediction, so a difference
that is not declared, or one declared that the compiler no longer makes,
fails the tests. Standard library only.

Which dtype a fixture compiles in on the TPU: float16 fixtures become
bfloat16 (float16 was chosen as the GPU's and the CPU backend's 16-bit
type; a TPU computes in bfloat16), float32 fixtures stay float32.
"""

import math
from typing import NamedTuple

from .inventory import BYTES, mesh_groups, ring_bytes

TOPOLOGY = "v5p:2x2x2"
DTYPE_ON_TPU = {"float16": "bfloat16"}


def tpu_dtype(dtype):
    """The dtype fixture dtype `dtype` compiles in for the TPU capture."""
    return DTYPE_ON_TPU.get(dtype, dtype)


class Difference(NamedTuple):
    """One declared difference: the rewrite's name in REWRITES, its
    arguments, and why the TPU compiler does it."""

    rewrite: str
    args: tuple
    reason: str


BF16_INPUTS = (
    "At DEFAULT precision a TPU dot multiplies float32 operands as bfloat16 (one MXU pass), so the "
    "compiler converts the operand to bfloat16 and moves that convert ahead of the collective that "
    "brings it (libtpu's convert-mover): the input travels in bfloat16, half the bytes of the rule's "
    "float32. Gradients and outputs, reduced after the dot, stay float32."
)
RS_AS_AR = (
    "libtpu's reduce-scatter-decomposer pass (after layout assignment) rewrites the reduce-scatter over "
    "all 8 chips of the v5p:2x2x2 torus as an all-reduce of the whole buffer followed by a "
    "dynamic-slice: twice the ring bytes of the reduce-scatter. It does so at every size tried "
    "(up to 32 times the fixture's); the CPU backend keeps the reduce-scatter of this shard_map."
)

EXPECTED_DIFFERENCES = {
    "fsdp_train_step": (Difference("inputs_in_bf16", (0,), BF16_INPUTS),),
    "fsdp_manual": (
        Difference("inputs_in_bf16", (0,), BF16_INPUTS),
        Difference("reduce_scatter_as_all_reduce", (), RS_AS_AR),
    ),
    "megatron_mlp_sp": (Difference("reduce_scatter_as_all_reduce", (), RS_AS_AR),),
    "hsdp_train_step": (
        Difference("inputs_in_bf16", (0,), BF16_INPUTS),
        Difference(
            "same_bytes_other_shape",
            (2, (128, 512)),
            "The shard reduced across slices is cut from the gradient by rows, [rows/fsdp, columns] as "
            "w's own shard is, where the partitioner cut [rows, columns/fsdp]: the same bytes. (On "
            "v5p:2x2x2 the 'replica' axis is two halves of one slice, not two slices over DCN.)",
        ),
        Difference(
            "fused_reduce_scatter",
            (1, (128, 512)),
            "The gradient's all-reduce over fsdp and the dynamic-slice that keeps each device's shard are "
            "fused into one custom fusion (%all-reduce-scatter, kind=kCustom), emitted as one "
            "reduce-scatter (its collective_algorithm_config names the emitter "
            "SingleInputAllReduceScatterFusion): each device receives only its shard of the gradient, a "
            "reduce-scatter's bytes, where the CPU program all-reduces the whole gradient and slices it.",
        ),
        Difference(
            "listed_first",
            (1, 0),
            "The HLO text defines the fusion's computation before ENTRY, where the gather is: the "
            "inventory, read in text order, lists that reduce-scatter first. In the program it still "
            "follows the gather.",
        ),
    ),
    "collective_matmul": (Difference("inputs_in_bf16", tuple(range(7)), BF16_INPUTS),),
    "context_ring": (Difference("inputs_in_bf16", tuple(range(14)), BF16_INPUTS),),
    "context_all_gather_kv": (Difference("inputs_in_bf16", (0, 1), BF16_INPUTS),),
    "context_ulysses": (
        Difference("inputs_in_bf16", (0, 1, 2), BF16_INPUTS),
        Difference(
            "same_bytes_other_shape",
            (3, (8, 1, 8192)),
            "The output's all-to-all moves the attention output [S, H/8, Q] as 8 row blocks of "
            "S/8·Q elements each, [8, 1, S·Q/8]: the same bytes, another view.",
        ),
    ),
    "moe_dispatch_expert_on_batch": (
        Difference(
            "one_gather_over_both_axes",
            ("expert", "fsdp"),
            "Where the rule gathers the weights twice (over fsdp, then over expert), the TPU compiler "
            "gathers each device's block once over all 8 devices, ordered expert-major, and puts the "
            "blocks in place with a layout-changing copy: one collective, the same bytes per device.",
        ),
    ),
}


def _with_bytes(entry):
    """`entry` with its bytes_sent_per_rank recomputed from its kind, dtype and shapes."""
    if entry["kind"] == "collective_permute":
        return {**entry, "bytes_sent_per_rank": BYTES[entry["dtype"]] * math.prod(entry["result_shape"])}
    b = ring_bytes(entry["kind"], entry["dtype"], entry["operand_shape"], entry["result_shape"], entry["group_size"])
    return {**entry, "bytes_sent_per_rank": b}


def inputs_in_bf16(entries, mesh, *indices):
    """The collectives at `indices` move float32 data as bfloat16."""
    out = list(entries)
    for i in indices:
        if out[i]["dtype"] != "f32":
            raise ValueError(f"inputs_in_bf16: collective {i} is {out[i]['dtype']}, not f32")
        out[i] = _with_bytes({**out[i], "dtype": "bf16"})
    return out


def reduce_scatter_as_all_reduce(entries, mesh):
    """Every reduce-scatter becomes an all-reduce of its whole operand."""
    out = []
    for e in entries:
        if e["kind"] == "reduce_scatter":
            e = _with_bytes({**e, "kind": "all_reduce", "result_shape": list(e["operand_shape"])})
        out.append(e)
    if out == list(entries):
        raise ValueError("reduce_scatter_as_all_reduce: the prediction has no reduce-scatter")
    return out


def same_bytes_other_shape(entries, mesh, index, shape):
    """Collective `index` moves the same bytes in another `shape`."""
    out = list(entries)
    e = out[index]
    if math.prod(e["result_shape"]) != math.prod(shape):
        raise ValueError(f"same_bytes_other_shape: {e['result_shape']} and {list(shape)} differ in size")
    out[index] = {**e, "operand_shape": list(shape), "result_shape": list(shape)}
    return out


def one_gather_over_both_axes(entries, mesh, *axes):
    """The consecutive all-gathers over each of `axes` become one all-gather
    of the first one's operand over all of them, concatenated on dimension 0."""
    gathers = [i for i, e in enumerate(entries) if e["kind"] == "all_gather"]
    if len(gathers) != len(axes):
        raise ValueError(f"one_gather_over_both_axes: {len(gathers)} gathers predicted, {len(axes)} axes given")
    first = entries[gathers[0]]
    groups = mesh_groups(mesh, list(axes))
    n = len(groups[0])
    operand = first["operand_shape"]
    merged = {
        "kind": "all_gather",
        "dtype": first["dtype"],
        "operand_shape": list(operand),
        "result_shape": [operand[0] * n, *operand[1:]],
        "group_size": n,
        "replica_groups": groups,
    }
    rest = [e for i, e in enumerate(entries) if i not in gathers]
    return [*rest[: gathers[0]], _with_bytes(merged), *rest[gathers[0] :]]


def fused_reduce_scatter(entries, mesh, index, shape):
    """Collective `index`, an all-reduce whose result the program slices to
    `shape`, runs fused with that slice as one reduce-scatter (libtpu's
    %all-reduce-scatter custom fusion)."""
    out = list(entries)
    e = out[index]
    if e["kind"] != "all_reduce":
        raise ValueError(f"fused_reduce_scatter: collective {index} is {e['kind']}, not an all-reduce")
    out[index] = _with_bytes({**e, "kind": "reduce_scatter", "result_shape": list(shape)})
    return out


def listed_first(entries, mesh, index, position):
    """Collective `index` is listed at `position` (it sits in a computation
    the HLO text defines before the one that calls it)."""
    out = list(entries)
    out.insert(position, out.pop(index))
    return out


REWRITES = {
    f.__name__: f
    for f in (
        inputs_in_bf16,
        reduce_scatter_as_all_reduce,
        same_bytes_other_shape,
        one_gather_over_both_axes,
        listed_first,
        fused_reduce_scatter,
    )
}


def expected_on_tpu(name, predicted, mesh):
    """The prediction `predicted` (a list like inventory.summary, at the
    TPU dtype) of fixture `name` on mesh {axis: size}, with the fixture's
    declared TPU differences applied in their order."""
    out = list(predicted)
    for diff in EXPECTED_DIFFERENCES.get(name, ()):
        out = REWRITES[diff.rewrite](out, mesh, *diff.args)
    return out
