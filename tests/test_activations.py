"""Activation memory per layer and per device against Korthikanti et al.'s
published formulas. Ref: korthikanti2022reducing (Table 2 and §4)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardbook import memory, models

# Their GPT models: F = 4h, a·head_dim = h, no GQA, dropout, plain (non-gated) MLP.
GPT_175B = models.Model(
    "GPT-3 175B", "korthikanti2022reducing", 12288, 4 * 12288, 96, 96, 96, 128, 51200, gated_mlp=False, dropout=True
)
S, B, H, A = 2048, 1, 12288, 96


@pytest.mark.parametrize(
    "tp,sequence_parallel,recompute,formula",
    [
        # "no parallelism": sbh(34 + 5as/h)
        (1, False, "none", lambda t: S * B * H * (34 + 5 * A * S / H)),
        # tensor parallel: sbh(10 + 24/t + 5as/(ht))
        (8, False, "none", lambda t: S * B * H * (10 + 24 / t + 5 * A * S / (H * t))),
        # tensor + sequence parallel: sbh(34/t + 5as/(ht))
        (8, True, "none", lambda t: S * B * H * (34 / t + 5 * A * S / (H * t))),
        # with selective recomputation: sbh·34/t
        (8, True, "selective", lambda t: S * B * H * 34 / t),
        # tensor parallel with selective recomputation: sbh(10 + 24/t)
        (8, False, "selective", lambda t: S * B * H * (10 + 24 / t)),
        # full recomputation keeps only the layer input: 2sbh (split by SP)
        (1, False, "full", lambda t: 2 * S * B * H),
        (8, True, "full", lambda t: 2 * S * B * H / t),
    ],
)
def test_korthikanti_formulas(tp, sequence_parallel, recompute, formula):
    got = memory.activation_bytes_per_layer(
        GPT_175B, S, B, tp=tp, sequence_parallel=sequence_parallel, recompute=recompute, attention="eager"
    )
    assert got == pytest.approx(formula(tp), rel=1e-12)


def test_llama_style_layer_by_hand():
    """LLaMA-3 8B, one 8,192-token sequence, no TP: norm inputs 4sbh, attention
    and MLP inputs 4sbh; Q 2·s·4096, K and V 2·s·1024 each, output projection
    input 2·s·4096; SwiGLU gate, up and product 3·2·s·14336; softmax 2·32·s²;
    no dropout terms. FlashAttention keeps no softmax, only a 4-byte
    log-sum-exp per row and head."""
    s = 8192
    linear = 8 * s * 4096 + 2 * s * (4096 + 2 * 1024) + 2 * s * 4096 + 6 * s * 14336
    assert memory.activation_bytes_per_layer("LLaMA-3 8B", s, 1, attention="eager") == linear + 2 * 32 * s * s
    assert memory.activation_bytes_per_layer("LLaMA-3 8B", s, 1) == linear + 4 * 32 * s


def test_per_device_counts_layers_stages_and_microbatches():
    per_layer = memory.activation_bytes_per_layer(
        "LLaMA-3 8B", 4096, 2, tp=2, sequence_parallel=True, recompute="selective"
    )
    got = memory.activation_bytes_per_device(
        "LLaMA-3 8B", 4096, 2, tp=2, pp=4, sequence_parallel=True, recompute="selective", n_microbatches=16
    )
    assert got == pytest.approx(per_layer * (32 // 4) * 4)  # 1F1B: the first stage holds p microbatches
    gpipe = memory.activation_bytes_per_device(
        "LLaMA-3 8B",
        4096,
        2,
        tp=2,
        pp=4,
        sequence_parallel=True,
        recompute="selective",
        n_microbatches=16,
        schedule="gpipe",
    )
    assert gpipe == pytest.approx(per_layer * 8 * 16)


def test_context_parallel_splits_tokens_but_not_keys():
    """With cp ranks each holds s/cp tokens; without recomputation its scores
    are a·(s/cp)·s, so cp = 2 keeps half the linear terms and half the scores."""
    full = memory.activation_bytes_per_layer("LLaMA-3 8B", 8192, 1, attention="eager")
    selective = memory.activation_bytes_per_layer("LLaMA-3 8B", 8192, 1, recompute="selective")
    got = memory.activation_bytes_per_device("LLaMA-3 8B", 8192, 1, cp=2, attention="eager")
    assert got == pytest.approx(32 * (selective / 2 + (full - selective) / 2))
    assert memory.activation_bytes_per_layer("LLaMA-3 8B", 8192, 1, cp=2, attention="eager") == got / 32


@given(
    st.sampled_from(["LLaMA-3 8B", "LLaMA-3 70B", "Mixtral 8x7B"]),
    st.integers(1, 8192),
    st.integers(1, 8),
    st.sampled_from([1, 2, 4, 8]),
)
@settings(max_examples=60, deadline=None)
def test_recomputation_and_parallelism_only_ever_reduce_memory(model, s, b, tp):
    for attention in memory.ATTENTION:
        none = memory.activation_bytes_per_layer(model, s, b, tp=tp, attention=attention)
        selective = memory.activation_bytes_per_layer(model, s, b, tp=tp, recompute="selective", attention=attention)
        full = memory.activation_bytes_per_layer(model, s, b, tp=tp, recompute="full", attention=attention)
        assert full <= selective <= none
        sp = memory.activation_bytes_per_layer(model, s, b, tp=tp, sequence_parallel=True, attention=attention)
        assert sp <= none
        assert none <= memory.activation_bytes_per_layer(model, s, b, attention=attention)
        # every MaxText policy keeps at most what 'none' keeps, and at least the layer input
        # unless it offloads that too (MaxText's custom policies with decoder_layer_input offloaded)
        for policy in memory.RECOMPUTE:
            if memory.recompute_policy(policy).kind == "recipe":  # DeepSeek-V3's own, for MLA models
                continue
            kept = memory.activation_bytes_per_layer(model, s, b, tp=tp, recompute=policy, attention=attention)
            input_offloaded = "decoder_layer_input" in memory.recompute_policy(policy).offloads
            assert (0 if input_offloaded else full) <= kept <= none
    # flash keeps 4 bytes of LSE per row and head, eager at least 2 per key: eager
    # keeps more from two tokens on
    flash_le_eager = memory.activation_bytes_per_layer(model, s, b, tp=tp) <= memory.activation_bytes_per_layer(
        model, s, b, tp=tp, attention="eager"
    )
    assert flash_le_eager == (s >= 2)


def test_activation_bad_input():
    with pytest.raises(ValueError, match="tp: must divide the heads \\(32\\)"):
        memory.activation_bytes_per_layer("LLaMA-3 8B", 1024, 1, tp=64)
    with pytest.raises(ValueError, match="tp: must divide the KV heads \\(8\\) of Mixtral 8x22B or be a multiple"):
        memory.activation_bytes_per_layer("Mixtral 8x22B", 1024, 1, tp=12)
    with pytest.raises(ValueError, match="attention: unknown value 'fused'; valid: flash, eager"):
        memory.activation_bytes_per_layer("LLaMA-3 8B", 1024, 1, attention="fused")
    with pytest.raises(ValueError, match="recompute: unknown value 'some'"):
        memory.activation_bytes_per_layer("LLaMA-3 8B", 1024, 1, recompute="some")
    with pytest.raises(ValueError, match="cp: must divide seq_len \\(1000\\)"):
        memory.activation_bytes_per_device("LLaMA-3 8B", 1000, 1, cp=3)
    with pytest.raises(ValueError, match="dense_layer: LLaMA-3 8B has no dense layers"):
        memory.activation_bytes_per_layer("LLaMA-3 8B", 1024, 1, dense_layer=True)
    with pytest.raises(ValueError, match="pp: must divide the layers \\(32\\)"):
        memory.activation_bytes_per_device("LLaMA-3 8B", 1024, 1, pp=3)


def test_gated_flag_counts_parameters():
    """A plain MLP has two D×F matrices, SwiGLU three."""
    plain = models.with_changes("LLaMA-3 8B", gated_mlp=False)
    m = models.get("LLaMA-3 8B")
    assert models.param_count(m) - models.param_count(plain) == m.n_layers * m.d_model * m.d_ff


def test_remembered_activation_bytes_are_the_counted_ones_and_bad_arguments_still_refused():
    # memory remembers activation_bytes_per_stage_layer by argument (a search asks for the same split
    # again and again): what it remembers is what the count gives, also for an argument of another
    # type (1 for True), and an unhashable one is checked (and refused) as before
    args = (models.get("DeepSeek-V3"), 4096, 2, 4, 8, 2, True, "selective", "flash", False)
    first = memory.activation_bytes_per_stage_layer(
        "DeepSeek-V3", 4096, 2, pp=4, tp=8, cp=2, sequence_parallel=True, recompute="selective"
    )
    assert first == memory._stage_layer_bytes_of(*args)
    assert (
        memory.activation_bytes_per_stage_layer(
            "DeepSeek-V3", 4096, 2, pp=4, tp=8, cp=2, sequence_parallel=True, recompute="selective"
        )
        == first
    )
    assert memory._stage_layer_bytes(*args[:6], 1, *args[7:]) == memory._stage_layer_bytes_of(*args[:6], 1, *args[7:])
    with pytest.raises(ValueError, match="seq_len: must be an integer, got \\[4096\\]"):
        memory.activation_bytes_per_stage_layer("LLaMA-3 8B", [4096], 1, tp=2)
