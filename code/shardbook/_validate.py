"""Argument checks shared by the cost-model modules.

Each raises ValueError naming the argument and the rule it broke, so a reader
sees what to fix instead of a traceback from deep inside a formula.
"""

import dataclasses
import functools
import json
import math
import numbers
import os
import re
import stat
import threading
import unicodedata


def _is_number(value):
    kind = type(value)
    if kind is float or kind is int:  # the common case, without an abstract-class check (the search makes millions)
        return True
    # numbers.Real covers numpy's integers and floats too
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def number(name, value):
    if type(value) is float:
        if value != value:
            raise ValueError(f"{name}: must be a number, got {value!r}")
        return value
    if not _is_number(value):
        raise ValueError(f"{name}: must be a number, got {value!r}")
    try:
        as_float = float(value)
    except OverflowError:
        raise ValueError(f"{name}: {value!r} is too large to compute with (beyond a float's range)") from None
    if math.isnan(as_float):
        raise ValueError(f"{name}: must be a number, got {value!r}")
    return value


def positive(name, value):
    number(name, value)
    if not value > 0 or math.isinf(value):
        raise ValueError(f"{name}: must be a positive finite number, got {value!r}")
    return value


def non_negative(name, value):
    number(name, value)
    if value < 0 or math.isinf(value):
        raise ValueError(f"{name}: must be >= 0 and finite, got {value!r}")
    return value


MAX_COUNT = 2**53  # the largest integer every float holds exactly


def count(name, value, minimum=1):
    if type(value) is not int and (not isinstance(value, numbers.Integral) or isinstance(value, bool)):
        raise ValueError(f"{name}: must be an integer, got {value!r}")
    value = int(value)  # numpy integers become Python integers
    if value < minimum:
        raise ValueError(f"{name}: must be >= {minimum}, got {value}")
    if value > MAX_COUNT:
        raise ValueError(f"{name}: must be at most 2**53, got {value}")
    return value


def fraction(name, value):
    """A value in (0, 1]."""
    number(name, value)
    if not 0 < value <= 1:
        raise ValueError(f"{name}: must lie in (0, 1], got {value!r}")
    return value


def boolean(name, value):
    """`value` itself if it is a bool; else a ValueError naming `name` (a
    string such as "False" or a 0/1 would silently read as a flag)."""
    if not isinstance(value, bool):
        raise ValueError(f"{name}: must be True or False, got {value!r}")
    return value


def choice(name, value, options):
    if value not in options:
        raise ValueError(f"{name}: unknown value {value!r}; valid: {', '.join(options)}")
    return value


MAX_NAME_CHARS = 200  # the longest Hugging Face repository id is 96 characters


def display_name(where, value, max_chars=MAX_NAME_CHARS):
    """`value`, a name read from a file that the planner prints (a model's
    _name_or_path, an accelerator's name), or one ValueError starting with
    `where`: not a string, empty, longer than `max_chars`, with spaces
    around it, or holding a control or bidirectional-format character
    (an escape sequence would reach the reader's terminal, a newline would
    forge a line of output, U+202E would reverse what follows)."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: must be a non-empty string, got {value!r}")
    if len(value) > max_chars:
        raise ValueError(f"{where}: at most {max_chars} characters, got {len(value):,}")
    if value != value.strip():
        raise ValueError(f"{where}: must not start or end with spaces, got {value!r}")
    bad = next((c for c in value if unicodedata.category(c) in ("Cc", "Cf", "Cs", "Co", "Zl", "Zp")), None)
    if bad is not None:
        raise ValueError(f"{where}: must not hold control or formatting characters, got {bad!r} (U+{ord(bad):04X})")
    return value


MAX_INPUT_FILE_BYTES = 16 * 2**20  # a config or accelerator file is a few KB; this stops /dev/zero
# A config.json or an accelerator file nests three or four levels deep; the ledger, two. A
# deeper document is refused before it is parsed: in the browser's Python (Pyodide) the
# parser's recursion overflows the JavaScript stack, which kills the interpreter for the tab
# (CPython's RecursionError never comes), so the bound must hold before json.loads.
MAX_NESTING = 32


def nesting_depth(text, limit=MAX_NESTING):
    """How deep `[` and `{` nest in JSON or TOML `text` outside its strings
    and comments, counted by a scan of the text (no parser, no recursion);
    the count stops once it passes `limit`."""
    depth = deepest = 0
    inside = None  # '"' or "'" in a string, "#" in a TOML comment
    for token in _STRUCTURE.findall(text):  # only the characters that matter: fast on long texts
        if token[0] == "\\":  # an escape and the character it escapes
            if inside == "'" and token[1] == "'" or inside == "#" and token[1] == "\n":
                inside = None  # a TOML literal string or a comment has no escapes
        elif inside == "#":
            inside = None if token == "\n" else inside
        elif inside is not None:
            inside = None if token == inside else inside
        elif token in "\"'#":
            inside = token
        elif token in "[{":
            depth += 1
            deepest = max(deepest, depth)
            if deepest > limit:
                break
        elif token in "]}":
            depth = max(0, depth - 1)
    return deepest


_STRUCTURE = re.compile(r"""\\.|[\[\]{}"'#\n]""", re.S)


