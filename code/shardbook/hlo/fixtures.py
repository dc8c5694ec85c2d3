"""The book's compiled examples: tiny sharded JAX programs on 8 devices.

Each fixture builds a mesh from the first 8 devices (simulated CPU devices
here, GPUs on a GPU node, the global devices of a multi-process job) and
returns the jitted function with abstract, sharded arguments. Nothing here
runs at import time: `import shardbook.hlo.fixtures` imports JAX, not the
book's `import shardbook`.
"""

from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

N_DEVICES = 8


@dataclass(frozen=True)
class Fixture:
    name: str
    mesh_axes: dict  # axis name -> size, in mesh order
    specs: dict  # argument name -> PartitionSpec entries (tuple), and "out"
    shapes: dict  # argument name -> global shape
    dtype: str
    summary: str
    build: object = field(repr=False)  # mesh -> function of the arguments
    manual: bool = False  # written with shard_map

    @property
    def arg_names(self):
        return list(self.shapes)


def make_mesh(axes, devices=None):
    devices = list(devices if devices is not None else jax.devices())
    n = int(np.prod(list(axes.values())))
    if len(devices) < n:
        raise RuntimeError(f"mesh {axes} needs {n} devices, JAX has {len(devices)}")
    return Mesh(np.array(devices[:n]).reshape(tuple(axes.values())), tuple(axes))


def _spec(entries):
    return P(*entries)


def abstract_args(fixture, mesh):
    dtype = jnp.dtype(fixture.dtype)
    return [
        jax.ShapeDtypeStruct(fixture.shapes[a], dtype, sharding=NamedSharding(mesh, _spec(fixture.specs[a])))
        for a in fixture.arg_names
    ]


def jitted(fixture, mesh):
    """The jitted function with input and output shardings fixed."""
    fn = fixture.build(mesh)
    in_shardings = tuple(NamedSharding(mesh, _spec(fixture.specs[a])) for a in fixture.arg_names)
    out = fixture.specs["out"]
    out_shardings = NamedSharding(mesh, _spec(out)) if not isinstance(out, list) else tuple(NamedSharding(mesh, _spec(o)) for o in out)
    fn.__name__ = fixture.name  # the HLO module is named jit_<fixture>
    fn.__qualname__ = fixture.name
    return jax.jit(fn, in_shardings=in_shardings, out_shardings=out_shardings)


# --- the programs -------------------------------------------------------------


def _matmul(mesh):
    def program(x, w):
        return x @ w

    return program


def _tp_matmul(mesh):
    def local(x, w):
        return jax.lax.psum(x @ w, "tp")

    def program(x, w):
        return jax.shard_map(local, mesh=mesh, in_specs=(P(None, "tp"), P("tp", None)), out_specs=P(None, None))(x, w)

    return program


def _fsdp_train_step(mesh):
    def loss(w, x):
        return jnp.mean(jnp.square(x @ w))

    def program(x, w):
        return w - 0.1 * jax.grad(loss)(w, x)

    return program


def _fsdp_manual(mesh):
    def local(x, w_shard):
        w = jax.lax.all_gather(w_shard, "fsdp", axis=0, tiled=True)
        n_rows = x.shape[0] * jax.lax.axis_size("fsdp")

        def loss(w_full):
            return jnp.sum(jnp.square(x @ w_full)) / (n_rows * w_full.shape[1])

        grad_shard = jax.lax.psum_scatter(jax.grad(loss)(w), "fsdp", scatter_dimension=0, tiled=True)
        return w_shard - 0.1 * grad_shard

    def program(x, w):
        return jax.shard_map(local, mesh=mesh, in_specs=(P("fsdp", None), P("fsdp", None)), out_specs=P("fsdp", None))(x, w)

    return program


def _megatron_mlp(mesh):
    def program(x, w_up, w_down):
        return jax.nn.gelu(x @ w_up) @ w_down

    return program


def _megatron_mlp_sp(mesh):
    def local(x_rows, w_up, w_down):
        x = jax.lax.all_gather(x_rows, "tp", axis=0, tiled=True)
        partial = jax.nn.gelu(x @ w_up) @ w_down
        return jax.lax.psum_scatter(partial, "tp", scatter_dimension=0, tiled=True)

    def program(x, w_up, w_down):
        specs = (P("tp", None), P(None, "tp"), P("tp", None))
        return jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=P("tp", None))(x, w_up, w_down)

    return program


def _moe_dispatch(mesh):
    def local(tokens, w):
        # tokens: [E, T/(fsdp·ep), D], rows already grouped by destination expert
        routed = jax.lax.all_to_all(tokens, "expert", split_axis=0, concat_axis=1, tiled=True)
        w_full = jax.lax.all_gather(w, "fsdp", axis=1, tiled=True)  # [E/ep, D, H]
        return jnp.einsum("etd,edh->eth", routed, w_full)

    def program(tokens, w):
        specs = (P(None, ("fsdp", "expert"), None), P("expert", "fsdp", None))
        return jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=P("expert", ("fsdp",), None))(tokens, w)

    return program


