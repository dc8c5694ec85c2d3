"""The planner (shardbook.planner, issue 29): memory as frameworks keep it,
the schedules and layouts real runs use, communication as the machines move
it, a bound that published runs do not beat and a calibrated expectation
beside it, and a search and command line that can express real layouts.

Review items: ch7-9 W1-W3, W7-W12 and sections D-E; ch0-3 A5; the
reliability audit's explorer rows (issue 31)."""

import inspect
import json
import math
import re
import time

import pytest
from test_planner_cli import table_rows

from conftest import run_main
from shardbook import accelerator_file, collectives, explorer, fabric, hardware, measured, memory, models, planner
from shardbook.planner import calibrate, cli, inputs, memory_plan, page, placement, search, timing

LLAMA_405B_MESH = {"fsdp": 128, "tp": 8, "pp": 16}  # dubey2024llama3 Table 4, 16,384 GPUs
LLAMA_OPTIONS = dict(seq_len=8192, micro_batch_seqs=1, uneven_pipeline=True)
DEEPSEEK_MESH = {"pp": 16, "ep": 64, "dp": 2}  # deepseek2024v3 §3.2
DEEPSEEK_OPTIONS = dict(
    seq_len=4096,
    micro_batch_seqs=1,
    recompute="selective",
    schedule="dualpipe",
    zero=1,
    dense_over_ep=False,
    routing_node_limit=4,
    fp8_dispatch=True,
    uneven_pipeline=True,
)


def _layout(model, accelerator, mesh, global_tokens, **options):
    """The planner Layout evaluate builds, with evaluate's defaults for what `options` leaves out."""
    from shardbook.planner import layout

    takes = inspect.signature(layout.layout).parameters  # evaluate's own options (stack) stay behind
    defaults = {
        name: p.default
        for name, p in inspect.signature(planner.evaluate).parameters.items()
        if p.kind is p.KEYWORD_ONLY and name in takes
    }
    defaults.update(options)
    return layout.layout(model, accelerator, mesh, global_tokens, **defaults)


def _llama(**options):
    return explorer.evaluate("LLaMA-3 405B", "H100", LLAMA_405B_MESH, 16 * 2**20, **dict(LLAMA_OPTIONS, **options))


# --- memory (W2, W7, A5) ---------------------------------------------------------------


def test_llama3_405b_fits_its_own_mesh_at_8k_without_checkpointing():
    """dubey2024llama3 §3.3.2: "we could pre-train Llama 3 on sequences of 8K
    tokens without activation checkpointing". With a flash kernel (no s²
    probabilities) the 16,384-GPU mesh fits with recompute 'none' under 1F1B
    and under the interleaved schedule the paper uses; Korthikanti's eager
    count (the s² softmax kept) would need several times the 80 GB (W2)."""
    for schedule, n_virtual in (("1f1b", 1), ("interleaved", 4)):
        cand = _llama(recompute="none", schedule=schedule, n_virtual=n_virtual)
        assert cand.fits, (schedule, cand.memory_bytes_per_device)
        assert cand.recompute == "none"
    eager = _llama(recompute="none", attention="eager")
    assert not eager.fits and eager.memory_bytes_per_device > 3 * hardware.get("H100").hbm_bytes


def test_memory_breakdown_is_the_parts_and_the_headroom():
    cand = _llama(recompute="none")
    assert tuple(cand.memory_breakdown) == memory_plan.BREAKDOWN_KEYS
    used = sum(v for k, v in cand.memory_breakdown.items() if k != "headroom")
    # headroom is what is left of the HBM the device reports: NVML's 81,559 MiB for an H100 80GB
    # (modal-gpu-memory), not the datasheet's round 80 × 10⁹ bytes
    from shardbook.planner import calibrate

    assert calibrate.hbm_capacity_bytes("H100") == 81_559 * 2**20 > hardware.get("H100").hbm_bytes
    assert cand.hbm_bytes == calibrate.hbm_capacity_bytes("H100")
    assert cand.memory_breakdown["headroom"] == pytest.approx(calibrate.hbm_capacity_bytes("H100") - used)
    # the reserve held back for the framework is the GPU family's, and not what the step keeps
    assert cand.memory_breakdown["reserve"] == calibrate.memory_reserve_bytes("H100") == 3.0e9
    assert cand.memory_bytes_per_device == pytest.approx(used - cand.memory_breakdown["reserve"])
    assert cand.fits == (cand.memory_breakdown["headroom"] >= 0)
    state = sum(cand.memory_breakdown[k] for k in ("weights", "gradients", "master_weights", "optimizer_state"))
    assert cand.state_bytes_per_device == pytest.approx(state)
    assert cand.activation_bytes_per_device == cand.memory_breakdown["activations"]


def test_state_recipes_are_named_data():
    """state_recipe='megatron' is Megatron's 18 bytes per parameter; the
    default is 16 (memory_plan.DEFAULT_STATE_RECIPE); ZeRO-1 shards the
    master copy and the moments over the data-parallel ranks."""
    mesh, tokens = {"dp": 8}, 8 * 4096
    params = models.param_count("LLaMA-3 8B")
    megatron = explorer.evaluate("LLaMA-3 8B", "H100", mesh, tokens, recompute="full", state_recipe="megatron")
    default = explorer.evaluate("LLaMA-3 8B", "H100", mesh, tokens, recompute="full")
    assert megatron.state_bytes_per_device == pytest.approx(18 * params)
    assert default.state_bytes_per_device == pytest.approx(16 * params)
    zero1 = explorer.evaluate("LLaMA-3 8B", "H100", mesh, tokens, recompute="full", state_recipe="megatron", zero=1)
    assert zero1.state_bytes_per_device == pytest.approx((2 + 4 + 12 / 8) * params)


def test_dense_weights_are_sharded_over_the_expert_axis():
    """W7: MaxText's rules shard the dense weights over `expert` too, so
    fsdp 4 × ep 2 holds an eighth of every parameter. The AMD source ran this
    cell (measured.MIXTRAL_8X22B_MI355X) with BF16 weights ("a BF16 parameter
    payload") and FP32 gradients ("gradients are configured as FP32"); with
    two FP32 Adam moments and no separate master copy (14 bytes, the most
    the source allows) it fits with full recomputation. Under the planner's
    default 16 bytes it would not: 16 × 140.6e9 / 8 leaves 7 GB of 288."""
    params = models.param_count("Mixtral 8x22B")
    replicated = explorer.evaluate(
        "Mixtral 8x22B", "MI355X", {"fsdp": 4, "ep": 2}, 262144, recompute="full", dense_over_ep=False
    )
    sharded = explorer.evaluate("Mixtral 8x22B", "MI355X", {"fsdp": 4, "ep": 2}, 262144, recompute="full")
    assert sharded.state_bytes_per_device == pytest.approx(16 * params / 8)
    assert replicated.state_bytes_per_device > sharded.state_bytes_per_device
    amd = memory.StateRecipe("bf16 weights, fp32 grads", 2, 4, 0, 8, "scale-your-model-amd")
    cell = explorer.evaluate(
        "Mixtral 8x22B", "MI355X", {"fsdp": 4, "ep": 2}, 262144, recompute="full", state_recipe=amd
    )
    assert cell.fits and cell.recompute == "full"
    assert measured.MIXTRAL_8X22B_MI355X[0].fsdp == 4 and measured.MIXTRAL_8X22B_MI355X[0].ep == 2


def test_dualpipe_keeps_two_copies_of_the_weights_and_gradients():
    # deepseek2024v3 Table 2 and the DualPipe README: "Parameter 2×" (device i runs stages i and
    # p−1−i); each copy accumulates its own FP32 gradients (§3.3.3) until the pair sums them, so the
    # gradients are 2× at every ZeRO stage; master weights and moments are counted once
    for zero in (1, 2):
        options = dict(DEEPSEEK_OPTIONS, zero=zero, state_recipe="deepseek_v3")
        one = explorer.evaluate("DeepSeek-V3", "H800", DEEPSEEK_MESH, 15360 * 4096, **dict(options, schedule="1f1b"))
        two = explorer.evaluate("DeepSeek-V3", "H800", DEEPSEEK_MESH, 15360 * 4096, **options)
        single, dual = one.memory_breakdown, two.memory_breakdown
        # device 0 runs stage 0 (the embedding) and stage 15 (the output layer): under 1F1B
        # those are two devices, each with its stage once
        stages = memory_plan.device_breakdowns(
            _layout("DeepSeek-V3", "H800", DEEPSEEK_MESH, 15360 * 4096, **dict(options, schedule="1f1b")), "selective"
        )
        first, last = stages["stage 0"], stages["stage 15"]
        assert dual["weights"] == pytest.approx(first["weights"] + last["weights"])
        assert dual["gradients"] == pytest.approx(first["gradients"] + last["gradients"])
        assert dual["master_weights"] == pytest.approx((first["master_weights"] + last["master_weights"]) / 2)
        assert dual["optimizer_state"] == pytest.approx((first["optimizer_state"] + last["optimizer_state"]) / 2)
        # DualPipe's first rank runs the last stage too (deepseek2024v3 §3.2.3: the shallowest and
        # deepest layers on one PP rank), so the rank with p + 1 microbatches also holds the logits;
        # under 1F1B the first stage's 16 microbatches outweigh the last stage's one and its logits
        assert dual["logits"] == pytest.approx(memory.logits_bytes("DeepSeek-V3", 4096, 1))
        assert single["logits"] == 0
        # 1F1B holds each gradient once: 4 bytes (FP32) per 2 of BF16 weight, fewer once ZeRO-2 shards them
        per_weight = single["gradients"] / single["weights"]
        if zero == 1:
            assert per_weight == pytest.approx(2)
        else:
            assert per_weight < 2


