"""The TPU compiler's verdict on a plan: its training step compiled for the
plan's topology, with the per-device memory and the collectives it needs.

`compile_plan(plan)` builds the book's decoder (shardbook.programs.model:
RMSNorm, grouped-query attention with rotary embeddings, SwiGLU or routed
SwiGLU experts, an untied output layer, cross-entropy) at the plan's real
widths in BF16, with

- the layers under `lax.scan`, the plan's recomputation as a
  `jax.checkpoint` policy on the scanned layer ('full': nothing saved but
  the layer input; 'selective': everything but the attention core; 'none':
  everything but the gathered weights and sequence-gathered block inputs,
  which FSDP and sequence parallelism gather again in the backward, as the
  planner assumes; no `with_sharding_constraint` output is saved either,
  since the names mark the values after it and saving its output would keep
  the gathered weights after all. XLA may still keep a block input gathered
  where it propagates the gathered sharding into the saved norm output);
- eager attention as Megatron's fused softmax computes it (BF16 scores in,
  FP32 inside, BF16 probabilities kept for the backward: the planner's
  attention='eager', 2 bytes a score);
- the microbatches as a scanned gradient accumulation, then global-norm
  clipping and AdamW with the state recipe's dtypes (memory.STATE_RECIPES:
  BF16 or FP32 weights, an FP32 master copy or none, FP32 or BF16 moments,
  gradients accumulated in the recipe's gradient dtype);
- FSDP sharding every matrix's d_model side over `fsdp`, Megatron's column
  and row splits over `tp` (heads, F, the vocabulary) with sequence
  parallelism, the batch over `dp` and `fsdp`.

It is sharded over the devices of a TPU topology that libtpu describes
(`topology_for`: the accelerator preset and the device count give the
slice; the mesh must tile its devices), lowered with ShapeDtypeStructs (no
array is made) and compiled ahead of time on this CPU host. The result holds
`memory_analysis()` and the optimized program's collectives by kind, each
counted as many times per step as the loops around it run (`per_step`).

Ironwood (tpu7x) has two TensorCore devices per chip and the planner one
device per chip: the compiler's mesh then has twice the planner's data
axis (fsdp, else dp) and the chip's memory is its two devices' together.

Only this module's compile step needs JAX with libtpu (`.venv-tpu`: `make
tpu-artifacts` creates it); parsing a compiled program and the topology
rules use the standard library. Ref: maxtext, korthikanti2022reducing.
"""

import json
import math
import os
import re
from dataclasses import asdict, dataclass, field

from .. import hardware, memory, models
from .inventory import inventory

# the accelerator preset's TPU generation as libtpu names its topologies, and the TensorCore
# devices a chip shows to JAX
TOPOLOGY_PREFIX = {"TPU v5e": "v5e", "TPU v5p": "v5p", "TPU v6e": "v6e", "Ironwood": "tpu7x"}
DEVICES_PER_CHIP = {"v5e": 1, "v5p": 1, "v6e": 1, "tpu7x": 2}
# 2D tori (v5e, v6e: up to 16x16) and 3D ones (v5p, Ironwood)
TORUS_RANK = {"v5e": 2, "v6e": 2, "v5p": 3, "tpu7x": 3}
MAX_2D_SIDE = 16
MESH_AXES = ("dp", "fsdp", "tp")
INSTALL_HINT = (
    "`make tpu-artifacts` creates .venv-tpu with jax[tpu]==0.10.2 (libtpu, Google Cloud's terms); "
    "run with .venv-tpu/bin/python (PYTHONPATH=code)"
)
# the variables libtpu needs to compile ahead of time on a host without a TPU; two compiles at
# once need ALLOW_MULTIPLE_LIBTPU_LOAD (libtpu otherwise locks /tmp/libtpu_lockfile per process)
TPU_ENV = {"TPU_SKIP_MDS_QUERY": "1", "JAX_PLATFORMS": "cpu", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}


@dataclass(frozen=True)
class Plan:
    """What is compiled: a models preset name, a TPU accelerator preset
    name, the mesh {axis: degree} over dp, fsdp and tp (in planner
    devices: chips), the global batch in sequences of `seq_len` tokens,
    sequences per microbatch on each data-parallel rank, the recomputation
    policy (none, selective, full), the state recipe (memory.STATE_RECIPES),
    the topology name of one slice (None: topology_for's) and the slices
    over DCN (a multislice topology: the slices are the outermost factor
    of the mesh's first axis above 1, as the planner places them)."""

    model: str
    accelerator: str
    mesh: dict
    seq_len: int
    batch_seqs: int
    micro_batch_seqs: int
    recompute: str = "full"
    state_recipe: str = "bf16_master"
    topology: str | None = None
    attention: str = "eager"
    slices: int = 1
    extra: dict = field(default_factory=dict)

    @property
    def n_devices(self):
        """Planner devices (chips) the mesh covers."""
        return math.prod(self.mesh.values())

    @property
    def data_ranks(self):
        """Data-parallel ranks (dp × fsdp) among which the batch is split."""
        return self.mesh.get("dp", 1) * self.mesh.get("fsdp", 1)

    @property
    def n_microbatches(self):
        """Microbatches each data-parallel rank accumulates over."""
        return self.batch_seqs // (self.data_ranks * self.micro_batch_seqs)


