"""Transformer presets and parameter counting.

Notation (used in every chapter): D = d_model, F = d_ff (the width of one
expert's MLP; the dense width for a dense model), L = layers, E = routed
experts, k = routed experts per token. Shapes come from each model's published
configuration; `source` names the references.bib key.
"""

import re
from dataclasses import dataclass, fields, replace

from . import _validate


@dataclass(frozen=True)
class MLA:
    """Multi-head latent attention (DeepSeek-V2/V3) projection widths."""

    q_lora_rank: int  # 0 means queries project directly from D
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            minimum = 0 if f.name == "q_lora_rank" else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                raise ValueError(f"mla.{f.name}: must be an integer >= {minimum}, got {value!r}")


@dataclass(frozen=True)
class Model:
    """A decoder-only transformer.

    n_experts = 1 and top_k = 1 describe a dense model. For MoE models `d_ff`
    is one routed expert's width; `n_shared_experts` experts of the same width
    run for every token; the first `n_dense_layers` layers are dense with
    width `d_ff_dense`. `gated_mlp`: a SwiGLU MLP (gate, up, down: three
    matrices; every preset) or a plain two-matrix MLP (GPT). `dropout`:
    dropout after attention scores and after each block (GPT as Megatron
    trains it; LLaMA-style models have none). `qkv_bias`: biases on the Q,
    K and V projections (Qwen2). `parallel_block`: attention and MLP read
    the same normalised input and their outputs are summed into the
    residual in one step (PaLM's "parallel" formulation; MaxText's default
    decoder block until February 2024): one norm per layer, and the MLP
    does not wait for the attention's output.
    """

    name: str
    source: str
    d_model: int
    d_ff: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    vocab_size: int
    n_experts: int = 1
    top_k: int = 1
    n_shared_experts: int = 0
    n_dense_layers: int = 0
    d_ff_dense: int = 0
    tied_embeddings: bool = False
    mla: MLA | None = None
    router_bias: bool = False
    gated_mlp: bool = True
    dropout: bool = False
    qkv_bias: bool = False
    parallel_block: bool = False

    def __post_init__(self):
        if not isinstance(self.source, str) or not self.source:
            raise ValueError(f"{self.name}.source: every model needs a references.bib key")
        for f in fields(self):
            if f.type == "int" or f.type is int:
                minimum = 0 if f.name in ("n_shared_experts", "n_dense_layers", "d_ff_dense") else 1
                value = getattr(self, f.name)
                if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
                    raise ValueError(f"{self.name}.{f.name}: must be an integer >= {minimum}, got {value!r}")
            elif f.type == "bool" or f.type is bool:
                _validate.boolean(f"{self.name}.{f.name}", getattr(self, f.name))
        if self.mla is not None and not isinstance(self.mla, MLA):
            raise ValueError(f"{self.name}.mla: must be a models.MLA or None, got {self.mla!r}")
        if self.top_k > self.n_experts:
            raise ValueError(f"{self.name}.top_k: must be <= n_experts ({self.n_experts}), got {self.top_k}")
        if self.n_dense_layers > self.n_layers:
            raise ValueError(f"{self.name}.n_dense_layers: must be <= n_layers ({self.n_layers})")
        if self.n_dense_layers and not self.d_ff_dense:
            raise ValueError(f"{self.name}.d_ff_dense: required when n_dense_layers > 0")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"{self.name}.n_kv_heads: must divide n_heads ({self.n_heads}), got {self.n_kv_heads}")

    @property
    def is_moe(self):
        return self.n_experts > 1


def _attention_params(m):
    d = m.d_model
    if m.mla is None:
        q = d * m.n_heads * m.head_dim
        kv = 2 * d * m.n_kv_heads * m.head_dim
        o = m.n_heads * m.head_dim * d
        bias = (m.n_heads + 2 * m.n_kv_heads) * m.head_dim if m.qkv_bias else 0
        return q + kv + o + bias
    a = m.mla
    qk_head = a.qk_nope_head_dim + a.qk_rope_head_dim
    if a.q_lora_rank:
        q = d * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * m.n_heads * qk_head
    else:
        q = d * m.n_heads * qk_head
    kv = d * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank
    kv += a.kv_lora_rank * m.n_heads * (a.qk_nope_head_dim + a.v_head_dim)
    o = m.n_heads * a.v_head_dim * d
    return q + kv + o


