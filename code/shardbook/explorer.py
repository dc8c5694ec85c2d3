"""The mesh explorer: enumerate, filter and rank meshes with the cost model.

For a model preset, an accelerator preset, a device count and a global batch
in tokens, every factorization N = fsdp · tp · ep · pp is considered. Meshes
whose persistent state does not fit in HBM are dropped; the rest are ranked by
an estimated step time. Standard library only; compiling candidates is in
shardbook.hlo.explore.

Assumptions (stated on every result):
- math: 6 · active parameters · tokens / (N · C), at peak FLOP/s;
- FSDP gathers and gradient reductions overlap perfectly with math (only the
  excess over math is exposed); TP all-reduces and EP all-to-alls sit on the
  critical path; PP adds its bubble with 4·pp microbatches;
- each axis's collectives are priced by the fabric (shardbook.fabric): a
  group no larger than the scale-up domain as if it sat inside one (every
  peer link of a full mesh, a GPU's egress behind a switch, one wrapped
  torus axis); a larger group over whole domains through its members'
  NICs or DCN shares, phases perfectly pipelined;
- persistent state only: BF16 weights and gradients, 12 bytes of optimizer
  state per parameter; activations are not counted.
"""

from dataclasses import dataclass

from . import _validate, fabric, hardware, memory, models, pipeline

ASSUMPTIONS = __doc__.split("Assumptions (stated on every result):")[1].strip()


@dataclass(frozen=True)
class Candidate:
    fsdp: int
    tp: int
    ep: int
    pp: int
    state_bytes_per_device: float
    fits: bool
    math_s: float
    fsdp_s: float
    tp_s: float
    ep_s: float
    bubble_s: float
    step_s: float

    @property
    def mesh(self):
        return {"fsdp": self.fsdp, "tp": self.tp, "ep": self.ep, "pp": self.pp}

    @property
    def label(self):
        return " × ".join(f"{k} {v}" for k, v in self.mesh.items() if v > 1) or "1 device"


def factorizations(n_devices, model):
    """(fsdp, tp, ep, pp) with product n_devices that the model can use: tp
    divides the KV heads and F, ep divides E, pp divides L."""
    _validate.count("n_devices", n_devices)
    m = models.get(model)
    divisors = [d for d in range(1, n_devices + 1) if n_devices % d == 0]
    out = []
    for tp in divisors:
        for ep in divisors:
            for pp in divisors:
                if n_devices % (tp * ep * pp):
                    continue
                fsdp = n_devices // (tp * ep * pp)
                if m.n_kv_heads % tp or m.d_ff % tp or m.n_experts % ep or m.n_layers % pp:
                    continue
                out.append((fsdp, tp, ep, pp))
    return out


def _collective_s(acc, kind, total_bytes, group):
    """A collective over one mesh axis's group, priced by the fabric: inside
    one scale-up domain when it fits, otherwise over whole domains (or one
    device per domain when the group does not divide into them)."""
    if group <= 1:
        return 0.0
    domain = int(acc.scale_up_domain_size)
    if group <= domain:
        return fabric.collective_s(kind, total_bytes, acc, group)
    n_domains = group // domain if group % domain == 0 else group
    return fabric.collective_s(kind, total_bytes, acc, group, n_domains)


def evaluate(model, accelerator, mesh, global_tokens):
    """One Candidate for mesh (fsdp, tp, ep, pp) under the stated assumptions."""
    m, acc = models.get(model), hardware.get(accelerator)
    fsdp, tp, ep, pp = mesh
    n = fsdp * tp * ep * pp
    _validate.positive("global_tokens", global_tokens)
    total, active = models.param_count(m), models.active_param_count(m)
    # every routed expert's three matrices; the rest (attention, shared experts, router) is dense
    expert_params = 3 * m.d_model * m.d_ff * m.n_experts * (m.n_layers - m.n_dense_layers) if m.is_moe else 0
    dense_params = total - expert_params
    per_device_params = dense_params / (fsdp * tp * pp) + expert_params / (fsdp * tp * ep * pp)
    state = memory.state_bytes_per_device(per_device_params, "dp", 1)
    math_s = 6 * active * global_tokens / (n * acc.bf16_dense_flops_per_s)
    # FSDP: gather forward and backward, reduce-scatter gradients (3 rings)
    fsdp_s = 3 * _collective_s(acc, "all_gather", 2 * per_device_params * fsdp, fsdp)
    # TP: 2 all-reduces per layer forward and 2 backward, of this replica's tokens
    tokens_per_replica = global_tokens / (fsdp * ep)
    layers_here = m.n_layers / pp
    tp_s = 4 * layers_here * _collective_s(acc, "all_reduce", tokens_per_replica * m.d_model * 2, tp)
    # EP: dispatch and combine, forward and backward, per MoE layer
    moe_layers = (m.n_layers - m.n_dense_layers) / pp if m.is_moe else 0
    routed = tokens_per_replica / tp * m.top_k * m.d_model * 2
    ep_s = 4 * moe_layers * _collective_s(acc, "all_to_all", routed, ep)
    bubble_s = math_s * pipeline.bubble_overhead(pp, 4 * pp)
    step_s = max(math_s, fsdp_s) + tp_s + ep_s + bubble_s
    return Candidate(fsdp, tp, ep, pp, state, state <= acc.hbm_bytes, math_s, fsdp_s, tp_s, ep_s, bubble_s, step_s)


def explore(model, accelerator, n_devices, global_tokens):
    """Every usable mesh, fitting ones first, each group by estimated step time."""
    found = [evaluate(model, accelerator, mesh, global_tokens) for mesh in factorizations(n_devices, model)]
    return sorted(found, key=lambda c: (not c.fits, c.step_s))


def predicted_collectives(candidate):
    """The collectives the cost model expects in one training step of a
    two-matmul layer on this mesh, as (kind, mesh axis) pairs; the gradient
    reduction is listed as reduce_scatter (what a GPU pipeline forms)."""
    out = []
    if candidate.fsdp > 1:
        out += [("all_gather", "fsdp"), ("reduce_scatter", "fsdp")]
    if candidate.tp > 1:
        out += [("all_reduce", "tp")]
    if candidate.ep > 1:
        out += [("all_to_all", "ep")]
    if candidate.pp > 1:
        out += [("collective_permute", "pp")]
    return out
