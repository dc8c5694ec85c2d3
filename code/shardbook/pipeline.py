"""Pipeline bubbles for p equal stages, m microbatches and v virtual stages
per device (interleaving). Ref: huang2019gpipe, narayanan2021megatron,
distributed-training-notes."""

from typing import NamedTuple

from . import _validate


def _args(n_stages, n_microbatches, n_virtual):
    _validate.count("n_stages", n_stages)
    _validate.count("n_microbatches", n_microbatches)
    _validate.count("n_virtual", n_virtual)


def _closed_form_args(n_stages, n_microbatches, n_virtual):
    _args(n_stages, n_microbatches, n_virtual)
    if n_virtual > 1 and n_microbatches < n_stages:
        # with fewer microbatches than stages a chunk's output comes back to
        # its device before the device has work for it: more idle time than
        # the formula says (see schedule('interleaved', ...) for the timeline)
        raise ValueError(
            f"n_microbatches: interleaving (n_virtual={n_virtual}) needs at least n_stages={n_stages} "
            f"microbatches for the closed form, got {n_microbatches}"
        )


def bubble_overhead(n_stages, n_microbatches, n_virtual=1):
    """Idle time relative to useful work: (p−1)/(v·m). With v > 1 it holds
    for m >= p (a ValueError otherwise)."""
    _closed_form_args(n_stages, n_microbatches, n_virtual)
    return (n_stages - 1) / (n_virtual * n_microbatches)


def bubble_fraction(n_stages, n_microbatches, n_virtual=1):
    """Idle share of elapsed time: (p−1)/(v·m + p−1); always in [0, 1).
    With v > 1 it holds for m >= p (a ValueError otherwise)."""
    _closed_form_args(n_stages, n_microbatches, n_virtual)
    return (n_stages - 1) / (n_virtual * n_microbatches + n_stages - 1)


def zb_h1_bubble_fraction(n_stages, n_microbatches):
    """Idle share of the ZB-H1 schedule with forward, activation-gradient and
    weight-gradient passes of equal time: its bubble is (p−1)·(T_F + T_B − T_W)
    = (p−1) units against 3m units of work, so (p−1)/(3m + p−1), a third of
    1F1B's idle time, at 1F1B's peak activation memory. Ref: qi2024zerobubble."""
    _args(n_stages, n_microbatches, 1)
    return (n_stages - 1) / (3 * n_microbatches + n_stages - 1)


def boundary_bytes_per_token(d_model, bytes_per_element=2):
    """Bytes one token's activation carries across a stage boundary (D
    elements; the same again for its gradient on the way back)."""
    _validate.count("d_model", d_model)
    _validate.positive("bytes_per_element", bytes_per_element)
    return d_model * bytes_per_element


# --- schedule timelines --------------------------------------------------------

SCHEDULES = ("gpipe", "1f1b", "interleaved", "zero_bubble")
# The simulator's time grows with the square of its ops (an interleaved
# device scans its queue for a ready op): a bound keeps every call, a live
# page's included, well under a second.
MAX_SCHEDULE_SLOTS = 4096


def _orders(kind, p, m, v):
    """Per-device list of ops (phase, chunk, microbatch) in issue order."""
    orders = []
    for s in range(p):
        if kind == "gpipe":
            ops = [("F", 0, i) for i in range(m)] + [("B", 0, i) for i in range(m)]
        elif kind in ("1f1b", "zero_bubble"):
            warm = min(p - s - 1, m)
            ops = [("F", 0, i) for i in range(warm)]
            for i in range(m - warm):
                ops += [("F", 0, warm + i), ("B", 0, i)]
            ops += [("B", 0, i) for i in range(m - warm, m)]
        else:  # interleaved: chunk c of device s is virtual stage c·p + s
            # issue order follows the ideal start time c·p + i (a diagonal),
            # so a last group of fewer than p microbatches adds no idle time
            pairs = [(c, i) for c in range(v) for i in range(m)]
            ops = [("F", c, i) for c, i in sorted(pairs, key=lambda ci: (ci[0] * p + ci[1], ci[0]))]
            ops += [("B", c, i) for c, i in sorted(pairs, key=lambda ci: ((v - 1 - ci[0]) * p + ci[1], -ci[0]))]
        orders.append(ops)
    return orders


class Op(NamedTuple):
    """One simulated op: `phase` F (forward), B (backward, or its activation
    gradient in zero_bubble) or W (weight gradient) of `microbatch` on
    virtual `chunk` of `device`, from `start` to `end` in stage-time units."""

    device: int
    start: float
    end: float
    phase: str
    chunk: int
    microbatch: int


