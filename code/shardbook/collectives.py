"""Transport times of the collectives that sharding inserts.

Conventions: `total_bytes` is the size of the complete (gathered, or
pre-reduction) buffer; `link_bytes_per_s` is the one-direction bandwidth of
one link; `n` is the group size. With their defaults the functions give the
serialization term of one ring over one link, which the sources use to
illustrate; `concurrent_links` (rings or direct peer links driven at once)
and `bidirectional` (a TPU torus axis sends both ways) give what the fabric
allows. How many links a group can drive follows from where it sits on the
machine: see shardbook.fabric. Costs are bandwidth terms only: no latency,
launch or protocol overhead.
Ref: scale-your-model-amd, scaling-book-sharding, nccl-tests-performance.
"""

from typing import NamedTuple

from . import _validate

COLLECTIVE_KINDS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")

# nccl-tests' bus-bandwidth factors (busbw = algbw * factor).
_BUS_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
}


def ring_bytes_sent_per_rank(total_bytes, n):
    """Bytes each rank sends in a ring all-gather or reduce-scatter of a
    `total_bytes` buffer: (n-1) chunks of total/n."""
    _validate.non_negative("total_bytes", total_bytes)
    _validate.count("n", n)
    return total_bytes * (n - 1) / n


def all_gather_s(total_bytes, n, link_bytes_per_s, bidirectional=False, concurrent_links=1):
    """All-gather transport time: each rank receives total·(n-1)/n bytes.

    With the defaults this is the serialization term of one ring over one
    link, total·(n-1)/(n·W): the sources' illustration, not the hardware's
    floor. `concurrent_links` disjoint links (rings, or direct peer links)
    driven at once by each device divide the time; `bidirectional` (a ring
    that sends both ways, as on a TPU torus axis) halves it.
    Units: bytes, bytes/s one direction per link, seconds.
    Ref: scale-your-model-amd, scaling-book-sharding.
    """
    _validate.positive("link_bytes_per_s", link_bytes_per_s)
    _validate.count("concurrent_links", concurrent_links)
    seconds = ring_bytes_sent_per_rank(total_bytes, n) / (link_bytes_per_s * concurrent_links)
    return seconds / 2 if bidirectional else seconds


def reduce_scatter_s(total_bytes, n, link_bytes_per_s, bidirectional=False, concurrent_links=1):
    """Reduce-scatter time: the same transport term as an all-gather."""
    return all_gather_s(total_bytes, n, link_bytes_per_s, bidirectional, concurrent_links)


def all_reduce_s(total_bytes, n, link_bytes_per_s, bidirectional=False, concurrent_links=1):
    """All-reduce time: a reduce-scatter followed by an all-gather."""
    return reduce_scatter_s(total_bytes, n, link_bytes_per_s, bidirectional, concurrent_links) + all_gather_s(
        total_bytes, n, link_bytes_per_s, bidirectional, concurrent_links
    )


def in_switch_all_reduce_s(total_bytes, n, egress_bytes_per_s):
    """All-reduce when the switch does the reduction (NVLink SHARP, NCCL's
    NVLS algorithm). Each device owns 1/n of the buffer. Reduce half: it
    issues a multimem load-reduce of its slice, the switch reads that slice
    from all n devices (itself included) and returns the sum, so each
    device sends total (n slices of total/n, one per reader) and receives
    total/n. Broadcast half: it multicast-stores its reduced slice (sends
    total/n) and the switch writes every slice to every device (receives
    total). Each way, total·(n+1)/n bytes cross each device's link, against
    a ring's (or direct copies') total·2(n-1)/n: fewer for n >= 4, equal at
    n = 3, more at n = 2. The ring figure, which all_reduce_s and
    shardbook.fabric price, is therefore a bound only for algorithms in
    which the devices reduce. Units: bytes, bytes/s one direction of the
    device's egress, seconds.
    Ref: nccl-nvls (NCCL maintainers: an NVLS reduce-scatter or all-gather
    "will transmit size in one direction and 1/N*size in the other"),
    nccl-tests-nvls-allreduce (an NVLS all-reduce's algorithm bandwidth is
    the NVLink bandwidth × n/(n+1)).
    """
    _validate.non_negative("total_bytes", total_bytes)
    _validate.count("n", n)
    _validate.positive("egress_bytes_per_s", egress_bytes_per_s)
    if n == 1:
        return 0.0
    return total_bytes * (n + 1) / n / egress_bytes_per_s


