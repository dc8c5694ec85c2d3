"""Collectives priced by the fabric: hand derivations and physical orderings.
Ref: scale-your-model-amd, scaling-book-sharding, google-tpu-v5p."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardbook import collectives, fabric, hardware, measured
from shardbook.units import GB

MI355X_LINK = 76.8 * GB
GPU_PRESETS = [n for n in hardware.names() if hardware.get(n).family == "gpu"]
KINDS = ("all_gather", "reduce_scatter", "all_reduce")


def test_full_mesh_all_gather_uses_every_peer_link():
    """1 GB over the 8 GPUs of an MI355X board: each GPU receives 7/8 GB over
    7 links of 76.8 GB/s, so 1e9 / 8 / 76.8e9 s = 1.6276 ms; the single-ring
    term is 7/8 GB over one link, 11.393 ms, seven times longer."""
    bound = fabric.collective_s("all_gather", 1e9, "MI355X", 8)
    assert bound == pytest.approx(1e9 / 8 / MI355X_LINK)
    assert bound * 1e3 == pytest.approx(1.6276, abs=1e-4)
    ring = fabric.single_ring_s("all_gather", 1e9, "MI355X", 8)
    assert ring * 1e3 == pytest.approx(11.393, abs=1e-3)  # the source's single-ring illustration
    assert ring / bound == pytest.approx(7)


def test_full_mesh_all_to_all_is_the_sources_direct_link_bound():
    """scale-your-model-amd: EP 8 on one MI355X board, L = 805,306,368 bytes,
    every peer link active: L / (8 · 76.8 GB/s) = 1.31 ms; EP 2: one link,
    L/2 / 76.8 GB/s = 5.24 ms."""
    routed = 32_768 * 2 * 6_144 * 2
    assert fabric.collective_s("all_to_all", routed, "MI355X", 8) * 1e3 == pytest.approx(1.31, abs=0.005)
    assert fabric.collective_s("all_to_all", routed, "MI355X", 2) * 1e3 == pytest.approx(5.24, abs=0.005)


def test_switch_is_limited_by_egress():
    """H100: 18 NVLinks × 25 GB/s = 450 GB/s egress. An all-gather over 8 GPUs
    sends 7/8 of the buffer through it: 1e9 · 7/8 / 450e9 s = 1.944 ms, for a
    group of 2 as well as 8 (1e9 · 1/2 / 450e9 = 1.111 ms)."""
    assert fabric.collective_s("all_gather", 1e9, "H100", 8) == pytest.approx(1e9 * 7 / 8 / 450e9)
    assert fabric.collective_s("all_gather", 1e9, "H100", 2) == pytest.approx(1e9 / 2 / 450e9)


def test_torus_axes_and_wraparound():
    """v5p, 100 GB/s per link and direction (Google's table). A wrapped axis
    of 16: two links, 1e9 · 15/16 / (2 · 100e9) s; without wraparound the end
    chip has one link, twice as long (scaling-book-tpus: no wraparound
    "typically doubles the time"); a 4 × 4 group on two wrapped axes has four."""
    one_axis = fabric.collective_s("all_gather", 1e9, "TPU v5p", 16)
    assert one_axis == pytest.approx(1e9 * 15 / 16 / (2 * 100e9))
    assert one_axis == pytest.approx(collectives.all_gather_s(1e9, 16, 100e9, bidirectional=True))
    line = fabric.collective_s("all_gather", 1e9, "TPU v5p", 16, wraparound=False)
    assert line == pytest.approx(2 * one_axis)
    two_axes = fabric.collective_s("all_gather", 1e9, "TPU v5p", 16, torus_extents=(4, 4))
    assert two_axes == pytest.approx(1e9 * 15 / 16 / (4 * 100e9))
    assert fabric.concurrent_links("TPU v5p", 64, (4, 4, 4)) == 6


def test_torus_all_to_all_is_bisection_bound():
    """A wrapped ring of 16 chips, local payload L: half the chips send half
    their data across a cut of 2 links per direction: L·16/(4·2·W)."""
    seconds = fabric.collective_s("all_to_all", 1e9, "TPU v5p", 16)
    assert seconds == pytest.approx(1e9 * 16 / (8 * 100e9))


def test_across_nodes_priced_by_node_egress():
    """16 MI355X GPUs on 2 nodes: each node brings in 1/2 GB through 8 rails
    of 50 GB/s, 1e9 / 2 / 400e9 = 1.25 ms, then gathers 1 GB over its 8 GPUs,
    1.6276 ms: 1.6276 pipelined, 2.8776 serialized."""
    overlapped = fabric.collective_s("all_gather", 1e9, "MI355X", 16, 2)
    serial = fabric.collective_s("all_gather", 1e9, "MI355X", 16, 2, overlapped=False)
    assert overlapped * 1e3 == pytest.approx(1.6276, abs=1e-4)
    assert serial * 1e3 == pytest.approx(1.25 + 1.6276, abs=1e-4)


def test_flat_rings_across_nodes_carry_n_minus_one_over_n():
    """NCCL's flat rings (nccl-flat-rings, nccl-allgather-ring): each node's
    NICs carry (n-1)/n of the buffer. 16 MI355X on 2 nodes, 1 GB: the NICs
    move 1e9·15/16 through 8 rails of 50 GB/s, 2.34375 ms, above the in-node
    gather (1.6276 ms); a two-level schedule sends half of it (1.25 ms).
    4 nodes of 8 H100, all-reduce of 16 GB: 2·16e9·31/32/(8·50e9) = 77.5 ms,
    1.29 times the two-level cross phase 2·16e9·3/4/(8·50e9) = 60 ms."""
    assert fabric.flat_ring_s("all_gather", 1e9, "MI355X", 16, 2) * 1e3 == pytest.approx(2.34375)
    assert fabric.flat_ring_s("reduce_scatter", 1e9, "MI355X", 16, 2) * 1e3 == pytest.approx(2.34375)
    ring = fabric.flat_ring_s("all_reduce", 16e9, "H100", 32, 4)
    assert ring * 1e3 == pytest.approx(77.5)
    assert ring / 60e-3 == pytest.approx(31 / 32 / (3 / 4))
    # one GPU per node: the ring is the two-level schedule; inside one node, the fabric's own price
    assert fabric.flat_ring_s("all_reduce", 1e9, "H100", 4, 4) == fabric.collective_s("all_reduce", 1e9, "H100", 4, 4)
    assert fabric.flat_ring_s("all_gather", 1e9, "MI355X", 8, 1) == fabric.collective_s("all_gather", 1e9, "MI355X", 8)
    assert fabric.flat_ring_s("all_to_all", 1e9, "MI355X", 16, 2) == fabric.collective_s(
        "all_to_all", 1e9, "MI355X", 16, 2
    )
    with pytest.raises(ValueError, match="accelerator: TPU v5p is a TPU; its collectives across slices are two-level"):
        fabric.flat_ring_s("all_gather", 1e9, "TPU v5p", 16, 2)
    with pytest.raises(ValueError, match="n_domains: must divide the group size 16"):
        fabric.flat_ring_s("all_gather", 1e9, "MI355X", 16, 3)


def test_flat_rings_in_node_phase_can_set_the_time():
    """Two GB200 NVL72 racks, 1 GB all-gather: the in-rack gather of the
    whole buffer over 72 GPUs at 900 GB/s egress (1e9·71/72/900e9 = 1.0957 ms)
    outlasts the NICs' 1e9·143/144/(72·50e9) = 0.2758 ms, so both schedules
    take the in-rack time."""
    flat = fabric.flat_ring_s("all_gather", 1e9, "GB200 NVL72", 144, 2)
    assert flat * 1e3 == pytest.approx(1e9 * 71 / 72 / 900e9 * 1e3)
    assert flat == fabric.collective_s("all_gather", 1e9, "GB200 NVL72", 144, 2)


@given(
    st.sampled_from(GPU_PRESETS),
    st.sampled_from(KINDS),
    st.integers(2, 16),
    st.floats(1e3, 1e12),
)
@settings(max_examples=200, deadline=None)
def test_flat_rings_never_beat_the_two_level_schedule(name, kind, k, total):
    m = int(hardware.get(name).scale_up_domain_size)
    flat = fabric.flat_ring_s(kind, total, name, k * m, k)
    assert flat >= fabric.collective_s(kind, total, name, k * m, k) * (1 - 1e-12)


def test_planner_expects_flat_rings_and_bounds_with_two_level():
    """A flat FSDP group over four H100 nodes: the expectation's all-gather
    is NCCL's ring, the bound's the two-level schedule."""
    from shardbook.planner import placement, timing

    where = placement.place("H100", {"fsdp": 32})["fsdp"]
    assert where.n_domains == 4
    bound = timing.collective_s("H100", "all_gather", 16e9, where)
    expected = timing.collective_s("H100", "all_gather", 16e9, where, calibrated=True)
    rates = timing._achieved(hardware.get("H100"))
    assert bound == pytest.approx(fabric.collective_s("all_gather", 16e9, "H100", 32, 4))
    latency = timing._latency_s(hardware.get("H100"), timing._latency_steps("all_gather", where, False))
    assert expected == pytest.approx(fabric.flat_ring_s("all_gather", 16e9, rates, 32, 4) + latency, rel=1e-12)
    assert fabric.flat_ring_s("all_gather", 16e9, rates, 32, 4) > fabric.collective_s("all_gather", 16e9, rates, 32, 4)
    assert expected > bound


def test_hierarchical_all_reduce_has_three_phases():
    """1 GB over 8 × 4 MI355X: reduce-scatter in the node on 7 links
    (1e9·7/8/(7·76.8e9) = 1.6276 ms), all-reduce of 1/8 GB over 4 nodes at
    50 GB/s (2·0.125e9·3/4/50e9 = 3.75 ms), all-gather in the node (1.6276)."""
    phases = collectives.hierarchical_all_reduce_phases_s(1e9, 8, 4, MI355X_LINK, 50e9, 7)
    assert [p * 1e3 for p in phases] == pytest.approx([1.6276, 3.75, 1.6276], abs=1e-4)
    assert phases.all_reduce_across_s == phases[1] and phases.reduce_scatter_inside_s == phases.all_gather_inside_s
    serial = collectives.hierarchical_all_reduce_s(1e9, 8, 4, MI355X_LINK, 50e9, 7)
    assert serial == pytest.approx(sum(phases))
    assert collectives.hierarchical_all_reduce_s(1e9, 8, 4, MI355X_LINK, 50e9, 7, overlapped=True) == pytest.approx(
        3.75e-3
    )
    assert fabric.collective_s("all_reduce", 1e9, "MI355X", 32, 4, overlapped=False) == pytest.approx(serial)


def test_ep_across_nodes_is_slower_than_inside():
    routed = 805_306_368
    inside = fabric.collective_s("all_to_all", routed, "MI355X", 8)
    across = fabric.collective_s("all_to_all", routed, "MI355X", 16, 2)
    assert across > 5 * inside


@given(
    st.sampled_from(GPU_PRESETS + ["TPU v5p", "TPU v5e"]),
    st.sampled_from(KINDS + ("all_to_all",)),
    st.integers(2, 8),
    st.floats(1e3, 1e12),
)
@settings(max_examples=200, deadline=None)
def test_physical_orderings(name, kind, n, total):
    acc = hardware.get(name)
    bound = fabric.collective_s(kind, total, acc, n)
    # driving every link the fabric has is never slower than one ring on one link
    # (a torus all-to-all also crosses the bisection in several hops, so one
    # link's egress is no upper bound there)
    if not (acc.scale_up_fabric == "torus" and kind == "all_to_all"):
        assert bound <= fabric.single_ring_s(kind, total, acc, n) * (1 + 1e-12)
    # more bandwidth is never slower
    faster = collectives.collective_s(kind, total, n, acc.scale_up_link_bytes_per_s * 2)
    assert faster <= collectives.collective_s(kind, total, n, acc.scale_up_link_bytes_per_s)
    # a bigger group spanning k nodes, n in each, is never faster than n inside one
    # (the same group spread out can be: its members gain NIC ingress)
    for k in (2, 4):
        across = fabric.collective_s(kind, total, acc, n * k, k)
        assert across >= bound * (1 - 1e-12)
        assert fabric.collective_s(kind, total, acc, n * k, k, overlapped=False) >= across


@given(st.integers(1, 64), st.floats(0, 1e12), st.integers(1, 16))
@settings(max_examples=100, deadline=None)
def test_concurrent_links_divide_the_time(n, total, c):
    for kind in KINDS:
        assert collectives.collective_s(kind, total, n, 1e9 * c) == pytest.approx(
            getattr(collectives, f"{kind}_s")(total, n, 1e9, concurrent_links=c)
        )


def test_achieved_is_below_spec():
    for entry in measured.ACHIEVED_SCALE_UP:
        acc = hardware.get(entry.accelerator)
        spec = acc.scale_up_link_bytes_per_s if entry.per == "link" else acc.scale_up_egress_bytes_per_s
        assert 0 < entry.bytes_per_s < spec


def test_fabric_bad_input():
    with pytest.raises(ValueError, match="n: a group inside one MI355X domain has at most 8"):
        fabric.collective_s("all_gather", 1e9, "MI355X", 16)
    with pytest.raises(ValueError, match="n_domains: must divide the group size 16"):
        fabric.collective_s("all_gather", 1e9, "MI355X", 16, 3)
    with pytest.raises(ValueError, match="torus_extents: must multiply to the group size 16"):
        fabric.collective_s("all_gather", 1e9, "TPU v5p", 16, torus_extents=(4, 2))
    with pytest.raises(ValueError, match="kind: unknown value 'broadcast'"):
        fabric.collective_s("broadcast", 1e9, "MI355X", 8)
    with pytest.raises(ValueError, match="concurrent_links: must be >= 1"):
        collectives.all_gather_s(1e9, 8, 1e9, concurrent_links=0)
    with pytest.raises(ValueError, match="accelerator: unknown preset 'MI999'"):
        fabric.collective_s("all_gather", 1e9, "MI999", 8)


def test_planner_keeps_two_level_across_tpu_slices():
    """Across TPU slices (DCN) the expectation stays two-level, as XLA's
    multislice collectives are: the achieved-rate collective_s plus latency."""
    from shardbook.planner import placement, timing

    where = placement.place("TPU v5p", {"dp": 2, "fsdp": 64}, slices=2)["dp"]
    assert (where.n_domains, where.torus_span) == (2, ())
    v5p = hardware.get("TPU v5p")
    expected = timing.collective_s("TPU v5p", "all_reduce", 1e9, where, calibrated=True)
    latency = timing._latency_s(v5p, timing._latency_steps("all_reduce", where, False))
    two_level = fabric.collective_s("all_reduce", 1e9, timing._achieved(v5p), 2, 2)
    assert expected == pytest.approx(two_level + latency, rel=1e-12)
