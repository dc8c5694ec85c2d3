"""The book's compiled examples: tiny sharded JAX programs on 8 devices.

Each fixture builds a mesh from the first 8 devices (simulated CPU devices
here, GPUs on a GPU node, the global devices of a multi-process job) and
returns the jitted function with abstract, sharded arguments. The fixtures
themselves (mesh, specs, shapes, prediction, reference) are declared in
shardbook.programs.registry. Nothing here runs at import time:
`import shardbook.programs.fixtures` imports JAX, not the book's `import shardbook`.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from . import registry

N_DEVICES = 8


def make_mesh(axes, devices=None):
    """A Mesh of the first devices with the named `axes` (name -> size, in
    order); a RuntimeError when there are too few devices."""
    devices = list(devices if devices is not None else jax.devices())
    n = int(np.prod(list(axes.values())))
    if len(devices) < n:
        raise RuntimeError(f"mesh {axes} needs {n} devices, JAX has {len(devices)}")
    return Mesh(np.array(devices[:n]).reshape(tuple(axes.values())), tuple(axes))


class SimulatedSliceDevice:
    """A device seen as a member of slice `slice_index`: what a TPU device
    reports and a simulated CPU device does not. Everything else is the
    wrapped device's."""

    def __init__(self, device, slice_index):
        self.device = device
        self.slice_index = slice_index

    def __getattr__(self, name):
        return getattr(self.device, name)


