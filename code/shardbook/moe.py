"""Token dispatch for expert parallelism: the routed volume (rows perfectly
packed: no indices or load imbalance; capacity padding where a caller
passes a capacity factor), the sort that groups rows by expert, and the
grouped GEMM's efficiency by rows per expert. Ref: scale-your-model-amd."""

import math

from . import _validate


def routed_bytes_per_device(tokens_per_device, top_k, d_model, bytes_per_element):
    """Bytes of routed rows one device holds for one layer's dispatch:
    tokens · k · D · s."""
    _validate.non_negative("tokens_per_device", tokens_per_device)
    _validate.count("top_k", top_k)
    _validate.count("d_model", d_model)
    _validate.positive("bytes_per_element", bytes_per_element)
    return tokens_per_device * top_k * d_model * bytes_per_element


def remote_bytes_per_device(tokens_per_device, top_k, d_model, bytes_per_element, ep):
    """The off-rank part of one dispatch (or combine) with experts spread
    evenly over `ep` ranks: routed bytes · (ep−1)/ep."""
    _validate.count("ep", ep)
    return routed_bytes_per_device(tokens_per_device, top_k, d_model, bytes_per_element) * (ep - 1) / ep


def scale_out_exchange_bytes_per_token(
    d_model, top_k, n_nodes, max_nodes=None, dispatch_bytes_per_element=2, combine_bytes_per_element=2
):
    """Bytes one token sends over the scale-out network (NICs) in one MoE
    layer's training step, experts spread evenly over `n_nodes` nodes. The
    step has four exchanges: the forward dispatch (the token to its experts)
    and combine (their outputs back), and in the backward the transpose of
    each: output gradients out to the experts (dispatch direction) and input
    gradients back (combine direction).

    Unrestricted routing sends one copy per routed expert, k copies, of which
    (N−1)/N leave the node (the share shardbook.fabric prices an all-to-all
    across nodes by). Node-limited routing (`max_nodes` = M: each token's
    experts lie on at most M nodes) sends one copy per target node over the
    network and forwards it to that node's experts over the scale-up links,
    and sums a node's expert outputs before they cross back: min(k, M) copies,
    (N−1)/N of them off-node. Dispatch-direction exchanges carry
    `dispatch_bytes_per_element` (FP8 with its block scales ignored: 1),
    combine-direction ones `combine_bytes_per_element` (BF16: 2). Total:
    2 · copies · D · (N−1)/N · (dispatch + combine) bytes.
    Ref: deepseek2024v3 (node-limited routing to at most 4 nodes; IB then
    NVLink forwarding; FP8 dispatch and backward activation gradients, BF16
    combines)."""
    _validate.count("d_model", d_model)
    _validate.count("top_k", top_k)
    _validate.count("n_nodes", n_nodes)
    _validate.positive("dispatch_bytes_per_element", dispatch_bytes_per_element)
    _validate.positive("combine_bytes_per_element", combine_bytes_per_element)
    copies = top_k
    if max_nodes is not None:
        _validate.count("max_nodes", max_nodes)
        copies = min(top_k, max_nodes, n_nodes)
    off_node = (n_nodes - 1) / n_nodes
    return 2 * copies * d_model * off_node * (dispatch_bytes_per_element + combine_bytes_per_element)


def _routing(top_k, n_experts):
    """Each token picks top_k of n_experts experts."""
    _validate.count("top_k", top_k)
    _validate.count("n_experts", n_experts)
    if top_k > n_experts:
        raise ValueError(f"top_k: must be <= n_experts ({n_experts}), got {top_k}")


def capacity(tokens_per_group, top_k, n_experts, capacity_factor):
    """Slots per expert for a group of tokens routed together (GShard and
    Switch): ceil(capacity_factor · k · tokens / E). Tokens routed to a full
    expert are dropped. Ref: lepikhin2021gshard, fedus2022switch."""
    _validate.count("tokens_per_group", tokens_per_group)
    _routing(top_k, n_experts)
    _validate.positive("capacity_factor", capacity_factor)
    return math.ceil(capacity_factor * top_k * tokens_per_group / n_experts)


