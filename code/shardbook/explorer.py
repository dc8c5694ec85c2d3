"""The mesh explorer: place a mesh on the machine, price it, rank meshes.

For a model preset, an accelerator preset, a device count and a global batch
in tokens, every mesh over the axes dp, fsdp, tp, cp, ep and pp whose
degrees multiply to the device count and divide what they split is
considered. Each axis is placed on the physical hierarchy, innermost first,
and its collectives are priced by the fabric its groups span. A mesh fits
when persistent state plus activations fit in HBM under some recomputation
policy; the cheapest policy that fits is chosen. Standard library only;
compiling candidates is in shardbook.hlo.candidates.

Assumptions (stated on every result):

- optimistic: peak FLOP/s, collectives at line rate on every link the
  fabric offers, perfect overlap for the collectives that can hide (below);
- math: model FLOPs 6·N_active + 6·L·H·Q·s per token (the attention
  scores' causal half, as MaxText counts them and block-skipping kernels
  compute), plus what the chosen recomputation repeats; MFU = model FLOPs
  at peak / step time;
- axes are placed innermost first (default tp, ep, cp, fsdp, dp, pp): a
  group sits inside one scale-up domain while the product of the inner axes
  and its degree fits in one, otherwise it spans domains and its members
  share their NICs (or DCN); on a TPU each axis takes whole or partial torus
  dimensions of the slice, two links per wrapped dimension, one without
  wraparound, divided among the groups that stride the same dimension;
- FSDP gathers weights forward and backward for every microbatch (once
  per step if weights are kept) and reduce-scatters gradients once; DP
  all-reduces gradients once; context parallelism gathers K and V per
  layer; these hide behind the math, and the step pays whichever is longest; TP (sequence-parallel gathers and
  scatters, 4 all-reduce equivalents of the block's activations per layer)
  and EP (dispatch and combine, forward and backward) sit on the critical
  path unless ideal_overlap (collective matmul, DualPipe) hides them too;
  PP adds the bubble of its schedule and microbatch count;
- memory: BF16 weights and gradients and 12 bytes of optimizer state per
  parameter, sharded over fsdp (ZeRO-3), split over tp, pp and (experts) ep;
  activations per memory.activation_bytes_per_device with 16-bit
  activations and sequence parallelism when tp > 1; no allocator overhead,
  gather buffers or logits.
"""

import argparse
import math
import sys
from dataclasses import dataclass, field

from . import _validate, fabric, hardware, memory, models, pipeline, training

ASSUMPTIONS = __doc__.split("Assumptions (stated on every result):")[1].strip()
AXES = ("dp", "fsdp", "tp", "cp", "ep", "pp")
DEFAULT_ORDER = ("tp", "ep", "cp", "fsdp", "dp", "pp")
TUPLE_AXES = ("fsdp", "tp", "ep", "pp")


class TooFewSequences(ValueError):
    """The batch leaves a data-parallel rank less than one microbatch: the
    mesh is not usable for it (the search skips such meshes)."""


@dataclass(frozen=True)
class Placement:
    """Where one axis's groups sit: `n_domains` scale-up domains with
    `members_per_domain` each; on a torus also the links each member drives
    (fractional when groups stride a shared dimension) and the dimensions
    spanned as (dimension, extent, wraparound)."""

    degree: int
    n_domains: int
    members_per_domain: int
    torus_links: float = 0.0
    torus_span: tuple = ()

    @property
    def where(self):
        if self.degree == 1:
            return "-"
        if self.torus_span:
            dims = " × ".join(f"{e}{'' if wrap else ' (no wrap)'}" for _, e, wrap in self.torus_span)
            across = f", across {self.n_domains} slices" if self.n_domains > 1 else ""
            return f"torus {dims}{across}"
        if self.n_domains == 1:
            return "inside one domain"
        return f"{self.n_domains} domains × {self.members_per_domain}"


