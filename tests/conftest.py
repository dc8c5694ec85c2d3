"""Shared paths for the tests. `make test` builds the book first; the tests
that read the build fail with a clear message when it is missing."""

import os
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.md"))
BUILD = ROOT / "_build"
EXECUTED = BUILD / "jupyter_execute"
HTML = BUILD / "html"
EXPECTED_NUMBERS = ROOT / "tests" / "expected_numbers.json"
# A guard against a hung subprocess that starts JAX, not a claim about speed:
# `make test` runs these at nice 19 beside the book's build, where CI has
# taken 88-142 s to start and compile one (a 120 s guard failed there).
JAX_SUBPROCESS_GUARD_S = 600

# As the Makefile does, so that any single test file runs with plain pytest:
# eight simulated CPU devices, set before anything imports JAX.
from shardbook.devices import xla_flags_with_device_count  # noqa: E402

os.environ["XLA_FLAGS"] = xla_flags_with_device_count(os.environ.get("XLA_FLAGS", ""), 8)
os.environ.setdefault("JAX_PLATFORMS", "cpu")

from shardbook.book import expected  # noqa: E402

# No per-example deadline for Hypothesis: its 200 ms default is a wall-clock limit, which the
# properties here do not claim, and `make test` runs them at nice 19 beside the build, where an
# example of test_attention took 392 ms and failed the tier (a loaded fresh clone, 2026-12-06).
settings.register_profile("shardbook", deadline=None)
settings.load_profile("shardbook")

# `make check`, the fast tier (under 30 s on two cores), sets SHARDBOOK_FAST_TIER=1; `make test` does not.
FAST_TIER = os.environ.get("SHARDBOOK_FAST_TIER") == "1"