# --- schedules and layouts (W1, W10) ----------------------------------------------------


def test_llama3_bound_charges_the_interleaved_bubble():
    """W1: Llama 3 §3.3.2 gives the interleaved schedule's bubble
    (p−1)/(v·m); the bound charges exactly that, not 1F1B's (p−1)/m."""
    for v in (1, 2, 4):
        cand = _llama(recompute="none", schedule="interleaved" if v > 1 else "1f1b", n_virtual=v)
        assert cand.n_microbatches == 16
        assert cand.bubble_s / cand.math_s == pytest.approx(15 / (v * 16))


def test_uneven_pipelines_and_tp_beyond_the_kv_heads():
    """W10: 126 layers on 16 stages (Llama 3) and 61 on 16 (DeepSeek-V3)
    with uneven_pipeline; TP 16 on LLaMA-3 70B's 8 KV heads (K and V
    replicated, as Megatron does)."""
    assert _llama().pp == 16
    with pytest.raises(ValueError, match="mesh\\['pp'\\]: 16 must divide the layers of LLaMA-3 405B \\(126\\)"):
        _llama(uneven_pipeline=False)
    explorer.evaluate("DeepSeek-V3", "H800", DEEPSEEK_MESH, 15360 * 4096, **DEEPSEEK_OPTIONS)
    tp16 = explorer.evaluate("LLaMA-3 70B", "H100", {"tp": 16, "fsdp": 4}, 2**22)
    assert tp16.tp == 16 and tp16.placement["tp"].n_domains == 2
    meshes = explorer.factorizations(64, "LLaMA-3 70B", axes=("fsdp", "tp"))
    assert {"dp": 1, "fsdp": 4, "tp": 16, "cp": 1, "ep": 1, "pp": 1} in meshes


def test_tp_beyond_the_kv_heads_keeps_a_whole_kv_head_per_rank():
    # LLaMA-3 70B has 8 KV heads: on tp 64 each rank keeps one head's K and V projections whole,
    # 2·d·head_dim per layer, where fsdp 8 × tp 8 shards the same 64 devices' state evenly
    m = models.get("LLaMA-3 70B")
    opts = dict(micro_batch_seqs=1, recompute="full")
    wide = explorer.evaluate(m, "H100", {"tp": 64}, 2**22, **opts)
    even = explorer.evaluate(m, "H100", {"fsdp": 8, "tp": 8}, 2**22, **opts)
    extra_params = m.n_layers * 2 * m.d_model * m.head_dim * m.n_kv_heads * (1 / m.n_kv_heads - 1 / 64)
    state = ("weights", "gradients", "master_weights", "optimizer_state")
    moved = sum(wide.memory_breakdown[k] - even.memory_breakdown[k] for k in state)
    recipe = memory.state_recipe(wide.state_recipe)
    per_param = recipe.weight_bytes + recipe.gradient_bytes + recipe.master_bytes + recipe.optimizer_bytes
    assert moved == pytest.approx(extra_params * per_param, rel=1e-9)


def test_bad_options_name_the_argument_and_the_valid_values():
    cases = [
        (dict(schedule="pipedream"), "schedule: unknown value 'pipedream'; valid: gpipe, 1f1b, interleaved"),
        (dict(state_recipe="fp64"), "state_recipe: unknown value 'fp64'; valid: megatron, bf16_master"),
        (dict(recompute="some"), "recompute: unknown value 'some'; valid: none, selective, full"),
        (dict(attention="sparse"), "attention: unknown value 'sparse'; valid: flash, eager"),
        (dict(zero=4), "zero: must be one of 0, 1, 2, 3"),
        (dict(precision="fp4"), "precision: unknown value 'fp4'; valid: bf16, fp8"),
        (dict(schedule="interleaved", n_virtual=3), "n_virtual: must divide the layers per stage"),
        (dict(n_virtual=2), "n_virtual: 2 virtual stages need schedule='interleaved'"),
    ]
    for options, message in cases:
        with pytest.raises(ValueError, match=message):
            explorer.evaluate("LLaMA-3 8B", "H100", {"pp": 4, "fsdp": 2}, 2**20, **options)


# --- communication (W3, W8, W9, W11, E.5) -----------------------------------------------


def test_nvlink_sharp_prices_an_all_reduce_in_the_switch():
    """On the NVSwitch generations with NVLink SHARP (calibrate.NVLS_PRESETS)
    an all-reduce inside the node moves (n+1)/n·V each way over the egress
    (multimem load-reduce, then multicast store: nccl-nvls,
    nccl-tests-nvls-allreduce), the same formula as
    collectives.in_switch_all_reduce_s; H800 keeps the ring's 2(n−1)/n·V.
    The planner used to price it as an all-gather, (n−1)/n·V."""
    assert set(calibrate.NVLS_PRESETS) == {"H100", "H200", "B200", "GB200 NVL72", "GB300 NVL72"}
    where = placement.Placement(8, 1, 8)
    for name in ("H100", "H800"):
        acc = hardware.get(name)
        egress = acc.scale_up_egress_bytes_per_s
        seconds = timing.collective_s(acc, "all_reduce", 1e9, where)
        ring = 2 * 7 / 8 * 1e9 / egress
        assert seconds == pytest.approx(9 / 8 * 1e9 / egress if name == "H100" else ring)
        if name == "H100":
            assert seconds == pytest.approx(collectives.in_switch_all_reduce_s(1e9, 8, egress))


def test_nvlink_sharp_is_used_only_where_it_is_cheaper_than_the_ring():
    """(n+1)/n·V against the ring's 2(n−1)/n·V: at n = 2 the switch moves
    1.5·V each way and the ring V, so a pair pays the ring (NCCL's tuner
    picks the faster algorithm); at n = 4 the switch wins (1.25·V vs 1.5·V).
    The expectation adds the latency of the algorithm it picks: 2 steps in
    the switch, 2(n−1) for the ring."""
    acc = hardware.get("H100")
    egress = acc.scale_up_egress_bytes_per_s
    pair, four = placement.Placement(2, 1, 2), placement.Placement(4, 1, 4)
    assert timing.collective_s(acc, "all_reduce", 1e9, pair) == pytest.approx(1e9 / egress)
    assert timing.collective_s(acc, "all_reduce", 1e9, four) == pytest.approx(1.25e9 / egress)
    latency = calibrate.scale_up_latency_s(acc)
    assert timing.collective_s(acc, "all_reduce", 1, four, calibrated=True) == pytest.approx(2 * latency, rel=1e-3)


def test_latency_makes_small_messages_cost():
    """The expectation pays a latency per ring step: 1 byte over 8 GPUs in
    one node costs 7 steps of calibrate.SCALE_UP_LATENCY_S; the bound none."""
    where = placement.Placement(8, 1, 8)
    acc = hardware.get("H800")
    assert timing.collective_s(acc, "all_gather", 1, where) < 1e-10
    latency = calibrate.scale_up_latency_s(acc)
    assert timing.collective_s(acc, "all_gather", 1, where, calibrated=True) == pytest.approx(7 * latency, rel=1e-3)


@pytest.mark.slow  # a default search of 405B on 16,384 devices: seconds of one core (make test runs it)
def test_cp_512_by_pp_16_no_longer_ranks_first():
    """W11: LLaMA-3 70B on 8,192 v5p at 4M tokens used to rank cp 512 × pp 16
    first (8 tokens per chip per microbatch, 1,024 microbatches, no latency).
    With latency and each microbatch streaming the stage's weights from HBM
    it ranks far down."""
    found = explorer.explore("LLaMA-3 70B", "TPU v5p", 8192, 4 * 2**20, axes=("fsdp", "tp", "cp", "pp"))
    labels = [c.label for c in found]
    assert labels[0] != "cp 512 × pp 16"
    assert labels.index("cp 512 × pp 16") >= 5


def test_gradients_are_reduced_over_cp_and_over_ep_for_replicated_dense_weights():
    """W11: weights replicated over cp, and dense weights replicated over
    ep, have their gradients reduced over those axes."""
    cp = explorer.evaluate("LLaMA-3 8B", "H100", {"cp": 2, "tp": 4}, 2**20)
    assert cp.dp_s > 0
    replicated = explorer.evaluate("Mixtral 8x7B", "H100", {"ep": 8}, 2**21, dense_over_ep=False)
    sharded = explorer.evaluate("Mixtral 8x7B", "H100", {"ep": 8}, 2**21)
    assert replicated.dp_s > 0 and replicated.fsdp_s == 0
    assert sharded.dp_s == 0 and sharded.fsdp_s > 0


def test_v5p_jobs_beyond_one_slice_cross_dcn():
    """W8: the largest v5p slice is 6,144 chips (google-tpu-v5p); 8,192
    chips are two slices of 4,096 and the outermost axis crosses DCN."""
    assert placement.slice_chips("TPU v5p", 6144) == 6144
    assert placement.slice_chips("TPU v5p", 8192) == 4096
    where = explorer.place("TPU v5p", {"fsdp": 8192})["fsdp"]
    assert where.n_domains == 2 and where.members_per_domain == 4096


