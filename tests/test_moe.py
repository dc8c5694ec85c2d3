"""The expert-parallel formulas of shardbook.moe against hand derivations."""

import math

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


# --- the routed experts' grouped GEMMs and sorts (planner.timing, planner.calibrate) ----------------


def test_grouped_gemm_efficiency_falls_with_fewer_rows_per_expert():
    from shardbook.planner import calibrate

    for kernels, figure in calibrate.GROUPED_GEMM_HALF_ROWS.items():
        half = figure.value
        factors = [moe.grouped_gemm_factor(m, half) for m in (64, 256, 1024, 4096, 16384)]
        assert factors == sorted(factors) and factors[-1] < 1, kernels
        assert moe.grouped_gemm_factor(half, half) == pytest.approx(0.5)
    # few rows per expert (many small groups) cost more per FLOP than many rows (expert parallelism)
    assert moe.grouped_gemm_factor(1536, 269) < 0.86 < 0.97 < moe.grouped_gemm_factor(12288, 269)
    for bad, message in (((0, 100), "rows_per_group"), ((10, -1), "half_rows")):
        with pytest.raises(ValueError, match=message):
            moe.grouped_gemm_factor(*bad)


def test_grouped_gemm_curves_hold_their_fits_on_the_published_tables():
    from shardbook import measured
    from shardbook.planner import calibrate

    for kernels in ("nvidia", "amd"):
        points = [((p.n, p.k), p.m, p.tflops_per_s) for p in measured.GROUPED_GEMM_POINTS if p.kernels == kernels]
        assert len(points) >= 10
        fitted = moe.fit_grouped_gemm_half_rows(points)
        figure = calibrate.GROUPED_GEMM_HALF_ROWS[kernels]
        assert figure.source == "fit" and figure.value == pytest.approx(fitted, rel=0.01), kernels
    # TPU's on the book's own v5e measurement (XLA's ragged_dot), read from the committed file
    assert not any(table == "grouped GEMM half rows" for table, _, _ in calibrate.assumed())
    assert [calibrate.grouped_gemm_kernels(a) for a in ("H100", "MI355X", "MI300X", "TPU v5p")] == [
        "nvidia", "amd", "amd", "tpu"
    ]  # fmt: skip
    # a curve through exact points is found again: M½ = 300 on two shapes
    exact = [(s, m, p * m / (m + 300)) for s, p in (("a", 500), ("b", 900)) for m in (128, 512, 2048, 8192)]
    assert moe.fit_grouped_gemm_half_rows(exact) == pytest.approx(300, rel=1e-3)
    with pytest.raises(ValueError, match="two points of one shape"):
        moe.fit_grouped_gemm_half_rows([("a", 128, 10.0), ("b", 256, 20.0)])