def hierarchical_all_reduce_s(
    total_bytes,
    n_inner,
    n_outer,
    inner_link_bytes_per_s,
    outer_bytes_per_s,
    inner_concurrent_links=1,
    overlapped=False,
):
    """Two-tier all-reduce of a `total_bytes` buffer over n_inner × n_outer
    devices: reduce-scatter inside each node, all-reduce of the 1/n_inner
    piece across nodes (each device over its own `outer_bytes_per_s`, one
    direction), all-gather inside. Serialized it pays the sum of the three
    phases; overlapped (pipelined chunks) it cannot beat the largest, and
    since both in-node phases use the same links it pays at least their sum:
    max(reduce-scatter + all-gather inside, all-reduce across).
    Ref: scale-your-model-amd (hierarchical collectives), nccl-tests-performance.
    """
    _validate.count("n_inner", n_inner)
    _validate.count("n_outer", n_outer)
    rs_inside, across, ag_inside = hierarchical_all_reduce_phases_s(
        total_bytes, n_inner, n_outer, inner_link_bytes_per_s, outer_bytes_per_s, inner_concurrent_links
    )
    # the two in-node phases use the same links, so only the cross-node phase can hide under them
    return hierarchical_s(rs_inside + ag_inside, across, overlapped)


class AllReducePhases(NamedTuple):
    """Seconds of a hierarchical all-reduce's three phases."""

    reduce_scatter_inside_s: float
    all_reduce_across_s: float
    all_gather_inside_s: float


def hierarchical_all_reduce_phases_s(
    total_bytes, n_inner, n_outer, inner_link_bytes_per_s, outer_bytes_per_s, inner_concurrent_links=1
):
    """AllReducePhases: reduce-scatter inside, all-reduce across, all-gather
    inside, in seconds; see hierarchical_all_reduce_s."""
    _validate.positive("outer_bytes_per_s", outer_bytes_per_s)
    inside = reduce_scatter_s(total_bytes, n_inner, inner_link_bytes_per_s, concurrent_links=inner_concurrent_links)
    across = all_reduce_s(total_bytes / n_inner, n_outer, outer_bytes_per_s)
    return AllReducePhases(inside, across, inside)


def all_to_all_s(local_bytes, n, egress_bytes_per_s):
    """All-to-all lower bound: each rank sends (n-1)/n of its `local_bytes`
    off-rank through `egress_bytes_per_s` (one direction, all links it uses)."""
    _validate.non_negative("local_bytes", local_bytes)
    _validate.count("n", n)
    _validate.positive("egress_bytes_per_s", egress_bytes_per_s)
    return local_bytes * (n - 1) / n / egress_bytes_per_s


def collective_s(kind, total_bytes, n, link_bytes_per_s, bidirectional=False):
    """Dispatch on `kind` (one of COLLECTIVE_KINDS)."""
    _validate.choice("kind", kind, COLLECTIVE_KINDS)
    if kind == "all_to_all":
        return all_to_all_s(total_bytes, n, link_bytes_per_s)
    return {"all_gather": all_gather_s, "reduce_scatter": reduce_scatter_s, "all_reduce": all_reduce_s}[kind](
        total_bytes, n, link_bytes_per_s, bidirectional
    )


def bus_bandwidth(kind, algorithm_bytes_per_s, n):
    """nccl-tests' bus bandwidth from algorithm bandwidth (bytes / time):
    all_reduce x 2(n-1)/n; all_gather, reduce_scatter, all_to_all x (n-1)/n."""
    _validate.choice("kind", kind, COLLECTIVE_KINDS)
    _validate.non_negative("algorithm_bytes_per_s", algorithm_bytes_per_s)
    _validate.count("n", n)
    return algorithm_bytes_per_s * _BUS_FACTORS[kind](n)


def hierarchical_s(scale_up_s, scale_out_s, overlapped=True):
    """A two-tier collective: perfect overlap cannot beat max(up, out); a
    serialized implementation pays the sum."""
    _validate.non_negative("scale_up_s", scale_up_s)
    _validate.non_negative("scale_out_s", scale_out_s)
    return max(scale_up_s, scale_out_s) if overlapped else scale_up_s + scale_out_s


_validate.guard_module(globals())
