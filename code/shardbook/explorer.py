"""The mesh explorer: the name chapters import for the planner
(`shardbook.planner`), and its command line:
`python -m shardbook.explorer MODEL ACCELERATOR N_DEVICES TOKENS [options]`.

Everything here is re-exported from the planner's modules: placement
(`place`, `check_mesh`, `Placement`), `evaluate` and `Candidate`, the search
(`explore`, `factorizations`, `bound_for_run`, `rank_of_run`), the table
and the command line (`format_table`, `main`), and ASSUMPTIONS.
"""

import sys

from .planner import (
    ASSUMPTIONS,
    AXES,
    DEFAULT_ORDER,
    MAX_MESHES,
    TUPLE_AXES,
    Candidate,
    Placement,
    RunRank,
    TooFewSequences,
    bound_for_run,
    check_mesh,
    evaluate,
    explore,
    factorizations,
    format_table,
    main,
    normalize_mesh,
    place,
    predicted_collectives,
    rank_of_run,
    run_options,
)

__all__ = [
    "ASSUMPTIONS",
    "AXES",
    "DEFAULT_ORDER",
    "MAX_MESHES",
    "TUPLE_AXES",
    "Candidate",
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

if __name__ == "__main__":
    sys.exit(main())
