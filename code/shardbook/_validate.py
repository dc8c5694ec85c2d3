"""Argument checks shared by the cost-model modules.

Each raises ValueError naming the argument and the rule it broke, so a reader
sees what to fix instead of a traceback from deep inside a formula.
"""

import math


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def number(name, value):
    if not _is_number(value) or math.isnan(value):
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


def count(name, value, minimum=1):
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name}: must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name}: must be >= {minimum}, got {value}")
    return value


def fraction(name, value):
    """A value in (0, 1]."""
    number(name, value)
    if not 0 < value <= 1:
        raise ValueError(f"{name}: must lie in (0, 1], got {value!r}")
    return value


def choice(name, value, options):
    if value not in options:
        raise ValueError(f"{name}: unknown value {value!r}; valid: {', '.join(options)}")
    return value
