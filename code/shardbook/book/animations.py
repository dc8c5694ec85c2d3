"""Animated diagrams of the book's mechanisms, as SVG with CSS animation
(no script): ring all-gather and reduce-scatter step by step, the
all-to-all, the four pipeline schedules from `pipeline.schedule`, FSDP's
prefetch timeline from `overlap.fsdp_step`, and ring attention's blocks.

Each writer takes its numbers from the cost-model function the prose uses
and returns an `svg.Figure` whose `numbers` holds them (tests compare them
with the functions); its static state, shown without motion and in print,
is the final frame.
"""

import math

from .. import attention, collectives, context, pipeline
from . import svg
from .svg import ACCENT, ACCENT2, CHUNK_COLORS, GREEN, INK, LIGHT, MUTED, Figure


def _size_text(n_bytes):
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:,.3g} {unit}"
    return f"{n_bytes:,.0f} B"


def _time_text(seconds):
    return f"{seconds * 1e3:,.3g} ms" if seconds >= 1e-3 else f"{seconds * 1e6:,.3g} µs"


def _ring_positions(n, cx, cy, rx, ry):
    return [
        (cx + rx * math.cos(-math.pi / 2 + 2 * math.pi * i / n), cy + ry * math.sin(-math.pi / 2 + 2 * math.pi * i / n))
        for i in range(n)
    ]


def _edge_points(a, b, half_w, half_h, gap=6):
    """Where the segment between box centres a and b leaves each box."""
    dx, dy = b[0] - a[0], b[1] - a[1]
    t = min((half_w + gap) / abs(dx) if dx else math.inf, (half_h + gap) / abs(dy) if dy else math.inf)
    return (a[0] + dx * t, a[1] + dy * t), (b[0] - dx * t, b[1] - dy * t)


def _offset(p, q, d):
    """Segment p-q shifted sideways by d (two opposite arrows side by side)."""
    dx, dy = q[0] - p[0], q[1] - p[1]
    length = math.hypot(dx, dy) or 1
    ox, oy = -dy / length * d, dx / length * d
    return (p[0] + ox, p[1] + oy), (q[0] + ox, q[1] + oy)


def _ring_figure(n, alt, title, numbers, slot_w=26):
    fig = Figure(640, 400, alt, n_frames=n + 1, numbers=numbers)  # start, n-1 steps, done
    fig.text(320, 22, title, size=15, anchor="middle", weight="bold")
    box_w, box_h = n * slot_w + 14, 56
    pos = _ring_positions(n, 320, 215, 215, 125)
    return fig, pos, box_w, box_h


def _device_box(fig, center, box_w, box_h, label):
    x, y = center[0] - box_w / 2, center[1] - box_h / 2
    fig.rect(x, y, box_w, box_h, fill="white", stroke=INK, rx=6, stroke_width=1)
    fig.text(x + 6, y + 15, label, size=12, fill=INK, weight="bold")
    return x, y


def _caption(fig, y, text, frames):
    """One centred line of text under a figure, shown in `frames`."""
    fig.text(320, y, text, size=13, anchor="middle", frames=frames)


def _ring_links(fig, pos, box_w, box_h):
    """The ring's links, faint, in every frame."""
    for i in range(len(pos)):
        p, q = _edge_points(pos[i], pos[(i + 1) % len(pos)], box_w / 2, box_h / 2)
        fig.line(*p, *q, stroke=LIGHT, stroke_width=1)


def _ring_arrows(fig, pos, box_w, box_h, step, chunk_of):
    """Step `step`'s arrows: device i to its right neighbour, coloured by the
    chunk `chunk_of(i)` it sends, shown in that step's frame only."""
    n = len(pos)
    for i in range(n):
        p, q = _edge_points(pos[i], pos[(i + 1) % n], box_w / 2, box_h / 2)
        fig.arrow(*p, *q, stroke=CHUNK_COLORS[chunk_of(i) % n % 8], frames=(step, step + 1), width=2.4, head=10)


