"""Pipeline bubbles for p equal stages, m microbatches and v virtual stages
per device (interleaving). Ref: huang2019gpipe, narayanan2021megatron,
distributed-training-notes."""

from . import _validate


def _args(n_stages, n_microbatches, n_virtual):
    _validate.count("n_stages", n_stages)
    _validate.count("n_microbatches", n_microbatches)
    _validate.count("n_virtual", n_virtual)


def bubble_overhead(n_stages, n_microbatches, n_virtual=1):
    """Idle time relative to useful work: (p−1)/(v·m)."""
    _args(n_stages, n_microbatches, n_virtual)
    return (n_stages - 1) / (n_virtual * n_microbatches)


def bubble_fraction(n_stages, n_microbatches, n_virtual=1):
    """Idle share of elapsed time: (p−1)/(v·m + p−1); always in [0, 1)."""
    _args(n_stages, n_microbatches, n_virtual)
    return (n_stages - 1) / (n_virtual * n_microbatches + n_stages - 1)


def boundary_bytes_per_token(d_model, bytes_per_element=2):
    """Bytes one token's activation carries across a stage boundary (D
    elements; the same again for its gradient on the way back)."""
    _validate.count("d_model", d_model)
    _validate.positive("bytes_per_element", bytes_per_element)
    return d_model * bytes_per_element
