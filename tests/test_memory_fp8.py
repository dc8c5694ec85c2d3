"""Memory under FP8 (precision 'fp8') against Transformer Engine's source:
what its FP8 modules save for the backward and the FP8 weights it keeps.
Ref: transformer-engine (TransformerEngine at d0067d0d), megatron-core-fp8
(Megatron-LM at d98e8a64), megatron-bridge-perf-summary (Megatron-Bridge at
17a381f9)."""

import pytest

from shardbook import accelerator_file, hardware, measured, memory, models, validation
from shardbook.planner import calibrate, evaluate, run_options
from shardbook.planner.cli import main as cli_main

# LLaMA-3 70B: h 8192, 64 query heads and 8 KV heads of 128, SwiGLU F 28672, no dropout.
H, HEADS, KV_HEADS, HEAD_DIM, F = 8192, 64, 8, 128, 28672
S, B, T = 8192, 1, 4  # one 8,192-token sequence on a TP-4 group with sequence parallelism


def test_llama_70b_dimensions_are_the_ones_derived_below():
    m = models.get("LLaMA-3 70B")
    assert (m.d_model, m.n_heads, m.n_kv_heads, m.head_dim, m.d_ff) == (H, HEADS, KV_HEADS, HEAD_DIM, F)
    assert m.gated_mlp and not m.dropout and not m.is_moe and m.mla is None


def _qkvo_per_rank():
    # Q and the attention output: 64·128/t per token; K and V: 8·128/t each (8 KV heads over t = 4)
    return 2 * HEADS * HEAD_DIM / T + 2 * KV_HEADS * HEAD_DIM / T


def test_fp8_dense_layer_by_hand_from_the_transformer_engine_source():
    """One LLaMA-3 70B layer, TP 4 with sequence parallelism, no recomputation, a flash kernel.

    BF16 (Korthikanti's count): the two norm inputs, the attention's input and the MLP's input,
    2 bytes each per token and width h, split over t by SP: 8·sbh/t; Q, K, V and the attention
    output, 2 bytes each: 2·sb·(Q + K + V + O)/t; gate, up and their product: 3·2·sbF/t; the
    log-sum-exp, 4 bytes per row and head: 4·a·sb/t.

    FP8 (TransformerEngine d0067d0d): layernorm_linear.py saves its input (`inputmat`, the
    activation dtype: BF16) and its ln_out quantized (`ln_out.update_usage(rowwise_usage=False)`;
    with sequence parallelism the local shard row-wise): the attention's and the MLP's inputs
    become 1 byte, the norm inputs stay 2: (4 + 1 + 1)·sbh/t. DotProductAttention runs in BF16
    (fp8_dpa off): Q, K, V unchanged; the output projection saves the attention's BF16 output
    itself (Megatron-Core d98e8a64 attention.py: set_save_original_input(linear_proj)), so O is
    still counted once in BF16. Megatron's bias_swiglu saves fc1's output (gate and up) in BF16
    (activation_func_fp8_input_store off), and fc2 (linear.py) saves its input, the product,
    column-wise in FP8: (2 + 2 + 1)·sbF/t. The log-sum-exp is unchanged.
    """
    sbh, sbf = S * B * H, S * B * F
    qkvo = 2 * S * B * _qkvo_per_rank()
    lse = 4 * HEADS * S * B / T
    bf16 = 8 * sbh / T + qkvo + 6 * sbf / T + lse
    fp8 = 6 * sbh / T + qkvo + 5 * sbf / T + lse
    kw = dict(tp=T, sequence_parallel=True, recompute="none")
    assert memory.activation_bytes_per_layer("LLaMA-3 70B", S, B, **kw) == pytest.approx(bf16, rel=1e-12)
    assert memory.activation_bytes_per_layer("LLaMA-3 70B", S, B, precision="bf16", **kw) == pytest.approx(
        bf16, rel=1e-12
    )
    assert memory.activation_bytes_per_layer("LLaMA-3 70B", S, B, precision="fp8", **kw) == pytest.approx(
        fp8, rel=1e-12
    )
    # FP8 keeps less: one byte fewer on the attention's and MLP's inputs and on the SwiGLU product
    assert bf16 - fp8 == pytest.approx(2 * sbh / T + sbf / T, rel=1e-12)


