"""The build's own house-keeping, run by `make book` and `make test` before
Jupyter Book starts (book machinery, layer 3):

- the build folder must be writable, or the build stops with one line;
- a damaged execution cache (a corrupt database, an executed notebook that
  is gone or unreadable) is removed with a one-line message, and the build
  goes on to run the chapters again instead of failing deep inside
  jupyter-cache.

    python -m shardbook.book.buildcache _build
"""

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
