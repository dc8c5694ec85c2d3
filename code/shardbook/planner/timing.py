"""Step 3 of the planner: the time of a step, twice.

Math: the hardware FLOPs (model FLOPs plus what recomputation and the
attention kernel's backward repeat) over the devices. Communication: every
collective of the step through the fabric model (`shardbook.fabric`), where
its group sits (`placement`), per call, times the calls a step makes.
Bubbles: the schedule's own (`memory_plan.bubble_overhead`).

- The bound (`calibrated=False`): peak FLOP/s, collectives at line rate
  with no latency, an all-reduce inside an NVSwitch domain that has NVLink
  SHARP (calibrate.NVLS_PRESETS) priced as the cheaper of in-switch
  reduction (collectives.in_switch_all_reduce_s) and the ring, every
  overlappable collective hidden behind the math; the step is the longest of
  the math and each hidden collective, plus the collectives that cannot
  hide, plus the bubble.
- The expectation (`calibrated=True`): the same terms with the sustained
  math efficiency, achieved bandwidths and a per-message latency from
  `calibrate`, collectives across GPU nodes as NCCL's flat rings
  (`fabric.flat_ring_s`) where the bound takes the two-level schedule,
  the work between the matmuls at the achieved HBM bandwidth
  (`math_s`), and of each hidden collective the part no math can cover
  left exposed (exposed_fractions: derived from the layout for FSDP, the
  gradient reduction and the pipeline; calibrate.EXPOSED_FRACTION for the
  rest; never less than what the math cannot cover: for FSDP, layer by
  layer and pass by pass, the backward's gather and gradient
  reduce-scatter against the backward's math (fsdp_uncovered_s)).

Ref: scale-your-model-amd, scaling-book-sharding, narayanan2021megatron,
deepseek2024v3, nccl-tests-performance, nccl-nvls, nccl-tests-nvls-allreduce.
"""

import contextlib
import dataclasses
import functools
import math

from .. import _validate, collectives, fabric, hardware, matmul_efficiency, memory, models, moe, training
from ..hardware import Sourced
from . import calibrate, memory_plan
from .placement import Placement
from .shape import check_layout

COLLECTIVE_KINDS = fabric.COLLECTIVE_KINDS

# One call's seconds of each collective priced so far, while a search shares them (shared_costs);
# None otherwise, so that a lone evaluate keeps nothing between calls.
_shared = None


@contextlib.contextmanager
def shared_costs():
    """Within this block collective_s and send_s remember the seconds of one
    call of each collective they price (by accelerator, kind, bytes per
    call, placement, calibration and the options that change it), and
    multiply by the calls: a search prices the same axis's collectives for
    every schedule, microbatch and recomputation policy it tries on a mesh,
    and for meshes that share the axis. The accelerator's calibration is
    read once per priced call and may not change inside the block. Blocks
    may nest; the memory is dropped when the outermost ends."""
    global _shared
    outer = _shared
    if outer is None:
        _shared = {}
    try:
        yield
    finally:
        _shared = outer


def _remembered(key, price):
    """price() once per key inside shared_costs; every time outside it."""
    if _shared is None:
        return price()
    seconds = _shared.get(key)
    if seconds is None:
        seconds = _shared[key] = price()
    return seconds


def _achieved(acc):
    """`acc` with its link rates scaled to the calibrated achieved rates."""
    return _scaled_rates(acc, calibrate.scale_up_efficiency(acc), calibrate.scale_out_efficiency(acc))


@functools.lru_cache(maxsize=64)
def _scaled_rates(acc, up, out):
    """`acc` with its scale-up rates times `up` and its scale-out rate times
    `out` (cached by the efficiencies too: an accelerator file read again
    under the same name may calibrate it otherwise)."""

    def scaled(value, factor):
        return Sourced(float(value) * factor, value.source, "achieved", "calibrated (planner.calibrate)")

    return dataclasses.replace(
        acc,
        scale_up_link_bytes_per_s=scaled(acc.scale_up_link_bytes_per_s, up),
        scale_up_link_bidirectional_bytes_per_s=scaled(acc.scale_up_link_bidirectional_bytes_per_s, up),
        scale_up_egress_bytes_per_s=scaled(acc.scale_up_egress_bytes_per_s, up),
        scale_out_bytes_per_s=scaled(acc.scale_out_bytes_per_s, out),
    )


def _latency_steps(kind, placement, in_switch):
    """(scale-up steps, scale-out steps) one collective pays in latency."""
    d, k = placement.degree, placement.n_domains
    if placement.torus_span:
        inside = sum(extent - 1 for _, extent, _ in placement.torus_span)
    else:
        inside = placement.members_per_domain - 1
    across = k - 1
    if kind == "all_reduce":
        return (2 if in_switch else 2 * inside), 2 * across
    if kind == "all_to_all" and not placement.torus_span:
        return inside, d - placement.members_per_domain
    return inside, across


def _latency_s(acc, steps):
    """Seconds of latency for (scale-up steps, scale-out steps)."""
    up, out = steps
    return up * calibrate.scale_up_latency_s(acc) + out * calibrate.scale_out_latency_s(acc)


def collective_s(
    accelerator, kind, bytes_per_call, placement, n_calls=1, *, calibrated=False, node_limit=None, in_switch=True
):
    """Seconds for `n_calls` collectives of one kind over an axis's groups.

    `bytes_per_call`: the full buffer (all_to_all: each device's payload).
    Bound: line rate, no latency. An all-reduce inside one NVSwitch domain
    with NVLink SHARP may run in the switch (NCCL's NVLS:
    collectives.in_switch_all_reduce_s, (n+1)/n·V each way over the
    egress, 2 latency steps) or as the ring the fabric prices (2(n-1)/n·V,
    2(n-1) steps); it costs the cheaper, as NCCL's tuner picks (the ring
    wins at n = 2). `in_switch=False`: the all-reduce runs as a
    reduce-scatter and an all-gather (TP with sequence parallelism), which
    the switch does not speed up, so it pays the ring. Calibrated: achieved
    rates and the fabric's per-step latency.
    Across GPU nodes the bound takes the two-level schedule
    (fabric.collective_s) and the expectation NCCL's flat rings
    (fabric.flat_ring_s: (n-1)/n of the buffer through a node's NICs).
    Ref: nccl-nvls, nccl-tests-nvls-allreduce, nccl-flat-rings.
    `node_limit` (all_to_all across domains): each token crosses to at most
    that many domains, one copy per domain (DeepSeek-V3's node-limited
    routing), so the cross-domain bytes scale by the copies it sends over
    top_k (min(top_k, limit, domains) / top_k, as
    moe.scale_out_exchange_bytes_per_token counts them); give it as that
    ratio (<= 1)."""
    acc = hardware.get(accelerator)
    _validate.choice("kind", kind, COLLECTIVE_KINDS)
    _validate.non_negative("bytes_per_call", bytes_per_call)
    _validate.non_negative("n_calls", n_calls)
    if placement.degree == 1 or bytes_per_call == 0 or n_calls == 0:
        return 0.0
    key = ("collective", acc, kind, bytes_per_call, placement, calibrated, node_limit, in_switch)
    return n_calls * _remembered(
        key, lambda: _one_call_s(acc, kind, bytes_per_call, placement, calibrated, node_limit, in_switch)
    )