def test_fp8_without_sequence_parallelism_keeps_the_inputs_whole_on_every_rank():
    """Without SP the norm inputs and the GEMMs' inputs are whole on each TP rank (the saved
    ln_out is column-wise FP8 of the whole input): (4 + 1 + 1)·sbh, the rest split as above."""
    sbh, sbf = S * B * H, S * B * F
    fp8 = 6 * sbh + 2 * S * B * _qkvo_per_rank() + 5 * sbf / T + 4 * HEADS * S * B / T
    got = memory.activation_bytes_per_layer("LLaMA-3 70B", S, B, tp=T, recompute="none", precision="fp8")
    assert got == pytest.approx(fp8, rel=1e-12)


def test_fp8_moe_layer_keeps_its_mlp_input_in_bf16_and_the_dispatched_tokens_in_fp8():
    """Mixtral 8x7B (h 4096, k = 2 of 8 experts, F 14336), no TP. An MoE layer's MLP input stays
    BF16: the router saves it (Megatron-Core shared_experts.py: "the output of pre_mlp_layernorm
    is saved by router"). The experts' grouped fc1 saves the dispatched tokens column-wise in
    FP8 (grouped_linear.py): k·sbh·1 instead of k·sbh·2; each expert's SwiGLU product, fc2's
    input, 1 byte instead of 2: k·sbF less. The attention input, 1 byte less per sbh."""
    s, h, k, f = 4096, 4096, 2, 14336
    m = models.get("Mixtral 8x7B")
    assert (m.d_model, m.top_k, m.d_ff, m.n_shared_experts, m.mla) == (h, k, f, 0, None)
    bf16 = memory.activation_bytes_per_layer(m, s, 1, recompute="none")
    fp8 = memory.activation_bytes_per_layer(m, s, 1, recompute="none", precision="fp8")
    assert bf16 - fp8 == pytest.approx(s * h + k * s * h + k * s * f, rel=1e-12)


@pytest.mark.parametrize("recompute", ["full", "minimal", "nothing_saveable"])
def test_fp8_leaves_what_a_policy_keeps_in_bf16_alone(recompute):
    """'full' keeps the layer input, the residual stream (BF16); a MaxText policy keeps the
    tensors it names in BF16 (Transformer Engine is not its stack)."""
    kw = dict(tp=2, sequence_parallel=True, recompute=recompute)
    assert memory.activation_bytes_per_layer("LLaMA-3 8B", 4096, 1, precision="fp8", **kw) == (
        memory.activation_bytes_per_layer("LLaMA-3 8B", 4096, 1, **kw)
    )


def test_deepseek_v3_recipe_is_its_own_precision():
    kw = dict(tp=1, recompute="deepseek_v3")
    assert memory.activation_bytes_per_layer("DeepSeek-V3", 4096, 1, precision="fp8", **kw) == (
        memory.activation_bytes_per_layer("DeepSeek-V3", 4096, 1, **kw)
    )


def test_precision_bad_input():
    with pytest.raises(ValueError, match="precision"):
        memory.activation_bytes_per_layer("LLaMA-3 8B", 4096, 1, precision="fp16")
    with pytest.raises(ValueError, match="fp8_weights"):
        memory.te_fp8_weight_bytes(False, "bf16")
    with pytest.raises(ValueError, match="non_tn_gemm"):
        memory.te_fp8_weight_bytes(1)


def test_te_fp8_weight_bytes_from_the_source():
    """A Float8Tensor weight: 1 byte of data, and on an accelerator whose FP8 GEMM takes only the
    TN layout (Hopper) a 1-byte transpose beside it (post_all_gather_processing: _create_transpose
    unless is_non_tn_fp8_gemm_supported()); Megatron-LM's default adds that FP8 copy to the BF16
    weight (2 bytes)."""
    assert memory.te_fp8_weight_bytes(False) == 1 + 1
    assert memory.te_fp8_weight_bytes(True) == 1
    assert memory.te_fp8_weight_bytes(False, "cached") == 2 + 1 + 1
    assert memory.te_fp8_weight_bytes(True, "cached") == 2 + 1


MESH_70B = {"dp": 2, "tp": 4, "pp": 8}
OPTS_70B = dict(
    seq_len=8192,
    micro_batch_seqs=1,
    state_recipe="megatron",
    zero=1,
    schedule="interleaved",
    n_virtual=5,
    sequence_parallel=True,
    recompute="none",
)


def _plan(acc, precision):
    return evaluate("LLaMA-3 70B", acc, MESH_70B, 256 * 8192, precision=precision, **OPTS_70B)


