"""Where the book covers each part of its source documents.

One entry per item the sources teach: the source (a references.bib key),
the source's own section, what the item is, and the MyST target, in a
chapter, of the section that covers it. The coverage appendix is generated
from this list, and the tests check that every target exists in its chapter
and in the built page. Standard library only.
"""

import re
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Item:
    source: str  # references.bib key
    section: str  # the source's own section
    what: str
    chapter: str  # chapter file stem
    target: str  # MyST target: `(target)=` on the line before the covering heading


SOURCES = {
    "scale-your-model-amd": "AMD companion, sharding and parallelism",
    "choosing-a-mesh": "Choosing a mesh (TPU v5p and Ironwood)",
    "parallelize-transformer": "How to parallelize a transformer (interactive)",
    "distributed-training-notes": "Distributed training and parallelism notes",
}

_AMD, _MESH, _PT, _NOTES = SOURCES

COVERAGE = (
    # AMD companion, introduction and sharding chapter
    Item(
        _AMD,
        "Intro: MI355X architecture and system topology",
        "one MI355X node: its links, NICs and memory",
        "01_topology",
        "sec-topo-mi355x",
    ),
    Item(
        _AMD,
        "Global arrays and device-local shards",
        "the global-versus-local layout, drawn",
        "02_sharding",
        "sec-shard-global-local",
    ),
    Item(
        _AMD,
        "Shardy propagation, resharding, and partitioning",
        "the four steps from layout to per-device program",
        "02_sharding",
        "sec-shard-compiler",
    ),
    Item(
        _AMD,
        "The cost of the inserted collectives",
        "the ring all-gather drawn step by step, and the four ring times",
        "02_sharding",
        "sec-shard-collectives",
    ),
    Item(
        _AMD,
        "Real HLO before and after partitioning",
        "the mixed Shardy/XLA pipeline and the pass at which the dumps are taken",
        "02_sharding",
        "sec-shard-real-hlo",
    ),
    Item(
        _AMD,
        "Constraints and compilation boundaries",
        "jax.jit in/out shardings and with_sharding_constraint on a fixture",
        "05_expert_parallel",
        "sec-ep-constraint",
    ),
    Item(
        _AMD, "MaxText from flags to shardings", "the rule trace and its YAML", "05_expert_parallel", "sec-ep-maxtext"
    ),
    Item(
        _AMD,
        "Orthogonal axes and physical placement",
        "the expert and fsdp groups in the compiled dispatch",
        "05_expert_parallel",
        "sec-ep-real-hlo",
    ),
    Item(
        _AMD,
        "ICI and DCN on ROCm",
        "ICI and DCN are names for inside and across slices",
        "09_many_nodes",
        "sec-nodes-maxtext",
    ),
    Item(_AMD, "Parallelism strategies", "the strategy summary table", "07_choosing_a_mesh", "sec-mesh-strategies"),
    Item(_AMD, "FSDP and ZeRO", "the persistent state, replicated and sharded", "03_data_parallel", "sec-dp-zero"),
    Item(
        _AMD,
        "Case study: Mixtral 8x22B",
        "memory and traffic of four one-node meshes",
        "05_expert_parallel",
        "sec-ep-mixtral",
    ),
    Item(
        _AMD,
        "Successful measurements",
        "the measured runs, and one update spanning two microsteps",
        "05_expert_parallel",
        "sec-ep-measured",
    ),
    Item(_AMD, "DeepSeek-V3 high-EP mesh", "a mesh built around experts", "05_expert_parallel", "sec-ep-deepseek"),
    Item(
        _AMD,
        "A repeatable selection procedure",
        "the rocprofv3 method: active, overlapped and exposed collective time",
        "03_data_parallel",
        "sec-dp-overlap",
    ),
    Item(
        _AMD,
        "A repeatable selection procedure",
        "analysis narrows, measurement picks",
        "07_choosing_a_mesh",
        "sec-mesh-procedure",
    ),
    Item(
        _AMD,
        "Extending the mesh across nodes",
        "hierarchical collectives on two tiers",
        "07_choosing_a_mesh",
        "sec-mesh-across-nodes",
    ),
    # multi-node meshes
    Item(
        _AMD,
        "Extending the mesh across nodes",
        "hybrid sharded data parallelism, compiled on two simulated slices",
        "09_many_nodes",
        "sec-nodes-hsdp",
    ),
    Item(
        _AMD,
        "Extending the mesh across nodes",
        "create_hybrid_device_mesh and rail alignment",
        "09_many_nodes",
        "sec-nodes-mesh",
    ),
    Item(_MESH, "Across pods: DCN", "assigning mesh axes to torus dimensions", "09_many_nodes", "sec-nodes-torus"),
    Item(_MESH, "Across pods: DCN", "a checklist for multi-slice runs", "09_many_nodes", "sec-nodes-checklist"),
    # Choosing a mesh
    Item(
        _MESH,
        "Case study: LLaMA-3-70B on a v5p pod",
        "FSDP over the batch capped at 1,024 sequences; the 1,024 × 2 × 4 recipe; about 1.3 GB per chip",
        "07_choosing_a_mesh",
        "sec-mesh-v5p",
    ),
    Item(
        _MESH,
        "The same job on an Ironwood pod",
        "Ironwood's α, and TPU 8t bringing it back to about 2,490",
        "07_choosing_a_mesh",
        "sec-mesh-ironwood",
    ),
    Item(_MESH, "Pipelining", "pipelining as a stage axis in GSPMD and MaxText", "06_pipeline", "sec-pp-boundary"),
    Item(
        _MESH,
        "Data parallelism and FSDP",
        "about 9B parameters as the limit of plain DP on a v5p chip",
        "03_data_parallel",
        "sec-dp-zero",
    ),
    Item(_MESH, "Across pods: DCN", "the batch each slice needs for DP over DCN", "07_choosing_a_mesh", "sec-mesh-dcn"),
    # How to parallelize a transformer
    Item(_PT, "First, feel the roofline", "the two clocks of one layer", "03_data_parallel", "sec-dp-two-clocks"),
    Item(
        _PT,
        "Hardware table",
        "sustained and achieved factors, spec and measured modes side by side",
        "01_topology",
        "sec-topo-achieved",
    ),
    Item(
        _PT,
        "Models table",
        "k·F, the routed width, and the activated width with shared experts, for the MoE presets",
        "05_expert_parallel",
        "sec-ep-roofline",
    ),
    Item(
        _PT,
        "GPUs",
        "SHARP and in-network reduction, and why it gains less in practice",
        "07_choosing_a_mesh",
        "sec-mesh-gpu",
    ),
    Item(_PT, "Pipelining", "why gradients cannot be reduced before the last microbatch", "06_pipeline", "sec-pp-tail"),
    Item(
        _PT,
        "Appendix: the backward pass",
        "each backward collective derived from the sharded-matmul rules",
        "93_worked_problems",
        "sec-worked-backward",
    ),
    Item(
        _PT,
        "Fully-sharded data parallelism",
        "the 18,823-chip, 17-day FSDP example",
        "07_choosing_a_mesh",
        "sec-mesh-v5p",
    ),
    # Distributed training notes
    Item(
        _NOTES,
        "Architecture changes the distributed system",
        "recurrent attention, state shared across layers, memory tables",
        "07_choosing_a_mesh",
        "sec-mesh-architecture",
    ),
    Item(
        _NOTES,
        "Reproduction and debugging",
        "an unsharded reference, tied parameters, resharding a checkpoint onto another mesh",
        "08_one_model",
        "sec-one-debugging",
    ),
    Item(
        _NOTES,
        "Sequence and context parallelism",
        "ring, all-gather and head-scattering context parallelism, with causal balance",
        "04_tensor_parallel",
        "sec-tp-context",
    ),
    Item(
        _NOTES,
        "Pipeline parallelism and idle time",
        "activation memory of each schedule",
        "06_pipeline",
        "sec-pp-memory",
    ),
)

