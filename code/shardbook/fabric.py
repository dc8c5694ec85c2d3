"""Collective times priced by the fabric a group actually sits on.

`collectives` gives the transport term for a number of links; this module
decides how many links a group can drive, and where the bottleneck is, from
the accelerator's fabric and the group's placement:

- full mesh (MI300X, MI355X): a group of m devices inside one node has m-1
  direct peer links per device, all usable at once;
- switch (NVLink/NVSwitch, NVL72): any group inside the domain is limited by
  each device's egress;
- torus (TPU ICI): two links per torus axis the group spans when the axis has
  wraparound, one (the end of a line) when it does not;
- across domains: a group of n = k·m devices, m in each of k nodes (or TPU
  slices), must bring (k-1)/k of the data into each node through its m
  members' NICs (or DCN shares). The time is the in-domain phase and the
  cross-domain phase, serialized (sum) or perfectly pipelined (max)
  (`collective_s`, the least a schedule without in-network reduction
  moves; XLA's multislice collectives on TPU are this two-level kind);
- across GPU nodes as NCCL (and RCCL) run it: flat rings over all n
  devices, whose edges out of a node carry (n-1)/n of the data, not
  (k-1)/k (`flat_ring_s`).

All times are bandwidth terms at line rate: no latency, launch, protocol or
contention. They are the fabric's bounds, but for `flat_ring_s`, which is
what NCCL's rings move; `collectives`' defaults keep the single-ring
illustration the sources print.
Ref: scale-your-model-amd, scaling-book-sharding, scaling-book-gpus,
google-tpu-v5p.
"""

from . import _validate, collectives, hardware

COLLECTIVE_KINDS = collectives.COLLECTIVE_KINDS


def has_wraparound(accelerator, slice_shape, axis):
    """Whether torus axis `axis` of a slice of shape `slice_shape` closes
    into a ring, by the accelerator's torus_wraparound_rule: 'whole_cubes'
    (v5p and Ironwood) needs a whole number of cubes, every side a multiple
    of torus_wraparound_side (4); 'full_axis' (v5e and v6e) needs that axis's
    side to be a multiple of torus_wraparound_side (16). A shape with fewer
    sides than the torus has axes spans one chip on the rest (a 4 × 4 slice
    of v5p is 4 × 4 × 1: no whole cube)."""
    acc = hardware.get(accelerator)
    if acc.scale_up_fabric != "torus":
        raise ValueError(f"accelerator: {acc.name} is not a torus (scale_up_fabric {acc.scale_up_fabric!r})")
    multiple = acc.torus_wraparound_side
    if not isinstance(slice_shape, (tuple, list)) or not slice_shape:
        raise ValueError(f"slice_shape: must be a non-empty tuple of chips per torus axis, got {slice_shape!r}")
    if len(slice_shape) > acc.torus_dims:
        raise ValueError(f"slice_shape: {acc.name} has {acc.torus_dims} torus axes, got {len(slice_shape)} sides")
    for side in slice_shape:
        _validate.count("slice_shape", side)
    _validate.count("axis", axis, minimum=0)
    if axis >= len(slice_shape):
        raise ValueError(f"axis: the slice has {len(slice_shape)} axes (0 to {len(slice_shape) - 1}), got {axis}")
    if acc.torus_wraparound_rule == "whole_cubes":
        sides = tuple(slice_shape) + (1,) * (acc.torus_dims - len(slice_shape))
        return all(side % multiple == 0 for side in sides)
    return slice_shape[axis] % multiple == 0


def _torus_extents(acc, n, torus_extents):
    if torus_extents is None:
        return (n,)
    extents = tuple(torus_extents)
    if not extents or len(extents) > acc.torus_dims:
        raise ValueError(f"torus_extents: must name 1 to {acc.torus_dims} axes for {acc.name}, got {extents!r}")
    product = 1
    for extent in extents:
        _validate.count("torus_extents", extent)
        product *= extent
    if product != n:
        raise ValueError(f"torus_extents: must multiply to the group size {n}, got {extents!r}")
    return extents


def concurrent_links(accelerator, n, torus_extents=None, wraparound=True):
    """Disjoint scale-up links one device of an n-device group drives at once
    inside one domain: n-1 on a full mesh; on a torus 2 per spanned axis with
    wraparound (1 without, the bottleneck at a line's end). A switch is priced
    by egress instead (returns 1 and see `scale_up_s`)."""
    acc = hardware.get(accelerator)
    _validate.count("n", n)
    if acc.scale_up_fabric == "full_mesh":
        return max(n - 1, 1)
    if acc.scale_up_fabric == "torus":
        extents = _torus_extents(acc, n, torus_extents)
        return max(sum((2 if wraparound else 1) for extent in extents if extent > 1), 1)
    return 1


