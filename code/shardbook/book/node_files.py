"""Files the build takes from the npm packages of package.json
(node_modules/) and copies into the site, copied only when changed."""

import shutil
from pathlib import Path

from .. import REPOSITORY_ROOT


def node_package(srcdir, name, needed):
    """The folder of an npm package of package.json: in the project being
    built, else in the book's repository (a test's small Sphinx project)."""
    for root in (Path(srcdir), REPOSITORY_ROOT):
        folder = root / "node_modules" / name
        if (folder / needed).exists():
            return folder
    raise RuntimeError(f"{name} is missing from node_modules/: run `make book`, which installs package.json with npm")


def copy_if_changed(src, dst):
    """Copy a file, or every file of a folder, unless the copy is current."""
    if src.is_dir():
        for path in src.rglob("*"):
            if path.is_file():
                copy_if_changed(path, dst / path.relative_to(src))
        return
    if dst.exists() and dst.stat().st_size == src.stat().st_size and dst.stat().st_mtime >= src.stat().st_mtime:
        return
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dst)
