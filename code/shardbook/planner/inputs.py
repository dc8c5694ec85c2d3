"""What a reader gives the planner, read and checked: a model (a preset, a
Hugging Face config.json as a path or as text), an accelerator (a preset,
an accelerator file as a path or as text), a batch (tokens, with K/M/G
suffixes, or sequences), and the published size of a model read from a
config, where its release publishes one. The command line and the planner
page call the same functions, so a refusal reads the same in both: one
ValueError naming the field and the rule.

Ref: hf-transformers; the published totals name their sources below.
"""

import dataclasses
import decimal
import os
import re

from .. import _validate, accelerator_file, hardware, hf_config, models
from . import calibrate

# K, M, G as powers of two: a "4M-token batch" is 4,194,304 tokens (2,048 sequences of 2,048)
BATCH_SUFFIXES = {"K": 2**10, "M": 2**20, "G": 2**30}

# Published totals of releases whose config.json the planner reads, keyed by the
# dimensions that tell them apart: (d_model, n_layers, d_ff, vocab_size, n_experts).
# The same figures tests/test_hf_config.py asserts, with the same sources.
PUBLISHED_SIZES = {
    (4096, 32, 14336, 128256, 1): ("Meta-Llama-3-8B", 8_030_261_248, "dubey2024llama3"),
    (4096, 32, 14336, 32000, 1): ("Mistral-7B-v0.1", 7_241_732_096, "jiang2023mistral"),
    (4096, 32, 14336, 32000, 8): ("Mixtral-8x7B-v0.1", 46_702_792_704, "jiang2024mixtral"),
    (3584, 28, 18944, 152064, 1): ("Qwen2.5-7B", 7_615_616_512, "qwen2024qwen25"),
    (4096, 36, 12288, 151936, 1): ("Qwen3-8B", 8.2e9, "qwen2025qwen3"),
    (2048, 48, 768, 151936, 128): ("Qwen3-30B-A3B", 30.5e9, "qwen2025qwen3"),
    (2048, 24, 1408, 151936, 60): ("Qwen1.5-MoE-A2.7B", 14.3e9, "qwen2024moe"),
    (7168, 61, 2048, 129280, 256): ("DeepSeek-V3", 671e9, "deepseek2024v3"),
    (2048, 27, 1408, 102400, 64): ("DeepSeek-V2-Lite", 15.7e9, "deepseek2024v2"),
}


def published_size(model):
    """(release, published total parameters, references.bib key) for a Model
    whose dimensions match a release in PUBLISHED_SIZES and whose counted
    parameters agree with the published total (within the last printed
    digit: 0.1 B, or 0.5 % of larger models), else None: a config that
    keeps a release's widths but changes its heads or ties its embeddings
    is not that release."""
    m = models.get(model)
    found = PUBLISHED_SIZES.get((m.d_model, m.n_layers, m.d_ff, m.vocab_size, m.n_experts))
    if found is None or abs(models.param_count(m) - found[1]) > max(0.1e9, 0.005 * found[1]):
        return None
    return found


def read_model(text):
    """A model preset by name, or a Model from the path of a config.json
    (anything ending in .json)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"model: give a preset ({', '.join(models.names())}) or the path of a config.json")
    if text.lower().endswith(".json"):
        m = hf_config.from_hf_config(text)
        if m.name.endswith(" config"):  # no _name_or_path: name it after its file
            m = dataclasses.replace(m, name=f"{m.name} ({os.path.basename(text)})")
        return m
    return models.get(text)


def read_model_text(text):
    """A Model from the text of a config.json (pasted on the planner page):
    its size and nesting are bounded before it is parsed."""
    return hf_config.from_hf_config(_validate.json_object("config", text))


def read_accelerator(text):
    """An accelerator preset by name, or an Accelerator from the path of an
    accelerator file (anything ending in .toml or .json)."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"accelerator: give a preset ({', '.join(hardware.names())}) or the path of a .toml file")
    if text.lower().endswith((".toml", ".json")):
        return accelerator_file.from_file(text)
    return hardware.get(text)