def _one_call_s(acc, kind, bytes_per_call, placement, calibrated, node_limit, in_switch):
    """Seconds of one call of collective_s."""
    d = placement.degree
    rates = _achieved(acc) if calibrated else acc
    if (
        kind == "all_reduce"
        and in_switch
        and placement.n_domains == 1
        and acc.scale_up_fabric == "switch"
        and calibrate.has_in_switch_reduction(acc)
    ):
        ring = fabric.collective_s(kind, bytes_per_call, rates, d, 1)
        switch = collectives.in_switch_all_reduce_s(bytes_per_call, d, rates.scale_up_egress_bytes_per_s)
        if calibrated:
            ring += _latency_s(acc, _latency_steps(kind, placement, False))
            switch += _latency_s(acc, _latency_steps(kind, placement, True))
        return min(ring, switch)
    if kind == "all_to_all" and node_limit is not None and placement.n_domains > 1 and not placement.torus_span:
        m = placement.members_per_domain
        inside = fabric.scale_up_s("all_to_all", bytes_per_call * m / d, rates, m) if m > 1 else 0.0
        across = bytes_per_call * (d - m) / d * node_limit / rates.scale_out_bytes_per_s
        seconds = collectives.hierarchical_s(inside, across, True)
    elif placement.torus_span:
        seconds = fabric.collective_s(
            kind,
            bytes_per_call,
            rates,
            d,
            placement.n_domains,
            torus_extents=tuple(extent for _, extent, _ in placement.torus_span),
            wraparound=all(wrap for _, _, wrap in placement.torus_span),
            links=placement.torus_links,
        )
    elif calibrated and placement.n_domains > 1 and acc.scale_up_fabric != "torus":
        # across GPU nodes the expectation prices what NCCL runs, flat rings; the bound the
        # two-level schedule, the least a schedule without in-network reduction moves
        seconds = fabric.flat_ring_s(kind, bytes_per_call, rates, d, placement.n_domains)
    else:
        seconds = fabric.collective_s(kind, bytes_per_call, rates, d, placement.n_domains)
    if calibrated:
        seconds += _latency_s(acc, _latency_steps(kind, placement, False))
    return seconds


def multi_axis_s(accelerator, kind, total_bytes, placements, n_calls=1, *, calibrated=False):
    """A collective over a group made of several mesh axes (innermost
    first). The axes' devices form one group of k domains with m members
    each (k and m the products of the axes'; on a torus, the union of their
    dimensions, each with its links), priced as one axis of that shape
    (collective_s: the fabric's in-domain and cross-domain phases pipelined,
    NVLink SHARP inside one domain, every torus dimension's links at once),
    so that splitting a group into axes does not change its price. Where two
    axes share a torus dimension (groups striding it), one phase per axis: a
    reduce-scatter or all-gather moves total/(product of the axes before it)
    over each; an all-reduce is a reduce-scatter down the axes, an
    all-reduce over the last, and the all-gather back.
    Ref: scaling-book-sharding (a collective over several axes uses the
    links of each)."""
    _validate.choice("kind", kind, ("all_gather", "reduce_scatter", "all_reduce"))
    groups = [p for p in placements if p.degree > 1]
    if not groups:
        return 0.0
    if len(groups) == 1:
        return collective_s(accelerator, kind, total_bytes, groups[0], n_calls, calibrated=calibrated)
    dims = [dim for p in groups for dim, _, _ in p.torus_span]
    if len(dims) == len(set(dims)):
        # off a torus, or on distinct torus dimensions, the devices of the axes together are one
        # group of the fabric (k domains of m members, on the union of the dimensions with the
        # links of each), priced as one axis of that shape would be (fabric.collective_s)
        whole = Placement(
            math.prod(p.degree for p in groups),
            math.prod(p.n_domains for p in groups),
            math.prod(p.members_per_domain for p in groups),
            torus_links=sum(p.torus_links for p in groups),
            torus_span=tuple(span for p in groups for span in p.torus_span),
            domain_name=groups[0].domain_name,
        )
        return collective_s(accelerator, kind, total_bytes, whole, n_calls, calibrated=calibrated)
    seconds, size = 0.0, total_bytes
    if kind == "all_reduce":
        for p in groups[:-1]:
            seconds += 2 * collective_s(accelerator, "reduce_scatter", size, p, n_calls, calibrated=calibrated)
            size /= p.degree
        return seconds + collective_s(accelerator, "all_reduce", size, groups[-1], n_calls, calibrated=calibrated)
    for p in groups:
        seconds += collective_s(accelerator, kind, size, p, n_calls, calibrated=calibrated)
        size /= p.degree
    return seconds


def send_s(accelerator, bytes_per_call, placement, n_calls=1, *, calibrated=False):
    """Point-to-point sends between neighbouring pipeline stages: one
    buffer over the NIC when the stages sit in different domains, else over
    one scale-up link (a switch: the device's egress)."""
    acc = hardware.get(accelerator)
    _validate.non_negative("bytes_per_call", bytes_per_call)
    if placement.degree == 1 or bytes_per_call == 0:
        return 0.0
    return n_calls * _remembered(
        ("send", acc, bytes_per_call, placement, calibrated),
        lambda: _one_send_s(acc, bytes_per_call, placement, calibrated),
    )


def _one_send_s(acc, bytes_per_call, placement, calibrated):
    """Seconds of one call of send_s."""
    rates = _achieved(acc) if calibrated else acc
    if placement.n_domains > 1:
        seconds = bytes_per_call / rates.scale_out_bytes_per_s
        latency = calibrate.scale_out_latency_s(acc)
    else:
        rate = rates.scale_up_egress_bytes_per_s if acc.scale_up_fabric == "switch" else rates.scale_up_link_bytes_per_s
        seconds = bytes_per_call / rate
        latency = calibrate.scale_up_latency_s(acc)
    return seconds + (latency if calibrated else 0.0)


def _check_terms(*tables):
    for table in tables:
        if not isinstance(table, dict):
            raise TypeError(f"comm_s: must be a dict of term name to seconds, got {type(table).__name__}")


def bound_step_s(math_s, comm_s, hidden, bubble_s):
    """The optimistic step: the longest of the math and each hidden
    collective, plus every collective that cannot hide, plus the bubble.
    `comm_s` maps a term name to seconds; `hidden` names the terms that hide."""
    _validate.positive("math_s", math_s)
    _check_terms(comm_s)
    hidden_max = max([comm_s[k] for k in comm_s if k in hidden], default=0.0)
    critical = sum(comm_s[k] for k in comm_s if k not in hidden)
    return max(math_s, hidden_max) + critical + bubble_s


def exposed_s(math_s, comm_s, hidden, exposed, uncovered=None):
    """{term: seconds on the critical path} of the calibrated step: a
    collective that cannot hide in full; of each hidden one the larger of
    its exposed fraction (`exposed`, by term name: exposed_fractions) and
    what the math cannot cover: `uncovered[name]` where given (FSDP's, by
    pass and layer: fsdp_uncovered_s), else the term less the step's math."""
    _validate.positive("math_s", math_s)
    uncovered = {} if uncovered is None else uncovered
    _check_terms(comm_s, exposed, uncovered)
    return {
        name: max(exposed[name] * seconds, uncovered.get(name, seconds - math_s)) if name in hidden else seconds
        for name, seconds in comm_s.items()
    }


