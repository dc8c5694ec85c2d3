"""Online softmax and causal load balance. Source: distributed-training-notes
(worked example; 16 positions on 8 ranks), dao2022flashattention, liu2023ring."""

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardbook import attention, training


def test_worked_example():
    # Block A: one key with score ln 3; block B: one key with score 0; both values 6.
    a = attention.block_state([math.log(3)], [(6.0,)])
    b = attention.block_state([0.0], [(6.0,)])
    merged = attention.merge(a, b)
    assert merged.m == pytest.approx(math.log(3))
    assert math.exp(0 - merged.m) == pytest.approx(1 / 3)
    assert merged.l == pytest.approx(4 / 3)
    assert merged.u[0] == pytest.approx(8)
    assert attention.output(merged)[0] == pytest.approx(6)
    assert attention.output(attention.merge(b, a))[0] == pytest.approx(6)


def _full_softmax(scores, values):
    valid = [(s, v) for s, v in zip(scores, values, strict=True) if s != -math.inf]
    m = max(s for s, _ in valid)
    w = [math.exp(s - m) for s, _ in valid]
    return tuple(sum(wi * v[i] for wi, (_, v) in zip(w, valid, strict=True)) / sum(w) for i in range(len(values[0])))


scores_st = st.one_of(st.floats(-20, 20), st.just(-math.inf))


@given(
    st.lists(st.tuples(scores_st, st.floats(-5, 5), st.floats(-5, 5)), min_size=1, max_size=12),
    st.integers(1, 4),
    st.randoms(),
)
def test_blockwise_equals_full_softmax_in_any_order(keys, block_size, rnd):
    if all(s == -math.inf for s, _, _ in keys):
        keys = [(0.0, 1.0, 2.0)] + keys
    scores = [s for s, _, _ in keys]
    values = [(x, y) for _, x, y in keys]
    blocks = [(scores[i : i + block_size], values[i : i + block_size]) for i in range(0, len(keys), block_size)]
    rnd.shuffle(blocks)
    got = attention.attend_blocks(blocks)
    want = _full_softmax(scores, values)
    assert got == pytest.approx(want, rel=1e-9, abs=1e-9)


def test_guarded_first_block_and_empty_rows():
    masked = ([-math.inf, -math.inf], [(1.0,), (2.0,)])
    real = ([0.5], [(3.0,)])
    assert attention.attend_blocks([masked, real]) == pytest.approx((3.0,))
    assert attention.attend_blocks([masked]) == (0.0,)
    with pytest.raises(ValueError, match="no valid key"):
        attention.attend_blocks([masked], empty="error")
    with pytest.raises(ValueError, match="empty: unknown value 'nan'"):
        attention.attend_blocks([masked], empty="nan")


def test_causal_load_balance_16_positions_8_ranks():
    contiguous = attention.causal_pairs_per_rank(16, 8, "contiguous")
    zigzag = attention.causal_pairs_per_rank(16, 8, "zigzag")
    assert min(contiguous) == 3 and max(contiguous) == 31
    assert zigzag == [17] * 8
    assert sum(contiguous) == sum(zigzag) == 136
    owned = sorted(itertools.chain.from_iterable(attention.causal_owners(16, 8, "zigzag")))
    assert owned == list(range(1, 17))
    with pytest.raises(ValueError, match="zigzag needs a multiple of 2·n_ranks"):
        attention.causal_owners(12, 8, "zigzag")


def test_dp_loss_scale_gives_the_token_mean():
    # two replicas with 3 and 5 valid tokens, per-token losses 1..8
    losses = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0, 8.0]]
    scale = training.dp_loss_scale(2, 8)
    averaged = sum(scale * sum(r) for r in losses) / 2  # what an averaging all-reduce returns
    assert averaged == pytest.approx(sum(sum(r) for r in losses) / 8)
    naive = sum(sum(r) / len(r) for r in losses) / 2
    assert naive != pytest.approx(averaged)