def ring_all_gather(total_bytes, n, link_bytes_per_s, link_label):
    """A ring all-gather of a `total_bytes` buffer over n devices, one frame
    per step: device i starts with chunk i; at step s every device sends the
    chunk it received last to its right neighbour, over one link at
    `link_bytes_per_s` (described by `link_label`). After n−1 steps every
    device holds every chunk. Numbers: steps, chunk bytes, bytes each device
    sends (collectives.ring_bytes_sent_per_rank) and the time over one link
    (collectives.all_gather_s)."""
    steps = n - 1
    chunk = total_bytes / n
    sent = collectives.ring_bytes_sent_per_rank(total_bytes, n)
    seconds = collectives.all_gather_s(total_bytes, n, link_bytes_per_s)
    alt = (
        f"Animated ring all-gather on {n} devices arranged in a ring, each holding {n} chunk slots. "
        f"Device i starts with chunk i; in each of {steps} steps every device passes the chunk it received last "
        f"to its right neighbour. The final frame shows every device holding all {n} chunks."
    )
    numbers = {"steps": steps, "chunk_bytes": chunk, "bytes_sent_per_device": sent, "seconds": seconds}
    fig, pos, bw, bh = _ring_figure(n, alt, f"Ring all-gather, {n} devices", numbers)
    for d in range(n):
        x, y = _device_box(fig, pos[d], bw, bh, f"device {d}")
        for c in range(n):
            sx, sy = x + 7 + c * 26, y + 24
            fig.rect(sx, sy, 22, 22, fill="white", stroke=MUTED, stroke_width=0.8)
            arrives = (d - c) % n  # the frame (step) at which chunk c reaches device d
            fig.rect(sx, sy, 22, 22, fill=CHUNK_COLORS[c % 8], stroke=INK, frames=(arrives, None), stroke_width=0.8)
            fig.text(sx + 11, sy + 16, c, size=12, anchor="middle", fill="white", frames=(arrives, None))
            if arrives:  # outlined while it is the chunk that just arrived
                fig.rect(sx - 2, sy - 2, 26, 26, stroke=INK, frames=(arrives, arrives + 1), stroke_width=2.5)
    for s in range(1, n):
        _ring_arrows(fig, pos, bw, bh, s, lambda i, s=s: i - s + 1)
        _caption(
            fig,
            392,
            f"step {s} of {steps}: each device sends one chunk, {_size_text(chunk)}, to its right neighbour",
            (s, s + 1),
        )
    _ring_links(fig, pos, bw, bh)
    fig.text(320, 215 - 8, "ring", size=12, anchor="middle", fill=MUTED)
    _caption(fig, 392, f"start: device i holds chunk i of {_size_text(total_bytes)}", (0, 1))
    _caption(
        fig,
        392,
        f"done in {steps} steps: each device sent {_size_text(sent)}; {_time_text(seconds)} over one {link_label} link",
        (n, None),
    )
    return fig


def ring_reduce_scatter(total_bytes, n, link_bytes_per_s, link_label):
    """A ring reduce-scatter of a `total_bytes` buffer over n devices, one
    frame per step: every device starts with its own full buffer of n
    partial chunks; at step s device i sends its running sum of chunk
    (i − s) mod n to its right neighbour, which adds its own. After n−1 steps
    device i holds chunk i summed over all n devices. A slot shows how many
    devices' values its sum holds. Numbers as ring_all_gather (the time:
    collectives.reduce_scatter_s)."""
    steps = n - 1
    chunk = total_bytes / n
    sent = collectives.ring_bytes_sent_per_rank(total_bytes, n)
    seconds = collectives.reduce_scatter_s(total_bytes, n, link_bytes_per_s)
    alt = (
        f"Animated ring reduce-scatter on {n} devices in a ring. Each device starts with its own value of all {n} "
        f"chunks; in each of {steps} steps every device passes a running sum to its right neighbour, which adds its "
        f"own. A number in a slot counts the devices summed so far; the final frame shows device i holding chunk i "
        f"summed over all {n} devices."
    )
    numbers = {"steps": steps, "chunk_bytes": chunk, "bytes_sent_per_device": sent, "seconds": seconds}
    fig, pos, bw, bh = _ring_figure(n, alt, f"Ring reduce-scatter, {n} devices", numbers)
    for d in range(n):
        x, y = _device_box(fig, pos[d], bw, bh, f"device {d}")
        for c in range(n):
            sx, sy = x + 7 + c * 26, y + 24
            s = (d - 1 - c) % n  # the step at which device d receives chunk c's running sum
            color = CHUNK_COLORS[c % 8]
            if s == 0:  # a partial this device only sends
                fig.rect(sx, sy, 22, 22, fill=color, stroke=MUTED, opacity=0.35, stroke_width=0.8)
                fig.text(sx + 11, sy + 16, 1, size=12, anchor="middle", fill=INK)
                continue
            fig.rect(sx, sy, 22, 22, fill=color, stroke=MUTED, opacity=0.35, frames=(0, s), stroke_width=0.8)
            fig.text(sx + 11, sy + 16, 1, size=12, anchor="middle", fill=INK, frames=(0, s))
            full = s + 1 == n
            fig.rect(
                sx, sy, 22, 22, fill=color, stroke=INK, opacity=1 if full else 0.6, frames=(s, None), stroke_width=0.8
            )
            fig.text(sx + 11, sy + 16, s + 1, size=12, anchor="middle", fill="white", frames=(s, None))
            fig.rect(sx - 2, sy - 2, 26, 26, stroke=INK, frames=(s, s + 1), stroke_width=2.5)
            if full:
                fig.rect(sx - 2, sy - 2, 26, 26, stroke=INK, frames=(n, None), stroke_width=2.5)
    _ring_links(fig, pos, bw, bh)
    for s in range(1, n):
        _ring_arrows(fig, pos, bw, bh, s, lambda i, s=s: i - s)
        _caption(
            fig,
            392,
            f"step {s} of {steps}: each device sends a running sum, {_size_text(chunk)}, and adds its own",
            (s, s + 1),
        )
    _caption(fig, 392, f"start: every device holds its own {_size_text(total_bytes)}", (0, 1))
    _caption(
        fig,
        392,
        f"done: each device sent {_size_text(sent)}, holds chunk i summed; {_time_text(seconds)} on one {link_label} link",
        (n, None),
    )
    return fig


