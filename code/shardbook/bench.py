"""`make bench`: build timings, page weight and live-mode start-up. A
benchmark, not a test.

Prints seconds for a clean build (cache and output removed), seconds for a
no-change rebuild (`make book` again), bytes per built page (its HTML plus
the images and SVGs it loads from the site itself), and, where Chromium is
installed, the seconds from pressing "Make this page live" to a live page.
"""

import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _timed(cmd):
    start = time.monotonic()
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
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


def live_seconds(page="chapters/01_topology.html"):
    """Seconds from the live-mode click to a ready panel, in headless Chromium."""
    from . import site

    chromium = site.chromium()
    if chromium is None:
        return None
    from playwright.sync_api import sync_playwright

    with site.serve(ROOT / "_build" / "html") as base, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=site.CHROMIUM_FLAGS)
        tab = browser.new_page()
        tab.goto(f"{base}/{page}", wait_until="networkidle")
        start = time.monotonic()
        tab.click("button.shardbook-live-start")
        tab.wait_for_selector(".shardbook-live[data-state=ready]", timeout=120_000)
        seconds = time.monotonic() - start
        browser.close()
    return seconds


def main():
    shutil.rmtree(ROOT / "_build", ignore_errors=True)
    print("bench: clean build (make book after removing _build) ...", flush=True)
    clean_s = _timed(["make", "--no-print-directory", "book"])
    print("bench: no-change rebuild (make book again) ...", flush=True)
    again_s = _timed(["make", "--no-print-directory", "book"])
    print(f"\nclean build            {clean_s:8.1f} s")
    print(f"no-change rebuild      {again_s:8.1f} s   (aim: under 20 s)")
    print("\nbytes per page (HTML + images and SVGs it loads):")
    for name, size in page_weights(ROOT / "_build" / "html"):
        print(f"  {size:>10,}  {name}")
    seconds = live_seconds()
    if seconds is None:
        print("\nlive mode: skipped (no chromium; apt-get install chromium)")
    else:
        print(f"\nlive mode, click to live page (chapter 1): {seconds:.1f} s   (aim: under 5 s)")


if __name__ == "__main__":
    main()
