"""The mesh explorer: the name chapters import for the planner
(`shardbook.planner`), and its command line:
`python -m shardbook.explorer MODEL ACCELERATOR N_DEVICES TOKENS [options]`.

Everything here is re-exported from the planner's modules: placement
(`place`, `check_mesh`, `Placement`), `evaluate` and `Candidate`, the search
(`explore`, `factorizations`, `bound_for_run`, `rank_of_run`), the table
and the command line (`format_table`, `main`), and ASSUMPTIONS.
"""

from . import _cli
from . import planner as _planner

# the planner's names, less the calibration record type (shardbook.planner.Figure),
# which chapters do not use: one list, kept in shardbook.planner.__all__
__all__ = [name for name in _planner.__all__ if name != "Figure"]
globals().update({name: getattr(_planner, name) for name in __all__})

if __name__ == "__main__":
    _cli.exit_with(_planner.main)