def _mlp_params(d_model, d_ff, gated=True):
    return (3 if gated else 2) * d_model * d_ff  # gate, up and down; or up and down


def _layer_counts(m, active):
    attention = _attention_params(m)
    norms = (1 if m.parallel_block else 2) * m.d_model  # RMSNorm weights: one norm per layer in a parallel block
    dense = m.n_dense_layers * (attention + norms + _mlp_params(m.d_model, m.d_ff_dense, m.gated_mlp))
    n_moe = m.n_layers - m.n_dense_layers
    if m.is_moe:
        n_routed = m.top_k if active else m.n_experts
        router = m.n_experts * m.d_model + (m.n_experts if m.router_bias else 0)
        mlp = (n_routed + m.n_shared_experts) * _mlp_params(m.d_model, m.d_ff, m.gated_mlp) + router
    else:
        mlp = _mlp_params(m.d_model, m.d_ff, m.gated_mlp)
    return dense + n_moe * (attention + norms + mlp)


def _embedding_params(m):
    table = m.vocab_size * m.d_model
    return table if m.tied_embeddings else 2 * table


def param_count(model):
    """Total parameters: embeddings (untied unless stated), attention (GQA or
    MLA), gated MLPs (every expert and shared expert, plus router), RMSNorm
    weights and the final norm."""
    m = get(model)
    return _embedding_params(m) + _layer_counts(m, active=False) + m.d_model


def active_param_count(model):
    """Parameters one token passes through: as param_count, but only the top_k
    routed experts (plus shared experts) of each MoE layer."""
    m = get(model)
    return _embedding_params(m) + _layer_counts(m, active=True) + m.d_model


def end_param_counts(model):
    """(input_params, output_params): the parameters outside the
    transformer layers, by the end of the model they sit at. `input_params`
    is the input embedding table (V·D); `output_params` the final norm (D)
    plus the output projection (V·D) when the embeddings are untied, the
    final norm alone when they are tied (the projection is the input table,
    counted once here: a pipeline keeps a second copy of it on its last
    stage, which the planner adds). param_count = input_params +
    output_params + the layers. Ref: narayanan2021megatron."""
    m = get(model)
    table = m.vocab_size * m.d_model
    return table, (0 if m.tied_embeddings else table) + m.d_model


def routed_expert_param_count(model):
    """Parameters of the routed experts over every MoE layer (0 for a dense
    model): the part of param_count that expert parallelism splits."""
    m = get(model)
    if not m.is_moe:
        return 0
    return (m.n_layers - m.n_dense_layers) * m.n_experts * _mlp_params(m.d_model, m.d_ff, m.gated_mlp)


PRESETS = {
    m.name: m
    for m in [
        Model("LLaMA-2 13B", "touvron2023llama2", 5120, 13824, 40, 40, 40, 128, 32000),
        Model("LLaMA-2 70B", "touvron2023llama2", 8192, 28672, 80, 64, 8, 128, 32000),
        Model("LLaMA-3 8B", "dubey2024llama3", 4096, 14336, 32, 32, 8, 128, 128256),
        Model("LLaMA-3 70B", "dubey2024llama3", 8192, 28672, 80, 64, 8, 128, 128256),
        Model("LLaMA-3 405B", "dubey2024llama3", 16384, 53248, 126, 128, 8, 128, 128256),
        Model("Mixtral 8x7B", "jiang2024mixtral", 4096, 14336, 32, 32, 8, 128, 32000, n_experts=8, top_k=2),
        # v0.1's 32,000-token vocabulary (its safetensors count, tests/test_presets.py); MaxText's
        # mixtral-8x22b.yml has the v3 tokenizer's 32,768, 0.007 % more parameters
        Model("Mixtral 8x22B", "mistral2024mixtral8x22b", 6144, 16384, 56, 48, 8, 128, 32000, n_experts=8, top_k=2),
        Model(
            "DeepSeek-V2-Lite",
            "deepseek2024v2",
            2048,
            1408,
            27,
            16,
            16,
            128,
            102400,
            n_experts=64,
            top_k=6,
            n_shared_experts=2,
            n_dense_layers=1,
            d_ff_dense=10944,
            mla=MLA(0, 512, 128, 64, 128),
        ),
        Model(
            "DeepSeek-V3",
            "deepseek2024v3",
            7168,
            2048,
            61,
            128,
            128,
            128,
            129280,
            n_experts=256,
            top_k=8,
            n_shared_experts=1,
            n_dense_layers=3,
            d_ff_dense=18432,
            mla=MLA(1536, 512, 128, 64, 128),
            router_bias=True,
        ),
    ]
}


