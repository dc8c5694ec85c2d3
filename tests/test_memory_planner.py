"""What the planner's memory and schedule steps count, against published
figures: state recipes (Megatron's distributed-optimizer table, ZeRO's
worked example), FlashAttention-style activations (Llama 3 405B trained at
8K tokens without activation checkpointing on its own mesh), MaxText's remat
policies, and the pipeline schedules' closed forms (interleaved, ZB-H1,
DualPipe) checked against the simulator where it runs the schedule.
Ref: megatron-distrib-optimizer, rajbhandari2020zero, korthikanti2022reducing,
dao2022flashattention, dubey2024llama3, maxtext, qi2024zerobubble,
deepseek2024v3, narayanan2021megatron."""

import pytest

from shardbook import memory, models, pipeline, training

GB = 1e9


# --- state recipes ---------------------------------------------------------------


def test_megatron_keeps_18_bytes_per_parameter_and_6_plus_12_over_d_with_its_distributed_optimizer():
    """Megatron-LM's distributed-optimizer table (megatron-distrib-optimizer):
    BF16 params with FP32 grads, 18 bytes without, 6 + 12/d with the
    distributed optimizer; ZeRO's mixed-precision Adam (2 + 2 + K, K = 12)
    is 16 (rajbhandari2020zero)."""
    assert memory.STATE_RECIPES["megatron"].total_bytes == 18
    assert memory.STATE_RECIPES["bf16_master"].total_bytes == 16
    assert memory.STATE_RECIPES["pure_bf16"].total_bytes == 8
    for d in (1, 8, 64, 512):
        got = memory.state_breakdown_bytes(1, "megatron", zero=1, zero_shards=d)
        assert sum(got.values()) == pytest.approx(6 + 12 / d)
        assert got["gradients"] == 4  # the FP32 gradient buffer stays whole under ZeRO-1
    assert set(memory.state_breakdown_bytes(1)) == {"weights", "gradients", "master_weights", "optimizer_state"}


def test_zero_papers_7_5b_example():
    """rajbhandari2020zero Figure 1: a 7.5B-parameter model on 64 data-parallel
    ranks with mixed-precision Adam keeps 120 GB replicated, 31.4 GB under
    P_os, 16.6 GB under P_os+g and 1.9 GB under P_os+g+p."""
    psi = 7.5e9
    published = {0: 120, 1: 31.4, 2: 16.6, 3: 1.9}
    for zero, gb in published.items():
        got = sum(memory.state_breakdown_bytes(psi, "bf16_master", zero=zero, zero_shards=64).values()) / GB
        assert got == pytest.approx(gb, abs=0.05)


def test_state_breakdown_agrees_with_the_books_original_form():
    for zero, scheme in enumerate(("dp", "zero1", "zero2", "zero3")):
        got = sum(memory.state_breakdown_bytes(1e9, "bf16_master", zero=zero, zero_shards=8).values())
        assert got == pytest.approx(memory.state_bytes_per_device(1e9, scheme, 8))


def test_state_recipe_bad_input():
    with pytest.raises(ValueError, match="recipe: unknown value 'fp8'; valid: megatron, bf16_master, fp32, pure_bf16"):
        memory.state_breakdown_bytes(1e9, "fp8")
    with pytest.raises(ValueError, match="zero: must be one of 0, 1, 2, 3 .*, got 4"):
        memory.state_breakdown_bytes(1e9, zero=4)
    with pytest.raises(ValueError, match="zero: must be one of 0, 1, 2, 3 .*, got True"):
        memory.state_breakdown_bytes(1e9, zero=True)
    with pytest.raises(ValueError, match="zero_shards: must be >= 1"):
        memory.state_breakdown_bytes(1e9, zero=1, zero_shards=0)


# --- activations -----------------------------------------------------------------


def test_llama3_8b_flash_keeps_about_a_third_of_the_eager_count():
    """LLaMA-3 8B, one 4,096-token sequence, no recomputation: the eager count
    (softmax stored) is the 52.6 GB the book printed, of which 32·2·32·4096²
    bytes = 34.4 GB are probabilities a fused kernel never stores; flash
    keeps about 18 GB (ch7-9 review W2)."""
    eager = memory.activation_bytes_per_device("LLaMA-3 8B", 4096, 1, attention="eager")
    flash = memory.activation_bytes_per_device("LLaMA-3 8B", 4096, 1)
    assert eager / GB == pytest.approx(52.6, abs=0.05)
    assert flash / GB == pytest.approx(18.3, abs=0.05)
    assert eager - flash == pytest.approx(32 * (2 * 32 * 4096**2 - 4 * 32 * 4096))
    # with flash, Korthikanti's selective recomputation saves only the LSE
    selective = memory.activation_bytes_per_device("LLaMA-3 8B", 4096, 1, recompute="selective")
    assert flash - selective == 32 * 4 * 32 * 4096


