"""Context parallelism three ways, and when attention outweighs the MLP.

The sequence of S tokens is split over n ranks. Each rank's queries need
every earlier key and value, which arrive one of three ways:

- ring attention: K and V chunks travel around the ring, n−1 hops, each
  merged into an online softmax (shardbook.attention; liu2023ring);
- all-gather of K and V: every rank gathers the whole K and V once per
  layer, as Llama 3 trains at long context (dubey2024llama3);
- head scattering (DeepSpeed-Ulysses): an all-to-all turns a sequence
  shard of every head into the whole sequence of H/n heads, attention runs
  locally, and a second all-to-all turns it back (jacobs2023ulysses).

Bytes are per rank and per layer, forward only (the backward moves the
same again, and the gradients of K and V travel back). Standard library only.
"""

from . import _validate, models


def _sizes(seq_len, n_ranks, head_dim, bytes_per_element):
    _validate.count("seq_len", seq_len)
    _validate.count("n_ranks", n_ranks)
    _validate.count("head_dim", head_dim)
    _validate.positive("bytes_per_element", bytes_per_element)
    if seq_len % n_ranks:
        raise ValueError(f"seq_len: {seq_len} tokens do not split evenly over n_ranks={n_ranks}")


def kv_exchange_bytes_per_rank(seq_len, n_kv_heads, head_dim, n_ranks, bytes_per_element=2):
    """Bytes each rank sends so that its queries see every K and V: the
    other n−1 ranks' chunks of both, (n−1)/n · 2·S·H_kv·Q·bytes. Ring
    attention (n−1 hops of one chunk) and one all-gather of K and V move
    exactly this; they differ in when the bytes can hide and in memory (the
    all-gather holds the whole K and V, see gathered_kv_bytes)."""
    _sizes(seq_len, n_ranks, head_dim, bytes_per_element)
    _validate.count("n_kv_heads", n_kv_heads)
    chunk = seq_len // n_ranks * n_kv_heads * head_dim * bytes_per_element
    return (n_ranks - 1) * 2 * chunk


def gathered_kv_bytes(seq_len, n_kv_heads, head_dim, bytes_per_element=2):
    """K and V of the whole sequence for one layer, 2·S·H_kv·Q·bytes: what
    every rank holds during attention when it gathers them (a ring holds
    two chunks, 2/n of it)."""
    _validate.count("seq_len", seq_len)
    _validate.count("n_kv_heads", n_kv_heads)
    _validate.count("head_dim", head_dim)
    _validate.positive("bytes_per_element", bytes_per_element)
    return 2 * seq_len * n_kv_heads * head_dim * bytes_per_element


def ulysses_bytes_per_rank(seq_len, n_heads, n_kv_heads, head_dim, n_ranks, bytes_per_element=2):
    """Bytes each rank sends in head scattering: all-to-alls of Q, K, V and
    the output, each keeping 1/n of its local S/n rows at home:
    (n−1)/n · (S/n)·Q·bytes · (2·H + 2·H_kv). The heads are what is split,
    so n must divide H and H_kv (with fewer K/V heads than ranks they are
    replicated first, which this formula does not price)."""
    _sizes(seq_len, n_ranks, head_dim, bytes_per_element)
    _validate.count("n_heads", n_heads)
    _validate.count("n_kv_heads", n_kv_heads)
    for name, heads in (("n_heads", n_heads), ("n_kv_heads", n_kv_heads)):
        if heads % n_ranks:
            raise ValueError(f"{name}: head scattering splits heads over n_ranks={n_ranks}, which must divide {heads}")
    local_row = seq_len // n_ranks * head_dim * bytes_per_element
    # each all-to-all sends (n−1)/n of its input: exact, since n divides the heads
    return local_row * (n_ranks - 1) * ((2 * n_heads + 2 * n_kv_heads) // n_ranks)


def score_flops_per_token(model, seq_len, causal=True):
    """Training FLOPs per token and layer of the attention scores (QKᵀ and
    the product with V: 2·2·S·H·d_h forward, with H query heads of width
    d_h, times 3 with the backward),
    halved when causal, as training.model_flops_per_token counts them."""
    m = models.get(model)
    _validate.count("seq_len", seq_len)
    flops = 12 * m.n_heads * m.head_dim * seq_len
    return flops / 2 if causal else float(flops)


def mlp_flops_per_token(model):
    """Training FLOPs per token of one layer's MLP: 6 per active weight
    (3·D·F for a gated MLP, 2·D·F otherwise, times the k routed plus the
    shared experts of an MoE layer)."""
    m = models.get(model)
    matrices = 3 if m.gated_mlp else 2
    experts = m.top_k + m.n_shared_experts if m.n_experts > 1 else 1
    return 6.0 * matrices * m.d_model * m.d_ff * experts


def attention_overtakes_mlp_seq_len(model, causal=True):
    """Sequence length at which the attention scores cost as many FLOPs
    per token as the MLP: 18·D·F = 6·H·d_h·S for a dense gated causal model,
    S = 3·D·F/(H·d_h), which is 3·F when H·d_h = D."""
    m = models.get(model)
    per_token = score_flops_per_token(m, 1, causal)
    return mlp_flops_per_token(m) / per_token


_validate.guard_module(globals())
