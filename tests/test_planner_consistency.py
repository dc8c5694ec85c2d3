"""One rule per fact across the cost model and the planner: the ZeRO stage
every path accepts (memory.check_zero: the planner, memory's state
breakdown and the published-run records used three different checks), and
ZeRO-3 over the data-parallel ranks priced as what it is, FSDP over them.
Ref: rajbhandari2020zero."""

import dataclasses

import pytest

from shardbook import explorer, measured, memory

MESSAGE = r"zero: must be one of 0, 1, 2, 3 \(the ZeRO stage over the data-parallel ranks, an integer\), got "


def _paths(zero):
    """Every entry point that takes a ZeRO stage, called with `zero`."""
    run = measured.PUBLISHED_RUNS[0]
    return {
        "memory.state_breakdown_bytes": lambda: memory.state_breakdown_bytes(1e9, "megatron", zero=zero, zero_shards=8),
        "explorer.evaluate": lambda: explorer.evaluate("LLaMA-3 8B", "H100", {"dp": 8}, 2**20, zero=zero),
        "measured.PublishedRun": lambda: dataclasses.replace(run, zero=zero),
    }


@pytest.mark.parametrize("zero", [True, False, 1.0, 0.0, "1", 4, -1, None, 1.5])
def test_every_path_rejects_what_is_not_a_stage_with_one_message(zero):
    """A bool, a float (even 1.0), a string, or a stage outside 0-3 is
    refused by every path with the same message. Before, memory accepted 1.0
    (1.0 in (0, 1, 2, 3)) where the planner refused it, and a published-run
    record accepted True and 1.0; the three messages differed."""
    for name, call in _paths(zero).items():
        with pytest.raises(ValueError, match=MESSAGE) as caught:
            call()
        assert repr(zero) in str(caught.value), name


def test_numpy_integers_are_stages_on_every_path():
    """A numpy integer (a mesh degree read from an array) is a stage on
    every path, as _validate.count takes numpy integers; it comes back as an
    int. Before, the planner refused np.int64(1) while memory accepted it;
    and memory took numpy's True (np.True_ == 1), which is no stage."""
    np = pytest.importorskip("numpy")
    assert memory.check_zero(np.int64(1)) == 1 and type(memory.check_zero(np.int64(1))) is int
    assert memory.state_breakdown_bytes(1e9, zero=np.int32(2), zero_shards=8) == memory.state_breakdown_bytes(
        1e9, zero=2, zero_shards=8
    )
    as_numpy = explorer.evaluate("LLaMA-3 8B", "H100", {"dp": 8}, 2**20, zero=np.int64(1))
    as_int = explorer.evaluate("LLaMA-3 8B", "H100", {"dp": 8}, 2**20, zero=1)
    assert type(as_numpy.zero) is int
    assert as_numpy.memory_breakdown == as_int.memory_breakdown
    assert as_numpy.expected_step_s == as_int.expected_step_s
    assert type(dataclasses.replace(measured.PUBLISHED_RUNS[0], zero=np.int64(1)).zero) is int
    for name, call in _paths(np.True_).items():
        with pytest.raises(ValueError, match=MESSAGE):
            call()
        assert name


@pytest.mark.parametrize("keep", [False, True])
def test_zero_3_over_dp_is_fsdp_over_the_same_ranks(keep):
    """ZeRO-3 over eight data-parallel ranks shards the weights, gradients
    and optimizer state over them and gathers each layer's weights for the
    forward and the backward: what an fsdp axis of eight does. The planner
    must count the same memory (gather buffers included: the layer being
    computed and the next, or the whole stage with keep_gathered_weights)
    and the same step times. Before, ZeRO-3 over dp kept no gather buffer
    and re-gathered every microbatch even with keep_gathered_weights."""
    options = dict(seq_len=8192, micro_batch_seqs=1, recompute="full", keep_gathered_weights=keep)
    fsdp = explorer.evaluate("LLaMA-3 8B", "H100", {"fsdp": 8}, 2**20, zero=0, **options)
    zero3 = explorer.evaluate("LLaMA-3 8B", "H100", {"dp": 8}, 2**20, zero=3, **options)
    assert zero3.memory_breakdown["gathered_weight_buffers"] > 0
    for key, value in fsdp.memory_breakdown.items():
        assert zero3.memory_breakdown[key] == pytest.approx(value, rel=1e-12), key
    assert zero3.step_s == pytest.approx(fsdp.step_s, rel=1e-12)
    assert zero3.expected_step_s == pytest.approx(fsdp.expected_step_s, rel=1e-12)


