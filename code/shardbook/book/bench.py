"""`make bench`: build timings, page weight, Lighthouse and live-mode
start-up. A benchmark, not a test.

Prints seconds for a clean build (cache and output removed), seconds for a
no-change rebuild (`make book` again), bytes per built page (its HTML plus
the images and SVGs it loads from the site itself), and, where Chromium is
installed: each chapter's first visit in a fresh browser (every byte it
loads: HTML, CSS, scripts, fonts, images; raw and as sent gzip-compressed),
Lighthouse's scores and metrics for every chapter on a phone and three on a
desktop (the site served as a static host serves it: shardbook.book.site),
the seconds from pressing "Make this page live" to a live page (the first of
a visit, and the next, which finds Pyodide in the visit's cache), the
milliseconds an instant chart takes to redraw after a slider moves
(shardbook.book.charts: from the input event to the next frame), and the step
time of each configuration of the small model (chapter 8), as the clean
build measured it.

    python -m shardbook.book.bench          # make bench: clean build, rebuild, then the rest
    python -m shardbook.book.bench --site   # the browser's figures only, on the build as it is
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .. import REPOSITORY_ROOT

LIGHTHOUSE = REPOSITORY_ROOT / "node_modules" / "lighthouse" / "cli" / "index.js"
# mobile on every numbered chapter and the front page (the aim holds for each),
# desktop on three
LIGHTHOUSE_MOBILE_PAGES = tuple(
    f"chapters/{p.stem}.html" for p in sorted((REPOSITORY_ROOT / "chapters").glob("0[0-9]_*.md"))
)
LIGHTHOUSE_PAGES = ("chapters/02_sharding.html", "chapters/06_pipeline.html", "chapters/07_choosing_a_mesh.html")
LIGHTHOUSE_CATEGORIES = ("performance", "accessibility", "best-practices", "seo")
LIGHTHOUSE_METRICS = {
    "first-contentful-paint": "FCP",
    "largest-contentful-paint": "LCP",
    "total-blocking-time": "TBT",
    "cumulative-layout-shift": "CLS",
    "speed-index": "SI",
}
# aims from the reader's-side issue: mobile performance >= 90, desktop >= 98, the rest 100
LIGHTHOUSE_AIMS = {("mobile", "performance"): 90, ("desktop", "performance"): 98}
FIRST_VISIT_BUDGET_BYTES = 1_000_000
LIVE_AIM_S = 4.0  # click to a live page on the loopback
CHART_REDRAW_AIM_MS = 100.0  # a slider's move to the redrawn chart (issue 49)


def _timed(cmd):
    start = time.monotonic()
    result = subprocess.run(cmd, cwd=REPOSITORY_ROOT, capture_output=True, text=True)
    if result.returncode:
        sys.stderr.write(result.stdout[-2000:] + result.stderr[-2000:])
        raise SystemExit(f"bench: {' '.join(cmd)} failed")
    return time.monotonic() - start


def page_weights(html_root):
    rows = []
    for page in sorted(Path(html_root).rglob("*.html")):
        if page.name in ("search.html", "genindex.html") or "_static" in page.parts:
            continue
        html = page.read_text(errors="replace")
        total = page.stat().st_size
        for src in set(re.findall(r'<(?:img|object|embed)[^>]+(?:src|data)="([^"#?]+)"', html)):
            target = (page.parent / src).resolve()
            if target.is_file():
                total += target.stat().st_size
        rows.append((str(page.relative_to(html_root)), total))
    return rows


def first_visit_bytes(base, browser, page):
    """(raw bytes, bytes sent) of everything a fresh browser loads for `page`."""
    from . import site

    context = browser.new_context()
    tab = context.new_page()
    tab.goto(f"{base}/{page}", wait_until="networkidle")
    sizes = site.loaded_bytes(tab, REPOSITORY_ROOT / "_build" / "html")
    context.close()
    return sizes


def lighthouse(url, form_factor, chromium):
    """{category: score 0-100} and {metric: display value} from one
    Lighthouse run (the pinned npm package) in headless Chromium."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [
            "node",
            str(LIGHTHOUSE),
            url,
            "--quiet",
            "--output=json",
            f"--output-path={report}",
            f"--only-categories={','.join(LIGHTHOUSE_CATEGORIES)}",
            "--chrome-flags=--headless=new --no-sandbox --disable-gpu",
        ]
        if form_factor == "desktop":
            cmd.append("--preset=desktop")
        result = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "CHROME_PATH": chromium})
        if result.returncode or not report.exists():
            raise RuntimeError(f"lighthouse failed on {url}: {result.stderr.strip()[-400:]}")
        data = json.loads(report.read_text())
    scores = {c: round(100 * data["categories"][c]["score"]) for c in LIGHTHOUSE_CATEGORIES}
    metrics = {short: data["audits"][audit]["displayValue"] for audit, short in LIGHTHOUSE_METRICS.items()}
    return scores, metrics


