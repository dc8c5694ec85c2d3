"""The book's figures: the SVG writers (diagrams, animations) and how many
figures each chapter has.

An animated figure must play without a script, show its final frame to a
reader who asks for no motion and on paper, keep its text at least 10 px at
the text column's width, say what it shows in its alt text, and draw the
numbers the cost model computes (each compared here with the function the
prose uses).
"""

import math
import re
import xml.etree.ElementTree as ET

import pytest
import yaml

from conftest import HTML, ROOT
from shardbook import attention, collectives, context, fabric, hardware, memory, overlap, pipeline
from shardbook.book import animations, diagrams, svg
from test_site import _settle

SVG_NS = "{http://www.w3.org/2000/svg}"
MIN_PX = 10  # the rule: figure text at least 10 px at the page's width


def _mi():
    return hardware.get("MI355X")


def _pipeline_runs():
    return {k: (pipeline.schedule(k, 4, 8, 2 if k == "interleaved" else 1), 2 if k == "interleaved" else 1)
            for k in pipeline.SCHEDULES}  # fmt: skip


def _fsdp_steps():
    return {k: overlap.fsdp_step(4, 1e-3, 2e-3, 1.5e-3, 1.2e-3, prefetch=k) for k in (0, 1)}


ANIMATIONS = {
    "ring_all_gather": lambda: animations.ring_all_gather(1e9, 4, _mi().scale_up_link_bytes_per_s, "76.8 GB/s"),
    "ring_reduce_scatter": lambda: animations.ring_reduce_scatter(1e9, 4, _mi().scale_up_link_bytes_per_s, "x"),
    "all_to_all": lambda: animations.all_to_all(1e9, 4, 3 * _mi().scale_up_link_bytes_per_s, "230 GB/s"),
    "pipeline_schedules": lambda: animations.pipeline_schedules(
        _pipeline_runs(), 4, {k: k for k in pipeline.SCHEDULES}
    ),
    "fsdp_prefetch": lambda: animations.fsdp_prefetch(_fsdp_steps()),
    "ring_attention": lambda: animations.ring_attention(4, 32768, 8, 128, _mi().scale_up_link_bytes_per_s),
}

DIAGRAMS = {
    "torus_slices": lambda: diagrams.torus_slices(
        [("TPU v5e", (4, 4), "a"), ("TPU v5p", (4, 4, 4), "b")],
        "Two grids of TPU chips, one with wraparound, one without.",
    ),
    "two_tier": lambda: diagrams.two_tier("H100", 2),
    "rails": lambda: diagrams.rails(2, 4, [[0, 4], [0, 1]], "label"),
    "tpu_slices": lambda: diagrams.tpu_slices("TPU v5p", 4, "a pod"),
    "device_mesh": lambda: diagrams.device_mesh((2, 4), ("fsdp", "tp"), "title"),
    "hbars": lambda: diagrams.hbars(
        ["a", "b"], [1.0, 2.0], "ms", "t", "Two bars of times in milliseconds, the second twice the first."
    ),
    "zero_stages": lambda: diagrams.zero_stages(70e9, 8, 288e9, "a 70B model"),
    "tp_mlp": lambda: diagrams.tp_mlp(4, 8192, 28672, 4096),
    "expert_dispatch": lambda: diagrams.expert_dispatch(4, 2, [[[0, 3]] * 4] * 4, 2),
    "pipeline_stages": lambda: diagrams.pipeline_stages(4, 20, 1e8, "title"),
}


def _styles(text):
    root = ET.fromstring(text)
    return "".join(s.text or "" for s in root.iter(f"{SVG_NS}style"))


def _hidden_classes(css):
    """Classes hidden in the static state: the rule `.a,.b{opacity:0}` outside any @media."""
    outside = re.split(r"@media", css)[0]
    hidden = set()
    for selectors, body in re.findall(r"([^{}]+)\{([^{}]*)\}", outside):
        if body.strip() == "opacity:0":
            hidden |= {s.strip().lstrip(".") for s in selectors.split(",")}
    return hidden


def _static_elements(text):
    """The elements a reader sees without motion (the final frame)."""
    root = ET.fromstring(text)
    hidden = _hidden_classes(_styles(text))
    return [el for el in root.iter() if not (set((el.get("class") or "").split()) & hidden)]


