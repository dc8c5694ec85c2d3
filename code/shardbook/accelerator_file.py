"""An accelerator described in a file (TOML or JSON) read into a
`hardware.Accelerator`, validated as the presets are.

The file has the Accelerator's fields. The descriptive ones are plain values
(name, family, scale_up_fabric, scale_out_layout, torus_dims, and for a
torus torus_wraparound_side and torus_wraparound_rule); every figure
is a table with a `value` and a `source` (a references.bib key, a URL or a
document name), and optionally `kind` (spec, achieved or derived; default
spec) and `note`. A value is a number in SI base units or a string with its
unit: "989.5 TFLOP/s", "80 GB", "141 GiB", "450 GB/s", "400 Gb/s" (bits),
"8" for counts. A field the dataclass gives a default may be left out.
`to_toml(acc)` writes any Accelerator (a preset, say) in this format: a
template to edit. Ref: the Accelerator docstring for each field's meaning.

An optional table `[calibration]` gives the planner's calibration for the
accelerator (planner.calibrate keys its figures by preset name, so without
it a file's accelerator gets the defaults): `based_on`, a preset of the same
family whose figures it takes, and any of planner.calibrate.FILE_FIGURES,
each a table with a `value` and a `source` (and optionally a `note`):

    [calibration]
    based_on = "H100"
    matmul_efficiency = { value = 0.55, source = "my GEMM benchmark, 8192^3 BF16" }
    hbm_bytes_per_s = { value = "3.35 TB/s", source = "vendor datasheet" }
    in_switch_reduction = { value = true, source = "NCCL_ALGO=NVLS runs" }

The Accelerator a file is read into carries its calibration
(Accelerator.calibration; none without the table), so the planner's
expected step time uses it wherever that Accelerator is passed, and a
second file read under the same name prices only its own.
"""

import dataclasses
import json
import math
import re
import tomllib
from pathlib import Path

from . import _validate, hardware
from .planner import calibrate