def dense_dispatch_flops(n_groups, tokens_per_group, n_experts, capacity_slots, d_model):
    """FLOPs of one MoE layer's one-hot dispatch and combine einsums in a
    training step, as GShard-style code writes them: each is a [T, E·C] by
    [T, D] contraction, 2·T·E·C·D per group of T tokens. Forward: dispatch
    and combine; backward: the input's gradient through dispatch, and
    through combine both the expert outputs' and the gate weights'
    gradients. Five in all. Ref: lepikhin2021gshard."""
    for name, value in (
        ("n_groups", n_groups),
        ("tokens_per_group", tokens_per_group),
        ("n_experts", n_experts),
        ("capacity_slots", capacity_slots),
        ("d_model", d_model),
    ):
        _validate.count(name, value)
    return 5 * 2 * n_groups * tokens_per_group * n_experts * capacity_slots * d_model


def ep_min_expert_width(
    flops_per_s, egress_bytes_per_s, ep, bytes_per_element=2, gated=True, ranks_in_node=1, node_link_bytes_per_s=None
):
    """Smallest expert width F at which an MoE layer's expert math hides its
    dispatch and combine all-to-alls (overlapped across chunks of tokens, as
    DualPipe-style schedules do). A routed token costs 2·m·D·F FLOPs in its
    expert (m = 3 matrices gated, 2 plain) and leaves its device twice, out
    to the expert and back, D·s bytes each time, (ep−1)/ep of them over the
    egress W: 2·m·D·F/C ≥ 2·D·s·(ep−1)/(ep·W), so F ≥ s·α·(ep−1)/(ep·m) with
    α = C/W. The tokens and k cancel: only the expert's width, the element
    size and the fabric decide. The backward doubles the math but has the
    same two exchanges (gradients out to the experts and back), so its floor
    is half the forward's: the forward binds.
    `ranks_in_node` > 1: the ep group spans nodes of that many ranks; the
    (ranks_in_node−1)/ep of the traffic that stays in a node goes over
    `node_link_bytes_per_s` (the scale-up egress), the (ep−ranks_in_node)/ep
    that leaves it over `egress_bytes_per_s` (the NIC), and the slower of
    the two sets the floor.
    Ref: scaling-book-training, deepseek2024v3."""
    _validate.positive("flops_per_s", flops_per_s)
    _validate.positive("egress_bytes_per_s", egress_bytes_per_s)
    _validate.count("ep", ep)
    _validate.positive("bytes_per_element", bytes_per_element)
    _validate.count("ranks_in_node", ranks_in_node)
    matrices = 3 if gated else 2
    if ranks_in_node == 1:
        return bytes_per_element * (flops_per_s / egress_bytes_per_s) * (ep - 1) / ep / matrices
    if ep % ranks_in_node:
        raise ValueError(f"ranks_in_node: must divide ep={ep}, got {ranks_in_node}")
    if node_link_bytes_per_s is None:
        raise ValueError("node_link_bytes_per_s: required when ranks_in_node > 1 (the in-node share's link)")
    _validate.positive("node_link_bytes_per_s", node_link_bytes_per_s)
    seconds_per_byte = max((ep - ranks_in_node) / egress_bytes_per_s, (ranks_in_node - 1) / node_link_bytes_per_s) / ep
    return bytes_per_element * flops_per_s * seconds_per_byte / matrices


def rows_per_expert(tokens_per_device, top_k, n_experts, ep, capacity_factor=1.0):
    """Rows one device's grouped GEMM gives each of its experts: the
    `tokens_per_device` of each of the `ep` ranks that share its experts,
    `top_k` copies each, spread over `n_experts` (capacity_factor times that
    where the stack pads every expert to its capacity):
    tokens · k · ep · cf / E."""
    _validate.positive("tokens_per_device", tokens_per_device)
    _routing(top_k, n_experts)
    _validate.count("ep", ep)
    _validate.positive("capacity_factor", capacity_factor)
    return tokens_per_device * top_k * ep * capacity_factor / n_experts


def grouped_gemm_factor(rows_per_group, half_rows):
    """The share of its large-group throughput a grouped GEMM sustains at
    `rows_per_group` rows per expert: M / (M + M½), where M½ (`half_rows`)
    is the group size at which it runs at half of it. Each group's tiles,
    the last of them part empty, and its weights' loads are paid per group:
    few rows per group run far below the plateau, many run near it.
    Ref: deepgemm, primus-turbo-grouped-gemm (the curves fitted on their
    tables by fit_grouped_gemm_half_rows)."""
    _validate.positive("rows_per_group", rows_per_group)
    _validate.positive("half_rows", half_rows)
    return rows_per_group / (rows_per_group + half_rows)


