"""How a matmul's shape changes the share of peak it sustains, per family.

The planner holds one matmul efficiency per accelerator (fitted on published
runs, planner.calibrate.MATMUL_EFFICIENCY) and multiplies it by this
module's factor for each matmul it prices (planner.timing.matmul_shape_factor).
A product that tensor parallelism splits many ways, or one with few tokens
per device, is thinner and can run further below peak. The factor comes
from a curve per family of kernels, measured on one chip (TPU) or fitted on
a published table (NVIDIA: DeepGEMM on H800), and scaled to the family's
other chips by their spec ridge point.

The curve. For a product [M, K]·[K, N] with elements of s bytes, the
arithmetic intensity is

    I = 2·M·K·N / (s·(M·K + K·N + M·N))  FLOP per byte of HBM

(each operand read once, the output written once). The sustained share of
peak is fitted as a smoothed roofline:

    η(I) = η_max · (1 + (I₀ / I)^p)^(−1/p)

η_max is the large-matmul plateau, I₀ the ridge (where the HBM time equals
the compute time at the plateau), p the sharpness of the knee (p → ∞ is
the sharp roofline min(η_max, η_max·I/I₀)). The factor this module returns,
:func:`shape_factor`, is η(I)/η_max, in (0, 1]: the planner's per-accelerator
efficiency times it is the shape's efficiency. The ridge is stored as a
ratio to the measured chip's spec ridge (peak FLOP/s over spec HBM
bytes/s), so another chip of the family takes its own spec ridge times
that ratio; the plateau and sharpness carry over unchanged.

Fit (:func:`fit`): least squares on log η over the measured points whose
time is at least ``FLOOR_MULTIPLE`` times the host's dispatch floor (a
shorter call reads slower than the chip ran it: a lower bound, not a
point), η_max the geometric mean of η/(factor) at each (I₀, p) of a grid
refined around its best cell. Ref: shardbook-tpu-v5e-measured (one TPU
v5e chip, data/measured_tpu_v5e.json, written by ``make measure``);
deepgemm (the NVIDIA curve's table); williams2009roofline for the roofline
it smooths.
"""

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from . import _validate

DATA_DIR = Path(__file__).resolve().parent / "data"
# A call whose measured time is under this many times the dispatch floor (a
# trivial program's pipelined time) is a lower bound on the chip's throughput.
FLOOR_MULTIPLE = 1.5


def intensity_flops_per_byte(m, k, n, bytes_per_element=2, out_bytes_per_element=None):
    """FLOPs of [M, K]·[K, N] per byte of HBM it must move at least (each
    operand read once, the output written once): 2MKN / (s(MK + KN) + s'MN),
    s' the output's bytes per element (None: s; an FP8 product writes BF16)."""
    for name, value in (("m", m), ("k", k), ("n", n)):
        _validate.count(name, value)
    _validate.positive("bytes_per_element", bytes_per_element)
    out = bytes_per_element if out_bytes_per_element is None else out_bytes_per_element
    _validate.positive("out_bytes_per_element", out)
    return 2 * m * k * n / (bytes_per_element * (m * k + k * n) + out * m * n)


def smoothed_roofline(intensity, ridge_flops_per_byte, sharpness):
    """(1 + (I₀/I)^p)^(−1/p): the share of the plateau a product of
    intensity I reaches, for ridge I₀ and sharpness p (both positive)."""
    _validate.positive("intensity", intensity)
    _validate.positive("ridge_flops_per_byte", ridge_flops_per_byte)
    _validate.positive("sharpness", sharpness)
    return (1 + (ridge_flops_per_byte / intensity) ** sharpness) ** (-1 / sharpness)


@dataclass(frozen=True)
class MatmulCurve:
    """One family's measured curve (see the module docstring).

    - ``family``: the family of kernels it applies to ('tpu' or 'nvidia').
    - ``measured_on``: the preset name of the chip measured.
    - ``plateau_efficiency``: η_max, the large-matmul share of that chip's spec peak.
    - ``ridge_ratio``: I₀ over the measured chip's spec ridge (peak / spec HBM bytes/s).
    - ``spec_ridge_flops_per_byte``: that spec ridge, as measured against.
    - ``sharpness``: p.
    - ``max_fit_error``: the largest relative error of the fit at the points it
      was fitted on, but the ones ``exceptions`` names.
    - ``source``: the data file the fit was made on.
    """

    family: str
    measured_on: str
    plateau_efficiency: float
    ridge_ratio: float
    spec_ridge_flops_per_byte: float
    sharpness: float
    max_fit_error: float
    exceptions: tuple
    source: str

    @property
    def ridge_flops_per_byte(self):
        """I₀ on the measured chip (FLOP per byte)."""
        return self.ridge_ratio * self.spec_ridge_flops_per_byte

    def factor(self, m, k, n, spec_ridge_flops_per_byte=None, bytes_per_element=2):
        """η(I)/η_max for [M, K]·[K, N] on a chip whose spec ridge (peak
        FLOP/s over spec HBM bytes/s) is `spec_ridge_flops_per_byte` (by
        default the measured chip's)."""
        spec = self.spec_ridge_flops_per_byte if spec_ridge_flops_per_byte is None else spec_ridge_flops_per_byte
        _validate.positive("spec_ridge_flops_per_byte", spec)
        intensity = intensity_flops_per_byte(m, k, n, bytes_per_element)
        return smoothed_roofline(intensity, self.ridge_ratio * spec, self.sharpness)


