"""Figures drawn from the presets and the cost model (matplotlib).

Not a cost-model module: it imports matplotlib and numpy. Every figure has a
white background and dark ink, so it stays readable in the site's dark mode.
"""

import math

import matplotlib
import matplotlib.pyplot as plt
from matplotlib.patches import FancyBboxPatch

INK = "#1a1a1a"
ACCENT = "#1565c0"
ACCENT2 = "#c62828"
MUTED = "#9e9e9e"


def setup():
    """Inline SVG figures with real text, white background, small files."""
    matplotlib.rcParams.update(
        {
            "svg.fonttype": "none",
            "figure.facecolor": "white",
            "axes.facecolor": "white",
            "savefig.facecolor": "white",
            # 11 pt, so that a log axis's superscript exponent (0.7 of it) is
            # still 10 px at a figure's own width
            "font.size": 11,
            "axes.edgecolor": INK,
            "text.color": INK,
            "axes.labelcolor": INK,
            "xtick.color": INK,
            "ytick.color": INK,
            "figure.dpi": 100,
        }
    )
    try:
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("svg")
    except ImportError:  # outside IPython
        pass


def _device(ax, x, y, label, color=ACCENT, w=0.5, h=0.3):
    ax.add_patch(
        FancyBboxPatch((x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02", fc=color, ec=INK, lw=0.8, zorder=3)
    )
    ax.text(x, y, label, ha="center", va="center", color="white", fontsize=8, zorder=4)


def _clean(ax, title):
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title, fontsize=10)
    plt.close(ax.figure)  # shown once, by the cell's value, not again by pyplot


def full_mesh(n_devices, link_label, egress_label, title):
    """n devices on a circle, every pair joined by one direct link."""
    fig, ax = plt.subplots(figsize=(4.6, 4.6))
    pts = [
        (math.cos(2 * math.pi * i / n_devices + math.pi / 2), math.sin(2 * math.pi * i / n_devices + math.pi / 2))
        for i in range(n_devices)
    ]
    for i in range(n_devices):
        for j in range(i + 1, n_devices):
            color = ACCENT2 if i == 0 else MUTED
            ax.plot([pts[i][0], pts[j][0]], [pts[i][1], pts[j][1]], color=color, lw=1.6 if i == 0 else 0.8, zorder=1)
    for i, (x, y) in enumerate(pts):
        _device(ax, 1.0 * x, 1.0 * y, f"GPU {i}")
    ax.text(
        0,
        -1.45,
        f"each line: one link, {link_label} per direction\nred: GPU 0's {n_devices - 1} links, {egress_label} egress",
        ha="center",
        fontsize=8,
    )
    ax.set_xlim(-1.5, 1.5)
    ax.set_ylim(-1.7, 1.4)
    _clean(ax, title)
    return fig


def switch_domain(n_devices, n_switches, egress_label, title, shown=8):
    """GPUs joined through NVLink switches: every GPU reaches every other in
    one switch hop; drawn with `shown` GPUs when the domain is large."""
    fig, ax = plt.subplots(figsize=(6.2, 3.4))
    gpus = min(n_devices, shown)
    xs = [i * 6.0 / (gpus - 1) for i in range(gpus)]
    sws = [j * 6.0 / max(n_switches - 1, 1) for j in range(n_switches)] if n_switches > 1 else [3.0]
    for x in xs:
        for s in sws:
            ax.plot([x, s], [0, 1.6], color=MUTED, lw=0.6, zorder=1)
    for i, x in enumerate(xs):
        label = f"GPU {i}" if gpus == n_devices or i < gpus - 1 else f"GPU {n_devices - 1}"
        _device(ax, x, 0, label, w=0.62)
    if gpus < n_devices:
        ax.text((xs[-2] + xs[-1]) / 2, -0.45, "…", ha="center", fontsize=12)
    for j, s in enumerate(sws):
        _device(ax, s, 1.6, f"switch {j}", color="#6a1b9a", w=0.8)
    ax.text(
        3.0,
        -0.8,
        f"{n_devices} GPUs, any pair one switch hop apart; {egress_label} per GPU per direction",
        ha="center",
        fontsize=8,
    )
    ax.set_xlim(-0.6, 6.6)
    ax.set_ylim(-1.1, 2.0)
    _clean(ax, title)
    return fig


def _finish(fig):
    fig.tight_layout()
    plt.close(fig)
    return fig


def bar_chart(labels, values, xlabel, title, highlight=(), ax=None):
    """Horizontal bars with their values; `highlight` names bars drawn in the
    second colour. Draws on `ax` and returns it, or returns a new figure."""
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.4, 0.32 * len(labels) + 1.0))
    colors = [ACCENT2 if lab in highlight else ACCENT for lab in labels]
    ax.barh(labels, values, color=colors)
    ax.invert_yaxis()
    for y, v in enumerate(values):
        ax.text(v, y, f" {v:,.0f}", va="center", fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_xlim(0, max(values) * 1.15)
    return ax if fig is None else _finish(fig)


SERIES_COLORS = (ACCENT, ACCENT2, "#2e7d32", "#6a1b9a", "#ef6c00")


def grouped_bars(labels, groups, ylabel, title="", ax=None):
    """Vertical bars side by side per label; `groups`: list of (name, values),
    one value per label. Draws on `ax` and returns it, or returns a new figure."""
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.0, 3.2))
    width = 0.8 / len(groups)
    for g, (name, values) in enumerate(groups):
        offset = (g - (len(groups) - 1) / 2) * width
        ax.bar(
            [x + offset for x in range(len(labels))],
            values,
            width=width,
            color=SERIES_COLORS[g % len(SERIES_COLORS)],
            label=name,
        )
    ax.set_xticks(list(range(len(labels))), labels)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(frameon=False, fontsize=8)
    return ax if fig is None else _finish(fig)


