"""Persistent training-state memory per device under DP and ZeRO/FSDP.

Defaults follow the usual mixed-precision Adam recipe: BF16 weights (2 bytes)
and gradients (2 bytes), and 12 bytes of optimizer state per parameter (an
FP32 master weight plus two FP32 Adam moments: 4 + 8). Activations, gather
buffers, communication buffers and allocator overhead are not included.
Ref: rajbhandari2020zero, distributed-training-notes.
"""

from . import _validate, models

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


RECOMPUTE = ("none", "selective", "full")


def activation_bytes_per_layer(model, seq_len, micro_batch_seqs, *, tp=1, sequence_parallel=False, recompute="none"):
    """Bytes of activations one transformer layer keeps for its backward pass,
    per device, for `micro_batch_seqs` sequences of `seq_len` tokens, with
    16-bit activations and 1-byte dropout masks.

    Counted as Korthikanti et al. count it (s tokens, b sequences, h =
    d_model, a heads): the two norm inputs (4sbh); attention: its input
    (2sbh), Q, K and V, the softmax output (2as²b), with dropout its mask
    (as²b) and output (2as²b), the output projection's input (2sbh) and a
    dropout mask (sbh); MLP: its input (2sbh), the intermediate tensors
    (non-gated: the activation's input and output, 2sbF each; gated SwiGLU:
    gate, up and their product, 2sbF each) and a dropout mask (sbh). For
    their GPT models (F = 4h, no GQA, dropout) this is sbh(34 + 5as/h).
    Tensor parallelism (tp) splits the heads and F; `sequence_parallel` also
    splits the parts TP leaves replicated (norms, block inputs, masks):
    sbh(10 + 24/t + 5as/(ht)) without, sbh·34/t + 5as²b/t with.
    recompute: 'none'; 'selective' (scores, softmax and dropout recomputed:
    the as² terms vanish); 'full' (only the layer input, 2sbh, /t with SP).
    Ref: korthikanti2022reducing.
    """
    m = models.get(model)
    _validate.count("seq_len", seq_len)
    return _layer_bytes(m, seq_len, seq_len, micro_batch_seqs, tp, sequence_parallel, recompute)


def _layer_bytes(m, query_tokens, key_tokens, micro_batch_seqs, tp, sequence_parallel, recompute):
    """activation_bytes_per_layer for `query_tokens` local tokens whose
    queries attend `key_tokens` keys (they differ under context parallelism)."""
    _validate.count("micro_batch_seqs", micro_batch_seqs)
    _validate.count("tp", tp)
    _validate.choice("recompute", recompute, RECOMPUTE)
    if m.n_kv_heads % tp or m.n_heads % tp:
        raise ValueError(f"tp: must divide the KV heads ({m.n_kv_heads}) and heads ({m.n_heads}) of {m.name}, got {tp}")
    if m.d_ff % tp:
        raise ValueError(f"tp: must divide F ({m.d_ff}) of {m.name}, got {tp}")
    s, b, h = query_tokens, micro_batch_seqs, m.d_model
    sbh = s * b * h
    replicated_divisor = tp if sequence_parallel else 1
    if recompute == "full":
        return 2 * sbh / replicated_divisor
    q_width = m.n_heads * m.head_dim
    kv_width = m.n_kv_heads * m.head_dim
    mask = 1 if m.dropout else 0
    # kept whole on every TP rank unless sequence parallelism splits them:
    # two norm inputs, the attention and MLP inputs, two dropout masks
    replicated = 2 * 2 * sbh + 2 * sbh + 2 * sbh + 2 * mask * sbh
    # split by TP: Q, K, V, the output projection's input, the MLP intermediates
    intermediates = (3 if m.gated_mlp else 2) * 2 * s * b * m.d_ff
    sharded = 2 * s * b * (q_width + 2 * kv_width) + 2 * s * b * q_width + intermediates
    # softmax output (2 bytes), and with dropout its mask (1) and output (2)
    scores = 0 if recompute == "selective" else (2 + 3 * mask) * m.n_heads * s * key_tokens * b
    return replicated / replicated_divisor + (sharded + scores) / tp


def microbatches_in_flight(n_stages, n_microbatches, schedule="1f1b"):
    """Microbatches whose activations the first pipeline stage holds at its
    peak: all m under GPipe, min(p, m) under 1F1B. Ref: narayanan2021megatron."""
    _validate.count("n_stages", n_stages)
    _validate.count("n_microbatches", n_microbatches)
    _validate.choice("schedule", schedule, ("gpipe", "1f1b"))
    return n_microbatches if schedule == "gpipe" else min(n_stages, n_microbatches)


def activation_bytes_per_device(
    model,
    seq_len,
    micro_batch_seqs,
    *,
    tp=1,
    cp=1,
    pp=1,
    sequence_parallel=False,
    recompute="none",
    n_microbatches=1,
    schedule="1f1b",
):
    """Peak activation bytes on one device: its L/pp layers, each holding
    `activation_bytes_per_layer` for the seq_len/cp tokens it owns (with
    context parallelism a local query still attends every key, so the score
    term is a·(s/cp)·s·b), times the microbatches the pipeline schedule keeps
    in flight on the first stage. Embeddings and the output logits are not
    counted. Ref: korthikanti2022reducing, narayanan2021megatron.
    """
    m = models.get(model)
    _validate.count("cp", cp)
    _validate.count("pp", pp)
    _validate.count("seq_len", seq_len)
    if seq_len % cp:
        raise ValueError(f"cp: must divide seq_len ({seq_len}), got {cp}")
    if m.n_layers % pp:
        raise ValueError(f"pp: must divide the layers ({m.n_layers}) of {m.name}, got {pp}")
    per_layer = _layer_bytes(m, seq_len // cp, seq_len, micro_batch_seqs, tp, sequence_parallel, recompute)
    in_flight = microbatches_in_flight(pp, n_microbatches, schedule) if pp > 1 else 1
    return per_layer * (m.n_layers // pp) * in_flight


_validate.guard_module(globals())