def _half_rows_error(points, half_rows):
    """Squared error of log TFLOP/s over `points` ((shape, M, TFLOP/s)) for
    a given M½, each shape at its best plateau (closed form)."""
    logs = {}
    for shape, m, tflops in points:
        logs.setdefault(shape, []).append(math.log(tflops) - math.log(grouped_gemm_factor(m, half_rows)))
    return sum(sum((x - sum(v) / len(v)) ** 2 for x in v) for v in logs.values())


def fit_grouped_gemm_half_rows(points, low=1.0, high=1e5, tol=1e-4):
    """M½ of grouped_gemm_factor fitted on `points`, (shape, rows per group,
    TFLOP/s) triples: least squares on log TFLOP/s, each shape (any hashable
    key, such as (N, K)) scaled by its own plateau, by golden-section search
    on log M½ in [`low`, `high`]. Needs two points of one shape at least."""
    try:
        points = [tuple(p) for p in points]
    except TypeError:
        raise ValueError("points: must be an iterable of (shape, rows per group, TFLOP/s) triples") from None
    if any(len(p) != 3 for p in points):
        raise ValueError("points: each must be a (shape, rows per group, TFLOP/s) triple")
    for _, m, tflops in points:
        _validate.positive("rows per group", m)
        _validate.positive("TFLOP/s", tflops)
    shapes = [shape for shape, _, _ in points]
    if not any(shapes.count(shape) > 1 for shape in shapes):
        raise ValueError("points: need two points of one shape at least to fit a curve")
    _validate.positive("low", low)
    _validate.positive("tol", tol)
    if not high > low:
        raise ValueError(f"high: must exceed low ({low}), got {high}")
    a, b = math.log(low), math.log(high)
    ratio = (math.sqrt(5) - 1) / 2
    while b - a > tol:
        c, d = b - ratio * (b - a), a + ratio * (b - a)
        if _half_rows_error(points, math.exp(c)) <= _half_rows_error(points, math.exp(d)):
            b = d
        else:
            a = c
    return math.exp((a + b) / 2)


def measured_grouped_gemm_points(data, kind="ragged_dot", floor_multiple=None):
    """The grouped matmuls of a measurement (shardbook.programs.measure
    --section moe; matmul_efficiency.load_measurement) as the (shape,
    rows per group, TFLOP/s) triples fit_grouped_gemm_half_rows takes, shape
    (N, K), for `kind` ('ragged_dot', 'batched_einsum' or
    'dense_same_flops'). A call under `floor_multiple` (default
    matmul_efficiency.FLOOR_MULTIPLE) times the file's dispatch floor is
    left out: its time is the host's, not the kernel's."""
    from . import matmul_efficiency

    if not isinstance(data, dict) or not {"dispatch", "grouped_matmul_bf16"} <= data.keys():
        raise ValueError("data: must be a MoE measurement, with 'dispatch' and 'grouped_matmul_bf16'")
    _validate.choice("kind", kind, ("ragged_dot", "batched_einsum", "dense_same_flops"))
    floor_multiple = matmul_efficiency.FLOOR_MULTIPLE if floor_multiple is None else floor_multiple
    _validate.positive("floor_multiple", floor_multiple)
    floor_s = data["dispatch"]["pipelined_time_s"]
    return [
        ((r["n"], r["k"]), r["tokens_per_group"], r[f"{kind}_flops_per_s"] / 1e12)
        for r in data["grouped_matmul_bf16"]
        if r[f"{kind}_time_s"] >= floor_multiple * floor_s
    ]


def grouped_gemm_plateau_share(points, dense_points, half_rows):
    """The share of a dense matmul's throughput a grouped GEMM reaches at
    its plateau: each shape's plateau under the curve at `half_rows` (the
    geometric mean of TFLOP/s / grouped_gemm_factor over its `points`, as
    fit_grouped_gemm_half_rows scales it) over the geometric mean of the
    same shape's `dense_points` (dense matmuls of the same FLOPs); the
    geometric mean over the shapes. Both lists of (shape, M, TFLOP/s)."""
    _validate.positive("half_rows", half_rows)

    def log_means(rows, factor):
        logs = {}
        for shape, m, tflops in rows:
            _validate.positive("TFLOP/s", tflops)
            logs.setdefault(shape, []).append(math.log(tflops) - math.log(factor(m)))
        return {shape: sum(v) / len(v) for shape, v in logs.items()}

    grouped = log_means(points, lambda m: grouped_gemm_factor(m, half_rows))
    dense = log_means(dense_points, lambda m: 1.0)
    shapes = [shape for shape in grouped if shape in dense]
    if not shapes:
        raise ValueError("dense_points: need a shape that points also has")
    return math.exp(sum(grouped[s] - dense[s] for s in shapes) / len(shapes))


