"""Shared paths for the tests. `make test` builds the book first; the tests
that read the build fail with a clear message when it is missing."""

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "chapters").glob("[0-9][0-9]_*.md"))
BUILD = ROOT / "_build"
EXECUTED = BUILD / "jupyter_execute"
HTML = BUILD / "html"
EXPECTED_NUMBERS = ROOT / "tests" / "expected_numbers.json"

os.environ.setdefault("JAX_PLATFORMS", "cpu")


@pytest.fixture(scope="session")
def built_book():
    if not (HTML / "index.html").exists() or not list(EXECUTED.rglob("*.ipynb")):
        pytest.fail("the book has not been built: run `make test` (or `make book`) first")
    from shardbook import ledger

    try:  # a failed, partial or stale build must not pass as the current one
        ledger.check_build(EXECUTED, ROOT)
    except ValueError as exc:
        pytest.fail(f"the build cannot be trusted: {exc}")
    return BUILD