# Fitted by fit() on data/measured_tpu_v5e.json (tests/test_matmul_efficiency.py
# refits it and holds these to the fit); spec ridge 197 TFLOP/s over 819 GB/s
# (google-tpu-v5e). The exception: LLaMA-3 8B's MLP down projection split 32
# ways (8192 x 448 x 4096) runs 15 % below the curve: it writes an output about
# 6 times larger than its two inputs together, and the chip writes HBM slower than it reads
# (the data file's copy and sum streams: 641 against 735 GB/s), which one
# intensity cannot see.
#
# NVIDIA: no GPU was lent to measure, so the curve is fitted on a published table, DeepGEMM's
# dense FP8 GEMMs on H800 SXM5 (DEEPGEMM_DENSE: 18 shapes, M of 64, 128 and 4,096 rows), against
# the FP8 peak (1,979 TFLOP/s: twice the BF16 preset, calibrate.FP8_PEAK_RATIO) over 3.35 TB/s
# (calibrate.HBM_BYTES_PER_S), FP8 inputs and BF16 outputs. Its knee is far softer than the
# TPU's (p 1.6 against 4.6) and its points scatter more: the 2,112-column products run 16 to
# 28 % below the curve and the deepest (K = 16,384) 13 to 26 % above it, as the kernel's tiles
# and waves over the 132 SMs happen to fit each shape, which one intensity cannot see. Applied
# to BF16 products by their own intensity and the BF16 spec ridge (an FP8 product moves half
# the input bytes against twice the peak, so the ratio carries over).
CURVES = {
    "tpu": MatmulCurve(
        family="tpu",
        measured_on="TPU v5e",
        plateau_efficiency=0.942,
        ridge_ratio=1.015,
        spec_ridge_flops_per_byte=197e12 / 819e9,
        sharpness=4.6,
        max_fit_error=0.06,
        exceptions=("LLaMA-3 8B mlp_down, TP 32",),
        source="code/shardbook/data/measured_tpu_v5e.json",
    ),
    "nvidia": MatmulCurve(
        family="nvidia",
        measured_on="H800",
        plateau_efficiency=0.654,
        ridge_ratio=0.904,
        spec_ridge_flops_per_byte=1979e12 / 3.35e12,
        sharpness=1.6,
        max_fit_error=0.28,
        exceptions=(),
        source="deepgemm (README.md at 55ab91f, 'Normal GEMMs for dense models')",
    ),
}

# DeepGEMM's dense FP8 GEMMs on H800 SXM5 (NVCC 12.8), as its README prints them:
# (M, N, K, TFLOP/s). Ref: deepgemm (README.md at 55ab91f, "Normal GEMMs for dense models").
DEEPGEMM_DENSE = (
    (64, 2112, 7168, 206), (64, 24576, 1536, 289), (64, 32768, 512, 219),
    (64, 7168, 16384, 336), (64, 4096, 7168, 287), (64, 7168, 2048, 295),
    (128, 2112, 7168, 352), (128, 24576, 1536, 535), (128, 32768, 512, 358),
    (128, 7168, 16384, 645), (128, 4096, 7168, 533), (128, 7168, 2048, 510),
    (4096, 2112, 7168, 1009), (4096, 24576, 1536, 1125), (4096, 32768, 512, 751),
    (4096, 7168, 16384, 1426), (4096, 4096, 7168, 1265), (4096, 7168, 2048, 1168),
)  # fmt: skip


def deepgemm_points(fp8_peak_flops_per_s):
    """DEEPGEMM_DENSE as Points (FP8 inputs, BF16 output), efficiency against
    `fp8_peak_flops_per_s`; none is a lower bound."""
    _validate.positive("fp8_peak_flops_per_s", fp8_peak_flops_per_s)
    return [
        Point(
            f"{m} x {n} x {k}",
            m,
            k,
            n,
            intensity_flops_per_byte(m, k, n, 1, 2),
            tflops * 1e12 / fp8_peak_flops_per_s,
            False,
        )
        for m, n, k, tflops in DEEPGEMM_DENSE
    ]