_TARGET_RE = r"^\({target}\)=\n#+ (?P<heading>.+)$"


def heading(item, chapters_dir):
    """The heading the item's target labels in its chapter; ValueError naming
    the item when the target is missing or not followed by a heading."""
    path = Path(chapters_dir) / f"{item.chapter}.md"
    if not path.exists():
        raise ValueError(f"coverage: {item.target!r} names chapter {item.chapter!r}, which does not exist")
    found = re.findall(_TARGET_RE.format(target=re.escape(item.target)), path.read_text(), flags=re.M)
    if len(found) != 1:
        raise ValueError(
            f"coverage: target ({item.target})= must stand once, on the line before a heading, in {path.name}; "
            f"found it {len(found)} times"
        )
    return found[0].strip()


def markdown_table(chapters_dir):
    """The coverage appendix's table in MyST (myst-nb parses a cell's
    Markdown output as MyST), with a {ref} to each covering section: the
    nitpicky build fails on a target that does not exist."""
    lines = ["| Source | Its section | What | Where in this book |", "|---|---|---|---|"]
    previous = None
    for item in COVERAGE:
        heading(item, chapters_dir)  # a missing target is named here, before the build's own check
        link = f"{{ref}}`{item.target}`"  # the section's own title, in the chapter's numbering
        source = f"**{SOURCES[item.source]}**" if item.source != previous else ""
        previous = item.source
        lines.append(f"| {source} | {item.section} | {item.what} | {link} |")
    return "\n".join(lines)
