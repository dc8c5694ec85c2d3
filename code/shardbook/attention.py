"""Online softmax for blockwise and ring attention, and causal load balance
for context parallelism. Standard library only, one query row at a time.

A block's contribution to one query row is the state (m, l, u): m the
largest score seen, l = Σ exp(s_j − m) and u = Σ exp(s_j − m) · v_j. Two
states merge by rescaling both to the larger maximum, so the result is one
softmax over every key, in any order of blocks.
Ref: dao2022flashattention (Appendix B.3), liu2023ring (Section 3),
distributed-training-notes.
"""

import itertools
import math
from dataclasses import dataclass

from . import _validate


@dataclass(frozen=True)
class State:
    """Running softmax state of one query row; `u` is the value vector."""

    m: float
    l: float  # noqa: E741 (the normalizer's name in the online-softmax papers and chapter 4)
    u: tuple

    @property
    def empty(self):
        return self.l == 0


def empty_state(value_dim):
    """The state before any valid key: l = 0 and u = 0. Both are sums over
    no keys, zero whatever the reference maximum m, so m is set to 0 and the
    state stays finite (the papers start from m = −inf; :func:`merge` tells
    an empty state by l = 0 and never reads its m)."""
    _validate.count("value_dim", value_dim)
    if value_dim > MAX_LISTED:
        raise ValueError(
            f"value_dim: a state holds one number per value dimension, at most {MAX_LISTED:,}; got {value_dim:,}"
        )
    return State(0.0, 0.0, (0.0,) * value_dim)


def block_state(scores, values):
    """The state of one block of keys: `scores` are scaled scores q·k/√d
    (−inf for masked keys), `values` one vector per key."""
    if not isinstance(scores, (list, tuple)) or not isinstance(values, (list, tuple)):
        raise ValueError(f"scores, values: must be sequences, got {scores!r} and {values!r}")
    if len(scores) != len(values):
        raise ValueError(f"values: need one vector per score ({len(scores)}), got {len(values)}")
    if not values:
        raise ValueError("scores: a block needs at least one key")
    if not all(isinstance(v, (list, tuple)) and v for v in values) or len({len(v) for v in values}) != 1:
        raise ValueError("values: every key needs a value vector of the same, non-zero width")
    for s in scores:
        _validate.number("scores", s)
    dim = len(values[0])
    valid = [(s, v) for s, v in zip(scores, values, strict=True) if s != -math.inf]
    if not valid:  # a fully masked block contributes nothing
        return empty_state(dim)
    m = max(s for s, _ in valid)
    weights = [math.exp(s - m) for s, _ in valid]
    u = tuple(sum(w * v[i] for w, (_, v) in zip(weights, valid, strict=True)) for i in range(dim))
    return State(m, sum(weights), u)


def merge(a, b):
    """Combine two states. An empty state is skipped (the guarded first
    block), so exp(−inf − (−inf)) is never evaluated."""
    if not isinstance(a, State) or not isinstance(b, State):
        raise TypeError(f"a, b: must be attention.State values, got {type(a).__name__} and {type(b).__name__}")
    if len(a.u) != len(b.u):
        raise ValueError(f"b: value width {len(b.u)} differs from a's {len(a.u)}")
    if b.empty:
        return a
    if a.empty:
        return b
    m = max(a.m, b.m)
    sa, sb = math.exp(a.m - m), math.exp(b.m - m)
    return State(m, a.l * sa + b.l * sb, tuple(x * sa + y * sb for x, y in zip(a.u, b.u, strict=True)))


def output(state, empty="zeros"):
    """u / l. A row with no valid key has no softmax: `empty` chooses the
    policy explicitly, 'zeros' (a zero vector) or 'error' (ValueError)."""
    _validate.choice("empty", empty, ("zeros", "error"))
    if not isinstance(state, State):
        raise TypeError(f"state: must be an attention.State, got {type(state).__name__}")
    if state.empty:
        if empty == "error":
            raise ValueError("state: the row has no valid key, so its softmax is undefined")
        return tuple(0.0 for _ in state.u)
    return tuple(x / state.l for x in state.u)


