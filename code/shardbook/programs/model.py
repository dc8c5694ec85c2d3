"""One small LLaMA-style decoder, trained the same way on every mesh.

A pure-function model over a params pytree: token embedding, RMSNorm,
attention with grouped KV heads and rotary embeddings, a SwiGLU MLP, an
untied output projection; next-token cross-entropy; Adam with float32
weights and moments. Compute is float32 as well, so that a sharded run and
the single-device run agree to float32 rounding (a GPU run would compute in
BF16; the sharding does not change).

A scheme is a mesh and a set of *rules* mapping each parameter's logical
dimensions (``embed``, ``heads``, ``kv``, ``mlp``, ``vocab``) and the batch
to mesh axes, as MaxText's logical axis rules do; ``jax.jit`` with those
shardings lets GSPMD partition the whole training step. Adding a scheme is
one entry in SCHEMES.

JAX is imported with this module (it lives in shardbook.hlo, the JAX layer).
"""

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from .. import models
from . import fixtures


@dataclass(frozen=True)
class TinyConfig:
    """Sizes of the small model (every mesh of 8 devices divides them)."""

    vocab_size: int = 512
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 8
    n_kv_heads: int = 2
    d_ff: int = 768
    seq_len: int = 128
    batch_seqs: int = 8
    rope_theta: float = 10_000.0
    learning_rate: float = 3e-3

    @property
    def head_dim(self):
        return self.d_model // self.n_heads

    def as_model(self):
        """The same architecture as a cost-model preset (for its formulas)."""
        return models.Model(
            "shardbook tiny decoder",
            "dubey2024llama3",
            self.d_model,
            self.d_ff,
            self.n_layers,
            self.n_heads,
            self.n_kv_heads,
            self.head_dim,
            self.vocab_size,
        )


# logical dimensions of each parameter (per layer for the layer weights)
PARAM_DIMS = {
    "embed": ("vocab", "embed"),
    "unembed": ("embed", "vocab"),
    "final_norm": ("norm",),
    "attn_norm": ("norm",),
    "wq": ("embed", "heads"),
    "wk": ("embed", "kv"),
    "wv": ("embed", "kv"),
    "wo": ("heads", "embed"),
    "mlp_norm": ("norm",),
    "w_gate": ("embed", "mlp"),
    "w_up": ("embed", "mlp"),
    "w_down": ("mlp", "embed"),
}


def init_params(config, seed=0):
    """Float32 parameters; layer weights as a list of per-layer dicts."""
    rng = np.random.default_rng(seed)
    d, f, hd = config.d_model, config.d_ff, config.head_dim

    def dense(n_in, n_out):
        return (rng.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32)

    layers = [
        {
            "attn_norm": np.ones(d, np.float32),
            "wq": dense(d, config.n_heads * hd),
            "wk": dense(d, config.n_kv_heads * hd),
            "wv": dense(d, config.n_kv_heads * hd),
            "wo": dense(config.n_heads * hd, d),
            "mlp_norm": np.ones(d, np.float32),
            "w_gate": dense(d, f),
            "w_up": dense(d, f),
            "w_down": dense(f, d),
        }
        for _ in range(config.n_layers)
    ]
    return {
        "embed": (0.02 * rng.standard_normal((config.vocab_size, d))).astype(np.float32),
        "layers": layers,
        "final_norm": np.ones(d, np.float32),
        "unembed": dense(d, config.vocab_size),
    }


def param_count(params):
    """Number of parameters in a params pytree."""
    return sum(int(np.prod(x.shape)) for x in jax.tree_util.tree_leaves(params))


def _rms_norm(x, weight, eps=1e-6):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def _rotary(x, theta):
    """Rotate pairs of channels by position-dependent angles (RoPE); x: [B, S, heads, head_dim]."""
    seq, half = x.shape[1], x.shape[-1] // 2
    freqs = theta ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angles = jnp.arange(seq, dtype=jnp.float32)[:, None] * freqs[None, :]
    cos, sin = jnp.cos(angles)[None, :, None, :], jnp.sin(angles)[None, :, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1)


