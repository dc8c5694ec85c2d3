"""Live mode in the browser: after "Make this page live", changing inputs
recomputes the page's live numbers with Pyodide, and each equals what
CPython computes with the same function for the same inputs; bad input is
refused with the cost model's own message. No request leaves 127.0.0.1."""

import json
import re
import time

import pytest

from conftest import HTML
from shardbook import ledger
from test_site import _visit, server, switch_theme  # noqa: F401  (shared fixtures)


def _live_pages():
    pages = []
    for page in sorted(HTML.glob("chapters/*.html")):
        blocks = re.findall(  # attributes in any order
            r'<script(?=[^>]*\bclass="shardbook-live")(?=[^>]*\btype="application/json")[^>]*>(.*?)</script>',
            page.read_text(),
            re.S,
        )
        if blocks:
            pages.append((page.relative_to(HTML).as_posix(), [json.loads(b.replace("<\\/", "</")) for b in blocks]))
    return pages


def _cpython(spec, arguments):
    namespace = {}
    exec(spec["source"], namespace)
    return ledger.evaluate_live(namespace[spec["function"]], arguments)


def _changed(value, input_):
    """Another value in the input's domain: the next option, or the printed
    value doubled (2.5 times for a real number), halved if that leaves it."""
    if input_["kind"] == "choice":
        return next(o for o in input_["options"] if o != value)
    factor = 2 if input_["kind"] == "integer" else 2.5
    if value * factor <= input_["maximum"]:
        return value * factor
    return value // factor if input_["kind"] == "integer" else value / factor


def test_every_chapter_declares_live_values(built_book):
    """Every numbered chapter but 8 (whose numbers come from training runs) has
    a live mode, and every numeric input declares its domain: whole or not,
    a range, a unit (ledger.number_input), with the printed input inside it."""
    pages = dict(_live_pages())
    chapters = {p.relative_to(HTML).as_posix() for p in HTML.glob("chapters/0[0-79]_*.html")}
    assert chapters <= set(pages), f"chapters without a live mode: {sorted(chapters - set(pages))}"
    for rel, specs in pages.items():
        for spec in specs:
            for input_ in spec["inputs"]:
                if input_["kind"] == "choice":
                    assert input_["default"] in input_["options"]
                    continue
                assert input_["kind"] in ("integer", "number"), (rel, input_)
                assert {"minimum", "maximum", "unit", "label"} <= set(input_), (
                    f"{rel}: {input_['name']} declares no domain"
                )
                assert input_["minimum"] <= input_["default"] <= input_["maximum"], (rel, input_)
                if input_["kind"] == "integer":
                    assert abs(input_["maximum"]) <= 2**53 and abs(input_["minimum"]) <= 2**53, (rel, input_)


# Pages made live once and shared (Pyodide starts once per page, not once per
# test): chapter 1 (the fields the refusal tests type into) and chapters 6 and
# 7 (made live one after the other from a server the browser has not seen, to
# show Pyodide's files travel once). Their values are checked on those pages.
TOPOLOGY_PAGE = "chapters/01_topology.html"
FRESH_ORIGIN_PAGES = ("chapters/06_pipeline.html", "chapters/07_choosing_a_mesh.html")
SHARED_LIVE_PAGES = {TOPOLOGY_PAGE, *FRESH_ORIGIN_PAGES}


def _check_live_values(page, log, rel, specs):
    """Change two inputs of each live function on the live `page` and check
    every value it shows against CPython's; and that nothing the visit
    recorded (`log`) left the machine or failed in the console."""
    for spec in specs:
        arguments = {i["name"]: i["default"] for i in spec["inputs"]}
        for input_ in spec["inputs"][:2]:  # change two inputs
            arguments[input_["name"]] = _changed(input_["default"], input_)
            selector = f"[name='{input_['name']}']"
            if input_["kind"] == "choice":
                page.select_option(selector, arguments[input_["name"]])
            else:
                page.fill(selector, str(arguments[input_["name"]]))
                page.dispatch_event(selector, "change")
        expected = _cpython(spec, arguments)
        for name, text in expected.items():
            shown = page.eval_on_selector_all(f".glue-key-{name}", "els => els.map(e => e.textContent)")
            assert shown and all(s == text for s in shown), f"{rel}: {name} shows {shown}, CPython gives {text!r}"
    assert not log["offsite"], log["offsite"]
    assert not log["console"], log["console"]


