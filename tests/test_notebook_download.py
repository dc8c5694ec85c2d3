"""A chapter downloaded from the site as a notebook runs elsewhere.

The `.ipynb` a chapter page offers (shardbook.book.pages.write_notebook)
runs from top to bottom, outside the repository, in a fresh virtual
environment that has nothing but `pip install "./code[notebook]"`: the
package's declared extra brings what the chapters import, and the package
built from the repository carries the compiler captures the chapters read
(shardbook.hlo.artifacts). The fast tests check the pieces (the extra's pins,
where the captures and the model's records are found); the slow one builds
the environment (about 20 s from pip's cache) and runs a chapter in it.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from conftest import ROOT
from shardbook.hlo import artifacts
from shardbook.programs import runs

# the chapter run in the fresh environment: JAX programs on eight simulated
# devices, the compiler captures (CPU and TPU), Matplotlib and the ledger
CHAPTER = "02_sharding"
KERNEL = "shardbook-fresh"


def _pins(lines):
    """{name: version} of `name==version` requirement lines (extras dropped)."""
    pins = {}
    for line in lines:
        match = re.match(r"^\s*([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([^\s;#]+)", line)
        if match:
            pins[match.group(1).lower()] = match.group(2)
    return pins


def test_the_notebook_extra_pins_what_requirements_txt_pins():
    extra = tomllib.loads((ROOT / "code" / "pyproject.toml").read_text())["project"]["optional-dependencies"][
        "notebook"
    ]
    assert all("==" in r for r in extra), f"every requirement of the notebook extra is pinned: {extra}"
    pinned = _pins(extra)
    book = _pins((ROOT / "requirements.txt").read_text().splitlines())
    for name in ("jax", "numpy", "matplotlib", "graphviz", "ipykernel", "ipywidgets"):
        assert name in pinned, f"the notebook extra lacks {name}"
    for name, version in pinned.items():
        assert book.get(name) == version, (
            f"{name}: the notebook extra pins {version}, requirements.txt {book.get(name)}"
        )


def test_captures_come_from_the_checkout_or_else_the_package(tmp_path):
    checkout, packaged = tmp_path / "checkout", tmp_path / "packaged"
    with pytest.raises(ValueError, match=r"^hlo_artifacts: neither .* exists; install the package"):
        artifacts.root(checkout, packaged)
    packaged.mkdir()
    assert artifacts.root(checkout, packaged) == packaged
    checkout.mkdir()
    assert artifacts.root(checkout, packaged) == checkout
    # in this checkout: the committed captures
    assert artifacts.root() == ROOT / "hlo_artifacts"


def test_a_built_package_carries_every_capture_the_chapters_read():
    shipped = dict(artifacts.shipped_files(ROOT / "hlo_artifacts"))
    for name in sorted(p.parent.name for p in (ROOT / "hlo_artifacts").glob("*/meta.json")):
        for file in ("meta.json", "after_partitioning.txt", "tpu/meta.json", "tpu/optimized.txt"):
            assert f"{name}/{file}" in shipped, f"{name}/{file} is not shipped"
    # every file of a capture a chapter opens is among them
    for chapter in sorted((ROOT / "chapters").glob("[0-9][0-9]_*.md")):
        text = chapter.read_text()
        for name, file in re.findall(r'ARTIFACTS / "(\w+)"((?: / "[\w.]+")+)', text):
            relative = "/".join([name, *re.findall(r'"([\w.]+)"', file)])
            if relative.endswith((".txt", ".json")):
                assert relative in shipped, f"{chapter.name} reads {relative}, which a built package does not carry"
    assert 'Path("..") / "hlo_artifacts"' not in "".join(c.read_text() for c in (ROOT / "chapters").glob("*.md"))


def test_the_model_records_live_in_the_build_or_else_the_users_cache(tmp_path):
    (tmp_path / "repo" / "code").mkdir(parents=True)
    (tmp_path / "repo" / "code" / "pyproject.toml").write_text("")
    assert runs.default_cache_dir(tmp_path / "repo") == tmp_path / "repo" / "_build" / "model_runs"
    installed = tmp_path / "venv" / "lib"
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    assert runs.default_cache_dir(installed, env) == tmp_path / "cache" / "shardbook" / "model_runs"
    assert runs.default_cache_dir(installed, {}) == Path.home() / ".cache" / "shardbook" / "model_runs"


def test_the_front_page_map_reads_the_titles_the_package_carries(tmp_path):
    from shardbook.book import book_map

    titles = book_map.chapter_titles(ROOT / "chapters")
    packaged = tmp_path / "chapter_titles.json"
    packaged.write_text(json.dumps(titles))
    alone = tmp_path / "downloaded"  # the front page downloaded into a folder of its own
    alone.mkdir()
    assert book_map.chapter_titles(alone, packaged) == titles
    with pytest.raises(ValueError, match=r"^chapters_dir: .* has no chapter 01_topology\.md$"):
        book_map.chapter_titles(alone, tmp_path / "absent.json")


def test_binder_installs_the_package_with_its_notebook_extra():
    lines = [x for x in (ROOT / "binder" / "requirements.txt").read_text().splitlines() if x and not x.startswith("#")]
    assert "./code[notebook]" in lines
    jupytext = _pins((ROOT / "requirements.txt").read_text().splitlines())["jupytext"]
    assert f"jupytext=={jupytext}" in lines


def fresh_environment(folder):
    """A virtual environment in `folder` with only the package and its
    notebook extra, installed by pip from a copy of the repository's code/,
    hlo_artifacts/ and chapters/ (so that the build leaves nothing in the checkout),
    and a Jupyter kernel spec for it. Returns (python, JUPYTER_PATH)."""
    folder = Path(folder)
    source = folder / "repository"
    ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    shutil.copytree(ROOT / "code", source / "code", ignore=ignore)
    shutil.copytree(ROOT / "hlo_artifacts", source / "hlo_artifacts")
    shutil.copytree(ROOT / "chapters", source / "chapters")
    subprocess.run([sys.executable, "-m", "venv", str(folder / "venv")], check=True)
    python = folder / "venv" / "bin" / "python"
    install = [str(python), "-m", "pip", "install", "--quiet", "--no-compile", f"{source / 'code'}[notebook]"]
    subprocess.run(install, check=True, env=_without_the_book(os.environ), capture_output=True, text=True)
    kernels = folder / "kernels"
    subprocess.run(
        [str(python), "-m", "ipykernel", "install", "--prefix", str(kernels), "--name", KERNEL],
        check=True,
        capture_output=True,
    )
    return python, kernels / "share" / "jupyter"


def _without_the_book(environ):
    """The environment without what the Makefile and this virtualenv set:
    a reader's Python has no XLA flags, no JAX platform and no path to the
    checkout."""
    drop = {"XLA_FLAGS", "JAX_PLATFORMS", "PYTHONPATH", "VIRTUAL_ENV", "PYTHONHASHSEED", "JUPYTER_PATH"}
    return {k: v for k, v in environ.items() if k not in drop and not k.startswith("SHARDBOOK_")}


def run_downloaded(chapter, python, jupyter_path, workdir, timeout_s=600):
    """Execute chapter `chapter`'s downloaded notebook in folder `workdir`
    with the kernel of `python`; returns the executed notebook (nbclient
    raises CellExecutionError on the first cell that fails)."""
    import nbformat
    from nbclient import NotebookClient

    from shardbook.book.pages import write_notebook

    workdir = Path(workdir)
    notebook = workdir / f"{chapter}.ipynb"
    write_notebook(ROOT / "chapters" / f"{chapter}.md", notebook)
    nb = nbformat.read(notebook, as_version=4)
    # the last cell says where the kernel found the package and the captures
    where = "import json, sys, shardbook\nfrom shardbook.hlo import artifacts\n"
    where += (
        'print(json.dumps({"prefix": sys.prefix, "package": shardbook.__file__, "artifacts": str(artifacts.root())}))'
    )
    nb.cells.append(nbformat.v4.new_code_cell(where))
    env = _without_the_book(os.environ)
    env["XDG_CACHE_HOME"] = str(workdir / "cache")
    previous = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = str(jupyter_path)  # where jupyter_client finds the kernel spec
    try:
        client = NotebookClient(
            nb, kernel_name=KERNEL, timeout=timeout_s, resources={"metadata": {"path": str(workdir)}}
        )
        client.execute(env=env, cwd=str(workdir))
    finally:
        if previous is None:
            os.environ.pop("JUPYTER_PATH", None)
        else:
            os.environ["JUPYTER_PATH"] = previous
    return nb


@pytest.mark.slow
def test_a_downloaded_chapter_runs_in_a_fresh_environment(tmp_path):
    python, jupyter_path = fresh_environment(tmp_path / "env")
    workdir = tmp_path / "reader"
    workdir.mkdir()
    nb = run_downloaded(CHAPTER, python, jupyter_path, workdir)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, errors
    where = json.loads(nb.cells[-1].outputs[0]["text"])
    venv = str(tmp_path / "env" / "venv")
    assert where["prefix"] == venv, f"the kernel ran {where['prefix']}, not the fresh environment"
    assert where["package"].startswith(venv + "/"), f"shardbook came from {where['package']}, not the fresh install"
    assert where["artifacts"].startswith(venv + "/"), f"the captures came from {where['artifacts']}"
    assert str(ROOT) not in json.dumps(where)
    ran = sum(1 for c in nb.cells if c.cell_type == "code" and c.get("execution_count"))
    assert ran == sum(1 for c in nb.cells if c.cell_type == "code"), "a code cell did not run"


if __name__ == "__main__":  # run every chapter so: python tests/test_notebook_download.py FOLDER [CHAPTER ...]
    import tempfile
    import time

    base = Path(sys.argv[1])
    python, jupyter_path = (
        (base / "venv" / "bin" / "python", base / "kernels" / "share" / "jupyter")
        if (base / "venv").exists()
        else fresh_environment(base)
    )
    names = sys.argv[2:] or [c.stem for c in sorted((ROOT / "chapters").glob("[0-9][0-9]_*.md"))]
    for name in names:
        start = time.time()
        try:
            run_downloaded(name, python, jupyter_path, tempfile.mkdtemp(prefix=f"{name}-"))
            print(f"{name}: ran in {time.time() - start:.0f} s", flush=True)
        except Exception as exc:  # noqa: BLE001 - a report of every chapter
            print(f"{name}: FAILED after {time.time() - start:.0f} s: {str(exc)[-600:]}", flush=True)