def _gpt(name, source, d_model, n_layers, n_heads, vocab_size, tied_embeddings, dropout=True):
    """A GPT-style model: a plain two-matrix MLP of width 4·D, multi-head
    attention (as many KV heads as heads), dropout as Megatron-LM trains it
    (`dropout`; MPT has none)."""
    return Model(
        name,
        source,
        d_model,
        4 * d_model,
        n_layers,
        n_heads,
        n_heads,
        d_model // n_heads,
        vocab_size,
        tied_embeddings=tied_embeddings,
        gated_mlp=False,
        dropout=dropout,
    )


# GPT models of published Megatron-LM throughput runs, kept apart from the
# book's teaching presets (they appear in the validation appendix only).
# Narayanan et al. SC21, Table 1: vocabulary 51,200, sequence 2,048, one
# embedding matrix shared with the output layer (their equation 2 counts V·h
# once); (hidden, layers, heads) per row.
SC21_SHAPES = {
    "1.7B": (2304, 24, 24),
    "3.6B": (3072, 30, 32),
    "7.5B": (4096, 36, 32),
    "18.4B": (6144, 40, 48),
    "39.1B": (8192, 48, 64),
    "76.1B": (10240, 60, 80),
    "145.6B": (12288, 80, 96),
    "310.1B": (16384, 96, 128),
    "529.6B": (20480, 105, 128),
    "1008.0B": (25600, 128, 160),
}
# The Megatron-LM README's H100 weak-scaling table (Megatron-Core r0.8.0):
# vocabulary 131,072, sequence 4,096; the table's sizes need untied input
# and output embeddings (1.7B: 24·12·2048² + 2·131,072·2048 = 1.75e9).
MCORE_SHAPES = {
    "1.7B": (2048, 24, 16),
    "7.1B": (4096, 30, 32),
    "16B": (6144, 32, 48),
    "32B": (7168, 48, 56),
    "70B": (8192, 84, 64),
    "119B": (10240, 92, 80),
    "177B": (12288, 96, 96),
    "314B": (16384, 96, 128),
    "462B": (18432, 112, 144),
}

# Korthikanti et al. 2022, Table 3: the GPT models of their end-to-end runs (Table 5):
# vocabulary 51,200, sequence 2,048; (hidden, layers, heads) per row.
KORTHIKANTI_SHAPES = {
    "22B": (6144, 48, 64),
    "175B": (12288, 96, 96),
    "530B": (20480, 105, 128),
    "1T": (25600, 128, 160),
}

# MaxText's scaled models of its TPU v5p performance table (maxtext-v5p-perf: configs/v5p/README.md,
# the <size>.sh scripts and configs/base.yml at 76bd53b0, 2023-12-15). Each <size>.sh sets
# global_parameter_scale = size, and pyconfig.get_individual_scales doubles, in turn, the heads and
# MLP width, the embedding width and the layer count of base.yml's model (maxtext_scaled_shape).
# base.yml then held MaxText's "default" decoder block: base_emb_dim 2,560, base_num_heads 8 of
# head_dim 256 (as many KV heads: MHA), base_mlp_dim 8,192 with mlp_activations ["relu"] (one
# input matrix: a plain two-matrix MLP), 16 layers, vocabulary 32,768, logits_via_embedding True
# (the output layer is the embedding table), dropout_rate 0, and a parallel block
# (layers/models.py DecoderLayer: one RMSNorm, attention and MLP on its output, their sum added
# to the input). On 2024-02-14 (3b2ac811) base.yml switched to the Llama 2 block; the table was
# measured before. MaxText's v5e table (maxtext-v5e-perf, 2023-11-01) ran the same block and base
# model at 16B, 32B, 64B and 128B. (emb_dim, mlp_dim, layers, heads) per size:
MAXTEXT_BASE_SHAPE = (2560, 8192, 16, 8)
MAXTEXT_V5P_SHAPES = {
    "16B": (5120, 32768, 32, 32),
    "32B": (10240, 32768, 32, 32),
    "64B": (10240, 32768, 64, 32),
    "128B": (10240, 65536, 64, 64),
    "256B": (20480, 65536, 64, 64),
    "512B": (20480, 65536, 128, 64),
    "1024B": (20480, 131072, 128, 128),
}


