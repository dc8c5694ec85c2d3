"""Pipeline schedules: the simulated timelines agree with the closed forms.
Ref: huang2019gpipe, narayanan2021megatron, distributed-training-notes."""

import pytest

from shardbook import pipeline


def test_gpipe_and_1f1b_bubbles_match_the_formula():
    """Every p <= 8 and m <= 16, as chapter 6 says (a sample of 40 pairs once)."""
    for p in range(1, 9):
        for m in range(1, 17):
            for kind in ("gpipe", "1f1b"):
                ops = pipeline.schedule(kind, p, m)
                simulated = pipeline.simulated_bubble_fraction(ops, p)
                assert simulated == pytest.approx(pipeline.bubble_fraction(p, m)), (kind, p, m)


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


@pytest.mark.parametrize("p", range(1, 9))
def test_zero_bubble_reaches_zb_h1_at_1f1b_memory(p):
    """ZB-H1 (qi2024zerobubble): (p-1)/(3m + p-1) idle with F, B and W of one
    unit each, while no device holds more than p microbatches, 1F1B's peak.
    Hand check for p=4, m=8: 3 idle units against 24 of work, 3/27."""
    for m in range(p, 17):
        ops = pipeline.schedule("zero_bubble", p, m)
        assert pipeline.simulated_bubble_fraction(ops, p) == pytest.approx(pipeline.zb_h1_bubble_fraction(p, m))
        assert max(pipeline.held_activations(ops)) == p
    assert pipeline.zb_h1_bubble_fraction(4, 8) == pytest.approx(3 / 27)


def test_zb_h1_closed_form_refuses_fewer_microbatches_than_stages():
    # one microbatch on two stages: F, F, B, B, W in a chain of 5 units for
    # 3 units of work per device, idle 2/5, not the formula's 1/4
    ops = pipeline.schedule("zero_bubble", 2, 1)
    assert pipeline.simulated_bubble_fraction(ops, 2) == pytest.approx(2 / 5)
    with pytest.raises(ValueError, match="ZB-H1 closed form needs at least n_stages=2 microbatches, got 1"):
        pipeline.zb_h1_bubble_fraction(2, 1)


def test_interleaved_runs_as_megatron_1f1b_not_all_forwards_first():
    """Device 0 of p=4, v=2, m=8 issues (v-1)·p + 2·(p-1) = 10 chunk forwards
    then one forward and one backward six times; its first backward comes
    before its last forward."""
    ops = [o for o in pipeline.schedule("interleaved", 4, 8, 2) if o.device == 0]
    phases = "".join(o.phase for o in ops)
    assert phases == "F" * 10 + "FB" * 6 + "B" * 10
    assert pipeline.held_activations(pipeline.schedule("interleaved", 4, 8, 2), 2) == [5.5, 4.5, 3.5, 2.5]


@pytest.mark.parametrize("p", range(1, 9))
def test_held_activations_match_the_closed_forms(p):
    """GPipe holds all m, 1F1B min(p, m) on the first device; interleaved
    p·(1 + (p-1)/(p·v)) (korthikanti2022reducing, section 4.2.3) once m·v
    exceeds the warm-up; zero bubble p."""
    for m in range(1, 17):
        for kind, virtuals in (("gpipe", [1]), ("1f1b", [1]), ("zero_bubble", [1]), ("interleaved", [2, 3, 4])):
            for v in virtuals:
                if kind == "zero_bubble" and m < p or kind == "interleaved" and m % p:
                    continue
                peaks = pipeline.held_activations(pipeline.schedule(kind, p, m, v), v)
                assert peaks[0] == max(peaks) == pytest.approx(pipeline.first_stage_activations(kind, p, m, v))
    if p > 1:
        assert pipeline.first_stage_activations("interleaved", p, 4 * p, 2) == pytest.approx(
            p * (1 + (p - 1) / (2 * p))
        )
    with pytest.raises(ValueError, match="Megatron's, for m a multiple of n_stages=4, got 6"):
        pipeline.first_stage_activations("interleaved", 4, 6, 2)


def test_flush_tail():
    # a 0.25 s reduction behind a 0.2 s last backward leaves 0.05 s on stage 0;
    # stage 1 has one more backward step of drain and hides it all
    assert pipeline.flush_tail_s(0.25, 0.2) == pytest.approx(0.05)
    assert pipeline.flush_tail_s(0.25, 0.2, stage=1) == 0
    with pytest.raises(ValueError, match="microbatch_backward_s"):
        pipeline.flush_tail_s(0.25, 0)
    with pytest.raises(ValueError, match="stage: must be >= 0"):
        pipeline.flush_tail_s(0.25, 0.2, stage=-1)


def test_flush_tail_with_layer_buckets_always_exposes_the_last_bucket():
    """Review ch4-6 I1: a layer's bucket starts only after that layer's
    backward, and stage 0's first layer finishes last, so its bucket R/n is
    exposed however well the rest hides: max(R/n, R - b + b/n)."""
    r, b = 0.252, 0.256  # Llama 3 405B's stage, ch 6: R and b nearly match
    assert pipeline.flush_tail_s(r, b) == 0  # the unbucketed limit
    assert pipeline.flush_tail_s(r, b, n_buckets=8) == pytest.approx(r / 8)
    assert pipeline.flush_tail_s(0.25, 0.2, n_buckets=5) == pytest.approx(0.25 - 0.2 + 0.2 / 5)
    for n in (1, 2, 8, 64):
        for rr in (0.0, 0.1, 0.25, 0.5):
            got = pipeline.flush_tail_s(rr, 0.2, n_buckets=n)
            assert got == pytest.approx(max(rr / n, rr - 0.2 + 0.2 / n))
            assert got >= pipeline.flush_tail_s(rr, 0.2)  # buckets never beat the limit
    # a later stage has the drain to hide behind
    assert pipeline.flush_tail_s(r, b, stage=1, n_buckets=8) == 0
    with pytest.raises(ValueError, match="n_buckets"):
        pipeline.flush_tail_s(r, b, n_buckets=0)


def test_fewer_stages_do_not_expose_the_flush_tail():
    """Review ch4-6 W1: gradient bytes and a microbatch's backward both scale
    with the parameters per GPU, so R/b is independent of the stage count;
    only the microbatch (tokens per backward) moves it."""
    from shardbook import collectives, hardware, models

    h100 = hardware.get("H100")
    params = models.param_count(models.get("LLaMA-3 405B"))
    c = h100.bf16_dense_flops_per_s * 0.41

    def r_over_b(pp, dp, tokens):
        per_gpu = params / (pp * 8)
        r = collectives.reduce_scatter_s(4 * per_gpu, dp, h100.scale_out_bytes_per_s)
        return r / (4 * per_gpu * tokens / c)

    assert r_over_b(8, 256, 8192) == pytest.approx(r_over_b(16, 128, 8192), rel=0.01)
    assert r_over_b(16, 128, 4096) == pytest.approx(2 * r_over_b(16, 128, 8192))


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