def test_a_job_told_its_slices_spreads_its_outer_axis_over_dcn():
    """A v5p job small enough for one slice may still run on several
    (MaxText's multislice rows): with slices=2 the outer axis spans two
    slices and its reduction crosses DCN, slower than over ICI; the
    default keeps one slice."""
    args = ("MaxText 32B", "TPU v5p", {"dp": 2, "fsdp": 16, "tp": 4}, 2 * 64 * 8 * 2048)
    options = dict(seq_len=2048, micro_batch_seqs=32, recompute="minimal")
    one = explorer.evaluate(*args, **options)
    two = explorer.evaluate(*args, slices=2, **options)
    assert one.placement["dp"].n_domains == 1
    assert two.placement["dp"].n_domains == 2 and two.placement["dp"].members_per_domain == 1
    assert two.dp_s > 10 * one.dp_s  # DCN's 50 Gb/s per chip against ICI's links
    assert placement.slice_chips("TPU v5p", 128, slices=2) == 64
    assert placement.slice_chips("TPU v5p", 128) == 128
    # v5e's pod is 256 chips: 512 of them are two slices whether told or not
    v5e = ("MaxText 16B", "TPU v5e", {"dp": 2, "fsdp": 256}, 2 * 256 * 6 * 2048)
    options = dict(seq_len=2048, micro_batch_seqs=6, recompute="nothing_saveable")
    spread, told = explorer.evaluate(*v5e, **options), explorer.evaluate(*v5e, slices=2, **options)
    assert spread.placement["dp"].n_domains == 2 and spread.expected_step_s == told.expected_step_s


@pytest.mark.parametrize(
    "accelerator,n,slices,rule",
    [
        ("H100", 128, 2, "only a TPU job is cut into slices; H100 has no slices"),
        ("TPU v5p", 128, 3, "must divide the 128 chips of the job"),
        ("TPU v5p", 8192, 1, "1 slice(s) of 8192 chips exceed the largest TPU v5p slice (6144 chips)"),
        ("TPU v5e", 512, 1, "1 slice(s) of 512 chips exceed the largest TPU v5e slice (256 chips)"),
        ("TPU v5p", 128, 0, "must be >= 1"),
        ("TPU v5p", 128, 2.0, "must be an integer"),
        ("TPU v5p", 128, True, "must be an integer"),
    ],
)
def test_bad_slices_is_one_line_naming_the_rule(accelerator, n, slices, rule):
    with pytest.raises(ValueError, match="^slices: " + re.escape(rule)):
        explorer.evaluate("LLaMA-3 8B", accelerator, {"fsdp": n}, n * 4096, slices=slices)
    with pytest.raises(ValueError, match="^slices: " + re.escape(rule)):
        explorer.explore("LLaMA-3 8B", accelerator, n, n * 4096, slices=slices)


def test_fsdp_regathers_per_microbatch_unless_kept():
    """W9: FSDP gathers forward and backward for every microbatch and
    reduce-scatters each microbatch's gradients; kept weights are gathered
    once per step."""
    options = dict(seq_len=4096, micro_batch_seqs=1)
    per_micro = explorer.evaluate("LLaMA-3 70B", "H100", {"fsdp": 32, "tp": 8}, 4 * 2**20, **options)
    kept = explorer.evaluate(
        "LLaMA-3 70B", "H100", {"fsdp": 32, "tp": 8}, 4 * 2**20, keep_gathered_weights=True, **options
    )
    m = per_micro.n_microbatches
    assert per_micro.fsdp_s / kept.fsdp_s == pytest.approx((3 * m) / (1 + m), rel=0.01)
    assert kept.memory_breakdown["gathered_weight_buffers"] > per_micro.memory_breakdown["gathered_weight_buffers"]


def test_node_limited_routing_and_fp8_dispatch_cut_the_expert_exchange():
    full = explorer.evaluate(
        "DeepSeek-V3", "H800", DEEPSEEK_MESH, 15360 * 4096, **dict(DEEPSEEK_OPTIONS, routing_node_limit=None)
    )
    limited = explorer.evaluate(
        "DeepSeek-V3", "H800", DEEPSEEK_MESH, 15360 * 4096, **dict(DEEPSEEK_OPTIONS, fp8_dispatch=False)
    )
    both = explorer.evaluate("DeepSeek-V3", "H800", DEEPSEEK_MESH, 15360 * 4096, **DEEPSEEK_OPTIONS)
    assert both.ep_s < limited.ep_s < full.ep_s


@pytest.mark.parametrize(
    "recompute, reruns",
    [("none", 0), ("selective", 0), ("deepseek_v3", 0), ("full", 1), ("nothing_saveable", 1), ("minimal", 1)],
)
def test_a_policy_that_recomputes_the_moe_block_runs_its_exchanges_again(recompute, reruns):
    # the forward's dispatch and combine run again in the backward where the MoE block is
    # recomputed: six exchanges per layer instead of four, each of the same size
    # (DeepSeek-V3's recipe caches the dispatched tokens, so it keeps four)
    model = "DeepSeek-V3" if recompute == "deepseek_v3" else "Mixtral 8x22B"
    mesh = {"fsdp": 4, "ep": 2}
    base = explorer.evaluate(model, "MI355X", mesh, 262_144, recompute="none")
    cand = explorer.evaluate(model, "MI355X", mesh, 262_144, recompute=recompute)
    assert timing.expert_exchange_reruns(recompute) == reruns
    assert cand.ep_s == pytest.approx(base.ep_s * (4 + 2 * reruns) / 4, rel=1e-12)


# --- the bound and the expectation (W3, W12, E.8) ------------------------------------------


def test_deepseek_v3_own_mesh_bound_is_above_what_it_measured():
    """W3: DeepSeek-V3 measured 39 % of the BF16 peak on its own mesh
    (measured.deepseek_v3_mfu); with DualPipe hiding the all-to-all,
    node-limited routing and FP8 dispatch, the bound (even without crediting
    its FP8 matmuls) is above it."""
    cand = explorer.evaluate("DeepSeek-V3", "H800", DEEPSEEK_MESH, 15360 * 4096, **DEEPSEEK_OPTIONS)
    assert cand.mfu >= measured.deepseek_v3_mfu() >= 0.385
    assert cand.expected_mfu <= cand.mfu


def test_every_published_run_is_below_its_bound_and_the_expectation_below_the_bound():
    for run in measured.PUBLISHED_RUNS:
        cand = explorer.bound_for_run(run)
        assert run.mfu <= cand.mfu, run.name
        assert cand.step_s <= cand.expected_step_s, run.name
        assert cand.expected_mfu == pytest.approx(cand.mfu * cand.step_s / cand.expected_step_s)


def test_rank_of_run_ranks_by_expected_time_among_fitting_meshes():
    run = next(r for r in measured.PUBLISHED_RUNS if r.model == "LLaMA-3 405B" and r.n_devices == 16384)
    result = explorer.rank_of_run(run)
    rank, count = result
    assert result.rank == rank and 1 <= rank <= count
    assert result.own.mesh == explorer.normalize_mesh(run.mesh) and result.own.fits
    assert result.best.fits and result.slower_by >= 0
    assert result.own.expected_step_s == pytest.approx(result.best.expected_step_s * (1 + result.slower_by))


@pytest.mark.slow  # default searches and every microbatch of several meshes: seconds of one core (make test runs it)
def test_explore_ranks_fitting_candidates_by_expected_time_and_searches_the_microbatch():
    found = explorer.explore("LLaMA-3 70B", "H100", 256, 4 * 2**20)
    keys = [(not c.fits, c.expected_step_s) for c in found]
    assert keys == sorted(keys)
    assert len({c.micro_batch_seqs for c in found}) > 1


def test_calibration_figures_each_have_a_source_or_a_stated_fit():
    bib = open(_repo() / "references.bib").read()
    for table, key, figure in calibrate.table():
        assert figure.note, (table, key)
        assert figure.source in calibrate.SOURCE_KINDS or f"{{{figure.source}," in bib, (table, key, figure.source)
        assert figure.value > 0, (table, key)


def test_a_fit_is_a_fit_and_an_assumption_says_so():
    # issue 29 item 4: a figure marked "fit" must be one shardbook.validation fits (the
    # per-accelerator η of the accelerators with calibration runs, the elementwise passes,
    # and the FP8 speedup once an FP8 run calibrates it), never a placeholder; a value nobody
    # measured or fitted is "assumed", provisional, and its note says so in words
    from shardbook import validation

    fitted = {("matmul efficiency", acc) for acc in dict.fromkeys(r.accelerator for r in validation.calibration_runs())}
    fitted.add(("elementwise passes", "any"))
    if validation.fp8_speedup_runs():
        fitted.add(("FP8 sustained speedup", "any"))
    # fitted outside the split, each held to its fit in tests/test_moe.py: the grouped-GEMM curves on the
    # published kernel tables and TPU's on the book's v5e measurement, MI355X's routed-expert efficiency
    # on the AMD seed's sweep (which leave-one-source-out leaves out)
    fitted |= {("grouped GEMM half rows", k) for k in ("nvidia", "amd", "tpu")}
    fitted |= {("routed expert efficiency", acc) for acc in ("MI355X",)}
    for table, key, figure in calibrate.table():
        if figure.source == "fit":
            assert (table, key) in fitted, (table, key)
            assert not figure.provisional, (table, key)
        if figure.source == "assumed":
            assert figure.provisional and figure.note.startswith(calibrate.ASSUMED_NOTE), (table, key)
    assumed = {(table, key) for table, key, _ in calibrate.assumed()}
    assert ("HBM efficiency", "any") in assumed and ("scale-out efficiency", "tpu") in assumed
    # DeepSeek-V3 prints no residual share of its DualPipe exchanges: the tenth is assumed, not sourced
    assert ("exposed fraction", "ep_overlapped") in assumed and ("exposed fraction", "cp") in assumed
    assert ("matmul efficiency", "A100") not in assumed
    # the exposed parts of FSDP, DP and PP traffic are derived in planner.timing, not kept as figures
    assert set(calibrate.EXPOSED_FRACTION).isdisjoint({"fsdp", "dp", "pp"})


