"""Hugging Face config.json files read into models.Model, one per family,
each parameter count checked against the one its release publishes (Hugging
Face safetensors totals where exact, the model card or report otherwise).
The files in tests/data/hf_configs/ hold the published configs' fields."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from shardbook import hf_config, models

CONFIGS = Path(__file__).parent / "data" / "hf_configs"


def _read(name, **kw):
    return hf_config.from_hf_config(CONFIGS / name, **kw)


def _non_embedding(m):
    return models.param_count(m) - m.vocab_size * m.d_model * (1 if m.tied_embeddings else 2)


# file, published total, tolerance (absolute, parameters), source
EXACT_OR_ROUNDED = [
    # HF safetensors totals: dubey2024llama3 (Meta-Llama-3-8B), jiang2023mistral
    # (Mistral-7B-v0.1), jiang2024mixtral (Mixtral-8x7B-v0.1)
    ("llama3-8b.json", 8_030_261_248, 0),
    ("mistral-7b-v0.1.json", 7_241_732_096, 0),
    ("mixtral-8x7b-v0.1.json", 46_702_792_704, 0),
    # the HF safetensors total of Qwen2.5-7B, with its Q/K/V biases (qwen2024qwen25)
    ("qwen2.5-7b.json", 7_615_616_512, 0),
    # model cards, within one unit of the last digit they print (the cards
    # round some counts and cut others: Qwen2.5-7B's 7.6156B is printed 7.61B,
    # Qwen3-8B's 8.19B 8.2B): qwen2025qwen3 (Qwen3-8B: 8.2B; Qwen3-30B-A3B:
    # 30.5B), qwen2024moe (Qwen1.5-MoE-A2.7B: 14.3B)
    ("qwen3-8b.json", 8.2e9, 0.1e9),
    ("qwen3-30b-a3b.json", 30.5e9, 0.1e9),
    ("qwen1.5-moe-a2.7b.json", 14.3e9, 0.1e9),
    # deepseek2024v3: 671B (the multi-token-prediction module's 14B not included)
    ("deepseek-v3.json", 671e9, 0.005 * 671e9),
    # deepseek2024v2: DeepSeek-V2-Lite, 15.7B
    ("deepseek-v2-lite.json", 15.7e9, 0.1e9),
]


@pytest.mark.parametrize("name,total,tolerance", EXACT_OR_ROUNDED, ids=[r[0] for r in EXACT_OR_ROUNDED])
def test_parameter_counts_match_the_published_ones(name, total, tolerance):
    assert abs(models.param_count(_read(name)) - total) <= tolerance


def test_non_embedding_and_active_counts():
    # within one unit of the cards' last digit: qwen2024qwen25 6.53B non-embedding;
    # qwen2025qwen3: Qwen3-8B 6.95B, Qwen3-30B-A3B 29.9B
    assert _non_embedding(_read("qwen2.5-7b.json")) == pytest.approx(6.53e9, abs=0.01e9)
    assert _non_embedding(_read("qwen3-8b.json")) == pytest.approx(6.95e9, abs=0.01e9)
    assert _non_embedding(_read("qwen3-30b-a3b.json")) == pytest.approx(29.9e9, abs=0.1e9)
    # activated: Qwen3-30B-A3B 3.3B (qwen2025qwen3), Qwen1.5-MoE-A2.7B 2.7B (qwen2024moe)
    assert models.active_param_count(_read("qwen3-30b-a3b.json")) == pytest.approx(3.3e9, abs=0.1e9)
    assert models.active_param_count(_read("qwen1.5-moe-a2.7b.json")) == pytest.approx(2.7e9, abs=0.1e9)
    # gemma2024 Table 1: Gemma 7B has 7,751,248,896 non-embedding parameters
    gemma = _read("gemma-7b.json")
    assert gemma.tied_embeddings  # GemmaConfig's default when the file leaves it out
    assert _non_embedding(gemma) == 7_751_248_896
    # gemma2024gemma2: Gemma 2 9B, 8,324,201,984 non-embedding; its two extra
    # norms per layer (2·3,584·42 = 301,056) are not in the Model
    assert _non_embedding(_read("gemma-2-9b.json")) == 8_324_201_984 - 2 * 3584 * 42


@pytest.mark.parametrize(
    "name,preset",
    [
        ("llama3-8b.json", "LLaMA-3 8B"),
        ("mixtral-8x7b-v0.1.json", "Mixtral 8x7B"),
        ("deepseek-v3.json", "DeepSeek-V3"),
        ("deepseek-v2-lite.json", "DeepSeek-V2-Lite"),
    ],
)
def test_a_config_reads_as_the_books_preset(name, preset):
    p = models.get(preset)
    assert replace(_read(name), name=p.name, source=p.source) == p


def test_name_and_defaults():
    m = hf_config.from_hf_config({**json.loads((CONFIGS / "llama3-8b.json").read_text()), "_name_or_path": "my-llama"})
    assert m.name == "my-llama" and m.source == "hf-transformers"
    bare = {k: v for k, v in json.loads((CONFIGS / "mistral-7b-v0.1.json").read_text()).items()}
    del bare["num_key_value_heads"], bare["tie_word_embeddings"]
    m = hf_config.from_hf_config(bare)
    assert m.name == "mistral config"
    assert m.n_kv_heads == m.n_heads == 32  # Transformers' default: one KV head per head
    assert not m.tied_embeddings and m.head_dim == 128


def test_bad_configs(tmp_path):
    good = json.loads((CONFIGS / "mixtral-8x7b-v0.1.json").read_text())
    with pytest.raises(ValueError, match="config: unknown model_type 'gpt2'; families read: llama, mistral, mixtral"):
        hf_config.from_hf_config({**good, "model_type": "gpt2"})
    with pytest.raises(ValueError, match="config: missing field 'model_type'"):
        hf_config.from_hf_config({k: v for k, v in good.items() if k != "model_type"})
    with pytest.raises(ValueError, match="missing field 'num_local_experts' \\(needed for model_type 'mixtral'\\)"):
        hf_config.from_hf_config({k: v for k, v in good.items() if k != "num_local_experts"})
    with pytest.raises(ValueError, match="hidden_size must be an integer >= 1, got -4096"):
        hf_config.from_hf_config({**good, "hidden_size": -4096})
    with pytest.raises(ValueError, match="num_hidden_layers must be an integer >= 1, got 32.5"):
        hf_config.from_hf_config({**good, "num_hidden_layers": 32.5})
    with pytest.raises(ValueError, match="hidden_size must be at most 2\\*\\*24 \\(16,777,216\\), got 10{30}"):
        hf_config.from_hf_config({**good, "hidden_size": 10**30})
    with pytest.raises(ValueError, match="tie_word_embeddings must be true or false, got 'no'"):
        hf_config.from_hf_config({**good, "tie_word_embeddings": "no"})
    with pytest.raises(ValueError, match="n_kv_heads: must divide n_heads \\(32\\), got 5"):
        hf_config.from_hf_config({**good, "num_key_value_heads": 5})
    qwen = json.loads((CONFIGS / "qwen1.5-moe-a2.7b.json").read_text())
    with pytest.raises(ValueError, match="shared_expert_intermediate_size 1000 must be a whole number"):
        hf_config.from_hf_config({**qwen, "shared_expert_intermediate_size": 1000})
    with pytest.raises(ValueError, match="decoder_sparse_step > 1 or mlp_only_layers"):
        hf_config.from_hf_config({**qwen, "mlp_only_layers": [0]})
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="config.json: not valid JSON"):
        hf_config.from_hf_config(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match="must hold a JSON object, got list"):
        hf_config.from_hf_config(bad)
    # json.loads keeps a repeated key's last value without a word: 8192 wide where 4096 was meant, or not
    bad.write_text(json.dumps(good)[:-1] + ', "hidden_size": 8192}')
    with pytest.raises(ValueError, match="config.json: the key 'hidden_size' is given twice in one object"):
        hf_config.from_hf_config(bad)
    with pytest.raises(ValueError, match="no such file"):
        hf_config.from_hf_config(tmp_path / "missing.json")
    with pytest.raises(ValueError, match="is a folder"):
        hf_config.from_hf_config(tmp_path)
    with pytest.raises(ValueError, match="config: must be a dict or the path of a config.json, got 3"):
        hf_config.from_hf_config(3)