def check_plan(plan):
    """The plan's ValueError (one line, naming the argument and the rule)
    or None: a TPU accelerator, a known model, axes among dp, fsdp and tp,
    degrees that divide the model, a batch that splits into whole
    microbatches, a recompute policy and recipe this program builds."""
    acc = hardware.get(plan.accelerator)
    if acc.family != "tpu" or acc.name not in TOPOLOGY_PREFIX:
        raise ValueError(
            f"--compile: compiles for TPU topologies only ({', '.join(TOPOLOGY_PREFIX)}), not {acc.name} "
            f"(a {acc.family.upper()}: no compiler for it here)"
        )
    m = models.get(plan.model)
    for axis, degree in plan.mesh.items():
        if degree > 1 and axis not in MESH_AXES:
            raise ValueError(
                f"--compile: builds meshes over {', '.join(MESH_AXES)} only; {axis}={degree} is not built (no "
                "pipeline, context or expert axis in this program)"
            )
    tp = plan.mesh.get("tp", 1)
    for name, size in (("heads", m.n_heads), ("KV heads", m.n_kv_heads), ("F", m.d_ff), ("vocabulary", m.vocab_size)):
        if size % tp:
            raise ValueError(f"--compile: tp={tp} must divide the {name} ({size}) of {m.name}")
    if m.mla is not None or m.n_dense_layers or m.n_shared_experts or m.parallel_block or not m.gated_mlp:
        raise ValueError(f"--compile: builds LLaMA- and Mixtral-style models only, not {m.name}")
    if plan.seq_len % tp:
        raise ValueError(f"--compile: tp={tp} must divide seq_len ({plan.seq_len}) (sequence parallelism)")
    per_step = plan.data_ranks * plan.micro_batch_seqs
    if plan.batch_seqs % per_step:
        raise ValueError(
            f"--compile: the batch ({plan.batch_seqs} sequences) must split into whole microbatches of "
            f"{plan.micro_batch_seqs} on each of the {plan.data_ranks} data-parallel ranks"
        )
    if plan.recompute not in ("none", "full"):
        raise ValueError(
            f"--compile: recompute must be none or full, got {plan.recompute!r} (the compiled step's fused softmax "
            "keeps its probabilities as a residual, so it cannot recompute the attention core alone)"
        )
    if plan.attention != "eager":
        raise ValueError(
            "--compile: builds eager attention (the S×S probabilities kept in BF16, the planner's "
            "attention='eager'); add --attention eager"
        )
    if plan.slices < 1 or plan.n_devices % plan.slices:
        raise ValueError(f"--slices: {plan.slices} slices must divide the mesh's {plan.n_devices} devices")
    memory.state_recipe(plan.state_recipe)
    return plan