def all_to_all(local_bytes, n, egress_bytes_per_s, egress_label):
    """An all-to-all of `local_bytes` per device over n devices, drawn as
    pairwise exchanges (step k: device i sends its chunk for device i+k and
    receives the one from i−k; on a full mesh all steps run at once, each on
    its own link). Slot j of device i starts with the chunk i sends to j
    (coloured by its destination) and ends with the chunk j sent to i.
    Numbers: bytes each device sends, L·(n−1)/n, and the time
    (collectives.all_to_all_s at `egress_bytes_per_s`)."""
    sent = local_bytes * (n - 1) / n
    seconds = collectives.all_to_all_s(local_bytes, n, egress_bytes_per_s)
    alt = (
        f"Animated all-to-all on {n} devices. Each device starts with {n} chunks coloured by the device they are "
        f"for; in each of {n - 1} steps every device sends one chunk to the device k places along and receives one. "
        f"The final frame shows each device holding only chunks of its own colour, one from every device."
    )
    numbers = {"steps": n - 1, "chunk_bytes": local_bytes / n, "bytes_sent_per_device": sent, "seconds": seconds}
    fig = Figure(640, 410, alt, n_frames=n + 1, numbers=numbers)
    fig.text(320, 22, f"All-to-all, {n} devices", size=15, anchor="middle", weight="bold")
    slot_w = 34
    bw, bh = n * slot_w + 14, 58
    pos = _ring_positions(n, 320, 215, 205, 125)
    for d in range(n):
        x, y = _device_box(fig, pos[d], bw, bh, f"device {d}")
        for j in range(n):
            sx, sy = x + 7 + j * slot_w, y + 25
            fig.rect(sx, sy, slot_w - 4, 22, fill="white", stroke=MUTED, stroke_width=0.8)
            if j == d:  # its own share stays home
                fig.rect(sx, sy, slot_w - 4, 22, fill=CHUNK_COLORS[d % 8], stroke=INK, stroke_width=0.8)
                fig.text(sx + (slot_w - 4) / 2, sy + 16, f"{d}→{d}", size=12, anchor="middle", fill="white")
                continue
            leave = (j - d) % n  # step at which device d sends its chunk for j
            arrive = (d - j) % n  # step at which the chunk from j for d arrives
            fig.rect(sx, sy, slot_w - 4, 22, fill=CHUNK_COLORS[j % 8], stroke=INK, frames=(0, leave), stroke_width=0.8)
            fig.text(
                sx + (slot_w - 4) / 2, sy + 16, f"{d}→{j}", size=12, anchor="middle", fill="white", frames=(0, leave)
            )
            fig.rect(
                sx, sy, slot_w - 4, 22, fill=CHUNK_COLORS[d % 8], stroke=INK, frames=(arrive, None), stroke_width=0.8
            )
            fig.text(
                sx + (slot_w - 4) / 2,
                sy + 16,
                f"{j}→{d}",
                size=12,
                anchor="middle",
                fill="white",
                frames=(arrive, None),
            )
    for k in range(1, n):
        for i in range(n):
            target = (i + k) % n
            p, q = _edge_points(pos[i], pos[target], bw / 2, bh / 2)
            if 2 * k == n:
                p, q = _offset(p, q, 6)
            fig.arrow(*p, *q, stroke=CHUNK_COLORS[target % 8], frames=(k, k + 1), width=2.2, head=10)
        _caption(
            fig,
            400,
            f"step {k} of {n - 1}: device i sends its chunk for device i+{k} ({_size_text(local_bytes / n)})",
            (k, k + 1),
        )
    _caption(fig, 400, "start: chunk i→j is what device i has for device j", (0, 1))
    _caption(
        fig,
        400,
        f"done: each device sent {_size_text(sent)}; {_time_text(seconds)} at {egress_label} egress",
        (n, None),
    )
    return fig