def permute_bytes(tokens_per_device, top_k, d_model, bytes_per_element=2, ep=1, capacity_factor=1.0, reruns=0):
    """HBM bytes one device moves to sort its routed rows to their experts
    and back in one MoE layer of one microbatch's training step. The sort
    (permute) reads each of the T tokens' rows once and writes its k copies
    grouped by expert; the unsort (unpermute) reads the k expert outputs and
    writes their weighted sum: (1 + k)·T rows of D elements of s bytes
    each. The backward runs the transpose of both, and a policy that
    recomputes the MoE block (`reruns`) the forward's pair again: 4 + 2·reruns
    passes. With expert parallelism (`ep` > 1) the k·T rows that arrive are
    sorted again, by local expert, and unsorted before they go back: 2·k·T
    rows a pass more. Padded to capacity (`capacity_factor`), the k·T
    buffers are that much larger.
    Ref: maxtext (moe.py: permute, the ragged all-to-all, local_permute and
    their inverses)."""
    _validate.non_negative("tokens_per_device", tokens_per_device)
    _validate.count("top_k", top_k)
    _validate.count("d_model", d_model)
    _validate.positive("bytes_per_element", bytes_per_element)
    _validate.count("ep", ep)
    _validate.positive("capacity_factor", capacity_factor)
    _validate.count("reruns", reruns, minimum=0)
    routed = tokens_per_device * top_k * capacity_factor
    rows = tokens_per_device + routed + (2 * routed if ep > 1 else 0)
    return (4 + 2 * reruns) * rows * d_model * bytes_per_element


def dropped_fraction(expert_loads, capacity_slots):
    """Share of routed tokens dropped when each expert takes at most
    `capacity_slots`: Σ max(0, load − capacity) / Σ load."""
    if not isinstance(expert_loads, (list, tuple)) or not expert_loads:
        raise ValueError("expert_loads: must be a non-empty list of tokens per expert")
    for load in expert_loads:
        _validate.non_negative("expert_loads", load)
    _validate.non_negative("capacity_slots", capacity_slots)
    total = sum(expert_loads)
    if total == 0:
        return 0.0
    return sum(max(0, load - capacity_slots) for load in expert_loads) / total


MAX_DRAWS = 1_000_000  # tokens × experts: skewed_loads draws a key per pair; a bound keeps it about a second


def skewed_loads(n_tokens, top_k, n_experts, skew, seed=0):
    """Tokens per expert when `n_tokens` tokens each pick `top_k` distinct
    experts with popularity ∝ 1/(rank+1)^skew (skew 0: uniform), drawn
    without replacement by Efraimidis and Spirakis's keys: expert e gets
    log(u)/w_e for a uniform u, and the token takes the k largest (experts
    whose weight underflows to zero come last, in random order). A seeded
    draw from the standard library's random, the same everywhere."""
    import heapq
    import random

    _validate.count("n_tokens", n_tokens)
    _routing(top_k, n_experts)
    _validate.non_negative("skew", skew)
    if n_tokens * n_experts > MAX_DRAWS:
        raise ValueError(f"n_tokens × n_experts: at most {MAX_DRAWS:,} keys are drawn, got {n_tokens} × {n_experts}")
    rng = random.Random(seed)
    weights = [(rank + 1) ** -skew for rank in range(n_experts)]  # a steep skew underflows to 0, never overflows
    loads = [0] * n_experts
    for _ in range(n_tokens):
        keys = [
            ((1, math.log(1.0 - rng.random()) / w) if w > 0 else (0, rng.random()), e) for e, w in enumerate(weights)
        ]
        for _, e in heapq.nlargest(top_k, keys):
            loads[e] += 1
    return loads


def slowest_device_factor(expert_loads, ep):
    """How much longer the busiest of `ep` devices computes than the mean,
    experts placed in contiguous blocks of E/ep: max block load / mean."""
    _validate.count("ep", ep)
    if not isinstance(expert_loads, (list, tuple)) or not expert_loads or len(expert_loads) % ep:
        raise ValueError(f"expert_loads: need a list whose length (the experts) ep={ep} divides")
    per = len(expert_loads) // ep
    blocks = [sum(expert_loads[i * per : (i + 1) * per]) for i in range(ep)]
    mean = sum(blocks) / ep
    return max(blocks) / mean if mean else 1.0


_validate.guard_module(globals())