def _llama3_405b_on_its_mesh(attention):
    """Llama 3 405B on its own 16K-GPU mesh (dubey2024llama3 §3.3.2, Table 4):
    TP 8 with sequence parallelism, PP 16 with the interleaved schedule and
    126 layers (the first and last stage one layer short), DP 128 with FSDP
    that shards "optimizer states and gradients, but for model shards we do
    not reshard after forward computation" (so ZeRO-2 at the peak: the
    stage's BF16 weights whole), 8,192-token sequences one per microbatch,
    16 microbatches per DP rank (2,048 sequences per step), no activation
    checkpointing."""
    m = models.get("LLaMA-3 405B")
    tp, pp, dp = 8, 16, 128
    params = models.param_count(m) / (tp * pp)
    state = sum(memory.state_breakdown_bytes(params, "megatron", zero=2, zero_shards=dp).values())
    acts = memory.activation_bytes_per_device(
        m,
        8192,
        1,
        tp=tp,
        pp=pp,
        sequence_parallel=True,
        recompute="none",
        n_microbatches=16,
        schedule="interleaved",
        n_virtual=4,
        uneven_pipeline=True,
        attention=attention,
    )
    return state, acts


def test_llama3_405b_fits_80_gb_without_checkpointing_with_flash_only():
    """The paper: "we could pre-train Llama 3 on sequences of 8K tokens
    without activation checkpointing" on 80 GB H100s. With flash the deepest
    stage (8 layers, all 16 microbatches in flight) keeps about 68 GB of
    activations; with the stage's whole BF16 weights (6.3 GB) and the
    sharded rest of the state it fits 80 GB. Counting the s² probabilities
    (eager) it could not."""
    state, acts = _llama3_405b_on_its_mesh("flash")
    assert acts / GB == pytest.approx(68.2, abs=0.1)
    params = models.param_count("LLaMA-3 405B") / (8 * 16)
    assert state == pytest.approx(params * (2 + (4 + 4 + 8) / 128))  # 6.7 GB
    assert state + acts < 80e9
    state, eager = _llama3_405b_on_its_mesh("eager")
    assert state + eager > 3 * 80e9


def test_maxtext_policies_keep_the_named_tensors_by_hand():
    """LLaMA-3 70B, s = 4096, b = 1, no TP: the scan carry (layer input,
    2sbh) plus what each policy names (decoders.py get_remat_policy):
    Q 2·s·8192, K and V 2·s·1024 each, out_proj 2sbh, the gate and up
    outputs 2·s·28672 each. Not mlpwo, which save_dot_except_mlpwi and
    minimal name too: JAX saves a named tensor only where the backward reads
    it (test_jax_saves_only_what_the_backward_reads), and the MLP's output
    goes straight into the residual."""
    s, h, f = 4096, 8192, 28672
    q, kv = 2 * s * 8192, 2 * 2 * s * 1024
    sbh2 = 2 * s * h
    expected = {
        "save_qkv_proj": sbh2 + q + kv,
        "save_dot_except_mlp": sbh2 + q + kv + sbh2,
        "save_dot_except_mlpwi": sbh2 + q + kv + sbh2,
        "minimal": sbh2 + q + kv + sbh2 + 2 * 2 * s * f,
        "minimal_with_context": sbh2 + q + kv + sbh2 + 2 * 2 * s * f + q,
        "save_out_proj": sbh2 + sbh2,
        "qkv_proj_offloaded": sbh2,
        "minimal_offloaded": sbh2,
        "full": sbh2,
        "nothing_saveable": sbh2,
    }
    for policy, want in expected.items():
        assert memory.activation_bytes_per_layer("LLaMA-3 70B", s, 1, recompute=policy) == want, policy
    # what the offloading policies move to pinned host memory
    assert memory.offloaded_activation_bytes_per_layer("LLaMA-3 70B", s, 1, recompute="qkv_proj_offloaded") == q + kv
    assert memory.offloaded_activation_bytes_per_layer("LLaMA-3 70B", s, 1, recompute="minimal_offloaded") == (
        expected["minimal"] - sbh2
    )
    assert memory.offloaded_activation_bytes_per_layer("LLaMA-3 70B", s, 1, recompute="minimal") == 0
    host = memory.offloaded_activation_bytes_per_device(
        "LLaMA-3 70B", s, 1, pp=4, n_microbatches=8, recompute="qkv_proj_offloaded"
    )
    assert host == (q + kv) * 80 // 4 * 4  # 20 layers per stage, 4 microbatches in flight (1F1B)


