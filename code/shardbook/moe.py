"""Token dispatch volume for expert parallelism. Rows are perfectly packed:
no indices, capacity padding or load imbalance. Ref: scale-your-model-amd."""

from . import _validate


def routed_bytes_per_device(tokens_per_device, top_k, d_model, bytes_per_element):
    """Bytes of routed rows one device holds for one layer's dispatch:
    tokens · k · D · s."""
    _validate.non_negative("tokens_per_device", tokens_per_device)
    _validate.count("top_k", top_k)
    _validate.count("d_model", d_model)
    _validate.positive("bytes_per_element", bytes_per_element)
    return tokens_per_device * top_k * d_model * bytes_per_element


def remote_bytes_per_device(tokens_per_device, top_k, d_model, bytes_per_element, ep):
    """The off-rank part of one dispatch (or combine) with experts spread
    evenly over `ep` ranks: routed bytes · (ep−1)/ep."""
    _validate.count("ep", ep)
    return routed_bytes_per_device(tokens_per_device, top_k, d_model, bytes_per_element) * (ep - 1) / ep


_validate.guard_module(globals())