PHASE_COLORS = {"F": ACCENT, "B": ACCENT2, "W": GREEN}


def pipeline_schedules(runs, n_stages, titles):
    """The schedules of `runs` ({kind: (ops, n_virtual)}, ops from
    `pipeline.schedule`) as stacked timelines on one time axis, filled as
    the simulated clock advances: forward blue, backward red, weight
    gradient green, a later virtual chunk lighter, the number the
    microbatch. `titles` names each kind. Numbers: each schedule's makespan
    and idle fraction (pipeline.simulated_bubble_fraction)."""
    span = max(max(o.end for o in ops) for ops, _ in runs.values())
    resolution = max(v for _, v in runs.values())  # frames per unit of time
    n_frames = int(round(span * resolution)) + 1
    left, right = 64, 628
    unit = (right - left) / span
    row_h, gap_title = 17, 22
    block_h = gap_title + n_stages * row_h + 12
    numbers = {}
    alt = (
        f"Animated timelines of {len(runs)} pipeline schedules for {n_stages} stages, drawn as the simulated clock "
        "advances: " + "; ".join(titles[k] for k in runs) + ". Forward boxes are blue, backward red, weight-gradient "
        "green, numbered by microbatch; blank space is idle time. The final frame shows every schedule complete."
    )
    fig = Figure(640, 30 + block_h * len(runs) + 40, alt, n_frames=n_frames, seconds_per_frame=0.25, numbers=numbers)
    for phase, color in PHASE_COLORS.items():
        fig.style(f"p{phase}", f"fill:{color};stroke:#fff;stroke-width:.6")
    fig.style("n", "fill:#fff;font-size:12px;text-anchor:middle")
    fig.style("c", "stroke:#1a1a1a;stroke-width:1.5")
    top = 8
    for kind, (ops, v) in runs.items():
        bubble = pipeline.simulated_bubble_fraction(ops, n_stages)
        makespan = max(o.end for o in ops)
        numbers[kind] = {"makespan": makespan, "bubble_fraction": bubble}
        fig.text(left, top + 16, f"{titles[kind]}: idle {bubble:.1%} of device time", size=13, weight="bold")
        y0 = top + gap_title
        for s in range(n_stages):
            fig.text(left - 6, y0 + s * row_h + 13, f"stage {s}", size=12, anchor="end")
            fig.rect(left, y0 + s * row_h, right - left, row_h - 2, fill="#f5f5f5")
        for o in ops:
            x, w = left + o.start * unit, (o.end - o.start) * unit
            frame = int(round(o.start * resolution))
            opacity = 1.0 - 0.4 * o.chunk if v > 1 else None
            fig.rect(x, y0 + o.device * row_h, w, row_h - 2, cls=f"p{o.phase}", frames=(frame, None), opacity=opacity)
            if w >= 13:
                fig.text(x + w / 2, y0 + o.device * row_h + 12.5, o.microbatch + 1, cls="n", frames=(frame, None))
        top += block_h
    axis_y = top + 4
    fig.line(left, axis_y, right, axis_y, stroke=INK, stroke_width=0.8)
    for t in range(0, int(span) + 1, 5 if span > 20 else 2):
        fig.line(left + t * unit, axis_y, left + t * unit, axis_y + 4, stroke=INK)
        fig.text(left + t * unit, axis_y + 17, t, size=12, anchor="middle")
    fig.text(right, axis_y + 34, "time (one unit: one stage's forward of one microbatch)", size=12, anchor="end")
    for f in range(n_frames - 1):  # the clock: a line sweeping the timelines
        x = left + f / resolution * unit
        fig.line(x, 30, x, axis_y, stroke=None, frames=(f, f + 1), cls="c")
    return fig


