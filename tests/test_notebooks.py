"""Every chapter, converted by jupytext to .ipynb, runs top to bottom in a
fresh kernel with nbclient, as a reader's Jupyter would. One test per
chapter, so a failure names its chapter; the chapters still run two at a
time (this machine has two cores) in one shared pass."""

from concurrent.futures import ThreadPoolExecutor

import jupytext
import pytest
from nbclient import NotebookClient

from conftest import CHAPTERS, ROOT


def _run(path):
    """(code cells run, None) or (0, an error message that starts with the file's name)."""
    try:
        nb = jupytext.read(path)
    except Exception as exc:  # jupytext's own errors (bad YAML in a cell's options, say) do not name the file
        return 0, f"{path.name}: cannot be read as a notebook: {exc.__class__.__name__}: {exc}"
    client = NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "chapters")}}
    )
    try:
        client.execute()
    except Exception as exc:
        return 0, f"{path.name}: {exc.__class__.__name__}: {str(exc)[-2000:]}"
    return sum(1 for c in nb.cells if c.cell_type == "code"), None


@pytest.fixture(scope="module")
def executed_chapters():
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip((p.stem for p in CHAPTERS), pool.map(_run, CHAPTERS), strict=True))


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_chapter_runs_as_a_notebook(path, executed_chapters):
    n_cells, error = executed_chapters[path.stem]
    assert error is None, error
    assert n_cells > 0, f"{path.name}: no code cells ran"


def test_a_cell_with_bad_yaml_names_its_file(tmp_path):
    bad = tmp_path / "99_bad.md"
    header = (ROOT / "chapters" / "_header.txt").read_text()
    bad.write_text(header + "\n# Bad\n\n```{code-cell} ipython3\n---\ntags: [remove-input\n---\nprint(1)\n```\n")
    n_cells, error = _run(bad)
    assert n_cells == 0 and error.startswith("99_bad.md: ")
