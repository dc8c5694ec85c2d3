"""SI and binary unit constants, and helpers that format numbers for prose.

Everything inside the package is in SI base units (bytes, seconds, FLOPs);
these constants convert at the edges. Decimal prefixes (GB = 1e9) are what
vendors print; binary ones (GiB = 2**30) are what allocators report.
"""

from . import _validate

KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12

KiB = 2**10
MiB = 2**20
GiB = 2**30
TiB = 2**40

KFLOP = 1e3
GFLOP = 1e9
TFLOP = 1e12
PFLOP = 1e15

BITS_PER_BYTE = 8
GBIT = 1e9  # one gigabit, as NIC speeds are quoted

MS = 1e-3
US = 1e-6
SECONDS_PER_DAY = 86_400.0

# Bytes per element by dtype name: NumPy/JAX names, the usual short forms,
# and XLA's HLO element types (the inventory of compiled programs reads these).
BYTES_PER_ELEMENT = {
    "float64": 8,
    "f64": 8,
    "float32": 4,
    "fp32": 4,
    "f32": 4,
    "s32": 4,
    "u32": 4,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "f16": 2,
    "s16": 2,
    "float8": 1,
    "fp8": 1,
    "f8e4m3fn": 1,
    "f8e5m2": 1,
    "int8": 1,
    "s8": 1,
    "u8": 1,
    "pred": 1,
}


def gbit_per_s_to_bytes_per_s(gbit_per_s):
    """Convert a link speed quoted in Gb/s (decimal gigabits) to bytes/s."""
    return gbit_per_s * GBIT / BITS_PER_BYTE


def bytes_per_element(dtype):
    """Bytes per element of a dtype name ('bf16', 'float32', ...)."""
    try:
        return BYTES_PER_ELEMENT[dtype]
    except KeyError:
        known = ", ".join(sorted(BYTES_PER_ELEMENT))
        raise ValueError(f"dtype: unknown dtype {dtype!r}; known: {known}") from None


def format_number(value, digits=3, *, sig=None, thousands=True, trim=False):
    """Format a number for prose: `digits` decimals, or `sig` significant
    digits, with thousands separators. Integers print without decimals;
    `trim` drops trailing zeros of the decimals (50.000 -> 50, 3.125 stays).
    A value that rounds to zero prints without a sign."""
    text = _format_number(value, digits, sig, thousands)
    if trim and "." in text:
        text = text.rstrip("0").rstrip(".")
    if text.startswith("-") and not text.strip("-0.,"):
        text = text[1:]  # a small negative rounds to zero: "0.0", never "-0.0"
    return text


def _format_number(value, digits, sig, thousands):
    if isinstance(value, bool):
        raise ValueError("value: a bool is not a number to display")
    if isinstance(value, int):
        return f"{value:,}" if thousands else str(value)
    if sig is not None:
        return _format_significant(value, sig, thousands)
    return f"{value:,.{digits}f}" if thousands else f"{value:.{digits}f}"


_SUPERSCRIPT = str.maketrans("-0123456789", "\u207b\u2070\u00b9\u00b2\u00b3\u2074\u2075\u2076\u2077\u2078\u2079")


def _format_significant(value, sig, thousands):
    """`sig` significant digits and no more: 2,550 or 0.0440; values of a
    million and above whose digits would be invented print as 6.3 × 10²⁴."""
    import math

    if not isinstance(sig, int) or isinstance(sig, bool) or sig < 1:
        raise ValueError(f"sig: must be an integer >= 1, got {sig!r}")
    if value == 0:
        return "0"
    if not math.isfinite(value):
        raise ValueError(f"value: must be finite, got {value!r}")
    exponent = math.floor(math.log10(abs(value)))
    mantissa = round(value / 10**exponent, sig - 1)
    if abs(mantissa) >= 10:  # 9.99 rounded up to 10.0
        exponent += 1
        mantissa = round(value / 10**exponent, sig - 1)
    if exponent >= 6 and exponent >= sig:
        return f"{mantissa:.{sig - 1}f} \u00d7 10{str(exponent).translate(_SUPERSCRIPT)}"
    decimals = max(sig - 1 - exponent, 0)
    rounded = round(mantissa * 10**exponent, decimals)
    return f"{rounded:,.{decimals}f}" if thousands else f"{rounded:.{decimals}f}"


_validate.guard_module(globals())