def expected_step_s(math_s, comm_s, hidden, bubble_s, exposed, uncovered=None):
    """The calibrated step: math, bubble and each collective's exposed
    part (exposed_s)."""
    return math_s + bubble_s + sum(exposed_s(math_s, comm_s, hidden, exposed, uncovered).values())


# --- the math of one step -------------------------------------------------------------


def math_s(lay, recompute):
    """(ideal_s, bound_s, expected_s, elementwise_s) for a Layout's math, per
    device: `ideal_s` the model FLOPs at the BF16 peak (MFU's denominator);
    `bound_s` the hardware FLOPs (with what `recompute` runs again) at the
    peak (the FP8 peak for precision='fp8'), at least the time to stream
    the device's weights from HBM calibrate.WEIGHT_PASSES times per
    microbatch; `expected_s` at the sustained efficiency, at the deepest
    stage's pace, plus the work bound by HBM (`elementwise_s`: the
    kernels between the matmuls, calibrate.ELEMENTWISE_PASSES times the
    least traffic of what a layer keeps: written by the forward, read by
    the backward, written again for the share of the forward the policy
    reruns (memory_plan.recomputed_forward_fraction); with eager attention
    its s² scores too (eager_scores_hbm_s); at the achieved HBM bandwidth;
    an MoE model's sorts and an FP8 plan's casts are in it too, permute_s
    and fp8_cast_s; the routed experts' grouped GEMMs add grouped_gemm_s
    to `expected_s`). The elementwise bytes grow with s·b·h per layer and the matmul FLOPs
    with s·b·h², so narrow models spend more of their step here. The
    sustained efficiency is the accelerator's η times the shape factor of
    its matmuls (matmul_shape_factor); the attention scores (their forward
    and backward, and the forward a policy reruns) at η times the share
    their kernel sustains (calibrate.attention_share: the stack's kernel on
    Hopper; 1 elsewhere and for eager attention). An MoE
    model that drops tokens computes its experts' whole capacity
    (capacity_factor)."""

    check_layout(lay)
    m, acc, mesh = lay.model, lay.accelerator, lay.mesh
    n, pp = lay.n_devices, mesh["pp"]
    peak = acc.bf16_dense_flops_per_s
    ideal = training.model_flops_per_token(m, lay.seq_len, causal=True) * lay.global_tokens / (n * peak)
    hardware_flops = training.hardware_flops_per_token(m, lay.seq_len, recompute, causal=True) * lay.global_tokens
    if m.is_moe and lay.capacity_factor != 1:
        # an MoE layer that drops tokens computes each expert's whole capacity:
        # the routed experts' matmuls (forward and backward) scale by the capacity factor
        routed_params = models.routed_expert_param_count(m) * m.top_k / m.n_experts
        hardware_flops += 6 * routed_params * (lay.capacity_factor - 1) * lay.global_tokens
    fp8 = lay.precision == "fp8"
    bound = hardware_flops / (n * peak * (calibrate.fp8_peak_ratio(acc) if fp8 else 1))
    balance = lay.deepest / (m.n_layers / pp) if pp > 1 else 1.0  # the deepest stage sets the pace
    speedup = calibrate.fp8_sustained_speedup(acc) if fp8 else 1
    eta = calibrate.matmul_efficiency(acc)
    # the attention scores run in their own kernel, at the share of η it sustains; an FP8 plan's
    # fitted speedup (of whole steps' math) applies to them too: which runs kept their attention in
    # BF16 is not published run by run, and H100's one FP8 calibration run cannot be fitted with a
    # speedup of at most the peak ratio if its attention is taken as BF16
    scores = attention_hardware_flops_per_token(lay, recompute) * lay.global_tokens
    share = calibrate.attention_share(acc, lay.stack, lay.seq_len / mesh["cp"]) if lay.attention == "flash" else 1.0
    per_flop_s = balance / (n * peak * speedup * eta)  # at η, at the deepest stage's pace
    expected = per_flop_s * ((hardware_flops - scores) / matmul_shape_factor(lay) + scores / share)
    expected += grouped_gemm_s(lay, recompute)
    hbm = calibrate.hbm_bytes_per_s(acc)
    if not hbm:
        return ideal, bound, expected, 0.0
    kept = memory_plan.activation_bytes_per_layer(
        m,
        lay.seq_len,
        lay.micro_batch_seqs,
        pp=pp,
        tp=mesh["tp"],
        cp=mesh["cp"],
        sequence_parallel=lay.sequence_parallel,
        recompute="none",
        attention="flash",  # the tensors around the attention core; eager scores are counted below
    )
    achieved_hbm = hbm * calibrate.HBM_EFFICIENCY.value
    # the least traffic of what a layer keeps: written by the forward, read by the backward,
    # written again where the policy reruns the forward; unfused kernels move PASSES times it
    redone = min(1.0, memory_plan.recomputed_forward_fraction(m, lay.seq_len, recompute))
    least = (2 + redone) * kept * lay.deepest * lay.n_micro / achieved_hbm
    if lay.attention == "eager":  # the s² scores (softmax, dropout) go through HBM between kernels
        least += eager_scores_hbm_s(lay, recompute, achieved_hbm)
    elementwise = calibrate.ELEMENTWISE_PASSES.value * least + permute_s(lay, recompute) + fp8_cast_s(lay, recompute)
    streamed = memory_plan.WEIGHT_BYTES * (lay.dense_local * lay.dense_shard + lay.expert_local * mesh["fsdp"])
    streaming = calibrate.WEIGHT_PASSES * streamed * lay.n_micro
    bound = max(bound, streaming / hbm)
    expected = max(expected + elementwise, streaming * balance / achieved_hbm)
    return ideal, bound, expected, elementwise


