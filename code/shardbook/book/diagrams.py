"""Static diagrams of the book's machines and layouts, as compact SVG
(`svg.Figure`): torus slices, two-tier clusters, rails, TPU slices over
DCN, device meshes, the Megatron MLP split, expert dispatch, ZeRO's state
per device, pipeline stages, and a bar chart whose values the caller
computes with the cost model. Each takes its numbers from the package and
keeps them in `numbers`.
"""

from .. import fabric, hardware, memory
from .svg import ACCENT, ACCENT2, CHUNK_COLORS, GREEN, INK, LIGHT, MUTED, ORANGE, PURPLE, Figure


def _gbs(bytes_per_s):
    return f"{bytes_per_s / 1e9:,.4g} GB/s"


def _wraparound(fig, wraps, ox, oy, nx, ny, step):
    """The wraparound links of the axes in `wraps` that close, drawn as
    dashed stubs leaving both end chips of each row (axis 0) or column
    (axis 1): the two stubs are one link, from one end to the other."""
    dashed = dict(stroke=ACCENT2, stroke_width=1.6, stroke_dasharray="4 3")
    right, bottom = ox + (nx - 1) * step, oy + (ny - 1) * step
    if wraps[0]:
        for j in range(ny):
            y = oy + j * step
            fig.line(ox - 18, y, ox - 38, y, **dashed)
            fig.line(right + 18, y, right + 38, y, **dashed)
    if wraps[1]:
        for i in range(nx):
            xx = ox + i * step
            fig.line(xx, oy - 12, xx, oy - 30, **dashed)
            fig.line(xx, bottom + 12, xx, bottom + 30, **dashed)


def torus_slice(accelerator, slice_shape, title, x=0, fig=None, numbers_key=None):
    """A 2D slice (or one face, the first two axes, of a 3D slice) of a TPU
    torus: ICI links to neighbours, and the wraparound link of an axis drawn
    (dashed, red) only where `fabric.has_wraparound` says that axis closes.
    Draws into `fig` at offset x when given (two panels side by side)."""
    acc = hardware.get(accelerator)
    nx, ny = slice_shape[0], slice_shape[1]
    wraps = [fabric.has_wraparound(acc, slice_shape, axis) for axis in (0, 1)]
    own = fig is None
    if own:
        fig = Figure(320, 340, f"A {nx} by {ny} grid of {acc.name} chips, each linked to its neighbours; "
                     + ("wraparound links close every row and column." if all(wraps) else "no wraparound links."))  # fmt: skip
    fig.numbers[numbers_key or acc.name] = {"slice_shape": tuple(slice_shape), "wraparound": tuple(wraps)}
    step = 52
    ox, oy = x + 82, 88
    fig.text(x + 160, 24, title, size=13, anchor="middle", weight="bold")
    shape_text = " × ".join(map(str, slice_shape))
    fig.text(x + 160, 44, f"{acc.name} slice {shape_text}", size=12, anchor="middle")
    for i in range(nx):
        for j in range(ny):
            if i + 1 < nx:
                fig.line(ox + i * step, oy + j * step, ox + (i + 1) * step, oy + j * step, stroke=INK, stroke_width=1.4)
            if j + 1 < ny:
                fig.line(ox + i * step, oy + j * step, ox + i * step, oy + (j + 1) * step, stroke=INK, stroke_width=1.4)
    _wraparound(fig, wraps, ox, oy, nx, ny, step)
    for i in range(nx):
        for j in range(ny):
            fig.box(ox + i * step - 18, oy + j * step - 12, 36, 24, f"{i},{j}", size=12)
    if any(wraps):
        lines, color = ("dashed: wraparound, each row", "and column closes into a ring"), ACCENT2
    else:
        lines, color = ("no wraparound: a row's or column's", "end chips have one link on it"), INK
    for k, line in enumerate(lines):
        fig.text(x + 160, oy + (ny - 1) * step + 50 + 16 * k, line, size=12, anchor="middle", fill=color)
    return fig