STREAM_COLORS = {"forward": ACCENT, "backward": ACCENT2, "gather": "#616161", "reduce_scatter": GREEN}


def fsdp_prefetch(steps, n_frames=41):
    """FSDP steps (`steps`: {prefetch depth: overlap.fsdp_step(...)}) as two
    rows each, compute above communication, on one time axis in ms, filled
    as the clock advances: forwards blue, backwards red, gathers grey,
    reduce-scatters green, numbered by layer. Numbers: each step's time and
    exposed communication (FsdpStep.step_s, .exposed_comm_s)."""
    span = max(step.step_s for step in steps.values())
    left, right = 120, 628
    scale = (right - left) / span
    row_h, block_h = 24, 2 * 24 + 34
    numbers = {k: {"step_s": st.step_s, "exposed_comm_s": st.exposed_comm_s} for k, st in steps.items()}
    alt = (
        "Animated FSDP step timelines, each with a compute row above a communication row, "
        + " and ".join(f"prefetch depth {k}" for k in steps)
        + ". Gathers (grey) run before each layer's forward (blue) and backward (red); reduce-scatters (green) follow "
        "each backward. With prefetch each gather runs under the previous layer's math and the compute row has gaps "
        "only at the start of each pass and at the end. The final frame shows the whole step."
    )
    fig = Figure(640, 12 + block_h * len(steps) + 34, alt, n_frames=n_frames, seconds_per_frame=0.2, numbers=numbers)
    for kind, color in STREAM_COLORS.items():
        fig.style(kind[0], f"fill:{color};stroke:#fff;stroke-width:.6")
    fig.style("n", "fill:#fff;font-size:12px;text-anchor:middle")
    fig.style("c", "stroke:#1a1a1a;stroke-width:1.5")
    top = 6
    for k, step in steps.items():
        share = step.exposed_comm_s / step.step_s
        fig.text(
            left,
            top + 16,
            f"prefetch {k}: step {_time_text(step.step_s)}, communication exposed {share:.0%}",
            size=13,
            weight="bold",
        )
        y0 = top + 24
        for r, name in enumerate(("compute", "communication")):
            fig.text(left - 6, y0 + r * row_h + 16, name, size=12, anchor="end")
            fig.rect(left, y0 + r * row_h, right - left, row_h - 2, fill="#f5f5f5")
        for o in step.ops:
            x, w = left + o.start_s * scale, (o.end_s - o.start_s) * scale
            frame = min(int(o.start_s / span * (n_frames - 1)), n_frames - 1)
            y = y0 + (0 if o.stream == "compute" else row_h)
            fig.rect(x, y, w, row_h - 2, cls=o.kind[0], frames=(frame, None))
            if w >= 14:
                fig.text(x + w / 2, y + 16, o.layer, cls="n", frames=(frame, None))
        top += block_h
    axis_y = top
    fig.line(left, axis_y, right, axis_y, stroke=INK, stroke_width=0.8)
    ticks = _nice_ticks(span * 1e3)
    for t in ticks:
        fig.line(left + t / 1e3 * scale, axis_y, left + t / 1e3 * scale, axis_y + 4, stroke=INK)
        fig.text(left + t / 1e3 * scale, axis_y + 17, f"{t:g}", size=12, anchor="middle")
    fig.text(left - 6, axis_y + 17, "ms", size=12, anchor="end")
    for f in range(n_frames - 1):
        x = left + f / (n_frames - 1) * (right - left)
        fig.line(x, 24, x, axis_y, stroke=None, frames=(f, f + 1), cls="c")
    return fig


def _nice_ticks(span):
    raw = span / 5
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 5, 10)), key=lambda s: abs(s - raw))
    return [i * step for i in range(int(span / step) + 1)]