def slice_topology(plan):
    """The topology name of one of the plan's slices: its own, else
    topology_for's for the chips of one slice."""
    return plan.topology or topology_for(plan.accelerator, plan.n_devices // plan.slices)


def topology_for(accelerator, n_devices):
    """The libtpu topology name of a slice of `n_devices` planner devices
    (chips) of `accelerator`: the most cube-like torus of powers of two (v5p
    and Ironwood 3D, sides ascending; v5e and v6e 2D up to 16x16). A
    ValueError for a count that is not a power of two or that no topology
    of the generation has."""
    acc = hardware.get(accelerator)
    prefix = TOPOLOGY_PREFIX.get(acc.name)
    if prefix is None:
        raise ValueError(f"--compile: compiles for TPU topologies only ({', '.join(TOPOLOGY_PREFIX)}), not {acc.name}")
    if n_devices < 1 or n_devices & (n_devices - 1):
        raise ValueError(f"--topology: {n_devices} chips of {acc.name} is not a power of two; name one with --topology")
    rank = TORUS_RANK[prefix]
    sides = [1] * rank
    k = 0
    while math.prod(sides) < n_devices:
        sides[k % rank] *= 2
        k += 1
    sides.sort()
    if rank == 2 and max(sides) > MAX_2D_SIDE:
        raise ValueError(f"--topology: {acc.name} slices stop at 16x16 (256 chips), got {n_devices} chips")
    if rank == 3 and sides[0] < 2:
        sides = [2, 2, 2] if n_devices <= 8 else sides
        if math.prod(sides) != n_devices:
            raise ValueError(
                f"--topology: the smallest {acc.name} slice here is 2x2x2 (8 chips), got {n_devices} chips; "
                "name one with --topology"
            )
    return f"{prefix}:" + "x".join(map(str, sides))


def topology_chips(name):
    """(prefix, chips) of a topology name such as v5p:4x4x4; a ValueError
    for one that does not read as PREFIX:AxB[xC] of a known generation."""
    match = re.fullmatch(r"([a-z0-9]+):(\d+(?:x\d+){1,2})", name or "")
    if not match or match.group(1) not in DEVICES_PER_CHIP:
        raise ValueError(f"--topology: {name!r} is not a topology name (v5e:16x16, v5p:4x4x4, v6e:16x16, tpu7x:4x4x4)")
    return match.group(1), math.prod(int(s) for s in match.group(2).split("x"))


def compiler_mesh(plan, topology):
    """{axis: degree} of the compiler's mesh, in MESH_AXES order: the plan's,
    with the data axis (fsdp, else dp) doubled where a chip shows two
    devices (Ironwood). A ValueError when it does not tile the devices of
    the plan's slices of `topology` exactly."""
    prefix, chips = topology_chips(topology)
    chips *= plan.slices
    expected = TOPOLOGY_PREFIX[hardware.get(plan.accelerator).name]
    if prefix != expected:
        raise ValueError(f"--topology: {topology} is not a {plan.accelerator} topology (those start {expected}:)")
    mesh = {a: plan.mesh.get(a, 1) for a in MESH_AXES}
    per_chip = DEVICES_PER_CHIP[prefix]
    if per_chip > 1:
        axis = "fsdp" if mesh["fsdp"] > 1 or mesh["dp"] == 1 else "dp"
        mesh[axis] *= per_chip
    if per_chip > 1 and plan.micro_batch_seqs % per_chip:
        raise ValueError(
            f"--micro-batch: a {topology.split(':')[0]} chip is {per_chip} devices, each taking a share of the "
            f"chip's microbatch; give a multiple of {per_chip}, got {plan.micro_batch_seqs}"
        )
    if math.prod(mesh.values()) != chips * per_chip:
        raise ValueError(
            f"--mesh: {plan.n_devices} devices do not tile {'' if plan.slices == 1 else f'{plan.slices} × '}{topology} "
            f"({chips} chips, {chips * per_chip} devices); "
            "the mesh must cover the topology's devices exactly"
        )
    return mesh


# --- reading the compiled program (standard library) ----------------------------------

_COMPUTATION = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*\(.*\)\s*->.*\{\s*$")
_CALLS = re.compile(r"\b(body|condition|to_apply|calls|true_computation|false_computation)=%?([\w.\-]+)")
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')


def computations(hlo_text):
    """{name: (is_entry, [lines])} of an HLO module's computations."""
    out, current = {}, None
    for line in hlo_text.splitlines():
        match = _COMPUTATION.match(line)
        if match:
            current = match.group(2)
            out[current] = (bool(match.group(1)), [line])
        elif current is not None:
            out[current][1].append(line)
            if line.strip() == "}":
                current = None
    return out


def _trip_count(line, comps):
    """The iterations of a while loop: its known_trip_count where XLA
    states it, else read from its condition, which the TPU compiler leaves
    as `counter < N` (or <= N) on a counter that starts at 0 and steps by
    1, as a scan and a windowed collective matmul count. A ValueError for
    any other condition."""
    found = _TRIP.search(line)
    if found:
        return int(found.group(1))
    cond = re.search(r"condition=%?([\w.\-]+)", line)
    lines = comps.get(cond.group(1), (False, []))[1] if cond else []
    constants = {}
    for text in lines:
        c = re.match(r"\s*%?([\w.\-]+)\s*=\s*[su]32\[\][^ ]*\s+constant\((\d+)\)", text)
        if c:
            constants[c.group(1)] = int(c.group(2))
    for text in lines:
        root = re.search(r"ROOT .*compare\(%?([\w.\-]+),\s*%?([\w.\-]+)\),\s*direction=(LT|LE)", text)
        if root and root.group(2) in constants:
            return constants[root.group(2)] + (1 if root.group(3) == "LE" else 0)
    raise ValueError(f"compile_plan: cannot tell how often a while loop runs: {line.strip()[:120]}")


def executions(hlo_text):
    """{computation: times it runs per call of the entry}: a while body (and
    its condition) runs its known trip count times each time the while
    does; other called computations as often as their caller. A while
    without a known trip count is an error."""
    comps = computations(hlo_text)
    callers = {}
    for name, (_, lines) in comps.items():
        for line in lines[1:]:
            trip = 1
            if " while(" in line:
                trip = _trip_count(line, comps)
            for kind, callee in _CALLS.findall(line):
                callers.setdefault(callee, []).append((name, trip if kind in ("body", "condition") else 1))
            for group in _BRANCHES.findall(line):
                for callee in group.split(","):
                    callers.setdefault(callee.strip().lstrip("%"), []).append((name, 1))
    runs = {}

    def count(name, seen=()):
        if name in runs:
            return runs[name]
        if comps.get(name, (False,))[0]:
            runs[name] = 1
            return 1
        if name in seen:
            raise ValueError(f"compile_plan: computation {name} calls itself")
        total = sum(count(c, (*seen, name)) * trip for c, trip in callers.get(name, ()))
        runs[name] = total
        return total

    for name in comps:
        count(name)
    return runs


def per_step(hlo_text):
    """The collectives of a compiled TPU program per training step, by kind:
    {kind: {"count", "full_buffer_bytes", "bytes_sent_per_device"}} where
    each collective (shardbook.hlo.inventory, one per asynchronous start)
    counts as many times as its computation runs (`executions`);
    full_buffer_bytes is the whole buffer (a gather's result, a
    reduce-scatter's operand, an all-reduce's, a permute's or an
    all-to-all's result: what the planner prices a collective by),
    bytes_sent the ring formula's bytes one device sends
    (inventory.ring_bytes)."""
    header = re.search(r"^HloModule[^\n]*", hlo_text, re.M)
    head = header.group(0) + "\n" if header else ""
    runs = executions(hlo_text)
    out = {}
    for name, (_, lines) in computations(hlo_text).items():
        n = runs.get(name, 0)
        if not n:
            continue
        for entry in inventory(head + "\n".join(lines)):
            row = out.setdefault(entry["kind"], {"count": 0, "full_buffer_bytes": 0, "bytes_sent_per_device": 0.0})
            dims = math.prod(entry["result_shape"]) if entry["result_shape"] else 1
            full = dims * _element_bytes(entry["dtype"])
            if entry["kind"] == "reduce_scatter":  # its operand, the whole buffer
                full *= entry["group_size"]
            row["count"] += n
            row["full_buffer_bytes"] += n * full
            row["bytes_sent_per_device"] += n * entry["bytes_sent_per_rank"]
    return dict(sorted(out.items()))


def _element_bytes(dtype):
    from ..units import BYTES_PER_ELEMENT

    return BYTES_PER_ELEMENT[dtype]


# --- building and compiling the step (JAX with libtpu) ------------------------------------


def check_libtpu():
    """A RuntimeError (one line) unless this Python can import libtpu."""
    import importlib.util
    import sys

    if importlib.util.find_spec("libtpu") is None:
        raise RuntimeError(f"--compile: libtpu is not installed in this Python ({sys.executable}); {INSTALL_HINT}")


def _dtypes(recipe):
    import jax.numpy as jnp

    r = memory.state_recipe(recipe)
    pick = {2: jnp.bfloat16, 4: jnp.float32}
    weights = pick[r.weight_bytes]
    master = pick[r.master_bytes] if r.master_bytes else None
    moment = pick[r.optimizer_bytes // 2]
    grad = pick[r.gradient_bytes]
    return weights, master, moment, grad


def _shapes(m):
    d, f, hd, n_l = m.d_model, m.d_ff, m.head_dim, m.n_layers
    layers = {
        "attn_norm": (n_l, d),
        "wq": (n_l, d, m.n_heads * hd),
        "wk": (n_l, d, m.n_kv_heads * hd),
        "wv": (n_l, d, m.n_kv_heads * hd),
        "wo": (n_l, m.n_heads * hd, d),
        "mlp_norm": (n_l, d),
    }
    if m.is_moe:
        e = m.n_experts
        layers.update(router=(n_l, d, e), e_gate=(n_l, e, d, f), e_up=(n_l, e, d, f), e_down=(n_l, e, f, d))
    else:
        layers.update(w_gate=(n_l, d, f), w_up=(n_l, d, f), w_down=(n_l, f, d))
    return {"embed": (m.vocab_size, d), "layers": layers, "final_norm": (d,), "unembed": (d, m.vocab_size)}


# PartitionSpec of each weight (the stacked layer dimension leads and is never split)
_SPECS = {
    "embed": ("tp", "fsdp"),
    "unembed": ("fsdp", "tp"),
    "final_norm": (None,),
    "attn_norm": (None, None),
    "mlp_norm": (None, None),
    "wq": (None, "fsdp", "tp"),
    "wk": (None, "fsdp", "tp"),
    "wv": (None, "fsdp", "tp"),
    "wo": (None, "tp", "fsdp"),
    "w_gate": (None, "fsdp", "tp"),
    "w_up": (None, "fsdp", "tp"),
    "w_down": (None, "tp", "fsdp"),
    "router": (None, "fsdp", None),
    "e_gate": (None, None, "fsdp", "tp"),
    "e_up": (None, None, "fsdp", "tp"),
    "e_down": (None, None, "tp", "fsdp"),
}
# the same weight as one layer's compute gathers it (fsdp dropped, tp kept)
GATHERED = "gathered_weight"
SEQ_GATHERED = "sequence_gathered"
SCORES = "attention_scores"


def _policy(recompute):
    import jax

    cp = jax.checkpoint_policies
    if recompute == "full":
        return cp.nothing_saveable
    dropped = (GATHERED, SEQ_GATHERED, SCORES) if recompute == "selective" else (GATHERED, SEQ_GATHERED)

    # save_anything_except_these_names alone still saves the sharding constraint's output that a
    # name marks (the gathered weight, the gathered block input); refusing constraint outputs
    # makes the backward gather again from the sharded value, as the planner counts it
    def policy(prim, *_, **params):
        if prim.name == "name":
            return params.get("name") not in dropped
        return prim.name != "sharding_constraint"

    return policy


class _Program:
    """The pieces of the plan's step on a jax.sharding.Mesh over dp, fsdp
    and tp: sharding constraints, the layer, the loss and the update."""

    def __init__(self, plan, mesh):
        import jax.numpy as jnp

        self.plan, self.mesh, self.m = plan, mesh, models.get(plan.model)
        self.wdt, self.master_dt, self.moment_dt, self.grad_dt = _dtypes(plan.state_recipe)
        self.bf16, self.f32 = jnp.bfloat16, jnp.float32
        self.tp = mesh.shape["tp"]
        self.data = ("dp", "fsdp")
        self.residual = (self.data, "tp", None)  # the residual stream, split along the sequence over tp (SP)
        self.softmax = _fused_softmax()

    def sharding(self, spec):
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        return NamedSharding(self.mesh, P(*spec))

    def constrain(self, x, *spec):
        import jax

        return jax.lax.with_sharding_constraint(x, self.sharding(spec))

    def gather(self, w, key):
        """One layer's weight as its compute gathers it (fsdp dropped, tp kept)."""
        from jax.ad_checkpoint import checkpoint_name

        spec = tuple(None if a == "fsdp" else a for a in _SPECS[key][1:])
        return checkpoint_name(self.constrain(w.astype(self.bf16), *spec), GATHERED)

    def rms(self, x, w):
        import jax
        import jax.numpy as jnp

        x32 = x.astype(self.f32)
        y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + 1e-6)
        return (y * w.astype(self.f32)).astype(self.bf16)

    def rotary(self, x):
        import jax.numpy as jnp

        f32, half = self.f32, x.shape[-1] // 2
        freqs = 500_000.0 ** (-jnp.arange(half, dtype=f32) / half)
        ang = jnp.arange(x.shape[1], dtype=f32)[:, None] * freqs[None, :]
        cos, sin = jnp.cos(ang)[None, :, None, :], jnp.sin(ang)[None, :, None, :]
        x1, x2 = x[..., :half].astype(f32), x[..., half:].astype(f32)
        return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1).astype(self.bf16)

    def block_input(self, x):
        """Sequence parallelism: the norm's output gathered along the sequence."""
        from jax.ad_checkpoint import checkpoint_name

        return checkpoint_name(self.constrain(x, self.data, None, None), SEQ_GATHERED) if self.tp > 1 else x

    def attention(self, layer, h):
        import jax.numpy as jnp
        from jax.ad_checkpoint import checkpoint_name

        m, b, s, bf16 = self.m, h.shape[0], self.plan.seq_len, self.bf16
        hd, groups = m.head_dim, m.n_heads // m.n_kv_heads
        q = (h @ self.gather(layer["wq"], "wq")).reshape(b, s, m.n_heads, hd)
        k = (h @ self.gather(layer["wk"], "wk")).reshape(b, s, m.n_kv_heads, hd)
        v = (h @ self.gather(layer["wv"], "wv")).reshape(b, s, m.n_kv_heads, hd)
        q = self.rotary(q).reshape(b, s, m.n_kv_heads, groups, hd)
        k = self.rotary(k)
        scores = jnp.einsum("bqngd,bknd->bngqk", q, k, preferred_element_type=bf16) * jnp.asarray(hd**-0.5, bf16)
        scores = checkpoint_name(self.constrain(scores, self.data, "tp", None, None, None), SCORES)
        out = jnp.einsum("bngqk,bknd->bqngd", self.softmax(scores), v, preferred_element_type=bf16)
        return out.reshape(b, s, m.n_heads * hd) @ self.gather(layer["wo"], "wo")

    def dense_mlp(self, layer, h):
        import jax

        gate = h @ self.gather(layer["w_gate"], "w_gate")
        up = h @ self.gather(layer["w_up"], "w_up")
        return (jax.nn.silu(gate) * up) @ self.gather(layer["w_down"], "w_down")

    def moe_mlp(self, layer, h):
        """Top-k routed SwiGLU experts with a per-sequence capacity (1.25),
        dispatched and combined by einsums (shardbook.programs.model.route)."""
        import jax
        import jax.numpy as jnp

        m, f32, bf16 = self.m, self.f32, self.bf16
        b, s, e, k = h.shape[0], self.plan.seq_len, m.n_experts, m.top_k
        cap = math.ceil(1.25 * k * s / e)
        logits = (h @ self.gather(layer["router"], "router")).astype(f32)
        gates, experts = jax.lax.top_k(jax.nn.softmax(logits, axis=-1), k)
        gates = gates / jnp.sum(gates, axis=-1, keepdims=True)
        chosen = jax.nn.one_hot(experts, e, dtype=f32)
        order = jnp.swapaxes(chosen, 1, 2).reshape(b, k * s, e)
        position = (jnp.cumsum(order, axis=1) - 1) * order
        position = jnp.swapaxes(position.reshape(b, k, s, e), 1, 2).sum(axis=-1)
        kept = (position < cap).astype(f32)
        slot = jax.nn.one_hot(position.astype(jnp.int32), cap, dtype=f32)
        dispatch = jnp.einsum("bske,bskc,bsk->bsec", chosen, slot, kept).astype(bf16)
        combine = jnp.einsum("bske,bskc,bsk->bsec", chosen, slot, kept * gates).astype(bf16)
        slots = jnp.einsum("bsec,bsd->becd", dispatch, h)
        gate = jnp.einsum("becd,edf->becf", slots, self.gather(layer["e_gate"], "e_gate"))
        up = jnp.einsum("becd,edf->becf", slots, self.gather(layer["e_up"], "e_up"))
        out = jnp.einsum("becf,efd->becd", jax.nn.silu(gate) * up, self.gather(layer["e_down"], "e_down"))
        return jnp.einsum("bsec,becd->bsd", combine, out)

    def layer(self, x, layer):
        h = self.block_input(self.rms(x, layer["attn_norm"]))
        x = self.constrain(x + self.attention(layer, h), *self.residual)
        h = self.block_input(self.rms(x, layer["mlp_norm"]))
        mlp = self.moe_mlp(layer, h) if self.m.is_moe else self.dense_mlp(layer, h)
        return self.constrain(x + mlp, *self.residual), None

    def loss(self, weights, batch):
        import jax
        import jax.numpy as jnp

        bf16, f32 = self.bf16, self.f32
        tokens, targets = (self.constrain(t, self.data, None) for t in batch)
        x = self.constrain(jnp.take(weights["embed"].astype(bf16), tokens, axis=0), *self.residual)
        body = jax.checkpoint(self.layer, policy=_policy(self.plan.recompute), prevent_cse=False)
        x, _ = jax.lax.scan(body, x, weights["layers"])
        h = self.rms(x, weights["final_norm"])
        h = self.constrain(h, self.data, None, None) if self.tp > 1 else h
        logits = self.constrain(h @ weights["unembed"].astype(bf16), self.data, None, "tp")
        lse = jax.nn.logsumexp(logits.astype(f32), axis=-1)
        picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0].astype(f32)
        return jnp.mean(lse - picked)

    def gradients(self, weights, tokens, targets):
        """(mean loss, gradients summed over the microbatches in the
        recipe's gradient dtype): one value_and_grad, or a scan over the
        microbatches with the accumulator as its carry."""
        import jax
        import jax.numpy as jnp

        n_micro, s = self.plan.n_microbatches, self.plan.seq_len
        micro_global = self.plan.batch_seqs // n_micro
        # each device's sequences split over the microbatches (every microbatch on every device)
        tokens = jnp.swapaxes(tokens.reshape(micro_global, n_micro, s), 0, 1)
        targets = jnp.swapaxes(targets.reshape(micro_global, n_micro, s), 0, 1)
        grad_fn = jax.value_and_grad(self.loss)
        cast = jax.tree_util.tree_map
        if n_micro == 1:
            loss, grads = grad_fn(weights, (tokens[0], targets[0]))
            return loss, cast(lambda g: g.astype(self.grad_dt), grads)

        def accumulate(carry, batch):
            acc, total = carry
            loss, grads = grad_fn(weights, batch)
            return (cast(lambda a, g: a + g.astype(self.grad_dt), acc, grads), total + loss), None

        zeros = cast(
            lambda w, key: self.constrain(jnp.zeros(w.shape, self.grad_dt), *_SPECS[key]), weights, _keys(weights)
        )
        (grads, loss), _ = jax.lax.scan(accumulate, (zeros, jnp.zeros((), self.f32)), (tokens, targets))
        return loss / n_micro, grads

    def update(self, w, mst, m1, m2, g, clip):
        """AdamW on one weight (FP32 math) from its master copy, or from the
        weight itself where the recipe keeps none."""
        import jax.numpy as jnp

        f32, lr, b1, b2, wd = self.f32, 3e-4, 0.9, 0.95, 0.1
        g = g.astype(f32) * clip
        m1 = b1 * m1.astype(f32) + (1 - b1) * g
        m2 = b2 * m2.astype(f32) + (1 - b2) * g * g
        base = (mst if mst is not None else w).astype(f32)
        new = base - lr * (m1 / (jnp.sqrt(m2) + 1e-8) + wd * base)
        return (
            new.astype(w.dtype),
            None if mst is None else new.astype(mst.dtype),
            m1.astype(self.moment_dt),
            m2.astype(self.moment_dt),
        )

    def step(self, weights, master, mu, nu, tokens, targets):
        """One training step: gradients, global-norm clipping, AdamW."""
        import jax
        import jax.numpy as jnp

        loss, grads = self.gradients(weights, tokens, targets)
        leaves = jax.tree_util.tree_leaves
        norm = jnp.sqrt(sum(jnp.sum(jnp.square(g.astype(self.f32))) for g in leaves(grads)))
        n_micro = self.plan.n_microbatches
        clip = jnp.minimum(1.0, 1.0 / (norm / n_micro + 1e-6)) / n_micro
        flat, treedef = jax.tree_util.tree_flatten(weights)
        masters = leaves(master) if master is not None else [None] * len(flat)
        out = [self.update(*a, clip) for a in zip(flat, masters, leaves(mu), leaves(nu), leaves(grads), strict=True)]
        new = [jax.tree_util.tree_unflatten(treedef, [o[i] for o in out]) for i in range(4)]
        return new[0], (new[1] if master is not None else None), new[2], new[3], loss

    def abstract_args(self):
        """ShapeDtypeStructs of the step's arguments, sharded: weights,
        master copy (or None), the two moments, tokens and targets."""
        import jax
        import jax.numpy as jnp

        shapes = _shapes(self.m)

        def tree(dtype):
            def leaf(key, shape):
                return jax.ShapeDtypeStruct(shape, dtype, sharding=self.sharding(_SPECS[key]))

            return {
                "embed": leaf("embed", shapes["embed"]),
                "layers": {k: leaf(k, v) for k, v in shapes["layers"].items()},
                "final_norm": leaf("final_norm", shapes["final_norm"]),
                "unembed": leaf("unembed", shapes["unembed"]),
            }

        tokens = jax.ShapeDtypeStruct(
            (self.plan.batch_seqs, self.plan.seq_len), jnp.int32, sharding=self.sharding((self.data, None))
        )
        master = tree(self.master_dt) if self.master_dt is not None else None
        return tree(self.wdt), master, tree(self.moment_dt), tree(self.moment_dt), tokens, tokens