def test_recomputed_flops_follow_what_each_policy_keeps():
    m, s = "LLaMA-3 70B", 4096
    base = training.model_flops_per_token(m, s)
    assert training.hardware_flops_per_token(m, s, "none") == base
    # Korthikanti's policies as the book counted them: selective repeats the
    # score matmuls 4·L·a·d_head·s (half when causal), full every layer's forward too:
    # not the embedding lookup or the output layer, which per-layer checkpoints do not rerun
    for model in ("LLaMA-3 70B", "DeepSeek-V3"):
        mm = models.get(model)
        scores = 4 * mm.n_layers * mm.n_heads * mm.head_dim * s
        for causal in (False, True):
            got = training.hardware_flops_per_token(mm, s, "selective", causal) - training.model_flops_per_token(
                mm, s, causal
            )
            assert got == pytest.approx(scores / (2 if causal else 1))
        full = training.hardware_flops_per_token(mm, s, "full") - training.model_flops_per_token(mm, s)
        layers = models.active_param_count(mm) - sum(models.end_param_counts(mm))
        assert full == pytest.approx(2 * layers + scores)
    # Korthikanti et al.'s own hardware and model FLOPs (their equations, full recomputation), for their
    # GPT 175B: 96BsLh²(1 + s/6h + V/16hL) over 72BsLh²(1 + s/6h + V/12hL), the logits' term not rerun
    gpt = models.get("GPT 175B (Korthikanti)")
    h, layers_n, v, s_gpt = gpt.d_model, gpt.n_layers, gpt.vocab_size, 2048
    theirs = (96 * (1 + s_gpt / (6 * h) + v / (16 * h * layers_n))) / (
        72 * (1 + s_gpt / (6 * h) + v / (12 * h * layers_n))
    )
    ours = training.hardware_flops_per_token(gpt, s_gpt, "full") / training.model_flops_per_token(gpt, s_gpt)
    assert ours == pytest.approx(theirs, rel=1e-6)
    # keeping every matmul output (minimal_with_context) recomputes nothing
    assert memory.recomputed_flops_per_token(m, s, "minimal_with_context") == 0
    # an offloaded tensor comes back from host: the same recomputation as saving it
    assert memory.recomputed_flops_per_token(m, s, "minimal_offloaded") == memory.recomputed_flops_per_token(
        m, s, "minimal"
    )
    # full recomputes every layer's forward; MaxText's policies never more
    full = memory.recomputed_flops_per_token(m, s, "full")
    for policy in memory.RECOMPUTE:
        if memory.recompute_policy(policy).kind == "recipe":  # DeepSeek-V3's own: refused for LLaMA
            with pytest.raises(ValueError, match="recompute"):
                memory.recomputed_flops_per_token(m, s, policy)
            continue
        assert 0 <= memory.recomputed_flops_per_token(m, s, policy) <= full
    # minimal recomputes only the attention core: the scores of the selective policy
    assert memory.recomputed_flops_per_token(m, s, "minimal") == memory.recomputed_flops_per_token(m, s, "selective")


def test_kv_heads_replicate_beyond_their_count():
    """Megatron lets TP exceed the KV heads by replicating them: at tp 16 each
    LLaMA-3 8B rank keeps one of its 8 KV heads."""
    s = 4096
    tp8 = memory.activation_bytes_per_layer("LLaMA-3 8B", s, 1, tp=8, sequence_parallel=True)
    tp16 = memory.activation_bytes_per_layer("LLaMA-3 8B", s, 1, tp=16, sequence_parallel=True)
    one_kv_head = 2 * 2 * s * 128
    assert tp16 == pytest.approx((tp8 - one_kv_head) / 2 + one_kv_head)


def test_moe_and_mla_layers_count_their_own_tensors():
    # DeepSeek-V3's dense first layers (F = 18,432) and MoE layers (8 routed + 1
    # shared expert of 2,048: the same 18,432 gate/up width per token, plus the
    # router and the dispatched copies)
    moe = memory.activation_bytes_per_layer("DeepSeek-V3", 4096, 1)
    dense = memory.activation_bytes_per_layer("DeepSeek-V3", 4096, 1, dense_layer=True)
    extra = 4096 * (4 * 256 + 2 * 8 * 2 * 7168)
    assert moe - dense == extra
    # Mixtral: two routed experts per token
    mixtral = memory.activation_bytes_per_layer("Mixtral 8x7B", 4096, 1)
    dense_like = memory.activation_bytes_per_layer(models.with_changes("Mixtral 8x7B", n_experts=1, top_k=1), 4096, 1)
    assert mixtral - dense_like == 4096 * (4 * 8 + 2 * 2 * 2 * 4096 + 3 * 2 * 14336)


