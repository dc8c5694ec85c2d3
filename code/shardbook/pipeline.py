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
    1F1B's idle time, at 1F1B's peak activation memory. It needs m >= p:
    with fewer microbatches the forward and backward chains alone outlast
    the work (a ValueError). Ref: qi2024zerobubble."""
    _args(n_stages, n_microbatches, 1)
    if n_microbatches < n_stages:
        raise ValueError(
            f"n_microbatches: the ZB-H1 closed form needs at least n_stages={n_stages} microbatches, got {n_microbatches}"
        )
    return (n_stages - 1) / (3 * n_microbatches + n_stages - 1)


def boundary_bytes_per_token(d_model, bytes_per_element=2):
    """Bytes one token's activation carries across a stage boundary (D
    elements; the same again for its gradient on the way back)."""
    _validate.count("d_model", d_model)
    _validate.positive("bytes_per_element", bytes_per_element)
    return d_model * bytes_per_element


def flush_tail_s(gradient_reduction_s, microbatch_backward_s, stage=0, n_buckets=None):
    """Gradient-reduction time left exposed after the pipeline flush on
    `stage`. A stage's weight gradients are sums over all m microbatches, so
    a layer's reduction across data-parallel replicas can start only when
    that layer's backward of the last microbatch is done (reducing earlier
    would move the bytes m times). Bucketed layer by layer into `n_buckets`
    equal buckets (one per layer of the stage), bucket k is ready k·b/n into
    the stage's last backward b and takes R/n, one bucket at a time, so the
    reduction ends at max(R + b/n, b + R/n); the stage has its own last
    backward plus the `stage` backward steps by which the stages before it
    are still draining to hide it behind: exposed is
    max(0, max(R + b/n, b + R/n) − (stage + 1)·b). On stage 0, which
    finishes last and sets the tail, at least the last bucket, R/n, is
    always exposed. `n_buckets=None` is the limit of infinitely fine
    buckets, max(0, R − (stage + 1)·b), which no bucketed reduction reaches.
    Units: seconds. Ref: dubey2024llama3 (gradients reduced after the
    flush), narayanan2021megatron."""
    _validate.non_negative("gradient_reduction_s", gradient_reduction_s)
    _validate.positive("microbatch_backward_s", microbatch_backward_s)
    _validate.count("stage", stage, minimum=0)
    r, b = gradient_reduction_s, microbatch_backward_s
    if n_buckets is None:
        return max(0.0, r - (stage + 1) * b)
    _validate.count("n_buckets", n_buckets)
    ends = max(r + b / n_buckets, b + r / n_buckets)
    return max(0.0, ends - (stage + 1) * b)


# --- closed forms for the planner ---------------------------------------------

PLANNER_SCHEDULES = ("gpipe", "1f1b", "interleaved", "zero_bubble", "dualpipe")


def _planner_args(schedule, n_stages, n_microbatches, n_virtual):
    _validate.choice("schedule", schedule, PLANNER_SCHEDULES)
    _args(n_stages, n_microbatches, n_virtual)
    if schedule != "interleaved" and n_virtual != 1:
        raise ValueError(
            f"n_virtual: only the interleaved schedule has virtual stages, got {n_virtual} for {schedule!r}"
        )
    if schedule == "dualpipe" and n_stages > 1:
        if n_stages % 2:
            raise ValueError(f"n_stages: DualPipe pairs stage i with stage p−1−i, so p must be even, got {n_stages}")
        if n_microbatches % 2 or n_microbatches < 2 * n_stages:
            raise ValueError(
                f"n_microbatches: DualPipe feeds half from each end and needs an even number of at least "
                f"2·n_stages = {2 * n_stages}, got {n_microbatches}"
            )


def schedule_bubble_overhead(schedule, n_stages, n_microbatches, n_virtual=1):
    """Pipeline bubble time relative to the math time of one device (bubble /
    math; the step is math·(1 + this)), for p stages, m microbatches and v
    virtual stages, with a stage's backward twice its forward (F = 1,
    B = 2 of which W = 1 is the weight gradient):
    gpipe and 1f1b (p−1)/m; interleaved (p−1)/(v·m) (needs m >= p when
    v > 1; Llama 3 §3.3.2 gives the same ratio); zero_bubble is ZB-H1, the
    schedule the simulator runs, (p−1)·(F + B − 2W) = (p−1) units against
    3m, so (p−1)/(3m) (needs m >= p); dualpipe DeepSeek-V3's Table 2,
    (p/2 − 1)·(F&B + B − 3W), with the overlapped forward-and-backward
    chunk F&B taking F + B (overlap hides its communication, not its math):
    (p/2 − 1)·2 = p − 2 units against 3m, (p − 2)/(3m) (p even, m even
    and at least 2p, as DeepSeek's implementation requires). One stage
    (p = 1) has no bubble.
    Ref: huang2019gpipe, narayanan2021megatron, dubey2024llama3,
    qi2024zerobubble, deepseek2024v3, deepseek-dualpipe."""
    _planner_args(schedule, n_stages, n_microbatches, n_virtual)
    p, m, v = n_stages, n_microbatches, n_virtual
    if p == 1:
        return 0.0
    if schedule in ("gpipe", "1f1b"):
        return (p - 1) / m
    if schedule == "interleaved":
        return bubble_overhead(p, m, v)
    if m < p:
        raise ValueError(
            f"n_microbatches: the {schedule} closed form needs at least n_stages={p} microbatches, got {m}"
        )
    if schedule == "zero_bubble":
        return (p - 1) / (3 * m)
    return (p - 2) / (3 * m)


def schedule_activation_microbatches(schedule, n_stages, n_microbatches, n_virtual=1):
    """Peak activations of the first device (the one that holds most), in
    microbatches of one stage's activations: gpipe m; 1f1b min(p, m);
    interleaved p·(1 + (p−1)/(p·v)) for m a multiple of p (Korthikanti et
    al.'s count of Megatron's schedule), in general ((v−1)·g + 2p − 1)/v with
    g the size of the first group of microbatches a device runs through one
    chunk (ceil(m / floor(m/p)), p when p divides m), at most m, as the
    simulator's timeline holds; zero_bubble (ZB-H1) 1F1B's min(p, m), as Qi et
    al. state for ZB-H1; dualpipe p + 1 (DeepSeek-V3 Table 2).
    DualPipe also holds two copies of a stage's parameters
    (`schedule_parameter_copies`). p = 1: one microbatch.
    Ref: huang2019gpipe, narayanan2021megatron, korthikanti2022reducing,
    qi2024zerobubble, deepseek2024v3, deepseek-dualpipe."""
    _planner_args(schedule, n_stages, n_microbatches, n_virtual)
    p, m, v = n_stages, n_microbatches, n_virtual
    if p == 1:
        return 1.0
    if schedule == "gpipe":
        return float(m)
    if schedule in ("1f1b", "zero_bubble"):
        return float(min(p, m))
    if schedule == "interleaved":
        # the warm-up of (v−1)·g + 2(p−1) chunk forwards plus one, over v, with
        # g the first group of microbatches (p when p divides m; see _interleaved_order)
        g = -(-m // max(1, m // p))
        return float(min(((v - 1) * g + 2 * p - 1) / v, m))
    return float(p + 1)  # m >= 2p


def schedule_parameter_copies(schedule):
    """Stages' parameters each device keeps, in units of one stage: 2 for
    DualPipe (device i runs stage i and stage p−1−i, one per direction, so
    the pipeline holds every stage twice: Table 2's "Parameter 2×"), else 1.
    Each copy accumulates its own gradients until the step's end, so the
    gradient buffers follow the same count. Ref: deepseek2024v3,
    deepseek-dualpipe."""
    _validate.choice("schedule", schedule, PLANNER_SCHEDULES)
    return 2 if schedule == "dualpipe" else 1


def deepest_stage_layers(n_layers, n_stages, n_virtual=1, uneven=False):
    """Transformer layers on the pipeline stage that holds the most: n/p when
    p divides the layers; with `uneven`, ceil(n/p), the others holding one
    fewer (Llama 3 runs 126 layers on 16 stages, the first and last one
    layer short: 8; DeepSeek-V3 61 on 16: 4). With v virtual stages the
    deepest stage's layers split into v equal chunks, so v must divide
    them. Ref: dubey2024llama3, deepseek2024v3, narayanan2021megatron."""
    _validate.count("n_layers", n_layers)
    _validate.count("n_stages", n_stages)
    _validate.count("n_virtual", n_virtual)
    if n_stages > n_layers:
        raise ValueError(f"n_stages: at most the layers ({n_layers}), got {n_stages}")
    if n_layers % n_stages and not uneven:
        raise ValueError(f"n_stages: must divide the layers ({n_layers}) unless uneven=True, got {n_stages}")
    per_stage = -(-n_layers // n_stages)
    if per_stage % n_virtual:
        raise ValueError(
            f"n_virtual: must divide the layers per stage ({per_stage} of {n_layers} on {n_stages}), got {n_virtual}"
        )
    return per_stage


def uneven_chunk_layers(n_layers, n_stages, n_virtual):
    """Layers in each chunk of each stage, [stage][chunk], for a pipeline of
    p stages of v chunks whose deepest stage holds ceil(n/p) layers: the
    missing layers come out of the first chunk of the first stage (the one
    with the embedding) and the last chunk of the last stage (the one with
    the output layer and the loss), alternately, as Llama 3 takes one layer
    each from the first and last stages so that "the first model chunk on
    the first stage has only the embedding, and the last model chunk on the
    last stage has only output projection and loss calculation" (126 layers,
    16 stages, chunks of one layer). Ref: dubey2024llama3 §3.3.2."""
    per_stage = deepest_stage_layers(n_layers, n_stages, n_virtual, uneven=True)
    chunk = per_stage // n_virtual
    layers = [[chunk] * n_virtual for _ in range(n_stages)]
    missing = n_stages * per_stage - n_layers
    ends = [(0, c) for c in range(n_virtual)], [(n_stages - 1, c) for c in reversed(range(n_virtual))]
    turn, cursor = 0, [0, 0]
    while missing:
        stage, c = ends[turn][cursor[turn]]
        if layers[stage][c]:
            layers[stage][c] -= 1
            missing -= 1
        else:
            cursor[turn] += 1
            if cursor[turn] == n_virtual:
                raise ValueError(f"n_layers: {n_layers} leaves the first and last stages empty on {n_stages} stages")
            continue
        turn = 1 - turn if n_stages > 1 else 0
    return layers


def interleaved_peak_layer_microbatches(n_stages, n_microbatches, n_virtual, chunk_layers):
    """The most layer-microbatches of activations any device holds under
    Megatron's interleaved 1F1B (the issue order of `_interleaved_order`: a
    chunk's forward adds its layers, its backward frees them), with
    `chunk_layers[stage][chunk]` layers per chunk (uneven_chunk_layers). For
    equal chunks it is the first device's warm-up plus one forward, the
    closed form of schedule_activation_microbatches times a stage's layers.
    Ref: narayanan2021megatron, dubey2024llama3."""
    return max(_interleaved_stage_peaks(n_stages, n_microbatches, n_virtual, chunk_layers))


def _check_chunk_layers(p, v, chunk_layers):
    if (
        not isinstance(chunk_layers, (list, tuple))
        or len(chunk_layers) != p
        or any(not isinstance(row, (list, tuple)) or len(row) != v for row in chunk_layers)
    ):
        raise ValueError(f"chunk_layers: must give {v} chunk(s) for each of the {p} stages")
    for row in chunk_layers:
        for layers in row:
            _validate.non_negative("chunk_layers", layers)


def _interleaved_stage_peaks(n_stages, n_microbatches, n_virtual, chunk_layers):
    """Per stage, the most layer-microbatches it holds under `_interleaved_order`."""
    _args(n_stages, n_microbatches, n_virtual)
    p, m, v = n_stages, n_microbatches, n_virtual
    _check_chunk_layers(p, v, chunk_layers)
    peaks = []
    g = -(-m // max(1, m // p))
    for s in range(p):
        if len(set(chunk_layers[s])) == 1:
            # equal chunks on this stage: its warm-up plus one forward, the closed form of
            # stage_activation_layer_microbatches (a chunk's layers each)
            peaks.append(float(min(((v - 1) * g + 2 * (p - s - 1) + 1) / v, m) * sum(chunk_layers[s])))
            continue
        held = peak = 0
        for phase, c, _ in _interleaved_order(s, p, m, v):
            held += chunk_layers[s][c] if phase == "F" else -chunk_layers[s][c]
            peak = max(peak, held)
        peaks.append(float(peak))
    return peaks


def stage_activation_layer_microbatches(schedule, n_stages, n_microbatches, n_virtual, chunk_layers):
    """Activations each stage holds at its peak, [stage], in layer-microbatches
    (one layer's activations for one microbatch), for a pipeline whose stage
    s has `chunk_layers[s][c]` layers in chunk c (equal chunks, or
    uneven_chunk_layers): gpipe m·L_s; 1f1b min(p − s, m)·L_s (stage s
    warms up with p − s − 1 forwards, then runs one more before its first
    backward); zero_bubble (ZB-H1) min(p, m)·L_s on every stage (its later
    stages defer their weight gradients, which still read the layer inputs,
    until each holds as many microbatches as the first: Qi et al.'s "the
    same number of in-flight microbatches", and the simulator's
    held_activations); interleaved the issue order
    of `_interleaved_order` (a chunk's forward adds its layers, its
    backward frees them; for equal chunks of L/v layers the closed form
    min(((v−1)·g + 2(p−s−1) + 1)/v, m)·L, g as in
    schedule_activation_microbatches); one stage (p = 1) one microbatch.
    Stage 0's entry with equal stages is schedule_activation_microbatches
    times its layers. DualPipe pairs stages on a device and is counted per
    device by schedule_activation_microbatches (a ValueError here).
    Ref: narayanan2021megatron, qi2024zerobubble, dubey2024llama3."""
    _planner_args(schedule, n_stages, n_microbatches, n_virtual)
    p, m, v = n_stages, n_microbatches, n_virtual
    if schedule == "dualpipe":
        raise ValueError("schedule: 'dualpipe' runs two stages per device; count it per device")
    _check_chunk_layers(p, v, chunk_layers)
    layers = [sum(row) for row in chunk_layers]
    if p == 1:
        return [float(layers[0])]
    if schedule == "gpipe":
        return [float(m * n) for n in layers]
    if schedule == "1f1b":
        return [float(min(p - s, m) * n) for s, n in enumerate(layers)]
    if schedule == "zero_bubble":
        return [float(min(p, m) * n) for n in layers]
    if any(len(set(row)) > 1 for row in chunk_layers):
        return _interleaved_stage_peaks(p, m, v, chunk_layers)
    g = -(-m // max(1, m // p))
    return [min(((v - 1) * g + 2 * (p - s - 1) + 1) / v, m) * n for s, n in enumerate(layers)]


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
        else:
            ops = _interleaved_order(s, p, m, v)
        orders.append(ops)
    return orders


def _microbatch_groups(p, m):
    """Microbatches cut into max(1, m // p) consecutive groups of at least p
    (as even as possible): an interleaved device runs a whole group through
    one chunk before the next chunk."""
    rounds = max(1, m // p)
    base, extra = divmod(m, rounds)
    groups, start = [], 0
    for g in range(rounds):
        size = base + (1 if g < extra else 0)
        groups.append(range(start, start + size))
        start += size
    return groups


def _interleaved_order(s, p, m, v):
    """Megatron's interleaved 1F1B on device s: a warm-up of (v−1)·g + 2·(p−s−1)
    forward chunks (g the first group's size; p when p divides m), then one
    forward and one backward alternately, then the remaining backwards.
    Chunk c of device s is virtual stage c·p + s. Ref: narayanan2021megatron."""
    groups = _microbatch_groups(p, m)
    forwards = [("F", c, i) for g in groups for c in range(v) for i in g]
    backwards = [("B", c, i) for g in groups for c in reversed(range(v)) for i in g]
    warm = min((v - 1) * len(groups[0]) + 2 * (p - s - 1), m * v)
    ops = forwards[:warm]
    for k, forward in enumerate(forwards[warm:]):
        ops += [forward, backwards[k]]
    return ops + backwards[m * v - warm :]


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


def _next_op(order, pending_w, s, p, now, durations, ready, forward_allowed):
    """The op device `s` starts at `now`, removed from its queues, or None:
    the next op in issue order when it is ready (a forward only while
    `forward_allowed`), else the oldest deferred weight gradient."""
    if order:
        phase, c, i = order[0]
        j = c * p + s
        if ready(phase, j, i, now) and (phase != "F" or forward_allowed):
            order.pop(0)
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
    each W whenever its device would otherwise wait, or before a forward
    that would take the device past p microbatches in flight (ZB-H1's rule:
    1F1B's peak memory). interleaved is Megatron's interleaved 1F1B, run
    strictly in its issue order. Times are in units of
    one stage's forward of one microbatch for every schedule. Ref:
    huang2019gpipe, narayanan2021megatron, distributed-training-notes."""
    p, m, v = _schedule_size(kind, n_stages, n_microbatches, n_virtual)
    durations = {"F": 1, "B": 2} if kind != "zero_bubble" else {"F": 1, "B": 1}
    orders = _orders(kind, p, m, v)
    last = v * p - 1
    done = {}  # (phase, virtual stage, microbatch) -> end time
    pending_w = [[] for _ in range(p)]
    free_at = [0] * p
    held = [0] * p  # zero_bubble: microbatches forwarded and not yet through W
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
            # zero_bubble: a forward waits while the device already holds
            # p microbatches (each freed by its W): every device is capped at
            # 1F1B's peak, the p of its first stage, as the ZB-H1 rule and
            # sail-sg's implementation cap them, so the deferred weight
            # gradients fill idle slots at 1F1B's peak memory
            forward_allowed = kind != "zero_bubble" or held[s] < p
            op = _next_op(orders[s], pending_w[s], s, p, t, durations, ready, forward_allowed)
            if op is None:
                continue
            phase, c, i, j, dur = op
            done[(phase, j, i)] = t + dur
            free_at[s] = t + dur
            ops_out.append(Op(s, t, t + dur, phase, c, i))
            if kind == "zero_bubble":
                held[s] += {"F": 1, "B": 0, "W": -1}[phase]
                if phase == "B":
                    pending_w[s].append((c, i, j))
        t += 1
        if t > 100 * total + 100:
            raise RuntimeError("schedule: simulation did not finish (a dependency cycle in the op order)")
    if v > 1:  # a chunk holds 1/v of the stage's layers: report stage-time units
        ops_out = [o._replace(start=o.start / v, end=o.end / v) for o in ops_out]
    return sorted(ops_out, key=lambda o: (o.device, o.start))


def held_activations(ops, n_virtual=1):
    """Peak activations each device holds in a simulated schedule, in units
    of one microbatch's activations for a whole stage (a chunk of an
    interleaved device holds 1/v of them). A microbatch's activations are
    held from the start of its forward to the end of its backward, or of
    its weight gradient where the schedule splits one off (W still reads
    the layer inputs). Returns one peak per device."""
    _validate.count("n_virtual", n_virtual)
    _check_ops(ops)
    last_use = {}
    for o in ops:
        if o[3] in ("B", "W"):
            key = (o[0], o[4], o[5])
            last_use[key] = max(last_use.get(key, o[2]), o[2])
    events = {}
    for o in ops:
        if o[3] == "F":
            events.setdefault(o[0], []).extend([(o[1], 1), (last_use[(o[0], o[4], o[5])], -1)])
    peaks = []
    for device in sorted(events):
        held = peak = 0
        for _, change in sorted(events[device], key=lambda e: (e[0], e[1])):  # frees first at a tie
            held += change
            peak = max(peak, held)
        peaks.append(peak / n_virtual)
    return peaks


def first_stage_activations(kind, n_stages, n_microbatches, n_virtual=1):
    """Closed-form peak activations of the first device, the one that holds
    the most, in microbatches of a whole stage: GPipe keeps all m; 1F1B
    min(p, m); zero bubble (ZB-H1) p as 1F1B, by rule (for m >= p);
    interleaved 1F1B, for m a multiple of p, the warm-up of (v−1)·p +
    2·(p−1) chunk forwards plus one, over v: p·(1 + (p−1)/(p·v)) once
    m·v exceeds it, else all m. Ref:
    huang2019gpipe, narayanan2021megatron, korthikanti2022reducing,
    qi2024zerobubble."""
    p, m, v = _schedule_size(kind, n_stages, n_microbatches, n_virtual)
    if kind == "gpipe":
        return float(m)
    if kind == "1f1b":
        return float(min(p, m))
    if m < p:
        raise ValueError(f"n_microbatches: the {kind} closed form needs at least n_stages={p} microbatches, got {m}")
    if kind == "zero_bubble":
        return float(p)
    if m % p:
        raise ValueError(
            f"n_microbatches: the interleaved closed form is Megatron's, for m a multiple of n_stages={p}, got {m}"
        )
    # the warm-up plus the first steady forward, unless that is every chunk
    return min((v - 1) * p + 2 * (p - 1) + 1, m * v) / v


def _check_ops(ops):
    if not isinstance(ops, (list, tuple)) or not ops or not all(isinstance(o, tuple) and len(o) == 6 for o in ops):
        raise ValueError(
            "ops: must be the non-empty list of (device, start, end, phase, chunk, microbatch) that schedule() returns"
        )


def simulated_bubble_fraction(ops, n_stages):
    """Idle share of elapsed device time in a simulated schedule."""
    _validate.count("n_stages", n_stages)
    _check_ops(ops)
    makespan = max(o[2] for o in ops)  # Op.end; plain 6-tuples are accepted too
    busy = sum(o[2] - o[1] for o in ops)
    return 1 - busy / (n_stages * makespan)


_validate.guard_module(globals())