def _keys(weights):
    """The weights' tree with each leaf replaced by its _SPECS key."""
    return {
        "embed": "embed",
        "layers": {k: k for k in weights["layers"]},
        "final_norm": "final_norm",
        "unembed": "unembed",
    }


def _fused_softmax():
    """Megatron's fused scaled-masked softmax as a custom_vjp: BF16 scores
    in, FP32 math inside, BF16 probabilities out and kept for the backward
    (2 bytes a score, the planner's eager term)."""
    import jax
    import jax.numpy as jnp

    @jax.custom_vjp
    def softmax(scores):
        return forward(scores)[0]

    def forward(scores):
        causal = jnp.tril(jnp.ones(scores.shape[-2:], dtype=bool))
        x = jnp.where(causal, scores.astype(jnp.float32), -jnp.inf)
        probs = jax.nn.softmax(x, axis=-1).astype(jnp.bfloat16)
        return probs, probs

    def backward(probs, g):
        p, g = probs.astype(jnp.float32), g.astype(jnp.float32)
        return ((p * (g - jnp.sum(p * g, axis=-1, keepdims=True))).astype(jnp.bfloat16),)

    softmax.defvjp(forward, backward)
    return softmax


def build_step(plan, mesh):
    """(jitted step, abstract arguments) of the plan's training step on
    `mesh` (a jax.sharding.Mesh over dp, fsdp, tp); the weights, master
    copy and moments are donated."""
    import jax

    program = _Program(plan, mesh)
    return jax.jit(program.step, donate_argnums=(0, 1, 2, 3)), program.abstract_args()