def test_fp8_plan_on_hopper_keeps_its_weights_and_gradients_and_less_activation():
    """On H100 the FP8 weight and its transpose take the 2 bytes BF16 took; Transformer Engine
    writes a weight's gradient into main_grad in that buffer's dtype (linear.py: the wgrad GEMM's
    out_dtype is main_grad.dtype), so the gradients stay as the state recipe says."""
    bf16, fp8 = _plan("H100", "bf16").memory_breakdown, _plan("H100", "fp8").memory_breakdown
    for key in ("weights", "gradients", "master_weights", "optimizer_state"):
        assert fp8[key] == bf16[key], key
    assert fp8["activations"] < bf16["activations"]
    # the activations scale by the per-layer counts derived above (same layers, same microbatches)
    kw = dict(tp=4, sequence_parallel=True, recompute="none")
    ratio = memory.activation_bytes_per_layer("LLaMA-3 70B", 8192, 1, precision="fp8", **kw) / (
        memory.activation_bytes_per_layer("LLaMA-3 70B", 8192, 1, **kw)
    )
    assert fp8["activations"] == pytest.approx(bf16["activations"] * ratio, rel=1e-12)


def test_fp8_plan_on_blackwell_holds_its_layer_weights_in_one_byte():
    """On B200 the FP8 weight needs no transpose: a transformer layer's weights take 1 byte a
    parameter, not 2. LLaMA-3 70B's layer: attention h·(h + 2·8·128) + (64·128)·h, MLP 3·h·F,
    two norms 2h; the deepest stage (stage 0 of the interleaved pipeline: 80/8 = 10 layers, and
    the embedding) holds 10 of them over tp = 4 (the norms, 20·2h of 8.6e9, replicated over tp:
    within 1e-5)."""
    per_layer = H * (H + 2 * KV_HEADS * HEAD_DIM) + HEADS * HEAD_DIM * H + 3 * H * F + 2 * H
    layer_params_per_device = 10 * per_layer / 4
    bf16, fp8 = _plan("B200", "bf16"), _plan("B200", "fp8")
    assert bf16.memory_device == fp8.memory_device == "stage 0"
    saved = bf16.memory_breakdown["weights"] - fp8.memory_breakdown["weights"]
    assert saved == pytest.approx(layer_params_per_device * (2 - 1), rel=1e-5)
    assert fp8.memory_breakdown["gradients"] == bf16.memory_breakdown["gradients"]


def _renamed_file(preset, name):
    """An accelerator file of `preset` under `name`, keeping its calibration (based_on)."""
    text = accelerator_file.to_toml(hardware.get(preset)).replace(f'name = "{preset}"', f'name = "{name}"', 1)
    return accelerator_file.from_text(f'{text}\n[calibration]\nbased_on = "{preset}"\n', "toml")


@pytest.mark.parametrize("preset", ["H100", "B200"])
def test_an_accelerator_file_keeps_fp8_weights_as_the_preset_it_is_based_on(preset):
    """Whether a GEMM needs the FP8 weight's transpose is the chip's (Hopper yes, Blackwell no):
    a file based on a preset is planned as that preset, byte for byte."""
    acc = _renamed_file(preset, f"My {preset}")
    assert acc.name == f"My {preset}" and calibrate.preset_name(acc) == preset
    assert _plan(acc, "fp8").memory_breakdown == _plan(preset, "fp8").memory_breakdown


def test_bf16_plans_are_unchanged_by_the_precision_keyword():
    for acc in ("H100", "B200"):
        default = evaluate("LLaMA-3 70B", acc, MESH_70B, 256 * 8192, **OPTS_70B).memory_breakdown
        assert _plan(acc, "bf16").memory_breakdown == default


def _fp8_runs():
    return [r for r in (*measured.VALIDATION_RUNS, *measured.HELD_OUT_RUNS) if r.precision == "fp8"]


def test_every_published_fp8_run_that_ran_fits():
    runs = _fp8_runs()
    assert len(runs) >= 3  # Megatron Bridge's Llama 3 70B and 405B on H100, DeepSeek-V3 on H800
    for run in runs:
        cand = evaluate(run.model, run.accelerator, run.mesh, run.global_tokens, **run_options(run))
        assert cand.fits, run.name
    assert all(row.expected.fits for row in validation.rows(runs)), [r.run.name for r in runs]


def test_explain_says_how_fp8_memory_is_counted(capsys):
    args = ["LLaMA-3 70B", "H100", "64", "--batch-seqs", "256", "--seq-len", "8192", "--mesh", "dp=2,tp=4,pp=8"]
    assert cli_main([*args, "--explain", "--precision", "fp8"]) in (0, None)
    out = capsys.readouterr().out
    assert "FP8: activations as Transformer Engine saves them" in out
    assert "gradients in the state recipe's dtype" in out
    assert cli_main([*args, "--explain"]) in (0, None)
    assert "FP8:" not in capsys.readouterr().out