def _link_rate(acc):
    """The per-link rate the fabric's concurrency multiplies (switch: egress)."""
    if acc.scale_up_fabric == "switch":
        return acc.scale_up_egress_bytes_per_s
    return acc.scale_up_link_bytes_per_s


def scale_up_s(kind, total_bytes, accelerator, n, torus_extents=None, wraparound=True, links=None):
    """One collective over an n-device group inside one scale-up domain.

    all_gather / reduce_scatter / all_reduce: `total_bytes` is the full
    buffer; all_to_all: `total_bytes` is each device's local payload L.
    Full mesh: total·(n-1)/n over n-1 links = total/(n·W_link).
    Switch: total·(n-1)/n over the device's egress.
    Torus: total·(n-1)/n over 2 links per wrapped axis (1 per unwrapped);
    an all-to-all is also bounded by the bisection of its longest axis,
    L·e/(4·c·W) with c = 2 with wraparound, 1 without.
    `links` overrides the links each member drives (fractional when several
    groups stride one torus dimension and share its links; see
    explorer.place).
    """
    acc = hardware.get(accelerator)
    _validate.choice("kind", kind, COLLECTIVE_KINDS)
    _validate.non_negative("total_bytes", total_bytes)
    _validate.count("n", n)
    if n > acc.scale_up_domain_size:
        raise ValueError(
            f"n: a group inside one {acc.name} domain has at most {int(acc.scale_up_domain_size)} devices, got {n}"
        )
    if links is None:
        links = concurrent_links(acc, n, torus_extents, wraparound)
    else:
        _validate.positive("links", links)
    rate = _link_rate(acc)
    if kind == "all_to_all":
        seconds = collectives.all_to_all_s(total_bytes, n, rate * links)
        if acc.scale_up_fabric == "torus" and n > 1:
            longest = max(_torus_extents(acc, n, torus_extents))
            per_direction = 2 if wraparound else 1
            seconds = max(seconds, total_bytes * longest / (4 * per_direction * acc.scale_up_link_bytes_per_s))
        return seconds
    return collectives.collective_s(kind, total_bytes, n, rate * links)


def collective_s(
    kind, total_bytes, accelerator, n, n_domains=1, torus_extents=None, wraparound=True, overlapped=True, links=None
):
    """A collective over n devices spread evenly over `n_domains` scale-up
    domains (nodes, NVL72 racks, TPU slices), priced by the fabric.

    Inside one domain: `scale_up_s`. Across k domains with m = n/k members
    each (m at most the domain size), each device uses its own scale-out
    share W_out (its NIC, or a chip's DCN share), so a node's m members
    bring data in at m·W_out:

    - all_gather / reduce_scatter: cross phase total·(k-1)/(k·m·W_out), then
      the in-domain collective of the whole buffer over m devices;
    - all_reduce: reduce-scatter inside, all-reduce of total/m across k,
      all-gather inside (collectives.hierarchical_all_reduce_s); the two
      in-node phases use the same links, so pipelined the time is the
      larger of their sum and the cross phase;
    - all_to_all: each device sends L·(n-m)/n off-node through W_out and
      L·(m-1)/n inside.

    overlapped=True gives the largest phase (perfect pipelining, the bound);
    False the sum (a serialized implementation). Spreading a group over
    nodes can make it faster than the same group inside one node (its
    members gain NIC ingress beside their scale-up links); a group of k·m
    devices over k nodes is never faster than m of them inside one (for an
    all-to-all on a torus, given the group's real torus_extents: the
    default, one axis of n chips, is no slice's shape).
    """
    acc = _checked(kind, total_bytes, accelerator, n, n_domains)
    if n_domains == 1:
        return scale_up_s(kind, total_bytes, acc, n, torus_extents, wraparound, links)
    m = n // n_domains
    out_rate = acc.scale_out_bytes_per_s
    if kind == "all_to_all":
        inside = (
            scale_up_s("all_to_all", total_bytes * m / n, acc, m, torus_extents, wraparound, links) if m > 1 else 0.0
        )
        across = total_bytes * (n - m) / n / out_rate
    else:
        inside = _in_domain_s(kind, total_bytes, acc, m, torus_extents, wraparound, links)
        if kind == "all_reduce":
            across = collectives.all_reduce_s(total_bytes / m, n_domains, out_rate)
        else:
            across = total_bytes * (n_domains - 1) / n_domains / (m * out_rate)
    return collectives.hierarchical_s(inside, across, overlapped)


def _checked(kind, total_bytes, accelerator, n, n_domains):
    """The accelerator of a collective over n devices in n_domains domains,
    after checking the arguments."""
    acc = hardware.get(accelerator)
    _validate.choice("kind", kind, COLLECTIVE_KINDS)
    _validate.non_negative("total_bytes", total_bytes)
    _validate.count("n", n)
    _validate.count("n_domains", n_domains)
    if n % n_domains:
        raise ValueError(f"n_domains: must divide the group size {n}, got {n_domains}")
    return acc