def compile_plan(plan):
    """Compile `plan` (a Plan) for its topology; a dict with the topology,
    the compiler's mesh, memory_analysis() (bytes per compiler device),
    the per-chip memory, the collectives per step (`per_step`) and the
    versions. ValueError (one line) for a plan or topology refused;
    RuntimeError without libtpu."""
    import importlib.metadata
    import time

    check_plan(plan)
    topology = slice_topology(plan)
    mesh_axes = compiler_mesh(plan, topology)
    check_libtpu()
    for key, value in TPU_ENV.items():
        os.environ.setdefault(key, value)
    import jax
    from jax.experimental import topologies
    from jax.sharding import Mesh

    slices = {"num_slices": plan.slices} if plan.slices > 1 else {}
    try:
        topo = topologies.get_topology_desc(platform="tpu", topology_name=topology, **slices)
    except Exception as exc:  # libtpu's own words, first line
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ValueError(f"--topology: libtpu cannot describe {topology!r} ({first[:160]})") from None
    import numpy as np

    # slice-major, so that the first axis above 1 crosses the slices (DCN) in its outermost factor
    ordered = sorted(topo.devices, key=lambda d: getattr(d, "slice_index", 0) or 0)
    devices = np.array(ordered).reshape(tuple(mesh_axes[a] for a in MESH_AXES))
    mesh = Mesh(devices, MESH_AXES)
    start = time.monotonic()
    jitted, args = build_step(plan, mesh)
    try:
        compiled = jitted.lower(*args).compile()
    except Exception as exc:  # JaxRuntimeError: RESOURCE_EXHAUSTED when the plan does not fit
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if "RESOURCE_EXHAUSTED" not in first:
            raise
        raise ValueError(f"--compile: the TPU compiler refuses the plan on {topology}: {first[:300]}") from None
    seconds = time.monotonic() - start
    stats = compiled.memory_analysis()
    memory_stats = {
        k: int(getattr(stats, k))
        for k in (
            "argument_size_in_bytes",
            "output_size_in_bytes",
            "alias_size_in_bytes",
            "temp_size_in_bytes",
            "generated_code_size_in_bytes",
            "peak_memory_in_bytes",
        )
    }
    text = compiled.as_text()
    if os.environ.get("SHARDBOOK_COMPILE_TEXT"):
        with open(os.environ["SHARDBOOK_COMPILE_TEXT"], "w") as f:
            f.write(text)
    per_chip = DEVICES_PER_CHIP[topology.split(":")[0]]
    return {
        "plan": plan_dict(plan),
        "topology": topology if plan.slices == 1 else f"{plan.slices} × {topology}",
        "device_kind": topo.devices[0].device_kind,
        "compiler_devices": len(topo.devices),
        "compiler_mesh": mesh_axes,
        "devices_per_chip": per_chip,
        "memory_analysis": memory_stats,
        "collectives": per_step(text),
        "compile_s": seconds,
        "jax_version": jax.__version__,
        "libtpu_version": importlib.metadata.version("libtpu"),
    }


