"""One small LLaMA-style decoder, and its mixture-of-experts variant.

Pure functions over a params pytree: token embedding, RMSNorm, attention with
grouped KV heads and rotary embeddings, a SwiGLU MLP (or a top-k routed
mixture of SwiGLU experts), an untied output projection; next-token
cross-entropy; Adam with float32 weights and moments. Compute is float32 as
well, so that a sharded run and the single-device run agree to float32
rounding (a GPU run would compute in BF16; the sharding does not change).

The layers' weights are stacked, one array per weight with a leading
``layers`` dimension, so that a pipeline can split that dimension over a
stage axis. How a scheme splits the work enters through three hooks, given
by shardbook.programs.schemes: `constrain(x, dims)` pins an activation's
layout, `attend(q, k, v)` is the attention core (dense, or a ring over a
context-parallel axis), and `run_layers(layers, x, block)` applies the
stack (a loop, or a pipeline over stages).
"""

import math
from dataclasses import dataclass, fields

import jax
import jax.numpy as jnp
import numpy as np

from .. import models


@dataclass(frozen=True)
class TinyConfig:
    """Sizes of the small model. `n_experts` > 1 makes every layer's MLP a
    mixture of `n_experts` SwiGLU experts of width `d_ff`, `top_k` per token,
    each taking at most `capacity` tokens of a sequence (the rest of that
    expert's tokens are dropped: their MLP output is zero, the residual
    carries them on)."""

    vocab_size: int = 512
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 8
    n_kv_heads: int = 2
    d_ff: int = 768
    seq_len: int = 128
    batch_seqs: int = 8
    n_experts: int = 1
    top_k: int = 1
    capacity_factor: float = 1.25
    rope_theta: float = 10_000.0
    learning_rate: float = 3e-3

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type in ("int", int) and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ValueError(f"TinyConfig.{f.name}: must be a positive integer, got {value!r}")
            if f.type in ("float", float) and not (isinstance(value, (int, float)) and value > 0):
                raise ValueError(f"TinyConfig.{f.name}: must be a positive number, got {value!r}")
        for name, divisor in (("n_heads", self.n_kv_heads), ("d_model", self.n_heads)):
            if getattr(self, name) % divisor:
                raise ValueError(f"TinyConfig.{name}: must be a multiple of {divisor}, got {getattr(self, name)}")
        if (self.d_model // self.n_heads) % 2:
            raise ValueError("TinyConfig.d_model: the head width d_model/n_heads must be even (rotary pairs)")
        if self.top_k > self.n_experts:
            raise ValueError(f"TinyConfig.top_k: must be <= n_experts ({self.n_experts}), got {self.top_k}")

    @property
    def head_dim(self):
        return self.d_model // self.n_heads

    @property
    def is_moe(self):
        return self.n_experts > 1

    @property
    def capacity(self):
        """Slots per expert per sequence: ceil(capacity_factor · k · S / E)."""
        return math.ceil(self.capacity_factor * self.top_k * self.seq_len / self.n_experts)

    def as_model(self):
        """The same architecture as a cost-model preset (for its formulas)."""
        return models.Model(
            "shardbook tiny MoE decoder" if self.is_moe else "shardbook tiny decoder",
            "dubey2024llama3",
            self.d_model,
            self.d_ff,
            self.n_layers,
            self.n_heads,
            self.n_kv_heads,
            self.head_dim,
            self.vocab_size,
            n_experts=self.n_experts,
            top_k=self.top_k,
        )


DENSE = TinyConfig()
# The MoE variant: 8 experts of width 192, two per token, so a token's
# activated MLP width k·F = 384 is half the dense model's 768.
MOE = TinyConfig(d_ff=192, n_experts=8, top_k=2)

# logical dimensions of each parameter ("layers" leads every stacked weight)
PARAM_DIMS = {
    "embed": ("vocab", "embed"),
    "unembed": ("embed", "vocab"),
    "final_norm": ("norm",),
    "attn_norm": ("layers", "norm"),
    "wqkv": ("layers", "embed", "kv", "qkv"),
    "wo": ("layers", "heads", "embed"),
    "mlp_norm": ("layers", "norm"),
    "w_in": ("layers", "embed", None, "mlp"),
    "w_down": ("layers", "mlp", "embed"),
    "router": ("layers", "embed", "router"),
    "e_gate": ("layers", "experts", "embed", "expert_mlp"),
    "e_up": ("layers", "experts", "embed", "expert_mlp"),
    "e_down": ("layers", "experts", "expert_mlp", "embed"),
}


def param_shapes(config):
    """{name: global shape} of every parameter (the layer weights stacked)."""
    d, f, hd, n_l, n_e = config.d_model, config.d_ff, config.head_dim, config.n_layers, config.n_experts
    groups = config.n_heads // config.n_kv_heads
    shapes = {
        "embed": (config.vocab_size, d),
        "unembed": (d, config.vocab_size),
        "final_norm": (d,),
        "attn_norm": (n_l, d),
        "wqkv": (n_l, d, config.n_kv_heads, (groups + 2) * hd),
        "wo": (n_l, config.n_heads * hd, d),
        "mlp_norm": (n_l, d),
    }
    if config.is_moe:
        shapes.update(router=(n_l, d, n_e), e_gate=(n_l, n_e, d, f), e_up=(n_l, n_e, d, f), e_down=(n_l, n_e, f, d))
    else:
        shapes.update(w_in=(n_l, d, 2, f), w_down=(n_l, f, d))
    return shapes


def init_params(config, seed=0):
    """Float32 parameters; numpy arrays (place them with jax.device_put)."""
    rng = np.random.default_rng(seed)
    d, f, hd, n_l, n_e = config.d_model, config.d_ff, config.head_dim, config.n_layers, config.n_experts

    def dense(*shape):  # fan-in scaling on the second-to-last dimension
        return (rng.standard_normal(shape) / np.sqrt(shape[-2])).astype(np.float32)

    layers = {
        "attn_norm": np.ones((n_l, d), np.float32),
        # Q, K and V of each KV group side by side (G query heads, one K, one V),
        # so that splitting the KV groups gives each device whole groups (Megatron's layout)
        "wqkv": dense(n_l, d, config.n_heads * hd + 2 * config.n_kv_heads * hd).reshape(
            n_l, d, config.n_kv_heads, (config.n_heads // config.n_kv_heads + 2) * hd
        ),
        "wo": dense(n_l, config.n_heads * hd, d),
        "mlp_norm": np.ones((n_l, d), np.float32),
    }
    if config.is_moe:
        layers.update(
            router=dense(n_l, d, n_e),
            e_gate=dense(n_l, n_e, d, f),
            e_up=dense(n_l, n_e, d, f),
            e_down=dense(n_l, n_e, f, d),
        )
    else:
        # gate and up projections as one weight, as Megatron fuses them: one matmul, one gradient reduction
        layers.update(w_in=dense(n_l, d, 2 * f).reshape(n_l, d, 2, f), w_down=dense(n_l, f, d))
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


def grouped_scores(q, k):
    """Scaled scores of grouped-query attention without copying K: q [B, S,
    H, hd] is viewed as [B, S, KV, H/KV, hd] (query head h uses KV head
    h // (H/KV)); returns [B, KV, H/KV, S_q, S_k]."""
    b, s, n_heads, hd = q.shape
    q = q.reshape(b, s, k.shape[2], n_heads // k.shape[2], hd)
    return jnp.einsum("bqngd,bknd->bngqk", q, k) / jnp.sqrt(jnp.float32(hd))


def grouped_values(weights, v):
    """Weights [B, KV, H/KV, S_q, S_k] applied to v [B, S_k, KV, hd]: [B, S_q, H, hd]."""
    out = jnp.einsum("bngqk,bknd->bqngd", weights, v)
    return out.reshape(*out.shape[:2], -1, out.shape[-1])


def dense_attention(q, k, v):
    """Causal softmax attention; q [B, S, H, hd], k and v [B, S, KV, hd]."""
    s = q.shape[1]
    causal = jnp.tril(jnp.ones((s, s), dtype=bool))
    weights = jax.nn.softmax(jnp.where(causal, grouped_scores(q, k), -jnp.inf), axis=-1)
    return grouped_values(weights, v)


def _attention(layer, h, config, attend, constrain):
    b, s, _ = h.shape
    hd, n_kv = config.head_dim, config.n_kv_heads
    groups = config.n_heads // n_kv
    qkv = constrain(jnp.einsum("bsd,dnx->bsnx", h, layer["wqkv"]), ("batch", "block_seq", "kv", "qkv"))
    qkv = qkv.reshape(b, s, n_kv, groups + 2, hd)
    q = _rotary(qkv[:, :, :, :groups].reshape(b, s, config.n_heads, hd), config.rope_theta)
    k = _rotary(qkv[:, :, :, groups], config.rope_theta)
    v = qkv[:, :, :, groups + 1]
    heads = constrain(attend(q, k, v).reshape(b, s, config.n_heads * hd), ("batch", "block_seq", "heads"))
    return heads @ layer["wo"]


def route(router_logits, config):
    """Top-k routing with a per-sequence capacity, as GShard and Switch do it.

    router_logits [B, S, E]. Each token's k largest router probabilities,
    renormalized to sum to one, are its gates. Slots are filled in priority
    order, every token's first choice before any second choice, in sequence
    order; a choice that finds its expert's `capacity` slots full is dropped.
    Returns (dispatch, combine), both [B, S, E, C]: dispatch is 1 where a
    token occupies a slot, combine is its gate there."""
    b, s, e = router_logits.shape
    k, capacity = config.top_k, config.capacity
    gates, experts = jax.lax.top_k(jax.nn.softmax(router_logits, axis=-1), k)  # [B, S, k]
    gates = gates / jnp.sum(gates, axis=-1, keepdims=True)
    chosen = jax.nn.one_hot(experts, e, dtype=jnp.float32)  # [B, S, k, E]
    by_priority = jnp.swapaxes(chosen, 1, 2).reshape(b, k * s, e)  # first choices first
    position = (jnp.cumsum(by_priority, axis=1) - 1) * by_priority  # slot taken in that expert
    position = jnp.swapaxes(position.reshape(b, k, s, e), 1, 2).sum(axis=-1)  # [B, S, k]
    kept = (position < capacity).astype(jnp.float32)
    slot = jax.nn.one_hot(position.astype(jnp.int32), capacity, dtype=jnp.float32)  # [B, S, k, C]
    dispatch = jnp.einsum("bske,bskc,bsk->bsec", chosen, slot, kept)
    combine = jnp.einsum("bske,bskc,bsk->bsec", chosen, slot, kept * gates)
    return dispatch, combine


def _moe_mlp(layer, h, config, constrain):
    """Routed SwiGLU experts: tokens to their experts' slots (an all-to-all
    when experts are split over an axis), the expert math, and back."""
    dispatch, combine = route(h @ layer["router"], config)
    slots = constrain(jnp.einsum("bsec,bsd->becd", dispatch, h), ("expert_batch", "experts", None, "embed_act"))
    gate = jnp.einsum("becd,edf->becf", slots, layer["e_gate"])
    up = jnp.einsum("becd,edf->becf", slots, layer["e_up"])
    out = constrain(
        jnp.einsum("becf,efd->becd", jax.nn.silu(gate) * up, layer["e_down"]),
        ("expert_batch", "experts", None, "embed_act"),
    )
    return jnp.einsum("bsec,becd->bsd", combine, out)


def _dense_mlp(layer, h, constrain):
    gate_up = constrain(jnp.einsum("bsd,dtf->bstf", h, layer["w_in"]), ("batch", "block_seq", None, "mlp"))
    hidden = constrain(jax.nn.silu(gate_up[:, :, 0]) * gate_up[:, :, 1], ("batch", "block_seq", "mlp"))
    return hidden @ layer["w_down"]


# logical dimensions of the residual stream between blocks, and of a block's
# normalized input: sequence parallelism splits the first by sequence and
# gathers the second (its rules map "seq" but not "block_seq"); context
# parallelism keeps both split (it maps both)
RESIDUAL_DIMS = ("batch", "seq", "embed_act")
BLOCK_INPUT_DIMS = ("batch", "block_seq", "embed_act")


def _unconstrained(x, dims):
    return x


def block(layer, x, config, constrain=_unconstrained, attend=dense_attention):
    """One decoder layer (pre-norm attention, then pre-norm MLP or MoE)."""
    h = constrain(_rms_norm(x, layer["attn_norm"]), BLOCK_INPUT_DIMS)
    x = constrain(x + _attention(layer, h, config, attend, constrain), RESIDUAL_DIMS)
    h = constrain(_rms_norm(x, layer["mlp_norm"]), BLOCK_INPUT_DIMS)
    mlp = _moe_mlp(layer, h, config, constrain) if config.is_moe else _dense_mlp(layer, h, constrain)
    return constrain(x + mlp, RESIDUAL_DIMS)


def loop_layers(layers, x, apply_layer):
    """Apply the stacked layers one after another (every scheme but the pipeline)."""
    n_layers = jax.tree_util.tree_leaves(layers)[0].shape[0]
    for i in range(n_layers):
        x = apply_layer(jax.tree_util.tree_map(lambda w, i=i: w[i], layers), x)
    return x


def forward(params, tokens, config, constrain=_unconstrained, attend=dense_attention, run_layers=loop_layers):
    """Logits [B, S, vocab] for tokens [B, S]."""
    x = constrain(params["embed"][tokens], RESIDUAL_DIMS)

    def apply_layer(layer, x):
        return block(layer, x, config, constrain, attend)

    x = run_layers(params["layers"], x, apply_layer)
    return _rms_norm(x, params["final_norm"]) @ params["unembed"]


def loss_fn(params, batch, config, **hooks):
    """Mean next-token cross-entropy over the batch."""
    logits = forward(params, batch["inputs"], config, **hooks)
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    picked = jnp.take_along_axis(log_probs, batch["targets"][..., None], axis=-1)[..., 0]
    return -jnp.mean(picked)


def adam_init(params):
    """Adam's state: zero first and second moments shaped (and, for sharded
    arrays, sharded) like the parameters, and a step counter."""
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    return {"m": zeros, "v": jax.tree_util.tree_map(jnp.zeros_like, params), "step": jnp.zeros((), jnp.int32)}


def train_step(params, opt_state, batch, config, b1=0.9, b2=0.95, eps=1e-8, **hooks):
    """One Adam step; returns (params, opt_state, loss)."""
    loss, grads = jax.value_and_grad(loss_fn)(params, batch, config, **hooks)
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