def test_one_activation_rule_for_dense_and_moe_layers():
    # DeepSeek-V3 (deepseek2024v3 §4.2): 61 layers, the first 3 dense (F = 18,432), 58 MoE.
    # One rule (memory.activation_bytes_per_stage_layer), used by memory and the planner: with
    # pp = 1 the exact sum over the model's layers; with pp > 1 every layer of the deepest stage
    # at the larger kind (the layers on the peak stage depend on a placement the report omits)
    from shardbook import explorer
    from shardbook.planner import memory_plan

    m = models.get("DeepSeek-V3")
    assert (m.n_layers, m.n_dense_layers) == (61, 3)
    s, policy = 4096, "deepseek_v3"
    moe = memory.activation_bytes_per_layer(m, s, 1, recompute=policy)
    dense = memory.activation_bytes_per_layer(m, s, 1, recompute=policy, dense_layer=True)
    assert dense < moe
    exact = 3 * dense + 58 * moe
    whole = memory.activation_bytes_per_device(m, s, 1, recompute=policy)
    assert whole == pytest.approx(exact, rel=1e-12)
    assert whole < 61 * moe  # not every layer at the larger kind
    assert 61 * memory.activation_bytes_per_stage_layer(m, s, 1, recompute=policy) == pytest.approx(exact, rel=1e-12)
    # pp 16 under DualPipe: ceil(61/16) = 4 layers, p + 1 = 17 microbatches, each layer at the MoE figure
    staged = dict(pp=16, recompute=policy, schedule="dualpipe", n_microbatches=32, uneven_pipeline=True)
    assert memory.activation_bytes_per_stage_layer(m, s, 1, pp=16, recompute=policy) == moe
    assert memory.activation_bytes_per_device(m, s, 1, **staged) == pytest.approx(moe * 4 * 17, rel=1e-12)
    # the planner quotes the same rule: its per-layer figure and its breakdown
    planner_layer = dict(tp=1, cp=1, sequence_parallel=False, recompute=policy, attention="flash")
    assert memory_plan.activation_bytes_per_layer(m, s, 1, pp=1, **planner_layer) * 61 == pytest.approx(exact)
    assert memory_plan.activation_bytes_per_layer(m, s, 1, pp=16, **planner_layer) == moe
    options = dict(seq_len=s, micro_batch_seqs=1, recompute=policy, state_recipe="deepseek_v3", zero=1)
    run = explorer.evaluate(
        m, "H800", {"pp": 16, "ep": 64, "dp": 2}, 15360 * s, schedule="dualpipe", uneven_pipeline=True, **options
    )
    assert run.memory_breakdown["activations"] == pytest.approx(memory.activation_bytes_per_device(m, s, 1, **staged))
    flat = explorer.evaluate(m, "H800", {"ep": 64, "dp": 32}, 2048 * s, **options)
    assert flat.memory_breakdown["activations"] == pytest.approx(exact)
    with pytest.raises(ValueError, match="pp"):
        memory.activation_bytes_per_stage_layer(m, s, 1, pp=0)


def test_logits():
    """Korthikanti et al. §4.3: the cross-entropy keeps FP32 logits, 4sbv/t;
    at the loss the BF16 logits are alive too."""
    m = models.get("LLaMA-3 8B")
    assert memory.logits_bytes(m, 8192, 1, tp=8, peak=False) == 4 * 8192 * m.vocab_size / 8
    assert memory.logits_bytes(m, 8192, 1) == 6 * 8192 * m.vocab_size
    with pytest.raises(ValueError, match="tp: must divide the vocabulary \\(128256\\)"):
        memory.logits_bytes(m, 8192, 1, tp=7)


def test_policy_bad_input():
    with pytest.raises(
        ValueError, match="recompute: unknown value 'remat'; valid: none, selective, full, minimal_with"
    ):
        memory.activation_bytes_per_layer("LLaMA-3 8B", 1024, 1, recompute="remat")


# --- schedules -------------------------------------------------------------------


@pytest.mark.parametrize("p,m,v", [(4, 8, 1), (4, 8, 2), (4, 16, 4), (8, 16, 2), (2, 4, 1), (8, 8, 1)])
def test_closed_forms_match_the_simulator(p, m, v):
    """Bubble over math time is f/(1−f) of the simulated idle share f."""
    kinds = ("gpipe", "1f1b", "zero_bubble") if v == 1 else ("interleaved",)
    for kind in kinds:
        ops = pipeline.schedule(kind, p, m, v)
        f = pipeline.simulated_bubble_fraction(ops, p)
        assert pipeline.schedule_bubble_overhead(kind, p, m, v) == pytest.approx(f / (1 - f))
        held = pipeline.held_activations(ops, v)
        assert pipeline.schedule_activation_microbatches(kind, p, m, v) == pytest.approx(held[0])
        assert held[0] == max(held)