@dataclass(frozen=True)
class Candidate:
    """One mesh the explorer priced: its degrees per scheme, whether its
    state fits, the time of each part of a step (math, each scheme's
    collectives, the pipeline bubble), the step time and MFU that follow,
    and where each axis was placed on the machine."""

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
    dp: int = 1
    cp: int = 1
    dp_s: float = 0.0
    cp_s: float = 0.0
    activation_bytes_per_device: float = 0.0
    recompute: str = "none"
    mfu: float = 0.0
    n_microbatches: float = 1.0
    placement: dict = field(default_factory=dict)

    @property
    def mesh(self):
        return {"dp": self.dp, "fsdp": self.fsdp, "tp": self.tp, "cp": self.cp, "ep": self.ep, "pp": self.pp}

    @property
    def label(self):
        return " × ".join(f"{k} {v}" for k, v in self.mesh.items() if v > 1) or "1 device"

    @property
    def memory_bytes_per_device(self):
        return self.state_bytes_per_device + self.activation_bytes_per_device


def normalize_mesh(mesh):
    """A dict over AXES (missing axes 1) from a dict or an (fsdp, tp, ep, pp) tuple."""
    if isinstance(mesh, (tuple, list)):
        if len(mesh) != len(TUPLE_AXES):
            raise ValueError(f"mesh: a tuple must give (fsdp, tp, ep, pp), got {tuple(mesh)!r}")
        mesh = dict(zip(TUPLE_AXES, mesh, strict=True))
    if not isinstance(mesh, dict):
        raise ValueError(f"mesh: must be a dict of axis to degree or an (fsdp, tp, ep, pp) tuple, got {mesh!r}")
    for axis in mesh:
        if axis not in AXES:
            raise ValueError(f"mesh: unknown axis {axis!r}; valid: {', '.join(AXES)}")
    out = {}
    for axis in AXES:
        degree = mesh.get(axis, 1)
        if not isinstance(degree, int) or isinstance(degree, bool) or degree < 1:
            raise ValueError(f"mesh[{axis!r}]: must be an integer >= 1, got {degree!r}")
        out[axis] = degree
    return out


def check_mesh(model, mesh, seq_len, uneven_pipeline=False):
    """ValueError naming the axis and the rule when a degree does not divide
    what it splits (pp may leave stages uneven when `uneven_pipeline`)."""
    m = models.get(model)
    rules = (
        ("tp", m.n_kv_heads, "the KV heads"),
        ("tp", m.n_heads, "the attention heads"),
        ("tp", m.d_ff, "F"),
        ("ep", m.n_experts, "the experts"),
        ("pp", m.n_layers, "the layers"),
        ("cp", seq_len, "the sequence length"),
    )
    for axis, total, what in rules:
        if uneven_pipeline and axis == "pp":
            continue
        if total % mesh[axis]:
            raise ValueError(f"mesh[{axis!r}]: {mesh[axis]} must divide {what} of {m.name} ({total})")


