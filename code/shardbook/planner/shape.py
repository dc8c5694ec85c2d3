"""The Layout type every step of the planner reads (the shape of one
training step on one mesh, which `layout.layout` builds), kept apart from
the step that builds it so that memory_plan and timing can check what they
are given without importing the module that imports them."""

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    """One step's shape. Counts: `n_micro` microbatches per data-parallel
    rank (fractional when the batch does not divide), `deepest` layers on
    the deepest stage, `chunk_layers[stage][chunk]` the layers of every
    stage's chunks (pipeline.uneven_chunk_layers with uneven_pipeline).
    Parameters per device (not bytes), dense ones sharded over tp and
    `dense_shard` (fsdp, and ep when dense_over_ep), routed experts over
    tp·fsdp·ep: `dense_layer_local` and `expert_layer_local` for one
    transformer layer (the model's mean layer); `embedding_local` the
    input embedding (on the first stage) and `head_local` the output layer
    (on the last: the final norm, and the output projection, or with tied
    embeddings and pp > 1 the last stage's copy of the table), both
    vocabulary-parallel over tp; `dense_local` and `expert_local` the
    deepest stage's share of every parameter by layer count (the pace of
    a stage, which the timing reads; memory_plan places the embedding and
    the output layer). `dense_replicas` and `expert_replicas`: the
    data-parallel ranks that reduce their gradients."""

    model: object
    accelerator: object
    mesh: dict
    placement: dict
    global_tokens: float
    seq_len: int
    micro_batch_seqs: int
    schedule: str
    n_virtual: int
    sequence_parallel: bool
    attention: str
    state_recipe: str
    zero: int
    uneven_pipeline: bool
    keep_gathered_weights: bool
    ideal_overlap: bool
    dense_over_ep: bool
    routing_node_limit: int | None
    fp8_dispatch: bool
    precision: str
    tp_comm_overlap: bool
    grad_reduce_overlap: bool
    capacity_factor: float
    loss_logits: str
    n_micro: float
    deepest: int
    chunk_layers: tuple
    dense_layer_local: float
    expert_layer_local: float
    embedding_local: float
    head_local: float
    dense_local: float
    expert_local: float
    dense_shard: int
    dense_replicas: int
    expert_replicas: int
    reserve_bytes: float = 0.0
    stack: str = "any"  # the software stack family: the attention kernel it calls (calibrate.attention_kernel)

    @property
    def n_devices(self):
        """Devices in the mesh."""
        return math.prod(self.mesh.values())


def check_layout(lay):
    """TypeError unless `lay` is a Layout (what `layout` returns)."""
    if not isinstance(lay, Layout):
        raise TypeError(f"lay: must be a planner Layout, got {type(lay).__name__}")