def torus_slices(panels, alt):
    """Two torus_slice panels side by side: `panels` is [(accelerator,
    slice_shape, title), ...]."""
    fig = Figure(640, 340, alt)
    for k, (acc, shape, title) in enumerate(panels):
        torus_slice(acc, shape, title, x=320 * k, fig=fig, numbers_key=f"{hardware.get(acc).name} {shape}")
    return fig


def two_tier(accelerator, n_nodes, shown_per_node=4):
    """n nodes of one GPU model: inside each, the scale-up fabric (a bar
    standing for its switches or mesh); each GPU's NIC to a scale-out
    network above. Labels: per-GPU scale-up egress and NIC rate from the
    preset, and their ratio."""
    acc = hardware.get(accelerator)
    per_node = int(acc.scale_up_domain_size)
    up, out = acc.scale_up_egress_bytes_per_s, acc.scale_out_bytes_per_s
    numbers = {"scale_up_egress_bytes_per_s": up, "scale_out_bytes_per_s": out, "ratio": up / out, "per_node": per_node}
    alt = (
        f"{n_nodes} nodes of {per_node} {acc.name} GPUs. Inside a node the GPUs share a fast scale-up network "
        f"({_gbs(up)} per GPU); each GPU also has a NIC to the scale-out network ({_gbs(out)}), "
        f"{up / out:.0f} times slower."
    )
    fig = Figure(640, 300, alt, numbers=numbers)
    fig.box(100, 14, 440, 34, "scale-out network: one NIC per GPU, leaf and spine", fill=PURPLE, size=13)
    node_w = 600 / n_nodes
    for k in range(n_nodes):
        x0 = 20 + k * node_w
        fig.rect(x0 + 6, 110, node_w - 12, 150, fill="#f5f5f5", stroke=INK, rx=8)
        fig.text(x0 + node_w / 2, 130, f"node {k}: {per_node} GPUs", size=12, anchor="middle", weight="bold")
        gw = (node_w - 24) / shown_per_node
        for g in range(shown_per_node):
            gx = x0 + 12 + g * gw
            label = f"{g}" if g < shown_per_node - 1 or shown_per_node == per_node else f"{per_node - 1}"
            fig.box(gx + 2, 150, gw - 4, 28, label, size=12)
            fig.line(gx + gw / 2, 150, gx + gw / 2, 48, stroke=PURPLE, stroke_width=1)
            fig.line(gx + gw / 2, 178, gx + gw / 2, 200, stroke=GREEN, stroke_width=3)
        fig.rect(x0 + 12, 200, node_w - 24, 16, fill=GREEN, rx=3)
        fig.text(x0 + node_w / 2, 240, "scale-up fabric", size=12, anchor="middle", fill=GREEN)
    fig.text(320, 282, f"per GPU: {_gbs(up)} inside the node, {_gbs(out)} through its NIC ({up / out:.0f}×)", size=13,
             anchor="middle")  # fmt: skip
    return fig