def fp8_cast_s(lay, recompute):
    """Seconds one device spends quantizing the inputs of its FP8 matmuls
    (0 in BF16, or without an HBM figure or a cast figure): per token and
    layer, of every weight matmul the forward's input and the backward's
    output gradient, calibrate.fp8_cast_bytes_per_element bytes each, at the
    achieved HBM bandwidth; the forward's again for the share the policy
    reruns. Widths as the layout splits them (the column-parallel
    matmuls' outputs and the row-parallel ones' inputs over tp; sequence
    parallelism gathers the others' inputs whole); an MoE layer's routed
    experts on the k copies of the tokens the device routes (and their
    capacity padding), its shared experts on every token. The output layer
    stays in BF16; MLA's low-rank projections are counted as one matmul
    from the layer input to the heads. Ref: transformer-engine."""
    check_layout(lay)
    if lay.precision != "fp8":  # every BF16 plan a search prices: no figure to look up
        return 0.0
    m, mesh = lay.model, lay.mesh
    hbm = calibrate.hbm_bytes_per_s(lay.accelerator)
    per_element = calibrate.fp8_cast_bytes_per_element(lay.accelerator)
    if not hbm or not per_element:
        return 0.0
    tp, d = mesh["tp"], m.d_model
    if m.mla is None:
        q, qkv = m.n_heads * m.head_dim, (m.n_heads + 2 * m.n_kv_heads) * m.head_dim
    else:
        a = m.mla
        q = m.n_heads * a.v_head_dim  # the output projection's input
        qkv = m.n_heads * (2 * a.qk_nope_head_dim + a.qk_rope_head_dim + a.v_head_dim)
    up = 2 if m.gated_mlp else 1
    redone = min(1.0, memory_plan.recomputed_forward_fraction(m, lay.seq_len, recompute))

    def elements(forward, backward):
        return forward * (1 + redone) + backward

    attention = elements(d + q / tp, qkv / tp + d)  # QKV and output projection

    def mlp(width):
        return elements(d + width / tp, up * width / tp + d) if width else 0.0

    tokens = _tp_group_tokens(lay)
    dense = tokens * (attention + mlp(m.d_ff_dense if m.is_moe else m.d_ff))
    moe_layers = lay.deepest * (m.n_layers - m.n_dense_layers) / m.n_layers if m.is_moe else 0.0
    moe_layer = 0.0
    if m.is_moe:
        rows = _routed_tokens(lay) * m.top_k * lay.capacity_factor
        moe_layer = tokens * (attention + mlp(m.n_shared_experts * m.d_ff)) + rows * elements(
            d + m.d_ff, up * m.d_ff + d
        )
    quantized = ((lay.deepest - moe_layers) * dense + moe_layers * moe_layer) * lay.n_micro
    return per_element * quantized / (hbm * calibrate.HBM_EFFICIENCY.value)


# --- the shape of each matmul ---------------------------------------------------------------


def matmul_shapes(lay):
    """[(name, M, K, N, FLOPs per token)] of the weight matmuls one device
    runs, with their shapes after the layout's splits: M the rows of one
    microbatch (its tp group's tokens, seq_len · micro_batch_seqs / cp,
    which sequence parallelism gathers before each column-parallel matmul),
    K and N the weight's dimensions on this device (the column-parallel
    ones' N and the row-parallel ones' K over tp; K and V replicated where
    tp exceeds the KV heads; MLA's down projections whole). FLOPs per token
    are the model's (6 · the weight's parameters, over every layer), by
    which the shapes are weighted. Per layer: QKV (MLA: its down and up
    projections), the attention output, the MLP's up and gate and its down
    (a dense layer's width; in an MoE layer the shared experts', as one
    product of their summed width); the output logits (vocabulary over tp).
    The routed experts are not here: their grouped GEMMs are priced by
    rows per expert (grouped_gemm_s)."""
    check_layout(lay)
    m, tp = lay.model, lay.mesh["tp"]
    rows = max(1, round(_tp_group_tokens(lay)))
    d, per_layer = m.d_model, []

    def add(name, k, n, k_split=1, n_split=1, layers=1):
        per_layer.append((name, rows, max(1, round(k / k_split)), max(1, round(n / n_split)), 6 * k * n * layers))

    if m.mla is None:
        kv_split = tp if m.n_kv_heads >= tp else m.n_kv_heads  # replicated when tp exceeds the KV heads
        q, kv = m.n_heads * m.head_dim, 2 * m.n_kv_heads * m.head_dim
        per_layer.append(("attn_qkv", rows, d, max(1, round(q / tp + kv / kv_split)), 6 * d * (q + kv) * m.n_layers))
        add("attn_out", q, d, k_split=tp, layers=m.n_layers)
    else:
        a = m.mla
        qk_head = a.qk_nope_head_dim + a.qk_rope_head_dim
        if a.q_lora_rank:
            add("attn_q_down", d, a.q_lora_rank, layers=m.n_layers)
            add("attn_q_up", a.q_lora_rank, m.n_heads * qk_head, n_split=tp, layers=m.n_layers)
        else:
            add("attn_q", d, m.n_heads * qk_head, n_split=tp, layers=m.n_layers)
        add("attn_kv_down", d, a.kv_lora_rank + a.qk_rope_head_dim, layers=m.n_layers)
        add(
            "attn_kv_up", a.kv_lora_rank, m.n_heads * (a.qk_nope_head_dim + a.v_head_dim), n_split=tp, layers=m.n_layers
        )
        add("attn_out", m.n_heads * a.v_head_dim, d, k_split=tp, layers=m.n_layers)
    up = 2 if m.gated_mlp else 1  # gate and up: two products of the same shape
    mlps = [(m.d_ff_dense, m.n_dense_layers), (m.n_shared_experts * m.d_ff, m.n_layers - m.n_dense_layers)]
    if not m.is_moe:
        mlps = [(m.d_ff, m.n_layers)]
    for width, layers in mlps:
        if width and layers:
            add("mlp_up", d, width, n_split=tp, layers=up * layers)
            add("mlp_down", width, d, k_split=tp, layers=layers)
    add("logits", d, m.vocab_size, n_split=tp)
    return per_layer


def matmul_shape_factor(lay):
    """The factor in (0, 1] by which the shapes of a layout's matmuls lower
    the accelerator's η: the FLOP-weighted harmonic mean of
    matmul_efficiency's smoothed roofline at each product of matmul_shapes
    (BF16 operands, its ridge the curve's ratio (calibrate.matmul_shape_curve)
    times the accelerator's BF16 peak over its spec HBM bandwidth), every
    other FLOP of the model count but the attention scores, which math_s
    prices apart (the routed experts, the embedding lookup) at 1. FP8 products take the
    same factor: half the bytes against twice the peak. 1 without an HBM
    figure. Inside shared_costs it is priced once per shape and accelerator
    (a search tries many schedules and policies on each)."""
    check_layout(lay)
    # what the factor reads of a Layout: matmul_shapes' model, rows and tp split, and the accelerator
    tp, cp = lay.mesh["tp"], lay.mesh["cp"]
    key = ("matmul_shape", lay.model, lay.accelerator, lay.seq_len, lay.micro_batch_seqs, tp, cp)
    return _remembered(key, lambda: _matmul_shape_factor(lay))


def _matmul_shape_factor(lay):
    acc = lay.accelerator
    hbm = calibrate.hbm_bytes_per_s(acc)
    if not hbm:
        return 1.0
    curve, ratio = calibrate.matmul_shape_curve(acc)
    ridge = ratio * float(acc.bf16_dense_flops_per_s) / hbm
    shapes = tuple((k, mm, n, f) for _, mm, k, n, f in matmul_shapes(lay))
    # the attention scores are priced apart (math_s: attention_share)
    total = training.model_flops_per_token(lay.model, lay.seq_len, causal=True)
    total -= training.attention_flops_per_token(lay.model, lay.seq_len, causal=True)
    return _harmonic_factor(shapes, total, ridge, matmul_efficiency.CURVES[curve].sharpness)


def attention_hardware_flops_per_token(lay, recompute):
    """The attention scores' FLOPs per trained token that a step runs
    (training.attention_flops_per_token, causal, plus the forward a policy
    reruns: memory.recomputed_attention_flops_per_token)."""
    check_layout(lay)
    m = lay.model
    model = training.attention_flops_per_token(m, lay.seq_len, causal=True)
    return model + memory.recomputed_attention_flops_per_token(m, lay.seq_len, recompute, causal=True)