def browser_figures():
    """First-visit weights of every chapter and Lighthouse for three."""
    from . import site

    chromium = site.chromium()
    if chromium is None:
        print("\nfirst visit and Lighthouse: skipped (no chromium; apt-get install chromium)")
        return
    from playwright.sync_api import sync_playwright

    pages = sorted(
        p.relative_to(REPOSITORY_ROOT / "_build" / "html").as_posix()
        for p in (REPOSITORY_ROOT / "_build" / "html").glob("chapters/*.html")
    )
    with site.serve(REPOSITORY_ROOT / "_build" / "html") as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=site.CHROMIUM_FLAGS)
        print(f"\nfirst visit of each chapter, fresh browser (aim: raw under {FIRST_VISIT_BUDGET_BYTES:,} bytes):")
        print(f"  {'raw bytes':>10}  {'sent (gzip)':>11}  page")
        for page in pages:
            raw, sent = first_visit_bytes(base, browser, page)
            flag = "" if raw <= FIRST_VISIT_BUDGET_BYTES else "   OVER"
            print(f"  {raw:>10,}  {sent:>11,}  {page}{flag}", flush=True)
        browser.close()
        if not LIGHTHOUSE.exists():
            print("\nLighthouse: skipped (node_modules/lighthouse missing: run `make book`)")
            return
        print("\nLighthouse 12.2.3 (aims: mobile performance >= 90, desktop >= 98, the rest 100):")
        print(
            f"  {'page':34} {'form':8} "
            + " ".join(f"{c[:4]:>5}" for c in LIGHTHOUSE_CATEGORIES)
            + "   "
            + " ".join(f"{m:>7}" for m in LIGHTHOUSE_METRICS.values())
        )
        runs = [(page, "mobile") for page in LIGHTHOUSE_MOBILE_PAGES]
        runs += [(page, "desktop") for page in LIGHTHOUSE_PAGES]
        for page, form in runs:
            scores, metrics = lighthouse(f"{base}/{page}", form, chromium)
            missed = [c for c in LIGHTHOUSE_CATEGORIES if scores[c] < LIGHTHOUSE_AIMS.get((form, c), 100)]
            print(
                f"  {page:34} {form:8} "
                + " ".join(f"{scores[c]:>5}" for c in LIGHTHOUSE_CATEGORIES)
                + "   "
                + " ".join(f"{metrics[m]:>7}" for m in LIGHTHOUSE_METRICS.values())
                + (f"   missed: {', '.join(missed)}" if missed else ""),
                flush=True,
            )


def live_seconds(page="chapters/01_topology.html", then="chapters/07_choosing_a_mesh.html"):
    """Seconds from the live-mode click to a ready panel, in a fresh headless
    Chromium, for `page` and then for `then` in the same visit (Pyodide
    from this visit's cache), and the bytes of Pyodide the second asked
    the server for: (first s, second s, second page's Pyodide bytes)."""
    from . import site

    chromium = site.chromium()
    if chromium is None:
        return None
    from playwright.sync_api import sync_playwright

    html = REPOSITORY_ROOT / "_build" / "html"
    requests = []
    with site.serve(html, requests=requests) as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=site.CHROMIUM_FLAGS)
        context = browser.new_context()
        seconds = []
        for rel in (page, then):
            requests.clear()
            tab = context.new_page()
            tab.goto(f"{base}/{rel}", wait_until="networkidle")
            start = time.monotonic()
            tab.click("button.shardbook-live-start")
            tab.wait_for_selector(".shardbook-live[data-state=ready]", timeout=120_000)
            seconds.append(time.monotonic() - start)
        again = sum(
            (html / r.lstrip("/")).stat().st_size
            for r in requests
            if "/_static/pyodide/" in r and (html / r.lstrip("/")).is_file()
        )
        browser.close()
    return seconds[0], seconds[1], again


def _chart_on_screen(tab, chart):
    """The instant chart `chart`'s figure, scrolled on screen and built: the
    page builds a chart only as it nears the screen (or for print)."""
    fig = tab.locator(f"figure#chart-{chart}")
    fig.wait_for(state="attached")
    fig.scroll_into_view_if_needed()
    tab.wait_for_function(f"document.querySelector('figure#chart-{chart}').dataset.state === 'ready'")
    return fig


def drag_chart_slider(tab, chart, control, to_index):
    """Drag the slider `control` of the instant chart `chart` (its name) with
    the mouse from where it is to grid position `to_index`, and wait for the
    redraw it causes. Returns the chart's own measure of that redraw (the
    milliseconds from the last input event to the frame after it was drawn)
    and the grid position the slider reached."""
    fig = _chart_on_screen(tab, chart)
    rng = fig.locator(f"input[type=range][name={control}]")
    box = rng.bounding_box()
    top = int(rng.get_attribute("max"))
    before = int(fig.get_attribute("data-redraws") or 0)
    # the thumb's centre travels from half a thumb inside each end
    thumb = 16
    span = box["width"] - thumb

    def x_at(i):
        return box["x"] + thumb / 2 + span * i / top

    y = box["y"] + box["height"] / 2
    start = int(rng.input_value())
    if to_index == start or not 0 <= to_index <= top:
        raise ValueError(
            f"to_index: must be a grid position from 0 to {top} other than the current {start}, got {to_index}"
        )
    tab.mouse.move(x_at(start), y)
    tab.mouse.down()
    tab.mouse.move(x_at(to_index), y, steps=4)
    tab.mouse.up()
    tab.wait_for_function(f"Number(document.querySelector('figure#chart-{chart}').dataset.redraws || 0) > {before}")
    tab.wait_for_timeout(50)  # the frame after the last input event
    return float(fig.get_attribute("data-redraw-ms")), int(rng.input_value())