# --- the exposed part of each hidden collective, derived from the layout -------------------


def _layout_no_recompute(model, accelerator, mesh, global_tokens, **options):
    """As _layout, with recompute "none"."""
    return _layout(model, accelerator, mesh, global_tokens, **{"recompute": "none", **options})


def test_fsdp_exposes_the_first_layers_gather_and_the_last_layers_scatter():
    # LLaMA-3 8B on one HGX H100, fsdp 8, 4 microbatches of one 4,096-token sequence: a step
    # gathers each of the 32 layers 2·4 times and reduce-scatters it 4 times; only the first
    # gather and the last reduce-scatter have no math to hide behind
    lay = _layout_no_recompute("LLaMA-3 8B", "H100", {"fsdp": 8}, 8 * 4 * 4096, seq_len=4096)
    assert (lay.n_micro, lay.deepest) == (4, 32)
    grad = memory_plan.gradient_bytes_per_param(lay.state_recipe)
    layer_params = lay.dense_local * 8 / 32  # one layer's share of the device's gathered weights
    where = lay.placement["fsdp"]
    one_layer = timing.collective_s("H100", "all_gather", 2 * layer_params, where, calibrated=True) + (
        timing.collective_s("H100", "reduce_scatter", grad * layer_params, where, calibrated=True)
    )
    assert timing.fsdp_exposed_s(lay) == pytest.approx(one_layer, rel=1e-12)
    # as a fraction of the step's FSDP traffic: one layer's gather + scatter over 32·(2·4 gathers
    # + 4 scatters), in bytes (2 + g) / (32·(16 + 4g)), up to the per-message latency
    fraction = timing.exposed_fractions(lay)["fsdp"]
    assert fraction == pytest.approx((2 + grad) / (32 * (2 * 2 * 4 + grad * 4)), rel=0.02)
    kept = _layout_no_recompute(
        "LLaMA-3 8B", "H100", {"fsdp": 8}, 8 * 4 * 4096, seq_len=4096, keep_gathered_weights=True
    )
    assert timing.exposed_fractions(kept)["fsdp"] > fraction  # fewer gathers, the same first one


def test_fsdp_backward_traffic_hides_only_behind_the_backward():
    # LLaMA-3 8B over two HGX H100 nodes, fsdp 16, 4 microbatches of one 1,536-token sequence,
    # gradients reduce-scattered in FP32 (the 'fp32' recipe: PyTorch FSDP2's reduce dtype in
    # torchtitan, Megatron's default): the step's FSDP traffic is under the step's math, but each
    # layer's backward gathers the weights again and reduce-scatters twice their bytes, more than
    # the backward's two thirds of the layer's math cover; the forward's one gather hides
    sequences = 16 * 4
    options = dict(seq_len=1536, micro_batch_seqs=1, recompute="none")
    cand = explorer.evaluate("LLaMA-3 8B", "H100", {"fsdp": 16}, sequences * 1536, state_recipe="fp32", **options)
    lay = _layout_no_recompute("LLaMA-3 8B", "H100", {"fsdp": 16}, sequences * 1536, seq_len=1536, state_recipe="fp32")
    assert (lay.n_micro, lay.deepest, lay.placement["fsdp"].n_domains) == (4, 32, 2)
    traffic, math_s = cand.expected_terms["fsdp"], cand.expected_terms["math"]
    assert traffic < math_s
    layer_params = lay.dense_local * 16 / 32
    where = lay.placement["fsdp"]
    gather = timing.collective_s("H100", "all_gather", 2 * layer_params, where, calibrated=True)
    scatter = timing.collective_s("H100", "reduce_scatter", 4 * layer_params, where, calibrated=True)
    forward = math_s / (32 * 4) / 3  # no recomputation: the forward is a third of the FLOPs
    backward = 2 * forward
    assert gather < forward and gather + scatter > backward
    uncovered = 32 * 4 * (gather + scatter - backward)
    assert cand.expected_exposed_s["fsdp"] == pytest.approx(uncovered, rel=1e-9)
    assert cand.expected_step_s == pytest.approx(math_s + uncovered, rel=1e-9)
    # with BF16 gradients the backward's gather and scatter fit under its math: only the first
    # layer's gather and the last one's scatter stay exposed
    bf16 = explorer.evaluate("LLaMA-3 8B", "H100", {"fsdp": 16}, sequences * 1536, **options)
    lay16 = _layout_no_recompute("LLaMA-3 8B", "H100", {"fsdp": 16}, sequences * 1536, seq_len=1536)
    assert bf16.expected_exposed_s["fsdp"] == pytest.approx(timing.fsdp_exposed_s(lay16), rel=1e-9)
    # weights kept gathered: one gather per layer meets the first microbatch's forward, and each
    # backward covers only the FP32 reduce-scatter, which fits under it
    kept = explorer.evaluate(
        "LLaMA-3 8B", "H100", {"fsdp": 16}, sequences * 1536, state_recipe="fp32", keep_gathered_weights=True, **options
    )
    assert scatter < backward
    assert kept.expected_uncovered_s["fsdp"] == 0
    assert kept.expected_step_s < cand.expected_step_s


def test_dp_exposes_the_last_gradient_bucket():
    # Megatron-Core's default bucket: max(40e6, 1e6 × dp) parameters (megatron-core-ddp)
    small = _layout_no_recompute("LLaMA-3 8B", "H100", {"dp": 8}, 8 * 4096, seq_len=4096)
    wide = _layout_no_recompute("LLaMA-3 8B", "H100", {"dp": 64}, 64 * 4096, seq_len=4096)
    assert timing.gradient_bucket_params(small) == 40_000_000
    assert timing.gradient_bucket_params(wide) == 64_000_000
    # 8B parameters per device fill about 200 buckets of 40e6: the last one's all-reduce is exposed
    grad = memory_plan.gradient_bytes_per_param(small.state_recipe)
    bucket = timing.collective_s("H100", "all_reduce", grad * 40e6, small.placement["dp"], calibrated=True)
    assert timing.dp_exposed_s(small) == pytest.approx(bucket, rel=1e-12)
    assert timing.exposed_fractions(small)["dp"] == pytest.approx(40e6 / small.dense_local, rel=0.02)
    # a model smaller than one bucket exposes its whole reduction
    tiny = _layout_no_recompute("LLaMA-3 8B", "H100", {"dp": 2, "tp": 8, "pp": 32}, 2 * 32 * 4096, seq_len=4096)
    assert tiny.dense_local < 40e6 and timing.exposed_fractions(tiny)["dp"] == pytest.approx(1.0)


def test_pipeline_sends_are_exposed_unless_the_schedule_overlaps_them():
    # Megatron overlaps p2p only in its interleaved schedule; there the fill's and drain's
    # p - 1 sends each way stay exposed, of the 2·v·m a stage makes
    mesh, tokens = {"pp": 4, "dp": 2}, 2 * 8 * 4096
    blocking = _layout_no_recompute("LLaMA-3 8B", "H100", mesh, tokens, seq_len=4096)
    assert blocking.n_micro == 8 and timing.pp_exposed_fraction(blocking) == 1.0
    overlapped = _layout_no_recompute(
        "LLaMA-3 8B", "H100", mesh, tokens, seq_len=4096, schedule="interleaved", n_virtual=2
    )
    assert timing.pp_exposed_fraction(overlapped) == pytest.approx(3 / 16)
    assert timing.exposed_fractions(overlapped)["pp"] == pytest.approx(3 / 16)
    assert timing.pp_exposed_fraction(_layout("LLaMA-3 8B", "H100", {"dp": 8}, 8 * 4096, seq_len=4096)) == 0.0


def _repo():
    from pathlib import Path

    return Path(__file__).resolve().parents[1]


# --- the command line (issue 29's done-when, issue 31) -------------------------------------


def _cli(*args):
    """`python -m shardbook.explorer ARGS`, run in this process (conftest.run_main)."""
    return run_main(explorer.main, *args)