def factorizations(n_devices, model, axes=TUPLE_AXES, seq_len=4096, uneven_pipeline=False):
    """Every (fsdp, tp, ep, pp) tuple (or, with `axes`, every dict over those
    axes) whose product is n_devices and that the model can use."""
    _validate.count("n_devices", n_devices)
    models.get(model)
    for axis in axes:
        _validate.choice("axes", axis, AXES)
    divisors = [d for d in range(1, n_devices + 1) if n_devices % d == 0]
    out = []

    def rec(i, remaining, chosen):
        if i == len(axes) - 1:
            chosen = dict(chosen, **{axes[i]: remaining})
            mesh = normalize_mesh(chosen)
            try:
                check_mesh(model, mesh, seq_len, uneven_pipeline)
            except ValueError:
                return
            out.append(tuple(mesh[a] for a in axes) if axes == TUPLE_AXES else mesh)
            return
        for d in divisors:
            if remaining % d == 0:
                rec(i + 1, remaining // d, dict(chosen, **{axes[i]: d}))

    rec(0, n_devices, {})
    return out


def _slice_shape(acc, n):
    """A slice of n chips as even as the torus allows (sides grown one prime
    factor at a time, smallest side first)."""
    sides = [1] * acc.torus_dims
    factors = []
    k, p = n, 2
    while k > 1:
        while k % p == 0:
            factors.append(p)
            k //= p
        p += 1
    for f in sorted(factors, reverse=True):
        i = min(range(len(sides)), key=lambda j: sides[j])
        sides[i] *= f
    return tuple(sorted(sides))


def place(accelerator, mesh, order=DEFAULT_ORDER):
    """Placement of every axis of `mesh` (innermost first, in `order`)."""
    acc = hardware.get(accelerator)
    mesh = normalize_mesh(mesh)
    if sorted(order) != sorted(AXES):
        raise ValueError(f"order: must list each of {', '.join(AXES)} once, got {tuple(order)!r}")
    n = math.prod(mesh.values())
    domain = int(acc.scale_up_domain_size)
    out, inner = {}, 1
    if acc.scale_up_fabric == "torus":
        in_slice = min(n, domain)
        shape = _slice_shape(acc, in_slice)
        used = [1] * len(shape)  # chips of each torus dimension already taken by inner axes
    for axis in order:
        d = mesh[axis]
        if d == 1:
            out[axis] = Placement(1, 1, 1)
            continue
        if acc.scale_up_fabric == "torus":
            out[axis] = _place_on_torus(acc, shape, used, d)
        elif inner * d <= domain:
            out[axis] = Placement(d, 1, d)
        elif inner >= domain or domain % inner:
            out[axis] = Placement(d, d, 1)
        else:
            members = domain // inner
            if d % members:
                out[axis] = Placement(d, d, 1)
            else:
                out[axis] = Placement(d, d // members, members)
        inner *= d
    return out


def _place_on_torus(acc, shape, used, d):
    span, links, remaining = [], 0.0, d
    for dim, side in enumerate(shape):
        free = side // used[dim]
        take = math.gcd(remaining, free)
        if take > 1:
            wrap = fabric.has_wraparound(acc, shape, dim) and take == free
            # groups that stride a dimension an inner axis already uses share its links
            links += (2 if wrap else 1) / used[dim]
            span.append((dim, take, wrap))
            used[dim] *= take
            remaining //= take
        if remaining == 1:
            break
    # what does not fit in the slice spans slices over DCN, one member per slice
    members = d // remaining
    return Placement(d, remaining, members, torus_links=max(links, 1.0) if span else 0.0, torus_span=tuple(span))


def _collective_s(acc, kind, total_bytes, placement):
    """One collective over an axis's group, priced by the fabric where it sits."""
    d = placement.degree
    if d == 1 or total_bytes == 0:
        return 0.0
    if not placement.torus_span:
        return fabric.collective_s(kind, total_bytes, acc, d, placement.n_domains)
    extents = tuple(extent for _, extent, _ in placement.torus_span)
    wraparound = all(wrap for _, _, wrap in placement.torus_span)
    return fabric.collective_s(
        kind,
        total_bytes,
        acc,
        d,
        placement.n_domains,
        torus_extents=extents,
        wraparound=wraparound,
        links=placement.torus_links,
    )


def evaluate(
    model,
    accelerator,
    mesh,
    global_tokens,
    *,
    seq_len=4096,
    micro_batch_seqs=1,
    recompute=None,
    order=DEFAULT_ORDER,
    schedule="1f1b",
    n_devices=None,
    uneven_pipeline=False,
    keep_gathered_weights=False,
    ideal_overlap=False,
):
    """One Candidate for `mesh` (a dict over AXES, or an (fsdp, tp, ep, pp)
    tuple) under the stated assumptions. `recompute` None picks the cheapest
    policy that fits ('none', then 'selective', then 'full'). Each
    data-parallel rank runs its share of the batch `micro_batch_seqs`
    sequences at a time (pipeline microbatches, or gradient accumulation).
    `uneven_pipeline` lets pp leave stages of unequal depth (as Llama 3's
    126 layers on 16 stages): memory counts the deepest stage, time the
    balanced average (optimistic). `keep_gathered_weights`: FSDP gathers each
    weight once forward and once backward per step instead of per
    microbatch (the gathered weights' memory is not counted).
    `ideal_overlap`: TP and EP collectives hide behind the math too, as
    collective matmuls and schedules such as DualPipe make them: the step is
    the longest of math and every kind of communication, plus the bubble."""
    m, acc = models.get(model), hardware.get(accelerator)
    mesh = normalize_mesh(mesh)
    _validate.positive("global_tokens", global_tokens)
    _validate.count("seq_len", seq_len)
    _validate.count("micro_batch_seqs", micro_batch_seqs)
    n = math.prod(mesh.values())
    if n_devices is not None and n != n_devices:
        raise ValueError(f"mesh: degrees multiply to {n}, not to the device count {n_devices}")
    check_mesh(m, mesh, seq_len, uneven_pipeline)
    if global_tokens < n:
        raise ValueError(f"global_tokens: {global_tokens:g} is below one token per device ({n} devices)")
    if recompute is not None:
        _validate.choice("recompute", recompute, memory.RECOMPUTE)
    batch_ways = mesh["dp"] * mesh["fsdp"] * mesh["ep"]
    seqs_per_replica = global_tokens / seq_len / batch_ways
    if seqs_per_replica < micro_batch_seqs:
        raise TooFewSequences(
            f"global_tokens: leaves {seqs_per_replica:g} sequences of {seq_len} per data-parallel rank, "
            f"fewer than micro_batch_seqs={micro_batch_seqs}"
        )
    n_micro = seqs_per_replica / micro_batch_seqs
    placement = place(acc, mesh, order)

    # --- memory ---------------------------------------------------------
    total = models.param_count(m)
    n_moe_layers = m.n_layers - m.n_dense_layers if m.is_moe else 0
    expert_params = models.routed_expert_param_count(m)
    dense_params = total - expert_params
    shard = mesh["fsdp"] * mesh["tp"] * mesh["pp"]
    per_device_params = dense_params / shard + expert_params / (shard * mesh["ep"])
    state = memory.state_bytes_per_device(per_device_params, "dp", 1)
    policies = memory.KORTHIKANTI_POLICIES if recompute is None else (recompute,)  # searched: none, selective, full
    deepest_stage = math.ceil(m.n_layers / mesh["pp"])
    in_flight = memory.microbatches_in_flight(mesh["pp"], math.ceil(n_micro), schedule) if mesh["pp"] > 1 else 1
    for policy in policies:
        # per layer: memory.activation_bytes_per_device requires pp to divide L, an uneven pipeline does not
        per_layer = (
            memory.activation_bytes_per_device(
                m,
                seq_len,
                micro_batch_seqs,
                tp=mesh["tp"],
                cp=mesh["cp"],
                pp=1,
                sequence_parallel=mesh["tp"] > 1,
                recompute=policy,
            )
            / m.n_layers
        )
        activations = per_layer * deepest_stage * in_flight
        fits = state + activations <= acc.hbm_bytes
        if fits:
            break

    # --- math -----------------------------------------------------------
    c = acc.bf16_dense_flops_per_s
    model_flops = training.model_flops_per_token(m, seq_len, causal=True) * global_tokens
    math_s = training.hardware_flops_per_token(m, seq_len, policy, causal=True) * global_tokens / (n * c)

    # --- communication --------------------------------------------------
    gathered = 2 * per_device_params * mesh["fsdp"]  # the BF16 weights one fsdp group gathers
    gathers = 2 if keep_gathered_weights else 2 * n_micro
    fsdp_s = (gathers + 1) * _collective_s(acc, "all_gather", gathered, placement["fsdp"])
    dp_s = _collective_s(acc, "all_reduce", 2 * per_device_params, placement["dp"])
    tokens_per_group = global_tokens / (batch_ways * mesh["cp"])  # the tokens one tp group works on
    layers_here = m.n_layers / mesh["pp"]
    kv_bytes = tokens_per_group * mesh["cp"] * 2 * m.n_kv_heads * m.head_dim * 2 / mesh["tp"]
    cp_s = 2 * layers_here * _collective_s(acc, "all_gather", kv_bytes, placement["cp"])
    tp_rounds = 6 if policy == "full" else 4
    tp_s = tp_rounds * layers_here * _collective_s(acc, "all_reduce", tokens_per_group * m.d_model * 2, placement["tp"])
    moe_layers_here = n_moe_layers / mesh["pp"]
    routed = tokens_per_group / mesh["tp"] * m.top_k * m.d_model * 2
    ep_s = 4 * moe_layers_here * _collective_s(acc, "all_to_all", routed, placement["ep"])
    bubble_s = math_s * pipeline.bubble_overhead(mesh["pp"], math.ceil(n_micro)) if mesh["pp"] > 1 else 0.0
    if ideal_overlap:
        step_s = max(math_s, fsdp_s, dp_s, cp_s, tp_s, ep_s) + bubble_s
    else:
        step_s = max(math_s, fsdp_s, dp_s, cp_s) + tp_s + ep_s + bubble_s
    mfu = model_flops / (n * c) / step_s
    return Candidate(
        mesh["fsdp"],
        mesh["tp"],
        mesh["ep"],
        mesh["pp"],
        state,
        fits,
        math_s,
        fsdp_s,
        tp_s,
        ep_s,
        bubble_s,
        step_s,
        dp=mesh["dp"],
        cp=mesh["cp"],
        dp_s=dp_s,
        cp_s=cp_s,
        activation_bytes_per_device=activations,
        recompute=policy,
        mfu=mfu,
        n_microbatches=n_micro,
        placement=placement,
    )


def explore(model, accelerator, n_devices, global_tokens, *, axes=TUPLE_AXES, **options):
    """Every usable mesh over `axes`, fitting ones first, each group by step
    time. Meshes that leave a data-parallel rank less than one microbatch
    are not usable and are left out."""
    models.get(model), hardware.get(accelerator)  # unknown presets fail here, by name
    found = _usable(model, accelerator, n_devices, global_tokens, axes, options)
    return sorted(found, key=lambda c: (not c.fits, c.step_s))


def _usable(model, accelerator, n_devices, global_tokens, axes, options):
    """A Candidate for every mesh over `axes` that leaves each data-parallel
    rank at least one microbatch."""
    found = []
    for mesh in factorizations(
        n_devices, model, axes, options.get("seq_len", 4096), options.get("uneven_pipeline", False)
    ):
        mesh = dict(zip(TUPLE_AXES, mesh, strict=True)) if isinstance(mesh, tuple) else mesh
        try:
            found.append(evaluate(model, accelerator, mesh, global_tokens, n_devices=n_devices, **options))
        except TooFewSequences:
            pass
    return found


def _bound_options(run):
    from .measured import PublishedRun

    if not isinstance(run, PublishedRun):
        raise TypeError(f"run: must be a measured.PublishedRun, got {type(run).__name__}")
    return dict(
        seq_len=run.seq_len,
        micro_batch_seqs=run.micro_batch_seqs,
        recompute=run.recompute,
        uneven_pipeline=run.uneven_pipeline,
        keep_gathered_weights=True,
        ideal_overlap=True,
    )


def bound_for_run(run):
    """The explorer's most optimistic Candidate for a published run's own
    mesh: the run's recomputation (from below), weights gathered once per
    step, every collective overlapped with the math (ideal_overlap)."""
    options = _bound_options(run)
    return evaluate(run.model, run.accelerator, run.mesh, run.global_tokens, **options)


def rank_of_run(run, axes=None):
    """(rank, count): where the run's own mesh places among the explorer's
    candidates for the same model, devices and batch (over fsdp, tp, ep, pp
    and any other axis the run uses), ranked by the same optimistic bound
    (1 = best); rank None if the mesh is not among them."""
    options = _bound_options(run)
    if axes is None:
        axes = tuple(a for a in AXES if a in TUPLE_AXES or a in run.mesh)
    found = _usable(run.model, run.accelerator, run.n_devices, run.global_tokens, axes, options)
    target = normalize_mesh(run.mesh)
    own = next((c for c in found if c.mesh == target), None)
    if own is None:
        return None, len(found)
    # ties share a rank: one plus the candidates strictly faster
    return 1 + sum(c.step_s < own.step_s * (1 - 1e-9) for c in found), len(found)


def predicted_collectives(candidate):
    """The collectives the cost model expects in one training step of a
    two-matmul layer on this mesh, as (kind, mesh axis) pairs; the gradient
    reduction is listed as reduce_scatter (what a GPU pipeline forms)."""
    if not isinstance(candidate, Candidate):
        raise TypeError(f"candidate: must be an explorer.Candidate, got {type(candidate).__name__}")
    out = []
    if candidate.fsdp > 1:
        out += [("all_gather", "fsdp"), ("reduce_scatter", "fsdp")]
    if candidate.dp > 1:
        out += [("all_reduce", "dp")]
    if candidate.tp > 1:
        out += [("all_reduce", "tp")]
    if candidate.cp > 1:
        out += [("all_gather", "cp")]
    if candidate.ep > 1:
        out += [("all_to_all", "ep")]
    if candidate.pp > 1:
        out += [("collective_permute", "pp")]
    return out


def format_table(candidates, top=None):
    """The ranked candidates as a plain-text table."""
    if not isinstance(candidates, (list, tuple)) or not all(isinstance(c, Candidate) for c in candidates):
        raise TypeError("candidates: must be a list of explorer.Candidate")
    header = ("mesh", "fits", "recompute", "memory GB", "math ms", "exposed comm ms", "bubble ms", "step ms", "MFU")
    rows = []
    for cand in candidates[:top] if top else candidates:
        exposed = cand.step_s - cand.math_s - cand.bubble_s
        rows.append(
            (
                cand.label,
                "yes" if cand.fits else "no",
                cand.recompute,
                f"{cand.memory_bytes_per_device / 1e9:,.1f}",
                f"{cand.math_s * 1e3:,.0f}",
                f"{exposed * 1e3:,.0f}",
                f"{cand.bubble_s * 1e3:,.0f}",
                f"{cand.step_s * 1e3:,.0f}",
                f"{cand.mfu:.1%}",
            )
        )
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(
            str(v).ljust(w) if i == 0 else str(v).rjust(w) for i, (v, w) in enumerate(zip(r, widths, strict=True))
        )
        for r in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def main(argv=None):
    """`python -m shardbook.explorer MODEL ACCELERATOR N_DEVICES TOKENS`:
    print the ranked meshes; bad input is one line on stderr and exit code 2."""
    parser = argparse.ArgumentParser(
        prog="python -m shardbook.explorer",
        description="Rank the meshes of a model on a number of accelerators with the book's cost model.",
    )
    parser.add_argument("model", help=f"a model preset: {', '.join(models.names())}")
    parser.add_argument("accelerator", help=f"an accelerator preset: {', '.join(hardware.names())}")
    parser.add_argument("n_devices", type=int, help="number of devices")
    parser.add_argument("tokens", type=float, help="global batch in tokens")
    parser.add_argument("--top", type=int, default=10, help="rows to print (default 10)")
    parser.add_argument(
        "--recompute",
        choices=memory.RECOMPUTE,
        default=None,
        help="activation recomputation (default: the cheapest that fits)",
    )
    parser.add_argument("--seq-len", type=int, default=4096, help="sequence length (default 4096)")
    parser.add_argument(
        "--axes",
        default="fsdp,tp,ep,pp",
        help=f"comma-separated mesh axes to search (default fsdp,tp,ep,pp; any of {','.join(AXES)})",
    )
    args = parser.parse_args(argv)
    try:
        axes = tuple(a.strip() for a in args.axes.split(",") if a.strip())
        if args.n_devices < 1:
            raise ValueError(f"n_devices: must be >= 1, got {args.n_devices}")
        if args.tokens < args.n_devices:
            raise ValueError(f"tokens: {args.tokens:g} is below one token per device ({args.n_devices} devices)")
        found = explore(
            args.model,
            args.accelerator,
            args.n_devices,
            args.tokens,
            axes=axes,
            recompute=args.recompute,
            seq_len=args.seq_len,
        )
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if not found:
        print(
            f"error: no mesh of {args.n_devices} devices can run {args.model} with a batch of {args.tokens:g} tokens "
            f"(each data-parallel rank needs at least one sequence of {args.seq_len})",
            file=sys.stderr,
        )
        return 2
    print(
        f"{args.model} on {args.n_devices} × {args.accelerator}, {args.tokens:,.0f} tokens per step, "
        f"sequences of {args.seq_len}: {len(found)} meshes\n"
    )
    print(format_table(found, args.top))
    print("\nAssumptions:\n" + ASSUMPTIONS)
    return 0


if __name__ == "__main__":
    sys.exit(main())


_validate.guard_module(globals())