CHART_PAGES = {
    "chapters/03_data_parallel.html": ("dp_memory", "n_shards"),
    "chapters/04_tensor_parallel.html": ("tp_exposed", "tp"),
    "chapters/06_pipeline.html": ("pp_bubble", "n_microbatches"),
}


def chart_redraw_ms(drags=6):
    """{page: [ms per drag]}: each chart's x slider dragged `drags` times
    between grid positions, in a fresh headless Chromium."""
    from . import site

    chromium = site.chromium()
    if chromium is None:
        return None
    from playwright.sync_api import sync_playwright

    out = {}
    with site.serve(REPOSITORY_ROOT / "_build" / "html") as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=site.CHROMIUM_FLAGS)
        tab = browser.new_page(viewport={"width": 1280, "height": 900})
        for page, (chart, control) in CHART_PAGES.items():
            tab.goto(f"{base}/{page}", wait_until="networkidle")
            rng = _chart_on_screen(tab, chart).locator(f"input[name={control}]")
            top = int(rng.get_attribute("max"))
            times = []
            for k in range(drags):
                to_index = (k * 5 + 3) % (top + 1)
                if to_index == int(rng.input_value()):
                    to_index = (to_index + 1) % (top + 1)
                times.append(drag_chart_slider(tab, chart, control, to_index)[0])
            out[page] = times
        browser.close()
    return out


def model_step_times():
    """(scheme, compile s, step s, machine, cores used) for each configuration of the
    small model (shardbook.programs.schemes), as the build measured them
    (shardbook.programs.runs keeps one record per scheme)."""
    from ..programs import runs, schemes

    folder = runs.CACHE_DIR / runs.cache_key()
    out = []
    for name in schemes.SCHEMES:
        path = folder / f"{name}.json"
        if not path.exists():
            return None
        record = json.loads(path.read_text())
        out.append((name, record["compile_s"], record["step_s"], record["machine"], record["cpu_cores"]))
    return out


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--site"]:  # only what a browser measures, on the build as it is
        browser_figures()
        _print_live()
        _print_charts()
        return
    if argv:
        print("usage: python -m shardbook.book.bench [--site]", file=sys.stderr)
        raise SystemExit(2)
    shutil.rmtree(REPOSITORY_ROOT / "_build", ignore_errors=True)
    print("bench: clean build (make book after removing _build) ...", flush=True)
    clean_s = _timed(["make", "--no-print-directory", "book"])
    print("bench: no-change rebuild (make book again) ...", flush=True)
    again_s = _timed(["make", "--no-print-directory", "book"])
    print(f"\nclean build            {clean_s:8.1f} s")
    print(f"no-change rebuild      {again_s:8.1f} s   (aim: under 20 s)")
    print("\nbytes per page (HTML + images and SVGs it loads):")
    for name, size in page_weights(REPOSITORY_ROOT / "_build" / "html"):
        print(f"  {size:>10,}  {name}")
    times = model_step_times()
    if times is None:
        print("\nsmall model: no step times (the build did not run chapter 8)")
    else:
        machine, cores = times[0][3:]
        print(f"\nsmall model, one training step on 8 simulated CPU devices ({machine}; {cores} core(s) used):")
        print(f"  {'scheme':<11} {'compile':>8} {'step':>8}")
        for name, compile_s, step_s, *_ in times:
            print(f"  {name:<11} {compile_s:>6.1f} s {step_s * 1e3:>5.0f} ms")
    browser_figures()
    _print_live()
    _print_charts()


def _print_charts():
    found = chart_redraw_ms()
    if found is None:
        print("\ninstant charts: skipped (no chromium; apt-get install chromium)")
        return
    print(f"\ninstant charts, a slider dragged to the redrawn chart (aim: under {CHART_REDRAW_AIM_MS:.0f} ms):")
    for page, times in found.items():
        flag = "" if max(times) < CHART_REDRAW_AIM_MS else "   OVER"
        print(f"  {page:34} median {sorted(times)[len(times) // 2]:5.1f} ms   slowest {max(times):5.1f} ms{flag}")


def _print_live():
    found = live_seconds()
    if found is None:
        print("\nlive mode: skipped (no chromium; apt-get install chromium)")
        return
    first, second, again = found
    print(f"\nlive mode, click to live page (aim: under {LIVE_AIM_S:.0f} s on the loopback):")
    print(f"  chapter 1, first in the visit   {first:5.1f} s")
    print(f"  chapter 7, next in the visit    {second:5.1f} s   (Pyodide bytes asked of the server again: {again:,})")


if __name__ == "__main__":
    main()
