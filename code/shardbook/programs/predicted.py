"""What the cost model predicts for the small model's compiled training step
under each scheme of shardbook.programs.schemes: every collective (as named
terms: what moves, over which mesh axes, how many bytes each device sends),
the memory XLA reports (arguments, outputs, temporaries) and the FLOPs.

Bytes come from the ring formulas of shardbook.collectives and
shardbook.training, local sizes from shardbook.sharding, FLOPs from
shardbook.training and shardbook.moe. Where this compiler (XLA's SPMD
partitioner, CPU backend, JAX 0.10) chooses differently from the textbook
form of a scheme, the term says so (``textbook=False``) and predicts what it
does instead; ``account`` matches the terms against a captured inventory, so
a collective no term explains is reported, never absorbed.

No JAX here: the model's shapes come from its config.
"""

import math
from dataclasses import dataclass

from .. import collectives, memory, models, moe, sharding, training
from . import model, schemes

F32 = 4  # bytes: the small model computes and communicates in float32


@dataclass(frozen=True)
class Term:
    """One kind of traffic. `axes`: the mesh axes of the groups (a tuple in
    mesh order; None for a group that is part of an axis). `shape`: the
    result shape that identifies these collectives, with `count` of them;
    None: every other collective of this kind over these axes, whatever XLA
    split or combined them into. `bytes_per_rank`: predicted, all of them
    together."""

    label: str
    kind: str
    axes: tuple | None
    bytes_per_rank: float
    shape: tuple | None = None
    count: int | None = None
    textbook: bool = True
    also_shape: tuple | None = None  # a second result shape for the same traffic (XLA's layout of the transpose)

    def names(self, shape):
        """Whether `shape` is the result shape that identifies this term's collectives."""
        return shape in (self.shape, self.also_shape)


def all_gather_bytes(result_bytes, n):
    """Ring all-gather: each device sends (n−1)/n of the gathered result."""
    return collectives.ring_bytes_sent_per_rank(result_bytes, n)


def all_reduce_bytes(buffer_bytes, n):
    """Ring all-reduce: reduce-scatter then all-gather, 2·(n−1)/n of the buffer."""
    return training.dp_step_bytes_per_rank(buffer_bytes, n)


def all_to_all_bytes(local_bytes, n):
    """All-to-all: each device keeps 1/n of its buffer and sends the rest."""
    return collectives.ring_bytes_sent_per_rank(local_bytes, n)


# --- sizes from the config and the scheme's rules -----------------------------


def param_bytes(config, names=None):
    """Global float32 bytes of the named parameters (all by default)."""
    shapes = model.param_shapes(config)
    return sum(F32 * math.prod(shapes[n]) for n in (names or shapes))


def local_param_bytes(scheme, names=None):
    """Float32 bytes of the named parameters one device stores under the
    scheme's rules (sharding.local_bytes of each)."""
    shapes = model.param_shapes(scheme.config)
    mesh = scheme.mesh_axes or {"single": 1}
    return sum(
        sharding.local_bytes(shapes[n], schemes.spec_entries(model.PARAM_DIMS[n], scheme.rules), mesh, F32)
        for n in (names or shapes)
    )


def _ways(scheme, dim):
    entry = scheme.rules.get(dim)
    axes = () if entry is None else (entry,) if isinstance(entry, str) else entry
    return math.prod(scheme.mesh_axes[a] for a in axes)