def test_interleaved_activations_match_the_simulator_for_any_microbatch_count():
    for p in (2, 3, 4, 8):
        for v in (2, 3, 4):
            for m in range(1, 3 * p + 2):
                held = pipeline.held_activations(pipeline.schedule("interleaved", p, m, v), v)
                assert pipeline.schedule_activation_microbatches("interleaved", p, m, v) == pytest.approx(held[0])
                assert held[0] == max(held)
                if m % p == 0:  # Korthikanti et al.'s p(1 + (p−1)/(p·v)), at most m
                    want = min(p * (1 + (p - 1) / (p * v)), m)
                    assert pipeline.schedule_activation_microbatches("interleaved", p, m, v) == pytest.approx(want)


def test_published_bubbles():
    # Llama 3 §3.3.2: "Overall pipeline bubble ratio is (PP−1)/(V·M)"
    assert pipeline.schedule_bubble_overhead("interleaved", 16, 32, 4) == pytest.approx(15 / (4 * 32))
    assert pipeline.schedule_bubble_overhead("1f1b", 16, 32) == pytest.approx(15 / 32)
    # DeepSeek-V3 Table 2 with F = W = 1, B = 2, F&B = F + B: 1F1B (PP−1)(F+B),
    # ZB1P (PP−1)(F+B−2W), DualPipe (PP/2−1)(F&B+B−3W), against 3m of work
    p, m = 16, 32
    assert pipeline.schedule_bubble_overhead("1f1b", p, m) == pytest.approx((p - 1) * 3 / (3 * m))
    assert pipeline.schedule_bubble_overhead("zero_bubble", p, m) == pytest.approx((p - 1) * (3 - 2) / (3 * m))
    assert pipeline.schedule_bubble_overhead("dualpipe", p, m) == pytest.approx((p / 2 - 1) * (3 + 2 - 3) / (3 * m))
    assert pipeline.schedule_activation_microbatches("dualpipe", p, m) == p + 1
    assert pipeline.schedule_activation_microbatches("zero_bubble", p, m) == p
    assert pipeline.schedule_parameter_copies("dualpipe") == 2
    assert pipeline.schedule_parameter_copies("1f1b") == 1
    # Korthikanti et al.: interleaving holds p(1 + (p−1)/(p·v)) microbatches
    assert pipeline.schedule_activation_microbatches("interleaved", 16, 64, 4) == pytest.approx(16 * (1 + 15 / 64))
    assert pipeline.schedule_activation_microbatches("gpipe", 16, 64) == 64
    assert pipeline.schedule_bubble_overhead("dualpipe", 1, 3) == 0


def test_uneven_pipelines():
    # Llama 3: 126 layers on 16 stages, 8 on the deepest; DeepSeek-V3: 61 on 16
    assert pipeline.deepest_stage_layers(126, 16, uneven=True) == 8
    assert pipeline.deepest_stage_layers(126, 16, 4, uneven=True) == 8
    assert pipeline.deepest_stage_layers(61, 16, uneven=True) == 4
    assert pipeline.deepest_stage_layers(80, 8, 2) == 10
    with pytest.raises(ValueError, match="n_stages: must divide the layers \\(126\\) unless uneven=True, got 16"):
        pipeline.deepest_stage_layers(126, 16)
    with pytest.raises(ValueError, match="n_virtual: must divide the layers per stage \\(8 of 126 on 16\\), got 3"):
        pipeline.deepest_stage_layers(126, 16, 3, uneven=True)
    with pytest.raises(ValueError, match="n_stages: at most the layers \\(4\\), got 8"):
        pipeline.deepest_stage_layers(4, 8, uneven=True)


def test_schedule_bad_input():
    valid = "valid: gpipe, 1f1b, interleaved, zero_bubble, dualpipe"
    with pytest.raises(ValueError, match=f"schedule: unknown value 'zb2p'; {valid}"):
        pipeline.schedule_bubble_overhead("zb2p", 4, 8)
    with pytest.raises(ValueError, match=f"schedule: unknown value 'zb2p'; {valid}"):
        pipeline.schedule_activation_microbatches("zb2p", 4, 8)
    with pytest.raises(ValueError, match=f"schedule: unknown value 'x'; {valid}"):
        pipeline.schedule_parameter_copies("x")
    with pytest.raises(ValueError, match="n_virtual: only the interleaved schedule has virtual stages"):
        pipeline.schedule_bubble_overhead("1f1b", 4, 8, 2)
    with pytest.raises(ValueError, match="n_stages: DualPipe pairs stage i with stage p−1−i, so p must be even"):
        pipeline.schedule_bubble_overhead("dualpipe", 5, 10)
    # DeepSeek's DualPipe asserts num_chunks % 2 == 0 and num_chunks >= num_ranks * 2
    with pytest.raises(ValueError, match="n_microbatches: DualPipe .* at least 2·n_stages = 32, got 30"):
        pipeline.schedule_activation_microbatches("dualpipe", 16, 30)
    with pytest.raises(ValueError, match="n_microbatches: DualPipe .* got 33"):
        pipeline.schedule_bubble_overhead("dualpipe", 16, 33)
    with pytest.raises(ValueError, match="n_microbatches: the zero_bubble closed form needs at least n_stages=4"):
        pipeline.schedule_bubble_overhead("zero_bubble", 4, 2)
    with pytest.raises(ValueError, match="pp: must divide the layers \\(126\\) of LLaMA-3 405B"):
        memory.activation_bytes_per_device("LLaMA-3 405B", 8192, 1, tp=8, pp=16)


