"""The mesh explorer: enumeration, placement on the machine, memory with
activations, ranking, the command line, and the compiled programs of its
candidates."""

import math

import pytest

from conftest import run_main
from shardbook import collectives, explorer, hardware, memory, models, training


def test_factorizations_respect_the_model():
    meshes = explorer.factorizations(8, "LLaMA-3 8B")
    assert all(math.prod(m) == 8 for m in meshes)
    assert all(ep == 1 for _, _, ep, _ in meshes)  # dense: no expert axis
    moe = explorer.factorizations(8, "Mixtral 8x22B")
    assert (1, 1, 8, 1) in moe and (2, 1, 4, 1) in moe
    assert all(models.get("Mixtral 8x22B").n_kv_heads % tp == 0 for _, tp, _, _ in moe)
    with_cp = explorer.factorizations(8, "LLaMA-3 8B", axes=("fsdp", "cp"))
    assert {"dp": 1, "fsdp": 4, "tp": 1, "cp": 2, "ep": 1, "pp": 1} in with_cp


def test_ranking_puts_fitting_meshes_first_and_sorts_by_step_time():
    found = explorer.explore("LLaMA-3 70B", "H100", 8, 2**20)
    fits = [c.fits for c in found]
    assert fits == sorted(fits, reverse=True)
    fitting = [c.step_s for c in found if c.fits]
    assert fitting == sorted(fitting)
    # persistent state is the replicated state divided by the shards
    one = explorer.evaluate("LLaMA-3 70B", "H100", (8, 1, 1, 1), 2**20)
    assert one.state_bytes_per_device == pytest.approx(
        memory.state_bytes_per_device(models.param_count("LLaMA-3 70B"), "fsdp", 8)
    )
    # a mesh fits only if state and activations fit together
    assert one.fits == (one.state_bytes_per_device + one.activation_bytes_per_device <= hardware.get("H100").hbm_bytes)


def test_activations_decide_the_recomputation_policy():
    """LLaMA-3 8B, fsdp 8 on MI355X, 8 sequences of 8,192 per rank in one
    microbatch: with an eager attention kernel (the s² probabilities kept)
    the activations without recomputation exceed HBM, so the explorer picks
    a policy that fits and says which; a flash kernel keeps no s² term and
    fits without recomputation."""
    cand = explorer.evaluate(
        "LLaMA-3 8B", "MI355X", {"fsdp": 8}, 8 * 8 * 8192, seq_len=8192, micro_batch_seqs=8, attention="eager"
    )
    no_recompute = memory.activation_bytes_per_device("LLaMA-3 8B", 8192, 8, attention="eager")
    assert no_recompute > hardware.get("MI355X").hbm_bytes
    assert cand.fits and cand.recompute in ("selective", "full")
    flash = explorer.evaluate(
        "LLaMA-3 8B", "MI355X", {"fsdp": 8}, 8 * 8 * 8192, seq_len=8192, micro_batch_seqs=8, recompute="none"
    )
    assert flash.activation_bytes_per_device < no_recompute / 3
    assert cand.activation_bytes_per_device == pytest.approx(
        memory.activation_bytes_per_device("LLaMA-3 8B", 8192, 8, recompute=cand.recompute, attention="eager")
    )
    # recomputation costs math: the hardware FLOPs exceed the model FLOPs
    model_s = (
        training.model_flops_per_token("LLaMA-3 8B", 8192, causal=True)
        * 8
        * 8
        * 8192
        / (8 * hardware.get("MI355X").bf16_dense_flops_per_s)
    )
    assert cand.math_s > model_s and cand.mfu < 1


def test_terms_follow_the_mesh():
    fsdp = explorer.evaluate("LLaMA-3 8B", "MI355X", (8, 1, 1, 1), 2**20)
    tp = explorer.evaluate("LLaMA-3 8B", "MI355X", (1, 8, 1, 1), 2**20)
    pp = explorer.evaluate("LLaMA-3 8B", "MI355X", (1, 1, 1, 8), 2**20)
    assert fsdp.tp_s == 0 and fsdp.bubble_s == 0 and fsdp.fsdp_s > 0
    assert tp.fsdp_s == 0 and tp.tp_s > 0
    assert pp.bubble_s > 0 and pp.fsdp_s == 0
    assert explorer.predicted_collectives(fsdp) == [("all_gather", "fsdp"), ("reduce_scatter", "fsdp")]
    for cand in (fsdp, tp, pp):
        assert 0 < cand.mfu <= 1


