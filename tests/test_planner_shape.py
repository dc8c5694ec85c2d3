"""The planner prices each matmul at the accelerator's η times the shape
factor of its family's curve (planner.timing.matmul_shape_factor,
shardbook.matmul_efficiency): the expected values here are computed from
matmul_efficiency and the model's dimensions, not through timing's code."""

import inspect

import pytest

from shardbook import hardware, models, planner, training
from shardbook import matmul_efficiency as me
from shardbook.planner import calibrate, layout, timing

SEQ = 4096
H100_RIDGE = float(hardware.get("H100").bf16_dense_flops_per_s) / 3.35e12  # BF16 peak over 3.35 TB/s


def _layout(model, accelerator, mesh, seq_len=SEQ, micro_batch_seqs=1, stack="any"):
    n = 1
    for degree in mesh.values():
        n *= degree
    takes = inspect.signature(layout.layout).parameters  # evaluate's defaults for the rest
    options = {
        name: p.default
        for name, p in inspect.signature(planner.evaluate).parameters.items()
        if p.kind is p.KEYWORD_ONLY and name in takes
    }
    options.update(seq_len=seq_len, micro_batch_seqs=micro_batch_seqs, recompute="none", stack=stack)
    return layout.layout(model, accelerator, mesh, 8 * n * seq_len * micro_batch_seqs, **options)


def _expected_factor(tp, rows=SEQ):
    """LLaMA-3 70B's weight matmuls at tensor parallelism `tp`, by hand: the
    FLOP-weighted harmonic mean of the NVIDIA curve's factor, the rest at 1."""
    m = models.get("LLaMA-3 70B")
    d, ff, q, kv = m.d_model, m.d_ff, m.n_heads * m.head_dim, 2 * m.n_kv_heads * m.head_dim
    kv_local = kv / tp if tp <= m.n_kv_heads else 2 * m.head_dim  # one K and one V head a rank beyond 8
    shapes = [  # (M, K, N on the device, FLOPs per token over the model)
        (rows, d, q / tp + kv_local, 6 * d * (q + kv) * m.n_layers),
        (rows, q / tp, d, 6 * q * d * m.n_layers),
        (rows, d, ff / tp, 6 * d * ff * 2 * m.n_layers),  # gate and up
        (rows, ff / tp, d, 6 * ff * d * m.n_layers),
        (rows, d, m.vocab_size / tp, 6 * d * m.vocab_size),
    ]
    # the attention scores are priced apart (timing.math_s, calibrate.attention_share)
    total = training.model_flops_per_token(m, SEQ, causal=True) - training.attention_flops_per_token(
        m, SEQ, causal=True
    )
    slowed = sum(f / me.shape_factor("nvidia", mm, round(k), round(n), H100_RIDGE) for mm, k, n, f in shapes)
    return total / (total - sum(f for *_, f in shapes) + slowed)


def test_the_shapes_are_the_devices_after_the_tp_split():
    shapes = {name: (mm, k, n) for name, mm, k, n, _ in timing.matmul_shapes(_layout("LLaMA-3 70B", "H100", {"tp": 8}))}
    assert shapes["mlp_up"] == (4096, 8192, 3584) and shapes["mlp_down"] == (4096, 3584, 8192)
    assert shapes["attn_qkv"] == (4096, 8192, 1024 + 256) and shapes["attn_out"] == (4096, 1024, 8192)
    wide = {name: (mm, k, n) for name, mm, k, n, _ in timing.matmul_shapes(_layout("LLaMA-3 70B", "H100", {"tp": 32}))}
    assert wide["mlp_up"] == (4096, 8192, 896) and wide["attn_qkv"] == (4096, 8192, 256 + 256)
    # context parallelism and the microbatch set the rows
    cp = {
        n: mm
        for n, mm, *_ in timing.matmul_shapes(_layout("LLaMA-3 70B", "H100", {"tp": 8, "cp": 2}, micro_batch_seqs=2))
    }
    assert cp["mlp_up"] == 4096