def test_deepseek_v3_recipe_keeps_what_its_report_lists():
    # deepseek2024v3 §3.2.3: RMSNorm and MLA up-projections recomputed; §3.3.3 ("Low-Precision
    # Activation"): the attention output cached in E5M6 (12 bits), the SwiGLU inputs in FP8 and its
    # output recomputed; the dispatched inputs in FP8 (the up-projections' inputs, "Low-Precision
    # Communication"). The report lists no expert output among the cached activations, and none is
    # needed: the gate's gradient <dy, W2·h> = <W2ᵀ·dy, h> uses the expert's own backward and the
    # recomputed SwiGLU output (the BF16 "combine" is the communication's precision).
    assert memory.DEEPSEEK_V3_RECIPE["expert_outputs"] == 0
    # Per token of one MoE layer (tp 1): two norm inputs 2·2·h, latents c_q + c_kv and the RoPE
    # key in BF16, the attention output 1.5 bytes × 128 heads × 128, the FP32 router probabilities
    # over 256 experts, 8 routed copies of the input (1 byte), the SwiGLU inputs (gate and up,
    # 1 byte) of 8 routed and 1 shared expert of width 2,048, and FlashAttention's FP32 LSE per
    # head. With h = 7,168: 28,672 + 4,224 + 24,576 + 1,024 + 57,344 + 36,864 + 512.
    m = models.get("DeepSeek-V3")
    h, a = m.d_model, m.mla
    assert (h, a.q_lora_rank, a.kv_lora_rank, a.qk_rope_head_dim) == (7168, 1536, 512, 64)
    assert (m.n_heads, a.v_head_dim, m.n_experts, m.top_k, m.n_shared_experts, m.d_ff) == (128, 128, 256, 8, 1, 2048)
    per_token = (
        2 * 2 * h
        + 2 * (a.q_lora_rank + a.kv_lora_rank + a.qk_rope_head_dim)
        + 1.5 * m.n_heads * a.v_head_dim
        + 4 * m.n_experts
        + m.top_k * 1 * h
        + 2 * 1 * (m.top_k + m.n_shared_experts) * m.d_ff
        + 4 * m.n_heads
    )
    assert per_token == 28_672 + 4_224 + 24_576 + 1_024 + 57_344 + 36_864 + 512 == 153_216
    got = memory.activation_bytes_per_layer(m, 4096, 1, recompute="deepseek_v3")
    assert got == pytest.approx(4096 * per_token)
    assert got < memory.activation_bytes_per_layer(m, 4096, 1, recompute="selective") / 2
    # the MLA up-projections run again: q_b (q_lora -> heads x (nope + rope)) and kv_b
    up = a.q_lora_rank * m.n_heads * (a.qk_nope_head_dim + a.qk_rope_head_dim)
    up += a.kv_lora_rank * m.n_heads * (a.qk_nope_head_dim + a.v_head_dim)
    assert memory.recomputed_flops_per_token(m, 4096, "deepseek_v3") == m.n_layers * 2 * up
    # its state: BF16 weights, FP32 master and gradients, BF16 moments (§3.3.3)
    r = memory.state_recipe("deepseek_v3")
    assert (r.weight_bytes, r.gradient_bytes, r.master_bytes, r.optimizer_bytes) == (2, 4, 4, 4)
    with pytest.raises(ValueError, match="recompute"):
        memory.activation_bytes_per_layer("LLaMA-3 8B", 4096, 1, recompute="deepseek_v3")


