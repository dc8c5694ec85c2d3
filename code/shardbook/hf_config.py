"""A Hugging Face `config.json` read into a `models.Model`.

The families read, by `model_type`, with the fields each needs (names as the
Transformers configuration classes spell them):

- llama, mistral, qwen2, qwen3, gemma, gemma2: hidden_size, intermediate_size,
  num_hidden_layers, num_attention_heads, vocab_size; num_key_value_heads
  (absent: the heads, as Transformers defaults it), head_dim (absent or null:
  hidden_size / heads), tie_word_embeddings (absent: the family's default).
  Qwen2 and Qwen2-MoE have biases on Q, K and V (`qkv_bias`).
- mixtral: also num_local_experts and num_experts_per_tok
  (intermediate_size is one expert's width).
- qwen2_moe, qwen3_moe: num_experts, num_experts_per_tok,
  moe_intermediate_size; qwen2_moe's shared expert
  (shared_expert_intermediate_size, a whole number of routed experts wide);
  every layer sparse (decoder_sparse_step 1, no mlp_only_layers).
- deepseek_v2, deepseek_v3: MLA (q_lora_rank, null for none; kv_lora_rank,
  qk_nope_head_dim, qk_rope_head_dim, v_head_dim), n_routed_experts,
  num_experts_per_tok, n_shared_experts, moe_intermediate_size,
  first_k_dense_replace dense layers of intermediate_size, moe_layer_freq 1;
  DeepSeek-V3's aux-loss-free router (topk_method "noaux_tc") has a bias per
  expert. The multi-token-prediction module (num_nextn_predict_layers) is not
  counted, as the report's 671B does not count it.

Not counted: per-head Q/K norms (Qwen3), Gemma 2's extra norms, a shared
expert's gate (Qwen2-MoE): each a few thousand parameters per layer.
Ref: hf-transformers, and each family's model card.
"""

from pathlib import Path

from . import _validate, models

FAMILIES = (
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen2_moe",
    "qwen3",
    "qwen3_moe",
    "gemma",
    "gemma2",
    "deepseek_v2",
    "deepseek_v3",
)
# tie_word_embeddings when a config leaves it out: each Transformers
# configuration class's default
_TIED_DEFAULT = {"gemma": True, "gemma2": True}


def _load(config):
    if isinstance(config, dict):
        return config, "config"
    if isinstance(config, (str, Path)):
        path = Path(config)
        text = _validate.read_text("config", path, "is a folder; give the path of its config.json")
        return _validate.json_object(f"config: {path}", text), str(path)
    raise ValueError(f"config: must be a dict or the path of a config.json, got {config!r}")


# No width, depth, head count or vocabulary of a transformer comes near this (the largest
# vocabularies hold about 2**18 tokens); a config beyond it is a typo, not a model to price
MAX_CONFIG_INT = 2**24


class _Fields:
    def __init__(self, data, where):
        self.data, self.where = data, where

    def _check_int(self, key, value, minimum):
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ValueError(f"{self.where}: {key} must be an integer >= {minimum}, got {value!r}")
        if value > MAX_CONFIG_INT:
            raise ValueError(f"{self.where}: {key} must be at most 2**24 ({MAX_CONFIG_INT:,}), got {value!r}")
        return value

    def int(self, key, minimum=1):
        if key not in self.data or self.data[key] is None:
            raise ValueError(f"{self.where}: missing field {key!r} (needed for model_type {self.data['model_type']!r})")
        return self._check_int(key, self.data[key], minimum)

    def int_or(self, key, default, minimum=1):
        value = self.data.get(key)
        return default if value is None else self._check_int(key, value, minimum)

    def bool_or(self, key, default):
        value = self.data.get(key, default)
        if not isinstance(value, bool):
            raise ValueError(f"{self.where}: {key} must be true or false, got {value!r}")
        return value