_UNITS = {
    "flops": {"FLOP/s": 1, "GFLOP/s": 1e9, "TFLOP/s": 1e12, "PFLOP/s": 1e15},
    "bytes": {
        "B": 1,
        "KB": 1e3,
        "MB": 1e6,
        "GB": 1e9,
        "TB": 1e12,
        "KiB": 2**10,
        "MiB": 2**20,
        "GiB": 2**30,
        "TiB": 2**40,
    },
    "bandwidth": {
        "B/s": 1,
        "MB/s": 1e6,
        "GB/s": 1e9,
        "TB/s": 1e12,
        "GiB/s": 2**30,
        "Mb/s": 1e6 / 8,
        "Gb/s": 1e9 / 8,
        "Tb/s": 1e12 / 8,
    },
    "time": {"s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9},
    "count": {"": 1},
}
# The range a figure of each dimension may take, in SI units: far beyond any accelerator on
# either side, yet narrow enough that no product or quotient of figures overflows a float
# later (5e-324 FLOP/s made the step time inf, reported under an internal quantity's name)
_RANGES = {
    "flops": (1e6, 1e24, "FLOP/s"),
    "bandwidth": (1e3, 1e21, "B/s"),
    "bytes": (1.0, 1e21, "B"),
    "time": (0.0, 1e3, "s"),
}
_NUMBER_WITH_UNIT = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(\S*)\s*$")
_FIGURE_KEYS = ("value", "source", "kind", "note")
_CALIBRATION_FIGURE_KEYS = ("value", "source", "note")


def _dimension(field):
    if field.endswith("_flops_per_s"):
        return "flops"
    if field.endswith("_bytes_per_s"):
        return "bandwidth"
    if field.endswith("_bytes"):
        return "bytes"
    if field.endswith("_s"):
        return "time"
    return "count"


def _value(where, field, raw):
    """A figure's value in SI base units, from a number or "<number> <unit>"."""
    dimension = _dimension(field)
    units = _UNITS[dimension]
    if isinstance(raw, bool) or not isinstance(raw, (int, float, str)):
        raise ValueError(f"{where}: {field}.value must be a number or a string with a unit, got {raw!r}")
    if not isinstance(raw, str):
        try:
            value = float(raw)
        except OverflowError:
            raise ValueError(f"{where}: {field}.value is too large for a float, got {len(str(raw))} digits") from None
        if math.isinf(value):  # NaN is left to the figure's own rule, which names it
            raise ValueError(f"{where}: {field}.value must be a finite number, got {raw!r}")
        return _in_range(where, field, raw, value)
    match = _NUMBER_WITH_UNIT.match(raw)
    if not match:
        raise ValueError(f"{where}: {field}.value {raw!r} is not a number followed by a unit")
    number, unit = match.groups()
    if unit not in units:
        valid = ", ".join(repr(u) for u in units) if dimension != "count" else "none (a count)"
        raise ValueError(f"{where}: {field}.value {raw!r}: unit {unit!r} does not parse; valid: {valid}")
    value = float(number) * units[unit]
    if math.isinf(value):
        raise ValueError(f"{where}: {field}.value {raw!r} is not a finite number")
    return _in_range(where, field, raw, value)


def _in_range(where, field, raw, value):
    """`value` when it lies in its dimension's _RANGES (a NaN or a value <= 0
    is left to the figure's own rule, which names it); else one line."""
    low, high, unit = _RANGES.get(_dimension(field), (0.0, math.inf, ""))
    if value > 0 and not low <= value <= high:
        raise ValueError(
            f"{where}: {field}.value must lie between {low:g} and {high:g} {unit} (no accelerator comes near "
            f"either end), got {raw!r}"
        )
    return value


def parse_size_bytes(name, text):
    """Bytes from a size written as "8GB", "8 GB", "7.5GiB" or a plain
    number of bytes: a ValueError naming `name` and the units otherwise."""
    units = _UNITS["bytes"]
    match = _NUMBER_WITH_UNIT.match(text.replace("\u2212", "-")) if isinstance(text, str) else None
    if not match or (match.group(2) and match.group(2) not in units):
        raise ValueError(
            f"{name}: a size such as 8GB or 7.5GiB (units {', '.join(u for u in units if u)}), got {text!r}"
        )
    value = float(match.group(1)) * (units[match.group(2)] if match.group(2) else 1)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name}: must be a finite size of at least 0 bytes, got {text!r}")
    return value


def _descriptive(where, name, raw):
    if name in ("torus_dims", "torus_wraparound_side"):
        if not isinstance(raw, int) or isinstance(raw, bool) or raw < 0:
            raise ValueError(f"{where}: {name} must be an integer >= 0, got {raw!r}")
        most = hardware.MAX_TORUS_DIMS if name == "torus_dims" else hardware.MAX_TORUS_SIDE
        if raw > most:
            raise ValueError(f"{where}: {name} must be at most {most}, got {raw!r}")
    elif name == "name":
        _validate.display_name(f"{where}: name", raw)
    elif name == "torus_wraparound_rule":
        if not isinstance(raw, str):
            raise ValueError(f"{where}: {name} must be a string, got {raw!r}")
    elif not isinstance(raw, str) or not raw:
        raise ValueError(f"{where}: {name} must be a non-empty string, got {raw!r}")
    return raw


