"""What hides communication: a collective matmul's steps, and FSDP's
prefetch on a compute stream and a communication stream.

Both are idealized: a collective and a matmul running at once each keep
their full speed (on real hardware they share memory bandwidth and, on GPUs,
streaming multiprocessors), and every rank runs the same timeline (FSDP's
collectives keep the ranks in step). Standard library only.
Ref: wang2023overlap, scaling-book-sharding, zhao2023fsdp.
"""

from typing import NamedTuple

from . import _validate


class CollectiveMatmul(NamedTuple):
    """Times of y = x·W with x's rows split n ways and W's columns split n
    ways, y wanted by rows: one step's matmul and one hop's transfer, the
    whole done serially (gather x, then multiply) and decomposed (n partial
    matmuls, each hop running beside the matmul before it)."""

    n: int
    step_math_s: float
    step_transfer_s: float
    serial_s: float
    overlapped_s: float

    @property
    def transfer_s(self):
        """The n−1 hops together: what the serial form waits for."""
        return (self.n - 1) * self.step_transfer_s

    @property
    def exposed_transfer_s(self):
        """What the decomposed form still waits for: its time beyond the math."""
        return self.overlapped_s - self.n * self.step_math_s

    @property
    def hidden_fraction(self):
        """Share of the transfer time the decomposition hides."""
        return 1 - self.exposed_transfer_s / self.transfer_s if self.transfer_s else 1.0


def collective_matmul_s(rows, d_model, d_ff, n, flops_per_s, link_bytes_per_s, bytes_per_element=2):
    """x [rows, D] split by rows and W [D, F] split by columns over n
    devices in a ring. Each step multiplies one block of rows/n rows by the
    local W (2·(rows/n)·D·(F/n) FLOPs) while that block's neighbour hop
    moves (rows/n)·D elements over one link. Serial: the all-gather's n−1
    hops, then n steps of math. Decomposed: the first step's math, then n−1
    steps each as long as the longer of a hop and a step's math."""
    for name, value in (("rows", rows), ("d_model", d_model), ("d_ff", d_ff), ("n", n)):
        _validate.count(name, value)
    _validate.positive("flops_per_s", flops_per_s)
    _validate.positive("link_bytes_per_s", link_bytes_per_s)
    _validate.positive("bytes_per_element", bytes_per_element)
    if rows % n or d_ff % n:
        raise ValueError(f"n: must divide rows ({rows}) and d_ff ({d_ff}), got {n}")
    step_math = 2 * (rows // n) * d_model * (d_ff // n) / flops_per_s
    step_transfer = (rows // n) * d_model * bytes_per_element / link_bytes_per_s
    serial = (n - 1) * step_transfer + n * step_math
    overlapped = step_math + (n - 1) * max(step_math, step_transfer)
    return CollectiveMatmul(n, step_math, step_transfer, serial, overlapped)


class StreamOp(NamedTuple):
    """One operation of a simulated FSDP step: `stream` 'compute' or
    'comm'; `kind` 'forward', 'backward', 'gather' or 'reduce_scatter';
    `layer`; start and end in seconds."""

    stream: str
    kind: str
    layer: int
    start_s: float
    end_s: float


class FsdpStep(NamedTuple):
    """An FSDP step laid out in time: its operations (each on a stream, with
    its start and length), the step time, and the compute time alone."""

    ops: list
    step_s: float
    compute_s: float

    @property
    def exposed_comm_s(self):
        """Time the compute stream waits on communication."""
        return self.step_s - self.compute_s


MAX_LAYERS = 2_000  # the simulation's time grows with the square of the layers


def _issue_order(n_layers, prefetch):
    """The communication stream's order: the forward gathers, then per
    backward position t (layer L−1−t) its reduce-scatter and the gather
    `prefetch`+1 positions ahead; the first gathers of the backward first."""
    order = [("gather_f", i) for i in range(n_layers)]
    order += [("gather_b", t) for t in range(min(prefetch + 1, n_layers))]
    for t in range(n_layers):
        order.append(("reduce_scatter", t))
        if t + prefetch + 1 < n_layers:
            order.append(("gather_b", t + prefetch + 1))
    return order


def _ready(op, end, n_layers, prefetch):
    """When a collective may start (None while its condition is unscheduled):
    a gather when the layer `prefetch`+1 before it has freed its weights, a
    backward gather no earlier than the end of the forward pass, a
    reduce-scatter when its layer's backward is done."""
    kind, x = op
    if kind == "gather_f":
        return 0.0 if x <= prefetch else end.get(("forward", x - prefetch - 1))
    if kind == "gather_b":
        return end.get(("forward", n_layers - 1)) if x <= prefetch else end.get(("backward", x - prefetch - 1))
    return end.get(("backward", x))


def fsdp_step(n_layers, forward_s, backward_s, gather_s, reduce_scatter_s, prefetch=1):
    """Simulate one FSDP step of `n_layers` identical layers on one rank.

    The compute stream runs the forwards, then the backwards in reverse
    layer order; a layer's forward and its backward each wait for that
    layer's weights to be gathered (they are resharded after the forward).
    The communication stream runs one collective at a time in the order a
    framework issues them: the forward gathers in layer order; in the
    backward, the next layers' gathers before each reduce-scatter, which
    waits for its layer's backward. `prefetch` is how many layers ahead a
    gather may run: with 0 a layer's gather starts only when the previous
    layer's math is done (nothing overlaps); with k, up to k+1 layers'
    weights are gathered at once, which is what bounds the memory."""
    _validate.count("n_layers", n_layers)
    for name, value in (
        ("forward_s", forward_s),
        ("backward_s", backward_s),
        ("gather_s", gather_s),
        ("reduce_scatter_s", reduce_scatter_s),
    ):
        _validate.non_negative(name, value)
    _validate.count("prefetch", prefetch, minimum=0)
    if n_layers > MAX_LAYERS:
        raise ValueError(f"n_layers: the simulator handles at most {MAX_LAYERS:,} layers, got {n_layers}")
    L = n_layers
    compute = [("forward", i) for i in range(L)] + [("backward", t) for t in range(L)]  # backward t: layer L−1−t
    comm = _issue_order(L, prefetch)
    end, ops = {}, []
    free = {"compute": 0.0, "comm": 0.0}
    while compute or comm:
        progressed = False
        if comm and (ready := _ready(comm[0], end, L, prefetch)) is not None:
            kind, x = comm.pop(0)
            start = max(ready, free["comm"])
            free["comm"] = end[(kind, x)] = start + (reduce_scatter_s if kind == "reduce_scatter" else gather_s)
            layer = x if kind == "gather_f" else L - 1 - x
            ops.append(StreamOp("comm", "gather" if kind != "reduce_scatter" else kind, layer, start, free["comm"]))
            progressed = True
        if compute:
            kind, x = compute[0]
            needs = ("gather_f", x) if kind == "forward" else ("gather_b", x)
            if needs in end:
                compute.pop(0)
                start = max(free["compute"], end[needs])
                free["compute"] = end[(kind, x)] = start + (forward_s if kind == "forward" else backward_s)
                ops.append(StreamOp("compute", kind, x if kind == "forward" else L - 1 - x, start, free["compute"]))
                progressed = True
        if not progressed:
            raise RuntimeError("fsdp_step: the schedule deadlocked (a bug in the issue order)")
    step = max(o.end_s for o in ops)
    return FsdpStep(sorted(ops, key=lambda o: (o.start_s, o.stream)), step, L * (forward_s + backward_s))


_validate.guard_module(globals())