def test_loss_logits_as_the_framework_keeps_them():
    # korthikanti2022reducing §4.3: Megatron keeps FP32 logits (4 bytes), BF16 alive at the cast (6);
    # an XLA-compiled loss (MaxText) keeps one BF16 buffer, the logits, and the TPU compiler writes
    # their gradient over it (2 at the peak too: the referee's compiled Llama-3 steps, 2026-12-05)
    m = models.get("LLaMA-3 70B")
    elements = 8192 * 5 * m.vocab_size
    assert memory.logits_bytes(m, 8192, 5) == 6 * elements
    assert memory.logits_bytes(m, 8192, 5, peak=False) == 4 * elements
    assert memory.logits_bytes(m, 8192, 5, loss_logits="fused_bf16") == 2 * elements
    assert memory.logits_bytes(m, 8192, 5, peak=False, loss_logits="fused_bf16") == 2 * elements
    with pytest.raises(ValueError, match="loss_logits"):
        memory.logits_bytes(m, 8192, 5, loss_logits="fp16")


def test_llama3_stages_lose_a_layer_from_their_outer_chunks():
    # dubey2024llama3 §3.3.2: one layer fewer on the first and last stages, "the first model chunk
    # on the first stage has only the embedding, and the last model chunk on the last stage has
    # only output projection and loss calculation": 126 layers, 16 stages, chunks of one layer
    layers = pipeline.uneven_chunk_layers(126, 16, 8)
    assert layers[0] == [0] + [1] * 7 and layers[15] == [1] * 7 + [0]
    assert all(row == [1] * 8 for row in layers[1:15]) and sum(map(sum, layers)) == 126
    # Megatron's interleaved issue order: the first stage's empty chunk holds the most microbatches
    # (2p - 1 = 31), so the second stage holds most: 29 + 7 x 16 = 141 layer-microbatches
    assert pipeline.interleaved_peak_layer_microbatches(16, 32, 8, layers) == 141
    # with equal chunks the walk is the closed form: (v - 1)·p + 2p - 1 chunk forwards
    even = [[1] * 8 for _ in range(16)]
    assert pipeline.interleaved_peak_layer_microbatches(
        16, 32, 8, even
    ) == 8 * pipeline.schedule_activation_microbatches("interleaved", 16, 32, 8)
    with pytest.raises(ValueError, match="chunk_layers"):
        pipeline.interleaved_peak_layer_microbatches(16, 32, 8, even[:3])


@pytest.mark.jax
def test_jax_saves_only_what_the_backward_reads():
    """A remat policy marks tensors saveable; JAX keeps one only where the
    backward reads it (a residual). A sequential block reads the output
    projection's output (the MLP's input is built from it), a parallel
    block does not; neither reads the MLP's output. What
    memory._named_bytes counts. Ref: maxtext."""
    import contextlib
    import io

    import jax
    import jax.numpy as jnp
    from jax.ad_checkpoint import checkpoint_name

    def sequential(x, wq, wo, wi, wm):
        a = checkpoint_name(jnp.tanh(checkpoint_name(x @ wq, "query_proj")) @ wo, "out_proj")
        h = x + a
        return h + checkpoint_name(jax.nn.relu(checkpoint_name(h @ wi, "mlpwi_0")) @ wm, "mlpwo")

    def parallel(x, wq, wo, wi, wm):
        a = checkpoint_name(jnp.tanh(checkpoint_name(x @ wq, "query_proj")) @ wo, "out_proj")
        return x + a + checkpoint_name(jax.nn.relu(checkpoint_name(x @ wi, "mlpwi_0")) @ wm, "mlpwo")

    names = ("query_proj", "out_proj", "mlpwi_0", "mlpwo")
    policy = jax.checkpoint_policies.save_only_these_names(*names)
    args = (jnp.ones((4, 8)),) + (jnp.ones((8, 8)),) * 4

    def saved(block):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            jax.ad_checkpoint.print_saved_residuals(jax.checkpoint(block, policy=policy), *args)
        return {name for name in names if f"named '{name}'" in printed.getvalue()}

    assert saved(sequential) == {"query_proj", "out_proj", "mlpwi_0"}
    assert saved(parallel) == {"query_proj", "mlpwi_0"}