def test_command_line_expresses_and_ranks_llama3s_own_layout():
    result = _cli(
        "LLaMA-3 405B", "H100", "16384", "16777216", "--seq-len", "8192", "--axes", "fsdp,tp,pp",
        "--schedule", "interleaved", "--n-virtual", "4", "--uneven-pipeline", "--micro-batch", "1",
        "--rank", "fsdp=128,tp=8,pp=16",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[2] == "Options: --micro-batch 1, --schedule interleaved, --n-virtual 4, --uneven-pipeline"
    header = next(line for line in lines if line.startswith("mesh")).split()
    assert header[:7] == ["mesh", "schedule", "micro", "recompute", "weights", "fits", "memory+reserve"]
    # how each row runs, as the flags ask: interleaved with 4 virtual stages where 4 divides the deepest
    # stage's layers (126 on 16 stages: 8), the largest count that divides them where it does not (on 2
    # stages: 63, so 3), one sequence per microbatch
    rows = {r["mesh"]: r for r in table_rows(result.stdout)}
    assert (rows["fsdp 128 × tp 8 × pp 16"]["schedule"], rows["fsdp 128 × tp 8 × pp 16"]["micro"]) == (
        "interleaved v=4",
        "1",
    )
    assert rows["fsdp 512 × tp 16 × pp 2"]["schedule"] == "interleaved v=3"
    assert {r["micro"] for r in rows.values()} == {"1"}
    assert "fsdp 128 × tp 8 × pp 16 ranks" in result.stdout
    one = _cli("LLaMA-3 405B", "H100", "16384", "16777216", "--seq-len", "8192", "--uneven-pipeline",
               "--mesh", "fsdp=128,tp=8,pp=16", "--schedule", "interleaved", "--n-virtual", "4", "--json")  # fmt: skip
    assert one.returncode == 0, one.stderr
    (cand,) = json.loads(one.stdout)
    assert cand["mesh"]["pp"] == 16 and cand["n_virtual"] == 4 and cand["expected_step_s"] > cand["step_s"]


def test_the_readme_command_prices_llama3s_mesh_as_the_validation_appendix_does():
    # README, "Planning your own run": Llama 3's own layout on 16,384 H100 with v = 8 virtual stages
    # (chunks of one layer, the first only the embedding: dubey2024llama3 §3.3.2). The search once
    # capped v at 4 (a chunk per layer of the shortest stage), so the ranked mesh was not the run's
    from shardbook import validation
    from shardbook.planner import search

    assert search.largest_n_virtual("LLaMA-3 405B", 16, uneven_pipeline=True) == 8
    assert search.largest_n_virtual("LLaMA-3 405B", 16, uneven_pipeline=False) == 1
    result = _cli(
        "LLaMA-3 405B", "H100", "16384", "16777216", "--seq-len", "8192", "--axes", "fsdp,tp,pp",
        "--schedule", "interleaved", "--n-virtual", "8", "--uneven-pipeline", "--micro-batch", "1",
        "--keep-gathered-weights", "--rank", "fsdp=128,tp=8,pp=16",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if "fsdp 128 × tp 8 × pp 16 ranks" in x)
    expected_ms = float(re.search(r"expected ([\d,]+) ms", line).group(1).replace(",", ""))
    row = validation.row(measured.run_named("Llama 3 405B, 16,384 H100"))
    assert expected_ms == pytest.approx(row.expected_step_s * 1e3, abs=0.5)


@pytest.mark.parametrize(
    "args,message",
    [
        # over the four axes the search spanned before it took dp too (as many meshes as the audit priced)
        # a search of a trillion devices to its end: seconds of one core (make test runs it)
        pytest.param(("1000000000000", "1e15", "--axes", "fsdp,tp,ep,pp"), None, marks=pytest.mark.slow),
        (("9007199254740992", "1e18", "--axes", "fsdp,tp,ep,pp"), None),
        (("64", "524288", "--axes", ""), "error: --axes: name axes separated by commas"),
        (("64", "524288", "--axes", ","), "error: --axes: name axes separated by commas"),
        (("64", "524288", "--axes", "tp,tp"), "error: --axes: 'tp' is given twice"),
        (("64", "1e300"), "error: tokens: at most 1e30 tokens"),
        (("64", "524288", "--top", "-1"), "error: --top: must be >= 1"),
        (("64", "524288", "--schedule", "foo"), "error: --schedule: unknown value 'foo'"),
        (("64", "524288", "--zero", "4"), "error: --zero: must be one of 0, 1, 2, 3"),
        (("64", "524288", "--mesh", "fsdp=x"), "error: --mesh: the degree of 'fsdp' must be an integer"),
        (("64", "524288", "--mesh", "fsdp=32"), "error: --mesh: degrees multiply to 32, not to the device count 64"),
        (("6.5", "524288"), "error: n_devices: must be a whole number >= 1"),
        (("64", "nan"), "error: tokens: must be a finite number"),
        (("1e40", "1e41"), "error: n_devices: at most 2**53 devices"),
    ],
)
def test_command_line_bad_or_huge_inputs_end_quickly(args, message):
    """The reliability audit's explorer rows: a device count of 1e12 or 2**53
    must not hang (divisors come from the prime factorization), and bad input
    is one line on stderr with exit code 2."""
    start = time.perf_counter()
    result = _cli("LLaMA-3 70B", "TPU v5p", *args)
    assert time.perf_counter() - start < 60
    if message is None:
        assert result.returncode == 0, result.stderr
        return
    assert result.returncode == 2
    assert result.stderr.startswith(message) and "Traceback" not in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_odd_input_files_are_one_line_not_a_traceback(tmp_path):
    """The reliability probe's files: valid JSON or TOML nested thousands deep,
    a non-string _name_or_path, a file that never ends (/dev/zero) and an
    infinite figure each end as one line naming the file, exit code 2."""
    deep = tmp_path / "deep.json"
    deep.write_text('{"model_type": "llama", "x": ' + "[" * 3000 + "]" * 3000 + "}")
    named = tmp_path / "named.json"
    config = {"model_type": "llama", "_name_or_path": 5, "hidden_size": 4096, "num_hidden_layers": 32}
    named.write_text(json.dumps({**config, "num_attention_heads": 32, "vocab_size": 32000, "intermediate_size": 11008}))
    endless = tmp_path / "endless.json"
    endless.symlink_to("/dev/zero")
    deep_toml = tmp_path / "deep.toml"
    deep_toml.write_text("a = " + "[" * 3000 + "]" * 3000)
    infinite = tmp_path / "infinite.toml"
    h100 = accelerator_file.to_toml("H100").replace('name = "H100"', 'name = "Infinite"', 1)
    infinite.write_text(re.sub(r"(\[bf16_dense_flops_per_s\]\nvalue = )\S+", r"\1inf", h100))
    cases = [
        (
            ("--config", str(deep), "H100", "64", "4M"),
            f"error: --config: {deep}: nested more than 32 levels deep; a config nests a few levels",
        ),
        (("--config", str(named), "H100", "64", "4M"), f"error: {named}: _name_or_path must be a string"),
        (
            ("--config", str(endless), "H100", "64", "4M"),
            f"error: --config: {endless}: is a device, not a regular file",
        ),
        (("LLaMA-3 8B", str(deep_toml), "64", "4M"), f"error: {deep_toml}: nested more than 32 levels deep"),
        (
            ("LLaMA-3 8B", str(infinite), "64", "4M"),
            f"error: {infinite}: bf16_dense_flops_per_s.value must be a finite",
        ),
    ]
    for args, message in cases:
        result = _cli(*args)
        assert result.returncode == 2, (args, result.stderr)
        assert result.stderr.startswith(message) and len(result.stderr.strip().splitlines()) == 1, result.stderr
    form = {"model": "LLaMA-3 8B", "accelerator": "H100", "n_devices": "64", "seq_len": "4096", "batch_seqs": 5}
    assert page.plan(form) == {"ok": False, "error": "batch_seqs: must be text, got int"}
    assert page.plan([1])["error"] == "form: must be an object of the page's fields, got list"
    assert page.plan("[" * 3000 + "]" * 3000) == {
        "ok": False,
        "error": "form: nested more than 32 levels deep; the page's form nests a few levels",
    }


def test_search_of_huge_device_counts_is_bounded():
    for n in (10**12, 2**53, 2**40):
        start = time.perf_counter()
        meshes = explorer.factorizations(n, "LLaMA-3 70B")
        assert time.perf_counter() - start < 5
        assert all(math.prod(m) == n for m in meshes)
    assert placement.divisors(2**40) == [2**k for k in range(41)]
    assert placement.prime_factors(10**12) == [2] * 12 + [5] * 12
    assert planner.MAX_MESHES >= 10**4


def test_audit_counterexamples_are_value_errors():
    """The reliability audit's section 10 rows for the explorer and fabric."""
    with pytest.raises(ValueError, match="mesh\\['tp'\\]"):
        explorer.check_mesh("LLaMA-3 70B", {"tp": 3}, 4096)
    explorer.check_mesh("LLaMA-3 70B", {"fsdp": 8}, 4096)  # missing axes are 1, not a KeyError
    with pytest.raises(ValueError, match="axis: the slice has 2 axes"):
        fabric.has_wraparound("TPU v6e", (8, 8), 2)
    with pytest.raises(ValueError, match="slice_shape: must be a non-empty tuple"):
        fabric.has_wraparound("TPU v5e", (), 0)
    with pytest.raises(ValueError, match="axes: name at least one of"):
        explorer.factorizations(64, "LLaMA-3 70B", axes=())
    with pytest.raises(ValueError, match="axes: 'tp' is given twice"):
        explorer.factorizations(64, "LLaMA-3 70B", axes=("tp", "tp"))


def test_best_for_mesh_is_the_fastest_fitting_microbatch_the_search_tries():
    # the sizes tried run smallest first and stop at the first that leaves a rank no whole
    # microbatch; the choice is fitting first, then the shortest expected step, the smallest on a tie
    tried = explorer.candidates_by_micro_batch("LLaMA-3 8B", "MI355X", {"fsdp": 8}, 2**20, n_devices=8)
    assert list(tried) == list(explorer.MICRO_BATCH_CHOICES[: len(tried)]) and len(tried) > 1
    assert all(c.micro_batch_seqs == m for m, c in tried.items())
    best = explorer.best_for_mesh("LLaMA-3 8B", "MI355X", {"fsdp": 8}, 2**20, n_devices=8)
    fastest = min(c.expected_step_s for c in tried.values() if c.fits)
    assert best.fits and best.expected_step_s == fastest
    assert best.micro_batch_seqs == min(m for m, c in tried.items() if c.fits and c.expected_step_s == fastest)


def test_fp8_without_fp8_matmuls_is_refused_and_one_virtual_stage_is_1f1b():
    # FP8 on an accelerator without FP8 matmuls was priced as BF16 without a word, and an
    # interleaved schedule of one virtual stage as 1F1B with its sends overlapped (a review)
    with pytest.raises(ValueError, match="precision: 'fp8' needs FP8 matmuls, which A100 does not have"):
        explorer.evaluate("LLaMA-3 8B", "A100", {"fsdp": 8}, 2**20, seq_len=4096, micro_batch_seqs=1, precision="fp8")
    # an interleaved schedule of one virtual stage is 1F1B: its sends are not overlapped either
    one, plain = (
        explorer.evaluate(
            "LLaMA-3 70B", "H100", {"fsdp": 8, "pp": 8}, 2**22, seq_len=4096, micro_batch_seqs=1, schedule=s
        )
        for s in ("interleaved", "1f1b")
    )
    assert one.expected_step_s == pytest.approx(plain.expected_step_s, rel=1e-12) and one.step_s == plain.step_s
    # and keeps 1F1B's p microbatches in flight on the first stage, not interleaving's 2p - 1
    assert one.activation_bytes_per_device == plain.activation_bytes_per_device
    two = explorer.evaluate(
        "LLaMA-3 70B", "H100", {"fsdp": 8, "pp": 8}, 2**22, seq_len=4096, micro_batch_seqs=1,
        schedule="interleaved", n_virtual=2,
    )  # fmt: skip
    assert two.expected_step_s < plain.expected_step_s
    # without a pipeline the schedule does not matter, and FP8 where the accelerator has it runs
    explorer.evaluate(
        "LLaMA-3 8B", "H100", {"fsdp": 8}, 2**20, seq_len=4096, micro_batch_seqs=1, schedule="interleaved"
    )
    fp8 = explorer.evaluate("LLaMA-3 8B", "H100", {"fsdp": 8}, 2**20, seq_len=4096, micro_batch_seqs=1, precision="fp8")
    bf16 = explorer.evaluate("LLaMA-3 8B", "H100", {"fsdp": 8}, 2**20, seq_len=4096, micro_batch_seqs=1)
    assert fp8.expected_step_s < bf16.expected_step_s


def test_a_mesh_that_does_not_fit_shows_its_least_memory():
    # the search kept the fastest microbatch of a mesh that fits at none, overstating what it needs
    from shardbook.planner import search

    tried = search.candidates_by_micro_batch("LLaMA-3 405B", "H100", {"fsdp": 4, "tp": 2}, 2**22, n_devices=8)
    assert not any(c.fits for c in tried.values()) and len(tried) > 1
    best = search.best_for_mesh("LLaMA-3 405B", "H100", {"fsdp": 4, "tp": 2}, 2**22, n_devices=8)
    assert best.memory_bytes_per_device == min(c.memory_bytes_per_device for c in tried.values())
    result = _cli("LLaMA-3 405B", "H100", "8", "4M")
    assert result.returncode == 0, result.stderr
    note = next(x for x in result.stdout.splitlines() if x.startswith("No mesh fits"))
    found = explorer.explore("LLaMA-3 405B", "H100", 8, 2**22)
    least = min(found, key=lambda c: c.memory_bytes_per_device)
    assert f"the smallest need, {least.label}, holds {least.memory_bytes_per_device / 1e9:,.1f} GB" in note


def test_no_fit_for_want_of_the_reserve_says_so():
    """Every mesh fits the HBM but not what the reserve leaves: the note
    compares with what is left and names --reserve (it compared with the
    whole HBM, which the need was below)."""
    result = _cli("LLaMA-3 8B", "H100", "8", "4M", "--reserve", "75GB", "--budget", "500")
    assert result.returncode == 0, result.stderr
    note = next(x for x in result.stdout.splitlines() if x.startswith("No mesh fits"))
    found = explorer.explore("LLaMA-3 8B", "H100", 8, 2**22, reserve_bytes=75e9)
    least = min(found, key=lambda c: c.memory_bytes_per_device)
    assert least.memory_bytes_per_device < least.hbm_bytes  # the whole HBM would hold it
    left = least.hbm_bytes - 75e9
    assert f"against the {left / 1e9:,.1f} GB of HBM left after the 75.0 GB reserve" in note
    assert note.endswith("or lower --reserve.")


def test_a_virtual_stage_count_without_a_schedule_names_the_meshes_that_run_another():
    """--n-virtual alone asks for interleaving at that count; a search that
    runs a mesh at another count says so (it changed it silently)."""
    result = _cli("LLaMA-3 8B", "H100", "8", "4M", "--budget", "500", "--n-virtual", "3", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    piped = [r for r in rows if r["mesh"]["pp"] > 1]
    assert piped and all((r["schedule"], r["n_virtual"]) != ("interleaved", 3) for r in piped)
    text = _cli("LLaMA-3 8B", "H100", "8", "4M", "--budget", "500", "--n-virtual", "3").stdout
    assert any(x.startswith("--n-virtual 3 does not divide the layers per stage of ") for x in text.splitlines())


@pytest.mark.slow  # six default searches by the command line: seconds of one core (make test runs it)
def test_the_command_line_says_what_it_adapted_and_why_a_mesh_is_missing():
    adapted = _cli("LLaMA-3 70B", "H100", "64", "4M", "--schedule", "interleaved", "--n-virtual", "3", "--top", "3")
    assert adapted.returncode == 0, adapted.stderr
    line = next(x for x in adapted.stdout.splitlines() if x.startswith("--n-virtual 3 does not divide"))
    assert "fsdp 2 × tp 2 × pp 16: 1f1b" in line or "more (--json gives each one's schedule)" in line
    as_json = json.loads(_cli("LLaMA-3 70B", "H100", "64", "4M", "--schedule", "interleaved", "--n-virtual", "3",
                              "--top", "100", "--json").stdout)  # fmt: skip
    pipelined = [c for c in as_json if c["mesh"]["pp"] > 1]
    assert pipelined and all(c["n_virtual"] in (1, 2) for c in pipelined)
    assert f"of {len(pipelined)} of these meshes" in line
    assert len(as_json) == 84 and len(json.loads(_cli("LLaMA-3 70B", "H100", "64", "4M", "--json").stdout)) == 10
    ranked = _cli("LLaMA-3 70B", "H100", "64", "4M", "--rank", "fsdp=32,tp=4")
    assert "fsdp 32 × tp 4: not among the candidates: its degrees multiply to 128, not to the device count 64" in (
        ranked.stdout
    )
    ranked = _cli("LLaMA-3 70B", "H100", "64", "4M", "--rank", "fsdp=16,cp=4")
    assert "fsdp 16 × cp 4: not among the candidates: no candidate uses cp (name it in --axes)" in ranked.stdout
    ranked = _cli("LLaMA-3 70B", "H100", "64", "4M", "--rank", "fsdp=16,tp=4")
    assert re.search(r"fsdp 16 × tp 4 ranks \d+ of the \d+ that fit: expected", ranked.stdout), ranked.stdout


def test_a_flag_for_one_input_may_stand_between_the_others():
    # MODEL first, then --accelerator-file, then N_DEVICES and BATCH was refused as unrecognized
    path = "tests/data/accelerators/my-h100.toml"
    # two axes keep it quick (the search's budget counts candidates, so a busy machine prints the same table)
    after = _cli("LLaMA-3 70B", "--accelerator-file", path, "256", "4M", "--top", "2", "--axes", "fsdp,tp")
    before = _cli("--accelerator-file", path, "LLaMA-3 70B", "256", "4M", "--top", "2", "--axes", "fsdp,tp")
    assert after.returncode == 0 and before.returncode == 0, after.stderr
    assert after.stdout == before.stdout


def test_flags_must_be_booleans_and_mla_widths_counts():
    # the reliability probe: 'no' and "False" read as true, and MLA(-1, 0, 0, 0, 0) gave negative
    # parameter counts, silently
    with pytest.raises(ValueError, match="x.tied_embeddings: must be True or False, got 'no'"):
        models.Model("x", "llama3", 4096, 14336, 32, 32, 8, 128, 128256, tied_embeddings="no")
    with pytest.raises(ValueError, match="mla.q_lora_rank: must be an integer >= 0, got -1"):
        models.MLA(-1, 0, 0, 0, 0)
    with pytest.raises(ValueError, match="x.mla: must be a models.MLA or None, got 'x'"):
        models.Model("x", "llama3", 4096, 14336, 32, 32, 8, 128, 128256, mla="x")
    with pytest.raises(ValueError, match="sequence_parallel: must be True or False, got 'False'"):
        explorer.evaluate("LLaMA-3 8B", "H100", {"fsdp": 8, "tp": 8}, 2**22, sequence_parallel="False")


@pytest.mark.parametrize(
    "args,message",
    [
        (("64", "4M", "--mesh", "fsdp=64", "--rank", "fsdp=8,tp=8"), "error: --rank: ranks a mesh among the search's"),
        (("64", "4M", "--json", "--rank", "fsdp=8,tp=8"), "error: --rank: prints a line under the table"),
        # both were ignored beside --mesh without a word
        (("64", "4M", "--mesh", "fsdp=64", "--axes", "fsdp"), "error: --axes: shapes the search, which --mesh skips"),
        (("64", "4M", "--budget", "100", "--mesh", "fsdp=64"), "error: --budget: shapes the search, which --mesh skip"),
        (
            ("64", "--batch-seqs", "7", "--mesh", "fsdp=64"),
            "error: batch: 7 sequences of 4096 over 64 data-parallel ranks (dp × fsdp × ep) leave less than one",
        ),
        (
            (
                "64",
                "256K",
                "--seq-len",
                "8192",
                "--mesh",
                "fsdp=8,pp=8",
                "--schedule",
                "interleaved",
                "--n-virtual",
                "2",
            ),
            "error: n_microbatches: interleaving (n_virtual=2) needs at least n_stages=8 microbatches",
        ),
    ],
)
def test_messages_name_the_flag_and_the_counts(args, message):
    # the reliability probe: --rank beside --mesh blamed --axes, --rank vanished under --json, and
    # too small a batch was reported in the API's words (global_tokens) without its counts
    result = _cli("LLaMA-3 70B", "H100", *args)
    assert result.returncode == 2 and result.stderr.startswith(message), result.stderr


def test_an_accelerator_file_flag_names_its_rule():
    result = _cli("LLaMA-3 70B", "--accelerator-file", "foo", "64", "4M")
    assert result.returncode == 2
    assert result.stderr.startswith("error: --accelerator-file: must end in .toml or .json, got 'foo'"), result.stderr


def test_a_capacity_factor_beyond_every_token_is_refused_by_name():
    # the reliability probe: capacity_factor=1e300 was reported as an infinite math_s
    m = models.get("Mixtral 8x7B")
    with pytest.raises(ValueError, match=r"capacity_factor: at most n_experts / top_k = 4 for Mixtral 8x7B"):
        explorer.evaluate(m, "H100", {"fsdp": 8, "ep": 8}, 2**22, capacity_factor=1e300)
    # the largest allowed factor is priced: every expert computes a capacity of all the tokens
    edge = explorer.evaluate(m, "H100", {"fsdp": 8, "ep": 8}, 2**22, capacity_factor=m.n_experts / m.top_k)
    base = explorer.evaluate(m, "H100", {"fsdp": 8, "ep": 8}, 2**22, capacity_factor=1.0)
    assert math.isfinite(edge.math_s) and edge.math_s > base.math_s


# --- the default search: what teams search (issue 46, item 4) ---------------------------------


# The review's three cases (2026-12-05-planner-practitioner.md, S3-S5): explore's arguments.
REVIEW_SEARCHES = {
    "LLaMA-3 405B": (("LLaMA-3 405B", "H100", 16384, 2048 * 8192), dict(seq_len=8192)),
    "DeepSeek-V3": (("DeepSeek-V3", "H800", 2048, 15360 * 4096), dict(seq_len=4096)),
    "Qwen3-30B-A3B": (("tests/data/hf_configs/qwen3-30b-a3b.json", "H100", 64, 512 * 4096), dict(seq_len=4096)),
}


@pytest.fixture(scope="module")
def full_searches():
    """explore without a budget (every mesh refined where its floor allows) on
    the review's cases, each searched once per worker: the tests that use it
    share a worker (conftest.SHARED_FIXTURE_GROUPS), so each case once in all."""
    found = {}

    def search_case(case):
        if case not in found:
            args, options = REVIEW_SEARCHES[case]
            found[case] = explorer.explore(inputs.read_model(args[0]), *args[1:], **options)
        return found[case]

    return search_case


@pytest.mark.slow
def test_default_search_puts_405b_on_16k_h100_in_tp_within_a_node_and_a_pipeline(full_searches):
    # Meta ran TP 8 × PP 16 × DP 128, interleaved (dubey2024llama3 §3.3.2); with default options the search
    # spans dp, tries uneven pipelines (126 layers), interleaving, the schedules and kept weights
    found = full_searches("LLaMA-3 405B")
    best = found[0]
    assert found.proven and best.fits and search.batch_divides(best)
    assert best.tp <= 8 and best.pp > 1 and best.placement["tp"].n_domains == 1, best.label
    # the cross-domain TP16 meshes the old default ranked first are still there, priced and flagged
    tp16 = [c for c in found if c.tp == 16 and c.pp == 1]
    assert tp16 and all(cli.tp_across_domains(c) == 2 for c in tp16)


@pytest.mark.slow
def test_default_search_puts_deepseek_v3_on_2048_h800_in_pp_ep_with_dualpipe(full_searches):
    # DeepSeek ran PP 16 × EP 64 × DP 2 with DualPipe (deepseek2024v3 §3.2); BF16 here, the default
    found = full_searches("DeepSeek-V3")
    best = found[0]
    assert found.proven and best.fits and search.batch_divides(best)
    assert best.pp > 1 and best.ep > 1 and best.schedule == "dualpipe", (best.label, best.schedule)


@pytest.mark.slow  # two searches of each case, one without a budget: about 50 s of one core (make test runs it)
@pytest.mark.parametrize("case", list(REVIEW_SEARCHES))
def test_the_default_budget_reaches_the_full_searchs_first_row(case, full_searches):
    # the DeepSeek-V3 search at the command line's budget printed fsdp 4 × tp 2 × ep 128 × pp 2 (DualPipe, full
    # recompute, 43.2 s) and said it had not refined every mesh, while the search without a budget finds a mesh
    # 19 % faster: the refinement went first to meshes credited with EP traffic that only DualPipe hides, with no
    # pipeline to run it or without the memory to run it at their base's recomputation, and the base pass spent
    # the budget pricing variants at microbatch sizes above one where they had not fit
    args, options = REVIEW_SEARCHES[case]
    full = full_searches(case)
    budgeted = explorer.explore(
        inputs.read_model(args[0]), *args[1:], budget_candidates=search.SEARCH_BUDGET_CANDIDATES, **options
    )
    assert full.proven  # the first row of the search without a budget is the best of every variant of every mesh
    first, best = budgeted[0], full[0]
    assert (first.label, search.chosen_options(first), first.recompute, first.expected_step_s) == (
        best.label,
        search.chosen_options(best),
        best.recompute,
        best.expected_step_s,
    )
    if case == "DeepSeek-V3":
        # what the search without a budget finds, and the budget now reaches (`--budget 200000` at 5d1d32c priced
        # 12,611 candidates and proved fsdp 2 × tp 4 × ep 128 × pp 2 at 35.1 s; since an expert beside tp computes
        # its tp group's rows (timing.rows_per_expert), its grouped GEMMs run nearer their plateau at tp 4, and
        # the mesh with four data-parallel replicas of ep 64 leads the rows tied with it by 2 ms)
        assert first.mesh == {"dp": 4, "fsdp": 1, "tp": 4, "cp": 1, "ep": 64, "pp": 2}
        assert (first.schedule, first.recompute, first.micro_batch_seqs) == ("dualpipe", "none", 1)
        # 34.7 s until the attention scores took their kernel's share of η (FlashAttention-2's for an unnamed
        # stack on Hopper, calibrate.attention_share)
        assert 37.8 < first.expected_step_s < 37.95


def test_the_refinement_order_credits_only_what_a_mesh_can_remove_where_it_fits():
    # EP traffic is credited to a mesh's promise only where DualPipe may hide it: a mesh with a pipeline, whose
    # base candidate leaves DualPipe the memory to run at the same microbatch and recomputation
    m, acc, tokens = models.get("DeepSeek-V3"), hardware.get("H800"), 15360 * 4096
    options = search._searched(dict(seq_len=4096))

    def base(mesh):
        return explorer.evaluate(m, acc, mesh, tokens, seq_len=4096, micro_batch_seqs=1, uneven_pipeline=True,
                                 schedule="zero_bubble" if mesh.get("pp", 1) > 1 else "1f1b")  # fmt: skip

    flat = {"fsdp": 4, "tp": 2, "ep": 256}  # no pipeline: no DualPipe, so its EP traffic stays
    cand = base(flat)
    exposed = cand.expected_exposed_s
    assert cand.fits and exposed["ep"] > 1.0
    promise = search._promise([cand], search._variants(m, acc, flat, options), acc)
    assert promise == (0, cand.expected_step_s - exposed["fsdp"])  # kept weights may shorten FSDP's part only
    for mesh in ({"fsdp": 4, "tp": 2, "ep": 128, "pp": 2}, {"fsdp": 2, "tp": 4, "ep": 128, "pp": 2}):
        cand = base(mesh)
        dualpipe = explorer.evaluate(m, acc, mesh, tokens, seq_len=4096, micro_batch_seqs=1, uneven_pipeline=True,
                                     schedule="dualpipe", recompute=cand.recompute)  # fmt: skip
        # the estimate agrees with the memory count: DualPipe fits at TP 4 and not at TP 2 without recomputing
        assert search._room_for(cand, "dualpipe", 1) == dualpipe.fits == (mesh["tp"] == 4)
        credited = cand.expected_step_s - search._promise([cand], search._variants(m, acc, mesh, options), acc)[1]
        overlap_gain = (
            cand.expected_exposed_s["pp"] + cand.expected_terms["bubble"] + cand.expected_exposed_s["fsdp"]
        )  # kept weights too
        if dualpipe.fits:
            # DualPipe removes the exchanges but for the share it leaves exposed, what its own row prices
            left = calibrate.exposed_fraction("ep_overlapped") * cand.expected_terms["ep"]
            assert dualpipe.expected_exposed_s["ep"] == pytest.approx(left, rel=1e-9)
            assert credited == pytest.approx(overlap_gain + cand.expected_exposed_s["ep"] - left, rel=1e-9)
        else:
            assert credited <= overlap_gain * (1 + 1e-9)


def test_recompute_none_is_the_fastest_policy_that_fits_not_the_first():
    mesh = {"fsdp": 8}
    chosen = explorer.evaluate("LLaMA-3 8B", "H100", mesh, 2**20, micro_batch_seqs=2)
    each = {p: explorer.evaluate("LLaMA-3 8B", "H100", mesh, 2**20, micro_batch_seqs=2, recompute=p)
            for p in memory_plan.SEARCH_POLICIES}  # fmt: skip
    fitting = {p: c for p, c in each.items() if c.fits}
    assert len(fitting) == 3  # a case where every policy fits: the choice is by time, not by order
    assert chosen.recompute == min(fitting, key=lambda p: fitting[p].expected_step_s)
    assert chosen.expected_step_s == min(c.expected_step_s for c in fitting.values())
    # where only some fit, the fastest of those
    big = {"fsdp": 32, "tp": 2}
    chosen = explorer.evaluate("LLaMA-3 70B", "H100", big, 2**22, seq_len=8192, micro_batch_seqs=2)
    each = {p: explorer.evaluate("LLaMA-3 70B", "H100", big, 2**22, seq_len=8192, micro_batch_seqs=2, recompute=p)
            for p in memory_plan.SEARCH_POLICIES}  # fmt: skip
    assert [p for p, c in each.items() if c.fits] == ["full"] and chosen.recompute == "full" and chosen.fits
    assert chosen.expected_step_s == each["full"].expected_step_s


def test_a_batch_that_does_not_divide_never_outranks_a_mesh_that_runs():
    # 96 sequences on 64 devices: fsdp 64 leaves 1.5 sequences a rank, priced at the average (fast), but cannot run
    found = explorer.explore("LLaMA-3 8B", "H100", 64, 96 * 4096, axes=("fsdp", "tp", "pp"))
    runs = [i for i, c in enumerate(found) if c.fits and search.batch_divides(c)]
    uneven = [i for i, c in enumerate(found) if c.fits and not search.batch_divides(c)]
    assert runs and uneven and max(runs) < min(uneven)
    # the ordering matters here: some mesh that does not divide is priced faster than one that runs
    assert min(found[i].expected_step_s for i in uneven) < max(found[i].expected_step_s for i in runs)
    assert search.rank_key(found[uneven[0]]) > search.rank_key(found[runs[-1]])


def test_tp_across_nvlink_domains_is_priced_over_the_nics():
    # a TP group of 16 H100 spans two NVLink domains: its collectives cross the NICs (flat rings, the data
    # through the 8 per-GPU NICs of each node), never at NVLink's rate
    cand = explorer.evaluate("LLaMA-3 405B", "H100", {"fsdp": 1024, "tp": 16}, 2**24, seq_len=8192)
    across = cand.placement["tp"]
    assert (across.n_domains, across.members_per_domain) == (2, 8) and cli.tp_across_domains(cand) == 2
    acc = hardware.get("H100")
    buffer = 64e6
    priced = timing.collective_s(acc, "all_gather", buffer, across, calibrated=True)
    nic_rate = acc.scale_out_bytes_per_s * calibrate.scale_out_efficiency(acc)
    # (n-1)/n of the buffer leaves each node through its 8 NICs
    assert priced >= buffer * 15 / 16 / (8 * nic_rate)
    # and more than the same bytes would take over NVLink, each GPU's egress
    nvlink_rate = acc.scale_up_egress_bytes_per_s * calibrate.scale_up_efficiency(acc)
    assert priced > buffer * 15 / 16 / nvlink_rate
    # the bound, too, moves the cross-node share through the NICs
    assert timing.collective_s(acc, "all_gather", buffer, across) >= buffer * (1 / 2) / (8 * acc.scale_out_bytes_per_s)
    listed = json.loads(_cli("LLaMA-3 405B", "H100", "16384", "--batch-seqs", "2048", "--seq-len", "8192",
                             "--mesh", "fsdp=1024,tp=16", "--json").stdout)  # fmt: skip
    assert listed[0]["tp_across_domains"] == 2


@pytest.mark.slow  # prices every variant of every mesh on purpose: seconds of one core (make test runs it)
def test_skipping_dominated_variants_and_the_staged_search_change_no_row(monkeypatch):
    # ZB-H1 before 1F1B, weights regathered before kept, and the floors that stop the refinement must leave
    # every mesh's row what pricing every variant of every mesh gives
    args = ("LLaMA-3 70B", "H100", 64, 2**22)
    staged = explorer.explore(*args, seq_len=8192)
    monkeypatch.setattr(search, "SKIP_DOMINATED", False)
    every = {}
    for mesh in search.factorizations(64, "LLaMA-3 70B", search.SEARCH_AXES, 8192, None):
        try:
            every[tuple(sorted(mesh.items()))] = search.best_for_mesh(
                *args[:2], mesh, args[3], n_devices=64, seq_len=8192
            )
        except memory_plan.Unusable:
            pass
    assert staged.proven and len(staged) == len(every)
    best = min(every.values(), key=search.rank_key)
    assert (staged[0].label, staged[0].expected_step_s) == (best.label, best.expected_step_s)
    for cand in staged:
        full = every[tuple(sorted(cand.mesh.items()))]
        if cand.fits and search.batch_divides(cand):
            # a row kept from the base pass is never faster than its mesh's best, nor is any refined row off
            assert cand.expected_step_s >= full.expected_step_s * (1 - 1e-12)


def test_precision_auto_tries_fp8_only_where_the_accelerator_has_it():
    mesh = {"fsdp": 8}
    auto = search.best_for_mesh("LLaMA-3 8B", "H100", mesh, 2**20, n_devices=8, precision="auto")
    fp8 = search.best_for_mesh("LLaMA-3 8B", "H100", mesh, 2**20, n_devices=8, precision="fp8")
    assert auto.precision == "fp8" and auto.expected_step_s == fp8.expected_step_s
    assert search.best_for_mesh("LLaMA-3 8B", "TPU v5e", mesh, 2**20, n_devices=8, precision="auto").precision == "bf16"
    assert explorer.explore("LLaMA-3 8B", "H100", 8, 2**20)[0].precision == "bf16"  # BF16 stays the default


def test_the_search_says_what_it_left_out():
    ranked = search.Ranked([])
    ranked.unrefined, ranked.proven = 12, False
    assert cli.search_line(ranked).startswith("Left out: 12 meshes were priced only under their base variants")
    ranked.proven = True
    assert "none of them can beat it" in cli.search_line(ranked)
    assert cli.search_line(search.Ranked([])) == ""


@pytest.mark.slow  # a search run to its budget, twice: seconds of one core (make test runs it)
def test_the_search_budget_is_work_so_a_busy_machine_prints_the_same_table(monkeypatch, capsys):
    # the budget counts candidates priced, never seconds: a clock that races (a loaded machine, as a
    # clock-bound search would see it) changes nothing, neither the rows nor the line on what was left out
    argv = ["LLaMA-3 70B", "H100", "64", "4M", "--budget", "800", "--top", "30"]
    assert cli.main(argv) == 0
    calm = capsys.readouterr().out
    assert "Left out: " in calm  # the budget binds: some meshes kept their base rows
    ticks = iter(range(10**9))
    for name in ("monotonic", "perf_counter"):
        monkeypatch.setattr(time, name, lambda: next(ticks) * 10.0)  # ten seconds between any two readings
    assert cli.main(argv) == 0
    assert capsys.readouterr().out == calm


def test_the_budget_and_its_unit_are_in_the_help_and_a_bad_one_is_refused(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--budget BUDGET the work the search may do, in candidates priced: one candidate is one mesh" in text
    assert (
        f"(default {search.SEARCH_BUDGET_CANDIDATES:,}, about {search.SEARCH_BUDGET_IDLE_S} s of one idle core;" in text
    )
    assert cli.main(["LLaMA-3 70B", "H100", "64", "4M", "--budget", "0"]) == 2
    assert capsys.readouterr().err == "error: --budget: must be a whole number >= 1, got '0'\n"