def _pipeline_stages(mesh):
    n = mesh.shape["pp"]

    def local(x, w):
        y = jnp.tanh(x @ w[0])
        return jax.lax.ppermute(y, "pp", perm=[(i, (i + 1) % n) for i in range(n)])

    def program(x, w):
        return jax.shard_map(local, mesh=mesh, in_specs=(P("pp", None), P("pp", None, None)), out_specs=P("pp", None))(x, w)

    return program


FIXTURES = {
    f.name: f
    for f in [
        Fixture(
            "dp_matmul", {"data": 8},
            {"x": ("data", None), "w": (None, None), "out": ("data", None)},
            {"x": (1024, 512), "w": (512, 512)}, "float16",
            "Data parallel: rows of x split 8 ways, w replicated.", _matmul,
        ),
        Fixture(
            "fsdp_matmul", {"fsdp": 8},
            {"x": ("fsdp", None), "w": ("fsdp", None), "out": ("fsdp", None)},
            {"x": (1024, 512), "w": (512, 512)}, "float16",
            "FSDP: x and w both row-sharded; w is gathered before the dot.", _matmul,
        ),
        Fixture(
            "tp_matmul", {"tp": 8},
            {"x": (None, "tp"), "w": ("tp", None), "out": (None, None)},
            {"x": (1024, 512), "w": (512, 512)}, "float16",
            "Tensor parallel: the contracting dimension split; partial sums all-reduced.", _tp_matmul, True,
        ),
        Fixture(
            "fsdp_ep_linear", {"fsdp": 2, "ep": 4},
            {"x": (("fsdp", "ep"), None), "w": ("fsdp", None), "out": (("fsdp", "ep"), None)},
            {"x": (1024, 512), "w": (512, 512)}, "float16",
            "The (fsdp 2, ep 4) mesh: x over both axes, w over fsdp only.", _matmul,
        ),
        Fixture(
            "fsdp_train_step", {"fsdp": 8},
            {"x": ("fsdp", None), "w": ("fsdp", None), "out": ("fsdp", None)},
            {"x": (1024, 512), "w": (512, 512)}, "float32",
            "One SGD step of an FSDP-sharded weight, partitioned automatically.", _fsdp_train_step,
        ),
        Fixture(
            "fsdp_manual", {"fsdp": 8},
            {"x": ("fsdp", None), "w": ("fsdp", None), "out": ("fsdp", None)},
            {"x": (1024, 512), "w": (512, 512)}, "float32",
            "The same step in shard_map: explicit all_gather and psum_scatter.", _fsdp_manual, True,
        ),
        Fixture(
            "megatron_mlp", {"tp": 8},
            {"x": (None, None), "w_up": (None, "tp"), "w_down": ("tp", None), "out": (None, None)},
            {"x": (1024, 512), "w_up": (512, 2048), "w_down": (2048, 512)}, "float16",
            "Megatron MLP: W_up by columns, W_down by rows, one reduction.", _megatron_mlp,
        ),
        Fixture(
            "megatron_mlp_sp", {"tp": 8},
            {"x": ("tp", None), "w_up": (None, "tp"), "w_down": ("tp", None), "out": ("tp", None)},
            {"x": (1024, 512), "w_up": (512, 2048), "w_down": (2048, 512)}, "float16",
            "Sequence-parallel Megatron MLP: all-gather before, reduce-scatter after.", _megatron_mlp_sp, True,
        ),
        Fixture(
            "moe_dispatch", {"fsdp": 2, "expert": 4},
            {"tokens": (None, ("fsdp", "expert"), None), "w": ("expert", "fsdp", None), "out": ("expert", ("fsdp",), None)},
            {"tokens": (8, 1024, 512), "w": (8, 512, 1024)}, "bfloat16",
            "Expert parallelism: routed tokens exchanged by all-to-all over the expert axis.", _moe_dispatch, True,
        ),
        Fixture(
            "pipeline_stages", {"pp": 8},
            {"x": ("pp", None), "w": ("pp", None, None), "out": ("pp", None)},
            {"x": (1024, 512), "w": (8, 512, 512)}, "float32",
            "Pipeline: each stage applies its layer and passes activations to the next.", _pipeline_stages, True,
        ),
    ]
}


def get(name):
    try:
        return FIXTURES[name]
    except KeyError:
        raise ValueError(f"fixture: unknown fixture {name!r}; known: {', '.join(FIXTURES)}") from None