def _in_domain_s(kind, total_bytes, acc, m, torus_extents=None, wraparound=True, links=None):
    """The in-domain part of an all-gather, reduce-scatter or all-reduce
    across domains: the whole buffer over the m members of a domain; an
    all-reduce's reduce-scatter and all-gather share the same links, so
    only the cross-domain part can hide under them."""
    if m == 1:
        return 0.0
    if kind == "all_reduce":
        return 2 * scale_up_s("reduce_scatter", total_bytes, acc, m, torus_extents, wraparound, links)
    return scale_up_s(kind, total_bytes, acc, m, torus_extents, wraparound, links)


def flat_ring_s(kind, total_bytes, accelerator, n, n_domains):
    """A collective over n devices in `n_domains` GPU nodes as NCCL runs it
    (RCCL uses the same ring and tree algorithms): flat rings through all n
    devices, one per channel, each entering and leaving every node through
    a NIC, the channels spread over all the node's NICs; NCCL builds no
    two-level ring, and its tree algorithm is for all-reduce only. Each
    ring edge carries (n-1)/n of the data, so together the m NICs of a
    node carry (n-1)/n of it (all-gather, reduce-scatter) or 2(n-1)/n
    (all-reduce; the tree all-reduce moves about twice the data, as much),
    against (k-1)/k in the two-level schedule `collective_s` prices: 1.29x
    more at four nodes of eight, 1.88x at two.
    The in-node hops move no more than the in-node collective of the whole
    buffer, which runs at the same time: the time is the larger of the two.
    An all-to-all is point to point and priced as `collective_s` does.
    Ref: nccl-flat-rings, nccl-allgather-ring, rccl-docs, nccl-tests-performance."""
    acc = _checked(kind, total_bytes, accelerator, n, n_domains)
    if acc.scale_up_fabric == "torus":
        raise ValueError(
            f"accelerator: {acc.name} is a TPU; its collectives across slices are two-level (collective_s)"
        )
    if n_domains == 1 or kind == "all_to_all":
        return collective_s(kind, total_bytes, acc, n, n_domains)
    m = n // n_domains
    passes = 2 if kind == "all_reduce" else 1
    across = passes * total_bytes * (n - 1) / n / (m * acc.scale_out_bytes_per_s)
    return max(_in_domain_s(kind, total_bytes, acc, m), across)


def _grid_shape(grid):
    """Shape of a rectangular nested list of integer device ids."""
    if isinstance(grid, bool) or not isinstance(grid, (int, list, tuple)):
        raise ValueError(f"device_grid: must be nested lists of integer device ids, found {grid!r}")
    if isinstance(grid, int):
        return ()
    if not grid:
        raise ValueError("device_grid: a mesh axis has no devices")
    shapes = {_grid_shape(g) for g in grid}
    if len(shapes) != 1:
        raise ValueError("device_grid: the nested lists are not rectangular")
    return (len(grid), *shapes.pop())


def groups_along(device_grid, axis):
    """The device groups of one mesh axis: `device_grid` is the mesh's
    device ids as nested lists ([[d.id for d in row] for row in
    mesh.devices] for two axes), `axis` its index; each group holds the
    devices that differ only in that coordinate."""
    shape = _grid_shape(device_grid)
    _validate.count("axis", axis, minimum=0)
    if axis >= len(shape):
        raise ValueError(f"axis: the grid has {len(shape)} axes, got axis {axis}")

    def at(index):
        cell = device_grid
        for i in index:
            cell = cell[i]
        return cell

    def indices(dims):
        if not dims:
            yield ()
            return
        for i in range(dims[0]):
            for rest in indices(dims[1:]):
                yield (i, *rest)

    others = shape[:axis] + shape[axis + 1 :]
    return [[at(index[:axis] + (k,) + index[axis:]) for k in range(shape[axis])] for index in indices(others)]


def rail_misaligned_groups(device_grid, axis, devices_per_node):
    """Groups along `axis` whose members do not share one local rank
    (device id mod devices_per_node): where such a group crosses nodes, on a
    rail-optimized network its traffic leaves the rail's leaf switch (a
    group inside one node uses the node's own links, and no rail). [] when
    the axis is aligned."""
    _validate.count("devices_per_node", devices_per_node)
    return [g for g in groups_along(device_grid, axis) if len({d % devices_per_node for d in g}) > 1]


def single_ring_s(kind, total_bytes, accelerator, n):
    """The sources' illustration for the same group inside one domain: one
    ring over one link, one direction (all-to-all: one link of egress, which
    on a torus ignores the extra hops and is no upper bound)."""
    acc = hardware.get(accelerator)
    _validate.choice("kind", kind, COLLECTIVE_KINDS)
    return collectives.collective_s(kind, total_bytes, n, acc.scale_up_link_bytes_per_s)


_validate.guard_module(globals())