@pytest.mark.parametrize("name", sorted(ANIMATIONS))
def test_animation_plays_without_script_and_rests_on_its_final_frame(name):
    fig = ANIMATIONS[name]()
    text = fig.svg()
    root = ET.fromstring(text)  # valid XML
    assert root.tag == f"{SVG_NS}svg"
    assert not list(root.iter(f"{SVG_NS}script")), "no script"
    css = _styles(text)
    assert fig.animated and "@keyframes" in css and "animation:" in css
    # motion only where the reader has not asked for less, and only on a screen
    motion = re.search(r"@media screen and \(prefers-reduced-motion:no-preference\)\{(.*)\}@media \(prefers", css)
    assert motion and "@keyframes" in motion.group(1)
    assert "@keyframes" not in css.split("@media")[0], "an animation outside the no-preference rule"
    assert re.search(r"@media \(prefers-reduced-motion:\s*reduce\)\{\*\{animation:none!important\}\}", css)
    assert re.search(r"@media print\{\*\{animation:none!important\}\}", css)
    # the static state is the final frame: a class is hidden exactly when its keyframes end hidden
    for cls, frames in re.findall(r"@keyframes (f\d+)\{([^@]*?)\}\.", css):
        ends_hidden = frames.rstrip("}").endswith("{opacity:0")
        assert ends_hidden == (cls in _hidden_classes(css)), cls


def test_ring_all_gather_final_frame_holds_every_chunk():
    fig = ANIMATIONS["ring_all_gather"]()
    chunk_fills = set(svg.CHUNK_COLORS[:4])
    shown = [el for el in _static_elements(fig.svg()) if el.tag == f"{SVG_NS}rect" and el.get("fill") in chunk_fills]
    assert len(shown) == 4 * 4  # every device holds every chunk
    first = ET.fromstring(fig.svg())
    every = [el for el in first.iter(f"{SVG_NS}rect") if el.get("fill") in chunk_fills]
    assert len(every) == 16, "each chunk is drawn once, appearing at its step"


def test_all_to_all_final_frame_holds_only_own_chunks():
    fig = ANIMATIONS["all_to_all"]()
    labels = [el.text for el in _static_elements(fig.svg()) if el.tag == f"{SVG_NS}text" and el.text and "→" in el.text]
    assert sorted(labels) == sorted(f"{j}→{d}" for d in range(4) for j in range(4))


@pytest.mark.parametrize("name", sorted(ANIMATIONS) + sorted(DIAGRAMS))
def test_figure_text_is_readable_and_alt_says_what_it_shows(name):
    fig = (ANIMATIONS | DIAGRAMS)[name]()
    text = fig.svg()
    root = ET.fromstring(text)
    assert svg.min_font_px(text) >= MIN_PX, f"{name}: text under {MIN_PX} px at the column's width"
    assert int(root.get("width")) <= svg.TEXT_COLUMN_PX
    title = root.find(f"{SVG_NS}title").text
    assert title == root.get("aria-label") == fig.alt
    assert len(title.split()) >= 10, f"{name}: alt text too short to say what it shows: {title!r}"


def test_svg_writer_refuses_small_text_and_short_alt():
    fig = svg.Figure(100, 100, "A figure whose alt text is long enough.")
    with pytest.raises(ValueError, match="size"):
        fig.text(0, 0, "x", size=9)
    with pytest.raises(ValueError, match="alt"):
        svg.Figure(100, 100, "too short")
    with pytest.raises(ValueError, match="width"):
        svg.Figure(900, 100, "A figure wider than the text column of the book.")
    with pytest.raises(ValueError, match="frames"):
        svg.Figure(100, 100, "An animated figure with three frames in all.", n_frames=3).rect(0, 0, 1, 1, frames=(2, 1))


def test_min_font_scales_with_the_rendered_width():
    wide = (
        '<svg xmlns="http://www.w3.org/2000/svg" width="1376" viewBox="0 0 1376 10"><text font-size="16">a</text></svg>'
    )
    assert svg.min_font_px(wide) == pytest.approx(8.0)  # drawn at half size in a 688 px column
    pts = '<svg xmlns="http://www.w3.org/2000/svg" width="300pt" viewBox="0 0 300 10"><text style="font: 8px sans">a</text></svg>'
    assert svg.min_font_px(pts) == pytest.approx(8 * 4 / 3)


# --- drawn numbers come from the cost model ---------------------------------------