def test_a_group_that_spans_nodes_is_priced_across_nodes():
    """16 MI355X: tp 8 innermost fills a node, so the fsdp pair spans two
    nodes with one member each: its gather goes through the NICs. Placed
    innermost instead, fsdp 2 sits inside one node."""
    placed = explorer.place("MI355X", {"fsdp": 2, "tp": 8})
    assert placed["tp"].n_domains == 1 and placed["fsdp"].n_domains == 2
    outside = explorer.evaluate("LLaMA-3 70B", "MI355X", {"fsdp": 2, "tp": 8}, 2**21)
    inside = explorer.evaluate(
        "LLaMA-3 70B", "MI355X", {"fsdp": 2, "tp": 8}, 2**21, order=("fsdp", "tp", "ep", "cp", "dp", "pp")
    )
    assert inside.placement["fsdp"].n_domains == 1 and inside.placement["tp"].n_domains == 2
    assert outside.fsdp_s > inside.fsdp_s
    assert inside.tp_s > outside.tp_s


def test_expert_parallelism_across_nodes_is_slower_than_inside():
    """DeepSeek-V3 on 16 MI355X: ep 16 spans two nodes and shares their NICs;
    ep 8 × fsdp 2 keeps every exchange on xGMI."""
    across = explorer.evaluate("DeepSeek-V3", "MI355X", {"ep": 16}, 2**22)
    inside = explorer.evaluate("DeepSeek-V3", "MI355X", {"ep": 8, "fsdp": 2}, 2**22)
    assert across.placement["ep"].n_domains == 2 and inside.placement["ep"].n_domains == 1
    assert across.ep_s > inside.ep_s


def test_tpu_fsdp_uses_both_directions_and_every_axis():
    """64 v5p chips form a 4×4×4 cube with wraparound; fsdp 64 spans all
    three dimensions, two links each: six links of 100 GB/s per chip."""
    cand = explorer.evaluate("LLaMA-3 70B", "TPU v5p", {"fsdp": 64}, 64 * 5100)
    where = cand.placement["fsdp"]
    assert where.torus_links == 6 and all(wrap for _, _, wrap in where.torus_span)
    gathered = 2 * models.param_count("LLaMA-3 70B")
    one_gather = collectives.all_gather_s(
        gathered, 64, hardware.get("TPU v5p").scale_up_link_bytes_per_s, concurrent_links=6
    )
    # per microbatch: a gather forward, one backward, and the BF16 gradients reduced; FSDP alone over a
    # whole wrapped v5p slice is compiled with all-reduces for all three (no all-gather is left in those
    # plans, compiled_plans.json; chapter 97), each twice a gather's traffic
    assert cand.fsdp_s == pytest.approx(6 * cand.n_microbatches * one_gather)
    # a 2×2×2 slice (8 chips) has no wraparound: one link per dimension
    small = explorer.place("TPU v5p", {"fsdp": 8})
    assert small["fsdp"].torus_links == 3 and not any(wrap for _, _, wrap in small["fsdp"].torus_span)


def test_bad_meshes_name_the_axis_and_the_rule():
    cases = [
        (dict(mesh={"fsdp": 4}, n_devices=8), "mesh: degrees multiply to 4, not to the device count 8"),
        (dict(mesh={"zz": 2}), "mesh: unknown axis 'zz'"),
        (dict(mesh={"tp": 64}), "mesh\\['tp'\\]: 64 must divide the attention heads of LLaMA-3 8B \\(32\\)"),
        (dict(mesh={"pp": 3}), "mesh\\['pp'\\]: 3 must divide the layers of LLaMA-3 8B \\(32\\)"),
        (dict(mesh={"cp": 3}), "mesh\\['cp'\\]: 3 must divide the sequence length"),
        (dict(mesh={"ep": 2}), "mesh\\['ep'\\]: 2 must divide the experts of LLaMA-3 8B \\(1\\)"),
        (dict(mesh={"fsdp": 0}), "mesh\\['fsdp'\\]: must be an integer >= 1, got 0"),
        (dict(mesh={"fsdp": 8}, tokens=4), "global_tokens: 4 is below one token per device"),
    ]
    for kwargs, message in cases:
        tokens = kwargs.pop("tokens", 2**20)
        mesh = kwargs.pop("mesh")
        with pytest.raises(ValueError, match=message):
            explorer.evaluate("LLaMA-3 8B", "MI355X", mesh, tokens, **kwargs)


def _cli(*args):
    """`python -m shardbook.explorer ARGS`, run in this process (conftest.run_main)."""
    return run_main(explorer.main, *args)


