"""Argument checks shared by the cost-model modules.

Each raises ValueError naming the argument and the rule it broke, so a reader
sees what to fix instead of a traceback from deep inside a formula.
"""

import dataclasses
import functools
import json
import math
import numbers
import threading


def _is_number(value):
    # numbers.Real covers numpy's integers and floats too
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def number(name, value):
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
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
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


MAX_INPUT_FILE_BYTES = 16 * 2**20  # a config or accelerator file is a few KB; this stops /dev/zero


def read_text(name, path, if_folder, max_bytes=MAX_INPUT_FILE_BYTES):
    """The UTF-8 text of file `path`, given as argument `name`, or one
    ValueError naming both: no such file, a folder (`if_folder` says what
    to give instead), unreadable, or longer than `max_bytes`."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read(max_bytes + 1)
        if len(text) > max_bytes:
            raise ValueError(f"{name}: {path}: longer than {max_bytes:,} characters; is it the right file?")
        return text
    except FileNotFoundError:
        raise ValueError(f"{name}: {path}: no such file") from None
    except IsADirectoryError:
        raise ValueError(f"{name}: {path}: {if_folder}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{name}: {path}: cannot be read ({exc.__class__.__name__})") from None


def json_object(where, text):
    """The JSON object (a dict) in `text`, or one ValueError starting with
    `where`: not valid JSON, or a document that is not an object."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    except RecursionError:
        raise ValueError(f"{where}: nested too deeply to be a config") from None
    if not isinstance(data, dict):
        raise ValueError(f"{where}: must hold a JSON object, got {type(data).__name__}")
    return data


def read_json(path, *, missing, remedy, folder=None):
    """The JSON document in file `path`, or a ValueError naming the file and
    what to do: `missing` when it does not exist, `remedy` when it is not
    valid JSON, `folder` (if given) when the path is a folder."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file; {missing}") from None
    except IsADirectoryError:
        if folder is None:
            raise ValueError(f"{path}: cannot be read (IsADirectoryError)") from None
        raise ValueError(f"{path}: is a folder, not {folder}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot be read ({exc.__class__.__name__})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno}); {remedy}") from None


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
# three quarters of their time)
_DEPTH = threading.local()


def _guarded(function):
    @functools.wraps(function)
    def guarded(*args, **kwargs):
        depth = getattr(_DEPTH, "n", 0)
        _DEPTH.n = depth + 1
        try:
            result = function(*args, **kwargs)
        except OverflowError:
            raise ValueError(
                f"{function.__name__}: the inputs are too large; the result would overflow a float"
            ) from None
        except ZeroDivisionError:
            raise ValueError(f"{function.__name__}: an input that divides is zero; give it a positive value") from None
        finally:
            _DEPTH.n = depth
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
