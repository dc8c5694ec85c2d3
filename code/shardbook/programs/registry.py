"""Every HLO fixture, declared once: its mesh, argument specs and shapes,
dtype, the program that computes it (by name, in shardbook.programs.fixtures), the
cost model's rule for the collectives its partitioned HLO must contain
(by name, in shardbook.hlo.predict), and its single-device numpy reference.

Capture, prediction, the inventory checks, the multi-process run and the
artifacts appendix all read this registry. Adding a fixture is one
declaration here (and, when it needs a new program, its builder in
fixtures.py), then `make artifacts`. Standard library only: JAX is imported
when a program is built, numpy when a reference runs.

The registry is a declaration: the programs (fixtures.py) and the tools
(shardbook.hlo: capture, prediction, the multi-process run) read it, and it
imports neither, so the modules import one way (tests/test_layers.py).
"""

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Fixture:
    """One HLO fixture, declared once: its mesh, the partition spec and
    global shape of each argument, the dtype, what it shows, the builder's
    name in shardbook.programs.fixtures, the name of the cost model's
    prediction rule in shardbook.hlo.predict, and a numpy reference that
    computes what one device would."""

    name: str
    mesh_axes: dict  # axis name -> size, in mesh order
    specs: dict  # argument name -> PartitionSpec entries (tuple), and "out"
    shapes: dict  # argument name -> global shape
    dtype: str
    summary: str
    program: str  # the builder's name in shardbook.programs.fixtures: mesh -> function of the arguments
    predict: str  # the rule's name in shardbook.hlo.predict: predict.Layout -> predicted collectives
    reference: Callable = field(repr=False)  # float32 numpy arguments -> the single-device result
    manual: bool = False  # written with shard_map
    dcn_axes: dict = field(default_factory=dict)  # axis -> slices it spans (a hybrid mesh)

    @property
    def arg_names(self):
        return list(self.shapes)


# --- single-device references (float32 numpy) --------------------------------


def matmul(x, w):
    """The numpy reference of the matmul fixtures: x @ w."""
    return x @ w


def sgd_step(x, w):
    """One SGD step (learning rate 0.1) on the mean square of x @ w."""
    y = x @ w
    return w - 0.1 * (2.0 / y.size) * (x.T @ y)


def gelu_mlp(x, w_up, w_down):
    """The numpy reference of the Megatron MLP fixtures: GELU (tanh form) of
    x @ w_up, times w_down."""
    import numpy as np

    h = x @ w_up
    gelu = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h**3)))
    return gelu @ w_down


def expert_matmul(tokens, w):
    """The numpy reference of the MoE dispatch fixtures: each expert's tokens
    times that expert's weight, tokens[E, T, D] @ w[E, D, H]."""
    import numpy as np

    return np.einsum("etd,edh->eth", tokens, w)


def stage_ring(x, w):
    """Stage i applies tanh(x_i @ w_i) and its result lands on stage i + 1."""
    import numpy as np

    stages = w.shape[0]
    rows = x.shape[0] // stages
    out = np.empty_like(x)
    for i in range(stages):
        j = (i + 1) % stages
        out[j * rows : (j + 1) * rows] = np.tanh(x[i * rows : (i + 1) * rows] @ w[i])
    return out


