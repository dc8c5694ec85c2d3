"""Ring costs of the collectives that sharding inserts.

Conventions: `total_bytes` is the size of the complete (gathered, or
pre-reduction) buffer; `link_bytes_per_s` is the achieved one-direction
bandwidth of one ring hop; `n` is the group size. A bidirectional ring (the TPU
ICI convention: each axis sends both ways at once) halves the time. Costs are
bandwidth terms only: no latency, launch or protocol overhead.
Ref: scale-your-model-amd, scaling-book-sharding, nccl-tests-performance.
"""

from . import _validate

KINDS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")

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


def all_gather_s(total_bytes, n, link_bytes_per_s, bidirectional=False):
    """Ring all-gather time: total*(n-1)/n / W, halved when bidirectional."""
    _validate.positive("link_bytes_per_s", link_bytes_per_s)
    seconds = ring_bytes_sent_per_rank(total_bytes, n) / link_bytes_per_s
    return seconds / 2 if bidirectional else seconds


def reduce_scatter_s(total_bytes, n, link_bytes_per_s, bidirectional=False):
    """Ring reduce-scatter time: the same transport term as an all-gather."""
    return all_gather_s(total_bytes, n, link_bytes_per_s, bidirectional)


def all_reduce_s(total_bytes, n, link_bytes_per_s, bidirectional=False):
    """Ring all-reduce time: a reduce-scatter followed by an all-gather."""
    return reduce_scatter_s(total_bytes, n, link_bytes_per_s, bidirectional) + all_gather_s(
        total_bytes, n, link_bytes_per_s, bidirectional
    )


def all_to_all_s(local_bytes, n, egress_bytes_per_s):
    """All-to-all lower bound: each rank sends L*(n-1)/n of its `local_bytes`
    off-rank through `egress_bytes_per_s` (one direction, all links it uses)."""
    _validate.non_negative("local_bytes", local_bytes)
    _validate.count("n", n)
    _validate.positive("egress_bytes_per_s", egress_bytes_per_s)
    return local_bytes * (n - 1) / n / egress_bytes_per_s


def collective_s(kind, total_bytes, n, link_bytes_per_s, bidirectional=False):
    """Dispatch on `kind` (one of KINDS)."""
    _validate.choice("kind", kind, KINDS)
    if kind == "all_to_all":
        return all_to_all_s(total_bytes, n, link_bytes_per_s)
    return {"all_gather": all_gather_s, "reduce_scatter": reduce_scatter_s, "all_reduce": all_reduce_s}[kind](
        total_bytes, n, link_bytes_per_s, bidirectional
    )


def bus_bandwidth(kind, algorithm_bytes_per_s, n):
    """nccl-tests' bus bandwidth from algorithm bandwidth (bytes / time):
    all_reduce x 2(n-1)/n; all_gather, reduce_scatter, all_to_all x (n-1)/n."""
    _validate.choice("kind", kind, KINDS)
    _validate.non_negative("algorithm_bytes_per_s", algorithm_bytes_per_s)
    _validate.count("n", n)
    return algorithm_bytes_per_s * _BUS_FACTORS[kind](n)


def hierarchical_s(scale_up_s, scale_out_s, overlapped=True):
    """A two-tier collective: perfect overlap cannot beat max(up, out); a
    serialized implementation pays the sum."""
    _validate.non_negative("scale_up_s", scale_up_s)
    _validate.non_negative("scale_out_s", scale_out_s)
    return max(scale_up_s, scale_out_s) if overlapped else scale_up_s + scale_out_s
