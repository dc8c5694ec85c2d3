"""What the cost model predicts each fixture's partitioned HLO contains,
from the mesh and the PartitionSpecs alone (no JAX). The rules are the
sharded-matmul rules of chapter 2: a contracting dimension sharded on one
operand only needs a gather; one sharded on both leaves partial sums that a
reduction completes; a spec change on a dimension is an all-to-all; a stage
boundary is a permute. Standard library only."""

from .. import sharding
from .inventory import BYTES, _ring_bytes, mesh_groups

HLO_DTYPE = {"float16": "f16", "bfloat16": "bf16", "float32": "f32"}


def _collective(kind, dtype, operand, result, mesh, axes):
    groups = mesh_groups(mesh, axes)
    entry = {"kind": kind, "dtype": dtype, "operand_shape": list(operand), "result_shape": list(result), "group_size": len(groups[0]), "replica_groups": groups}
    entry["bytes_sent_per_rank"] = _ring_bytes(kind, dtype, operand, result, len(groups[0]))
    return entry


def _gather_rows(fx, arg, axis, mesh, dtype):
    local = sharding.local_shape(fx["shapes"][arg], fx["specs"][arg], mesh)
    return _collective("all_gather", dtype, local, fx["shapes"][arg], mesh, [axis])


def predict(name, mesh, specs, shapes, dtype_name):
    """Predicted inventory (a list like inventory.summary) for a fixture."""
    dtype = HLO_DTYPE[dtype_name]
    if dtype not in BYTES:
        raise ValueError(f"dtype: unsupported {dtype_name!r}")
    fx = {"specs": specs, "shapes": shapes}
    local = {a: sharding.local_shape(shapes[a], specs[a], mesh) for a in shapes}
    if name == "dp_matmul":
        return []  # the contracting dimension is whole on both operands
    if name in ("fsdp_matmul", "fsdp_ep_linear"):
        # w's rows are the contracting dimension: gather them over fsdp
        return [_gather_rows(fx, "w", "fsdp", mesh, dtype)]
    if name == "tp_matmul":
        partial = (local["x"][0], local["w"][1])
        return [_collective("all_reduce", dtype, partial, partial, mesh, ["tp"])]
    if name == "fsdp_train_step":
        # forward gather of w; the gradient x^T·dy is a partial sum over the
        # batch shards. This backend reduces it with an all-reduce (and slices
        # its shard with a dynamic-slice); a GPU pipeline forms a reduce-scatter.
        grad = shapes["w"]
        return [
            _gather_rows(fx, "w", "fsdp", mesh, dtype),
            _collective("all_reduce", dtype, grad, grad, mesh, ["fsdp"]),
        ]
    if name == "fsdp_manual":
        return [
            _gather_rows(fx, "w", "fsdp", mesh, dtype),
            _collective("reduce_scatter", dtype, shapes["w"], local["w"], mesh, ["fsdp"]),
        ]
    if name == "megatron_mlp":
        out = (local["x"][0], local["w_down"][1])
        return [_collective("all_reduce", dtype, out, out, mesh, ["tp"])]
    if name == "megatron_mlp_sp":
        rows = (shapes["x"][0], local["w_down"][1])
        return [
            _gather_rows(fx, "x", "tp", mesh, dtype),
            _collective("reduce_scatter", dtype, rows, local["x"][:1] + (local["w_down"][1],), mesh, ["tp"]),
        ]
    if name == "moe_dispatch":
        tokens = local["tokens"]
        gathered = (local["w"][0], shapes["w"][1], local["w"][2])
        return [
            _collective("all_to_all", dtype, tokens, tokens, mesh, ["expert"]),
            _collective("all_gather", dtype, local["w"], gathered, mesh, ["fsdp"]),
        ]
    if name == "pipeline_stages":
        n = mesh["pp"]
        act = local["x"]
        return [{
            "kind": "collective_permute", "dtype": dtype, "operand_shape": list(act), "result_shape": list(act),
            "group_size": n, "source_target_pairs": [[i, (i + 1) % n] for i in range(n)],
            "bytes_sent_per_rank": BYTES[dtype] * act[0] * act[1],
        }]
    raise ValueError(f"fixture: no prediction for {name!r}")