@pytest.mark.parametrize(
    "rel,specs",
    [(r, s) for r, s in _live_pages() if r not in SHARED_LIVE_PAGES],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_live_values_match_cpython(rel, specs, server, browser):  # noqa: F811
    page, log = _visit(browser, f"{server}/{rel}")
    start = time.monotonic()
    _live(page)
    print(
        f"\n{rel}: live in {time.monotonic() - start:.1f} s (page's own timer {page.get_attribute('.shardbook-live', 'data-ready-ms')} ms)"
    )
    _check_live_values(page, log, rel, specs)
    page.close()


def test_live_values_match_cpython_on_chapter_1(topology, topology_live):
    page, log = topology_live
    _check_live_values(page, log, TOPOLOGY_PAGE, dict(_live_pages())[TOPOLOGY_PAGE])


@pytest.mark.parametrize("rel", FRESH_ORIGIN_PAGES)
def test_live_values_match_cpython_on_chapters_6_and_7(rel, fresh_origin_live):
    page, log = fresh_origin_live["pages"][rel]
    _reset(page)
    _check_live_values(page, log, rel, dict(_live_pages())[rel])


def _live(page):
    page.click("button.shardbook-live-start")
    page.wait_for_selector(".shardbook-live[data-state=ready]", timeout=120_000)


def _set(page, name, text):
    page.fill(f"[name='{name}']", text)
    page.dispatch_event(f"[name='{name}']", "change")
    return page.inner_text(f"label:has([name='{name}']) .shardbook-live-error")


def _reset(page):
    """Reset a live page to the printed values, and check it shows them as a
    reader finds them then: no refusal shown, nothing marked stale."""
    page.click("text=Reset to the printed values")
    assert page.eval_on_selector_all(".shardbook-live-error", "es => es.map(e => e.textContent).join('')") == ""
    assert page.eval_on_selector_all(".live-stale", "es => es.length") == 0
    assert page.evaluate("document.querySelector('.shardbook-live-changed').hidden")


@pytest.fixture(scope="module")
def topology_live(server, browser):  # noqa: F811
    """Chapter 1 gone live once, shared by the tests that type into it
    (Pyodide starts once instead of once per test): (page, what its visit recorded)."""
    page, log = _visit(browser, f"{server}/{TOPOLOGY_PAGE}", theme="light")
    assert page.evaluate("document.documentElement.dataset.theme") == "light"
    _live(page)
    yield page, log
    page.close()


@pytest.fixture
def topology(topology_live):
    """The shared live chapter 1 as a reader finds it after Reset."""
    page, _ = topology_live
    _reset(page)
    return page


@pytest.fixture(scope="module")
def fresh_origin_live(browser):  # noqa: F811
    """Chapters 6 and 7 made live one after the other from a server of their
    own, the browser's cache emptied first (the browser is shared, and a port
    can come round again), recording what each asked the server for:
    {"first": Pyodide's requests by the first page, "again": by the second,
    "pages": {rel: (page, visit record)}}."""
    from shardbook.book import site

    blank = browser.new_page()
    browser.new_cdp_session(blank).send("Network.clearBrowserCache")
    blank.close()
    requests = []
    with site.serve(HTML, requests=requests) as base:
        pages = {}
        found = {}
        for rel, key in zip(FRESH_ORIGIN_PAGES, ("first", "again"), strict=True):
            requests.clear()
            pages[rel] = _visit(browser, f"{base}/{rel}")
            _live(pages[rel][0])
            found[key] = [r for r in requests if "/_static/pyodide/" in r and not r.endswith("sizes.json")]
            found[f"{key}_package"] = [r for r in requests if "/_static/shardbook/" in r]
        yield {**found, "pages": pages}
        for page, _ in pages.values():
            page.close()


def test_bad_input_is_refused_and_numbers_kept(topology):
    """The cost model's refusal is shown next to the field in the field's own
    words; the numbers keep their last good values and are marked stale
    until the input is fixed."""
    page = topology
    before = page.inner_text(".glue-key-topo_ag_across_ms")
    assert _set(page, "n_nodes", "0") == "nodes: must be a whole number from 2 to 1,024, got 0"
    assert page.inner_text(".glue-key-topo_ag_across_ms") == before
    assert "live-stale" in page.get_attribute(".glue-key-topo_ag_across_ms", "class")
    assert _set(page, "buffer_gb", "-1") == "buffer: must be a number from 0.1 to 1,000 GB, got -1"
    assert _set(page, "n_nodes", "3") == ""
    assert _set(page, "buffer_gb", "1") == ""
    assert "live-stale" not in page.get_attribute(".glue-key-topo_ag_across_ms", "class")
    page.click("text=Reset to the printed values")
    assert page.input_value("[name='n_nodes']") == "2"


@pytest.mark.parametrize("typed", ["1e3", "2.7", "3 nodes", ""])
def test_integer_fields_parse_strictly(topology, typed):
    """parseInt would turn 1e3 into 1 and 2.7 into 2 without a word; the field
    refuses them, naming itself and the rule."""
    page = topology
    before = page.inner_text(".glue-key-topo_ag_across_n")
    assert _set(page, "n_nodes", typed) == f'nodes: must be a whole number (digits only), got "{typed}"'
    assert page.inner_text(".glue-key-topo_ag_across_n") == before


def test_reset_always_restores_and_later_edits_start_from_it(topology):
    """After an edit and Reset, the next edit must compute from the printed
    inputs, not from the edit Reset undid."""
    page = topology
    spec = next(s for rel, specs in _live_pages() if rel.endswith("01_topology.html") for s in specs)
    printed = page.inner_text(".glue-key-topo_ag_across_n")
    assert _set(page, "n_nodes", "4") == ""
    assert page.inner_text(".glue-key-topo_ag_across_n") != printed
    page.click("text=Reset to the printed values")
    assert page.inner_text(".glue-key-topo_ag_across_n") == printed
    assert _set(page, "buffer_gb", "2") == ""
    arguments = {i["name"]: i["default"] for i in spec["inputs"]}
    arguments["buffer_gb"] = 2.0
    expected = _cpython(spec, arguments)
    assert page.inner_text(".glue-key-topo_ag_across_n") == expected["topo_ag_across_n"] == printed
    assert page.inner_text(".glue-key-topo_ag_inside_ms") == expected["topo_ag_inside_ms"]


def test_loading_shows_bytes_and_the_panel_summarizes_changes(topology):
    """Loading counts the bytes of Pyodide's large files; once live, the panel
    stays in view and lists each changed value as a link to where it stands;
    Reset empties the list."""
    page = topology
    sizes = sum(
        (HTML / "_static" / "pyodide" / n).stat().st_size
        for n in ("pyodide.asm.wasm", "python_stdlib.zip", "pyodide.asm.mjs")
    )
    assert int(page.get_attribute(".shardbook-live", "data-loaded-bytes")) == sizes
    assert _set(page, "n_nodes", "4") == ""
    page.evaluate("window.scrollTo(0, document.body.scrollHeight / 2)")
    top = page.evaluate("document.querySelector('.shardbook-live-panel').getBoundingClientRect().top")
    assert 0 <= top < 200, f"the panel scrolled out of view (top at {top}px)"
    links = page.eval_on_selector_all(
        ".shardbook-live-changed a", "as => as.map(a => [a.getAttribute('href'), a.textContent])"
    )
    assert links, "no changed values listed"
    for href, text in links:
        assert page.inner_text(href) == text
    page.click("text=Reset to the printed values")
    assert page.evaluate("document.querySelector('.shardbook-live-changed').hidden")


def test_wording_follows_the_numbers(fresh_origin_live):
    """Chapter 7's sentence about the bound is chosen by the live function:
    with a batch large enough the step turns compute-bound and the sentence
    says so; the browser shows what CPython chooses."""
    rel = "chapters/07_choosing_a_mesh.html"
    spec = next(s for r, specs in _live_pages() if r == rel for s in specs if "mesh_iw_bound_sentence" in s["values"])
    assert set(spec["phrases"]["mesh_iw_bound_sentence"]) >= {"the step is compute-bound"}
    page, log = fresh_origin_live["pages"][rel]
    _reset(page)
    printed = page.inner_text(".glue-key-mesh_iw_bound_sentence")
    assert printed == "the step is communication-bound by about a factor of two"
    arguments = {i["name"]: i["default"] for i in spec["inputs"]}
    arguments["batch_tokens"] = 64 * 2**20
    expected = _cpython(spec, arguments)
    assert expected["mesh_iw_bound_sentence"] == "the step is compute-bound"
    assert float(expected["mesh_iw_ratio"]) >= 1
    assert _set(page, "batch_tokens", str(arguments["batch_tokens"])) == ""
    for name in ("mesh_iw_bound_sentence", "mesh_iw_ratio", "mesh_iw_versus_v5p"):
        assert page.inner_text(f".glue-key-{name}") == expected[name]
    assert not log["console"], log["console"]


def test_the_package_is_fetched_under_the_builds_version(fresh_origin_live):
    """Audit 4, N3: the package's files were fetched by plain URLs that a host lets browsers keep
    ten minutes, so a rebuilt page ran the previous build's Python. Each is fetched as
    NAME?v=<the version the page names>."""
    from shardbook.book import live_assets

    version = live_assets.live_version()
    page = fresh_origin_live["pages"][FRESH_ORIGIN_PAGES[0]][0]
    assert page.get_attribute('meta[name="shardbook-live-version"]', "content") == version
    fetched = fresh_origin_live["first_package"]
    assert any(r.split("?")[0].endswith("/manifest.json") for r in fetched), fetched
    assert len(fetched) == len(live_assets.live_files()) + 1
    assert all(r.endswith(f"?v={version}") for r in fetched), fetched


def test_second_live_page_starts_from_the_cache(fresh_origin_live):
    """Pyodide's files (about 13 MB) travel once per visit: the first page
    asks for each once (the loader is handed the runtime and the standard
    library the progress count fetched, where it used to fetch the runtime
    a second time), and the second page made live finds them in the
    browser's caches (Cache Storage; HTTP caching for the small files)."""
    first = fresh_origin_live["first"]
    for name in ("pyodide.asm.wasm", "python_stdlib.zip", "pyodide.asm.mjs"):
        assert sum(r.endswith(name) for r in first) == 1, (
            f"{name} requested {sum(r.endswith(name) for r in first)} times: {first}"
        )
    again = fresh_origin_live["again"]
    assert not again, f"the second live page fetched Pyodide again: {again}"


def _refusal_contrast_problems(page):
    """axe-core's colour-contrast rule on the live panel of a live page, with
    a refused input showing its error text."""
    from test_site import AXE, _axe

    assert _set(page, "n_nodes", "0") != ""
    return _axe(page, AXE.read_text(), context="'.shardbook-live'", rules=["color-contrast"])


def test_refusal_text_is_readable_in_light_mode(topology):
    """The refused input's error text keeps 4.5:1 contrast (axe-core), on the
    shared live chapter 1 in the light theme."""
    found = _refusal_contrast_problems(topology)
    assert not found, f"light: low contrast in the live panel: {found}"


def test_refusal_text_is_readable_in_dark_mode(topology):
    """The same in the dark theme, switched to with the live panel open, as a
    reader's click on the theme switch would (test_site.switch_theme waits
    for the colours' transitions to end)."""
    switch_theme(topology, "dark")
    try:
        found = _refusal_contrast_problems(topology)
    finally:
        switch_theme(topology, "light")
    assert not found, f"dark: low contrast in the live panel: {found}"


# --- each input's domain (issue 32): refused beside the field, numbers kept ---


@pytest.mark.parametrize(
    "name,typed,message",
    [
        ("buffer_gb", "1e30", "buffer: must be a number from 0.1 to 1,000 GB, got 1e30"),
        ("buffer_gb", "0", "buffer: must be a number from 0.1 to 1,000 GB, got 0"),
        ("buffer_gb", "1000.5", "buffer: must be a number from 0.1 to 1,000 GB, got 1000.5"),
        ("n_nodes", "1025", "nodes: must be a whole number from 2 to 1,024, got 1025"),
        ("n_nodes", "100000000", "nodes: must be a whole number from 2 to 1,024, got 100000000"),
        (
            "n_nodes",
            str(2**53 + 1),
            f"nodes: must be a whole number from 2 to 1,024, got {2**53 + 1} (beyond 2**53, which a browser cannot hold exactly)",
        ),
    ],
)
def test_a_value_outside_its_domain_is_refused_and_the_page_keeps_its_numbers(topology, name, typed, message):
    """Chapter 1's inputs: a buffer of 1e30 GB or a hundred million nodes is
    refused next to the field with the range it accepts; every live number
    keeps its last good value, struck through, until the input is fixed."""
    page = topology
    spec = dict(_live_pages())[TOPOLOGY_PAGE][0]
    before = {v: page.inner_text(f".glue-key-{v}") for v in spec["values"]}
    assert _set(page, name, typed) == message
    assert {v: page.inner_text(f".glue-key-{v}") for v in spec["values"]} == before
    assert "live-stale" in page.get_attribute(f".glue-key-{spec['values'][-1]}", "class")
    # the range's ends are accepted
    inside = {"buffer_gb": "1000", "n_nodes": "1024"}[name]
    assert _set(page, name, inside) == ""
    assert not page.eval_on_selector_all(".live-stale", "es => es.length")


def test_the_same_domain_is_checked_in_cpython(built_book):
    """The live pages' declarations refuse outside values in CPython too
    (the Jupyter widgets' path, and the browser's after its own check)."""
    for _rel, specs in _live_pages():
        for spec in specs:
            namespace = {}
            exec(spec["source"], namespace)
            function = namespace[spec["function"]]
            arguments = {i["name"]: i["default"] for i in spec["inputs"]}
            for input_ in spec["inputs"]:
                if input_["kind"] == "choice":
                    bad = "no such option"
                else:
                    bad = input_["maximum"] + (1 if input_["kind"] == "integer" else input_["maximum"])
                with pytest.raises(ValueError, match=f"^{re.escape(input_['label'])}: must be "):
                    ledger.evaluate_live(function, {**arguments, input_["name"]: bad}, spec["inputs"])
            assert ledger.evaluate_live(function, arguments, spec["inputs"]) == _cpython(spec, arguments)


def test_the_live_panel_folds_on_a_phone(topology):
    """At 390 px the sticky panel folds to one line once the reader scrolls,
    so it covers little of the text, and its bar opens it again."""
    page = topology
    page.set_viewport_size({"width": 390, "height": 844})
    try:
        assert _set(page, "n_nodes", "4") == ""
        page.focus("body")
        page.evaluate("document.activeElement && document.activeElement.blur()")
        page.mouse.wheel(0, 600)
        page.wait_for_timeout(300)
        page.evaluate("window.scrollBy(0, 400)")
        page.wait_for_function(
            "document.querySelector('.shardbook-live-panel').classList.contains('shardbook-live-folded')"
        )
        height = page.evaluate("document.querySelector('.shardbook-live').getBoundingClientRect().height")
        assert height < 0.1 * 844, f"the folded panel is {height:.0f} px high on an 844 px screen"
        assert "changed" in page.inner_text(".shardbook-live-toggle")  # the bar says the page differs from print
        page.click(".shardbook-live-toggle")
        assert page.is_visible("[name='n_nodes']")
    finally:
        page.set_viewport_size({"width": 1280, "height": 900})
        _reset(page)


def test_a_domain_is_declared_whole_and_the_printed_input_lies_in_it():
    """ledger.number_input refuses a domain it cannot enforce (no bounds, an
    empty range, an integer bound a browser cannot hold), and ledger.live
    refuses a page whose printed input lies outside its own domain."""
    with pytest.raises(TypeError):
        ledger.number_input("nodes", integer=True)  # no minimum, no maximum
    with pytest.raises(ValueError, match="minimum: must be below maximum"):
        ledger.number_input("nodes", integer=True, minimum=8, maximum=8)
    with pytest.raises(ValueError, match=r"within ±2\*\*53"):
        ledger.number_input("tokens", integer=True, minimum=1, maximum=2**60)
    with pytest.raises(ValueError, match="maximum: must be a finite number"):
        ledger.number_input("buffer", unit="GB", minimum=0, maximum=float("inf"))
    spec = ledger.number_input("buffer", unit="GB", minimum=0.001, maximum=1000)
    assert ledger.domain_text(spec) == "a number from 0.001 to 1,000 GB"
    assert ledger.check_input(spec, 1000) == 1000
    with pytest.raises(ValueError, match=r"^buffer: must be a number from 0.001 to 1,000 GB, got 1e\+30$"):
        ledger.check_input(spec, 1e30)

    def job(n_chips=3):
        return {"x": ledger.value(n_chips)}

    with pytest.raises(ValueError, match=r"the printed input n_chips=3 lies outside its domain"):
        ledger.live(job, n_chips=ledger.number_input("chips", integer=True, minimum=64, maximum=9216))
