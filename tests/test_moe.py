"""The expert-parallel formulas of shardbook.moe against hand derivations."""

import pytest

from shardbook import hardware, moe


def test_expert_width_floor_by_hand():
    # α = 1e15 / 5e11 = 2000; BF16 (2 bytes), 8 ranks, gated (3 matrices):
    # F > 2 · 2000 · (7/8) / 3 = 1166.67
    assert moe.ep_min_expert_width(1e15, 5e11, 8) == pytest.approx(2 * 2000 * 7 / 8 / 3)
    assert moe.ep_min_expert_width(1e15, 5e11, 8, gated=False) == pytest.approx(2 * 2000 * 7 / 8 / 2)
    assert moe.ep_min_expert_width(1e15, 5e11, 1) == 0  # nothing leaves the device
    assert moe.ep_min_expert_width(1e15, 5e11, 8, bytes_per_element=1) == pytest.approx(2000 * 7 / 8 / 3)


def test_capacity_and_drops_by_hand():
    assert moe.capacity(128, 2, 8, 1.25) == 40  # ceil(1.25 · 2 · 128 / 8)
    assert moe.capacity(100, 1, 8, 1.0) == 13  # ceil(12.5)
    assert moe.dropped_fraction([10, 10, 10, 10], 10) == 0
    assert moe.dropped_fraction([25, 5, 5, 5], 10) == pytest.approx(15 / 40)
    assert moe.slowest_device_factor([25, 5, 5, 5], 2) == pytest.approx(30 / 20)
    assert moe.slowest_device_factor([25, 5, 5, 5], 4) == pytest.approx(25 / 10)


def test_skewed_loads_route_every_token_to_k_distinct_experts():
    loads = moe.skewed_loads(1000, 2, 8, 1.0)
    assert sum(loads) == 2000 and len(loads) == 8
    assert loads == moe.skewed_loads(1000, 2, 8, 1.0)  # seeded: the same everywhere
    assert loads[0] > 2 * loads[-1]  # popularity falls with rank
    uniform = moe.skewed_loads(8000, 1, 8, 0.0)
    assert max(uniform) / min(uniform) < 1.15
    # with k = E every token uses every expert
    assert moe.skewed_loads(50, 4, 4, 3.0) == [50, 50, 50, 50]


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: moe.capacity(128, 3, 2, 1.0), r"top_k: must be <= n_experts \(2\), got 3"),
        (lambda: moe.dropped_fraction([], 4), "expert_loads: must be a non-empty list"),
        (lambda: moe.slowest_device_factor([1, 2, 3], 2), "expert_loads: need a list whose length"),
        (lambda: moe.skewed_loads(10, 2, 8, -1.0), "skew: must be >= 0"),
    ],
)
def test_bad_input_names_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_skewed_loads_stay_fast_and_defined_at_the_extremes():
    """A huge request is refused by name, and a skew so steep that the
    other experts' weights vanish still gives k distinct experts."""
    with pytest.raises(ValueError, match="n_tokens × n_experts: at most 1,000,000 keys are drawn"):
        moe.skewed_loads(10**9, 2, 8, 0.0)
    loads = moe.skewed_loads(100, 2, 8, 2000.0)
    assert loads[0] == 100 and sum(loads) == 200


def test_node_limited_fp8_exchange_bytes_as_deepseek_v3_sends_them():
    """Review ch4-6 M2. deepseek2024v3: tokens go to at most 4 nodes (one IB copy
    per node, forwarded over NVLink; a node's combine summed before it crosses),
    dispatch and backward activation gradients in FP8, both combines in BF16.
    Unrestricted BF16 top-8 over 8 nodes: 4 exchanges of 8 copies x 7/8 off-node
    x 2 bytes = 56 D per token; DeepSeek's: 2 x 4 x 7/8 x (1 + 2) = 21 D."""
    d = 7168
    plain = moe.scale_out_exchange_bytes_per_token(d, 8, 8)
    assert plain == pytest.approx(56 * d)
    ds = moe.scale_out_exchange_bytes_per_token(d, 8, 8, max_nodes=4, dispatch_bytes_per_element=1)
    assert ds == pytest.approx(21 * d)
    assert ds / plain == pytest.approx(0.375)
    # the explorer's ep term is the unrestricted BF16 one: 4 all-to-alls of k·D·2 bytes
    # per token, (N-1)/N across nodes (shardbook.fabric)
    assert plain == pytest.approx(4 * moe.routed_bytes_per_device(1, 8, d, 2) * 7 / 8)
    # more nodes allowed than experts picked changes nothing; one node sends nothing
    assert moe.scale_out_exchange_bytes_per_token(d, 2, 8, max_nodes=4) == moe.scale_out_exchange_bytes_per_token(
        d, 2, 8
    )
    assert moe.scale_out_exchange_bytes_per_token(d, 8, 1) == 0
    with pytest.raises(ValueError, match="max_nodes"):
        moe.scale_out_exchange_bytes_per_token(d, 8, 8, max_nodes=0)


def test_ep_floor_across_nodes_keeps_the_in_node_share_on_nvlink():
    """Review ch4-6 I5: 64-way EP over 8-GPU H100 nodes sends 56/64 of each
    exchange through the NIC and 7/64 over NVLink (shardbook.fabric's
    (n-m)/n), so the floor is 11,544, about 9x the in-node floor, not 12,987."""
    h100 = hardware.get("H100")
    c, nic, nvl = h100.bf16_dense_flops_per_s, h100.scale_out_bytes_per_s, h100.scale_up_egress_bytes_per_s
    across = moe.ep_min_expert_width(c, nic, 64, ranks_in_node=8, node_link_bytes_per_s=nvl)
    assert across == pytest.approx(2 * c / nic * 56 / 64 / 3)
    assert round(across) == 11544
    assert round(moe.ep_min_expert_width(c, nic, 64)) == 12987  # every peer behind the NIC
    assert round(across / moe.ep_min_expert_width(c, nvl, 8)) == 9
    # a group inside one node is priced by its NVLink share alone
    assert moe.ep_min_expert_width(c, nic, 8, ranks_in_node=8, node_link_bytes_per_s=nvl) == pytest.approx(
        moe.ep_min_expert_width(c, nvl, 8)
    )
    with pytest.raises(ValueError, match="node_link_bytes_per_s: required"):
        moe.ep_min_expert_width(c, nic, 64, ranks_in_node=8)
    with pytest.raises(ValueError, match="ranks_in_node: must divide ep=64"):
        moe.ep_min_expert_width(c, nic, 64, ranks_in_node=7, node_link_bytes_per_s=nvl)
