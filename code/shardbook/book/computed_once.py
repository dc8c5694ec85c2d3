"""Costly tables that chapters and tests share, computed once per version of
the package (book machinery, layer 3).

The leave-one-source-out table (transfer.leave_one_source_out: a refit of
every fitted figure without each source, some 35 s of one core) is read by
chapter 7, chapter 97 and tests/test_transfer.py. Each used to compute it,
so `make test` did the same work three times. Here the first to ask computes
it and writes it to a file; the others read the file. The file's name holds
a hash of everything that could change the table: every file of the package
(its code and data), the Python version and the arguments. A table on disk
is therefore the one this package computes, and any change to the package
computes it again. Two processes asking at once (a chapter's kernel and a
test worker) take a lock, so the second waits for the first and reads its
file. Writes go to a temporary file that then replaces the old one, so a
crash leaves no half-written table. A file that cannot be read is computed
again.

Where the files are: `_build/computed_once` in a checkout of the repository
(`make test` empties it before it starts, so each run computes the table
once); for a package installed with pip, the user's cache folder
($XDG_CACHE_HOME or ~/.cache, then shardbook/computed_once).
"""

import fcntl
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

import shardbook
from shardbook import transfer

_PACKAGE = Path(shardbook.__file__).resolve().parent


def default_dir(root=shardbook.REPOSITORY_ROOT, environ=os.environ):
    """The folder the tables are kept in (see the module's docstring)."""
    if (Path(root) / "code" / "pyproject.toml").is_file():
        return Path(root) / "_build" / "computed_once"
    cache = environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "shardbook" / "computed_once"


def package_digest(package=_PACKAGE):
    """sha256 over every file of the package (relative path and bytes), bytecode and caches aside."""
    digest = hashlib.sha256()
    for path in sorted(Path(package).rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            digest.update(str(path.relative_to(package)).encode() + b"\0" + path.read_bytes() + b"\0")
    digest.update(sys.version.encode())
    return digest.hexdigest()


def _key(name, args):
    digest = hashlib.sha256(package_digest().encode())
    digest.update(json.dumps([name, args], sort_keys=True).encode())
    return f"{name}-{digest.hexdigest()[:20]}"


def once(name, compute, to_data, from_data, args=None, folder=None):
    """`from_data` of what `compute(**args)` gives, through `to_data` and a
    json file kept under `folder` (default_dir()): computed only when no
    file for this name, these arguments and this package is there."""
    args = {} if args is None else args
    folder = Path(default_dir() if folder is None else folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{_key(name, args)}.json"
    with open(folder / f"{name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one computes, the others wait and read
        try:
            return from_data(json.loads(path.read_text()))
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            pass  # none yet, or unreadable: compute it
        data = to_data(compute(**args))
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as out:
                json.dump(data, out)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return from_data(data)


def leave_one_source_out(tol=1e-3, held_out=True, folder=None):
    """transfer.leave_one_source_out(tol, held_out), computed once per
    version of the package and shared (see the module's docstring)."""
    return once(
        "leave_one_source_out",
        transfer.leave_one_source_out,
        transfer.table_records,
        transfer.table_from_records,
        {"tol": tol, "held_out": held_out},
        folder,
    )