def test_gather_buffers_hold_only_the_weights_a_device_gathers():
    """With dense weights sharded over ep (MaxText's rule) and no fsdp axis,
    a device gathers the dense weights over ep but keeps its own experts:
    the buffers hold two layers of dense weights (BF16), no expert. Before,
    any sharding counted the experts' full weights in the buffers too
    (Mixtral 8x7B over ep 8: 0.905 GB where 0.201 GB is gathered). The two
    layers are transformer layers: the embedding, the output layer and the
    final norm are not a layer's weights (the embedding's whole gradient is
    the vocabulary buffers' term)."""
    from shardbook import models

    m = models.get("Mixtral 8x7B")
    ends = 2 * m.vocab_size * m.d_model + m.d_model  # the embedding, the output layer and the final norm
    dense = models.param_count(m) - models.routed_expert_param_count(m) - ends
    c = explorer.evaluate("Mixtral 8x7B", "H100", {"ep": 8}, 2**20, seq_len=4096, micro_batch_seqs=1, recompute="full")
    assert c.memory_breakdown["gathered_weight_buffers"] == pytest.approx(2 * 2 * dense / m.n_layers, rel=1e-12)


@pytest.mark.parametrize("name", ["H100", "H800", "A100", "MI300X"])
@pytest.mark.parametrize("kind", ["all_reduce", "reduce_scatter", "all_gather"])
@pytest.mark.parametrize("calibrated", [False, True])
def test_a_group_split_into_axes_costs_what_the_same_group_costs_as_one_axis(name, kind, calibrated):
    """Sixteen GPUs, eight in each of two nodes, are one group whether the
    mesh names them as one axis or as an axis of 8 inside the node times an
    axis of 2 across (dp over cp, dense weights over ep): the fabric prices
    it once, its in-node and cross-node phases pipelined
    (fabric.collective_s). Before, the planner added the axes' phases
    (1.3-1.9 times the one-axis price on these presets); and four GPUs of a
    node as 2 × 2 paid a reduce-scatter plus an all-reduce where NVLink
    SHARP reduces all four at once."""
    from shardbook import hardware
    from shardbook.planner import placement, timing

    acc = hardware.get(name)
    cases = [
        (placement.Placement(16, 2, 8), [placement.Placement(8, 1, 8), placement.Placement(2, 2, 1)]),
        (placement.Placement(4, 1, 4), [placement.Placement(2, 1, 2), placement.Placement(2, 1, 2)]),
    ]
    for whole, axes in cases:
        one = timing.collective_s(acc, kind, 1e9, whole, 3, calibrated=calibrated)
        assert timing.multi_axis_s(acc, kind, 1e9, axes, 3, calibrated=calibrated) == pytest.approx(one, rel=1e-12)


def _deepseek(mesh=None, **changes):
    """The planner on DeepSeek-V3's run (its own options), with `changes`."""
    run = next(r for r in measured.PUBLISHED_RUNS if r.model == "DeepSeek-V3")
    options = dict(explorer.run_options(run), ideal_overlap=True, precision="bf16")
    options = {k: v for k, v in dict(options, **changes).items() if v is not None}
    return explorer.evaluate(run.model, run.accelerator, mesh or run.mesh, run.global_tokens, **options)