def shape_factor(family, m, k, n, spec_ridge_flops_per_byte=None, bytes_per_element=2):
    """Factor in (0, 1] by which a BF16 (by default) matmul [M, K]·[K, N]
    sustains less than the family's large matmuls, on a chip of `family`
    (a key of CURVES: 'tpu', 'nvidia')
    whose spec peak FLOP/s over spec HBM bytes/s is
    `spec_ridge_flops_per_byte` (None: the measured chip's). Multiply the
    accelerator's fitted matmul efficiency by it. A ValueError for a family
    without a curve, naming those with one."""
    if family not in CURVES:
        raise ValueError(f"family: no matmul curve for {family!r}; known: {', '.join(sorted(CURVES))}")
    return CURVES[family].factor(m, k, n, spec_ridge_flops_per_byte, bytes_per_element)


# --- the measurement and the fit ------------------------------------------------------


class Point(NamedTuple):
    """One measured matmul: its shape, intensity (FLOP/byte), share of the
    spec peak, and whether it is only a lower bound (near the dispatch floor)."""

    label: str
    m: int
    k: int
    n: int
    intensity: float
    efficiency: float
    lower_bound: bool


def load_measurement(name="measured_tpu_v5e.json"):
    """The committed measurement `name` in DATA_DIR (a dict, as
    shardbook.programs.measure wrote it)."""
    known = sorted(p.name for p in DATA_DIR.glob("measured_*.json"))
    if name not in known:
        raise ValueError(f"name: no measurement {name!r} in {DATA_DIR.name}/; known: {', '.join(known)}")
    return json.loads((DATA_DIR / name).read_text())


def points(data, peak_flops_per_s, floor_multiple=FLOOR_MULTIPLE):
    """The measurement's matmuls as Points, efficiency against
    `peak_flops_per_s`; a call under `floor_multiple` times the dispatch
    floor is marked a lower bound."""
    if not isinstance(data, dict) or not {"dispatch", "matmul_bf16"} <= data.keys():
        raise ValueError("data: must be a measurement (load_measurement), with 'dispatch' and 'matmul_bf16'")
    _validate.positive("peak_flops_per_s", peak_flops_per_s)
    _validate.positive("floor_multiple", floor_multiple)
    floor_s = data["dispatch"]["pipelined_time_s"]
    out = []
    for row in data["matmul_bf16"]:
        m, k, n = row["m"], row["k"], row["n"]
        out.append(
            Point(
                row["label"],
                m,
                k,
                n,
                intensity_flops_per_byte(m, k, n),
                row["flops_per_s"] / peak_flops_per_s,
                row["time_s"] < floor_multiple * floor_s,
            )
        )
    return out


def _sse(pairs, ridge, sharpness):
    logs = [math.log(eta) - math.log(smoothed_roofline(i, ridge, sharpness)) for i, eta in pairs]
    mean = sum(logs) / len(logs)
    return sum((x - mean) ** 2 for x in logs), math.exp(mean)


def fit(pairs, ridge_range=(20.0, 2000.0), sharpness_range=(0.5, 12.0), steps=24, rounds=5):
    """(η_max, I₀, p) minimizing the squared error of log η over `pairs` of
    (intensity, efficiency): a grid over I₀ (log-spaced) and p, refined
    `rounds` times around its best cell; η_max is the closed-form best for
    each (I₀, p). Needs at least three pairs."""
    try:
        pairs = [tuple(pair) for pair in pairs]
    except TypeError:
        raise ValueError("pairs: must be an iterable of (intensity, efficiency) pairs") from None
    if len(pairs) < 3 or any(len(pair) != 2 for pair in pairs):
        raise ValueError(f"pairs: need at least 3 (intensity, efficiency) pairs to fit, got {len(pairs)} items")
    for i, eta in pairs:
        _validate.positive("intensity", i)
        _validate.positive("efficiency", eta)
    for name, bounds in (("ridge_range", ridge_range), ("sharpness_range", sharpness_range)):
        if not isinstance(bounds, (tuple, list)) or len(bounds) != 2:
            raise ValueError(f"{name}: must be a (low, high) pair, got {bounds!r}")
        low, high = bounds
        _validate.positive(name, low)
        _validate.positive(name, high)
        if not low < high:
            raise ValueError(f"{name}: must be (low, high) with low < high, got {(low, high)!r}")
    _validate.count("steps", steps)
    _validate.count("rounds", rounds)
    lo_r, hi_r = math.log(ridge_range[0]), math.log(ridge_range[1])
    lo_p, hi_p = sharpness_range
    best = None
    for _ in range(rounds):
        for a in range(steps + 1):
            ridge = math.exp(lo_r + (hi_r - lo_r) * a / steps)
            for b in range(steps + 1):
                p = lo_p + (hi_p - lo_p) * b / steps
                err, plateau = _sse(pairs, ridge, p)
                if best is None or err < best[0]:
                    best = (err, plateau, ridge, p)
        _, _, ridge, p = best
        span_r, span_p = 2 * (hi_r - lo_r) / steps, 2 * (hi_p - lo_p) / steps
        lo_r, hi_r = math.log(ridge) - span_r, math.log(ridge) + span_r
        lo_p, hi_p = max(sharpness_range[0], p - span_p), p + span_p
    return best[1], best[2], best[3]


_validate.guard_module(globals(), exclude=("load_measurement",))
