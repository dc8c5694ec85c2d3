"""Compile the mesh explorer's candidates on 8 devices and read back their
collectives. Needs JAX (run after shardbook.devices.use_cpu_devices(8)).

Each candidate with pp = 1 and ep = 1 is compiled as one training step of
the two-matmul layer In[B,D]·W_in[D,F]·W_out[F,D] (gelu between, mean-square
loss, SGD), scaled down to B = 1,024 tokens, D = 512, F = 2,048 in float32,
on a (dp, fsdp, tp) mesh of dp·fsdp·tp devices, with In[B_(dp,fsdp), D],
W_in[D_fsdp, F_tp], W_out[F_tp, D_fsdp]: the tokens split over dp and fsdp,
the weights over fsdp and tp and copied over dp. Pipeline and expert meshes
are not compiled here: their programs are the pipeline_stages and
moe_dispatch fixtures.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from .inventory import inventory

TOKENS, D_MODEL, D_FF = 1024, 512, 2048


def compile_step(fsdp, tp, dp=1, devices=None):
    """Optimized HLO text of one training step on a (dp, fsdp, tp) mesh."""
    devices = list(devices if devices is not None else jax.devices())[: dp * fsdp * tp]
    mesh = Mesh(np.array(devices).reshape(dp, fsdp, tp), ("dp", "fsdp", "tp"))

    def loss(w_in, w_out, x):
        return jnp.mean(jnp.square(jax.nn.gelu(x @ w_in) @ w_out))

    def step(w_in, w_out, x):
        g_in, g_out = jax.grad(loss, argnums=(0, 1))(w_in, w_out, x)
        return w_in - 0.1 * g_in, w_out - 0.1 * g_out

    s = lambda *spec: NamedSharding(mesh, P(*spec))  # noqa: E731
    shardings = (s("fsdp", "tp"), s("tp", "fsdp"), s(("dp", "fsdp"), None))
    args = [
        jax.ShapeDtypeStruct((D_MODEL, D_FF), jnp.float32, sharding=shardings[0]),
        jax.ShapeDtypeStruct((D_FF, D_MODEL), jnp.float32, sharding=shardings[1]),
        jax.ShapeDtypeStruct((TOKENS, D_MODEL), jnp.float32, sharding=shardings[2]),
    ]
    jitted = jax.jit(step, in_shardings=shardings, out_shardings=shardings[:2])
    return jitted.lower(*args).compile().as_text()


def compiled_collectives(fsdp, tp, dp=1):
    """(kind, group size) of every collective in the compiled step, in order."""
    return [(c["kind"], c["group_size"]) for c in inventory(compile_step(fsdp, tp, dp))]