def test_a_matmul_split_32_ways_costs_more_per_flop_than_split_8_by_the_curves_factor():
    """The planner's time per FLOP of the math at tp 32 over tp 8 is the ratio of the
    shape factors, and the 70B MLP's own product keeps less of the plateau at 32 ways."""
    assert (
        me.shape_factor("nvidia", 4096, 8192, 896, H100_RIDGE)
        < me.shape_factor("nvidia", 4096, 8192, 3584, H100_RIDGE)
        < 1
    )
    per_flop = {}
    eta = calibrate.matmul_efficiency("H100")
    peak = float(hardware.get("H100").bf16_dense_flops_per_s)
    for tp in (8, 32):
        lay = _layout("LLaMA-3 70B", "H100", {"tp": tp})
        assert timing.matmul_shape_factor(lay) == pytest.approx(_expected_factor(tp), rel=1e-9)
        _, _, expected, elementwise = timing.math_s(lay, "none")
        flops = (
            training.hardware_flops_per_token("LLaMA-3 70B", SEQ, "none", causal=True)
            * lay.global_tokens
            / lay.n_devices
        )
        # the attention scores at their own kernel's share of η (test_attention_scores_run_at_their_kernels_share)
        scores = training.attention_flops_per_token("LLaMA-3 70B", SEQ, causal=True) * lay.global_tokens / lay.n_devices
        attention_s = scores / (peak * eta * calibrate.attention_share("H100", lay.stack, SEQ))
        per_flop[tp] = (expected - elementwise - attention_s) / (flops - scores)
    assert per_flop[32] / per_flop[8] == pytest.approx(_expected_factor(8) / _expected_factor(32), rel=1e-9)
    assert per_flop[32] / per_flop[8] > 1.05  # the GPU curve's soft knee makes the split cost
    assert per_flop[8] == pytest.approx(1 / (peak * eta * _expected_factor(8)), rel=1e-9)


# FlashAttention-3's paper (shah2024flashattention3), H100 SXM5, BF16, head dimension 128, 4,096 tokens a
# sequence: forward with the causal mask and backward, TFLOP/s by its count (the backward 2.5 forwards)
FA2_AT_4K_TFLOPS, CUDNN_AT_4K_TFLOPS = (319, 310), (518, 499)


def _share_by_hand(forward, backward):
    # the model counts forward + backward as 3 forwards; the kernel spends 1/forward + 2.5/backward on them,
    # over the 0.73 of H100's dense BF16 peak the seed prints for a tuned job's math
    return 3 / (1 / forward + 2.5 / backward) / (0.73 * float(hardware.get("H100").bf16_dense_flops_per_s) / 1e12)


def test_attention_scores_run_at_their_kernels_share():
    """On Hopper the scores run at η times their kernel's speed over a tuned job's
    math: FlashAttention-2 where no stack or PyTorch's is named, cuDNN's under
    Transformer Engine (Megatron); elsewhere, and for eager attention, at η."""
    assert calibrate.attention_share("H100", "any", 4096) == pytest.approx(_share_by_hand(*FA2_AT_4K_TFLOPS), rel=1e-9)
    assert calibrate.attention_share("H100", "pytorch", 4096) == calibrate.attention_share("H100", "any", 4096)
    cudnn = calibrate.attention_share("H100", "megatron", 4096)
    assert cudnn == pytest.approx(_share_by_hand(*CUDNN_AT_4K_TFLOPS), rel=1e-9)
    assert 0.35 < calibrate.attention_share("H100", "any", 4096) < cudnn < 0.7
    # the nearest printed length; beyond them the shortest and the longest
    assert calibrate.attention_share("H800", "megatron", 4500) == cudnn
    assert calibrate.attention_share("H100", "any", 131072) == calibrate.attention_share("H100", "any", 16384)
    for other in ("B200", "A100", "TPU v5p", "MI355X"):
        assert calibrate.attention_share(other, "megatron", 4096) == 1.0
    # priced so: the 70B step's math at tp 8 under each stack differs by the scores' time alone
    lay = {stack: _layout("LLaMA-3 70B", "H100", {"tp": 8}, stack=stack) for stack in ("any", "megatron")}
    math = {stack: timing.math_s(lay[stack], "none")[2] for stack in lay}
    scores = training.attention_flops_per_token("LLaMA-3 70B", SEQ, causal=True) * lay["any"].global_tokens / 8
    eta, peak = calibrate.matmul_efficiency("H100"), float(hardware.get("H100").bf16_dense_flops_per_s)
    gap = scores / (peak * eta) * (1 / calibrate.attention_share("H100", "any", SEQ) - 1 / cudnn)
    assert math["any"] - math["megatron"] == pytest.approx(gap, rel=1e-9)
    with pytest.raises(ValueError, match="stack: "):
        calibrate.attention_share("H100", "triton", 4096)