@pytest.mark.slow  # default searches by the command line: seconds of one core (make test runs it)
def test_command_line_prints_a_ranked_table_with_the_assumptions():
    result = _cli("LLaMA-3 70B", "TPU v5p", "64", "524288")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("LLaMA-3 70B on 64 × TPU v5p")
    assert lines[1].startswith("LLaMA-3 70B: 70.55 B parameters")
    header = next(line for line in lines if line.startswith("mesh"))
    assert "expected MFU" in header and "bound MFU" in header and "memory+reserve / HBM" in header
    assert "expected step ms" in header and "bound step ms" in header and "band ms" in header
    # the assumptions come with --assumptions; without it, one line says so
    assert "Assumptions:" not in result.stdout and lines[-1].endswith("add --assumptions")
    full = _cli("LLaMA-3 70B", "TPU v5p", "64", "524288", "--assumptions")
    assert "Assumptions:" in full.stdout and "two step times: the bound" in full.stdout


@pytest.mark.parametrize(
    "args,message",
    [
        (("LLaMA-9", "TPU v5p", "64", "524288"), "error: model: unknown preset 'LLaMA-9'"),
        (("LLaMA-3 70B", "TPU v9", "64", "524288"), "error: accelerator: unknown preset 'TPU v9'"),
        (("LLaMA-3 70B", "TPU v5p", "64", "32"), "error: tokens: 32 is below one sequence of 4,096 tokens"),
        (
            ("LLaMA-3 70B", "TPU v5p", "3", "4096", "--no-uneven-pipeline"),
            "error: tokens: 1 sequence of 4,096 cannot give every data-parallel rank",
        ),
        (
            ("LLaMA-3 70B", "TPU v5p", "64", "524288", "--axes", "pp", "--no-uneven-pipeline"),
            "error: n_devices: no mesh of 64 devices over pp",
        ),
    ],
)
def test_command_line_errors_are_one_line(args, message):
    result = _cli(*args)
    assert result.returncode == 2
    assert result.stderr.strip().startswith(message) and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.jax  # imports JAX and compiles a step on the CPU devices: 2 s of one core (make test runs it)
def test_compiled_candidates_have_the_predicted_groups():
    from shardbook.hlo import candidates

    compiled = candidates.compiled_collectives(4, 2)
    kinds = {(k, g) for k, g in compiled}
    assert ("all_gather", 4) in kinds and ("all_reduce", 2) in kinds
    # CPU backend: the gradient reduction over fsdp is an all-reduce
    assert ("all_reduce", 4) in kinds and not any(k == "reduce_scatter" for k, _ in compiled)
    # a dp axis copies the weights (no gather over it) and all-reduces the gradients over its group
    with_dp = candidates.compiled_collectives(4, 1, dp=2)
    assert ("all_reduce", 2) in with_dp and ("all_gather", 4) in with_dp
    assert not any(k == "all_gather" and g != 4 for k, g in with_dp)


def test_published_runs_never_beat_the_bound():
    """For every published run (MaxText's tiering table and its configs;
    Llama 3 405B, dubey2024llama3 Table 4; DeepSeek-V3, deepseek2024v3; the
    Megatron runs), the planner's optimistic bound for the run's own mesh
    predicts an MFU at least the measured one: a real run must not beat an
    optimistic model. The test is not vacuous (review ch7-9 W12): every
    bound charges something (the run's recomputation, its bubble, or a
    collective the math cannot hide), so it stays below the peak, and the
    calibrated expectation never exceeds it."""
    from shardbook import hardware, measured
    from shardbook.planner import calibrate

    assert len(measured.PUBLISHED_RUNS) >= 6
    for run in measured.PUBLISHED_RUNS:
        bound = explorer.bound_for_run(run)
        ceiling = calibrate.fp8_peak_ratio(hardware.get(run.accelerator)) if bound.precision == "fp8" else 1
        assert run.mfu <= bound.mfu < ceiling, run.name
        assert bound.expected_mfu <= bound.mfu, run.name
        assert bound.step_s >= bound.math_s + bound.bubble_s, run.name


def test_published_mfu_agrees_with_published_throughput():
    """MaxText's MFU and tokens/s/device describe the same step: tokens/s ×
    model FLOPs per token (causal attention, as MaxText counts since 2025)
    over the chip's peak gives the MFU within the table's rounding."""
    from shardbook import measured

    for run in measured.PUBLISHED_RUNS:
        if run.tokens_per_s_per_device is None:
            continue
        flops = training.model_flops_per_token(run.model, run.seq_len, causal=True)
        mfu = run.tokens_per_s_per_device * flops / hardware.get(run.accelerator).bf16_dense_flops_per_s
        assert mfu == pytest.approx(run.mfu, rel=0.06), run.name