def hybrid_mesh(mesh_axes, dcn_axes, devices=None):
    """A Mesh whose `dcn_axes` ({axis: slices along it}) cross slices and
    whose other factors stay inside one, built by JAX's
    create_hybrid_device_mesh as MaxText builds its multi-slice meshes.
    Slices are the devices' own (slice_index on TPU), else JAX processes
    (right on a GPU cluster when each process owns a whole node; one
    process per GPU would make every GPU a slice), else, in one process of simulated CPU
    devices, consecutive runs of devices standing in for them."""
    from jax.experimental import mesh_utils

    devices = list(devices if devices is not None else jax.devices())
    axes = tuple(mesh_axes)
    n = int(np.prod(list(mesh_axes.values())))
    if len(devices) < n:
        raise RuntimeError(f"mesh {mesh_axes} needs {n} devices, JAX has {len(devices)}")
    devices = devices[:n]
    unknown = set(dcn_axes) - set(axes)
    if unknown:
        raise ValueError(f"dcn_axes: {sorted(unknown)} are not axes of the mesh {axes}")
    dcn_shape = [dcn_axes.get(a, 1) for a in axes]
    for a, slices in zip(axes, dcn_shape, strict=True):
        if mesh_axes[a] % slices:
            raise ValueError(f"dcn_axes: axis {a!r} of size {mesh_axes[a]} cannot span {slices} slices")
    ici_shape = [mesh_axes[a] // d for a, d in zip(axes, dcn_shape, strict=True)]
    n_slices = int(np.prod(dcn_shape))
    # CPU devices of a multi-process job report slice_index 0: use the
    # attribute only when it really names n_slices slices
    if len({getattr(d, "slice_index", None) for d in devices} - {None}) == n_slices:
        grid = mesh_utils.create_hybrid_device_mesh(ici_shape, dcn_shape, devices)
    elif len({d.process_index for d in devices}) == n_slices:
        grid = mesh_utils.create_hybrid_device_mesh(ici_shape, dcn_shape, devices, process_is_granule=True)
    else:
        per_slice = n // n_slices
        stand_ins = [SimulatedSliceDevice(d, i // per_slice) for i, d in enumerate(devices)]
        grid = mesh_utils.create_hybrid_device_mesh(ici_shape, dcn_shape, stand_ins)
        grid = np.vectorize(lambda d: d.device, otypes=[object])(grid)
    return Mesh(grid, axes)


def mesh_for(fixture, devices=None):
    """The fixture's mesh: hybrid when it declares axes across slices."""
    if fixture.dcn_axes:
        return hybrid_mesh(fixture.mesh_axes, fixture.dcn_axes, devices)
    return make_mesh(fixture.mesh_axes, devices)


def _spec(entries):
    return P(*entries)


def abstract_args(fixture, mesh):
    """The fixture's arguments as ShapeDtypeStructs carrying their
    NamedShardings on `mesh`: what `jit(...).lower` needs to compile it
    without data."""
    dtype = jnp.dtype(fixture.dtype)
    return [
        jax.ShapeDtypeStruct(fixture.shapes[a], dtype, sharding=NamedSharding(mesh, _spec(fixture.specs[a])))
        for a in fixture.arg_names
    ]


def build(fixture, mesh):
    """The program of `fixture` for `mesh`: the builder its declaration names."""
    builder = globals().get(fixture.program)
    if not callable(builder):
        raise ValueError(f"{fixture.name}.program: no builder {fixture.program!r} in shardbook.programs.fixtures")
    return builder(mesh)


def jitted(fixture, mesh):
    """The jitted function with input and output shardings fixed."""
    fn = build(fixture, mesh)
    in_shardings = tuple(NamedSharding(mesh, _spec(fixture.specs[a])) for a in fixture.arg_names)
    out = fixture.specs["out"]
    out_shardings = (
        NamedSharding(mesh, _spec(out))
        if not isinstance(out, list)
        else tuple(NamedSharding(mesh, _spec(o)) for o in out)
    )
    fn.__name__ = fixture.name  # the HLO module is named jit_<fixture>
    fn.__qualname__ = fixture.name
    return jax.jit(fn, in_shardings=in_shardings, out_shardings=out_shardings)


# --- the programs: builder(mesh) -> function of the arguments ----------------
# Each is named by a declaration's `program` in shardbook.programs.registry.


def matmul(mesh):
    """x @ w, left to the compiler: the shardings of the arguments decide
    the collectives (the DP and FSDP matmul fixtures)."""

    def program(x, w):
        return x @ w

    return program


def tp_matmul(mesh):
    """x @ w with the contracting dimension split over `tp`, written with
    shard_map: each device multiplies its slices and psum adds the partials."""

    def local(x, w):
        return jax.lax.psum(x @ w, "tp")

    def program(x, w):
        return jax.shard_map(local, mesh=mesh, in_specs=(P(None, "tp"), P("tp", None)), out_specs=P(None, None))(x, w)

    return program


def fsdp_train_step(mesh):
    """One SGD step on the mean square of x @ w, left to the compiler, with
    w split over `fsdp`: the gather of w and the reduction of its gradient
    are the partitioner's."""

    def loss(w, x):
        return jnp.mean(jnp.square(x @ w))

    def program(x, w):
        return w - 0.1 * jax.grad(loss)(w, x)

    return program


def fsdp_manual(mesh):
    """The same step written by hand with shard_map: all-gather w, take the
    gradient of the local loss, reduce-scatter it back to w's shards."""

    def local(x, w_shard):
        w = jax.lax.all_gather(w_shard, "fsdp", axis=0, tiled=True)
        n_rows = x.shape[0] * jax.lax.axis_size("fsdp")

        def loss(w_full):
            return jnp.sum(jnp.square(x @ w_full)) / (n_rows * w_full.shape[1])

        grad_shard = jax.lax.psum_scatter(jax.grad(loss)(w), "fsdp", scatter_dimension=0, tiled=True)
        return w_shard - 0.1 * grad_shard

    def program(x, w):
        return jax.shard_map(local, mesh=mesh, in_specs=(P("fsdp", None), P("fsdp", None)), out_specs=P("fsdp", None))(
            x, w
        )

    return program


def megatron_mlp(mesh):
    """GELU(x @ w_up) @ w_down with Megatron's column-then-row split left to
    the compiler: one all-reduce of the output."""

    def program(x, w_up, w_down):
        return jax.nn.gelu(x @ w_up) @ w_down

    return program


def megatron_mlp_sp(mesh):
    """The same MLP with sequence parallelism written with shard_map:
    all-gather the rows of x over `tp`, reduce-scatter the output's rows."""

    def local(x_rows, w_up, w_down):
        x = jax.lax.all_gather(x_rows, "tp", axis=0, tiled=True)
        partial = jax.nn.gelu(x @ w_up) @ w_down
        return jax.lax.psum_scatter(partial, "tp", scatter_dimension=0, tiled=True)

    def program(x, w_up, w_down):
        specs = (P("tp", None), P(None, "tp"), P("tp", None))
        return jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=P("tp", None))(x, w_up, w_down)

    return program


def moe_dispatch(mesh):
    """Expert parallelism written with shard_map: an all-to-all over
    `expert` sends each token to its expert, the expert weights are
    all-gathered over `fsdp`, and each expert multiplies its tokens."""

    def local(tokens, w):
        # tokens: [E, T/(fsdp·ep), D], rows already grouped by destination expert
        routed = jax.lax.all_to_all(tokens, "expert", split_axis=0, concat_axis=1, tiled=True)
        w_full = jax.lax.all_gather(w, "fsdp", axis=1, tiled=True)  # [E/ep, D, H]
        return jnp.einsum("etd,edh->eth", routed, w_full)

    def program(tokens, w):
        specs = (P(None, ("fsdp", "expert"), None), P("expert", "fsdp", None))
        return jax.shard_map(local, mesh=mesh, in_specs=specs, out_specs=P("expert", ("fsdp",), None))(tokens, w)

    return program


def pipeline_stages(mesh):
    """One pipeline step written with shard_map: each stage applies
    tanh(x @ w) to its input and a collective permute passes the result
    to the next stage."""
    n = mesh.shape["pp"]

    def local(x, w):
        y = jnp.tanh(x @ w[0])
        return jax.lax.ppermute(y, "pp", perm=[(i, (i + 1) % n) for i in range(n)])

    def program(x, w):
        return jax.shard_map(local, mesh=mesh, in_specs=(P("pp", None), P("pp", None, None)), out_specs=P("pp", None))(
            x, w
        )

    return program


def collective_matmul(mesh):
    """x's rows split over tp, w's columns split over tp; y = x @ w wanted
    whole by rows. Instead of gathering x and then multiplying, each device
    multiplies the rows it holds and passes them to its neighbour: n dots
    and n-1 permutes, each permute free to run while the next dot does."""
    n = mesh.shape["tp"]
    to_next = [(i, (i + 1) % n) for i in range(n)]

    def local(x_rows, w_cols):
        me = jax.lax.axis_index("tp")
        rows = x_rows.shape[0]
        out = jnp.zeros((rows * n, w_cols.shape[1]), x_rows.dtype)
        chunk = x_rows
        for step in range(n):
            source = (me - step) % n  # whose rows this device holds at this step
            out = jax.lax.dynamic_update_slice(out, chunk @ w_cols, (source * rows, 0))
            if step < n - 1:
                chunk = jax.lax.ppermute(chunk, "tp", to_next)
        return out

    def program(x, w):
        return jax.shard_map(local, mesh=mesh, in_specs=(P("tp", None), P(None, "tp")), out_specs=P(None, "tp"))(x, w)

    return program


# --- context parallelism three ways: q, k, v [S, H, Q], sequence over cp ------


def _causal_attention(q, k, v, q_offset=0, k_offset=0):
    """Softmax attention of q against k, v with a causal mask on global
    positions (a query at position i sees keys at positions <= i)."""
    scores = jnp.einsum("qhd,khd->hqk", q, k) / np.sqrt(q.shape[-1]).astype(q.dtype)
    q_pos = q_offset + jnp.arange(q.shape[0])
    k_pos = k_offset + jnp.arange(k.shape[0])
    scores = jnp.where(k_pos[None, None, :] <= q_pos[None, :, None], scores, -1e30)
    return jnp.einsum("hqk,khd->qhd", jax.nn.softmax(scores, axis=-1), v)


def online_softmax_step(state, scores, weigh_values):
    """Merge one block of keys into a running softmax (the online softmax of
    shardbook.attention, on arrays): `state` is (running max, normalizer,
    weighted sum) or None before the first block, `scores` the block's
    scores with keys last, `weigh_values(weights)` the block's weighted sum
    of its values. Both old sums are rescaled to the new maximum."""
    block_max = scores.max(-1)
    new_max = block_max if state is None else jnp.maximum(state[0], block_max)
    weights = jnp.exp(scores - new_max[..., None])
    block = weigh_values(weights)
    if state is None:
        return new_max, weights.sum(-1), block
    running_max, normalizer, weighted = state
    rescale = jnp.exp(running_max - new_max)
    return new_max, normalizer * rescale + weights.sum(-1), weighted * rescale[..., None] + block


def _sequence_sharded(mesh, local):
    spec = P("cp", None, None)
    return lambda q, k, v: jax.shard_map(local, mesh=mesh, in_specs=(spec, spec, spec), out_specs=spec)(q, k, v)


def context_ring(mesh):
    """Ring attention: each device keeps its queries; K and V chunks go round
    the ring (n−1 hops of each) and are merged by the online softmax."""
    n = mesh.shape["cp"]
    to_next = [(i, (i + 1) % n) for i in range(n)]

    def local(q, k, v):
        rows = q.shape[0]
        me = jax.lax.axis_index("cp")
        q_pos = me * rows + jnp.arange(rows)
        scale = 1 / np.sqrt(q.shape[-1]).astype(q.dtype)
        state = None  # (running max, normalizer, weighted sum)
        for step in range(n):
            k_pos = ((me - step) % n) * rows + jnp.arange(rows)
            scores = jnp.einsum("qhd,khd->hqk", q, k) * scale
            scores = jnp.where(k_pos[None, None, :] <= q_pos[None, :, None], scores, -1e30)
            state = online_softmax_step(state, scores, lambda w, v=v: jnp.einsum("hqk,khd->hqd", w, v))
            if step < n - 1:
                k, v = jax.lax.ppermute(k, "cp", to_next), jax.lax.ppermute(v, "cp", to_next)
        _, normalizer, weighted = state
        return jnp.einsum("hqd->qhd", weighted / normalizer[..., None])

    return _sequence_sharded(mesh, local)


def context_all_gather_kv(mesh):
    """All-gather K and V (Llama 3's choice): every device gathers the whole
    K and V once and attends its own queries to them."""

    def local(q, k, v):
        offset = jax.lax.axis_index("cp") * q.shape[0]
        k_all = jax.lax.all_gather(k, "cp", axis=0, tiled=True)
        v_all = jax.lax.all_gather(v, "cp", axis=0, tiled=True)
        return _causal_attention(q, k_all, v_all, q_offset=offset)

    return _sequence_sharded(mesh, local)


def context_ulysses(mesh):
    """Head scattering (DeepSpeed-Ulysses): an all-to-all turns each device's
    sequence chunk of every head into the whole sequence of H/n heads;
    attention is local; a second all-to-all turns the output back."""

    def local(q, k, v):
        to_heads = lambda a: jax.lax.all_to_all(a, "cp", split_axis=1, concat_axis=0, tiled=True)  # noqa: E731
        out = _causal_attention(to_heads(q), to_heads(k), to_heads(v))
        return jax.lax.all_to_all(out, "cp", split_axis=0, concat_axis=1, tiled=True)

    return _sequence_sharded(mesh, local)


# --- MoE dispatch left to the partitioner: which dimension keeps `expert` ----


def _dispatch_constrained(mesh, tokens_spec):
    def program(tokens, w):
        # tokens arrive grouped by expert, split over every device by row
        routed = jax.lax.with_sharding_constraint(tokens, NamedSharding(mesh, tokens_spec))
        return jnp.einsum("etd,edh->eth", routed, w)

    return program


def moe_dispatch_auto(mesh):
    """MaxText's moe_dispatch_no_expert_sharding: the dispatched tokens are
    constrained to keep `expert` on the expert dimension, not on their rows."""
    return _dispatch_constrained(mesh, P("expert", "fsdp", None))


def moe_dispatch_expert_on_batch(mesh):
    """The same einsum with `expert` left on the tokens' rows."""
    return _dispatch_constrained(mesh, P(None, ("fsdp", "expert"), None))


get = registry.get