def maxtext_scaled_shape(global_parameter_scale, base=MAXTEXT_BASE_SHAPE):
    """(emb_dim, mlp_dim, layers, heads) of MaxText's base model scaled by
    `global_parameter_scale` (a power of two), as pyconfig.get_individual_scales
    does it: with k = log2(scale) = 3q + r, heads and MLP width double q + (r > 0)
    times, the embedding width q + (r > 1) times, the layers q times; head_dim
    stays. Ref: maxtext-v5p-perf (MaxText/pyconfig.py at 76bd53b0)."""
    scale = int(_validate.count("global_parameter_scale", global_parameter_scale))
    k = scale.bit_length() - 1
    if 2**k != scale:
        raise ValueError(f"global_parameter_scale: must be a power of 2, got {global_parameter_scale}")
    if not (isinstance(base, tuple) and len(base) == 4):
        raise ValueError(f"base: must be (emb_dim, mlp_dim, layers, heads), got {base!r}")
    q, r = divmod(k, 3)
    emb, mlp, layers, heads = base
    heads_scale = q + (r > 0)
    return (emb * 2 ** (q + (r > 1)), mlp * 2**heads_scale, layers * 2**q, heads * 2**heads_scale)


def _maxtext(size, emb, mlp, layers, heads):
    return Model(
        f"MaxText {size}",
        "maxtext-v5e-perf" if size == "16B" else "maxtext-v5p-perf",
        emb,
        mlp,
        layers,
        heads,
        heads,
        256,
        32768,
        tied_embeddings=True,
        gated_mlp=False,
        parallel_block=True,
    )


# MosaicML's MPT models as llm-foundry's benchmark table trained them
# (llm-foundry-benchmarks: scripts/train/yamls/pretrain/mpt-<size>.yaml at
# 49521837): (d_model, n_heads, n_layers); MLP 4·D (expansion_ratio 4, GELU,
# two matrices), heads of 128 (the 760M, 1B and 3B yamls cut their heads to
# reach it, for FlashAttention), vocabulary 50,368, the output layer tied to
# the embedding (MPT's default), no dropout (its pdrop defaults are 0).
MPT_SHAPES = {
    "760M": (1536, 12, 24),
    "1B": (2048, 16, 24),
    "3B": (2560, 20, 32),
    "7B": (4096, 32, 32),
    "13B": (5120, 40, 40),
    "30B": (7168, 56, 48),
    "70B": (8192, 64, 80),
}
MPT_VOCAB = 50368


def _mpt(size, d_model, n_heads, n_layers):
    return _gpt(f"MPT {size}", "llm-foundry-benchmarks", d_model, n_layers, n_heads, MPT_VOCAB, True, dropout=False)


# BLOOM as BigScience trained it with Megatron-DeepSpeed (bigscience-tr11-176b: tr11-176B-ml.slurm
# and README.md of bigscience-workshop/bigscience): NHIDDEN 14,336, NLAYERS 70, NHEADS 112, a
# plain GeLU MLP of 4·D, the output layer tied to the embedding, --pad-vocab-size-to 250880 (the
# tokenizer's 250,680 padded), dropout left at Megatron's 0.1 (the script sets none). ALiBi adds
# a bias to the attention scores and keeps no position table (the book counts none for any GPT
# preset); the embedding LayerNorm and the biases (13·D per layer in the README's count, 2·D here)
# are left out, 0.006 % of the parameters.
BLOOM_SHAPE = (14336, 70, 112, 250880)