def ring_attention(n_ranks, seq_len, n_kv_heads, head_dim, link_bytes_per_s, bytes_per_element=2):
    """Ring attention with a causal mask, one frame per step: rank i keeps
    query block i; the K/V blocks travel round the ring, so at step s rank i
    holds K/V block (i − s) mod n and computes the (query i, key i − s)
    block of the scores if the mask allows it (key block ≤ query block),
    else it has nothing to do. Numbers: K/V bytes one rank sends per hop and
    in all (context.kv_exchange_bytes_per_rank), the hop's time on one link,
    and the blocks each rank computes (attention.causal_pairs_per_rank with
    one position per block, contiguous)."""
    n = n_ranks
    total = context.kv_exchange_bytes_per_rank(seq_len, n_kv_heads, head_dim, n, bytes_per_element)
    hop = total / (n - 1)
    blocks = attention.causal_pairs_per_rank(n, n, "contiguous")
    numbers = {"steps": n, "hops": n - 1, "hop_bytes": hop, "bytes_sent_per_rank": total,
               "hop_seconds": hop / link_bytes_per_s, "blocks_per_rank": blocks}  # fmt: skip
    alt = (
        f"Animated ring attention on {n} ranks: a {n} by {n} grid of query blocks (rows, one per rank) against key "
        f"blocks (columns). At each of {n} steps every rank computes the block for the key/value chunk it holds and "
        f"passes that chunk to the next rank; blocks above the diagonal are masked and skipped. The final frame shows "
        f"the lower triangle computed, rank i doing i + 1 blocks."
    )
    cell = min(300 / n, 44)
    fig = Figure(
        640, 60 + n * cell + 80, alt, n_frames=n + 2, seconds_per_frame=1.0, numbers=numbers
    )  # start, n steps, done
    fig.text(320, 22, f"Ring attention, {n} ranks, causal mask", size=15, anchor="middle", weight="bold")
    gx, gy = 150, 60
    fig.text(gx + n * cell / 2, gy - 8, "key / value block", size=12, anchor="middle")
    fig.text(gx - 8, gy - 8, "rank (queries)", size=12, anchor="end")
    for i in range(n):
        fig.text(gx - 8, gy + i * cell + cell / 2 + 4, f"rank {i}", size=12, anchor="end")
        fig.text(gx + i * cell + cell / 2, gy + n * cell + 16, i, size=12, anchor="middle")
        for j in range(n):
            masked = j > i
            fig.rect(gx + j * cell, gy + i * cell, cell - 2, cell - 2, fill=LIGHT if masked else "white",
                     stroke=MUTED, stroke_width=0.6)  # fmt: skip
            step = (i - j) % n  # the step at which rank i holds K/V block j
            if masked:
                fig.rect(gx + j * cell, gy + i * cell, cell - 2, cell - 2, stroke=INK, stroke_width=2,
                         frames=(step + 1, step + 2))  # fmt: skip
                continue
            fig.rect(gx + j * cell, gy + i * cell, cell - 2, cell - 2, fill=CHUNK_COLORS[j % 8], stroke=INK,
                     stroke_width=0.6, frames=(step + 1, None))  # fmt: skip
            fig.rect(gx + j * cell, gy + i * cell, cell - 2, cell - 2, stroke=INK, stroke_width=2.5,
                     frames=(step + 1, step + 2))  # fmt: skip
    # the ring of ranks beside the grid, with the K/V chunk each holds
    rx = gx + n * cell + 70
    for i in range(n):
        y = gy + i * cell + cell / 2
        fig.text(rx - 6, y + 4, f"rank {i} holds", size=12, anchor="end")
        for s in range(n):
            j = (i - s) % n
            fig.box(rx + 4, y - 11, 34, 22, f"KV{j}", fill=CHUNK_COLORS[j % 8], size=12,
                    frames=(s + 1, s + 2 if s < n - 1 else None))  # fmt: skip
    for s in range(1, n + 1):
        _caption(
            fig, gy + n * cell + 66,
            f"step {s} of {n}: each rank computes one block" + (f", then sends its K/V chunk on ({_size_text(hop)})" if s < n else ""),
            (s, s + 1),
        )  # fmt: skip
    _caption(fig, gy + n * cell + 66, f"done after {n} steps: every unmasked block computed", (n + 1, None))
    _caption(fig, gy + n * cell + 66, "start: rank i holds query block i and K/V block i", (0, 1))
    fig.text(320, gy + n * cell + 40,
             f"each rank sends {_size_text(total)} in {n - 1} hops; rank i computes i + 1 of {n} blocks",
             size=13, anchor="middle")  # fmt: skip
    return fig


__all__ = [
    "all_to_all",
    "fsdp_prefetch",
    "pipeline_schedules",
    "ring_all_gather",
    "ring_attention",
    "ring_reduce_scatter",
    "svg",
]
