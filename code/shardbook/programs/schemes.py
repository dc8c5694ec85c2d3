"""The small model of shardbook.programs.model on every mesh the book teaches.

A scheme is a mesh and *rules* that map each logical dimension (of the
parameters, the batch and the activations) to mesh axes, as MaxText's
logical axis rules do; ``jax.jit`` with the resulting shardings lets GSPMD
partition the whole training step. Two schemes also change how the step is
written, as the book teaches them: context parallelism runs attention as a
ring (``shard_map`` and ``ppermute``, merged with the online softmax of
chapter 4), and pipeline parallelism runs the stacked layers as a GPipe
schedule over a stage axis (``shard_map`` and ``ppermute``). Adding a
scheme is one entry in SCHEMES.
"""

import math
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from . import fixtures, model

N_DEVICES = 8


@dataclass(frozen=True)
class Scheme:
    """A named configuration: the model (dense or MoE), the mesh {axis:
    size} in mesh order ({} is one device), the rules {logical dimension:
    mesh axis, tuple of axes, or None}, and how attention and the layer stack
    run ('dense' or 'ring'; 'loop' or 'pipeline' with `n_microbatches`)."""

    name: str
    summary: str
    mesh_axes: dict
    rules: dict = field(default_factory=dict)
    config: model.TinyConfig = model.DENSE
    attention: str = "dense"
    layers: str = "loop"
    n_microbatches: int = 1

    @property
    def reference(self):
        """The single-device scheme this one must reproduce."""
        return "single_moe" if self.config.is_moe else "single"


SCHEMES = {
    s.name: s
    for s in (
        Scheme("single", "one device: the reference for the dense model", {}),
        Scheme("dp", "data parallel: the batch split, every weight replicated", {"data": 8}, {"batch": "data"}),
        Scheme(
            "fsdp",
            "FSDP: the batch and every weight's model dimension split over the same axis",
            {"fsdp": 8},
            {"batch": "fsdp", "embed": "fsdp"},
        ),
        Scheme(
            "tp",
            "Megatron tensor parallel over 2 (heads, KV heads, MLP width, vocabulary split); data parallel over 4",
            {"data": 4, "tp": 2},
            {"batch": "data", "heads": "tp", "kv": "tp", "mlp": "tp", "vocab": "tp"},
        ),
        Scheme(
            "tp_sp",
            "Megatron TP with sequence parallelism: as tp, and the residual stream split by sequence between blocks",
            {"data": 4, "tp": 2},
            {"batch": "data", "heads": "tp", "kv": "tp", "mlp": "tp", "vocab": "tp", "seq": "tp"},
        ),
        Scheme(
            "fsdp_tp",
            "FSDP × TP: FSDP over 4, tensor parallel over 2 (the 2 KV heads split too)",
            {"fsdp": 4, "tp": 2},
            {"batch": "fsdp", "embed": "fsdp", "heads": "tp", "mlp": "tp", "kv": "tp"},
        ),
        Scheme(
            "cp",
            "context parallel: each sequence split in 4 chunks, attention as a ring; data parallel over 2",
            {"data": 2, "cp": 4},
            {"batch": "data", "seq": "cp", "block_seq": "cp"},
            attention="ring",
        ),
        Scheme(
            "pp",
            "pipeline parallel: one layer per stage over 4 stages, GPipe with 4 microbatches; data parallel over 2",
            {"data": 2, "stage": 4},
            {"batch": "data", "layers": "stage"},
            layers="pipeline",
            n_microbatches=4,
        ),
        Scheme("single_moe", "one device: the reference for the MoE variant", {}, config=model.MOE),
        Scheme(
            "ep",
            "expert parallel over 4 with FSDP over 2: experts split, tokens exchanged by all-to-all",
            {"fsdp": 2, "expert": 4},
            {
                "batch": ("fsdp", "expert"),
                "embed": "fsdp",
                "experts": "expert",
                "expert_batch": "fsdp",
            },
            config=model.MOE,
        ),
    )
}


def get(name):
    """The scheme called `name`; ValueError listing the known ones otherwise."""
    if name not in SCHEMES:
        raise ValueError(f"scheme: unknown {name!r}; known: {', '.join(SCHEMES)}")
    return SCHEMES[name]


def spec_entries(dims, rules):
    """PartitionSpec entries (an axis, a tuple of axes, or None per
    dimension) from logical dimensions, each mapped by the rules or
    replicated. A mesh axis already used by an earlier dimension of the same
    array is left out of later ones, as MaxText's rules resolve it."""
    used, entries = set(), []
    for d in dims:
        axes = rules.get(d)
        axes = () if axes is None else (axes,) if isinstance(axes, str) else tuple(axes)
        axes = tuple(a for a in axes if a not in used)
        used.update(axes)
        entries.append(None if not axes else axes[0] if len(axes) == 1 else axes)
    return tuple(entries)


