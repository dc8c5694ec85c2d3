"""Persistent training-state memory per device under DP and ZeRO/FSDP.

Defaults follow the usual mixed-precision Adam recipe: BF16 weights (2 bytes)
and gradients (2 bytes), and 12 bytes of optimizer state per parameter (an
FP32 master weight plus two FP32 Adam moments: 4 + 8). Activations, gather
buffers, communication buffers and allocator overhead are not included.
Ref: rajbhandari2020zero, distributed-training-notes.
"""

from . import _validate

SCHEMES = ("dp", "zero1", "zero2", "zero3", "fsdp")

ADAM_MOMENT_BYTES = 8  # two FP32 moments
FP32_MASTER_BYTES = 4
ADAM_WITH_MASTER_BYTES = ADAM_MOMENT_BYTES + FP32_MASTER_BYTES


def state_bytes_per_device(n_params, scheme, n_shards, param_bytes=2, grad_bytes=2, optimizer_bytes=12):
    """Bytes of parameters, gradients and optimizer state on one device.

    ZeRO partitions cumulatively (rajbhandari2020zero): zero1 shards the
    optimizer state over `n_shards` devices, zero2 also the gradients, zero3
    (and FSDP's full shard) also the parameters. dp replicates everything.
    """
    _validate.non_negative("n_params", n_params)
    _validate.choice("scheme", scheme, SCHEMES)
    _validate.count("n_shards", n_shards)
    _validate.non_negative("param_bytes", param_bytes)
    _validate.non_negative("grad_bytes", grad_bytes)
    _validate.non_negative("optimizer_bytes", optimizer_bytes)
    n = n_shards
    p, g, o = n_params * param_bytes, n_params * grad_bytes, n_params * optimizer_bytes
    if scheme == "dp":
        return p + g + o
    if scheme == "zero1":
        return p + g + o / n
    if scheme == "zero2":
        return p + (g + o) / n
    return (p + g + o) / n  # zero3 and fsdp


def max_params_replicated(hbm_bytes, bytes_per_param):
    """The most parameters whose state fits one device when replicated."""
    _validate.positive("hbm_bytes", hbm_bytes)
    _validate.positive("bytes_per_param", bytes_per_param)
    return hbm_bytes / bytes_per_param


def checkpointed_activation_bytes(tokens, d_model, d_ff, n_layers, bytes_per_element=2):
    """Activations kept when checkpointing after the three big matmuls of each
    layer: two [B, F] and one [B, D] per layer, 2·L·B·(D + 2F) bytes in BF16.
    Ref: scaling-book-training."""
    _validate.non_negative("tokens", tokens)
    for name, value in (("d_model", d_model), ("d_ff", d_ff), ("n_layers", n_layers)):
        _validate.count(name, value)
    _validate.positive("bytes_per_element", bytes_per_element)
    return bytes_per_element * n_layers * tokens * (d_model + 2 * d_ff)


def min_shards_to_fit(n_params, scheme, hbm_bytes, param_bytes=2, grad_bytes=2, optimizer_bytes=12, max_shards=1 << 20):
    """Smallest number of shards for which the persistent state fits in
    `hbm_bytes`, or None if it never fits (dp, or a replicated floor above
    the HBM size). Activations and buffers are not counted."""
    _validate.positive("hbm_bytes", hbm_bytes)
    n = 1
    while n <= max_shards:
        if state_bytes_per_device(n_params, scheme, n, param_bytes, grad_bytes, optimizer_bytes) <= hbm_bytes:
            return n
        if scheme == "dp":
            return None
        n += 1
    return None