def test_the_planner_counts_the_expert_exchange_bytes_as_moe_does():
    """DeepSeek-V3 dispatches in FP8 and sends the backward's activation
    gradients (the dispatch direction) in FP8 too, combining in BF16, to at
    most 4 of its 8 nodes (deepseek2024v3 §3.2, §3.3.3): the bytes that
    cross the NICs fall to moe.scale_out_exchange_bytes_per_token's share,
    0.375 (4 of 8 copies, 3 of 4 bytes per element), and the planner's
    exchange time, linear in those bytes, by the same share. Before, the
    planner sent only the forward dispatch in FP8 (0.4375), while chapter 5
    said it prices what moe counts."""
    from shardbook import models, moe

    ds = models.get("DeepSeek-V3")
    share = moe.scale_out_exchange_bytes_per_token(
        ds.d_model, ds.top_k, 8, max_nodes=4, dispatch_bytes_per_element=1
    ) / moe.scale_out_exchange_bytes_per_token(ds.d_model, ds.top_k, 8)
    assert share == pytest.approx(0.375)
    unrestricted = _deepseek(routing_node_limit=None, fp8_dispatch=False)
    own = _deepseek()
    assert own.ep_s / unrestricted.ep_s == pytest.approx(share, rel=1e-9)


def test_a_node_limit_above_the_node_count_sends_one_copy_per_node():
    """With expert parallelism over 2 nodes (ep 16 of 8-GPU nodes) a limit
    of 4 nodes cannot bind: a top-8 token sends one copy to each node its
    experts sit on, at most 2 (moe: min(top_k, limit, nodes) copies), a
    quarter of the unrestricted 8. Before, the planner sent 4 of 8."""
    mesh = {"pp": 16, "ep": 16, "dp": 8}
    limited = _deepseek(mesh, routing_node_limit=4, fp8_dispatch=False)
    unrestricted = _deepseek(mesh, routing_node_limit=None, fp8_dispatch=False)
    assert limited.ep_s / unrestricted.ep_s == pytest.approx(2 / 8, rel=1e-9)


@pytest.mark.parametrize("name, ratio", [("H100", 14 / 9), ("H800", 1.0)])
def test_sequence_parallel_tp_pays_the_ring_not_the_in_switch_reduction(name, ratio):
    """With sequence parallelism Megatron's TP collectives are a
    reduce-scatter and an all-gather, not an all-reduce
    (korthikanti2022reducing); NVLink SHARP does not make those faster (an
    NVLS reduce-scatter sends the whole buffer out: nccl-nvls), so they pay
    the ring's 2·(n−1)/n·V per all-reduce equivalent, where an all-reduce
    without sequence parallelism gets the switch's (n+1)/n·V: 14/9 as much
    on an 8-GPU H100 node. On H800 (no NVLink SHARP) both pay the ring.
    Before, the planner gave every TP collective the switch's price."""
    options = dict(seq_len=8192, micro_batch_seqs=1, recompute="selective")
    with_sp = explorer.evaluate("LLaMA-3 8B", name, {"tp": 8, "dp": 8}, 2**22, sequence_parallel=True, **options)
    without = explorer.evaluate("LLaMA-3 8B", name, {"tp": 8, "dp": 8}, 2**22, sequence_parallel=False, **options)
    assert with_sp.tp_s / without.tp_s == pytest.approx(ratio, rel=1e-9)


def test_a_group_on_two_torus_dimensions_costs_the_same_as_one_or_two_axes():
    """On a TPU torus, 64 chips over a wrapped 16-chip dimension and a
    wrapped 4-chip one drive both dimensions' links at once whether the mesh
    names them as one axis (fabric.collective_s with torus_extents (16, 4))
    or as two (fsdp over the first, ep over the second): a collective over
    several axes uses the links of each (scaling-book-sharding). Before, the
    planner ran one phase per axis, twice the one-axis price."""
    from shardbook import fabric, hardware
    from shardbook.planner import placement, timing

    acc = hardware.get("TPU v5p")
    first = placement.Placement(16, 1, 16, torus_links=2.0, torus_span=((0, 16, True),))
    second = placement.Placement(4, 1, 4, torus_links=2.0, torus_span=((1, 4, True),))
    for kind in ("all_gather", "reduce_scatter", "all_reduce"):
        one = fabric.collective_s(kind, 1e9, acc, 64, 1, torus_extents=(16, 4), wraparound=True)
        assert timing.multi_axis_s(acc, kind, 1e9, [first, second]) == pytest.approx(one, rel=1e-12)
