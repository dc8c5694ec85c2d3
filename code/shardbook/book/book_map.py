"""The front page's map of the book (book machinery, layer 3): every numbered
chapter as a box titled from its own heading, in the order to read them. Drawn with matplotlib, like the book's other
figures, so the map follows the chapters' titles when they change.

    from shardbook.book import book_map
    book_map.chapter_map(".")   # in a chapter's cell: the chapters folder
"""

import json
import re
import textwrap
from pathlib import Path

# The reading order the front page recommends: rows read top to bottom, a
# row's chapters left to right; the schemes of rows 2 and 3 (FIRST_ANY to
# LAST_ANY) in any order. At most two boxes a row, so that the map stays
# legible at a phone's width.
ROWS = (
    ("01_topology", "02_sharding"),
    ("03_data_parallel", "04_tensor_parallel"),
    ("05_expert_parallel", "06_pipeline"),
    ("07_choosing_a_mesh",),
    ("08_one_model", "09_many_nodes"),
)
ANY_ORDER_ROWS = (1, 2)
# one line under each title: what the chapter gives the reader
GIVES = {
    "01_topology": "links, fabrics, α = C/W",
    "02_sharding": "local shapes, collective costs",
    "03_data_parallel": "memory per device, ZeRO stages",
    "04_tensor_parallel": "activation traffic, sequence split",
    "05_expert_parallel": "all-to-all, expert placement",
    "06_pipeline": "bubbles, schedules",
    "07_choosing_a_mesh": "the planner: which mesh, how fast",
    "08_one_model": "a real model trained on every mesh",
    "09_many_nodes": "two-tier meshes, rails, slices",
}


# the titles a package built from the repository carries (code/setup.py writes
# them), for the front page downloaded as a notebook and run without its siblings
PACKAGED_TITLES = Path(__file__).resolve().parents[1] / "data" / "chapter_titles.json"


def chapter_titles(chapters_dir=".", packaged=PACKAGED_TITLES):
    """{file stem: H1 title} of the numbered chapters (01-89) in `chapters_dir`;
    from a folder with no chapter at all (the front page downloaded and run
    elsewhere), the titles the package carries, when it carries them."""
    titles = {}
    paths = sorted(Path(chapters_dir).glob("[0-8][0-9]_*.md"))
    for path in paths:
        found = re.search(r"^# (.+)$", path.read_text(), re.M)
        if found and path.stem != "00_introduction":
            titles[path.stem] = found.group(1).strip()
    if not paths and Path(packaged).is_file():
        titles = json.loads(Path(packaged).read_text())
    missing = [stem for row in ROWS for stem in row if stem not in titles]
    if missing:
        raise ValueError(f"chapters_dir: {Path(chapters_dir).resolve()} has no chapter {missing[0]}.md")
    return titles


def chapter_map(chapters_dir="."):
    """The map as a matplotlib figure (SVG in the book, text as text):
    numbered boxes in reading order, arrows from what a chapter builds on."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    from .figures import ACCENT, INK

    titles = chapter_titles(chapters_dir)
    box_w, box_h, gap_x, gap_y = 2.9, 1.6, 0.3, 0.45
    width = 2 * box_w + gap_x
    span_x = width + 0.2
    span_y = len(ROWS) * (box_h + gap_y) - gap_y + 0.2
    fig, ax = plt.subplots(figsize=(4.4, 4.4 * span_y / span_x))
    centre = {}
    for r, row in enumerate(ROWS):
        y = -r * (box_h + gap_y)
        xs = [width / 2] if len(row) == 1 else [box_w / 2, width - box_w / 2]
        for stem, x in zip(row, xs, strict=True):
            centre[stem] = (x, y)
            number = int(stem[:2])
            title = titles[stem].split(":")[0]
            ax.add_patch(
                FancyBboxPatch(
                    (x - box_w / 2, y - box_h / 2),
                    box_w,
                    box_h,
                    boxstyle="round,pad=0.02,rounding_size=0.08",
                    fc="#e3edf9",
                    ec=ACCENT,
                    lw=1.2,
                    zorder=2,
                )
            )
            label = "\n".join(textwrap.wrap(f"{number}  {title}", 20))
            ax.text(
                x, y + box_h / 2 - 0.12, label, ha="center", va="top", fontsize=10.5, color=INK, weight="bold", zorder=3
            )
            ax.text(
                x,
                y - box_h / 2 + 0.12,
                "\n".join(textwrap.wrap(GIVES[stem], 24)),
                ha="center",
                va="bottom",
                fontsize=10,
                color=INK,
                zorder=3,
            )

    def arrow(start, end):
        ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=14, color=INK, lw=1.0, zorder=1))

    first, second = ROWS[0]
    arrow((centre[first][0] + box_w / 2, centre[first][1]), (centre[second][0] - box_w / 2, centre[second][1]))
    for r in range(len(ROWS) - 1):
        if r + 1 in ANY_ORDER_ROWS and r in ANY_ORDER_ROWS:
            continue
        y0 = -r * (box_h + gap_y) - box_h / 2
        arrow((width / 2, y0), (width / 2, y0 - gap_y))
    top = -ANY_ORDER_ROWS[0] * (box_h + gap_y) + box_h / 2 + 0.08
    bottom = -ANY_ORDER_ROWS[-1] * (box_h + gap_y) - box_h / 2 - 0.08
    ax.add_patch(
        FancyBboxPatch(
            (-0.05, bottom),
            width + 0.1,
            top - bottom,
            boxstyle="round,pad=0,rounding_size=0.1",
            fc="none",
            ec=INK,
            lw=0.8,
            ls="--",
            zorder=1,
        )
    )
    ax.text(
        width / 2,
        (top + bottom) / 2,
        "the four ways to split, in any order",
        ha="center",
        va="center",
        fontsize=10,
        color=INK,
        style="italic",
        zorder=3,
        bbox={"fc": "white", "ec": "none", "pad": 1.5},
    )
    ax.set_xlim(-0.1, width + 0.1)
    ax.set_ylim(-(len(ROWS) - 1) * (box_h + gap_y) - box_h / 2 - 0.1, box_h / 2 + 0.1)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.tight_layout(pad=0.1)
    plt.close(fig)  # shown once, by the cell's value
    return fig