def causal_attention(q, k, v):
    """Causal softmax attention, q, k, v [S, H, Q] (float64 inside)."""
    import numpy as np

    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(q.shape[-1])
    scores = np.where(np.tril(np.ones((q.shape[0], k.shape[0]), bool))[None], scores, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return np.einsum("hqk,khd->qhd", weights, v)


# --- the fixtures ---------------------------------------------------------------

FIXTURES = {}


def register(fixture):
    """Add a fixture to the registry (its name must be new); returns it."""
    if not isinstance(fixture, Fixture):
        raise ValueError(f"fixture: must be a registry.Fixture, got {fixture!r}")
    if fixture.name in FIXTURES:
        raise ValueError(f"fixture: {fixture.name!r} is already declared")
    if not (callable(fixture.predict) or (isinstance(fixture.predict, str) and fixture.predict)):
        raise ValueError(f"{fixture.name}.predict: must name a rule of shardbook.hlo.predict, got {fixture.predict!r}")
    missing = set(fixture.shapes) - set(fixture.specs)
    if missing or "out" not in fixture.specs:
        raise ValueError(f"{fixture.name}.specs: needs a spec for every argument and 'out'; missing {sorted(missing)}")
    FIXTURES[fixture.name] = fixture
    return fixture


def get(name):
    """The declaration of fixture `name`; ValueError naming the known ones."""
    try:
        return FIXTURES[name]
    except KeyError:
        raise ValueError(f"fixture: unknown fixture {name!r}; known: {', '.join(FIXTURES)}") from None


for _fixture in (
    Fixture(
        "dp_matmul",
        {"data": 8},
        {"x": ("data", None), "w": (None, None), "out": ("data", None)},
        {"x": (1024, 512), "w": (512, 512)},
        "float16",
        "Data parallel: rows of x split 8 ways, w replicated.",
        program="matmul",
        predict="no_collective",
        reference=matmul,
    ),
    Fixture(
        "fsdp_matmul",
        {"fsdp": 8},
        {"x": ("fsdp", None), "w": ("fsdp", None), "out": ("fsdp", None)},
        {"x": (1024, 512), "w": (512, 512)},
        "float16",
        "FSDP: x and w both row-sharded; w is gathered before the dot.",
        program="matmul",
        predict="gather_weight_rows",
        reference=matmul,
    ),
    Fixture(
        "tp_matmul",
        {"tp": 8},
        {"x": (None, "tp"), "w": ("tp", None), "out": (None, None)},
        {"x": (1024, 512), "w": (512, 512)},
        "float16",
        "Tensor parallel: the contracting dimension split; partial sums all-reduced.",
        program="tp_matmul",
        predict="all_reduce_partial_sums",
        reference=matmul,
        manual=True,
    ),
    Fixture(
        "fsdp_ep_linear",
        {"fsdp": 2, "ep": 4},
        {"x": (("fsdp", "ep"), None), "w": ("fsdp", None), "out": (("fsdp", "ep"), None)},
        {"x": (1024, 512), "w": (512, 512)},
        "float16",
        "The (fsdp 2, ep 4) mesh: x over both axes, w over fsdp only.",
        program="matmul",
        predict="gather_weight_rows",
        reference=matmul,
    ),
    Fixture(
        "fsdp_train_step",
        {"fsdp": 8},
        {"x": ("fsdp", None), "w": ("fsdp", None), "out": ("fsdp", None)},
        {"x": (1024, 512), "w": (512, 512)},
        "float32",
        "One SGD step of an FSDP-sharded weight, partitioned automatically.",
        program="fsdp_train_step",
        predict="fsdp_step_automatic",
        reference=sgd_step,
    ),
    Fixture(
        "fsdp_manual",
        {"fsdp": 8},
        {"x": ("fsdp", None), "w": ("fsdp", None), "out": ("fsdp", None)},
        {"x": (1024, 512), "w": (512, 512)},
        "float32",
        "The same step in shard_map: explicit all_gather and psum_scatter.",
        program="fsdp_manual",
        predict="fsdp_step_manual",
        reference=sgd_step,
        manual=True,
    ),
    Fixture(
        "megatron_mlp",
        {"tp": 8},
        {"x": (None, None), "w_up": (None, "tp"), "w_down": ("tp", None), "out": (None, None)},
        {"x": (1024, 512), "w_up": (512, 2048), "w_down": (2048, 512)},
        "float16",
        "Megatron MLP: W_up by columns, W_down by rows, one reduction.",
        program="megatron_mlp",
        predict="megatron_reduction",
        reference=gelu_mlp,
    ),
    Fixture(
        "megatron_mlp_sp",
        {"tp": 8},
        {"x": ("tp", None), "w_up": (None, "tp"), "w_down": ("tp", None), "out": ("tp", None)},
        {"x": (1024, 512), "w_up": (512, 2048), "w_down": (2048, 512)},
        "float16",
        "Sequence-parallel Megatron MLP: all-gather before, reduce-scatter after.",
        program="megatron_mlp_sp",
        predict="megatron_sequence_parallel",
        reference=gelu_mlp,
        manual=True,
    ),
    Fixture(
        "moe_dispatch",
        {"fsdp": 2, "expert": 4},
        {
            "tokens": (None, ("fsdp", "expert"), None),
            "w": ("expert", "fsdp", None),
            "out": ("expert", ("fsdp",), None),
        },
        {"tokens": (8, 1024, 512), "w": (8, 512, 1024)},
        "bfloat16",
        "Expert parallelism: routed tokens exchanged by all-to-all over the expert axis.",
        program="moe_dispatch",
        predict="expert_dispatch",
        reference=expert_matmul,
        manual=True,
    ),
    Fixture(
        "pipeline_stages",
        {"pp": 8},
        {"x": ("pp", None), "w": ("pp", None, None), "out": ("pp", None)},
        {"x": (1024, 512), "w": (8, 512, 512)},
        "float32",
        "Pipeline: each stage applies its layer and passes activations to the next.",
        program="pipeline_stages",
        predict="stage_to_next_stage",
        reference=stage_ring,
        manual=True,
    ),
    Fixture(
        "collective_matmul",
        {"tp": 8},
        {"x": ("tp", None), "w": (None, "tp"), "out": (None, "tp")},
        {"x": (1024, 512), "w": (512, 1024)},
        "float32",
        "Collective matmul: the all-gather of x's rows decomposed into 7 ring hops, each beside a partial dot.",
        program="collective_matmul",
        predict="collective_matmul_steps",
        reference=matmul,
        manual=True,
    ),
    Fixture(
        "hsdp_train_step",
        {"replica": 2, "fsdp": 4},
        {"x": (("replica", "fsdp"), None), "w": ("fsdp", None), "out": ("fsdp", None)},
        {"x": (1024, 512), "w": (512, 512)},
        "float32",
        "Hybrid sharded data parallelism: FSDP inside each of 2 slices, data parallel across them.",
        program="fsdp_train_step",
        predict="hybrid_fsdp_step",
        reference=sgd_step,
        dcn_axes={"replica": 2},
    ),
    *(
        Fixture(
            f"context_{way}",
            {"cp": 8},
            {"q": ("cp", None, None), "k": ("cp", None, None), "v": ("cp", None, None), "out": ("cp", None, None)},
            {"q": (1024, 8, 64), "k": (1024, 8, 64), "v": (1024, 8, 64)},
            "float32",
            summary,
            program=f"context_{way}",
            predict=rule,
            reference=causal_attention,
            manual=True,
        )
        for way, summary, rule in (
            (
                "ring",
                "Ring attention: K and V chunks passed round the cp ring, merged by online softmax.",
                "context_ring",
            ),
            (
                "all_gather_kv",
                "Context parallelism by one all-gather of K and of V (as Llama 3 trains).",
                "context_all_gather_kv",
            ),
            (
                "ulysses",
                "Head scattering (Ulysses): all-to-all to whole sequences of H/8 heads and back.",
                "context_ulysses",
            ),
        )
    ),
    *(
        Fixture(
            name,
            {"fsdp": 2, "expert": 4},
            {"tokens": (None, ("fsdp", "expert"), None), "w": ("expert", "fsdp", None), "out": out},
            {"tokens": (8, 1024, 512), "w": (8, 512, 1024)},
            "bfloat16",
            summary,
            program=name,
            predict=rule,
            reference=expert_matmul,
        )
        for name, out, summary, rule in (
            (
                "moe_dispatch_auto",
                ("expert", "fsdp", None),
                "MoE dispatch left to the partitioner, tokens constrained to keep expert on E "
                "(MaxText's moe_dispatch_no_expert_sharding).",
                "dispatch_tokens_to_experts",
            ),
            (
                "moe_dispatch_expert_on_batch",
                (None, ("fsdp", "expert"), None),
                "The same einsum with expert left on the tokens' rows: the weights travel instead.",
                "dispatch_weights_to_tokens",
            ),
        )
    ),
):
    register(_fixture)