def plan_dict(plan):
    """The plan as JSON-ready data (slices only where there are several)."""
    out = asdict(plan)
    out.pop("extra")
    if out["slices"] == 1:
        out.pop("slices")
    return out


def plan_from_dict(data):
    """The Plan a plan_dict() (or a committed entry's "plan") describes."""
    return Plan(**{**data, "mesh": dict(data["mesh"])})


def memory_totals(result):
    """Per planner device (chip) bytes from a compile_plan result:
    'arguments', 'temporaries', 'memory_analysis' (arguments + outputs −
    aliased + temporaries) and 'peak' (peak_memory_in_bytes: the most
    memory live at one point of the compiled schedule), each the compiler
    device's times the devices on a chip."""
    mem, k = result["memory_analysis"], result["devices_per_chip"]
    total = mem["argument_size_in_bytes"] + mem["output_size_in_bytes"] - mem["alias_size_in_bytes"]
    return {
        "arguments": k * mem["argument_size_in_bytes"],
        "temporaries": k * mem["temp_size_in_bytes"],
        "memory_analysis": k * (total + mem["temp_size_in_bytes"]),
        "peak": k * mem["peak_memory_in_bytes"],
    }


def main_json(plan):
    """compile_plan's result as one JSON line (the worker's output)."""
    return json.dumps(compile_plan(plan), sort_keys=True)