@functools.lru_cache(maxsize=4096)
def _harmonic_factor(shapes, total_flops, ridge, sharpness):
    """total / (Σ F_i / f_i + the rest at 1) over `shapes` ((K, M, N, F_i) each)."""
    shaped = sum(f for *_, f in shapes)
    slowed = sum(
        f / matmul_efficiency.smoothed_roofline(matmul_efficiency.intensity_flops_per_byte(mm, k, n), ridge, sharpness)
        for k, mm, n, f in shapes
    )
    return total_flops / (total_flops - shaped + slowed)


# --- what routing adds to an MoE layer's math ------------------------------------------------


def _tp_group_tokens(lay):
    """Tokens one tp group works on per microbatch (a sequence's share
    under cp)."""
    return lay.seq_len * lay.micro_batch_seqs / lay.mesh["cp"]


def _routed_tokens(lay):
    """Tokens one device routes per microbatch (its tp rank's share of its
    tp group's tokens, as the dispatch sends them)."""
    return _tp_group_tokens(lay) / lay.mesh["tp"]


def rows_per_expert(lay):
    """Rows each local expert's group holds in one microbatch's grouped
    GEMM: moe.rows_per_expert of the device's tp group's tokens
    (seq_len · micro_batch_seqs / cp), tp times those it dispatches, so
    tokens · k · ep · capacity factor / E; 0 for a dense model. Both ways
    to run experts beside tp agree: split over tp, each rank's slice of an
    expert computes every row the tp group routed there, gathered over tp
    after the exchange (Megatron-Core's alltoall dispatcher: its expert
    ranks see num_local_tokens·TP·EP = S·B·EP tokens); or whole, folded
    over the tp × ep devices (expert TP 1), each expert takes the rows of
    tp·ep ranks dispatching tokens/tp each. Ref: megatron-core-moe
    (token_dispatcher.py)."""
    check_layout(lay)
    m = lay.model
    if not m.is_moe:
        return 0.0
    return moe.rows_per_expert(_tp_group_tokens(lay), m.top_k, m.n_experts, lay.mesh["ep"], lay.capacity_factor)


def grouped_gemm_s(lay, recompute):
    """Seconds the routed experts' grouped GEMMs spend beyond what their
    FLOPs take at the sustained matmul efficiency: the routed FLOPs
    (6 · routed active parameters · capacity factor per token, 2 more where
    the policy reruns the MoE block's forward) at η, times 1/(f·p) − 1 with
    f moe.grouped_gemm_factor at rows_per_expert and the kernels' M½
    (calibrate.GROUPED_GEMM_HALF_ROWS) and p the plateau's share of η
    (calibrate.routed_expert_efficiency, 1 but where a stack's is fitted);
    at the deepest stage's pace. 0 for a dense model.
    Ref: deepgemm, primus-turbo-grouped-gemm."""
    check_layout(lay)
    m, acc, mesh = lay.model, lay.accelerator, lay.mesh
    if not m.is_moe:
        return 0.0
    routed = models.routed_expert_param_count(m) * m.top_k / m.n_experts * lay.capacity_factor
    flops = (6 + 2 * expert_exchange_reruns(recompute)) * routed * lay.global_tokens
    speedup = calibrate.fp8_sustained_speedup(acc) if lay.precision == "fp8" else 1
    balance = lay.deepest / (m.n_layers / mesh["pp"]) if mesh["pp"] > 1 else 1.0
    at_eta = flops / (lay.n_devices * acc.bf16_dense_flops_per_s * speedup) * balance / calibrate.matmul_efficiency(acc)
    factor = moe.grouped_gemm_factor(rows_per_expert(lay), calibrate.grouped_gemm_half_rows(acc))
    return at_eta * (1 / (factor * calibrate.routed_expert_efficiency(acc)) - 1)


def permute_s(lay, recompute):
    """Seconds one device spends on the sorts of its routed rows that the
    elementwise term does not already price, over the deepest stage's MoE
    layers and every microbatch, at the achieved HBM bandwidth
    (calibrate.HBM_EFFICIENCY). The first sort to the experts and its
    unsort write and read the dispatched inputs and the expert outputs a
    layer keeps (memory.activation_bytes_per_layer), which the elementwise
    term already moves ELEMENTWISE_PASSES times; with expert parallelism
    the rows that arrive are sorted again by local expert and unsorted
    before they go back (moe.permute_bytes at ep less at ep = 1: the
    forward's pair, its transpose in the backward, and the forward's again
    where the policy reruns the MoE block). 0 for a dense model, without
    ep, or without an HBM figure. Ref: maxtext."""
    check_layout(lay)
    m, acc, ep = lay.model, lay.accelerator, lay.mesh["ep"]
    hbm = calibrate.hbm_bytes_per_s(acc)
    if not m.is_moe or not hbm or ep == 1:
        return 0.0
    moe_layers = lay.deepest * (m.n_layers - m.n_dense_layers) / m.n_layers
    reruns = expert_exchange_reruns(recompute)
    # the rows that arrive over ep: experts folded whole over tp × ep (expert TP 1, as Megatron runs
    # MoE beside TP and the published tp > 1 run did); split over tp, the gather would sort tp times more
    tokens = _routed_tokens(lay)
    per_layer = moe.permute_bytes(tokens, m.top_k, m.d_model, ep=ep, reruns=reruns) - moe.permute_bytes(
        tokens, m.top_k, m.d_model, ep=1, reruns=reruns
    )
    return per_layer * moe_layers * lay.n_micro / (hbm * calibrate.HBM_EFFICIENCY.value)


# --- one step's collectives ------------------------------------------------------------


# How the TPU compiler emits FSDP's collectives, read off the compiled plans of
# code/shardbook/data/compiled_plans.json (shardbook.hlo.compile_plan; chapter 97; libtpu 0.0.42.1):
# - the gradient reduction: no reduce-scatter is left in any FSDP plan on v5p, v5e or v6e (FSDP
#   alone over the slice, v5p 4x4x4 and v5e 8x8 and 16x16; FSDP beside tp, v5p 4x4x4 and v6e 4x8
#   and 16x16): the gradients are all-reduced, each device keeping its shard. Every Ironwood
#   plan keeps reduce-scatters (or rings of permutes).
# - the weight gathers: none is left where FSDP alone spans a whole 3D slice that wraps on
#   every side (v5p 4x4x4; Ironwood 4x4x4): each gather is a zero-padded all-reduce. They stay
#   all-gathers on the 2D slices (v5e 8x8, 16x16), on Ironwood's 2x2x2 (no wraparound) and
#   wherever FSDP shares the slice with tp. The outside check compiled v5p 8x8x8 alike.
# tests/test_compile_plan.py derives both kinds from the compiled plans and holds these to them.
ALL_REDUCE_GRADIENT_TPUS = ("TPU v5e", "TPU v5p", "TPU v6e")
ALL_REDUCE_GATHER_TPUS = ("TPU v5p", "Ironwood")


def whole_slice_fsdp(lay):
    """Whether FSDP spans a whole TPU slice on its own: every device of
    the mesh in one fsdp group, no other axis, inside one slice."""
    check_layout(lay)
    if lay.accelerator.family != "tpu" or lay.mesh["fsdp"] == 1:
        return False
    where = lay.placement.get("fsdp")
    return lay.mesh["fsdp"] == math.prod(lay.mesh.values()) and (where is None or where.n_domains == 1)