def line_chart(series, xlabel, ylabel, title="", logx=False, logy=False, ax=None, styles=None, legend_size=8):
    """`series`: list of (label, xs, ys), drawn with markers in the book's
    colours (or `styles`: one dict of matplotlib keywords per series); `logx`
    is base 2. Draws on `ax` and returns it, or returns a new figure."""
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.2, 3.6))
    for i, (label, xs, ys) in enumerate(series):
        style = {"marker": "o", "ms": 3, "lw": 1.4, "color": SERIES_COLORS[i % len(SERIES_COLORS)]}
        style.update(styles[i] if styles else {})
        ax.plot(xs, ys, label=label, **style)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(True, color="#dddddd", lw=0.6)
    ax.spines[["top", "right"]].set_visible(False)
    ax.legend(frameon=False, fontsize=legend_size)
    return ax if fig is None else _finish(fig)


def hbm_line(ax, hbm_bytes, label, x, scale=1e9, ha="right"):
    """A dashed line at a device's HBM capacity (in GB by default), labelled at x."""
    ax.axhline(hbm_bytes / scale, color=MUTED, ls="--", lw=1)
    ax.text(x, hbm_bytes / scale * 1.12, label, ha=ha, fontsize=8)


def causal_ownership(owners, n_positions, title, ax=None):
    """The causal (query × key) mask of n positions, each valid pair coloured
    by the rank that owns its query. Draws on `ax` and returns it, or returns
    a new figure."""
    import numpy as np

    grid = np.full((n_positions, n_positions), np.nan)
    for rank, queries in enumerate(owners):
        for q in queries:
            grid[q - 1, :q] = rank
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(3.4, 3.4))
    cmap = matplotlib.colormaps["tab10"].resampled(len(owners))
    ax.imshow(grid, cmap=cmap, vmin=-0.5, vmax=len(owners) - 0.5)
    ax.set_xlabel("key position")
    ax.set_ylabel("query position")
    ax.set_xticks([0, n_positions - 1], [1, n_positions])
    ax.set_yticks([0, n_positions - 1], [1, n_positions])
    ax.set_title(title, fontsize=10)
    return ax if fig is None else _finish(fig)


def global_and_local(global_shape, row_blocks, col_blocks, device_grid, local_device):
    """A global array of `global_shape` (rows, columns) cut into row_blocks ×
    col_blocks blocks, each labelled with the device that stores it
    (`device_grid[r][c]`, device ids), beside the block `local_device` holds,
    drawn to the same scale."""
    from matplotlib.patches import Rectangle

    rows, cols = global_shape
    block_h, block_w = rows / row_blocks, cols / col_blocks
    fig, (left, right) = plt.subplots(1, 2, figsize=(6.4, 3.6), gridspec_kw={"width_ratios": [1, 1]})
    cmap = matplotlib.colormaps["tab10"]
    for r in range(row_blocks):
        for c in range(col_blocks):
            device = device_grid[r][c]
            x, y = c * block_w, rows - (r + 1) * block_h
            lw = 2.2 if device == local_device else 0.8
            left.add_patch(Rectangle((x, y), block_w, block_h, fc=cmap(device % 10), ec=INK, lw=lw, alpha=0.85))
            left.text(
                x + block_w / 2, y + block_h / 2, f"d{device}", ha="center", va="center", color="white", fontsize=8
            )
    for ax in (left, right):
        ax.set_xlim(-0.05 * cols, 1.05 * cols)
        ax.set_ylim(-0.05 * rows, 1.05 * rows)
    _clean(left, f"global [{rows}, {cols}]")
    r0, c0 = next((r, c) for r in range(row_blocks) for c in range(col_blocks) if device_grid[r][c] == local_device)
    y0 = rows - block_h
    right.add_patch(Rectangle((0, y0), block_w, block_h, fc=cmap(local_device % 10), ec=INK, lw=2.2, alpha=0.85))
    right.text(block_w / 2, y0 + block_h / 2, f"d{local_device}", ha="center", va="center", color="white", fontsize=8)
    right.text(
        0,
        y0 - 0.06 * rows,
        f"local [{int(block_h)}, {int(block_w)}], block ({r0}, {c0})",
        ha="left",
        va="top",
        fontsize=9,
    )
    _clean(right, f"what d{local_device} stores")
    fig.tight_layout()
    return _finish(fig)


def ring_all_gather_steps(n_devices):
    """A ring all-gather of n chunks, one panel per step: row i is device i,
    column j chunk j, filled once device i holds chunk j. At each step every
    device passes the chunk it received last to the next device."""
    from matplotlib.patches import Rectangle

    n = n_devices
    fig, axes = plt.subplots(1, n, figsize=(1.7 * n, 2.2))
    cmap = matplotlib.colormaps["tab10"]
    for step, ax in enumerate(axes):
        for device in range(n):
            held = {(device - k) % n for k in range(step + 1)}
            arrived = (device - step) % n if step else None
            for chunk in range(n):
                filled = chunk in held
                ax.add_patch(
                    Rectangle(
                        (chunk, n - 1 - device),
                        0.9,
                        0.9,
                        fc=cmap(chunk % 10) if filled else "white",
                        ec=INK if chunk == arrived else MUTED,
                        lw=2.0 if chunk == arrived else 0.6,
                        alpha=0.85 if filled else 1.0,
                    )
                )
        ax.set_xlim(-0.6, n)
        ax.set_ylim(-0.2, n)
        for device in range(n):
            ax.text(-0.15, n - 0.55 - device, f"d{device}", ha="right", va="center", fontsize=8)
        _clean(ax, "start" if step == 0 else f"after step {step}")
    fig.tight_layout()
    return _finish(fig)
