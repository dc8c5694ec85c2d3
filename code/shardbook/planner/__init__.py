"""The mesh planner: place a mesh on the machine, count its memory, time
its step as a bound and as a calibrated expectation, rank the meshes.

Its modules are the steps a candidate goes through: `placement` (which
links each axis's groups use), `memory_plan` (what a device keeps, from
shardbook.memory and shardbook.pipeline), `timing` (math, collectives
through the fabric model, bubbles), `calibrate` (the sourced or fitted
efficiencies the expectation applies), `candidate` (`evaluate`: the steps
for one mesh), `search` (enumerate and rank) and `cli` (the command line,
`python -m shardbook.explorer`). Standard library only;
`shardbook.explorer` re-exports the names chapters use.

Assumptions (stated on every result):

- two step times: the bound (`step_s`, `mfu`) takes peak FLOP/s,
  collectives at line rate with no latency, all-reduce inside an NVSwitch
  domain with NVLink SHARP as in-switch reduction (H100, H200, B200,
  GB200/GB300 NVL72), and every overlappable collective hidden; no
  measured run may beat it. The expectation (`expected_step_s`,
  `expected_mfu`) divides the math by a sustained efficiency per
  accelerator, prices collectives at achieved bandwidths with a latency
  per ring step (per message for all-to-all), and leaves a calibrated
  fraction of each hidden collective exposed (planner.calibrate: each
  figure sourced or fitted, none per run); the search ranks by it;
- math: model FLOPs 6·N_active + 6·L·H·Q·s per token (the causal half of
  the attention scores, as MaxText counts them), plus what recomputation
  repeats; a flash kernel's backward recomputes the scores; MFU = model
  FLOPs at peak / step time;
- axes are placed innermost first (default tp, ep, cp, fsdp, dp, pp): a
  group sits inside one scale-up domain while the product of the inner axes
  and its degree fits in one, otherwise it spans domains and its members
  share their NICs (or DCN); a TPU job is cut into slices no larger than
  the largest one granted (v5p: 6,144 chips), each axis takes torus
  dimensions of the slice (two links per wrapped dimension, one without),
  and what does not fit spans slices over DCN;
- FSDP gathers weights forward and backward and reduce-scatters gradients
  for every microbatch (with keep_gathered_weights: one gather per step and
  one reduce-scatter of an unsharded gradient buffer); dense weights are
  sharded over ep as MaxText does (dense_over_ep); gradients of weights
  replicated over dp, cp (and ep, when not sharded over it) are all-reduced
  once per step (ZeRO-1: reduce-scatter + all-gather; ZeRO-2: a
  reduce-scatter per microbatch); context parallelism gathers K and V and
  reduce-scatters their gradients per layer; these, and the pipeline's
  stage-to-stage sends, hide behind the math. TP (4 all-reduce equivalents
  of the block's activations per layer, 6 with full recomputation) and EP
  (dispatch and combine, forward and backward; optionally node-limited and
  FP8 dispatch) sit on the critical path unless ideal_overlap (collective
  matmul) hides them; DualPipe hides EP. PP adds its schedule's bubble
  (1F1B and GPipe (p-1)/m, interleaved (p-1)/(v·m), zero bubble and
  DualPipe their own), with an uneven pipeline the deepest stage setting
  the expected pace;
- memory per device: the state recipe's bytes per parameter (default
  bf16_master, 16: BF16 weights and gradients, FP32 master and Adam
  moments; megatron 18; pure_bf16) over fsdp (ZeRO-3), tp, pp, ep (experts,
  and dense weights with dense_over_ep) and ZeRO-`zero` over the
  data-parallel ranks; DualPipe keeps two copies of the weights; activations
  of the deepest stage for the microbatches its schedule keeps in flight
  (flash attention keeps no s² probabilities; sequence parallelism with
  tp > 1), the logits of one microbatch on the last stage, FSDP's gather
  buffers (two layers, or the whole stage when kept); headroom is what is
  left of HBM, with no allocator reserve.
"""

from .. import _validate
from .calibrate import Figure
from .candidate import Candidate, TooFewSequences, evaluate
from .cli import format_table, main
from .placement import AXES, DEFAULT_ORDER, TUPLE_AXES, Placement, check_mesh, normalize_mesh, place
from .search import (
    MAX_MESHES,
    RunRank,
    bound_for_run,
    explore,
    factorizations,
    predicted_collectives,
    rank_of_run,
    run_options,
)

ASSUMPTIONS = __doc__.split("Assumptions (stated on every result):")[1].strip()

__all__ = [
    "ASSUMPTIONS",
    "AXES",
    "DEFAULT_ORDER",
    "MAX_MESHES",
    "TUPLE_AXES",
    "Candidate",
    "Figure",
    "Placement",
    "RunRank",
    "TooFewSequences",
    "bound_for_run",
    "check_mesh",
    "evaluate",
    "explore",
    "factorizations",
    "format_table",
    "main",
    "normalize_mesh",
    "place",
    "predicted_collectives",
    "rank_of_run",
    "run_options",
]

_validate.guard_module(globals())