def test_tpu_grouped_gemm_curve_holds_its_fit_on_the_v5e_measurement_and_its_plateau_is_measured():
    import json

    from shardbook import matmul_efficiency
    from shardbook.planner import calibrate

    # read the committed file directly, not through moe's reader
    data = json.loads((matmul_efficiency.DATA_DIR / "measured_tpu_v5e_moe.json").read_text())
    floor_s = data["dispatch"]["pipelined_time_s"]

    def triples(kind):
        return [
            ((r["n"], r["k"]), r["tokens_per_group"], r[f"{kind}_flops_per_s"] / 1e12)
            for r in data["grouped_matmul_bf16"]
            if r[f"{kind}_time_s"] >= matmul_efficiency.FLOOR_MULTIPLE * floor_s
        ]

    ragged, dense = triples("ragged_dot"), triples("dense_same_flops")
    # DeepSeek-V2-Lite's 64- to 256-row calls take under 1.5x the dispatch floor's time: left out, 13 of 16 kept
    assert len(ragged) == 13 and {m for s, m, _ in ragged if s == (1408, 2048)} == {512, 1024, 2048, 4096, 8192}
    assert moe.measured_grouped_gemm_points(data) == ragged
    half = moe.fit_grouped_gemm_half_rows(ragged)
    figure = calibrate.GROUPED_GEMM_HALF_ROWS["tpu"]
    assert figure.source == "fit" and figure.value == pytest.approx(half, rel=0.01)
    assert "measured_tpu_v5e_moe.json" in figure.note and "megablox" in figure.note
    # each shape's plateau (geometric mean of TFLOP/s / factor) over its dense matmuls', by hand
    shares = []
    for shape in {s for s, _, _ in ragged}:
        g = [math.log(t * (m + half) / m) for s, m, t in ragged if s == shape]
        d = [math.log(t) for s, _, t in dense if s == shape]
        shares.append(sum(g) / len(g) - sum(d) / len(d))
    share = math.exp(sum(shares) / len(shares))
    assert 0.65 < share < 0.8  # ragged_dot's plateau stays well under a dense matmul's
    assert moe.grouped_gemm_plateau_share(ragged, dense, half) == pytest.approx(share, rel=1e-12)
    # measured, but not carried to MaxText's megablox kernel on any TPU (calibrate's comment says why)
    assert all(calibrate.routed_expert_efficiency(acc) == 1.0 for acc in ("TPU v5e", "TPU v5p", "TPU v6e"))
    with pytest.raises(ValueError, match="kind: unknown value"):
        moe.measured_grouped_gemm_points(data, kind="megablox")
    with pytest.raises(ValueError, match="data: must be a MoE measurement"):
        moe.measured_grouped_gemm_points({"dispatch": {}})
    with pytest.raises(ValueError, match="dense_points: need a shape"):
        moe.grouped_gemm_plateau_share(ragged, [("x", 1, 1.0)], half)


def test_rows_per_expert_and_sort_bytes_by_hand():
    # 16,384 tokens, top-6 of 64 experts: 1,536 rows per expert alone, eight times as many over ep 8
    assert moe.rows_per_expert(16384, 6, 64, 1) == 1536
    assert moe.rows_per_expert(16384, 6, 64, 8) == 12288
    assert moe.rows_per_expert(16384, 6, 64, 8, capacity_factor=1.25) == 12288 * 1.25
    # one sort and unsort, forward and backward: 4 passes over (1 + k)·T rows of D BF16 elements
    assert moe.permute_bytes(1000, 2, 10) == 4 * (1000 + 2000) * 10 * 2
    # expert parallelism sorts the 2·k·T rows that arrive again; a rerun adds the forward's pair
    assert moe.permute_bytes(1000, 2, 10, ep=4) == 4 * (1000 + 2000 + 4000) * 10 * 2
    assert moe.permute_bytes(1000, 2, 10, ep=4, reruns=1) == 6 * (1000 + 2000 + 4000) * 10 * 2
    with pytest.raises(ValueError, match="reruns"):
        moe.permute_bytes(1000, 2, 10, reruns=-1)


def _sweep(fsdp, ep):
    from shardbook import explorer

    return explorer.evaluate("DeepSeek-V2-Lite", "MI355X", {"fsdp": fsdp, "ep": ep}, 131072, seq_len=4096,
                             micro_batch_seqs=4)  # fmt: skip


