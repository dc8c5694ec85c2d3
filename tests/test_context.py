"""Context parallelism three ways and the attention/MLP crossover, against
hand derivations. Ref: liu2023ring, dubey2024llama3, jacobs2023ulysses."""

import pytest

from shardbook import context, models


def test_ring_and_all_gather_move_the_same_bytes():
    # S=1024, 8 K/V heads of 64, 8 ranks, float32: each rank sends the other
    # 7 chunks of 128 rows of K and of V: 7 · 2 · 128 · 8 · 64 · 4 bytes
    assert context.kv_exchange_bytes_per_rank(1024, 8, 64, 8, 4) == 7 * 2 * 128 * 8 * 64 * 4 == 3_670_016
    # the gathered K and V of one layer: 2 · S · H_kv · Q · bytes
    assert context.gathered_kv_bytes(1024, 8, 64, 4) == 2 * 1024 * 8 * 64 * 4


def test_ulysses_bytes_and_its_head_limit():
    # four all-to-alls of [128, 8, 64] float32, each sending 7/8 of it
    assert context.ulysses_bytes_per_rank(1024, 8, 8, 64, 8, 4) == 4 * 7 * 128 * 64 * 4 == 917_504
    # with MHA it sends 2/n of the ring's bytes
    ratio = context.ulysses_bytes_per_rank(1024, 8, 8, 64, 8, 4) / context.kv_exchange_bytes_per_rank(1024, 8, 64, 8, 4)
    assert ratio == pytest.approx(2 / 8)
    # LLaMA-3 70B (64 heads, 8 K/V heads, Q 128) at 128K on 8 ranks, BF16: Q
    # and the output make it more than the ring's: 144 vs 128 units
    m = models.get("LLaMA-3 70B")
    ulysses = context.ulysses_bytes_per_rank(131072, m.n_heads, m.n_kv_heads, m.head_dim, 8)
    ring = context.kv_exchange_bytes_per_rank(131072, m.n_kv_heads, m.head_dim, 8)
    assert ulysses / ring == pytest.approx((2 * 64 + 2 * 8) / (2 * 8 * 8))
    with pytest.raises(
        ValueError, match="n_kv_heads: head scattering splits heads over n_ranks=16, which must divide 8"
    ):
        context.ulysses_bytes_per_rank(131072, m.n_heads, m.n_kv_heads, m.head_dim, 16)


def test_sequences_must_split_evenly():
    with pytest.raises(ValueError, match="seq_len: 1000 tokens do not split evenly over n_ranks=16"):
        context.kv_exchange_bytes_per_rank(1000, 8, 128, 16)


@pytest.mark.parametrize(
    "name,expected",
    [("LLaMA-3 8B", 3 * 14336), ("LLaMA-3 70B", 3 * 28672), ("LLaMA-3 405B", 3 * 53248)],
)
def test_causal_scores_match_the_mlp_at_three_f(name, expected):
    # H·d_h = D for these models: 18·D·F = 6·D·S gives S = 3F
    m = models.get(name)
    assert m.n_heads * m.head_dim == m.d_model
    assert context.attention_overtakes_mlp_seq_len(m) == pytest.approx(expected)
    assert context.attention_overtakes_mlp_seq_len(m, causal=False) == pytest.approx(expected / 2)


def test_flop_terms_by_hand():
    m = models.get("LLaMA-3 70B")
    assert context.score_flops_per_token(m, 8192) == 12 * 64 * 128 * 8192 / 2
    assert context.mlp_flops_per_token(m) == 18 * 8192 * 28672
    # an MoE layer counts its k routed experts: Mixtral 8x7B, top-2 of width 14,336
    mixtral = models.get("Mixtral 8x7B")
    assert context.mlp_flops_per_token(mixtral) == 18 * 4096 * 14336 * 2