def fsdp_collective_kinds(lay):
    """(gather kind, reduction kind) the TPU compiler emits for FSDP's
    weight gathers and gradient reduction (see ALL_REDUCE_GRADIENT_TPUS):
    the reduction an all-reduce on v5p, v5e and v6e where the fsdp group
    lies inside one slice (the compiled plans hold no DCN), the gathers
    all-reduces where FSDP alone spans a whole 3D slice wrapping on every
    side (v5p, Ironwood); all-gather and reduce-scatter elsewhere and on
    every GPU. An all-reduce sends 2(n-1)/n of its buffer, a gather or a
    reduce-scatter (n-1)/n."""
    check_layout(lay)
    name = calibrate.preset_name(lay.accelerator)
    if lay.accelerator.family != "tpu" or lay.mesh["fsdp"] == 1:
        return "all_gather", "reduce_scatter"
    inside_slice = lay.placement["fsdp"].n_domains == 1  # every compiled plan is one slice: no DCN
    reduce = "all_reduce" if name in ALL_REDUCE_GRADIENT_TPUS and inside_slice else "reduce_scatter"
    span = lay.placement["fsdp"].torus_span
    wraps_3d = len(span) == 3 and all(wrap for _, _, wrap in span)
    gather = "all_reduce" if name in ALL_REDUCE_GATHER_TPUS and whole_slice_fsdp(lay) and wraps_3d else "all_gather"
    return gather, reduce


def _fsdp_s(lay, calibrated, share=1.0, gathers=None, scatters=None):
    """FSDP (and dense weights over ep): BF16 gathers forward and backward
    per microbatch (once per step when the weights are kept) and a gradient
    reduce-scatter per microbatch (the gradients stay sharded, as ZeRO-3
    and JAX's scan over microbatches accumulate them), each an all-reduce
    of the same buffer where the TPU compiler emits one
    (fsdp_collective_kinds: twice a ring's traffic). `share` of the device's weights and
    `gathers`/`scatters` calls instead of the step's (fsdp_exposed_s prices
    one layer's once)."""
    acc, where = lay.accelerator, lay.placement
    gather, reduce = fsdp_collective_kinds(lay)
    weight, grad = memory_plan.WEIGHT_BYTES, memory_plan.gradient_bytes_per_param(lay.state_recipe)
    axes = [where["fsdp"]] + ([where["ep"]] if lay.dense_over_ep else [])
    if gathers is None:
        gathers = 1 if lay.keep_gathered_weights else 2 * lay.n_micro
    if scatters is None:
        scatters = lay.n_micro  # gradients stay sharded: reduce-scattered as each microbatch's backward ends
    dense = lay.dense_local * lay.dense_shard * share
    expert = lay.expert_local * lay.mesh["fsdp"] * share
    # a search prices these for every policy, schedule and pass of a layout: remembered by what they read
    key = ("fsdp", acc, gather, reduce, tuple(axes), weight, grad, dense, expert, gathers, scatters, calibrated)
    return _remembered(
        key,
        lambda: (
            multi_axis_s(acc, gather, weight * dense, axes, gathers, calibrated=calibrated)
            + multi_axis_s(acc, reduce, grad * dense, axes, scatters, calibrated=calibrated)
            + collective_s(acc, gather, weight * expert, where["fsdp"], gathers, calibrated=calibrated)
            + collective_s(acc, reduce, grad * expert, where["fsdp"], scatters, calibrated=calibrated)
        ),
    )


def _dp_axes(lay):
    where = lay.placement
    dense_axes = [where["cp"], where["dp"]] + ([] if lay.dense_over_ep else [where["ep"]])
    return dense_axes, [where["cp"], where["dp"]]


def _dp_s(lay, calibrated, share=1.0, last_only=False):
    """The gradient reduction over the ranks that replicate a weight (dp
    and cp, and ep for dense weights it does not shard): an all-reduce once
    per step (ZeRO-1: reduce-scatter and all-gather of the updated weights;
    ZeRO-2: a reduce-scatter per microbatch; ZeRO-3, FSDP over these ranks:
    gathers forward and backward per microbatch too, or once per step with
    keep_gathered_weights, as _fsdp_s). `share` of the device's parameters;
    `last_only`: one call of each collective (dp_exposed_s: the last
    bucket's)."""
    acc = lay.accelerator
    weight, grad = memory_plan.WEIGHT_BYTES, memory_plan.gradient_bytes_per_param(lay.state_recipe)
    dense_axes, expert_axes = _dp_axes(lay)
    seconds = 0.0
    for params, axes in ((lay.dense_local * share, dense_axes), (lay.expert_local * share, expert_axes)):
        if not params:
            continue
        if lay.zero == 0:
            seconds += multi_axis_s(acc, "all_reduce", grad * params, axes, 1, calibrated=calibrated)
            continue
        scatters = 1 if last_only or lay.zero < 2 else lay.n_micro
        gathers = 2 * lay.n_micro if lay.zero == 3 and not (last_only or lay.keep_gathered_weights) else 1
        seconds += multi_axis_s(acc, "reduce_scatter", grad * params, axes, scatters, calibrated=calibrated)
        seconds += multi_axis_s(acc, "all_gather", weight * params, axes, gathers, calibrated=calibrated)
    return seconds


