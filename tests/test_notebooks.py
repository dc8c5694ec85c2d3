"""Every chapter, converted by jupytext to .ipynb, runs top to bottom in a
fresh kernel, as a reader's Jupyter would. One test per chapter, so a failure
names its chapter.

The build executes each chapter in a fresh kernel (myst-nb's cache mode,
nbclient) and caches only an execution that raised nothing. When jupytext's
notebook of a chapter has exactly the code cells of such a cached execution
(jupyter-cache matches on the cells' sources and the kernel), and that
execution is newer than the package and the artifacts it read, the reader's
notebook has already run: the test reads the cached record instead of running
the chapter a second time. Otherwise (no build, a chapter edited since) it
runs the notebook with nbclient, two chapters at a time."""

from concurrent.futures import ThreadPoolExecutor

import jupytext
import pytest
from nbclient import NotebookClient

from conftest import BUILD, CHAPTERS, ROOT

CACHE = BUILD / ".jupyter_cache"
# what a chapter's execution depends on besides its own cells (the Makefile's CACHE_INPUTS)
EXECUTION_INPUTS = [
    *(ROOT / "code" / "shardbook").rglob("*.py"),
    *(ROOT / "hlo_artifacts").glob("*/meta.json"),
    *(ROOT / "hlo_artifacts").glob("*/tpu/meta.json"),
    *(ROOT / "code" / "shardbook" / "data").glob("*.json"),
]


def _read(path):
    try:
        return jupytext.read(path), None
    except Exception as exc:  # jupytext's own errors (bad YAML in a cell's options, say) do not name the file
        return None, f"{path.name}: cannot be read as a notebook: {exc.__class__.__name__}: {exc}"


def _executed_by_the_build(nb):
    """The build's successful execution of exactly these code cells, if it is
    newer than everything the chapter reads; else None."""
    if not CACHE.is_dir():
        return None
    from jupyter_cache import get_cache

    try:
        record = get_cache(str(CACHE)).match_cache_notebook(nb)
    except KeyError:
        return None
    newest_input = max(p.stat().st_mtime for p in EXECUTION_INPUTS)
    return record if record.created.timestamp() > newest_input else None


def _run(path):
    """(code cells run, how, None) or (0, how, an error message that starts with the file's name)."""
    nb, error = _read(path)
    if error:
        return 0, "read", error
    n_code = sum(1 for c in nb.cells if c.cell_type == "code")
    if _executed_by_the_build(nb) is not None:
        return n_code, "executed by the build", None
    client = NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "chapters")}}
    )
    try:
        client.execute()
    except Exception as exc:
        return 0, "executed", f"{path.name}: {exc.__class__.__name__}: {str(exc)[-2000:]}"
    return n_code, "executed", None


@pytest.fixture(scope="module")
def executed_chapters():
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip((p.stem for p in CHAPTERS), pool.map(_run, CHAPTERS), strict=True))


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_runs_as_a_notebook(path, executed_chapters):
    n_cells, how, error = executed_chapters[path.stem]
    assert error is None, error
    assert n_cells > 0, f"{path.name}: no code cells ran"
    print(f"{path.name}: {n_cells} code cells, {how}")


def test_a_cell_with_bad_yaml_names_its_file(tmp_path):
    bad = tmp_path / "99_bad.md"
    header = (ROOT / "chapters" / "_header.txt").read_text()
    bad.write_text(header + "\n# Bad\n\n```{code-cell} ipython3\n---\ntags: [remove-input\n---\nprint(1)\n```\n")
    n_cells, _, error = _run(bad)
    assert n_cells == 0 and error.startswith("99_bad.md: ")


def test_a_chapter_the_build_did_not_run_is_executed(tmp_path):
    header = (ROOT / "chapters" / "_header.txt").read_text()
    ok, failing = tmp_path / "98_ok.md", tmp_path / "99_failing.md"
    ok.write_text(header + "\n# Fine\n\n```{code-cell} ipython3\nx = 6 * 7\n```\n")
    failing.write_text(header + "\n# Fails\n\n```{code-cell} ipython3\nraise ValueError('planted')\n```\n")
    assert _run(ok) == (1, "executed", None)
    n_cells, how, error = _run(failing)
    assert (n_cells, how) == (0, "executed") and error.startswith("99_failing.md: ") and "planted" in error


def test_the_build_record_matches_only_the_cells_it_ran(built_book):
    nb, _ = _read(CHAPTERS[0])
    assert _executed_by_the_build(nb) is not None, "make test's build should have cached the first chapter"
    code = next(c for c in nb.cells if c.cell_type == "code")
    code.source += "\nprint('a line the build never ran')"
    assert _executed_by_the_build(nb) is None
