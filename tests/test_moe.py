"""The expert-parallel formulas of shardbook.moe against hand derivations."""

import pytest

from shardbook import moe


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