def spec(dims, rules):
    """The PartitionSpec of spec_entries."""
    return P(*spec_entries(dims, rules))


def _axes_size(mesh_axes, entry):
    if entry is None:
        return 1
    return math.prod(mesh_axes[a] for a in ((entry,) if isinstance(entry, str) else entry))


def check(scheme):
    """ValueError, naming the scheme and the rule, when its mesh does not
    cover the 8 devices, a rule names an axis the mesh lacks, or a mesh axis
    does not divide the dimension it splits."""
    n = math.prod(scheme.mesh_axes.values()) if scheme.mesh_axes else 1
    if scheme.mesh_axes and n != N_DEVICES:
        raise ValueError(f"{scheme.name}: mesh {scheme.mesh_axes} has {n} devices; it must have {N_DEVICES}")
    for dim, axes in scheme.rules.items():
        for a in () if axes is None else (axes,) if isinstance(axes, str) else axes:
            if a not in scheme.mesh_axes:
                raise ValueError(f"{scheme.name}: rule {dim!r} -> {a!r} names an axis the mesh lacks")
    c = scheme.config
    sizes = {
        "batch": c.batch_seqs,
        "seq": c.seq_len,
        "block_seq": c.seq_len,
        "embed": c.d_model,
        "embed_act": c.d_model,
        "heads": c.n_heads,
        "kv": c.n_kv_heads,
        "mlp": c.d_ff,
        "expert_mlp": c.d_ff,
        "vocab": c.vocab_size,
        "layers": c.n_layers,
        "experts": c.n_experts,
        "expert_batch": c.batch_seqs,
    }
    for dim, axes in scheme.rules.items():
        ways = _axes_size(scheme.mesh_axes, axes)
        if dim in sizes and sizes[dim] % ways:
            raise ValueError(
                f"{scheme.name}: the {dim} dimension ({sizes[dim]}) does not divide over {axes!r} ({ways} ways)"
            )
    if scheme.layers == "pipeline":
        local = c.batch_seqs // _axes_size(scheme.mesh_axes, scheme.rules.get("batch"))
        if local % scheme.n_microbatches:
            raise ValueError(
                f"{scheme.name}: n_microbatches ({scheme.n_microbatches}) must divide the {local} sequences per pipeline"
            )
    return scheme


def shardings(scheme, mesh, params):
    """NamedShardings of the params pytree and of a batch under `scheme`."""

    def for_path(path, _):
        return NamedSharding(mesh, spec(model.PARAM_DIMS[path[-1].key], scheme.rules))

    param_shardings = jax.tree_util.tree_map_with_path(for_path, params)
    return param_shardings, NamedSharding(mesh, spec(("batch", None), scheme.rules))


def make_mesh(scheme, devices=None):
    """The scheme's mesh over the first devices (a one-device mesh for a single-device scheme)."""
    return fixtures.make_mesh(scheme.mesh_axes or {"single": 1}, devices)


# --- context parallelism: ring attention -------------------------------------


def ring_attention(mesh, axis, batch_axes):
    """Causal attention with the sequence split in contiguous chunks over
    `axis`: each device keeps its queries and passes its K/V chunk around the
    ring (n−1 ppermutes per layer); each arriving chunk's scores are merged
    into a running (max, normalizer, weighted sum), the online softmax of
    shardbook.attention. The device's own chunk comes first, so every query
    row has a valid key before any fully masked chunk arrives. Chunks from
    later positions are fully masked and still computed: with contiguous
    chunks the last device does the most useful work (chapter 4)."""
    n = mesh.shape[axis]
    to_next = [(i, (i + 1) % n) for i in range(n)]

    def local(q, k, v):
        s_local = q.shape[1]
        me = jax.lax.axis_index(axis)
        q_pos = me * s_local + jnp.arange(s_local)
        state = None  # (running max, normalizer, weighted sum)
        for step in range(n):
            source = (me - step) % n  # whose chunk this device holds now
            k_pos = source * s_local + jnp.arange(s_local)
            scores = model.grouped_scores(q, k)  # [B, KV, G, S_q, S_k]
            scores = jnp.where(k_pos[None, :] <= q_pos[:, None], scores, -1e30)
            state = fixtures.online_softmax_step(state, scores, lambda p, v=v: jnp.einsum("bngqk,bknd->bngqd", p, v))
            if step < n - 1:
                k, v = jax.lax.ppermute(k, axis, to_next), jax.lax.ppermute(v, axis, to_next)
        _, norm, acc = state
        out = jnp.einsum("bngqd->bqngd", acc / norm[..., None])
        return out.reshape(*out.shape[:2], -1, out.shape[-1])

    spec_ = P(batch_axes, axis, None, None)
    return jax.shard_map(local, mesh=mesh, in_specs=(spec_, spec_, spec_), out_specs=spec_)