def test_the_amd_sweeps_endpoints_land_within_a_quarter_and_ep_8_is_expected_fastest():
    # scale-your-model-amd, "Successful measurements": DeepSeek-V2-Lite on 8 MI355X (measured.AMD_MI355X_RUNS)
    from shardbook import measured

    step = {(r.mesh["fsdp"], r.mesh["ep"]): r.step_s for r in measured.AMD_MI355X_RUNS}
    fsdp8, ep8 = _sweep(8, 1), _sweep(1, 8)
    assert fsdp8.expected_step_s == pytest.approx(step[(8, 1)], rel=0.25)
    assert ep8.expected_step_s == pytest.approx(step[(1, 8)], rel=0.25)
    assert ep8.expected_step_s < fsdp8.expected_step_s
    # one reason: fsdp 8's 64 local experts get 1,536 rows each, ep 8's 8 experts 12,288; what the groups
    # cost beyond η is η-time · (1/(f·p) − 1), f the curve at those rows, p the plateau's share of η
    from shardbook.planner import calibrate

    half, p = calibrate.grouped_gemm_half_rows("MI355X"), calibrate.routed_expert_efficiency("MI355X")
    extra = [1 / (moe.grouped_gemm_factor(rows, half) * p) - 1 for rows in (1536, 12288)]
    assert fsdp8.expected_terms["grouped_gemm"] / ep8.expected_terms["grouped_gemm"] == pytest.approx(
        extra[0] / extra[1]
    )
    assert ep8.expected_terms["grouped_gemm"] > 0
    # the mixed meshes ran far slower than either endpoint, and the planner does not see why (the seed:
    # message layout, kernels and scheduling changed with the mesh); it expects them near the endpoints
    for mesh in ((4, 2), (2, 4)):
        assert _sweep(*mesh).expected_step_s < 0.75 * step[mesh]


def test_mi355x_routed_expert_efficiency_holds_its_fit_on_the_sweeps_endpoints():
    from shardbook import measured, validation
    from shardbook.planner import calibrate

    ends = [r for r in measured.AMD_MI355X_RUNS if {r.mesh["fsdp"], r.mesh["ep"]} == {1, 8}]
    assert len(ends) == 2
    figure = calibrate.ROUTED_EXPERT_EFFICIENCY["MI355X"]
    assert figure.source == "fit" and "endpoints" in figure.note
    assert figure.value == pytest.approx(validation.fit_routed_expert_efficiency("MI355X", ends), abs=0.005)
    # it prices routed experts only: a dense plan on MI355X keeps the assumed η
    assert calibrate.MATMUL_EFFICIENCY["MI355X"].source == "assumed"
    assert calibrate.routed_expert_efficiency("H100") == 1.0
    with pytest.raises(ValueError, match="runs: must be one or more"):
        validation.fit_routed_expert_efficiency("MI355X", [measured.run_named("DeepSeek-V3, 2,048 H800")])


def test_permute_cost_appears_in_the_step_breakdown():
    ep8, fsdp8 = _sweep(1, 8), _sweep(8, 1)
    terms = ep8.expected_terms
    assert 0 < terms["permute"] < terms["elementwise"] < terms["math"]
    # without expert parallelism the sort moves only what the elementwise term already counts
    assert fsdp8.expected_terms["permute"] == 0
    # and the exchange is what the stack overlaps: the seed's profile leaves a fifth of it exposed
    from shardbook.planner import calibrate

    assert ep8.expected_exposed_s["ep"] == pytest.approx(calibrate.EP_EXPOSED_FRACTION["MI355X"].value * terms["ep"])
    # a dense model has neither
    from shardbook import explorer

    dense = explorer.evaluate("LLaMA-3 8B", "H100", {"fsdp": 8}, 2**20)
    assert dense.expected_terms["permute"] == dense.expected_terms["grouped_gemm"] == 0