def communication_s(lay, recompute, calibrated=False):
    """Seconds of each kind of communication in one step of a Layout, by
    term: fsdp, dp, cp, tp, ep, pp (line rate, or calibrated)."""

    check_layout(lay)
    m, acc, mesh, where = lay.model, lay.accelerator, lay.mesh, lay.placement
    tp, pp = mesh["tp"], mesh["pp"]
    layers_here = m.n_layers / pp
    moe_layers_here = (m.n_layers - m.n_dense_layers) / pp if m.is_moe else 0.0
    tokens_mb = _tp_group_tokens(lay)
    calls = lay.n_micro
    out = {"fsdp": _fsdp_s(lay, calibrated), "dp": _dp_s(lay, calibrated)}
    # context parallelism: K and V gathered forward, their gradients reduce-scattered backward, per layer
    kv_heads_per_rank = max(m.n_kv_heads, tp) / tp  # K and V replicated when tp exceeds the KV heads
    kv_bytes = tokens_mb * mesh["cp"] * 2 * kv_heads_per_rank * m.head_dim * 2
    out["cp"] = collective_s(acc, "all_gather", kv_bytes, where["cp"], 2 * layers_here * calls, calibrated=calibrated)
    # tensor parallelism: all-reduce equivalents of the block's activations per layer: 2 forward
    # (gather and reduce-scatter around attention and around the MLP; 1 in a parallel block, which
    # gathers its one input and reduce-scatters the sum of attention and MLP), as many backward,
    # and what the recompute reruns: the whole forward under 'full' (Megatron), all but the
    # layer's last reduce-scatter, whose output the backward does not read, under
    # 'nothing_saveable' (JAX; in an MoE layer MaxText names mlpwo after that reduce-scatter,
    # so it reruns too, not counted here); 4 (6 with full recompute) for a sequential block. With sequence
    # parallelism each is a reduce-scatter and an all-gather (korthikanti2022reducing), which an
    # in-switch reduction does not speed up (nccl-nvls)
    forward = 1 if m.parallel_block else 2
    rerun = {"full": forward, "nothing_saveable": forward - 0.5}.get(recompute, 0)
    rounds = 2 * forward + rerun
    out["tp"] = collective_s(
        acc,
        "all_reduce",
        tokens_mb * m.d_model * 2,
        where["tp"],
        rounds * layers_here * calls,
        calibrated=calibrated,
        in_switch=not lay.sequence_parallel,
    )
    # expert parallelism: dispatch and combine, forward and backward, per MoE layer, as
    # moe.scale_out_exchange_bytes_per_token counts them: the two dispatch-direction exchanges
    # (the forward dispatch, the backward's output gradients) in FP8 with fp8_dispatch, the two
    # combine-direction ones in BF16; node-limited routing sends min(top_k, limit, nodes) copies.
    # A policy that recomputes the MoE block runs the forward's pair again (expert_exchange_reruns)
    out["ep"] = 0.0
    if moe_layers_here and mesh["ep"] > 1:
        dispatch_bytes = 1 if lay.fp8_dispatch else 2
        four = 2 * sum(
            moe.routed_bytes_per_device(tokens_mb / tp, m.top_k, m.d_model, element) for element in (dispatch_bytes, 2)
        )  # bytes of the four all-to-alls; a rerun pair moves half as many
        exchanges = 4 + 2 * expert_exchange_reruns(recompute)
        limit = None
        if lay.routing_node_limit is not None and where["ep"].n_domains > 1:
            nodes = where["ep"].n_domains
            limit = moe.scale_out_exchange_bytes_per_token(
                m.d_model, m.top_k, nodes, lay.routing_node_limit
            ) / moe.scale_out_exchange_bytes_per_token(m.d_model, m.top_k, nodes)
        out["ep"] = collective_s(
            acc,
            "all_to_all",
            four / 4,
            where["ep"],
            exchanges * moe_layers_here * calls,
            calibrated=calibrated,
            node_limit=limit,
        )
    # pipeline: each microbatch's activations forward and gradients back across each chunk
    # boundary; each of the tp ranks sends 1/tp of them, with or without sequence parallelism
    # (without it, Megatron's scatter/gather splits the replicated tensor and all-gathers it
    # over NVLink on arrival: narayanan2021megatron §4.1)
    boundary = tokens_mb * m.d_model * 2 / tp
    out["pp"] = send_s(acc, boundary, where["pp"], 2 * lay.n_virtual * calls, calibrated=calibrated)
    return out


def expert_exchange_reruns(recompute):
    """How many times a recomputation policy runs an MoE layer's forward
    dispatch and combine again in its backward pass: once under Megatron's
    'full' (the whole forward reruns) and under every named-tensor policy,
    MaxText's and torchtitan's op-level SAC (memory.RECOMPUTE kind 'named': no checkpoint name tags the dispatched
    tokens, which the experts' weight gradients read, and the router's
    gradient reads the experts' outputs back on the tokens' side, so both
    exchanges run again); never under 'none', 'selective' (the attention
    core only) or DeepSeek-V3's recipe, which caches the dispatched
    activations in FP8 and forms the router's gradient from the experts'
    own backward (memory.DEEPSEEK_V3_RECIPE)."""
    policy = memory.recompute_policy(recompute)
    return 1 if policy.name == "full" or policy.kind == "named" else 0


def eager_scores_hbm_s(lay, recompute, hbm_bytes_per_s):
    """Seconds per step one device spends moving eager attention's scores
    through HBM (the expectation only; a flash kernel keeps them on chip).
    Per layer and microbatch the forward writes Korthikanti et al.'s
    (2 + 3·dropout)·(a/tp)·(s/cp)·s·b bytes (softmax output, dropout mask and
    output) and the backward reads them back; a policy that recomputes the
    attention core writes them once more. Layers of the deepest stage, every
    microbatch of the step, at `hbm_bytes_per_s` (math_s passes the achieved
    bandwidth, the spec's times calibrate.HBM_EFFICIENCY).
    Ref: korthikanti2022reducing, narayanan2021megatron."""
    check_layout(lay)
    _validate.positive("hbm_bytes_per_s", hbm_bytes_per_s)
    m, mesh = lay.model, lay.mesh
    per_element = 2 + (3 if m.dropout else 0)
    scores = m.n_heads / mesh["tp"] * (lay.seq_len / mesh["cp"]) * lay.seq_len * lay.micro_batch_seqs
    policy = memory.recompute_policy(recompute)
    recomputes_core = policy.name in ("full", "selective") or (
        policy.kind == "named" and "context" not in policy.saves + policy.offloads
    )
    passes = 3 if recomputes_core else 2
    return passes * per_element * scores * lay.deepest * lay.n_micro / hbm_bytes_per_s


def hidden_terms(lay, bound=False):
    """The terms that hide behind the math: fsdp, cp and pp always; dp
    unless the run reduces its gradients only after the backward
    (grad_reduce_overlap False; the `bound` hides it anyway, since some
    implementation overlaps it); tp with tp_comm_overlap (collective
    matmul); tp and ep under ideal_overlap; ep under DualPipe, and where
    the accelerator's stack overlaps it (calibrate.EP_EXPOSED_FRACTION)."""

    check_layout(lay)
    hidden = {"fsdp", "cp", "pp"}
    if lay.grad_reduce_overlap or bound:  # the bound: some implementation overlaps it
        hidden.add("dp")
    if lay.ideal_overlap:
        hidden |= {"tp", "ep"}
    if lay.tp_comm_overlap:
        hidden.add("tp")
    if lay.schedule == "dualpipe" and lay.mesh["pp"] > 1:
        hidden.add("ep")
    if calibrate.ep_exposed_fraction(lay.accelerator) is not None:
        hidden.add("ep")  # the stack's scheduler overlaps the exchanges (calibrate.EP_EXPOSED_FRACTION)
    return hidden


# --- what stays exposed of a hidden collective -----------------------------------------------
# Megatron-Core's default gradient bucket: max(40,000,000, 1,000,000 × data-parallel size)
# parameters ("larger DP sizes need larger buckets to ensure collectives do not become
# latency-bound"). Ref: megatron-core-ddp (distributed_data_parallel_config.py, bucket_size).
BUCKET_PARAMS_MIN = 40_000_000
BUCKET_PARAMS_PER_DP_RANK = 1_000_000
# Schedules whose stage-boundary sends overlap the math: Megatron overlaps its p2p
# communication only in the interleaved schedule (overlap_p2p_comm is switched off
# otherwise: megatron-core-ddp, arguments.py); DualPipe overlaps it by construction
# (deepseek2024v3). The others send and receive blocking.
P2P_OVERLAP_SCHEDULES = ("interleaved", "dualpipe")


def fsdp_exposed_s(lay):
    """Seconds of FSDP traffic no math can cover: the first layer's weight
    all-gather (before the forward's first matmul) and the last layer's
    gradient reduce-scatter (after the backward's last). A step gathers
    each of its `deepest` layers 2·n_micro times (once when the weights are
    kept) and reduce-scatters it n_micro times; each other transfer
    overlaps the neighbouring layer's math (the framework prefetches the
    next layer's gather and reduces the previous layer's gradients while
    it computes). Calibrated rates and latency, one call each.
    Ref: zhao2023fsdp (PyTorch FSDP's backward and forward prefetch),
    scaling-book-sharding."""
    check_layout(lay)
    return _fsdp_s(lay, True, share=1.0 / lay.deepest, gathers=1, scatters=1)