def from_hf_config(config, name=None, source="hf-transformers"):
    """A `models.Model` from a Hugging Face config (a dict, or the path of a
    config.json). `name` defaults to the config's _name_or_path, else
    "<model_type> config". An unknown model_type, a missing field or a
    value of the wrong kind is a ValueError naming it. Ref: hf-transformers."""
    data, where = _load(config)
    model_type = data.get("model_type")
    if model_type is None:
        raise ValueError(f"{where}: missing field 'model_type'; families read: {', '.join(FAMILIES)}")
    if model_type not in FAMILIES:
        raise ValueError(f"{where}: unknown model_type {model_type!r}; families read: {', '.join(FAMILIES)}")
    f = _Fields(data, where)
    d_model = f.int("hidden_size")
    n_layers = f.int("num_hidden_layers")
    n_heads = f.int("num_attention_heads")
    n_kv_heads = f.int_or("num_key_value_heads", n_heads)
    vocab = f.int("vocab_size")
    tied = f.bool_or("tie_word_embeddings", _TIED_DEFAULT.get(model_type, False))
    if name is None:
        given = data.get("_name_or_path")
        if given is not None and not isinstance(given, str):
            raise ValueError(f"{where}: _name_or_path must be a string (the model's name), got {given!r}")
        if given:
            _validate.display_name(f"{where}: _name_or_path", given)
        name = given or f"{model_type} config"
    fields = {"tied_embeddings": tied}
    if model_type.startswith("deepseek"):
        fields.update(_deepseek(f, model_type))
        head_dim = fields["mla"].v_head_dim
    else:
        head_dim = f.int_or("head_dim", None)
        if head_dim is None:
            if d_model % n_heads:
                raise ValueError(
                    f"{where}: no head_dim, and hidden_size {d_model} is not a multiple of {n_heads} heads"
                )
            head_dim = d_model // n_heads
        if model_type in ("qwen2", "qwen2_moe"):
            fields["qkv_bias"] = True
        fields.update(_mlp(f, model_type))
    d_ff = fields.pop("d_ff")
    try:
        return models.Model(name, source, d_model, d_ff, n_layers, n_heads, n_kv_heads, head_dim, vocab, **fields)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def _mlp(f, model_type):
    if model_type == "mixtral":
        return {
            "d_ff": f.int("intermediate_size"),
            "n_experts": f.int("num_local_experts"),
            "top_k": f.int("num_experts_per_tok"),
        }
    if model_type in ("qwen2_moe", "qwen3_moe"):
        if f.int_or("decoder_sparse_step", 1) != 1 or f.data.get("mlp_only_layers"):
            raise ValueError(
                f"{f.where}: decoder_sparse_step > 1 or mlp_only_layers (dense layers between MoE layers) "
                "are not supported; only leading dense layers are"
            )
        width = f.int("moe_intermediate_size")
        out = {"d_ff": width, "n_experts": f.int("num_experts"), "top_k": f.int("num_experts_per_tok")}
        shared = f.int_or("shared_expert_intermediate_size", 0, minimum=0) if model_type == "qwen2_moe" else 0
        if shared % width:
            raise ValueError(
                f"{f.where}: shared_expert_intermediate_size {shared} must be a whole number of "
                f"moe_intermediate_size {width}"
            )
        out["n_shared_experts"] = shared // width
        return out
    return {"d_ff": f.int("intermediate_size")}


# DeepSeek's router choices, as its modeling code names them (V2: greedy, group_limited_greedy;
# V3: noaux_tc, the aux-loss-free router with a bias per expert)
TOPK_METHODS = ("greedy", "group_limited_greedy", "noaux_tc")


def _deepseek(f, model_type):
    if f.int_or("moe_layer_freq", 1) != 1:
        raise ValueError(f"{f.where}: moe_layer_freq other than 1 is not supported")
    mla = models.MLA(
        f.int_or("q_lora_rank", 0, minimum=0),
        f.int("kv_lora_rank"),
        f.int("qk_nope_head_dim"),
        f.int("qk_rope_head_dim"),
        f.int("v_head_dim"),
    )
    n_dense = f.int_or("first_k_dense_replace", 0, minimum=0)
    n_layers = f.int("num_hidden_layers")
    if n_dense >= n_layers:
        raise ValueError(
            f"{f.where}: first_k_dense_replace {n_dense} leaves none of the {n_layers} layers an MoE layer; "
            "it must be below num_hidden_layers (a dense model is read as llama)"
        )
    topk_method = f.data.get("topk_method")
    if topk_method is not None and topk_method not in TOPK_METHODS:
        raise ValueError(f"{f.where}: topk_method: unknown value {topk_method!r}; valid: {', '.join(TOPK_METHODS)}")
    return {
        "d_ff": f.int("moe_intermediate_size"),
        "n_experts": f.int("n_routed_experts"),
        "top_k": f.int("num_experts_per_tok"),
        "n_shared_experts": f.int_or("n_shared_experts", 0, minimum=0),
        "n_dense_layers": n_dense,
        "d_ff_dense": f.int("intermediate_size") if n_dense else 0,
        "mla": mla,
        "router_bias": topk_method == "noaux_tc",
    }
