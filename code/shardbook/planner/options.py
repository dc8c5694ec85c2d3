"""The options a plan is priced under, as one frozen object: built once
where the planner is entered (`evaluate` and `layout` from their keywords,
the search from its option sets) and carried from there to the step's
Layout, so that every option has one name and one default, and its flags
are checked in one place.

A field left None where the search chooses it (`micro_batch_seqs`,
`schedule`, `n_virtual`, `uneven_pipeline`, `keep_gathered_weights`) is
searched by `explore`; `evaluate` prices concrete values, its defaults
here.
"""

import dataclasses

from .. import _validate
from . import memory_plan
from .placement import DEFAULT_ORDER

# the options that are True or False (PlanOptions.check_flags)
FLAGS = (
    "sequence_parallel",
    "uneven_pipeline",
    "keep_gathered_weights",
    "ideal_overlap",
    "grad_reduce_overlap",
    "dense_over_ep",
    "fp8_dispatch",
    "tp_comm_overlap",
)


@dataclasses.dataclass(frozen=True)
class PlanOptions:
    """Every keyword `evaluate` takes besides `n_devices`, with its default
    there (see `evaluate` for what each does); units in the names where a
    value carries one: `seq_len` tokens, `micro_batch_seqs` sequences,
    `reserve_bytes` bytes."""

    seq_len: int = 4096
    micro_batch_seqs: int | None = 1
    recompute: str | None = None
    order: tuple = DEFAULT_ORDER
    schedule: str | None = "1f1b"
    n_virtual: int | None = 1
    sequence_parallel: bool = True
    attention: str = "flash"
    state_recipe: str = memory_plan.DEFAULT_STATE_RECIPE
    zero: int = 0
    uneven_pipeline: bool | None = False
    keep_gathered_weights: bool | None = False
    ideal_overlap: bool = False
    grad_reduce_overlap: bool = True
    dense_over_ep: bool = True
    routing_node_limit: int | None = None
    fp8_dispatch: bool = False
    precision: str = "bf16"
    tp_comm_overlap: bool = False
    capacity_factor: float = 1.0
    loss_logits: str | None = None
    slices: int | None = None
    stack: str = "any"
    reserve_bytes: float | None = None

    @classmethod
    def of(cls, options=None, /, **changes):
        """A PlanOptions from a dict of evaluate's keywords (or another
        PlanOptions) with `changes`; an unknown name is a TypeError naming
        it, as an unknown keyword of evaluate is."""
        if isinstance(options, PlanOptions):
            return dataclasses.replace(options, **changes)
        merged = {**(options or {}), **changes}
        unknown = sorted(set(merged) - NAMES)
        if unknown:
            raise TypeError(f"options: unknown option {unknown[0]!r}; the options are evaluate's keywords")
        return cls(**merged)

    def replace(self, **changes):
        """A copy with `changes` (dataclasses.replace)."""
        return dataclasses.replace(self, **changes)

    def as_dict(self):
        """The options as evaluate's keywords."""
        return {name: getattr(self, name) for name in NAMES_IN_ORDER}

    def check_flags(self):
        """ValueError naming the first option of FLAGS that is not True or False."""
        for name in FLAGS:
            _validate.boolean(name, getattr(self, name))


NAMES_IN_ORDER = tuple(f.name for f in dataclasses.fields(PlanOptions))
NAMES = frozenset(NAMES_IN_ORDER)

_validate.guard_module(globals())