def forward_math_share(lay, recompute):
    """The forward pass's share of a step's math: the model's forward
    FLOPs (a third of its training FLOPs: 2 of 6 per parameter and token,
    the scores' forward of their three) over the hardware FLOPs `recompute`
    runs, whose rerun forward belongs to the backward pass; the
    elementwise work is taken to split alike. Ref: korthikanti2022reducing."""
    check_layout(lay)
    m = lay.model
    model = training.model_flops_per_token(m, lay.seq_len, causal=True)
    return model / 3 / training.hardware_flops_per_token(m, lay.seq_len, recompute, causal=True)


def fsdp_uncovered_s(lay, recompute, math_s):
    """Seconds of FSDP traffic that no math can cover, layer by layer and
    pass by pass, given the step's expected math `math_s`: FSDP prefetches
    the next layer's weights while a layer computes and reduce-scatters its
    gradients while the layer before it computes its backward, so a
    layer's forward (its share of the math: forward_math_share, over the
    deepest stage's layers and the microbatches) covers one gather, and its
    backward one gather and one gradient reduce-scatter, which share the
    device's links. Where the weights are kept gathered, each layer's one
    gather meets the first microbatch's forward and every backward covers
    only a reduce-scatter. Each pass's transfers beyond its math stay
    exposed: with gradients reduced in FP32 (twice a BF16 gather's bytes)
    the backward's traffic can exceed the backward's math while the step's
    traffic stays under the step's math, which the step's total alone
    would take as hidden. At least the step's traffic less its math.
    Ref: zhao2023fsdp (backward and forward prefetch), pytorch-fsdp-notes,
    torchtitan-job-config (FSDP2 reduces in FP32), scaling-book-sharding."""
    check_layout(lay)
    _validate.positive("math_s", math_s)
    total = _fsdp_s(lay, True)
    if total == 0:
        return 0.0
    layers, micro = lay.deepest, lay.n_micro
    gather = _fsdp_s(lay, True, share=1.0 / layers, gathers=1, scatters=0)
    scatter = _fsdp_s(lay, True, share=1.0 / layers, gathers=0, scatters=1)
    per_layer = math_s / (layers * micro)
    forward = forward_math_share(lay, recompute) * per_layer
    backward = per_layer - forward
    if lay.keep_gathered_weights:
        uncovered = layers * max(0.0, gather - forward) + layers * micro * max(0.0, scatter - backward)
    else:
        uncovered = layers * micro * (max(0.0, gather - forward) + max(0.0, gather + scatter - backward))
    return max(uncovered, total - math_s)


def gradient_bucket_params(lay):
    """Parameters in one gradient bucket: Megatron-Core's default
    max(40·10⁶, 10⁶ × data-parallel size), the data-parallel size being
    every rank that holds a replica of a dense weight (dp·cp, and ep where
    it does not shard the dense weights). Ref: megatron-core-ddp."""
    check_layout(lay)
    dense_axes, _ = _dp_axes(lay)
    replicas = 1
    for placement in dense_axes:
        replicas *= placement.degree
    return max(BUCKET_PARAMS_MIN, BUCKET_PARAMS_PER_DP_RANK * replicas)


def dp_exposed_s(lay):
    """Seconds of the gradient reduction no math can cover when it overlaps
    the backward: the last bucket's reduction (and, with a distributed
    optimizer, the first bucket's weight all-gather), which starts only when
    the backward has produced its gradients. The device's parameters fill
    (dense_local + expert_local) / gradient_bucket_params buckets; where
    they fit in one, the whole reduction is exposed. Under ZeRO-3, FSDP over
    these ranks, as fsdp_exposed_s: one layer's gather and reduce-scatter.
    Calibrated.
    Ref: megatron-core-ddp; li2020pytorch (PyTorch DDP's 25 MB buckets)."""
    check_layout(lay)
    params = lay.dense_local + lay.expert_local
    if not params:
        return 0.0
    if lay.zero == 3:  # ZeRO-3 is FSDP over these ranks: one layer's gather and scatter (fsdp_exposed_s)
        return _dp_s(lay, True, share=1.0 / lay.deepest, last_only=True)
    share = min(1.0, gradient_bucket_params(lay) / params)
    return _dp_s(lay, True, share=share, last_only=True)


def pp_exposed_fraction(lay):
    """The share of the stage-boundary sends left on the critical path: all
    of them where the schedule sends blocking (1f1b, gpipe, zero_bubble);
    where it overlaps them (P2P_OVERLAP_SCHEDULES), the sends of the fill
    and drain, (p−1) forward and (p−1) backward, which no other
    microbatch's math covers, of the 2·v·m sends a stage makes per step.
    Ref: megatron-core-ddp (arguments.py: overlap_p2p_comm), narayanan2021megatron."""
    check_layout(lay)
    pp = lay.mesh["pp"]
    if pp == 1:
        return 0.0
    if lay.schedule not in P2P_OVERLAP_SCHEDULES:
        return 1.0
    return min(1.0, (pp - 1) / (lay.n_virtual * lay.n_micro))


def _share(exposed_s, total_s):
    return min(1.0, exposed_s / total_s) if total_s > 0 else 0.0


def exposed_fractions(lay):
    """The exposed fraction of each hidden term: fsdp, dp and pp derived
    from the layout (fsdp_exposed_s, dp_exposed_s, pp_exposed_fraction);
    cp, and tp and ep where they overlap, from calibrate.EXPOSED_FRACTION."""
    check_layout(lay)
    return {
        "fsdp": _share(fsdp_exposed_s(lay), _fsdp_s(lay, True)),
        "dp": _share(dp_exposed_s(lay), _dp_s(lay, True)),
        "cp": calibrate.exposed_fraction("cp"),
        "pp": pp_exposed_fraction(lay),
        "tp": calibrate.exposed_fraction("tp_overlapped"),
        "ep": _ep_exposed_fraction(lay),
    }


def _ep_exposed_fraction(lay):
    """ep_exposed_share of the layout: overlapped under DualPipe or ideal_overlap."""
    overlapped = lay.ideal_overlap or (lay.schedule == "dualpipe" and lay.mesh["pp"] > 1)
    return ep_exposed_share(lay.accelerator, overlapped)


def ep_exposed_share(accelerator, overlapped):
    """The exposed share of the expert exchanges where they hide: where the
    schedule overlaps them (DualPipe, ideal_overlap), EXPOSED_FRACTION's
    'ep_overlapped', else the stack's on `accelerator`
    (calibrate.EP_EXPOSED_FRACTION), the smaller of those that apply."""
    shares = [calibrate.exposed_fraction("ep_overlapped")] if overlapped else []
    stack = calibrate.ep_exposed_fraction(accelerator)
    if stack is not None:
        shares.append(stack)
    return min(shares, default=calibrate.exposed_fraction("ep_overlapped"))


_validate.guard_module(globals())
