"""The build's own house-keeping, run by `make book` and `make test` before
Jupyter Book starts (book machinery, layer 3):

- the build folder must be writable, or the build stops with one line;
- a damaged execution cache (a corrupt database, an executed notebook that
  is gone or unreadable) is removed with a one-line message, and the build
  goes on to run the chapters again instead of failing deep inside
  jupyter-cache.

    python -m shardbook.book.buildcache _build
"""

import os
import shutil
import sys
import tempfile
from pathlib import Path


def check_writable(build_dir):
    """ValueError with one line when `build_dir` cannot be written."""
    build = Path(build_dir)
    try:
        build.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=build, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise ValueError(
            f"{build}: the build folder is not writable ({exc.strerror or exc}); fix its permissions or remove it"
        ) from None


def heal(cache_dir):
    """Open the jupyter-cache at `cache_dir` and read every cached notebook.
    If anything is damaged, remove the cache and return a one-line reason;
    return None when it is sound or absent."""
    path = Path(cache_dir)
    if not path.exists():
        return None
    try:
        from jupyter_cache import get_cache

        cache = get_cache(path)
        for record in cache.list_cache_records():
            notebook = cache.get_cache_bundle(record.pk).nb
            if not notebook.cells:
                raise ValueError(f"the cached notebook of {record.uri} is empty")
    except Exception as exc:  # anything the cache raises means it cannot be trusted
        shutil.rmtree(path, ignore_errors=True)
        reason = str(exc).splitlines()[0][:160] if str(exc) else exc.__class__.__name__
        return f"the execution cache in {path} was damaged ({exc.__class__.__name__}: {reason}); removed it, every chapter will run again"
    return None


def snapshot(folder):
    """{relative path: (sha256, (atime_ns, mtime_ns))} of every file under
    `folder` ({} when there is none): taken when a build starts, so that
    :func:`keep_unchanged` can tell what the build wrote anew."""
    import hashlib

    root = Path(folder)
    found = {}
    if root.is_dir():
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink():
                stat = path.stat()
                found[str(path.relative_to(root))] = (
                    hashlib.sha256(path.read_bytes()).hexdigest(),
                    (stat.st_atime_ns, stat.st_mtime_ns),
                )
    return found


def keep_unchanged(folder, before):
    """After a build: every file under `folder` whose bytes are those it had
    in `before` (a :func:`snapshot`) gets its old times back. Sphinx copies
    the theme's stylesheets and writes pygments.css at every build, and the
    book's steps then trim them to the same bytes as last time; with their
    times kept, a build that changed nothing leaves every file of the site
    as it was (and a static host or browser cache sees nothing new).
    Returns how many files were kept."""
    import hashlib

    root = Path(folder)
    kept = 0
    for relative, (digest, times) in before.items():
        path = root / relative
        try:
            stat = path.stat()
            if (stat.st_atime_ns, stat.st_mtime_ns) == times:
                continue
            if hashlib.sha256(path.read_bytes()).hexdigest() == digest:
                os.utime(path, ns=times)
                kept += 1
        except OSError:
            continue
    return kept


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    build = Path(argv[0] if argv else "_build")
    try:
        check_writable(build)
    except ValueError as exc:
        print(f"build: {exc}", file=sys.stderr)
        return 2
    message = heal(build / ".jupyter_cache")
    if message:
        print(f"==> {message}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