def _activation(scheme):
    """(shape, bytes) of one data-parallel rank's residual stream [B/dp, S, D]."""
    c = scheme.config
    shape = (c.batch_seqs // _ways(scheme, "batch"), c.seq_len, c.d_model)
    return shape, F32 * math.prod(shape)


NORMS = ("attn_norm", "mlp_norm", "final_norm")


def _loss(axes, n):
    """The scalar loss, summed over the devices that split the batch."""
    return Term("the loss (one float32)", "all_reduce", axes, all_reduce_bytes(F32, n), shape=(), count=1)


# --- one rule per scheme ---------------------------------------------------------


def _dp(s):
    n = s.mesh_axes["data"]
    grads = param_bytes(s.config)
    return [
        Term("gradients: one ring all-reduce of every weight", "all_reduce", ("data",), all_reduce_bytes(grads, n)),
        _loss(("data",), n),
    ]


def _fsdp(s):
    c, n = s.config, s.mesh_axes["fsdp"]
    tokens_shape = (c.batch_seqs, c.seq_len, 1)
    gathered = param_bytes(c) - param_bytes(c, NORMS) - param_bytes(c, ["embed"])
    reduced = param_bytes(c) - param_bytes(c, ["embed"])
    lookup_local = F32 * c.batch_seqs * c.seq_len * c.d_model // n  # every token, D/n columns
    return [
        Term(
            "weights gathered once; XLA keeps them for the backward pass instead of gathering again",
            "all_gather",
            ("fsdp",),
            all_gather_bytes(gathered, n),
            textbook=False,
        ),
        Term(
            "token ids, for the lookup in the column-split embedding table",
            "all_gather",
            ("fsdp",),
            all_gather_bytes(4 * math.prod(tokens_shape), n),
            shape=tokens_shape,
            count=1,
            textbook=False,
        ),
        Term(
            "gradients reduced whole (CPU: all-reduce, each keeps its shard, where a GPU forms a reduce-scatter)",
            "all_reduce",
            ("fsdp",),
            all_reduce_bytes(reduced, n),
            textbook=False,
        ),
        _loss(("fsdp",), n),
        Term(
            "embedding lookup: each device's D/n columns for every token, traded for whole rows of its own "
            "sequences (forward, and back for the gradient)",
            "all_to_all",
            ("fsdp",),
            2 * all_to_all_bytes(lookup_local, n),
            textbook=False,
        ),
    ]


def _megatron(act_shape, act_bytes, n, n_layers, vocab_parallel):
    """Megatron's activation all-reduces: after the attention and MLP output
    projections forward, after the QKV and gate/up projections backward (4
    per layer), plus the vocabulary-parallel embedding (forward) and output
    projection (backward)."""
    count = 4 * n_layers + (2 if vocab_parallel else 0)
    return Term(
        "activations: 2 per layer forward, 2 backward"
        + (", the embedding and the output layer" if vocab_parallel else ""),
        "all_reduce",
        ("tp",),
        count * all_reduce_bytes(act_bytes, n),
        shape=act_shape,
        count=count,
    )


def _tp(s):
    c, n, dp = s.config, s.mesh_axes["tp"], s.mesh_axes["data"]
    act_shape, act_bytes = _activation(s)
    per_token = F32 * act_shape[0] * act_shape[1]
    return [
        _megatron(act_shape, act_bytes, n, c.n_layers, vocab_parallel=True),
        Term(
            "the vocabulary-parallel log-softmax: maximum, sum and target logit forward, one backward (a float per token each)",
            "all_reduce",
            ("tp",),
            4 * all_reduce_bytes(per_token, n),
        ),
        Term(
            "gradients of this device's TP shard, over the data axis",
            "all_reduce",
            ("data",),
            all_reduce_bytes(local_param_bytes(s), dp),
        ),
        _loss(("data",), dp),
    ]


def _tp_sp(s):
    c, n, dp = s.config, s.mesh_axes["tp"], s.mesh_axes["data"]
    act_shape, act_bytes = _activation(s)
    table = param_bytes(c, ["embed"])
    norms_shape = (c.d_model,)
    return [
        Term(
            "sequence parallel: each block's input gathered forward, its gradient gathered backward",
            "all_gather",
            ("tp",),
            4 * c.n_layers * all_gather_bytes(act_bytes, n),
            shape=act_shape,
            count=4 * c.n_layers,
        ),
        Term(
            "the vocabulary-split embedding and output tables gathered (XLA's choice once the sequence is split)",
            "all_gather",
            ("tp",),
            2 * all_gather_bytes(table, n),
            textbook=False,
        ),
        Term(
            "sequence parallel: each block's output reduce-scattered forward, its input gradient backward "
            "(CPU: all-reduce, each keeps its slice)",
            "all_reduce",
            ("tp",),
            4 * c.n_layers * all_reduce_bytes(act_bytes, n),
            shape=act_shape,
            count=4 * c.n_layers,
        ),
        Term(
            "norm weight gradients: each device saw part of the sequence",
            "all_reduce",
            ("tp",),
            (2 * c.n_layers + 1) * all_reduce_bytes(F32 * c.d_model, n),
            shape=norms_shape,
            count=2 * c.n_layers + 1,
        ),
        Term(
            "gradients of the two gathered tables",
            "all_reduce",
            ("tp",),
            2 * all_reduce_bytes(table, n),
            shape=(c.vocab_size, c.d_model),
            count=2,
            textbook=False,
        ),
        _loss(("tp",), n),
        Term(
            "gradients over the data axis: the TP shards, and the input table whole (it was gathered)",
            "all_reduce",
            ("data",),
            all_reduce_bytes(local_param_bytes(s) + table / n, dp),
            textbook=False,
        ),
        _loss(("data",), dp),
    ]


def _fsdp_tp(s):
    c, n, tp = s.config, s.mesh_axes["fsdp"], s.mesh_axes["tp"]
    act_shape, act_bytes = _activation(s)
    weights = param_bytes(c, ["wqkv", "wo", "w_in", "w_down"]) / tp  # one TP rank's layer weights
    w_in = param_bytes(c, ["w_in"]) / tp
    unembed, table = param_bytes(c, ["unembed"]), param_bytes(c, ["embed"])
    lookup = F32 * c.batch_seqs * c.seq_len * c.d_model // n  # every token, D/n columns
    return [
        Term(
            "weights (this TP rank's part) and the output table gathered over fsdp once",
            "all_gather",
            ("fsdp",),
            all_gather_bytes(weights - w_in + unembed, n),
        ),
        Term(
            "the gate/up weight gathered forward and again backward (XLA's choice: the largest weight is not kept)",
            "all_gather",
            ("fsdp",),
            2 * all_gather_bytes(w_in, n),
            shape=(c.d_model, 2, c.d_ff // tp),
            count=2 * c.n_layers,
            textbook=False,
        ),
        Term(
            "embedding lookup: each TP rank looks up half the tokens, then the halves are gathered",
            "all_gather",
            ("tp",),
            all_gather_bytes(lookup, tp),
            textbook=False,
        ),
        Term(
            "token ids between the halves of an fsdp group (a group that is part of the axis)",
            "all_gather",
            None,
            all_gather_bytes(4 * (c.batch_seqs // 2) * c.seq_len, 2),
            textbook=False,
        ),
        Term(
            "token ids moved to the device that looks them up",
            "collective_permute",
            ("fsdp", "tp"),
            4 * (c.batch_seqs // n) * c.seq_len,
            textbook=False,
        ),
        Term(
            "embedding lookup: columns traded for sequences, forward and backward",
            "all_to_all",
            ("fsdp",),
            2 * all_to_all_bytes(lookup, n),
            textbook=False,
        ),
        _megatron(act_shape, act_bytes, tp, c.n_layers, vocab_parallel=False),
        Term(
            "the embedding table's gradient: each TP rank looked up half the tokens",
            "all_reduce",
            ("tp",),
            all_reduce_bytes(table / n, tp),
            shape=(c.vocab_size, c.d_model // n),
            count=1,
            textbook=False,
        ),
        Term(
            "gradients of this TP rank's weights, the norms and the output table, whole over fsdp "
            "(CPU: all-reduce for reduce-scatter)",
            "all_reduce",
            ("fsdp",),
            all_reduce_bytes(weights + param_bytes(c, NORMS) + unembed, n),
            textbook=False,
        ),
        _loss(("fsdp",), n),
    ]


def _cp(s):
    c, n, dp = s.config, s.mesh_axes["cp"], s.mesh_axes["data"]
    b = c.batch_seqs // dp
    chunk_shape = (b, c.seq_len // n, c.n_kv_heads, c.head_dim)
    chunk = F32 * math.prod(chunk_shape)
    steps = 2 * (n - 1) * c.n_layers  # K and V, n−1 hops, every layer
    grads = param_bytes(c)
    return [
        Term(
            "ring attention: K and V chunks passed on, n−1 hops per layer; their gradients come back the same way",
            "collective_permute",
            ("cp",),
            2 * steps * chunk,
            shape=chunk_shape,
            count=2 * steps,
        ),
        Term(
            "gradients reduced whole over cp (partial sums over sequence chunks) ...",
            "all_reduce",
            ("cp",),
            all_reduce_bytes(grads, n),
            textbook=False,
        ),
        _loss(("cp",), n),
        Term(
            "... then whole again over data (XLA's two stages: "
            f"{(all_reduce_bytes(1, n) + all_reduce_bytes(1, dp)) / all_reduce_bytes(1, n * dp):.2f}× "
            f"the bytes of one ring over all {n * dp})",
            "all_reduce",
            ("data",),
            all_reduce_bytes(grads, dp),
            textbook=False,
        ),
        _loss(("data",), dp),
    ]


def _pp(s):
    p, dp, m = s.mesh_axes["stage"], s.mesh_axes["data"], s.n_microbatches
    act_shape, act_bytes = _activation(s)
    micro_shape = (act_shape[0] // m, *act_shape[1:])
    ticks = p + m - 2  # sends per direction: one per tick but the last
    return [
        Term(
            "stage boundaries: one microbatch's activations per tick forward, its gradient backward",
            "collective_permute",
            ("stage",),
            2 * ticks * act_bytes / m,
            shape=micro_shape,
            count=2 * ticks,
        ),
        Term(
            "the last stage's outputs to every stage (psum), its transpose, and the embedding's gradient "
            "from every stage (this pipeline's choice; a framework runs the output layer on the last stage only)",
            "all_reduce",
            ("stage",),
            3 * all_reduce_bytes(act_bytes, p),
            textbook=False,
        ),
        Term(
            "gradients of this stage's layers and of the replicated embedding, output and final norm",
            "all_reduce",
            ("data",),
            all_reduce_bytes(local_param_bytes(s), dp),
        ),
        _loss(("data",), dp),
    ]


def _ep(s):
    c, fsdp, ep = s.config, s.mesh_axes["fsdp"], s.mesh_axes["expert"]
    n = fsdp * ep
    dense = param_bytes(c, ["wqkv", "wo", "router"])
    experts = param_bytes(c, ["e_gate", "e_up", "e_down"])
    table = param_bytes(c, ["embed"])
    slots_local = F32 * (c.batch_seqs // n) * c.n_experts * c.capacity * c.d_model  # [B/n, E, C, D]
    gates_local = F32 * (c.batch_seqs // n) * c.seq_len * c.n_experts * c.capacity  # [B/n, S, E, C]
    tokens_per_device = c.batch_seqs * c.seq_len // n
    dispatch = moe.remote_bytes_per_device(tokens_per_device, c.top_k, c.d_model, F32, ep) * (
        c.n_experts * c.capacity / (c.top_k * c.seq_len)
    )
    assert dispatch == all_to_all_bytes(slots_local, ep)
    act_shape, act_bytes = _activation(s)
    return [
        Term(
            "tokens to their experts' slots and back (dispatch, combine), forward and backward; capacity-padded",
            "all_to_all",
            ("expert",),
            4 * c.n_layers * dispatch,
            # XLA writes each as one operand per peer, in one of two layouts
            shape=(1, 1, 1, c.n_experts // ep, c.capacity, c.d_model),
            also_shape=(1, 1, c.d_model, 1, c.n_experts // ep, c.capacity),
            count=4 * c.n_layers * ep,
        ),
        Term(
            "the gradient of the combine weights (per token, expert and slot), back to the tokens' devices",
            "all_to_all",
            ("expert",),
            c.n_layers * all_to_all_bytes(gates_local, ep),
            textbook=False,
        ),
        Term(
            "the output gradient gathered over the expert axis, for the combine weights' gradient",
            "all_gather",
            ("expert",),
            c.n_layers * all_gather_bytes(act_bytes * ep, ep),  # [B/fsdp, S, D]
            textbook=False,
        ),
        Term(
            "router probabilities gathered from every device before top-k (XLA does not split top_k by batch)",
            "all_gather",
            ("fsdp", "expert"),
            c.n_layers * all_gather_bytes(F32 * c.batch_seqs * c.seq_len * c.n_experts, n),
            textbook=False,
        ),
        Term(
            "FSDP over 2: every weight gathered once (experts: this device's E/ep)",
            "all_gather",
            ("fsdp",),
            all_gather_bytes(dense + experts / ep + 2 * table, fsdp),
        ),
        Term(
            "gradients over fsdp, whole (CPU: all-reduce for reduce-scatter): attention, router, experts, output table",
            "all_reduce",
            ("fsdp",),
            all_reduce_bytes(dense + experts / ep + table, fsdp),
            textbook=False,
        ),
        Term(
            "non-expert gradients (their fsdp shard) over the expert axis, which also splits the batch",
            "all_reduce",
            ("expert",),
            all_reduce_bytes((dense + table) / fsdp, ep),
        ),
        Term(
            "norm weights and the input table's gradient (whole: the table was gathered) over all 8",
            "all_reduce",
            ("fsdp", "expert"),
            all_reduce_bytes(table + param_bytes(c, NORMS), n),
            textbook=False,
        ),
        _loss(("fsdp", "expert"), n),
    ]


RULES = {
    "single": lambda s: [],
    "single_moe": lambda s: [],
    "dp": _dp,
    "fsdp": _fsdp,
    "tp": _tp,
    "tp_sp": _tp_sp,
    "fsdp_tp": _fsdp_tp,
    "cp": _cp,
    "pp": _pp,
    "ep": _ep,
}


def collective_terms(scheme):
    """The predicted terms of `scheme`'s compiled training step."""
    if scheme.name not in RULES:
        raise ValueError(f"scheme: no prediction rule for {scheme.name!r}; add one to predicted.RULES")
    return RULES[scheme.name](scheme)


# --- matching terms against a captured inventory ------------------------------


def _coordinates(device, axis_sizes):
    coords, sizes = {}, list(axis_sizes.items())
    for axis, size in reversed(sizes):
        coords[axis] = device % size
        device //= size
    return coords


def entry_axes(entry, axis_sizes):
    """The mesh axes a collective of shardbook.hlo.inventory runs over: its
    replica groups' axes (None for a group that is part of an axis), or for
    a permute the axes along which its pairs differ."""
    from ..hlo.inventory import group_axes

    if "replica_groups" in entry:
        return group_axes(axis_sizes, entry["replica_groups"])
    moved = set()
    for src, dst in entry["source_target_pairs"]:
        a, b = _coordinates(src, axis_sizes), _coordinates(dst, axis_sizes)
        moved.update(axis for axis in axis_sizes if a[axis] != b[axis])
    return tuple(axis for axis in axis_sizes if axis in moved)


@dataclass
class Row:
    """A term beside what the compiled step does: how many collectives it
    matched and the bytes per device they send."""

    term: Term
    count: int = 0
    bytes_per_rank: float = 0.0


def account(terms, entries, axis_sizes):
    """(rows, unexplained): each entry of an inventory goes to the term of
    its kind and axes that names its result shape, else to that kind and
    axes' remaining term; an entry no term takes is unexplained."""
    rows = [Row(t) for t in terms]
    unexplained = []
    for e in entries:
        axes = entry_axes(e, axis_sizes)
        shape = tuple(e["result_shape"])
        here = [r for r in rows if r.term.kind == e["kind"] and r.term.axes == axes]
        row = next((r for r in here if r.term.shape is not None and r.term.names(shape)), None)
        row = row or next((r for r in here if r.term.shape is None), None)
        if row is None:
            unexplained.append(e)
            continue
        row.count += 1
        row.bytes_per_rank += e["bytes_sent_per_rank"]
    return rows, unexplained


# --- memory and FLOPs ----------------------------------------------------------


def argument_bytes(scheme):
    """What the compiled step takes as arguments on one device: the weights
    and Adam's two moments (sharding.local_bytes of each, three times), this
    device's inputs and targets (int32), and the step counter."""
    c = scheme.config
    batch = 2 * 4 * c.batch_seqs * c.seq_len // _ways(scheme, "batch")
    return 3 * local_param_bytes(scheme) + batch + 4


def output_bytes(scheme):
    """What it returns: new weights and moments, the counter and the loss,
    plus the 8-byte pointer XLA lists for each of those arrays."""
    n_arrays = 3 * len(model.param_shapes(scheme.config)) + 2
    return 3 * local_param_bytes(scheme) + 4 + 4 + 8 * n_arrays


def activation_bytes(scheme):
    """The activations the memory module counts for one device (float32:
    twice its 16-bit figure), with this scheme's tensor, sequence, context
    and pipeline splits; under this GPipe every stage keeps a layer's
    activations for each of its p+m−1 ticks, not m. Plus the output logits
    and their log-softmax, which the module leaves out."""
    c = scheme.config
    tp = scheme.mesh_axes.get("tp", 1)
    cp = scheme.mesh_axes.get("cp", 1)
    pp = scheme.mesh_axes.get("stage", 1)
    sequences = c.batch_seqs // _ways(scheme, "batch")
    micro = scheme.n_microbatches
    layers = memory.activation_bytes_per_device(
        c.as_model(),
        c.seq_len,
        sequences // micro,
        tp=tp,
        cp=cp,
        pp=pp,
        sequence_parallel=scheme.rules.get("seq") is not None and scheme.rules.get("seq") == scheme.rules.get("heads"),
        n_microbatches=micro,
        schedule="gpipe",
        attention="eager",  # the program computes softmax(QKᵀ)V in plain JAX: XLA keeps the probabilities
    )
    if pp > 1:
        layers = layers * (pp + micro - 1) / micro
    logits = 2 * F32 * sequences * c.seq_len * c.vocab_size // (_ways(scheme, "vocab") * _ways(scheme, "seq"))
    return 2 * layers + logits


def gathered_weight_bytes(scheme):
    """FSDP's gathered weights, if the step keeps them from the forward to
    the backward pass: every weight whose model dimension is split over the
    fsdp axis, whole over that axis, but the input table, which is never
    gathered (each device looks up its own columns)."""
    if "fsdp" not in scheme.mesh_axes:
        return 0
    split = [n for n, dims in model.PARAM_DIMS.items() if n in model.param_shapes(scheme.config) and "embed" in dims]
    split = [n for n in split if n not in NORMS and n != "embed"]
    return local_param_bytes(scheme, split) * scheme.mesh_axes["fsdp"]


def temporary_bytes(scheme):
    """An estimate of XLA's temporaries: the activations kept for the
    backward pass (activation_bytes), one gradient per local weight, and
    FSDP's gathered weights. XLA's own figure is the peak of its buffer
    assignment: what fusion keeps or recomputes, and which gradients are
    alive together, move it either way."""
    return activation_bytes(scheme) + local_param_bytes(scheme) + gathered_weight_bytes(scheme)


def step_flops(scheme):
    """The FLOPs of one training step summed over devices, as the cost model
    counts them: training.model_flops_per_token (6·N + attention over the
    full mask, which the compiled program computes) for every token, less
    the input embedding (a lookup, not a matmul). The MoE variant computes
    every capacity slot (capacity_factor · k tokens' worth per expert
    layer) and the one-hot dispatch and combine einsums
    (moe.dense_dispatch_flops). The GPipe schedule runs every stage on each
    of its p+m−1 ticks. The output layer runs once per group of devices
    that hold the same logits (their batch, sequence and vocabulary
    splits): under FSDP × TP twice, under the pipeline on every stage. What
    the formula leaves out is element-wise work: norms, softmax, rotary
    embeddings, and Adam, repeated on every replica of a replicated weight."""
    c = scheme.config
    m = c.as_model()
    tokens = c.batch_seqs * c.seq_len
    lookup = 6 * c.vocab_size * c.d_model * tokens
    output_layer = 6 * c.vocab_size * c.d_model * tokens
    total = training.model_flops_per_token(m, c.seq_len) * tokens - lookup
    if c.is_moe:
        expert = 6 * c.top_k * models.routed_expert_param_count(m) / c.n_experts * tokens
        slots = c.n_experts * c.capacity / (c.top_k * c.seq_len)
        total += expert * (slots - 1)
        total += moe.dense_dispatch_flops(c.batch_seqs, c.seq_len, c.n_experts, c.capacity, c.d_model) * c.n_layers
    layers = total - output_layer
    if scheme.layers == "pipeline":
        p, micro = scheme.mesh_axes["stage"], scheme.n_microbatches
        layers = layers * (p + micro - 1) / micro
    n = math.prod(scheme.mesh_axes.values()) if scheme.mesh_axes else 1
    split = set()
    for dim in ("batch", "seq", "vocab"):
        entry = scheme.rules.get(dim)
        split.update(() if entry is None else (entry,) if isinstance(entry, str) else entry)
    holders = n // math.prod(scheme.mesh_axes[a] for a in split)
    return layers + holders * output_layer
