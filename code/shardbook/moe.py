"""Token dispatch volume for expert parallelism. Rows are perfectly packed:
no indices, capacity padding or load imbalance. Ref: scale-your-model-amd."""

import math

from . import _validate


def routed_bytes_per_device(tokens_per_device, top_k, d_model, bytes_per_element):
    """Bytes of routed rows one device holds for one layer's dispatch:
    tokens · k · D · s."""
    _validate.non_negative("tokens_per_device", tokens_per_device)
    _validate.count("top_k", top_k)
    _validate.count("d_model", d_model)
    _validate.positive("bytes_per_element", bytes_per_element)
    return tokens_per_device * top_k * d_model * bytes_per_element


def remote_bytes_per_device(tokens_per_device, top_k, d_model, bytes_per_element, ep):
    """The off-rank part of one dispatch (or combine) with experts spread
    evenly over `ep` ranks: routed bytes · (ep−1)/ep."""
    _validate.count("ep", ep)
    return routed_bytes_per_device(tokens_per_device, top_k, d_model, bytes_per_element) * (ep - 1) / ep


def capacity(tokens_per_group, top_k, n_experts, capacity_factor):
    """Slots per expert for a group of tokens routed together (GShard and
    Switch): ceil(capacity_factor · k · tokens / E). Tokens routed to a full
    expert are dropped. Ref: lepikhin2021gshard, fedus2022switch."""
    _validate.count("tokens_per_group", tokens_per_group)
    _validate.count("top_k", top_k)
    _validate.count("n_experts", n_experts)
    _validate.positive("capacity_factor", capacity_factor)
    if top_k > n_experts:
        raise ValueError(f"top_k: must be <= n_experts ({n_experts}), got {top_k}")
    return math.ceil(capacity_factor * top_k * tokens_per_group / n_experts)


def dense_dispatch_flops(n_groups, tokens_per_group, n_experts, capacity_slots, d_model):
    """FLOPs of one MoE layer's one-hot dispatch and combine einsums in a
    training step, as GShard-style code writes them: each is a [T, E·C] by
    [T, D] contraction, 2·T·E·C·D per group of T tokens. Forward: dispatch
    and combine; backward: the input's gradient through dispatch, and
    through combine both the expert outputs' and the gate weights'
    gradients. Five in all. Ref: lepikhin2021gshard."""
    for name, value in (
        ("n_groups", n_groups),
        ("tokens_per_group", tokens_per_group),
        ("n_experts", n_experts),
        ("capacity_slots", capacity_slots),
        ("d_model", d_model),
    ):
        _validate.count(name, value)
    return 5 * 2 * n_groups * tokens_per_group * n_experts * capacity_slots * d_model


_validate.guard_module(globals())
