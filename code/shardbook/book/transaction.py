"""Write several files together or not at all, one writer at a time: what
bless needs to change the ledger (tests/expected_numbers.json) and add an
entry to the errata log, the book's public record of corrections, in one
step.

`locked(lock)` holds an exclusive lock (fcntl.flock on a file that stays) for
the block, so concurrent writers run one after another, each seeing what
the one before it wrote. `commit(journal, files)` writes each new text to a
hidden temporary file beside its target, then writes the journal, the list
of renames still to do (its atomic rename is the commit point), then does
the renames and removes the journal. A writer killed before the journal
exists leaves only temporary files: no target has changed, and `recover`
removes them. A writer killed after it leaves the journal: `recover`
finishes the renames it lists, so every target ends changed. Either way
the files change together or not at all, once the next writer (or reader)
has called `recover`.

Standard library only (fcntl: POSIX).
"""

import contextlib
import json
import os
import secrets
import stat
from pathlib import Path


@contextlib.contextmanager
def locked(lock, waiting=None):
    """Hold an exclusive lock on the file `lock` (made if missing) for the
    block; `waiting()` is called once if another process holds it, before
    waiting for it. OSError if the lock file cannot be made (its folder
    must exist)."""
    import fcntl

    fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting is not None:
                waiting()
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def temporary_name(path):
    """A hidden temporary file's path beside `path`: `.NAME.XXXXXXXX.tmp`
    (which .gitignore covers)."""
    path = Path(path)
    return path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")


def _write_temporary(path, text):
    """`text` in a new temporary file beside `path`, on disk (fsync), with
    the mode of `path` if it exists; its path."""
    path = Path(path)
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        mode = None  # a new file: 0o666 less the umask, as any other
    tmp = temporary_name(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return tmp


def _sync_folder(folder):
    with contextlib.suppress(OSError):  # not every file system syncs a folder
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class Committed(Exception):
    """The transaction is committed (its journal written) but a rename
    failed: `recover` finishes it. Carries the OSError as __cause__."""


def commit(journal, files, before_renames=None):
    """Write `files` [(path, text), ...] together: every path ends holding
    its text, or (when this raises OSError) none has changed. Call it under
    `locked`, after `recover`. Committed if the journal was written but a
    rename failed (the next `recover` completes it). `before_renames`, if
    given, is called at the commit point (the tests stop a writer there)."""
    journal = Path(journal)
    temps = []
    try:
        for path, text in files:
            temps.append((_write_temporary(path, text), Path(path)))
        record = {"renames": [[os.path.abspath(tmp), os.path.abspath(path)] for tmp, path in temps]}
        os.replace(_write_temporary(journal, json.dumps(record, indent=1) + "\n"), journal)  # the commit point
    except BaseException:
        for tmp, _ in temps:
            with contextlib.suppress(OSError):
                tmp.unlink()
        raise
    _sync_folder(journal.parent)
    if before_renames is not None:
        before_renames()
    try:
        _finish(journal)
    except OSError as exc:
        raise Committed(str(exc)) from exc


def commit_one(path, text):
    """Replace one file's text atomically (a temporary file beside it, then
    a rename), keeping its mode; OSError (and nothing changed) if it cannot
    be written. A temporary file it made is removed whatever stops it."""
    tmp = _write_temporary(path, text)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _finish(journal):
    """Do every rename the journal lists whose temporary file is still
    there (a rename done before an interruption is not done twice), then
    remove the journal."""
    renames = json.loads(Path(journal).read_text(encoding="utf-8"))["renames"]
    folders = set()
    for tmp, path in renames:
        if os.path.exists(tmp):
            os.replace(tmp, path)
            folders.add(os.path.dirname(path))
    for folder in folders:
        _sync_folder(folder)
    Path(journal).unlink()


def recover(journal, debris=()):
    """Complete the transaction an interrupted writer committed (its
    journal exists: every rename it lists is done) and remove what an
    uncommitted one left (`debris`: paths of temporary files, as globbed by
    the caller). Call it under `locked`. Returns "finished", "cleaned" or
    None (nothing to do)."""
    journal = Path(journal)
    done = None
    if journal.exists():
        try:
            json.loads(journal.read_text(encoding="utf-8"))["renames"]
        except (ValueError, KeyError, TypeError):
            # the journal is renamed into place whole, so a torn one cannot be: a file
            # edited by hand; it commits nothing, and its temporaries go with the debris
            journal.unlink()
        else:
            _finish(journal)
            done = "finished"
    for path in debris:
        with contextlib.suppress(FileNotFoundError):
            Path(path).unlink()
            done = done or "cleaned"
    return done


# --- the lock and journal of one file that others are written with (the ledger) --------------


def lock_for(path):
    """The lock writers of `path` hold: `.NAME.lock` beside it."""
    path = Path(path)
    return path.with_name(f".{path.name}.lock")


def journal_for(path):
    """The journal of a committed write of `path`: `.NAME.journal` beside it."""
    path = Path(path)
    return path.with_name(f".{path.name}.journal")


def complete_locked(path, debris=()):
    """Under lock_for(path): `recover` the write of `path` (and the files
    written with it) that an interrupted writer left, removing its
    temporary files and `debris`. "finished", "cleaned" or None; ValueError
    in one line if it cannot."""
    path = Path(path)
    journal = journal_for(path)
    debris = [*path.parent.glob(f".{path.name}.*.tmp"), *path.parent.glob(f".{journal.name}.*.tmp"), *debris]
    try:
        return recover(journal, debris)
    except OSError as exc:
        raise ValueError(
            f"{journal}: an interrupted bless cannot be completed ({exc.strerror or exc}); run `make bless` when it can"
        ) from None


def complete(path):
    """If a write of `path` committed (its journal exists) and stopped before
    its renames were done, do them, under the lock: the ledger and its
    errata entries go in together. Called before the ledger or the errata
    log is read (check, errata.read). "finished" or None; ValueError in one
    line if it cannot."""
    if not journal_for(path).exists():
        return None
    try:
        with locked(lock_for(path)):
            return complete_locked(path) and "finished"
    except OSError as exc:
        raise ValueError(f"{lock_for(path)}: cannot be locked ({exc.strerror or exc})") from None