def examples(n):
    """Hypothesis's max_examples for a sweep that asks for `n`: all of them under `make test` (and plain
    pytest); a third, at least 10, in `make check`'s fast tier, where the cost-model sweep's examples
    (some 13,000, mostly Hypothesis's own work per example) took half the tier's 30 s."""
    return max(10, n // 3) if FAST_TIER else n


@pytest.fixture(scope="session")
def built_book():
    if not (HTML / "index.html").exists() or not list(EXECUTED.rglob("*.ipynb")):
        pytest.fail("the book has not been built: run `make test` (or `make book`) first")

    try:  # a failed, partial or stale build must not pass as the current one
        expected.check_build(EXECUTED, ROOT)
    except ValueError as exc:
        pytest.fail(f"the build cannot be trusted: {exc}")
    return BUILD


@pytest.fixture(scope="session")
def browser(tmp_path_factory):
    """Headless Chromium with a profile of its own, one per test process for
    every module that uses it (a start costs about two CPU-seconds); a proxy
    refuses, and records, any connection off 127.0.0.1."""
    from shardbook.book import site

    chromium = site.chromium()
    if chromium is None:
        pytest.fail(
            "Chromium is missing: install the Debian package 'chromium' (apt-get install chromium), or run `make test`, which installs it"
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw, site.sentinel_proxy() as (proxy, seen):
        context = pw.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=chromium,
            headless=True,
            args=site.CHROMIUM_FLAGS,
            viewport={"width": 1280, "height": 900},
            proxy={"server": proxy, "bypass": site.PROXY_BYPASS},
        )
        context.set_default_timeout(30_000)
        context.left_the_machine = seen
        yield context
        context.close()
        assert not seen, f"Chromium tried to connect off 127.0.0.1: {seen}"


# Markers from what a test needs, so that `make check` (-m "not build and not
# browser and not jax") selects the fast tier without a list kept by hand, and
# `make test` runs the tests not marked build beside the build.
BROWSER_FIXTURES = {"browser", "server", "jupyter"}
JAX_MODULES = {"test_hlo", "test_notebooks", "test_model", "test_one_model_tpu"}
PRINT_MODULES = {"test_pdf"}  # builds the single-page book and prints it with Chromium
# reads the build's executions (and runs a chapter itself only when none matches)
BUILD_READING_MODULES = {"test_notebooks"}
# Module fixtures too costly to set up on every worker: the tests that use one
# form a group that pytest-xdist (--dist loadgroup) gives to a single worker;
# every other test goes to whichever worker is free.
SHARED_FIXTURE_GROUPS = {
    "book_pdf": "pdf",  # `make pdf`: one single-page build and print
    "executed_chapters": "notebooks",
    "jupyter": "lab",  # a Jupyter server
    "topology_live": "live-topology",  # chapter 1 gone live (Pyodide started once)
    "fresh_origin_live": "live-fresh-origin",  # chapters 6 and 7 gone live
    "records": "model-records",
    "loso": "leave-one-source-out",  # nine refits of the planner's figures
    "graph": "import-graph",  # test_layers: every module's syntax tree
    "full_searches": "review-searches",  # test_planner: the review's three cases searched without a budget
}


def _mark_expression_deselects_jax(config):
    """Whether `-m` leaves out every test a JAX module's tests can be: marked
    jax, with or without build and browser (the tests it marks)."""
    text = config.getoption("markexpr", "")
    if not text:
        return False
    from _pytest.mark.expression import Expression  # what -m itself compiles with (pytest pinned)

    expression = Expression.compile(text)
    for build in (False, True):
        for browser in (False, True):
            marks = {"jax": True, "build": build, "browser": browser}
            if expression.evaluate(lambda name, marks=marks, **_: marks.get(name, False)):
                return False
    return True


def pytest_ignore_collect(collection_path, config):
    # `make check` deselects the JAX tests; importing their modules only to drop
    # them would import JAX on every worker (1.8 s each)
    if (
        collection_path.suffix == ".py"
        and collection_path.stem in JAX_MODULES
        and _mark_expression_deselects_jax(config)
    ):
        return True
    return None


def pytest_collection_modifyitems(config, items):
    # the tests that read the small model's records go last: under `make test`
    # the background trainer writes them while the tests beside the build run,
    # and a test that reached them early would wait with a core idle
    items.sort(key=lambda item: "records" in getattr(item, "fixturenames", ()))
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        printing = item.module.__name__ in PRINT_MODULES
        reads_build = item.module.__name__ in BUILD_READING_MODULES
        if "built_book" in names or names & BROWSER_FIXTURES or printing or reads_build:
            item.add_marker(pytest.mark.build)
        if names & BROWSER_FIXTURES or printing:
            item.add_marker(pytest.mark.browser)
        if item.module.__name__ in JAX_MODULES:
            item.add_marker(pytest.mark.jax)


def pytest_itemcollected(item):
    # as each test is collected, before any collection_modifyitems hook
    # (pytest-xdist reads the groups in its own)
    names = set(getattr(item, "fixturenames", ()))
    groups = {SHARED_FIXTURE_GROUPS[name] for name in names & SHARED_FIXTURE_GROUPS.keys()}
    if len(groups) > 1:
        raise pytest.UsageError(f"{item.nodeid}: uses the fixtures of more than one group {sorted(groups)}")
    if groups:
        item.add_marker(pytest.mark.xdist_group(groups.pop()))


def pytest_collection_finish(session):
    # a pytest-xdist that cannot read the groups (3.8 with pytest 9 writes the
    # group where pytest 9 no longer reads it) would run a costly module
    # fixture on every worker at once, `make pdf` twice in one folder
    if getattr(session.config.option, "loadgroup", False):
        lost = [i.nodeid for i in session.items if i.get_closest_marker("xdist_group") and "@" not in i.nodeid]
        if lost:
            raise pytest.UsageError(
                f"pytest-xdist dropped the xdist_group of {len(lost)} tests ({lost[0]}, ...): "
                "check the pytest and pytest-xdist pins in requirements.txt"
            )


def assert_clean_files(folder, files, sha256, label):
    """Each of `files` in `folder` matches its sha256 in `sha256` (a meta.json's) and holds no absolute
    path or timestamp, so that a recapture on the same versions is byte-identical (`label` names it)."""
    import hashlib
    import re

    for f in files:
        data = (folder / f).read_bytes()
        assert hashlib.sha256(data).hexdigest() == sha256[f], f"{label}/{f} does not match meta.json"
        text = data.decode()
        assert not re.search(r"/(work|tmp|root|home)/", text), f"{label}/{f} holds an absolute path"
        assert not re.search(r"\b20\d\d-\d\d-\d\d[T ]\d\d:\d\d", text), f"{label}/{f} holds a timestamp"


def run_main(main, *args):
    """What `python -m MODULE ARGS` gives, as subprocess.run(..., capture_output=True, text=True) does
    (returncode, stdout, stderr), from `main`, that module's main(argv), called in this process: a fresh
    interpreter costs some 0.2 s of one core, and the command-line tests start about a hundred. As the
    process would: a SystemExit's code is the exit status (a message goes to stderr, status 1), warnings
    are printed to stderr (an accelerator file the run reads leaves nothing behind: its calibration travels
    with the Accelerator it was read into). What only a process shows (the `python -m` entry point's own exit status, a
    closed pipe, a file read that would block) keeps its tests that start Python."""
    import contextlib
    import io
    import subprocess
    import warnings

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("default")
        warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: err.write(
            warnings.formatwarning(message, category, filename, lineno, line)
        )
        try:
            code = main([str(a) for a in args])
        except SystemExit as done:
            code = done.code
            if code is not None and not isinstance(code, int):
                print(code, file=err)
                code = 1
    return subprocess.CompletedProcess([main.__module__, *args], code or 0, out.getvalue(), err.getvalue())