# --- pipeline parallelism: GPipe over a stage axis ---------------------------


def gpipe(mesh, axis, batch_axes, n_microbatches):
    """run_layers for a pipeline: the stacked layers split over `axis` (L/p
    consecutive layers per stage), each data-parallel rank's sequences cut
    into `n_microbatches`. At tick t stage s runs microbatch t−s and passes
    its output to stage s+1 (one ppermute per tick); of the p+m−1 ticks a
    stage spends p−1 on nothing useful (s at the start, p−1−s at the end):
    the bubble, here as wasted arithmetic. The last stage's outputs reach every
    stage by a psum over the axis. Autodiff runs the ticks backwards, the
    ppermutes reversed: all forwards, then all backwards, as GPipe does."""
    p, m = mesh.shape[axis], n_microbatches
    to_next = [(i, i + 1) for i in range(p - 1)]

    def run_layers(layers, x, apply_layer):
        def local(layers, x):
            stage = jax.lax.axis_index(axis)
            micro = x.reshape(m, x.shape[0] // m, *x.shape[1:])
            outputs = jnp.zeros_like(micro)
            carry = jnp.zeros_like(micro[0])
            for tick in range(p + m - 1):
                inp = jnp.where(stage == 0, micro[min(tick, m - 1)], carry)
                out = model.loop_layers(layers, inp, apply_layer)
                done = tick - (p - 1)  # the microbatch the last stage finishes now
                if done >= 0:
                    outputs = outputs.at[done].set(jnp.where(stage == p - 1, out, outputs[done]))
                if tick < p + m - 2:
                    carry = jax.lax.ppermute(out, axis, to_next)
            finished = jax.lax.psum(jnp.where(stage == p - 1, outputs, 0.0), axis)
            return finished.reshape(x.shape)

        return jax.shard_map(
            local, mesh=mesh, in_specs=(P(axis), P(batch_axes)), out_specs=P(batch_axes), check_vma=False
        )(layers, x)

    return run_layers


# --- the compiled training step ----------------------------------------------


def hooks(scheme, mesh):
    """The keyword hooks of model.train_step for `scheme` on `mesh`."""
    if not scheme.mesh_axes:
        return {}

    def constrain(x, dims):
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, spec(dims, scheme.rules)))

    # inside the pipeline's shard_map every axis is manual: no GSPMD constraints there
    out = {} if scheme.layers == "pipeline" else {"constrain": constrain}
    batch_axes = scheme.rules.get("batch")
    if scheme.attention == "ring":
        out["attend"] = ring_attention(mesh, scheme.rules["seq"], batch_axes)
    if scheme.layers == "pipeline":
        out["run_layers"] = gpipe(mesh, scheme.rules["layers"], batch_axes, scheme.n_microbatches)
    return out


def jitted_step(scheme, devices=None):
    """(jitted training step, mesh, param shardings, batch shardings) for
    `scheme`, with every input and output sharding fixed."""
    check(scheme)
    config = scheme.config
    mesh = make_mesh(scheme, devices)
    param_sh, batch_sh = shardings(scheme, mesh, model.init_params(config))
    opt_sh = {"m": param_sh, "v": param_sh, "step": NamedSharding(mesh, P())}
    batch_shardings = {"inputs": batch_sh, "targets": batch_sh}
    step_hooks = hooks(scheme, mesh)

    def step(params, opt_state, batch):
        return model.train_step(params, opt_state, batch, config, **step_hooks)

    jitted = jax.jit(
        step,
        in_shardings=(param_sh, opt_sh, batch_shardings),
        out_shardings=(param_sh, opt_sh, NamedSharding(mesh, P())),
    )
    return jitted, mesh, param_sh, batch_shardings


def abstract_arguments(scheme, mesh, param_sh, batch_sh):
    """ShapeDtypeStructs (with shardings) of the step's arguments."""
    config = scheme.config
    params = jax.tree_util.tree_map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), model.init_params(config), param_sh
    )
    step = jax.ShapeDtypeStruct((), jnp.int32, sharding=NamedSharding(mesh, P()))
    shape = (config.batch_seqs, config.seq_len)
    batch = {k: jax.ShapeDtypeStruct(shape, jnp.int32, sharding=s) for k, s in batch_sh.items()}
    return params, {"m": params, "v": params, "step": step}, batch
