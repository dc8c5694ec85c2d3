"""Issue 33 item 4: the planner page in the browser. Its first visit loads
no Python and stays within the page budget; pressing Plan loads Pyodide
from the site (nothing off 127.0.0.1) and runs the book's planner on a
pasted config.json: the ranked meshes, and the two stacked bars, equal to
what CPython's planner.page.plan gives for the same form; a config that is
not JSON is refused in one sentence. Screenshots at 390 and 1280 px go to
_build/screenshots/planner-*.png."""

import json
from pathlib import Path

import pytest

from conftest import BUILD, HTML
from shardbook.book import site
from shardbook.planner import page as planner_page
from test_site import FIRST_VISIT_BUDGET_BYTES, _visit, server  # noqa: F401  (shared fixtures)

CONFIG = Path(__file__).parent / "data" / "hf_configs" / "mixtral-8x7b-v0.1.json"
REL = "chapters/99_planner.html"


def _plan(tab, form):
    for name, value in form.items():
        field = f".shardbook-planner [name='{name}']"
        if name in ("model", "accelerator"):
            tab.select_option(field, value)
        else:
            tab.fill(field, value)
    tab.click("button.shardbook-planner-run")
    tab.wait_for_function(
        "['ready', 'refused', 'failed'].includes(document.querySelector('div.shardbook-planner').dataset.state)"
        " && !document.querySelector('button.shardbook-planner-run').disabled",
        timeout=180_000,
    )
    return tab.eval_on_selector("div.shardbook-planner", "b => b.dataset.state")


def test_the_planner_page_runs_a_pasted_config(built_book, server, browser):  # noqa: F811
    assert (HTML / REL).exists(), "the planner page was not built"
    tab, log = _visit(browser, f"{server}/{REL}")
    raw, _ = site.loaded_bytes(tab, HTML)
    assert raw <= FIRST_VISIT_BUDGET_BYTES, raw
    assert not any("/_static/pyodide/" in p for p in log["paths"]), "Pyodide loaded before it was asked for"
    assert any(p.endswith("shardbook-planner.js") for p in log["paths"])
    shots = BUILD / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)

    form = {"model": "LLaMA-3 8B", "config": CONFIG.read_text(), "accelerator": "H100", "n_devices": "64",
            "batch": "4M", "batch_seqs": "", "seq_len": "4096"}  # fmt: skip
    assert _plan(tab, form) == "ready"
    want = planner_page.plan(json.dumps(form))
    rows = tab.eval_on_selector_all(
        ".shardbook-planner-output table tr", "rs => rs.slice(1).map(r => r.cells[1].textContent)"
    )
    assert rows == [c["label"] for c in want["top"]]
    # how each row runs beside its mesh, in the command line's words: schedule, micro, recompute, weights
    runs = tab.eval_on_selector_all(
        ".shardbook-planner-output table tr", "rs => rs.map(r => [2, 3, 4, 5].map(i => r.cells[i].textContent))"
    )
    assert runs[0] == ["schedule", "micro", "recompute", "weights"]
    assert runs[1:] == [
        [c["schedule_text"], str(c["micro_batch_seqs"]), c["recompute"], c["weights_text"]] for c in want["top"]
    ]
    # HBM as the device reports it, to a tenth of a GB as the command line prints it (H100: 85.5)
    memory = tab.eval_on_selector_all(
        ".shardbook-planner-output table tr", "rs => rs.slice(1).map(r => r.cells[7].textContent)"
    )
    assert memory and all(cell.endswith(" / 85.5") for cell in memory), memory
    # with the reserve in it, as the command line's column (cli.memory_text) and the bars
    used = [c["reserve_bytes"] + sum(c["memory_bytes"].values()) for c in want["top"]]
    shown = [float(cell.split(" / ")[0].replace(",", "")) for cell in memory]
    assert shown == pytest.approx([u / 1e9 for u in used], abs=0.051)  # to the tenth shown (the reserve is 3 GB)
    text = tab.inner_text(".shardbook-planner-output")
    assert want["model"] in text and "the shapes of Mixtral-8x7B-v0.1, published" in text
    charts = tab.eval_on_selector_all(
        "svg.shardbook-planner-chart",
        "ss => ss.map(s => [s.getAttribute('aria-label'), s.querySelectorAll('rect').length, s.querySelectorAll('line').length])",
    )
    assert [c[0] for c in charts] == ["Memory per device by component", "Expected step time by component"]
    assert charts[0][1] > len(want["top"]) and charts[0][2] == 1  # stacked segments and the HBM line
    assert charts[1][1] > len(want["top"])
    tab.locator("div.shardbook-planner").screenshot(path=str(shots / "planner-1280.png"))
    # on a phone: planned again at 390 px, the bars drawn at the width they are shown at
    tab.set_viewport_size({"width": 390, "height": 844})
    tab.wait_for_timeout(500)
    assert _plan(tab, form) == "ready"
    tab.locator("div.shardbook-planner").screenshot(path=str(shots / "planner-390.png"))
    width = tab.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the page scrolls sideways at 390 px ({width} px)"
    sizes = tab.eval_on_selector_all(
        "svg.shardbook-planner-chart text",
        "ts => ts.map(t => t.getBoundingClientRect().height).filter(h => h > 0)",
    )
    assert min(sizes) >= 10, f"chart text {min(sizes):.1f} px high at 390 px"
    tab.set_viewport_size({"width": 1280, "height": 900})

    assert _plan(tab, {**form, "config": "{not json"}) == "refused"
    error = tab.inner_text(".shardbook-planner-error")
    assert (
        error
        == "The planner cannot run this: " + planner_page.plan(json.dumps({**form, "config": "{not json"}))["error"]
    )
    assert _plan(tab, {**form, "config": "", "n_devices": "-8"}) == "refused"
    assert "n_devices: must be a whole number >= 1" in tab.inner_text(".shardbook-planner-error")
    # audit 4, N1: a config nested 20,000 deep killed Pyodide for the tab (its stack overflows before
    # Python's recursion limit); it is refused in the same sentence as in CPython, and the page plans again
    deep = {**form, "config": "[" * 20000 + "]" * 20000}
    assert _plan(tab, deep) == "refused"
    assert tab.inner_text(".shardbook-planner-error") == (
        "The planner cannot run this: " + planner_page.plan(json.dumps(deep))["error"]
    )
    # audit 4, N5: a count beyond 2**53 is refused, not rounded to its nearest float
    assert _plan(tab, {**form, "config": "", "n_devices": "9007199254740993"}) == "refused"
    assert "n_devices: at most 2**53" in tab.inner_text(".shardbook-planner-error")
    assert _plan(tab, {**form, "config": ""}) == "ready"
    assert not log["console"] and not log["offsite"], log
    tab.close()