def test_ring_figures_draw_the_collectives_numbers():
    link = _mi().scale_up_link_bytes_per_s
    for fig, timing in (
        (ANIMATIONS["ring_all_gather"](), collectives.all_gather_s),
        (ANIMATIONS["ring_reduce_scatter"](), collectives.reduce_scatter_s),
    ):
        nums = fig.numbers
        assert nums["steps"] == 3
        assert nums["bytes_sent_per_device"] == collectives.ring_bytes_sent_per_rank(1e9, 4)
        assert nums["bytes_sent_per_device"] == nums["steps"] * nums["chunk_bytes"]
        assert nums["seconds"] == timing(1e9, 4, link)
        text = fig.svg()
        assert f"{nums['seconds'] * 1e3:,.3g} ms" in text  # the printed time is the function's
        assert "750 MB" in text and "250 MB" in text  # (n-1)/n and 1/n of 1 GB


def test_all_to_all_figure_draws_the_collectives_time():
    fig = ANIMATIONS["all_to_all"]()
    egress = 3 * _mi().scale_up_link_bytes_per_s
    assert fig.numbers["seconds"] == collectives.all_to_all_s(1e9, 4, egress)
    # on the MI355X board this is the fabric model's in-node all-to-all
    assert fig.numbers["seconds"] == pytest.approx(fabric.collective_s("all_to_all", 1e9, "MI355X", 4))
    assert f"{fig.numbers['seconds'] * 1e3:,.3g} ms" in fig.svg()


def test_pipeline_figure_draws_the_simulated_schedules():
    runs = _pipeline_runs()
    fig = animations.pipeline_schedules(runs, 4, {k: k for k in runs})
    text = fig.svg()
    for kind, (ops, _) in runs.items():
        bubble = pipeline.simulated_bubble_fraction(ops, 4)
        assert fig.numbers[kind]["bubble_fraction"] == bubble
        assert f"{kind}: idle {bubble:.1%}" in text
    boxes = [
        el for el in ET.fromstring(text).iter(f"{SVG_NS}rect") if (el.get("class") or "")[:2] in ("pF", "pB", "pW")
    ]
    assert len(boxes) == sum(len(ops) for ops, _ in runs.values())  # one box per simulated op


def test_fsdp_figure_draws_the_simulated_step():
    steps = _fsdp_steps()
    fig = animations.fsdp_prefetch(steps)
    for k, step in steps.items():
        assert fig.numbers[k] == {"step_s": step.step_s, "exposed_comm_s": step.exposed_comm_s}
        assert f"communication exposed {step.exposed_comm_s / step.step_s:.0%}" in fig.svg()


def test_ring_attention_figure_draws_the_context_bytes():
    fig = ANIMATIONS["ring_attention"]()
    nums = fig.numbers
    assert nums["bytes_sent_per_rank"] == context.kv_exchange_bytes_per_rank(32768, 8, 128, 4)
    assert nums["hop_bytes"] * nums["hops"] == nums["bytes_sent_per_rank"]
    assert nums["blocks_per_rank"] == attention.causal_pairs_per_rank(4, 4, "contiguous") == [1, 2, 3, 4]


def test_torus_figure_draws_wraparound_only_where_the_slice_has_it():
    """Review ch0-3 A3: a 4 × 4 v5e slice has no wraparound (an axis closes at
    16 chips); a v5p 4 × 4 × 4 cube closes every axis. Ref: scaling-book-tpus,
    google-tpu-v5p."""
    fig = DIAGRAMS["torus_slices"]()
    assert fig.numbers["TPU v5e (4, 4)"]["wraparound"] == (False, False)
    assert fig.numbers["TPU v5p (4, 4, 4)"]["wraparound"] == (True, True)
    dashed = [el for el in ET.fromstring(fig.svg()).iter() if el.get("stroke-dasharray")]
    assert len(dashed) == 2 * (4 + 4)  # two stubs per row and column of the v5p face, none on the v5e slice
    assert all(float(el.get("x1")) >= 320 for el in dashed)  # all in the right-hand (v5p) panel
    alone = diagrams.torus_slice("TPU v5e", (4, 4), "t")
    assert not [el for el in ET.fromstring(alone.svg()).iter() if el.get("stroke-dasharray")]
    assert fabric.has_wraparound("TPU v5e", (16, 4), 0) and not fabric.has_wraparound("TPU v5e", (16, 4), 1)


