"""Every chapter, converted by jupytext to .ipynb, runs top to bottom in a
fresh kernel with nbclient, as a reader's Jupyter would."""

from concurrent.futures import ThreadPoolExecutor

import jupytext
from nbclient import NotebookClient

from conftest import CHAPTERS, ROOT


def _run(path):
    nb = jupytext.read(path)
    client = NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(ROOT / "chapters")}})
    client.execute()
    return path.stem, sum(1 for c in nb.cells if c.cell_type == "code")


def test_every_chapter_runs_as_a_notebook():
    # two at a time: this machine has two cores
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = dict(pool.map(_run, CHAPTERS))
    assert set(results) == {p.stem for p in CHAPTERS}
    assert all(n > 0 for n in results.values())