def _sourced_table(where, name, raw, keys, what):
    """(source, note) of a figure's table {value, source, note, ...}, after
    checking it is a table of `keys` with a value and a non-empty source
    (`what` names the figure in the message)."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: {name} must be a table with a value and a source, got {raw!r}")
    extra = [k for k in raw if k not in keys]
    if extra:
        raise ValueError(f"{where}: {name}: unknown key {extra[0]!r}; keys: {', '.join(keys)}")
    for part in ("value", "source"):
        if part not in raw:
            raise ValueError(f"{where}: {name}: missing {part!r} (every {what} needs a value and its source)")
    source, note = raw["source"], raw.get("note", "")
    if not isinstance(source, str) or not source.strip():
        raise ValueError(f"{where}: {name}.source must be a non-empty string, got {source!r}")
    if not isinstance(note, str):
        raise ValueError(f"{where}: {name}.note must be a string, got {note!r}")
    return source, note


def _figure(where, name, raw):
    source, note = _sourced_table(where, name, raw, _FIGURE_KEYS, "figure")
    kind = raw.get("kind", "spec")
    if kind not in hardware.SOURCE_KINDS:
        raise ValueError(f"{where}: {name}.kind: unknown value {kind!r}; valid: {', '.join(hardware.SOURCE_KINDS)}")
    return hardware.Sourced(_value(where, name, raw["value"]), source, kind, note)


def _calibration_figure(where, key, figure):
    """One figure of a [calibration] table as a calibrate.Figure (its value
    in SI base units; in_switch_reduction a bool)."""
    name = f"calibration.{key}"
    source, note = _sourced_table(where, name, figure, _CALIBRATION_FIGURE_KEYS, "calibration figure")
    if key != "in_switch_reduction":
        return calibrate.Figure(_value(where, name, figure["value"]), source, note)
    if not isinstance(figure["value"], bool):
        raise ValueError(f"{where}: {name}.value must be true or false, got {figure['value']!r}")
    return calibrate.Figure(figure["value"], source, note)


def _calibration(where, raw):
    """(based_on, {key: calibrate.Figure}) from a [calibration] table; the
    ranges are planner.calibrate's to check (file_calibration)."""
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: calibration must be a table of figures (and based_on), got {raw!r}")
    unknown = [k for k in raw if k != "based_on" and k not in calibrate.FILE_FIGURES]
    if unknown:
        raise ValueError(
            f"{where}: calibration: unknown key {unknown[0]!r}; keys: based_on, {', '.join(calibrate.FILE_FIGURES)}"
        )
    figures = {key: _calibration_figure(where, key, figure) for key, figure in raw.items() if key != "based_on"}
    return raw.get("based_on"), figures


def from_dict(data, where="accelerator"):
    """An Accelerator from the parsed contents of an accelerator file; its
    [calibration] table (or its absence) travels with it
    (Accelerator.calibration)."""
    if not isinstance(data, dict):
        raise ValueError(f"{where}: must hold a table of the Accelerator's fields, got {type(data).__name__}")
    fields = {
        f.name: f for f in dataclasses.fields(hardware.Accelerator) if f.name not in hardware.Accelerator.ATTACHED
    }
    unknown = [k for k in data if k not in fields and k != "calibration"]
    if unknown:
        raise ValueError(f"{where}: unknown field {unknown[0]!r}; fields: {', '.join(fields)}, calibration")
    based_on, figures = _calibration(where, data["calibration"]) if "calibration" in data else (None, None)
    kwargs = {}
    for name, f in fields.items():
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ValueError(f"{where}: missing field {name!r}")
            continue
        read = _descriptive if name in hardware.Accelerator.DESCRIPTIVE else _figure
        kwargs[name] = read(where, name, data[name])
    try:
        acc = hardware.Accelerator(**kwargs)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if acc.name in hardware.PRESETS:
        # the planner looks calibration up by name (the reported HBM capacity among it): a file
        # that keeps a preset's name must keep its figures, or be planned with the preset's
        preset = hardware.PRESETS[acc.name]
        changed = [n for n, f in acc.figures() if getattr(preset, n) is None or float(f) != float(getattr(preset, n))]
        changed += [n for n in hardware.Accelerator.DESCRIPTIVE if getattr(acc, n) != getattr(preset, n)]
        if changed:
            raise ValueError(
                f"{where}: name: {acc.name!r} is a preset's name, and the file's {changed[0]} differs from the "
                f"preset's; give the accelerator a name of its own (based_on = {acc.name!r} in [calibration] "
                f"takes the preset's calibration)"
            )
    calibration = None if figures is None else calibrate.file_calibration(where, acc, based_on, figures)
    return calibrate.with_calibration(acc, calibration)


