"""Step 1 of the planner: the mesh and where its axes sit on the machine.

A mesh is a degree per axis (dp, fsdp, tp, cp, ep, pp). Axes are placed on
the physical hierarchy innermost first (default tp, ep, cp, fsdp, dp, pp):
a group sits inside one scale-up domain while the product of the inner axes
and its degree fits in one, otherwise it spans domains and its members
share their NICs. On a TPU the job is cut into slices no larger than the
largest one a scheduler grants (v5p: 6,144 chips of an 8,960-chip pod;
beyond it Multislice over DCN), each axis takes whole or partial torus
dimensions of the slice, and what does not fit spans slices over DCN.
Ref: scaling-book-tpus, google-tpu-v5p, scale-your-model-amd.
"""

import math
from dataclasses import dataclass

from .. import _validate, fabric, hardware, models

AXES = ("dp", "fsdp", "tp", "cp", "ep", "pp")
DEFAULT_ORDER = ("tp", "ep", "cp", "fsdp", "dp", "pp")
TUPLE_AXES = ("fsdp", "tp", "ep", "pp")


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
    domain_name: str = "domains"  # what a domain is called: "slices" on a TPU

    @property
    def where(self):
        """A short description: inside one domain, across domains, on the torus."""
        if self.degree == 1:
            return "-"
        if self.torus_span:
            dims = " × ".join(f"{e}{'' if wrap else ' (no wrap)'}" for _, e, wrap in self.torus_span)
            across = f", across {self.n_domains} slices" if self.n_domains > 1 else ""
            return f"torus {dims}{across}"
        if self.n_domains == 1:
            return "inside one domain"
        return f"{self.n_domains} {self.domain_name} × {self.members_per_domain}"


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


def axis_rules(model, seq_len):
    """(axis, total, what) for every degree that must divide what it
    splits. TP must divide the query heads and F; it may exceed the KV
    heads when it is a multiple of them (Megatron replicates K and V then).
    The vocabulary need not divide: frameworks pad it to a multiple of tp
    (Megatron's --make-vocab-size-divisible-by), and memory_plan counts the
    logits as V/tp."""
    m = models.get(model)
    return (
        ("tp", m.n_heads, "the attention heads"),
        ("tp", m.d_ff, "F"),
        ("ep", m.n_experts, "the experts"),
        ("pp", m.n_layers, "the layers"),
        ("cp", seq_len, "the sequence length"),
    )


def check_mesh(model, mesh, seq_len, uneven_pipeline=False):
    """ValueError naming the axis and the rule when a degree does not divide
    what it splits (pp may leave stages uneven when `uneven_pipeline`, but
    no stage may be empty). `mesh` is a dict (missing axes 1) or a tuple."""
    m = models.get(model)
    mesh = normalize_mesh(mesh)
    _validate.count("seq_len", seq_len)
    tp = mesh["tp"]
    if m.n_kv_heads % tp and tp % m.n_kv_heads:
        raise ValueError(
            f"mesh['tp']: {tp} must divide the KV heads of {m.name} ({m.n_kv_heads}) "
            f"or be a multiple of them (K and V replicated)"
        )
    for axis, total, what in axis_rules(m, seq_len):
        if axis == "pp" and uneven_pipeline:
            if mesh["pp"] > m.n_layers:
                raise ValueError(f"mesh['pp']: {mesh['pp']} stages exceed the layers of {m.name} ({m.n_layers})")
            continue
        if total % mesh[axis]:
            uneven = " (or allow uneven stages: uneven_pipeline, --uneven-pipeline)" if axis == "pp" else ""
            raise ValueError(f"mesh[{axis!r}]: {mesh[axis]} must divide {what} of {m.name} ({total}){uneven}")


def prime_factors(n):
    """The prime factors of a positive integer, with multiplicity, by trial
    division up to sqrt(n) (fast for any n a device count can be)."""
    _validate.count("n", n)
    factors, p = [], 2
    while p * p <= n:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1 if p == 2 else 2
        if p > 10**6:  # past 1e6 the rest is taken as one factor (device counts never get there)
            break
    if n > 1:
        factors.append(n)
    return factors


def divisors(n):
    """Every divisor of n, ascending, from its prime factorization."""
    out = [1]
    counts = {}
    for p in prime_factors(n):
        counts[p] = counts.get(p, 0) + 1
    for p, k in counts.items():
        out = [d * p**e for d in out for e in range(k + 1)]
    return sorted(out)


def _slice_shape(acc, n):
    """A slice of n chips as even as the torus allows (sides grown one prime
    factor at a time, smallest side first)."""
    sides = [1] * acc.torus_dims
    for f in sorted(prime_factors(n), reverse=True):
        i = min(range(len(sides)), key=lambda j: sides[j])
        sides[i] *= f
    return tuple(sorted(sides))


def largest_slice_chips(accelerator):
    """The most chips one slice of `accelerator` holds (its pod, or the
    largest slice its scheduler grants)."""
    acc = hardware.get(accelerator)
    return int(acc.largest_slice_devices or acc.scale_up_domain_size)


def check_slices(accelerator, n, slices):
    """ValueError naming `slices` and the rule unless a job of n chips can be
    cut into `slices` equal slices of `accelerator` (a TPU; None: not set)."""
    if slices is None:
        return
    acc = hardware.get(accelerator)
    _validate.count("slices", slices)
    if acc.scale_up_fabric != "torus":
        raise ValueError(f"slices: only a TPU job is cut into slices; {acc.name} has no slices, got {slices}")
    if n % slices:
        raise ValueError(f"slices: must divide the {n} chips of the job, got {slices}")
    largest = largest_slice_chips(acc)
    if n // slices > largest:
        raise ValueError(
            f"slices: {slices} slice(s) of {n // slices} chips exceed the largest {acc.name} slice ({largest} chips)"
        )


def slice_chips(accelerator, n, slices=None):
    """Chips per slice for a job of n chips: n / `slices` when the job is
    told how many slices it runs on (a job small enough for one slice may
    still be spread over several: MaxText's Multislice runs), otherwise n
    itself when it fits in the largest slice the scheduler grants, else
    the largest divisor of n that does (that many chips per slice, the
    rest over DCN)."""
    acc = hardware.get(accelerator)
    _validate.count("n", n)
    check_slices(acc, n, slices)
    if slices is not None:
        return n // slices
    largest = largest_slice_chips(acc)
    if n <= largest:
        return n
    return max(d for d in divisors(n) if d <= largest)


def place(accelerator, mesh, order=DEFAULT_ORDER, slices=None):
    """Placement of every axis of `mesh` (innermost first, in `order`); a
    TPU job on `slices` slices (None: as few as slice_chips allows), the
    outer axes spanning them over DCN."""
    acc = hardware.get(accelerator)
    mesh = normalize_mesh(mesh)
    if not isinstance(order, (tuple, list)) or sorted(order) != sorted(AXES):
        raise ValueError(f"order: must list each of {', '.join(AXES)} once, got {order!r}")
    n = math.prod(mesh.values())
    check_slices(acc, n, slices)
    domain = int(acc.scale_up_domain_size)
    out, inner = {}, 1
    if acc.scale_up_fabric == "torus":
        shape = _slice_shape(acc, slice_chips(acc, n, slices))
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
    return Placement(
        d,
        remaining,
        members,
        torus_links=max(links, 1.0) if span else 0.0,
        torus_span=tuple(span),
        domain_name="slices",
    )


_validate.guard_module(globals())