# Qwen3's two mixtures of experts, as Megatron Bridge's performance recipes train them
# (megatron-bridge-perf-summary: the recipes build the model from the released config.json,
# AutoBridge.from_hf_pretrained). The Qwen3 report (qwen2025qwen3, Table 2) gives the layers,
# the query and KV heads, the experts (128, 8 routed per token) and untied embeddings; the widths
# are the released configs' (hidden_size, moe_intermediate_size, head_dim 128, vocabulary
# 151,936; tests/data/hf_configs/qwen3-30b-a3b.json). Every layer is an MoE layer
# (decoder_sparse_step 1, no mlp_only_layers), with no shared expert and no biases; the per-head
# Q/K norms are not counted. (d_model, F, layers, heads) per model; 4 KV heads each.
QWEN3_MOE_SHAPES = {
    "Qwen3-30B-A3B": (2048, 768, 48, 32),
    "Qwen3-235B-A22B": (4096, 1536, 94, 64),
}


def _qwen3_moe(name, d_model, d_ff, n_layers, n_heads):
    return Model(name, "qwen2025qwen3", d_model, d_ff, n_layers, n_heads, 4, 128, 151936, n_experts=128, top_k=8)


# The models of published throughput runs that are not the book's teaching presets (they appear
# in the validation appendix only): Megatron-LM's GPT models, MaxText's scaled models, MPT, BLOOM,
# Qwen3's MoE.
GPT_PRESETS = {
    m.name: m
    for m in [
        *(
            _gpt(f"GPT {size} (SC21)", "narayanan2021megatron", h, layers, heads, 51200, True)
            for size, (h, layers, heads) in SC21_SHAPES.items()
        ),
        *(
            _gpt(f"GPT {size} (Megatron-Core)", "megatron-lm-readme", h, layers, heads, 131072, False)
            for size, (h, layers, heads) in MCORE_SHAPES.items()
        ),
        *(
            _gpt(f"GPT {size} (Korthikanti)", "korthikanti2022reducing", h, layers, heads, 51200, True)
            for size, (h, layers, heads) in KORTHIKANTI_SHAPES.items()
        ),
        *(_maxtext(size, *shape) for size, shape in MAXTEXT_V5P_SHAPES.items()),
        *(_mpt(size, *shape) for size, shape in MPT_SHAPES.items()),
        _gpt("BLOOM 176B", "bigscience-tr11-176b", *BLOOM_SHAPE, True),
        *(_qwen3_moe(name, *shape) for name, shape in QWEN3_MOE_SHAPES.items()),
    ]
}


def names():
    """The names of the model presets, in the order they are declared (the
    book's presets; the models of published runs are `gpt_names()`)."""
    return list(PRESETS)


def gpt_names():
    """The names of the models of published throughput runs (Megatron-LM's
    GPT models, MaxText's scaled models): GPT_PRESETS."""
    return list(GPT_PRESETS)


def get(name):
    """The preset called `name`, or `name` itself if it is a Model."""
    if isinstance(name, Model):
        return name
    try:
        return PRESETS[name] if name in PRESETS else GPT_PRESETS[name]
    except (KeyError, TypeError):
        raise ValueError(f"model: unknown preset {name!r}; {_nearest_presets(name)}") from None


def _nearest_presets(name):
    """The close names first (case and spacing aside), then the chapters'
    presets, and how to list the rest: the published runs' models are
    many, and one error line stays readable."""
    import difflib

    everything = [*PRESETS, *GPT_PRESETS]
    folded = {re.sub(r"[\s_-]+", "", n).lower(): n for n in everything}
    key = re.sub(r"[\s_-]+", "", str(name)).lower()
    close = [folded[key]] if key in folded else []
    close += [n for n in difflib.get_close_matches(str(name), everything, n=3, cutoff=0.6) if n not in close]
    hint = f"did you mean {' or '.join(repr(n) for n in close[:3])}? " if close else ""
    return (
        f"{hint}the chapters' presets: {', '.join(PRESETS)}; and {len(GPT_PRESETS)} models of published runs "
        "(models.gpt_names())"
    )


def with_changes(name, **changes):
    """A copy of a preset with some fields changed (validated again)."""
    return replace(get(name), **changes)


_validate.guard_module(globals())
