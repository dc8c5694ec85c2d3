"""Pipeline schedules: the simulated timelines agree with the closed forms.
Ref: huang2019gpipe, narayanan2021megatron, distributed-training-notes."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardbook import pipeline


@given(st.integers(1, 8), st.integers(1, 16))
@settings(max_examples=40, deadline=None)
def test_gpipe_and_1f1b_bubbles_match_the_formula(p, m):
    for kind in ("gpipe", "1f1b"):
        ops = pipeline.schedule(kind, p, m)
        assert pipeline.simulated_bubble_fraction(ops, p) == pytest.approx(pipeline.bubble_fraction(p, m))


@pytest.mark.parametrize("p,m,v", [(4, 8, 2), (4, 8, 4), (2, 4, 3), (8, 16, 2)])
def test_interleaving_divides_the_bubble_by_v(p, m, v):
    ops = pipeline.schedule("interleaved", p, m, v)
    assert pipeline.simulated_bubble_fraction(ops, p) == pytest.approx(pipeline.bubble_fraction(p, m, v))


def test_every_op_runs_once_and_respects_dependencies():
    p, m = 4, 6
    ops = pipeline.schedule("zero_bubble", p, m)
    assert len(ops) == 3 * p * m
    end = {(phase, dev, mb): e for dev, s, e, phase, c, mb in ops}
    start = {(phase, dev, mb): s for dev, s, e, phase, c, mb in ops}
    for dev in range(p):
        for mb in range(m):
            if dev:
                assert start[("F", dev, mb)] >= end[("F", dev - 1, mb)]
            if dev < p - 1:
                assert start[("B", dev, mb)] >= end[("B", dev + 1, mb)]
            assert start[("W", dev, mb)] >= end[("B", dev, mb)]
    assert pipeline.simulated_bubble_fraction(ops, p) < pipeline.bubble_fraction(p, m)


def test_bad_schedule_arguments():
    with pytest.raises(ValueError, match="kind: unknown value 'dualpipe'"):
        pipeline.schedule("dualpipe", 4, 8)
    with pytest.raises(ValueError, match="n_virtual: only the interleaved schedule"):
        pipeline.schedule("1f1b", 4, 8, 2)


@pytest.mark.parametrize("p", range(1, 9))
@pytest.mark.parametrize("v", [2, 3, 4])
def test_interleaving_reaches_the_closed_form_for_any_m_from_p(p, v):
    """Megatron's interleaved schedule reaches (p-1)/(v·m + p-1) for every
    m >= p, multiples of p or not (narayanan2021megatron; torch's
    Interleaved1F1B does too); the simulator must not do worse."""
    for m in range(p, 17):
        ops = pipeline.schedule("interleaved", p, m, v)
        assert pipeline.simulated_bubble_fraction(ops, p) == pytest.approx(pipeline.bubble_fraction(p, m, v))


def test_interleaving_refuses_the_closed_form_below_p_microbatches():
    # the simulated timeline for m < p idles more than the formula would say
    ops = pipeline.schedule("interleaved", 4, 3, 3)
    assert pipeline.simulated_bubble_fraction(ops, 4) > (4 - 1) / (3 * 3 + 4 - 1)
    with pytest.raises(ValueError, match="needs at least n_stages=4 microbatches"):
        pipeline.bubble_fraction(4, 3, 3)
    assert pipeline.bubble_fraction(4, 3, 1) == pytest.approx(3 / 6)


def test_the_simulator_refuses_inputs_that_would_take_seconds():
    """A live page passes the reader's p and m straight to the simulator: the
    bound is stated and refused with a message, never a frozen tab."""
    assert pipeline.MAX_SCHEDULE_SLOTS == 4096
    pipeline.schedule("interleaved", 16, 128, 2)  # exactly the bound
    with pytest.raises(ValueError, match="the simulator handles at most 4,096 .* got 16 × 128 × 4 = 8,192"):
        pipeline.schedule("interleaved", 16, 128, 4)
    with pytest.raises(ValueError, match="got 64 × 128 × 1 = 8,192"):
        pipeline.schedule("1f1b", 64, 128)