def _attention(layer, h, config):
    b, s, _ = h.shape
    hd, n_h, n_kv = config.head_dim, config.n_heads, config.n_kv_heads
    q = _rotary((h @ layer["wq"]).reshape(b, s, n_h, hd), config.rope_theta)
    k = _rotary((h @ layer["wk"]).reshape(b, s, n_kv, hd), config.rope_theta)
    v = (h @ layer["wv"]).reshape(b, s, n_kv, hd)
    k, v = jnp.repeat(k, n_h // n_kv, axis=2), jnp.repeat(v, n_h // n_kv, axis=2)  # grouped KV heads
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(jnp.float32(hd))
    causal = jnp.tril(jnp.ones((s, s), dtype=bool))
    weights = jax.nn.softmax(jnp.where(causal, scores, -jnp.inf), axis=-1)
    out = jnp.einsum("bhqk,bkhd->bqhd", weights, v).reshape(b, s, n_h * hd)
    return out @ layer["wo"]


# logical dimensions of the residual stream between blocks
RESIDUAL_DIMS = ("batch", "seq", "embed_act")


def _unconstrained(x, dims):
    return x


def forward(params, tokens, config, constrain=_unconstrained):
    """Logits [B, S, vocab] for tokens [B, S]. `constrain(x, dims)` pins the
    residual stream's layout between blocks (a scheme's activation rules:
    the batch dimension for data parallelism, the sequence for sequence
    parallelism); the single-device run leaves it alone."""
    x = constrain(params["embed"][tokens], RESIDUAL_DIMS)
    for layer in params["layers"]:
        x = constrain(x + _attention(layer, _rms_norm(x, layer["attn_norm"]), config), RESIDUAL_DIMS)
        h = _rms_norm(x, layer["mlp_norm"])
        x = constrain(x + (jax.nn.silu(h @ layer["w_gate"]) * (h @ layer["w_up"])) @ layer["w_down"], RESIDUAL_DIMS)
    return _rms_norm(x, params["final_norm"]) @ params["unembed"]


def loss_fn(params, batch, config, constrain=_unconstrained):
    """Mean next-token cross-entropy over the batch."""
    logits = forward(params, batch["inputs"], config, constrain)
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    picked = jnp.take_along_axis(log_probs, batch["targets"][..., None], axis=-1)[..., 0]
    return -jnp.mean(picked)


def adam_init(params):
    """Adam's state: zero first and second moments shaped (and, for sharded
    arrays, sharded) like the parameters, and a step counter."""
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    return {"m": zeros, "v": jax.tree_util.tree_map(jnp.zeros_like, params), "step": jnp.zeros((), jnp.int32)}


def train_step(params, opt_state, batch, config, constrain=_unconstrained, b1=0.9, b2=0.95, eps=1e-8):
    """One Adam step; returns (params, opt_state, loss)."""
    loss, grads = jax.value_and_grad(loss_fn)(params, batch, config, constrain)
    step = opt_state["step"] + 1
    m = jax.tree_util.tree_map(lambda m, g: b1 * m + (1 - b1) * g, opt_state["m"], grads)
    v = jax.tree_util.tree_map(lambda v, g: b2 * v + (1 - b2) * g * g, opt_state["v"], grads)
    t = step.astype(jnp.float32)
    scale = config.learning_rate * jnp.sqrt(1 - b2**t) / (1 - b1**t)
    params = jax.tree_util.tree_map(lambda p, m, v: p - scale * m / (jnp.sqrt(v) + eps), params, m, v)
    return params, {"m": m, "v": v, "step": step}, loss


def batches(config, n_steps, seed=0):
    """Deterministic sequences the model can learn: each continues an affine
    recurrence x' = (5x + 3) mod vocab from a random start, so the loss falls
    within a few steps; targets are the inputs shifted by one."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_steps):
        start = rng.integers(0, config.vocab_size, size=(config.batch_seqs, 1))
        seq = [start]
        for _ in range(config.seq_len):
            seq.append((5 * seq[-1] + 3) % config.vocab_size)
        tokens = np.concatenate(seq, axis=1).astype(np.int32)
        out.append({"inputs": tokens[:, :-1], "targets": tokens[:, 1:]})
    return out


# --- schemes: a mesh and where each logical dimension goes ----------------------


@dataclass(frozen=True)
class Scheme:
    name: str
    mesh_axes: dict  # axis -> size, in mesh order; {} is the single-device run
    rules: dict = field(default_factory=dict)  # logical dimension (or "batch") -> mesh axis or None
    summary: str = ""


SCHEMES = {
    s.name: s
    for s in (
        Scheme("single", {}, {}, "one device: the reference"),
        Scheme("dp", {"data": 8}, {"batch": "data"}, "data parallel: batch split, weights replicated"),
        Scheme(
            "fsdp",
            {"fsdp": 8},
            {"batch": "fsdp", "embed": "fsdp"},
            "FSDP: batch and every weight's model dimension split over the same axis",
        ),
        Scheme(
            "tp",
            {"tp": 8},
            {"heads": "tp", "mlp": "tp", "vocab": "tp"},
            "Megatron tensor parallel: heads, MLP width and vocabulary split; KV heads replicated (2 < 8)",
        ),
        Scheme(
            "tp_sp",
            {"tp": 8},
            {"heads": "tp", "mlp": "tp", "vocab": "tp", "seq": "tp"},
            "Megatron tensor parallel with sequence parallelism: the residual stream split by sequence between blocks",
        ),
        Scheme(
            "fsdp_tp",
            {"fsdp": 4, "tp": 2},
            {"batch": "fsdp", "embed": "fsdp", "heads": "tp", "mlp": "tp", "kv": "tp"},
            "FSDP × TP: FSDP over 4, tensor parallel over 2 (the 2 KV heads split too)",
        ),
    )
}


def _spec(dims, rules):
    """A PartitionSpec from logical dimensions: each mapped by the rules, or replicated."""
    return P(*(rules.get(d) for d in dims))


def shardings(scheme, mesh, params):
    """NamedShardings of the params pytree (and of a batch) under `scheme`."""

    def for_path(path, _):
        name = path[-1].key
        return NamedSharding(mesh, _spec(PARAM_DIMS[name], scheme.rules))

    param_shardings = jax.tree_util.tree_map_with_path(for_path, params)
    batch_sharding = NamedSharding(mesh, P(scheme.rules.get("batch"), None))
    return param_shardings, batch_sharding


def make_mesh(scheme, devices=None):
    """The scheme's mesh over the first devices (a one-device mesh for "single")."""
    return fixtures.make_mesh(scheme.mesh_axes or {"single": 1}, devices)


def compiled_step(scheme, config=TinyConfig(), devices=None):
    """(jitted step, mesh, param shardings, batch sharding) for `scheme`: the
    training step with every input and output sharding fixed."""
    mesh = make_mesh(scheme, devices)
    params = init_params(config)
    param_sh, batch_sh = shardings(scheme, mesh, params)
    opt_sh = {"m": param_sh, "v": param_sh, "step": NamedSharding(mesh, P())}
    batch_shardings = {"inputs": batch_sh, "targets": batch_sh}

    def constrain(x, dims):
        if not scheme.mesh_axes:
            return x
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, _spec(dims, scheme.rules)))

    def step(params, opt_state, batch):
        return train_step(params, opt_state, batch, config, constrain)

    jitted = jax.jit(
        step,
        in_shardings=(param_sh, opt_sh, batch_shardings),
        out_shardings=(param_sh, opt_sh, NamedSharding(mesh, P())),
    )
    return jitted, mesh, param_sh, batch_shardings


