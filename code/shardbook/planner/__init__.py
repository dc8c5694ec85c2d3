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

Assumptions (stated on every result): `ASSUMPTIONS`, from
`planner.assumptions`.
"""

from .. import _validate
from .assumptions import ASSUMPTIONS
from .calibrate import Figure
from .candidate import Candidate, TooFewSequences, evaluate
from .cli import format_table, main
from .placement import AXES, DEFAULT_ORDER, TUPLE_AXES, Placement, check_mesh, normalize_mesh, place
from .search import (
    MAX_MESHES,
    MICRO_BATCH_CHOICES,
    RunRank,
    best_for_mesh,
    bound_for_run,
    candidates_by_micro_batch,
    explore,
    factorizations,
    predicted_collectives,
    rank_of_run,
    run_options,
)

__all__ = [
    "ASSUMPTIONS",
    "AXES",
    "DEFAULT_ORDER",
    "MAX_MESHES",
    "MICRO_BATCH_CHOICES",
    "TUPLE_AXES",
    "Candidate",
    "Figure",
    "Placement",
    "RunRank",
    "TooFewSequences",
    "best_for_mesh",
    "bound_for_run",
    "candidates_by_micro_batch",
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