def _schedule_size(kind, n_stages, n_microbatches, n_virtual):
    _validate.choice("kind", kind, SCHEDULES)
    _args(n_stages, n_microbatches, n_virtual)
    p, m = n_stages, n_microbatches
    v = n_virtual if kind == "interleaved" else 1
    if p * m * v > MAX_SCHEDULE_SLOTS:
        raise ValueError(
            f"n_stages × n_microbatches × n_virtual: the simulator handles at most {MAX_SCHEDULE_SLOTS:,} "
            f"(its time grows with the square of the ops), got {p} × {m} × {v} = {p * m * v:,}"
        )
    if kind != "interleaved" and n_virtual != 1:
        raise ValueError(f"n_virtual: only the interleaved schedule has virtual stages, got {n_virtual} for {kind!r}")
    return p, m, v


def _next_op(order, pending_w, window, s, p, now, durations, ready):
    """The op device `s` starts at `now`, removed from its queues, or None:
    the first ready op of the first `window` in issue order, else a deferred
    weight gradient that is ready."""
    for k in range(window):
        phase, c, i = order[k]
        j = c * p + s
        if ready(phase, j, i, now):
            order.pop(k)
            return phase, c, i, j, durations[phase]
    if pending_w:
        c, i, j = pending_w[0]
        if ready("W", j, i, now):
            pending_w.pop(0)
            return "W", c, i, j, 1
    return None


def schedule(kind, n_stages, n_microbatches, n_virtual=1):
    """Simulate a pipeline schedule with unit-time steps and return its ops
    (:class:`Op`: device, start, end, phase, chunk, microbatch). A forward of
    one stage takes 1 unit and a backward 2 (per virtual chunk: 1/v and 2/v,
    scaled to whole units by v); zero_bubble splits the backward into an
    activation gradient B and a weight gradient W of 1 unit each and runs
    each W whenever its device would otherwise wait. Times are in units of
    one stage's forward of one microbatch for every schedule. Ref:
    huang2019gpipe, narayanan2021megatron, distributed-training-notes."""
    p, m, v = _schedule_size(kind, n_stages, n_microbatches, n_virtual)
    durations = {"F": 1, "B": 2} if kind != "zero_bubble" else {"F": 1, "B": 1}
    orders = _orders(kind, p, m, v)
    last = v * p - 1
    done = {}  # (phase, virtual stage, microbatch) -> end time
    pending_w = [[] for _ in range(p)]
    free_at = [0] * p
    ops_out = []
    t = 0
    total = sum(len(o) for o in orders) + (p * m if kind == "zero_bubble" else 0)

    def ready(phase, j, i, now):
        if phase == "F":
            return j == 0 or done.get(("F", j - 1, i), now + 1) <= now
        if phase == "B":
            own = done.get(("F", j, i), now + 1) <= now
            return own and (j == last or done.get(("B", j + 1, i), now + 1) <= now)
        return done.get(("B", j, i), now + 1) <= now

    while len(ops_out) < total:
        for s in range(p):
            if free_at[s] > t:
                continue
            # interleaved: the first ready op in issue order (a chunk whose
            # input has not arrived does not hold back later ready ones);
            # the other schedules run strictly in issue order
            window = len(orders[s]) if kind == "interleaved" else min(1, len(orders[s]))
            op = _next_op(orders[s], pending_w[s], window, s, p, t, durations, ready)
            if op is None:
                continue
            phase, c, i, j, dur = op
            done[(phase, j, i)] = t + dur
            free_at[s] = t + dur
            ops_out.append(Op(s, t, t + dur, phase, c, i))
            if kind == "zero_bubble" and phase == "B":
                pending_w[s].append((c, i, j))
        t += 1
        if t > 100 * total + 100:
            raise RuntimeError("schedule: simulation did not finish (a dependency cycle in the op order)")
    if v > 1:  # a chunk holds 1/v of the stage's layers: report stage-time units
        ops_out = [o._replace(start=o.start / v, end=o.end / v) for o in ops_out]
    return sorted(ops_out, key=lambda o: (o.device, o.start))


def simulated_bubble_fraction(ops, n_stages):
    """Idle share of elapsed device time in a simulated schedule."""
    _validate.count("n_stages", n_stages)
    if not isinstance(ops, (list, tuple)) or not ops or not all(isinstance(o, tuple) and len(o) == 6 for o in ops):
        raise ValueError(
            "ops: must be the non-empty list of (device, start, end, phase, chunk, microbatch) that schedule() returns"
        )
    makespan = max(o[2] for o in ops)  # Op.end; plain 6-tuples are accepted too
    busy = sum(o[2] - o[1] for o in ops)
    return 1 - busy / (n_stages * makespan)


_validate.guard_module(globals())