def from_text(text, fmt, where="accelerator"):
    """An Accelerator from the text of a file in `fmt` 'toml' or 'json'."""
    _validate.choice("fmt", fmt, ("toml", "json"))
    # bounded before a parser sees it (the planner page's Python dies on deep nesting)
    _validate.bounded_text(where, text, "an accelerator file", max_chars=MAX_FILE_CHARS)
    if text.startswith("\ufeff"):
        raise ValueError(f"{where}: starts with a byte-order mark (BOM); save it as UTF-8 without one")
    if fmt == "json":  # as a config.json is read: a key given twice refused, as TOML refuses it
        return from_dict(_validate.json_value(where, text, "an accelerator file"), where)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{where}: not valid TOML ({exc})") from None
    except RecursionError:
        raise ValueError(f"{where}: nested too deeply to be an accelerator file") from None
    except ValueError as exc:  # an integer of thousands of digits
        raise ValueError(f"{where}: {_validate.big_number_problem(exc) or f'cannot be read ({exc})'}") from None
    return from_dict(data, where)


# An accelerator file is a few KB (a preset's template: about 3); a pasted text is held to this
MAX_FILE_CHARS = 2**20


def from_file(path):
    """An Accelerator from a .toml or .json file."""
    if not isinstance(path, (str, Path)):
        raise ValueError(f"path: must be the path of a .toml or .json file, got {path!r}")
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in ("toml", "json"):
        raise ValueError(f"path: {path}: must end in .toml or .json")
    text = _validate.read_text("path", path, "is a folder, not an accelerator file")
    return from_text(text, fmt, str(path))


def _toml_string(text):
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a TOML basic string


def to_toml(accelerator):
    """The accelerator file (TOML) that reads back as `accelerator`
    (a preset name or an Accelerator): a template to edit. An accelerator
    read from a file with a [calibration] table gets it back."""
    acc = hardware.get(accelerator) if isinstance(accelerator, str) else accelerator
    if not isinstance(acc, hardware.Accelerator):
        raise ValueError(f"accelerator: must be a preset name or a hardware.Accelerator, got {accelerator!r}")
    lines = []
    if acc.name in hardware.PRESETS:
        # a renamed copy has no calibration of its own until it says so (the header line then lists defaults)
        lines += [
            "# A template: give the accelerator a name of its own before changing a figure, and add",
            "#   [calibration]",
            f'#   based_on = "{acc.name}"',
            f"# at the end to keep {acc.name}'s calibration (efficiencies, HBM bandwidth and reported capacity, FP8",
            "# ratio, in-switch reduction); without it the renamed device gets default matmul and scale-up",
            "# efficiencies, the datasheet's HBM as its capacity, and no HBM bandwidth, FP8 or in-switch reduction.",
        ]
    for name in hardware.Accelerator.DESCRIPTIVE:
        value = getattr(acc, name)
        if name.startswith("torus_wraparound") and acc.scale_up_fabric != "torus":
            continue  # only a torus has a wraparound rule
        lines.append(f"{name} = {value}" if isinstance(value, int) else f"{name} = {_toml_string(value)}")
    for name, figure in acc.figures():
        lines += ["", f"[{name}]", f"value = {float(figure)!r}", f"source = {_toml_string(figure.source)}"]
        lines.append(f"kind = {_toml_string(figure.kind)}")
        if figure.note:
            lines.append(f"note = {_toml_string(figure.note)}")
    own = acc.calibration
    if own is not None:
        lines += ["", "[calibration]"]
        if own.based_on is not None:
            lines.append(f"based_on = {_toml_string(own.based_on)}")
        for key, figure in own.figures.items():
            value = (
                ("true" if figure.value else "false") if isinstance(figure.value, bool) else repr(float(figure.value))
            )
            lines += ["", f"[calibration.{key}]", f"value = {value}", f"source = {_toml_string(figure.source)}"]
            if figure.note:
                lines.append(f"note = {_toml_string(figure.note)}")
    return "\n".join(lines) + "\n"