# --- the validation set ----------------------------------------------------------------------
# Plans compiled by `make tpu-artifacts` into VALIDATION_FILE: three models, the four TPU
# generations, FSDP, FSDP x TP and DP x TP, each recompute policy, with and without gradient
# accumulation. Each fits its HBM (libtpu refuses a program that does not).
VALIDATION = (
    Plan("LLaMA-3 8B", "TPU v5p", {"fsdp": 64}, 4096, 128, 2, "full"),
    Plan("LLaMA-3 8B", "TPU v5p", {"fsdp": 64}, 4096, 64, 1, "none"),
    Plan("LLaMA-3 8B", "TPU v5p", {"fsdp": 16, "tp": 4}, 8192, 32, 1, "full"),
    Plan("LLaMA-3 8B", "TPU v5p", {"dp": 16, "tp": 4}, 4096, 32, 2, "full"),
    Plan("LLaMA-3 8B", "TPU v5p", {"dp": 16, "tp": 4}, 4096, 16, 1, "none"),
    Plan("LLaMA-3 70B", "TPU v5p", {"fsdp": 16, "tp": 4}, 4096, 64, 1, "full"),
    Plan("LLaMA-3 8B", "TPU v5e", {"fsdp": 256}, 4096, 256, 1, "full"),
    Plan("LLaMA-3 8B", "TPU v5e", {"fsdp": 64}, 4096, 64, 1, "full"),
    Plan("LLaMA-3 70B", "TPU v6e", {"fsdp": 32, "tp": 8}, 4096, 32, 1, "full"),
    Plan("LLaMA-3 8B", "TPU v6e", {"fsdp": 8, "tp": 4}, 2048, 16, 1, "none"),
    Plan("LLaMA-3 8B", "Ironwood", {"dp": 16, "tp": 4}, 4096, 32, 2, "none"),
    Plan("LLaMA-3 70B", "Ironwood", {"fsdp": 64}, 4096, 128, 2, "full"),
    Plan("LLaMA-3 70B", "Ironwood", {"fsdp": 16, "tp": 4}, 4096, 32, 2, "full"),
    Plan("Mixtral 8x7B", "TPU v5p", {"fsdp": 64}, 4096, 64, 1, "full"),
    Plan("Mixtral 8x7B", "TPU v6e", {"fsdp": 64, "tp": 4}, 4096, 64, 1, "full"),
    Plan("Mixtral 8x7B", "Ironwood", {"fsdp": 8}, 4096, 64, 2, "full"),
)
VALIDATION_FILE = "code/shardbook/data/compiled_plans.json"
VALIDATION_COMMAND = "make tpu-artifacts (python -m shardbook.hlo compile-plans --out " + VALIDATION_FILE + ")"


VALIDATION_ABOUT = (
    "The TPU compiler's per-device memory (memory_analysis) and collectives per step for the "
    "planner's validation plans, compiled ahead of time on a CPU host (not run on a TPU)"
)


def write_validation(
    out_path, plans=VALIDATION, log=print, workers=2, about=VALIDATION_ABOUT, command=VALIDATION_COMMAND, names=None
):
    """Compile every plan of `plans` (in `workers` processes of this
    Python, started afresh) and write their results to `out_path` (JSON,
    through a temporary file renamed into place): the provenance (jax and
    libtpu versions, the command) and one entry a plan, in the order of
    `plans` (with its name from `names` where given), without the compile times (so that a recompile on the same
    versions is byte identical); the times go to `log`."""
    import multiprocessing
    import tempfile
    import time
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from pathlib import Path

    check_libtpu()
    for plan in plans:  # refused plans are refused before anything compiles
        check_plan(plan)
        compiler_mesh(plan, slice_topology(plan))
    start = time.monotonic()
    results = [None] * len(plans)
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(compile_plan, plan): i for i, plan in enumerate(plans)}
        failed = []
        for done, future in enumerate(as_completed(futures), 1):
            i = futures[future]
            try:
                results[i] = future.result()
            except ValueError as exc:  # a plan the compiler refuses: the others still compile
                failed.append(f"{label(plans[i])}: {exc}")
                log(f"[{done}/{len(plans)}] {label(plans[i])}: refused ({exc})")
                continue
            took = results[i].pop("compile_s")
            log(f"[{done}/{len(plans)}] {label(plans[i])} on {results[i]['topology']}: {took:.0f} s")
    if failed:
        kept = Path(str(out_path) + ".partial.json")
        kept.write_text(json.dumps([r for r in results if r is not None], indent=1, sort_keys=True) + "\n")
        raise ValueError(
            f"compile_plan: {len(failed)} plan(s) refused, {out_path} left as it was (the others in {kept}): "
            + "; ".join(failed)
        )
    rows = results
    versions = {(r["jax_version"], r["libtpu_version"]) for r in rows}
    if len(versions) != 1:
        raise RuntimeError(f"compile_plan: the plans were compiled by several versions: {sorted(versions)}")
    jax_version, libtpu_version = versions.pop()
    for i, r in enumerate(rows):
        del r["jax_version"], r["libtpu_version"]
        if names is not None:
            r["name"] = names[i]
    data = {
        "about": about,
        "jax_version": jax_version,
        "libtpu_version": libtpu_version,
        "environment": dict(TPU_ENV),
        "command": command,
        "plans": rows,
    }
    out_path = Path(out_path)
    fd, tmp = tempfile.mkstemp(prefix=".compiled-", dir=out_path.parent)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, out_path)
    log(f"compiled {len(rows)} plans into {out_path} in {time.monotonic() - start:.0f} s")
    return data


def label(plan):
    """A plan in a few words: model, mesh, recompute, sequence length."""
    mesh = " × ".join(f"{k} {v}" for k, v in plan.mesh.items() if v > 1)
    return f"{plan.model}, {mesh}, {plan.recompute}, s{plan.seq_len}"


# --- the planner's side (standard library and the cost model) ------------------------------


def planner_side(plan):
    """The planner's numbers for `plan`, as the compiler's are kept: its
    per-device memory breakdown (bytes; the reserve and headroom left out),
    their sum, and the full-buffer bytes of each axis's collectives per step
    (planner.explain), with the program's options: eager attention,
    sequence parallelism, no ZeRO beyond the fsdp axis, no reserve."""
    from ..planner.explain import explain

    cand, axes, _, _ = explain(
        plan.model,
        plan.accelerator,
        dict(plan.mesh),
        plan.batch_seqs * plan.seq_len,
        seq_len=plan.seq_len,
        micro_batch_seqs=plan.micro_batch_seqs,
        recompute=plan.recompute,
        attention=plan.attention,
        state_recipe=plan.state_recipe,
        reserve_bytes=0.0,
    )
    breakdown = {k: v for k, v in cand.memory_breakdown.items() if k not in ("reserve", "headroom")}
    return {
        "memory_breakdown": breakdown,
        "memory_bytes": sum(breakdown.values()),
        "collective_bytes": {row["axis"]: row["bytes"] for row in axes},
        "collective_kinds": {row["axis"]: row["kinds"] for row in axes},
        "collective_ring_bytes": {row["axis"]: row["ring_bytes"] for row in axes},
    }