def test_chapter_two_all_to_all_beyond_a_node_is_priced_by_the_fabric():
    """Review ch0-3 A4: an all-to-all of 1 GB over 16-64 MI355X GPUs (nodes of
    eight) leaves through the NICs: 10, 15 and 17.5 ms by the fabric model,
    not the falling 0.2 ms of seven peer links. Ref: scale-your-model-amd."""
    mi = _mi()
    times = {n: fabric.collective_s("all_to_all", 1e9, mi, n, max(1, n // 8)) for n in (8, 16, 32, 64)}
    assert (
        times[16] == pytest.approx(10e-3) and times[32] == pytest.approx(15e-3) and times[64] == pytest.approx(17.5e-3)
    )
    assert times[8] < times[16] < times[32] < times[64]
    source = (ROOT / "chapters" / "02_sharding.md").read_text()
    assert "all_to_all_s(GB, n, (n - 1) * link)" not in source
    assert 'fabric.collective_s("all_to_all", GB, mi, n,' in source


def test_zero_stages_figure_draws_the_memory_function():
    fig = DIAGRAMS["zero_stages"]()
    for scheme, total in fig.numbers["totals_bytes"].items():
        assert total == memory.state_bytes_per_device(70e9, scheme, 8)
        assert sum(fig.numbers["parts_bytes"][scheme]) == pytest.approx(total)


def test_rails_figure_marks_the_groups_fabric_calls_misaligned():
    fig = DIAGRAMS["rails"]()
    assert fig.numbers["misaligned_groups"] == fabric.rail_misaligned_groups([[0, 1, 2, 3], [4, 5, 6, 7]], 0, 4) + [
        [0, 1]
    ]


# --- how many figures the book has -------------------------------------------------

FIGURE_CELL = re.compile(r"```\{code-cell\}[^\n]*\n---\n(.*?)\n---\n(.*?)```", re.S)
FIGURE_DIRECTIVE = re.compile(r"^```\{figure\}", re.M)


def _numbered_chapters():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    numbered = [c["file"] for part in toc["parts"] if part.get("numbered") for c in part["chapters"]]
    return [ROOT / f"{f}.md" for f in numbered]


def chapter_figures(path):
    """(figure cells: [(alt, code)], figure directives) of one chapter."""
    text = path.read_text()
    cells = []
    for meta, code in FIGURE_CELL.findall(text):
        options = yaml.safe_load(meta) or {}
        mystnb = options.get("mystnb") or {}
        if "figure" in mystnb:
            cells.append(((mystnb.get("image") or {}).get("alt", ""), code))
    return cells, len(FIGURE_DIRECTIVE.findall(text))


def test_every_numbered_chapter_shows_its_mechanisms():
    """Issue 32: at least four figures in every numbered chapter, at least 50
    in the book, at least six animated, every figure cell with alt text."""
    counts, animated, total = {}, 0, 0
    for path in sorted((ROOT / "chapters").glob("[0-9]*.md")):
        cells, directives = chapter_figures(path)
        counts[path.stem] = len(cells) + directives
        total += counts[path.stem]
        animated += sum(1 for _, code in cells if "animations." in code)
        for alt, _ in cells:
            assert len(alt.split()) >= 10, f"{path.stem}: a figure's alt text does not say what it shows: {alt!r}"
    few = {p.stem: counts[p.stem] for p in _numbered_chapters() if counts[p.stem] < 4}
    assert not few, f"chapters with fewer than four figures: {few}"
    assert total >= 50, f"{total} figures in the book: {counts}"
    assert animated >= 6, f"{animated} animated figures"


def test_figures_after_the_first_load_lazily(tmp_path):
    """Page weight: a page's figures after its first load when scrolled to."""
    from shardbook.book import pages

    figure = '<figure class="f">\n<img alt="{0}" src="../_images/{0}.svg" />\n</figure>'
    (tmp_path / "p.html").write_text("".join(figure.format(k) for k in "abc"))
    pages.rewrite_pages(tmp_path)
    pages.rewrite_pages(tmp_path)  # a second pass changes nothing
    text = (tmp_path / "p.html").read_text()
    images = re.findall(r"<img[^>]*>", text)
    assert ["lazy" in img for img in images] == [False, True, True]
    assert text.count("Open full size") == 3


def test_animated_figures_fall_back_to_their_final_frame(tmp_path):
    """An SVG loaded as an image does not see the page's media (Chromium plays
    it under prefers-reduced-motion: reduce and prints its first frame): the
    page offers the final frame, still, for those media."""
    from shardbook.book import pages

    images = tmp_path / "_images"
    images.mkdir()
    animated = ANIMATIONS["ring_all_gather"]().svg()
    (images / "a.svg").write_text(animated)
    (images / "b.svg").write_text(DIAGRAMS["hbars"]().svg())
    figure = '<figure class="f">\n<img alt="{0}" src="_images/{0}.svg" />\n</figure>'
    (tmp_path / "p.html").write_text(figure.format("a") + figure.format("b"))
    pages.rewrite_pages(tmp_path)
    text = (tmp_path / "p.html").read_text()
    assert text.count("<picture>") == 1
    assert f'<source media="{pages.STILL_MEDIA}" srcset="_images/a.still.svg"' in text
    still = (images / "a.still.svg").read_text()
    assert "@keyframes" not in still and "animation:" not in still.split("@media (prefers")[0]
    assert svg.final_frame(animated) == still

    # the still shows what the animation's final frame shows
    def shown(text):
        return [
            (el.tag, el.text, sorted(el.attrib.items())) for el in _static_elements(text) if el.tag != f"{SVG_NS}style"
        ]

    assert shown(still) == shown(animated)
    assert not (images / "b.still.svg").exists()


def test_figures_are_framed_at_the_width_their_text_needs(tmp_path):
    """Issue 32: each SVG figure's frame keeps it at least as wide as its
    smallest text needs to be 10 px (a diagram's 12 px text at 640 px: 534 px;
    a graphviz graph's 10 pt text: its width in pt), with the image's own
    width and height so that the page does not move when it loads; a second
    pass changes nothing."""
    from shardbook.book import pages

    images = tmp_path / "_images"
    images.mkdir()
    diagram = DIAGRAMS["tp_mlp"]()
    (images / "d.svg").write_text(diagram.svg())
    graph = (ROOT / "hlo_artifacts" / "tp_matmul" / "after_partitioning.svg").read_text()
    (images / "g.svg").write_text(graph)
    (images / "a.svg").write_text(ANIMATIONS["ring_all_gather"]().svg())
    figure = '<figure class="f">\n<img alt="{0}" src="_images/{0}.svg" />\n</figure>'
    (tmp_path / "p.html").write_text("".join(figure.format(k) for k in "dga"))
    pages.rewrite_pages(tmp_path)
    text = (tmp_path / "p.html").read_text()
    pages.rewrite_pages(tmp_path)
    assert (tmp_path / "p.html").read_text() == text
    frames = re.findall(r'--shardbook-min-width:([0-9]+)px">(?:<picture>.*?)?<img ([^>]*)>', text)
    assert len(frames) == 3
    assert int(frames[0][0]) == math.ceil(diagram.width * MIN_PX / svg.min_font_px(diagram.svg()))
    assert f'width="{diagram.width}"' in frames[0][1] and f'height="{round(diagram.height)}"' in frames[0][1]
    view_w = float(ET.fromstring(graph).get("viewBox").split()[2])
    assert int(frames[1][0]) == math.ceil(view_w)  # 10 pt text is 10 px at 0.75 of its 4/3 px per pt
    # the graph, wider than the desktop's column, is panned in a window; the diagrams are not
    assert re.findall(r'<div class="shardbook-figure-frame([^"]*)">', text) == ["", " shardbook-figure-pan", ""]
    assert text.count("<picture>") == 1
    assert text.count("Open full size") == 3


# a figure's image on a built page, inside its frame (pages.rewrite_pages) and,
# when animated, its <picture>: (the frame's minimum width, the image's src)
BUILT_FIGURE = re.compile(
    r'<figure\b[^>]*>\s*(?:<div class="shardbook-figure-frame[^"]*"><div [^>]*?--shardbook-min-width:([0-9]+)px[^>]*>)?'
    r'(?:<picture><source [^>]*>)?<img\b[^>]*?\bsrc="([^"]+)"'
)
PHONE_COLUMN_PX = 350  # at most, the text column of a 390 px screen (the browser test measures it)


def _text_per_width(path):
    """The smallest text of an SVG per CSS px of its rendered width."""
    from shardbook.book import pages

    text = path.read_text()
    width = pages.svg_size_px(text)[0]
    return svg.min_font_px(text, column_px=float("inf")) / width


def _built_figures():
    """(page, src, frame's minimum width or None, the SVG's own width, text per px of width)
    for every figure of every built page."""
    from shardbook.book import pages

    found = []
    for page in sorted([HTML / "index.html", *HTML.glob("chapters/*.html")]):
        for frame, src in BUILT_FIGURE.findall(page.read_text()):
            path = (page.parent / src).resolve()
            own = pages.svg_size_px(path.read_text())[0] if src.endswith(".svg") else None
            ratio = _text_per_width(path) if src.endswith(".svg") else None
            found.append((page, src, int(frame) if frame else None, own, ratio))
    return found


def test_built_figures_keep_their_text_readable(built_book):
    """Issue 32: text in every figure at least 10 px at the page's width, at
    1280 px (a 688 px column) and on a phone (a column of at most 350 px):
    every figure is an SVG whose frame keeps it at least as wide as its
    smallest text needs (the compiler's graphs included; they scroll
    sideways inside their frame where the column is narrower)."""
    small = []
    figures = _built_figures()
    assert figures, "no figure found on the built pages"
    for page, src, frame, own, ratio in figures:
        if ratio is None:
            small.append(f"{page.stem}: {src} is not an SVG whose text can be measured")
            continue
        if frame is None:
            small.append(f"{page.stem}: {src} has no frame that keeps its text readable")
            continue
        for column in (svg.TEXT_COLUMN_PX, PHONE_COLUMN_PX):
            shown = max(min(own, column), frame)
            if ratio * shown < MIN_PX - 0.05:
                small.append(f"{page.stem}: {src} {ratio * shown:.1f} px in a {column} px column")
    assert not small, "figure text under 10 px:\n" + "\n".join(small)


@pytest.mark.parametrize("width,height", [(390, 844), (1280, 900)])
def test_figure_text_as_a_reader_sees_it(built_book, browser, width, height, capsys):
    """Issue 32, in Chromium: at a phone's and a desktop's width, every
    figure's smallest text as drawn (the image's rendered width times its
    smallest text per px of width) is at least 10 px; a figure wider than
    its column scrolls inside its frame, which shows the cue and is
    reachable by keyboard, and the page itself does not scroll sideways."""
    from shardbook.book import site

    ratios = {}
    problems, report = [], []
    page = browser.new_page()
    page.set_viewport_size({"width": width, "height": height})
    pages_ = sorted({p.relative_to(HTML).as_posix() for p, *_ in _built_figures()})
    with site.serve(HTML) as base:
        for rel in pages_:
            page.goto(f"{base}/{rel}", wait_until="networkidle")
            _settle(page)
            shown = page.evaluate(
                "[...document.querySelectorAll('main figure img')].map(i => { const f = i.closest("
                "'.shardbook-figure-scroll'); return [i.getAttribute('src'), i.getBoundingClientRect().width,"
                " f ? f.scrollWidth > f.clientWidth + 1 : false,"
                " f ? f.parentNode.classList.contains('shardbook-wide') && f.tabIndex === 0 : false]; })"
            )
            smallest = None
            for src, rendered, scrolls, cued in shown:
                path = (HTML / rel).parent / src
                if src not in ratios:
                    ratios[src] = _text_per_width(path.resolve()) if src.endswith(".svg") else None
                if ratios[src] is None:
                    problems.append(f"{rel}: {src} is not an SVG whose text can be measured")
                    continue
                size = ratios[src] * rendered
                smallest = size if smallest is None else min(smallest, size)
                if size < MIN_PX - 0.05:
                    problems.append(f"{rel}: {src} text {size:.1f} px at {width} px")
                if scrolls and not cued:
                    problems.append(f"{rel}: {src} scrolls sideways without the cue or keyboard access")
            overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
            if overflow > 1:
                problems.append(f"{rel}: the page is {overflow}px wider than the screen")
            report.append(f"{rel}: {len(shown)} figures, smallest text {smallest:.1f} px" if shown else f"{rel}: none")
    page.close()
    with capsys.disabled():
        print(f"\nsmallest figure text at {width} px:", *report, sep="\n  ")
    assert not problems, "\n".join(problems)