@pytest.mark.jax
def test_jax_saves_the_routed_experts_outputs_not_the_shared_experts():
    """An MoE block's combine y = x + Σ_i g_i·E_i(x) + S(x) with the router
    weights g differentiable: their gradient reads each routed expert's
    output E_i(x), so JAX keeps it as a residual under a policy that saves
    'mlpwo' (and reruns its matmul under one that does not); the shared
    expert's S(x) joins the residual ungated and is never read. What
    memory._named_bytes and memory.recomputed_flops_per_token count. Ref: maxtext."""
    import contextlib
    import io

    import jax
    import jax.numpy as jnp
    from jax.ad_checkpoint import checkpoint_name

    def block(x, router, w_in, w_out, shared_in, shared_out):
        gates = jax.nn.softmax(x @ router)  # [tokens, 2 experts], top-2 of 2: every expert routed
        routed = [checkpoint_name(jax.nn.relu(x @ w_in[e]) @ w_out[e], "mlpwo_routed") for e in range(2)]
        shared = checkpoint_name(jax.nn.relu(x @ shared_in) @ shared_out, "mlpwo_shared")
        return x + sum(gates[:, e : e + 1] * routed[e] for e in range(2)) + shared

    key = jax.random.PRNGKey(0)
    args = (
        jnp.ones((4, 8)),
        jax.random.normal(key, (8, 2)),
        jnp.ones((2, 8, 8)),
        jnp.ones((2, 8, 8)),
        jnp.ones((8, 8)),
        jnp.ones((8, 8)),
    )
    policy = jax.checkpoint_policies.save_only_these_names("mlpwo_routed", "mlpwo_shared")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        jax.ad_checkpoint.print_saved_residuals(jax.checkpoint(block, policy=policy), *args)
    text = printed.getvalue()
    assert text.count("named 'mlpwo_routed'") == 2  # both routed outputs kept
    assert "named 'mlpwo_shared'" not in text  # the shared expert's sum is not


def test_a_named_policy_reruns_each_routed_experts_down_matmul_unless_mlpwo_is_kept():
    """The FLOPs side of the test above. Mixtral 8x7B under
    custom_offload_input_qkv_out (layer input, Q, K, V and out_proj
    offloaded): per layer the causal scores, the gate and up matmuls of its
    top-2 experts and their down matmuls; the same policy on a dense model
    reruns no down matmul; and on DeepSeek-V3 (one shared expert, three dense
    layers) keeping mlpwo saves exactly the routed experts' down matmuls of
    its MoE layers, none of the shared expert's or the dense layers'."""
    m, s = models.get("Mixtral 8x7B"), 4096
    scores = 4 * m.n_heads * m.head_dim * s / 2
    gate_up = 2 * (2 * m.d_model * m.top_k * m.d_ff)
    down = 2 * m.d_model * m.top_k * m.d_ff
    got = memory.recomputed_flops_per_token(m, s, "custom_offload_input_qkv_out", causal=True)
    assert got == pytest.approx(m.n_layers * (scores + gate_up + down), rel=1e-12)
    d = models.get("LLaMA-3 70B")
    dense = memory.recomputed_flops_per_token(d, s, "custom_offload_input_qkv_out", causal=True)
    scores_d = 4 * d.n_heads * d.head_dim * s / 2
    assert dense == pytest.approx(d.n_layers * (scores_d + 2 * (2 * d.d_model * d.d_ff)), rel=1e-12)
    ds = models.get("DeepSeek-V3")  # d_model 7168, routed experts 2048 wide, top-8, 58 MoE layers
    without = memory.recomputed_flops_per_token(ds, s, "save_dot_except_mlp", causal=True)
    kept = memory.recomputed_flops_per_token(ds, s, "save_dot_except_mlpwi", causal=True)
    assert without - kept == (61 - 3) * 2 * 7168 * 8 * 2048


def test_a_parallel_block_keeps_and_reruns_less():
    """MaxText's 2023 default block (models.MAXTEXT_V5P_SHAPES): attention and
    MLP read one norm output and their sum joins the residual. 'minimal'
    keeps Q, K, V and the MLP's input matmul output, not the output
    projection's; 'nothing_saveable' (MaxText's 'full') reruns Q, K, V, the
    attention core and the MLP's first matmul, never the two matmuls whose
    outputs only feed the residual; tensor parallelism moves half the
    all-reduce equivalents of a sequential block."""
    m = models.get("MaxText 32B")
    assert m.parallel_block and not m.gated_mlp and m.tied_embeddings
    s, b = 2048, 1
    h, qkv, f = m.d_model, m.n_heads * m.head_dim, m.d_ff
    kept = memory.activation_bytes_per_layer(m, s, b, recompute="minimal")
    assert kept == 2 * s * b * h + 3 * 2 * s * b * qkv + 2 * s * b * f
    sequential = models.with_changes(m, parallel_block=False)
    assert memory.activation_bytes_per_layer(sequential, s, b, recompute="minimal") == kept + 2 * s * b * h
    scores = 4 * m.n_heads * m.head_dim * s / 2
    rerun = memory.recomputed_flops_per_token(m, s, "nothing_saveable", causal=True)
    assert rerun == m.n_layers * (2 * 3 * h * qkv + scores + 2 * h * f)
    assert training.hardware_flops_per_token(m, s, "full", causal=True) > training.hardware_flops_per_token(
        m, s, "nothing_saveable", causal=True
    )
    # one norm per layer
    assert models.param_count(sequential) - models.param_count(m) == m.n_layers * h