def compiler_collective_bytes(result):
    """The compiler's full-buffer bytes of collectives per step on one
    device (all kinds), per planner device (chip: its devices' sum)."""
    return result["devices_per_chip"] * sum(row["full_buffer_bytes"] for row in result["collectives"].values())


def compiler_ring_bytes(result):
    """The bytes one planner device (chip: its devices' sum) sends in the
    compiler's collectives per step, each priced as a ring of its group
    (inventory.ring_bytes: an all-reduce 2(n-1)/n of its buffer, a gather
    or a reduce-scatter (n-1)/n)."""
    return result["devices_per_chip"] * sum(row["bytes_sent_per_device"] for row in result["collectives"].values())


def comparison(result):
    """One row comparing a compile_plan result (or a committed entry) with
    the planner: the plan's label, topology, the compiler's peak and
    memory_analysis per chip, the planner's memory, their ratios, and the
    collective bytes of both."""
    plan = plan_from_dict(result["plan"])
    totals = memory_totals(result)
    planner = planner_side(plan)
    comp_bytes = compiler_collective_bytes(result)
    plan_bytes = sum(planner["collective_bytes"].values())
    comp_ring, plan_ring = compiler_ring_bytes(result), sum(planner["collective_ring_bytes"].values())
    return {
        "label": f"{plan.accelerator}: {label(plan)}",
        "plan": plan,
        "topology": result["topology"],
        "compiler_peak_bytes": totals["peak"],
        "compiler_memory_analysis_bytes": totals["memory_analysis"],
        "compiler_argument_bytes": totals["arguments"],
        "planner_bytes": planner["memory_bytes"],
        "planner_breakdown": planner["memory_breakdown"],
        "peak_ratio": totals["peak"] / planner["memory_bytes"],
        "memory_analysis_ratio": totals["memory_analysis"] / planner["memory_bytes"],
        "compiler_collective_bytes": comp_bytes,
        "planner_collective_bytes": plan_bytes,
        "planner_collective_axes": planner["collective_bytes"],
        "collective_ratio": comp_bytes / plan_bytes if plan_bytes else float("nan"),
        "planner_collective_kinds": planner["collective_kinds"],
        "compiler_ring_bytes": comp_ring,
        "planner_ring_bytes": plan_ring,
        "ring_ratio": comp_ring / plan_ring if plan_ring else float("nan"),
    }


def format_comparison(result):
    """The compiler's memory and collectives beside the planner's, as
    plain-text lines (what `--compile` prints)."""
    row = comparison(result)
    mem = result["memory_analysis"]
    k = result["devices_per_chip"]
    chip = f" (a chip is {k} devices: bytes are the two devices' sum)" if k > 1 else ""
    gb = 1e9
    lines = [
        f"The TPU compiler (libtpu {result.get('libtpu_version', '?')}, {result['topology']}, "
        f"{result['compiler_devices']} devices, mesh "
        + " × ".join(f"{a} {d}" for a, d in result["compiler_mesh"].items() if d > 1)
        + f"){chip}, per planner device:",
        f"  arguments {k * mem['argument_size_in_bytes'] / gb:,.2f} GB, outputs {k * mem['output_size_in_bytes'] / gb:,.2f} "
        f"GB ({k * mem['alias_size_in_bytes'] / gb:,.2f} aliased to the arguments), temporaries "
        f"{k * mem['temp_size_in_bytes'] / gb:,.2f} GB",
        f"  memory_analysis (arguments + outputs - aliased + temporaries) {row['compiler_memory_analysis_bytes'] / gb:,.2f} GB; "
        f"the compiler's peak (the most live at once): {row['compiler_peak_bytes'] / gb:,.2f} GB",
        f"  planner (attention {row['plan'].attention}, no reserve): {row['planner_bytes'] / gb:,.2f} GB = "
        + ", ".join(f"{key} {v / gb:,.2f}" for key, v in row["planner_breakdown"].items() if v),
        f"  compiler / planner: {row['peak_ratio']:.2f} (peak), {row['memory_analysis_ratio']:.2f} (memory_analysis)",
        "  collectives per step (full buffers; a loop's collectives counted each time it runs):",
    ]
    for kind, c in result["collectives"].items():
        lines.append(
            f"    {kind:<20} ×{k * c['count']:<6,} {k * c['full_buffer_bytes'] / gb:,.1f} GB "
            f"(ring: {k * c['bytes_sent_per_device'] / gb:,.1f} GB sent a chip)"
        )
    planner_axes = ", ".join(f"{a} {v / gb:,.1f} GB" for a, v in row["planner_collective_axes"].items()) or "none"
    lines.append(
        f"  compiler {row['compiler_collective_bytes'] / gb:,.1f} GB against the planner's {planner_axes} "
        f"({row['collective_ratio']:.2f}×); sent by a chip in rings: compiler {row['compiler_ring_bytes'] / gb:,.1f} GB, "
        f"planner {row['planner_ring_bytes'] / gb:,.1f} GB ({row['ring_ratio']:.2f}×)"
    )
    return "\n".join(lines)


def load_validation(path=None):
    """The committed compiler results of the validation plans
    (VALIDATION_FILE under the repository; `path` another file): a dict
    with the provenance and "plans"; a one-line ValueError naming the file
    and how to make it when it is missing or unreadable."""
    from .. import REPOSITORY_ROOT, _validate

    path = REPOSITORY_ROOT / VALIDATION_FILE if path is None else path
    remedy = f"restore it from git or recompile it: {INSTALL_HINT}, then `make tpu-artifacts`"
    return _validate.read_json(path, missing=remedy, remedy=remedy)


def validation_rows(data=None):
    """comparison() of every committed plan, in the file's order."""
    data = load_validation() if data is None else data
    return [comparison(result) for result in data["plans"]]


def ratio_summary(rows, key):
    """(median, worst, label of the worst) of the rows' `key` ratio; the
    worst is the one farthest from 1 either way (by its logarithm)."""
    import statistics

    ratios = [r[key] for r in rows]
    worst = max(rows, key=lambda r: abs(math.log(r[key])))
    return statistics.median(ratios), worst[key], worst["label"]
