"""shardbook.overlap against hand derivations: the collective matmul's step
times, and FSDP's prefetch on two streams."""

import pytest

from shardbook import collectives, overlap


def test_collective_matmul_by_hand():
    # 8 devices, x [1024, 512] by rows, W [512, 1024] by columns, 1 TFLOP/s,
    # 1 GB/s links, 2-byte elements: a step multiplies 128 rows by a 512 x 128
    # block, 2·128·512·128 = 16,777,216 FLOPs = 16.777 µs; a hop moves
    # 128·512·2 = 131,072 bytes = 131.072 µs.
    r = overlap.collective_matmul_s(1024, 512, 1024, 8, 1e12, 1e9)
    assert r.step_math_s == pytest.approx(16.777216e-6)
    assert r.step_transfer_s == pytest.approx(131.072e-6)
    assert r.serial_s == pytest.approx(7 * 131.072e-6 + 8 * 16.777216e-6)
    assert r.overlapped_s == pytest.approx(16.777216e-6 + 7 * 131.072e-6)
    # the hops are the ring all-gather's bytes, one chunk at a time
    assert r.transfer_s == pytest.approx(collectives.all_gather_s(1024 * 512 * 2, 8, 1e9))
    # transfer-bound: the decomposition hides exactly the math it runs beside
    assert r.exposed_transfer_s == pytest.approx(r.transfer_s - 7 * r.step_math_s)


def test_a_compute_bound_collective_matmul_hides_every_hop():
    r = overlap.collective_matmul_s(1024, 512, 1024, 8, 1e12, 1e12)  # hops of 0.131 µs
    assert r.step_transfer_s < r.step_math_s
    assert r.overlapped_s == pytest.approx(8 * r.step_math_s)
    assert r.hidden_fraction == pytest.approx(1.0)


def test_fsdp_without_prefetch_waits_for_every_collective():
    """Prefetch 0: nothing overlaps, so the step is every gather (two per
    layer), every reduce-scatter and every matmul end to end."""
    step = overlap.fsdp_step(4, forward_s=1.0, backward_s=2.0, gather_s=0.8, reduce_scatter_s=0.5, prefetch=0)
    assert step.step_s == pytest.approx(4 * (1.0 + 2.0) + 4 * (2 * 0.8 + 0.5))
    assert step.exposed_comm_s == pytest.approx(4 * (2 * 0.8 + 0.5))


def test_fsdp_prefetch_leaves_the_first_gathers_and_the_last_reduce_scatter_exposed():
    """Prefetch 1 with collectives shorter than the math: every gather hides
    behind the layer before, except the first of each pass (nothing runs
    before it), and the last reduce-scatter has no math after it: the
    reduction tail at the end of the step."""
    step = overlap.fsdp_step(4, forward_s=1.0, backward_s=2.0, gather_s=0.8, reduce_scatter_s=0.5, prefetch=1)
    assert step.exposed_comm_s == pytest.approx(0.8 + 0.8 + 0.5)
    comm = [o for o in step.ops if o.stream == "comm"]
    assert [o.kind for o in comm].count("gather") == 8 and [o.kind for o in comm].count("reduce_scatter") == 4
    # one collective at a time on the communication stream, one matmul at a time on compute
    for stream in ("comm", "compute"):
        ops = [o for o in step.ops if o.stream == stream]
        assert all(a.end_s <= b.start_s + 1e-12 for a, b in zip(ops, ops[1:], strict=False))


def test_fsdp_prefetch_cannot_hide_collectives_longer_than_the_math():
    step = overlap.fsdp_step(4, forward_s=0.5, backward_s=1.0, gather_s=2.0, reduce_scatter_s=2.0, prefetch=2)
    comm_total = 4 * (2 * 2.0 + 2.0)
    # The communication stream is busy throughout but once: its forward gathers
    # end at 8.0 s (four of 2 s), while the backward gathers wait for the last
    # forward, which ends at 8.5 s (its gather at 8.0 plus 0.5 s of math).
    # Everything after runs behind the stream, the last reduce-scatter last.
    assert step.step_s == pytest.approx(comm_total + 0.5)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (dict(n_layers=0), "n_layers: must be >= 1, got 0"),
        (dict(gather_s=-1.0), r"gather_s: must be >= 0 and finite, got -1.0"),
        (dict(prefetch=-1), "prefetch: must be >= 0, got -1"),
    ],
)
def test_fsdp_step_refuses_bad_input_by_name(kwargs, message):
    args = dict(n_layers=2, forward_s=1.0, backward_s=2.0, gather_s=0.5, reduce_scatter_s=0.5, prefetch=1) | kwargs
    with pytest.raises(ValueError, match=message):
        overlap.fsdp_step(**args)


def test_collective_matmul_refuses_a_split_that_does_not_divide():
    with pytest.raises(ValueError, match=r"n: must divide rows \(1020\) and d_ff \(1024\), got 8"):
        overlap.collective_matmul_s(1020, 512, 1024, 8, 1e12, 1e9)


def test_fsdp_step_refuses_a_model_too_deep_to_simulate():
    with pytest.raises(ValueError, match="n_layers: the simulator handles at most 2,000 layers"):
        overlap.fsdp_step(10**6, 1.0, 2.0, 0.5, 0.5)