@pytest.mark.slow  # a default search of an MoE on 64 H100: seconds of one core (make test runs it)
@pytest.mark.xfail(
    strict=True,
    reason="the planner prices Megatron's expert all-to-alls on H100 fully exposed while it hides pure FSDP's "
    "traffic behind the math (flagged fragile), so fsdp 64 still ranks first; NVIDIA's recipe runs EP8/EP16 x DP. "
    "Hiding the exchanges (ideal_overlap) still leaves fsdp 8 x ep 8 1.3 % behind (2,332 vs 2,301 ms: EP's sorts "
    "cost what its larger expert groups save); a GPU compute slowdown under overlapped collectives "
    "(lee2025characterizing, 18.9 %) puts EP first but does not transfer: leave-one-source-out 50 -> 44 of 76 "
    "(commit e5b3d08, reverted); tried again on 102 runs with every fit redone, 55 -> 48 (megatron 27 -> 25, "
    "pytorch 15 -> 10: the MPT 1B and 3B rows), and fsdp 16 x pp 4 (2,370 ms) then leads dp 2 x ep 8 x pp 4 "
    "(2,377) (tried 6 December 2026, not kept). Gradients reduced in FP32 (torchtitan's FSDP2, Megatron's default; "
    "--state-recipe fp32), with FSDP's backward traffic held to the backward's math, make fsdp 64 2,795 ms, "
    "but fsdp 16 x pp 4 (2,328) leads dp 2 x fsdp 2 x ep 8 x pp 2 (2,352); NVIDIA's tuned recipe itself "
    "reduces in BF16 (grad_reduce_in_fp32 False). NVIDIA's own EP16 recipe on 16 H100 (Megatron Bridge 26.04.01, "
    "held out in measured.MEGATRON_BRIDGE_H100_MOE_RUNS) is expected 36 % faster than it ran (with FP8's casts "
    "priced; its miss points to Megatron-Core's host time per layer and microbatch, megatron-core-moe, which no "
    "source but that one checks), so no run yet says which of the two layouts the planner misprices more; the rows "
    "lie inside one MoE band (marked ties), and fsdp 64 leads only while each row loses less than 8.3 % of its "
    "hidden communication to the critical path (cli.ep_overtake_line). The one published head-to-head of the two "
    "layouts on this model (one node of 8 B200, pithtrain-issue-79, measured.QWEN3_B200_HEAD_TO_HEAD) has the best EP "
    "run 4 % ahead of FSDP across two frameworks, with EP's routing forced to balance (worth about as much) and "
    "the EP 8 run 0.4 % behind; priced as they ran, the planner puts every EP run ahead (chapter 97, "
    "sec-valid-bridge-moe); no run compares them across nodes",
)
def test_qwen3_30b_a3b_on_64_h100_picks_expert_parallelism():
    from pathlib import Path

    from shardbook import explorer, hf_config

    model = hf_config.from_hf_config(Path(__file__).resolve().parent / "data" / "hf_configs" / "qwen3-30b-a3b.json")
    ranked = explorer.explore(
        model,
        "H100",
        64,
        512 * 4096,
        seq_len=4096,
        axes=("dp", "fsdp", "tp", "ep", "pp"),
    )
    assert ranked[0].ep > 1


def test_rows_per_expert_count_the_tp_groups_tokens():
    """An expert beside tp takes the rows of its tp group's tokens: Megatron Bridge's Qwen3-235B-A22B
    ran EP 32 over TP 2 × DP 16 with whole experts (expert TP 1), each of the 32 ranks dispatching its
    2,048 sequence-parallel tokens of a 4,096-token microbatch, top-8 of 128 experts: 32·2,048·8/128
    = 4,096 rows an expert. The planner prices it as tp 2 × ep 16, and splits each expert over the two
    tp ranks, which then compute every row their tp group routed (Megatron-Core's alltoall dispatcher
    gathers them over TP: S·B·EP tokens an expert rank): the same 4,096, not the 2,048 one rank
    dispatches."""
    import inspect

    from shardbook import explorer, models
    from shardbook.planner import layout, timing

    takes = inspect.signature(layout.layout).parameters
    options = {
        name: p.default
        for name, p in inspect.signature(explorer.evaluate).parameters.items()
        if p.kind is p.KEYWORD_ONLY and name in takes and name != "recompute"
    }
    options.update(seq_len=4096, micro_batch_seqs=1, schedule="1f1b", uneven_pipeline=True)
    model = models.get("Qwen3-235B-A22B")
    assert (model.top_k, model.n_experts) == (8, 128)
    lay = layout.layout(model, "H100", {"tp": 2, "ep": 16, "pp": 8}, 8192 * 4096, recompute=None, **options)
    assert timing.rows_per_expert(lay) == 32 * 2048 * 8 / 128
    # without tp the rows are those of the device's own tokens
    lay = layout.layout(model, "H100", {"ep": 16, "pp": 8}, 8192 * 4096, recompute=None, **options)
    assert timing.rows_per_expert(lay) == 16 * 4096 * 8 / 128