def attend_blocks(blocks, empty="zeros"):
    """Output of one query row over key/value blocks [(scores, values), ...],
    merged in the order given."""
    if not isinstance(blocks, (list, tuple)) or not blocks:
        raise ValueError("blocks: need a list of at least one (scores, values) block")
    for i, block in enumerate(blocks):
        if not isinstance(block, (list, tuple)) or len(block) != 2:
            raise ValueError(f"blocks[{i}]: must be a (scores, values) pair, got {block!r}")
        if not block[1]:
            raise ValueError(f"blocks[{i}]: a block needs at least one key")
    state = empty_state(len(blocks[0][1][0]))
    for scores, values in blocks:
        state = merge(state, block_state(scores, values))
    return output(state, empty)


# The most positions causal_owners lists (one Python int each, about 36 MB
# at the bound); causal_pairs_per_rank counts any length without listing.
MAX_LISTED = 2**20


def _runs(n_positions, n_ranks, scheme):
    """Each rank's runs of consecutive positions, as (first, last) pairs,
    after the arguments are checked."""
    _validate.count("n_positions", n_positions)
    _validate.count("n_ranks", n_ranks)
    _validate.choice("scheme", scheme, ("contiguous", "zigzag"))
    if scheme == "contiguous":
        if n_positions % n_ranks:
            raise ValueError(f"n_positions: {n_positions} is not divisible by n_ranks {n_ranks}")
        per = n_positions // n_ranks
        return [((r * per + 1, (r + 1) * per),) for r in range(n_ranks)]
    if n_positions % (2 * n_ranks):
        raise ValueError(f"n_positions: zigzag needs a multiple of 2·n_ranks ({2 * n_ranks}), got {n_positions}")
    chunk = n_positions // (2 * n_ranks)
    # tuples of numbers, which the garbage collector stops tracking: a million ranks' runs
    # as lists cost it three quarters of the time
    return [
        ((r * chunk + 1, (r + 1) * chunk), ((2 * n_ranks - 1 - r) * chunk + 1, (2 * n_ranks - r) * chunk))
        for r in range(n_ranks)
    ]


def causal_owners(n_positions, n_ranks, scheme):
    """Query positions 1..n owned by each rank: 'contiguous' gives each rank
    one run; 'zigzag' pairs chunk r with chunk 2·ranks−1−r. The positions are
    listed, so n_positions is at most MAX_LISTED (2**20)."""
    _validate.count("n_positions", n_positions)
    if n_positions > MAX_LISTED:
        raise ValueError(
            f"n_positions: causal_owners lists every position, at most {MAX_LISTED:,}; got {n_positions:,} "
            "(causal_pairs_per_rank counts any length)"
        )
    chain = itertools.chain.from_iterable
    return [list(chain(range(first, last + 1) for first, last in runs)) for runs in _runs(n_positions, n_ranks, scheme)]


def causal_pairs_per_rank(n_positions, n_ranks, scheme):
    """Valid (query, key) pairs per rank under a causal mask, counting each
    query's own key: query q sees q keys, so a run of queries a..b sees
    (a + b)(b − a + 1)/2 keys. One number per rank, so n_ranks is at most
    MAX_LISTED (2**20)."""
    _validate.count("n_ranks", n_ranks)
    if n_ranks > MAX_LISTED:
        raise ValueError(f"n_ranks: one count per rank is listed, at most {MAX_LISTED:,}; got {n_ranks:,}")
    return [sum((a + b) * (b - a + 1) // 2 for a, b in runs) for runs in _runs(n_positions, n_ranks, scheme)]


# finite inputs give a finite result or a ValueError (a block of huge values
# could overflow u): the guard that every cost-model module ends with
_validate.guard_module(globals())