def bounded_text(where, text, what, max_chars=MAX_INPUT_FILE_BYTES, max_nesting=MAX_NESTING):
    """`text` itself, or one ValueError starting with `where` when it is
    longer than `max_chars` characters or nests deeper than `max_nesting`
    levels (`what` names the kind of document): checked before any parser
    sees it."""
    if not isinstance(text, str):
        raise ValueError(f"{where}: must be text, got {type(text).__name__}")
    if len(text) > max_chars:
        raise ValueError(f"{where}: longer than {max_chars:,} characters; is it {what}?")
    if nesting_depth(text, max_nesting) > max_nesting:
        raise ValueError(f"{where}: nested more than {max_nesting} levels deep; {what} nests a few levels")
    return text


def big_number_problem(exc):
    """For the ValueError a parser raises on an integer literal of more
    than sys.get_int_max_str_digits() digits (json.loads and tomllib raise
    it as a plain ValueError): a phrase saying so; else None."""
    text = str(exc)
    if "integer string conversion" not in text:
        return None
    digits = re.search(r"value has (\d+) digits", text)
    return f"holds an integer of {digits[1] + ' ' if digits else 'too many '}digits, more than any figure or count has"


def _open_regular(name, path, if_folder):
    """A read-only file descriptor of `path` after checking, on the open
    file itself, that it is a regular file: a FIFO, a socket or a device is
    refused in one ValueError (opening a FIFO without O_NONBLOCK waits for a
    writer for ever; reading a device never ends)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ValueError(f"{name}: {path}: no such file") from None
    except IsADirectoryError:
        raise ValueError(f"{name}: {path}: {if_folder}") from None
    except OSError as exc:
        raise ValueError(f"{name}: {path}: cannot be read ({exc.strerror or exc.__class__.__name__})") from None
    mode = os.fstat(fd).st_mode
    if stat.S_ISDIR(mode):
        os.close(fd)
        raise ValueError(f"{name}: {path}: {if_folder}")
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = (
            "a FIFO"
            if stat.S_ISFIFO(mode)
            else "a device"
            if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "not a file"
        )
        raise ValueError(f"{name}: {path}: is {kind}, not a regular file; give the path of a file")
    if hasattr(os, "set_blocking"):
        os.set_blocking(fd, True)
    return fd


def read_text(name, path, if_folder, max_bytes=MAX_INPUT_FILE_BYTES):
    """The UTF-8 text of file `path`, given as argument `name`, or one
    ValueError naming both: no such file, a folder (`if_folder` says what
    to give instead), not a regular file (a FIFO or a device), unreadable,
    or longer than `max_bytes`."""
    fd = _open_regular(name, path, if_folder)
    try:
        with open(fd, encoding="utf-8") as f:
            text = f.read(max_bytes + 1)
        if len(text) > max_bytes:
            raise ValueError(f"{name}: {path}: longer than {max_bytes:,} characters; is it the right file?")
        return text
    except IsADirectoryError:
        raise ValueError(f"{name}: {path}: {if_folder}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{name}: {path}: cannot be read ({exc.__class__.__name__})") from None


class _DuplicateKey(Exception):
    pass


def _unique_keys(pairs):
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen[key] = value
    return seen


def json_value(where, text, what="a config"):
    """The JSON document in `text`, or one ValueError starting with `where`:
    too long or nested too deeply (checked before parsing; `what` names the
    kind of document), not valid JSON, an integer of thousands of digits, or
    a key given twice in one object (json.loads would keep the last without
    a word)."""
    bounded_text(where, text, what)
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise ValueError(f"{where}: the key {exc.args[0]!r} is given twice in one object") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    except RecursionError:
        raise ValueError(f"{where}: nested too deeply to be {what}") from None
    except ValueError as exc:
        raise ValueError(f"{where}: {big_number_problem(exc) or 'not valid JSON'}") from None


def json_object(where, text):
    """The JSON object (a dict) in `text` (json_value's checks), or one
    ValueError starting with `where`, also for a document that is not an
    object."""
    data = json_value(where, text)
    if not isinstance(data, dict):
        raise ValueError(f"{where}: must hold a JSON object, got {type(data).__name__}")
    return data


def read_json(path, *, missing, remedy, folder=None, max_bytes=64 * 2**20):
    """The JSON document in file `path`, or a ValueError naming the file and
    what to do: `missing` when it does not exist, `remedy` when it is not
    valid JSON (or nested too deeply, or holds an integer of thousands of
    digits), `folder` (if given) when the path is a folder; a FIFO or a
    device is refused too."""
    try:
        text = read_text(
            "file", path, f"is a folder, not {folder}" if folder else "cannot be read (IsADirectoryError)", max_bytes
        )
    except ValueError as exc:
        message = str(exc).removeprefix("file: ")
        if message == f"{path}: no such file":
            message += f"; {missing}"
        raise ValueError(message) from None
    try:
        bounded_text(str(path), text, "this file", max_chars=max_bytes)
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno}); {remedy}") from None
    except RecursionError:
        raise ValueError(f"{path}: nested too deeply; {remedy}") from None
    except ValueError as exc:
        problem = big_number_problem(exc)
        if problem is None:
            raise ValueError(f"{exc}; {remedy}") from None
        raise ValueError(f"{path}: {problem}; {remedy}") from None


def _finite(value):
    kind = type(value)
    if kind is int:
        return True
    if kind is float:
        return math.isfinite(value)
    if kind is list or kind is tuple:  # long lists of plain numbers: no call per element
        return all(True if type(v) is int else math.isfinite(v) if type(v) is float else _finite(v) for v in value)
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return True
    if isinstance(value, numbers.Real):
        try:
            return math.isfinite(value)
        except OverflowError:
            return False
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_finite(v) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return all(_finite(getattr(value, f.name)) for f in dataclasses.fields(value))
    return True


# How many guarded calls are running in this thread: a guarded function called by
# another checks nothing of its result, since the outermost call checks what it
# returns (walking every result of every nested call cost the planner's fits
# three quarters of their time). The count is a one-item list per thread, so a
# call reads the thread's state once (a search makes millions of guarded calls).
class _Depth(threading.local):
    def __init__(self):
        self.box = [0]


_DEPTH = _Depth()


def _guarded(function):
    @functools.wraps(function)
    def guarded(*args, **kwargs):
        box = _DEPTH.box
        depth = box[0]
        box[0] = depth + 1
        try:
            result = function(*args, **kwargs)
        except OverflowError:
            raise ValueError(
                f"{function.__name__}: the inputs are too large; the result would overflow a float"
            ) from None
        except ZeroDivisionError:
            raise ValueError(f"{function.__name__}: an input that divides is zero; give it a positive value") from None
        finally:
            box[0] = depth
        if depth == 0 and not _finite(result):
            raise ValueError(f"{function.__name__}: the inputs are too large; the result is not a finite number")
        return result

    return guarded


def guard_module(namespace, exclude=()):
    """Wrap every public function defined in a module (its globals()) so that
    finite inputs give a finite result or a ValueError: overflow and a zero
    divisor become ValueErrors naming the function. Called at the end of each
    cost-model module."""
    module = namespace["__name__"]
    for name, value in list(namespace.items()):
        if name.startswith("_") or name in exclude or not callable(value) or isinstance(value, type):
            continue
        if getattr(value, "__module__", None) == module and not hasattr(value, "__wrapped__"):
            namespace[name] = _guarded(value)