def test_on_the_tpu_curve_a_split_costs_little_and_few_tokens_cost_much():
    """The TPU's sharp knee: the 70B MLP split 32 ways keeps over 98 % of the layer's
    plateau on v5e (its measured products ran at the plateau); 256 tokens a device do not."""
    split = timing.matmul_shape_factor(_layout("LLaMA-3 70B", "TPU v5e", {"tp": 32}, seq_len=8192))
    few = timing.matmul_shape_factor(_layout("LLaMA-3 70B", "TPU v5e", {"tp": 8}, seq_len=256))
    assert 0.98 < split < 1 and few < 0.9


# --- what FP8's casts move (timing.fp8_cast_s) --------------------------------------------------


def _fp8_layout(model, mesh, **options):
    n = 1
    for degree in mesh.values():
        n *= degree
    takes = inspect.signature(layout.layout).parameters
    defaults = {
        name: p.default
        for name, p in inspect.signature(planner.evaluate).parameters.items()
        if p.kind is p.KEYWORD_ONLY and name in takes
    }
    defaults.update(seq_len=SEQ, micro_batch_seqs=1, recompute="none", precision="fp8")
    defaults.update(options)
    return layout.layout(model, "H100", mesh, 8 * n * SEQ, **defaults)


def test_fp8_casts_move_each_matmuls_input_and_output_gradient_by_hand():
    m = models.get("LLaMA-3 8B")
    lay = _fp8_layout(m, {"fsdp": 8})
    d, ff, q = m.d_model, m.d_ff, m.n_heads * m.head_dim
    qkv = q + 2 * m.n_kv_heads * m.head_dim
    # forward inputs and backward output gradients of QKV, the output projection, gate/up and down
    per_token_layer = (d + q) + (qkv + d) + (d + ff) + (2 * ff + d)
    quantized = per_token_layer * SEQ * m.n_layers * lay.n_micro
    hbm = calibrate.hbm_bytes_per_s("H100") * calibrate.HBM_EFFICIENCY.value
    assert calibrate.fp8_cast_bytes_per_element("H100") == 6  # amax read, cast read, two FP8 copies
    assert timing.fp8_cast_s(lay, "none") == pytest.approx(6 * quantized / hbm)
    # a policy that reruns the whole forward casts its inputs again
    full = _fp8_layout(m, {"fsdp": 8}, recompute="full")
    assert timing.fp8_cast_s(full, "full") == pytest.approx(
        6 * (per_token_layer + (d + q) + (d + ff)) * SEQ * m.n_layers * full.n_micro / hbm
    )
    # nothing in BF16, nor on an accelerator no FP8 run checks (no figure)
    assert timing.fp8_cast_s(_fp8_layout(m, {"fsdp": 8}, precision="bf16"), "none") == 0
    assert calibrate.fp8_cast_bytes_per_element("MI355X") == 0


def test_fp8_casts_cost_a_fine_grained_moe_far_more_of_its_matmuls_than_a_wide_dense_model():
    # the casts grow with a matmul's inputs and outputs, its FLOPs with their product too: Qwen3-30B-A3B's
    # experts (768 wide, each token's 8 copies) spend several times LLaMA-3 70B's share
    def share(model, mesh):
        lay = _fp8_layout(model, mesh)
        flops = training.hardware_flops_per_token(lay.model, SEQ, "none", causal=True) * lay.global_tokens
        return timing.fp8_cast_s(lay, "none") / (flops / lay.n_devices)

    qwen = models.get("Qwen3-30B-A3B")
    assert share(qwen, {"fsdp": 8}) > 3 * share(models.get("LLaMA-3 70B"), {"fsdp": 8})
    # the routed experts' copies are counted on the rows the device holds: the same per device with ep
    assert timing.fp8_cast_s(_fp8_layout(qwen, {"ep": 8}), "none") == pytest.approx(
        timing.fp8_cast_s(_fp8_layout(qwen, {"fsdp": 8}), "none")
    )