def train(scheme_name, n_steps=20, config=TinyConfig(), devices=None):
    """Losses of `n_steps` Adam steps under a scheme, from the same
    initialization and the same batches as every other scheme."""
    scheme = SCHEMES[scheme_name]
    jitted, _, param_sh, batch_sh = compiled_step(scheme, config, devices)
    params = jax.device_put(init_params(config), param_sh)
    opt_state = adam_init(params)  # zeros with the parameters' shardings
    losses = []
    for batch in batches(config, n_steps):
        params, opt_state, loss = jitted(params, opt_state, jax.device_put(batch, batch_sh))
        losses.append(float(loss))
    return losses


def compile_step(scheme_name, config=TinyConfig(), devices=None):
    """(compiled training step, mesh) for a scheme, from abstract arguments:
    XLA's own accounting (cost_analysis, memory_analysis, as_text) of it."""
    scheme = SCHEMES[scheme_name]
    jitted, mesh, param_sh, batch_sh = compiled_step(scheme, config, devices)
    params = init_params(config)
    abstract = jax.tree_util.tree_map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), params, param_sh)
    opt = {"m": abstract, "v": abstract, "step": jax.ShapeDtypeStruct((), jnp.int32, sharding=NamedSharding(mesh, P()))}
    shape = (config.batch_seqs, config.seq_len)
    batch = {k: jax.ShapeDtypeStruct(shape, jnp.int32, sharding=s) for k, s in batch_sh.items()}
    return jitted.lower(abstract, opt, batch).compile(), mesh


def step_flops(scheme_name, config=TinyConfig(), devices=None):
    """FLOPs of one compiled training step, summed over devices, from XLA's
    cost analysis."""
    compiled, mesh = compile_step(scheme_name, config, devices)
    analysis = compiled.cost_analysis()
    if isinstance(analysis, list):
        analysis = analysis[0]
    return float(analysis["flops"]) * mesh.size
