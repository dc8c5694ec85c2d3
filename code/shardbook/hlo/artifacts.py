"""Where the committed compiler captures are read from.

In a checkout of the repository (the package installed editable, as `make
setup` does) they are `hlo_artifacts/` beside `code/`. A package installed
from the repository with pip (`pip install "./code[notebook]"`, or from the
repository's address) carries a copy of the files the chapters read, the
text and the meta.json of every capture (`SHIPPED`; code/setup.py copies
them into the wheel), so that a chapter downloaded as a notebook runs
anywhere. The rendered graphs (DOT, SVG) stay in the repository.
"""

from pathlib import Path

from .. import REPOSITORY_ROOT

# what a built package carries of each fixture's folder, relative to it
SHIPPED = (
    "meta.json",
    "before_partitioning.txt",
    "after_partitioning.txt",
    "tpu/meta.json",
    "tpu/optimized.txt",
)
PACKAGED = Path(__file__).resolve().parents[1] / "data" / "hlo_artifacts"
CHECKOUT = REPOSITORY_ROOT / "hlo_artifacts"


def root(checkout=CHECKOUT, packaged=PACKAGED):
    """The folder of the captures, one subfolder per fixture: the checkout's
    `hlo_artifacts/` when there is one, else the copy shipped with the
    package; a ValueError saying how to get them when neither exists."""
    for folder in (Path(checkout), Path(packaged)):
        if folder.is_dir():
            return folder
    raise ValueError(
        f"hlo_artifacts: neither {checkout} (a checkout of the repository) nor {packaged} (the copy a package "
        'built from the repository carries) exists; install the package with pip install "./code[notebook]" '
        "from a clone of the repository"
    )


def shipped_files(source):
    """(path relative to `source`, path) for every file of the captures in
    folder `source` that a built package carries, in a stable order."""
    source = Path(source)
    files = []
    for folder in sorted(p for p in source.iterdir() if (p / "meta.json").is_file()):
        for name in SHIPPED:
            path = folder / name
            if path.is_file():
                files.append((path.relative_to(source).as_posix(), path))
    return files