def rails(n_nodes, per_node, groups=(), group_label=""):
    """A rail-optimized network: GPU j of every node connects to leaf switch
    (rail) j. `groups` (lists of global device ids, node-major) are outlined
    green where their members share a local rank (they stay on one rail) and
    red where they do not (they leave their rails; see
    fabric.rail_misaligned_groups)."""
    grid = [[node * per_node + j for j in range(per_node)] for node in range(n_nodes)]
    misaligned = [g for g in groups if len({d % per_node for d in g}) > 1]
    numbers = {"misaligned_groups": misaligned, "rails": per_node}
    alt = (
        f"{n_nodes} nodes of {per_node} GPUs drawn as rows; GPU j of every node connects to rail switch j above, so a "
        f"group of GPUs with the same local rank crosses nodes on one rail. Outlined: {group_label or 'no group'}."
    )
    fig = Figure(640, 80 + 46 * n_nodes + 36, alt, numbers=numbers)
    cw = 560 / per_node
    for j in range(per_node):
        fig.box(70 + j * cw + 4, 10, cw - 8, 26, f"rail {j}", fill=PURPLE, size=12)
    for node, row in enumerate(grid):
        y = 70 + node * 46
        fig.text(62, y + 18, f"node {node}", size=12, anchor="end")
        for j, d in enumerate(row):
            x = 70 + j * cw + cw / 2
            fig.line(x, 36, x, y, stroke=LIGHT, stroke_width=1)
            fig.box(x - cw / 2 + 6, y, cw - 12, 26, f"GPU {d}", size=12)
    for g in groups:
        xs = [70 + (d % per_node) * cw + cw / 2 for d in g]
        ys = [70 + (d // per_node) * 46 + 31 for d in g]  # just under the boxes
        color = ACCENT2 if g in misaligned else GREEN
        fig.path("M" + "L".join(f"{x:.0f} {y:.0f}" for x, y in zip(xs, ys, strict=False)), stroke=color, stroke_width=3,
                 opacity=0.8)  # fmt: skip
        for x, y in zip(xs, ys, strict=True):
            fig.circle(x, y, 4, fill=color)
    if group_label:
        fig.text(320, 80 + 46 * n_nodes + 22, group_label, size=12, anchor="middle")
    return fig


def tpu_slices(accelerator, n_slices, slice_label):
    """n TPU slices (each a torus of chips over ICI) joined by the
    data-center network: per-chip ICI and DCN rates from the preset."""
    acc = hardware.get(accelerator)
    ici, dcn = acc.scale_up_egress_bytes_per_s, acc.scale_out_bytes_per_s
    numbers = {"ici_bytes_per_s": ici, "dcn_bytes_per_s": dcn, "ratio": ici / dcn,
               "axis_ratio": acc.collective_bytes_per_s / dcn}  # fmt: skip
    alt = (
        f"{n_slices} {acc.name} slices, each a grid of chips joined by ICI ({_gbs(ici)} per chip), connected to each "
        f"other only through the data-center network (about {_gbs(dcn)} per chip, {ici / dcn:.0f} times less)."
    )
    fig = Figure(640, 270, alt, numbers=numbers)
    fig.box(120, 14, 400, 34, "data-center network (DCN)", fill=PURPLE, size=13)
    w = 600 / n_slices
    for k in range(n_slices):
        x0 = 20 + k * w
        fig.rect(x0 + 8, 90, w - 16, 130, fill="#f5f5f5", stroke=INK, rx=8)
        fig.text(x0 + w / 2, 108, f"slice {k}: {slice_label}", size=12, anchor="middle", weight="bold")
        cols = 4 if w >= 170 else 3
        for i in range(cols):
            for j in range(3):
                cx, cy = x0 + w / 2 - 18 * cols + 6 + i * 36, 128 + j * 28
                if i < cols - 1:
                    fig.line(cx + 12, cy + 9, cx + 36, cy + 9, stroke=GREEN, stroke_width=2)
                if j < 2:
                    fig.line(cx + 12, cy + 18, cx + 12, cy + 28, stroke=GREEN, stroke_width=2)
                fig.rect(cx, cy, 24, 18, fill=ACCENT, stroke=INK, rx=3)
        fig.line(x0 + w / 2, 90, x0 + w / 2, 48, stroke=PURPLE, stroke_width=2)
    fig.text(320, 244, f"per chip: ICI {_gbs(ici)} inside a slice (green), DCN about {_gbs(dcn)} between slices",
             size=13, anchor="middle")  # fmt: skip
    axis = acc.collective_bytes_per_s  # one wrapped torus axis: its two links
    fig.text(320, 262, f"a byte across slices costs up to {ici / dcn:.0f} bytes inside ({axis / dcn:.0f} on one torus axis)",
             size=12, anchor="middle")  # fmt: skip
    return fig


def device_mesh(shape, axis_names, title, device_ids=None, alt=None):
    """A 2D mesh of devices (rows: axis 0, columns: axis 1), labelled with
    device ids; the groups of axis 1 (rows) outlined in one colour each, and
    axis 0's groups (columns) marked by a shared letter."""
    rows, cols = shape
    ids = device_ids or [[r * cols + c for c in range(cols)] for r in range(rows)]
    groups_rows = fabric.groups_along(ids, 1)
    groups_cols = fabric.groups_along(ids, 0)
    alt = alt or (
        f"A {rows} by {cols} grid of devices: mesh axis {axis_names[0]!r} runs down the columns, {axis_names[1]!r} "
        f"along the rows; each row is one {axis_names[1]} group and each column one {axis_names[0]} group."
    )
    fig = Figure(min(640, 120 + cols * 70), 70 + rows * 46 + 20, alt,
                 numbers={"groups": {axis_names[1]: groups_rows, axis_names[0]: groups_cols}})  # fmt: skip
    fig.text(fig.width / 2, 20, title, size=13, anchor="middle", weight="bold")
    fig.text(110 + cols * 35, 44, f"{axis_names[1]} →", size=12, anchor="middle")
    fig.text(50, 70 + rows * 23, f"{axis_names[0]} ↓", size=12, anchor="middle")
    for r in range(rows):
        fig.rect(100, 56 + r * 46, cols * 70 + 10, 40, fill=CHUNK_COLORS[r % 8], opacity=0.15, rx=6)
        for c in range(cols):
            fig.box(108 + c * 70, 62 + r * 46, 56, 28, f"d{ids[r][c]}", fill=CHUNK_COLORS[r % 8], size=12)
    return fig


HBARS_WIDTH_PX = 400  # narrow enough for a phone's column (about 350 px) to keep 12 px text above 10 px


def _wrap(text, chars):
    """`text` in lines of at most about `chars` characters, broken between words."""
    lines, line = [], ""
    for word in str(text).split():
        if line and len(line) + 1 + len(word) > chars:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return [*lines, line] if line else lines


def hbars(labels, values, unit, title, alt, highlight=(), digits=1, limit=None, limit_label=""):
    """Horizontal bars with their values (already in `unit`), the bars
    named in `highlight` red; an optional dashed `limit` line (a device's
    memory, a budget). The caller computes `values` with the cost model.
    Each bar's name is above it, so the figure is HBARS_WIDTH_PX wide and a
    phone shows it whole with its text at least 10 px."""
    if len(labels) != len(values):
        raise ValueError(f"values: one per label ({len(labels)}), got {len(values)}")
    width = HBARS_WIDTH_PX
    row_h = 38
    left = 12
    texts = [f"{v:,.{digits}f} {unit}" for v in values]
    right = width - 12 - max(len(s) for s in texts) * 7.2
    title_lines = _wrap(title, 46)
    top = 12 + 17 * len(title_lines)
    fig = Figure(width, top + row_h * len(labels) + (34 if limit else 8), alt,
                 numbers={"values": dict(zip(labels, values, strict=False))})  # fmt: skip
    for k, line in enumerate(title_lines):
        fig.text(width / 2, 20 + 17 * k, line, size=13, anchor="middle", weight="bold")
    vmax = max(max(values), limit or 0) or 1
    scale = (right - left) / vmax
    for k, (lab, v, text) in enumerate(zip(labels, values, texts, strict=False)):
        y = top + k * row_h
        fig.text(left, y + 14, lab, size=12)
        fig.rect(left, y + 19, max(v * scale, 1), 14, fill=ACCENT2 if lab in highlight else ACCENT)
        fig.text(left + v * scale + 4, y + 31, text, size=12)
    if limit:
        x = left + limit * scale
        bottom = top + row_h * len(labels)
        fig.line(x, top + 2, x, bottom + 2, stroke=MUTED, stroke_dasharray="5 3", stroke_width=1.4)
        anchor = "end" if x > width * 0.6 else ("start" if x < width * 0.3 else "middle")
        fig.text(x, bottom + 20, limit_label, size=12, anchor=anchor, fill=INK)
    return fig


def step_bars(labels, expected, bound, unit, title, alt, highlight=(), digits=2):
    """Horizontal bars of each candidate's expected step time (already in
    `unit`), with its bound drawn as a dark tick inside the bar: how far a
    calibrated step sits above the optimistic one. The caller computes both
    with the planner (`Candidate.expected_step_s`, `Candidate.step_s`)."""
    if not len(labels) == len(expected) == len(bound):
        raise ValueError(
            f"expected, bound: one of each per label ({len(labels)}), got {len(expected)} and {len(bound)}"
        )
    bar_h = 26
    left = min(12 + max(len(str(lab)) for lab in labels) * 7.2, 300)
    right, top = 540, 40
    fig = Figure(640, top + bar_h * len(labels) + 44, alt,
                 numbers={"expected": dict(zip(labels, expected, strict=True)),
                          "bound": dict(zip(labels, bound, strict=True))})  # fmt: skip
    fig.text(320, 22, title, size=13, anchor="middle", weight="bold")
    scale = (right - left) / (max(max(expected), max(bound)) or 1)
    for k, (lab, e, b) in enumerate(zip(labels, expected, bound, strict=True)):
        y = top + k * bar_h
        fig.text(left - 6, y + 17, lab, size=12, anchor="end")
        fig.rect(left, y + 3, max(e * scale, 1), bar_h - 6, fill=ACCENT2 if lab in highlight else ACCENT)
        fig.line(left + b * scale, y + 1, left + b * scale, y + bar_h - 1, stroke=INK, stroke_width=3)
        fig.text(left + max(e, b) * scale + 4, y + 17, f"{e:,.{digits}f} {unit}", size=12)
    y = top + bar_h * len(labels) + 24
    fig.line(left, y - 4, left, y + 8, stroke=INK, stroke_width=3)
    fig.text(left + 8, y + 6, "bound (peak FLOP/s, every overlappable transfer hidden)", size=12)
    return fig


def zero_stages(n_params, n_shards, hbm_bytes, model_label, param_bytes=2, grad_bytes=2, optimizer_bytes=12):
    """What one device holds under DP and ZeRO stages 1-3: parameters,
    gradients and optimizer state stacked, each from
    memory.state_bytes_per_device, beside the device's memory."""
    schemes = ("dp", "zero1", "zero2", "zero3")
    names = {"dp": "DP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3 / FSDP"}
    parts = {}
    for s in schemes:
        p = memory.state_bytes_per_device(n_params, s, n_shards, param_bytes, 0, 0)
        g = memory.state_bytes_per_device(n_params, s, n_shards, 0, grad_bytes, 0)
        o = memory.state_bytes_per_device(n_params, s, n_shards, 0, 0, optimizer_bytes)
        parts[s] = (p, g, o)
    totals = {
        s: memory.state_bytes_per_device(n_params, s, n_shards, param_bytes, grad_bytes, optimizer_bytes)
        for s in schemes
    }
    alt = (
        f"Stacked bars of the training state one device holds for {model_label} over {n_shards} devices: DP keeps "
        "parameters, gradients and optimizer state whole; ZeRO-1 shards the optimizer state, ZeRO-2 also the "
        "gradients, ZeRO-3 everything. A dashed line marks the device's memory."
    )
    fig = Figure(640, 220, alt, numbers={"totals_bytes": totals, "parts_bytes": parts})
    fig.text(320, 20, f"State per device, {model_label}, {n_shards} shards", size=13, anchor="middle", weight="bold")
    left, right = 120, 560
    vmax = max(max(totals.values()), hbm_bytes)
    scale = (right - left) / vmax
    colors = (ACCENT, ORANGE, GREEN)
    for k, s in enumerate(schemes):
        y = 36 + k * 34
        fig.text(left - 6, y + 19, names[s], size=12, anchor="end")
        x = left
        for part, color in zip(parts[s], colors, strict=False):
            fig.rect(x, y + 4, part * scale, 24, fill=color)
            x += part * scale
        fig.text(x + 4, y + 21, f"{totals[s] / 1e9:,.0f} GB", size=12)
    hx = left + hbm_bytes * scale
    fig.line(hx, 32, hx, 176, stroke=MUTED, stroke_dasharray="5 3", stroke_width=1.4)
    fig.text(hx - 4, 190, f"device memory {hbm_bytes / 1e9:,.0f} GB", size=12, anchor="end")
    for k, (name, color) in enumerate(zip(("parameters", "gradients", "optimizer state"), colors, strict=False)):
        fig.rect(150 + k * 150, 200, 14, 14, fill=color)
        fig.text(170 + k * 150, 212, name, size=12)
    return fig


def tp_mlp(n, d_model, d_ff, tokens, bytes_per_element=2):
    """The Megatron MLP on n devices: X (tokens × D) replicated, W_in split
    by columns (D × F/n), the activation local, W_out split by rows
    (F/n × D), partial outputs summed by one all-reduce. Numbers: the
    all-reduce's buffer, tokens·D·bytes."""
    ar = tokens * d_model * bytes_per_element
    alt = (
        f"The tensor-parallel MLP on {n} devices: each holds all of X, a column slice of W_in and a row slice of W_out, "
        "computes its slice of the hidden activation without communication, and the partial outputs are summed by "
        "one all-reduce."
    )
    fig = Figure(640, 70 + 52 * n + 30, alt, numbers={"all_reduce_bytes": ar, "local_ff": d_ff // n})
    heads = ("X [B, D]", f"W_in [D, F/{n}]", f"H [B, F/{n}]", f"W_out [F/{n}, D]", "partial Y [B, D]")
    xs = (20, 130, 250, 370, 490)
    for x, h in zip(xs, heads, strict=False):
        fig.text(x + 50, 24, h, size=12, anchor="middle", weight="bold")
    for d in range(n):
        y = 40 + d * 52
        color = CHUNK_COLORS[d % 8]
        fig.text(8, y + 24, f"{d}", size=12)
        fig.box(20 + 4, y, 92, 36, "whole", fill=MUTED, size=12)
        fig.box(130 + 4, y, 92, 36, f"cols {d}", fill=color, size=12)
        fig.box(250 + 4, y, 92, 36, "local", fill=color, size=12)
        fig.box(370 + 4, y, 92, 36, f"rows {d}", fill=color, size=12)
        fig.box(490 + 4, y, 92, 36, f"part {d}", fill=color, size=12)
        for a, b in ((116, 134), (226, 254), (346, 374), (466, 494)):
            fig.arrow(a, y + 18, b, y + 18, stroke=INK, width=1, head=5)
    y_end = 40 + n * 52
    fig.rect(490, 36, 100, y_end - 36, stroke=ACCENT2, stroke_width=2, rx=6, stroke_dasharray="5 3")
    fig.text(540, y_end + 18, f"all-reduce {ar / 1e6:,.3g} MB", size=12, anchor="middle", fill=ACCENT2)
    fig.text(180, y_end + 18, "no communication until the sum", size=12, anchor="middle")
    return fig


def expert_dispatch(n_devices, experts_per_device, routes, top_k):
    """Expert parallelism on n devices: tokens (one row per device) each
    routed to `top_k` experts (`routes`: per device, a list of expert ids per
    token); an arrow leaves the device when the expert lives elsewhere.
    Numbers: the share of routed copies that travel."""
    n_experts = n_devices * experts_per_device
    copies = sum(len(t) for tokens in routes for t in tokens)
    remote = sum(1 for d, tokens in enumerate(routes) for t in tokens for e in t if e // experts_per_device != d)
    alt = (
        f"Expert parallelism on {n_devices} devices holding {experts_per_device} experts each: every token is sent to "
        f"its top-{top_k} experts; the arrows that leave a device are the all-to-all's dispatch, and the results come "
        f"back the same way (combine). {remote} of {copies} copies travel."
    )
    fig = Figure(
        640, 90 + 70 * n_devices, alt, numbers={"remote_copies": remote, "copies": copies, "n_experts": n_experts}
    )
    fig.text(150, 22, "tokens on each device", size=13, anchor="middle", weight="bold")
    fig.text(500, 22, "experts on each device", size=13, anchor="middle", weight="bold")
    for d in range(n_devices):
        y = 44 + d * 70
        fig.rect(20, y, 600, 56, fill="#f5f5f5", stroke=MUTED, rx=6)
        fig.text(30, y + 16, f"device {d}", size=12, weight="bold")
        for t in range(len(routes[d])):
            tx = 40 + t * 46
            fig.box(tx, y + 22, 38, 26, f"t{t}", fill=INK, size=12)
        for e in range(experts_per_device):
            eid = d * experts_per_device + e
            fig.box(430 + e * 90, y + 16, 80, 30, f"expert {eid}", fill=CHUNK_COLORS[eid % 8], size=12)
    for d in range(n_devices):
        y = 44 + d * 70
        for t, experts in enumerate(routes[d]):
            tx = 40 + t * 46 + 19
            for e in experts:
                owner, slot = divmod(e, experts_per_device)
                ex, ey = 430 + slot * 90 + 40, 44 + owner * 70 + 16
                color = CHUNK_COLORS[e % 8]
                fig.path(f"M{tx:.0f} {y + 48}C{tx:.0f} {y + 62} {ex:.0f} {ey + 44} {ex:.0f} {ey + 30}", stroke=color,
                         stroke_width=2.2 if owner != d else 1, opacity=0.85 if owner != d else 0.4)  # fmt: skip
    fig.text(320, 90 + 70 * n_devices - 20, f"top-{top_k} routing: {remote} of {copies} token copies leave their device",
             size=13, anchor="middle")  # fmt: skip
    return fig


def pipeline_stages(n_stages, layers_per_stage, boundary_bytes, title):
    """A model cut into n pipeline stages of consecutive layers, one per
    device; arrows between stages carry the activations forward and their
    gradients back, `boundary_bytes` each way per microbatch."""
    alt = (
        f"{n_stages} devices in a row, each holding {layers_per_stage} consecutive layers; between neighbours one "
        "arrow carries a microbatch's activations forward and one its gradient back."
    )
    fig = Figure(640, 170, alt, numbers={"boundary_bytes": boundary_bytes})
    fig.text(320, 20, title, size=13, anchor="middle", weight="bold")
    w = 600 / n_stages
    for s in range(n_stages):
        x = 20 + s * w
        fig.box(x + 14, 50, w - 28, 56, "", fill=CHUNK_COLORS[s % 8])
        fig.text(x + w / 2, 74, f"stage {s}", size=12, anchor="middle", fill="white", weight="bold")
        first = s * layers_per_stage
        fig.text(
            x + w / 2, 94, f"layers {first}–{first + layers_per_stage - 1}", size=12, anchor="middle", fill="white"
        )
        if s + 1 < n_stages:
            fig.arrow(x + w - 14, 66, x + w + 14, 66, stroke=ACCENT, width=2, head=7)
            fig.arrow(x + w + 14, 92, x + w - 14, 92, stroke=ACCENT2, width=2, head=7)
    mb = boundary_bytes / 1e6
    fig.text(320, 136, f"blue: activations forward, red: their gradients back, {mb:,.0f} MB each per microbatch",
             size=12, anchor="middle")  # fmt: skip
    fig.text(320, 156, "one point-to-point send per boundary, not a collective", size=12, anchor="middle")
    return fig