def read_accelerator_text(text):
    """An Accelerator from the text of an accelerator file (TOML, or JSON
    when it starts with '{'), pasted on the planner page."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("accelerator file: is empty; paste a TOML or JSON accelerator file")
    fmt = "json" if text.lstrip().startswith("{") else "toml"
    return accelerator_file.from_text(text, fmt, "accelerator file")


def _exact(name, text, at_most):
    """The number `text` says (digits, a fraction, an exponent, a K, M or G
    suffix) as an exact decimal, or a ValueError naming `name`."""
    raw = str(text).strip().replace(",", "").replace("_", "")
    if len(raw) > MAX_COUNT_CHARS:
        raise ValueError(f"{name}: at most {MAX_COUNT_CHARS} characters, got {len(raw):,}")
    if raw.startswith(("-", "\u2212")):
        raise ValueError(f"{name}: must be a whole number >= 1, got {str(text).replace(chr(0x2212), '-')!r}")
    scale = BATCH_SUFFIXES.get(raw[-1:].upper(), 1) if raw else 1
    digits = raw[:-1] if scale != 1 else raw
    if not _NUMBER.fullmatch(digits):
        if digits.strip().lower().lstrip("+") in ("inf", "infinity", "nan"):
            raise ValueError(f"{name}: must be a finite number, got {text!r}")
        raise ValueError(
            f"{name}: must be a whole number (digits, or with K, M, G = 2**10, 2**20, 2**30), got {text!r}"
        )
    number = decimal.Decimal(digits)
    if number.adjusted() > 40:  # beyond every maximum: refused before the exact product is formed
        raise ValueError(f"{at_most}, got {text!r}")
    with decimal.localcontext() as exact_context:
        exact_context.prec = 2 * MAX_COUNT_CHARS  # every product of these digits and a suffix, exactly
        return number * scale


def parse_count(name, text, maximum=2**53, unit=""):
    """A whole number >= 1 from text ('4096', '4M' = 4·2**20, '1.5K' = 1536,
    '1e15'), at most `maximum`; a negative, fractional, non-finite or
    unparsable size is a ValueError naming `name` and the rule. The text is
    read exactly (as a decimal, never through a float): a count beyond
    2**53 is not silently rounded to its nearest float."""
    at_most = f"{name}: at most {'2**53' if maximum == 2**53 else f'{maximum:g}'.replace('e+', 'e')}{' ' + unit if unit else ''}"
    if isinstance(text, bool):
        raise ValueError(f"{name}: must be a whole number >= 1, got {text!r}")
    if isinstance(text, int):
        value = text
    else:
        exact = _exact(name, text, at_most)
        if exact > maximum:
            raise ValueError(f"{at_most}, got {text!r}")
        if exact != exact.to_integral_value() or exact < 1:
            raise ValueError(f"{name}: must be a whole number >= 1, got {text!r}")
        value = int(exact)
    if value < 1:
        raise ValueError(f"{name}: must be a whole number >= 1, got {text!r}")
    if value > maximum:
        raise ValueError(f"{at_most}, got {text!r}")
    return value


def parse_bytes(name, text):
    """Bytes from "8GB", "7.5GiB" or a plain number (accelerator_file.parse_size_bytes)."""
    from ..accelerator_file import parse_size_bytes

    return parse_size_bytes(name, text)


MAX_COUNT_CHARS = 64  # '1,000,000,000,000,000,000,000,000,000,000' is 41
# digits with an optional fraction and exponent, as float() reads them (Arabic-Indic digits
# and the like are refused: \d would take them)
_NUMBER = re.compile(r"[+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")


def is_plain_number(text):
    """Whether `text` is a number with no unit or suffix, as _NUMBER reads one."""
    return isinstance(text, str) and _NUMBER.fullmatch(text.strip()) is not None


def batch_tokens(seq_len, tokens=None, seqs=None):
    """The global batch in tokens, from `tokens` (text or int, at most 1e30)
    or `seqs` sequences of `seq_len` (exactly one of the two); it must be a
    whole number of sequences."""
    seq_len = parse_count("seq_len", seq_len)
    if (tokens is None) == (seqs is None):
        raise ValueError("tokens: give the batch in tokens or in sequences (--batch-seqs), not both or neither")
    if seqs is not None:
        return parse_count("batch_seqs", seqs) * seq_len
    value = parse_count("tokens", tokens, maximum=1e30, unit="tokens")
    if value // seq_len > _validate.MAX_COUNT:
        raise ValueError(
            f"tokens: at most 2**53 sequences of {seq_len:,} tokens ({_validate.MAX_COUNT * seq_len:.3g} tokens), "
            f"got {tokens!r}"
        )
    if value < seq_len:
        raise ValueError(f"tokens: {value:,} is below one sequence of {seq_len:,} tokens")
    if value % seq_len:
        raise ValueError(
            f"tokens: {value:,} is not a whole number of sequences of {seq_len:,} "
            f"(use {value // seq_len * seq_len:,} or {(value // seq_len + 1) * seq_len:,})"
        )
    return value


def model_line(model):
    """The model's parameter count, with its published total beside it when
    its release publishes one."""
    m = models.get(model)
    count = models.param_count(m)
    text = f"{m.name}: {count / 1e9:,.2f} B parameters"
    if m.is_moe:
        text += f" ({models.active_param_count(m) / 1e9:,.2f} B active per token)"
    found = published_size(m)
    if found:
        release, total, source = found

        def fold(name):
            return re.sub(r"[^a-z0-9]", "", name.rsplit("/", 1)[-1].lower())

        # matched by its shapes: only a book preset, or a config whose _name_or_path is the
        # release's own name, is labelled as it (Qwen2-7B has Qwen2.5-7B's shapes)
        preset = m.name in models.names() or m.name in models.gpt_names()
        named = preset or fold(m.name) == fold(release)
        where = f"published for {release}" if named else f"the shapes of {release}, published"
        text += f"; {where}: {total / 1e9:,.2f} B [{source}]"
    return text


def _figure_text(key, label, value):
    if key == "in_switch_reduction":
        return f"{label} {'on' if value else 'off'}"
    if key == "hbm_bytes_per_s":
        return f"{label} {value / 1e12:,.3g} TB/s"
    if key == "hbm_capacity_bytes":
        return f"{label} {value / 1e9:,.1f} GB"
    if key == "fp8_peak_ratio":
        return f"{label} {value:g}×"
    if key.endswith("_latency_s"):
        return f"{label} {value * 1e6:g} µs"
    return f"{label} {value:g}"


# what the planner does without a figure that has no default
_WITHOUT = {
    "hbm_bytes_per_s": "no weight-streaming floor, no elementwise term",
    "fp8_peak_ratio": "no FP8 speedup",
}


def accelerator_note(accelerator):
    """For an accelerator that is not a preset (read from a file): one line
    saying where each calibration figure comes from (planner.calibrate keys
    them by preset name; an accelerator file's [calibration] table gives
    them): its file, the preset it is `based_on`, or the default, and which
    it lacks. Of them only the HBM capacity bears on memory, deciding
    whether a mesh fits. For a preset, its caveat
    (calibrate.single_run_caveat) or empty."""
    acc = hardware.get(accelerator)
    caveat = calibrate.single_run_caveat(acc)
    if acc.name in hardware.names():
        return caveat
    own = acc.calibration
    by_origin = {"file": [], "based_on": [], "default": [], "none": []}
    for key, label, figure, origin in calibrate.provenance(acc):
        if origin == "family":
            continue  # keyed by family or fabric, as for a preset
        if figure is None and key == "hbm_capacity_bytes":
            by_origin["none"].append(f"{label} (the datasheet's {float(acc.hbm_bytes) / 1e9:,.1f} GB used)")
        elif figure is None:
            by_origin["none"].append(f"{label} ({_WITHOUT[key]})")
        else:
            by_origin[origin].append(_figure_text(key, label, figure.value))
    parts = []
    if by_origin["file"]:
        parts.append("from its file " + ", ".join(by_origin["file"]))
    if by_origin["based_on"]:
        parts.append(f"from {own.based_on} (based_on) " + ", ".join(by_origin["based_on"]))
    if by_origin["default"]:
        parts.append("defaults for " + ", ".join(by_origin["default"]))
    if by_origin["none"]:
        parts.append("none for " + ", ".join(by_origin["none"]))
    lead = (
        f"{acc.name}'s calibration"
        if own is not None
        else f"{acc.name} is not a preset and its file has no [calibration] table"
    )
    # what memory needs depends on no calibration figure; whether it fits, on the capacity's
    line = f"{lead}: {'; '.join(parts)}; of these, only the HBM capacity bears on memory (whether it fits)"
    return f"{line}. {caveat}" if caveat else line


def no_fit_note(candidates):
    """'' if some candidate fits; else one line naming the mesh that needs
    the least memory (each mesh at its least-memory microbatch) and what to
    change: against the HBM left after the reserve where one is held back
    (the reserve is not in memory_bytes_per_device)."""
    if any(c.fits for c in candidates):
        return ""
    best = min(candidates, key=lambda c: c.memory_bytes_per_device)
    reserve = best.reserve_bytes
    need = f"{best.memory_bytes_per_device / 1e9:,.1f} GB per device"
    if not reserve:
        return (
            f"No mesh fits: the smallest need, {best.label}, holds {need} against {best.hbm_bytes / 1e9:,.1f} GB "
            "of HBM; add devices, shorten the sequences or pick a larger accelerator."
        )
    left = max(0.0, best.hbm_bytes - reserve)
    return (
        f"No mesh fits: the smallest need, {best.label}, holds {need} against the {left / 1e9:,.1f} GB of HBM "
        f"left after the {reserve / 1e9:,.1f} GB reserve; add devices, shorten the sequences, pick a larger "
        "accelerator or lower --reserve."
    )


def no_mesh_reason(model, accelerator, n_devices, tokens, seq_len, axes, options):
    """Why `explore` found no mesh: the batch (fewer sequences than the
    data-parallel ranks of every mesh) or the device count (no mesh of it
    divides the model), as one line naming the field and the rule."""
    from .search import explore

    m = models.get(model)
    n_seqs = tokens // seq_len
    micro = options.get("micro_batch_seqs")
    if micro is not None and explore(
        m, accelerator, n_devices, tokens, axes=axes, **dict(options, micro_batch_seqs=None)
    ):
        return (
            f"micro_batch: microbatches of {micro:,} sequences leave some data-parallel rank of every mesh of "
            f"{n_devices:,} devices over {','.join(axes)} without a whole microbatch of the {n_seqs:,} sequences; "
            "a smaller one runs (without --micro-batch the search picks it)"
        )
    roomy = explore(m, accelerator, n_devices, n_devices * seq_len * 64, axes=axes, **options)
    if roomy:
        return (
            f"tokens: {n_seqs:,} sequence{'s' if n_seqs != 1 else ''} of {seq_len:,} cannot give every "
            f"data-parallel rank at least one sequence on any mesh of {n_devices:,} devices "
            f"over {','.join(axes)}"
        )
    return (
        f"n_devices: no mesh of {n_devices:,} devices over {','.join(axes)} divides {m.name} "
        f"(each degree must divide what it splits: heads, layers, experts, the batch)"
    )


_validate.guard_module(globals())
