"""shardbook.matmul_efficiency: the shape-dependent matmul curve, held to the
committed TPU v5e measurement it was fitted on
(code/shardbook/data/measured_tpu_v5e.json)."""

import math

import pytest

from shardbook import hardware, roofline
from shardbook import matmul_efficiency as me

CURVE = me.CURVES["tpu"]
PEAK = float(hardware.get(CURVE.measured_on).bf16_dense_flops_per_s)
POINTS = me.points(me.load_measurement(), PEAK)
FITTED = [p for p in POINTS if not p.lower_bound]
LOWER_BOUNDS = [p for p in POINTS if p.lower_bound]


def _curve(p):
    return CURVE.plateau_efficiency * CURVE.factor(p.m, p.k, p.n)


def test_stored_constants_are_the_fit_of_the_data_file():
    plateau, ridge, sharpness = me.fit((p.intensity, p.efficiency) for p in FITTED)
    assert CURVE.plateau_efficiency == pytest.approx(plateau, abs=0.002)
    assert CURVE.ridge_flops_per_byte == pytest.approx(ridge, rel=0.01)
    assert CURVE.sharpness == pytest.approx(sharpness, abs=0.2)
    assert CURVE.spec_ridge_flops_per_byte == pytest.approx(PEAK / 819e9)


def test_the_curve_fits_every_point_within_its_stated_error_but_the_named_exception():
    """Within max_fit_error (6 %) of each point fitted on; the one exception
    is named in CURVES and is outside it (so the list cannot go stale)."""
    for p in FITTED:
        error = p.efficiency / _curve(p) - 1
        if p.label in CURVE.exceptions:
            assert abs(error) > CURVE.max_fit_error, p.label
            assert -0.2 < error < 0, p.label  # slower than the curve, by 15 % as measured
        else:
            assert abs(error) <= CURVE.max_fit_error, (p.label, error)
    assert len(FITTED) >= 50 and {p.label for p in FITTED} >= set(CURVE.exceptions)


def test_points_near_the_dispatch_floor_are_lower_bounds_the_curve_does_not_undercut():
    """A call near the host's dispatch floor ran faster on the chip than it
    reads; the curve may sit above such a point, never far below it."""
    assert LOWER_BOUNDS and all(p.efficiency <= _curve(p) * (1 + CURVE.max_fit_error) for p in LOWER_BOUNDS)
    floor = me.load_measurement()["dispatch"]["pipelined_time_s"]
    rows = {r["label"]: r for r in me.load_measurement()["matmul_bf16"]}
    for p in LOWER_BOUNDS:
        assert rows[p.label]["time_s"] < me.FLOOR_MULTIPLE * floor


def test_the_fit_recovers_known_parameters():
    truth = (0.8, 300.0, 3.0)
    pairs = [(i, truth[0] * me.smoothed_roofline(i, truth[1], truth[2])) for i in (50, 100, 200, 300, 500, 1000, 4000)]
    plateau, ridge, sharpness = me.fit(pairs)
    assert (plateau, ridge, sharpness) == pytest.approx(truth, rel=0.01)


def test_shape_factor_tends_to_one_for_large_products_and_falls_with_intensity():
    assert me.shape_factor("tpu", 16384, 16384, 16384) == pytest.approx(1, abs=0.005)
    widths = [28672 // y for y in (1, 2, 4, 8, 16, 32, 64, 128)]
    factors = [me.shape_factor("tpu", 8192, 8192, n) for n in widths]
    assert factors == sorted(factors, reverse=True) and factors[-1] < 0.8
    # LLaMA-3 70B's MLP split 32 ways keeps 99 % of the plateau; 128 tokens per device half of it
    assert me.shape_factor("tpu", 8192, 8192, 896) > 0.99
    assert me.shape_factor("tpu", 128, 8192, 8192) == pytest.approx(0.5, abs=0.03)


def test_another_chip_of_the_family_scales_the_ridge():
    """A chip with twice the spec ridge sees a product as if it had half the intensity."""
    base = CURVE.spec_ridge_flops_per_byte
    doubled = me.shape_factor("tpu", 512, 8192, 8192, spec_ridge_flops_per_byte=2 * base)
    intensity = me.intensity_flops_per_byte(512, 8192, 8192)
    assert doubled == pytest.approx(me.smoothed_roofline(intensity / 2, CURVE.ridge_flops_per_byte, CURVE.sharpness))


def test_intensity_and_the_roofline():
    assert me.intensity_flops_per_byte(8192, 8192, 8192) == pytest.approx(8192 / 3)
    # FP8 operands, BF16 output: 2MKN / (MK + KN + 2MN)
    assert me.intensity_flops_per_byte(4, 4, 4, 1, 2) == pytest.approx(2 * 64 / (16 + 16 + 32))
    assert me.intensity_flops_per_byte(4, 4, 4, bytes_per_element=4) == pytest.approx(2 * 64 / (4 * 48))
    assert roofline.attainable_flops_per_s(100, 197e12, 819e9) == pytest.approx(100 * 819e9)
    assert roofline.attainable_flops_per_s(1000, 197e12, 819e9) == 197e12


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: me.shape_factor("gpu", 1, 1, 1), "family: no matmul curve for 'gpu'; known: nvidia, tpu"),
        (lambda: me.intensity_flops_per_byte(1, 1, 1, 1, 0), "out_bytes_per_element"),
        (lambda: me.deepgemm_points(0), "fp8_peak_flops_per_s"),
        (lambda: me.shape_factor("tpu", 0, 1, 1), "m:"),
        (lambda: me.shape_factor("tpu", 1, 1, 1, spec_ridge_flops_per_byte=-1), "spec_ridge_flops_per_byte"),
        (lambda: me.smoothed_roofline(1, 1, 0), "sharpness"),
        (lambda: me.fit([(1, 1), (2, 1)]), "pairs: need at least 3"),
        (lambda: me.fit(8), "pairs: must be an iterable"),
        (lambda: me.points(8, 1), "data: must be a measurement"),
        (
            lambda: me.load_measurement("x.json"),
            "name: no measurement .x.json. in data/; known: measured_tpu_v5e.json, measured_tpu_v5e_moe.json",
        ),
        (lambda: roofline.attainable_flops_per_s(0, 1, 1), "intensity_flops_per_byte"),
    ],
)
def test_bad_input_is_one_clear_value_error(call, message):
    with pytest.raises(ValueError, match=message) as info:
        call()
    assert "\n" not in str(info.value)


def test_factor_is_finite_and_in_range_over_a_wide_grid():
    for m in (1, 16, 128, 4096, 2**20):
        for n in (1, 128, 8192):
            f = me.shape_factor("tpu", m, 8192, n)
            assert 0 < f <= 1 and math.isfinite(f)


# --- NVIDIA: no GPU was lent; the curve is fitted on DeepGEMM's published dense table ---------

FP8_PEAK_H800 = float(hardware.get("H800").bf16_dense_flops_per_s) * 2  # calibrate.FP8_PEAK_RATIO["H800"]
NVIDIA = me.CURVES["nvidia"]
DEEPGEMM = me.deepgemm_points(FP8_PEAK_H800)


def test_the_nvidia_curve_is_the_fit_of_deepgemms_dense_table():
    from shardbook.planner import calibrate

    assert calibrate.FP8_PEAK_RATIO["H800"].value == 2
    assert len(DEEPGEMM) == 18 and not any(p.lower_bound for p in DEEPGEMM)
    # the table's 4,096 x 7,168 x 16,384 product: 1,426 TFLOP/s of 1,979
    deepest = next(p for p in DEEPGEMM if (p.m, p.k, p.n) == (4096, 16384, 7168))
    assert deepest.efficiency == pytest.approx(1426 / 1979, rel=1e-3)
    plateau, ridge, sharpness = me.fit((p.intensity, p.efficiency) for p in DEEPGEMM)
    assert NVIDIA.plateau_efficiency == pytest.approx(plateau, abs=0.002)
    assert NVIDIA.ridge_flops_per_byte == pytest.approx(ridge, rel=0.01)
    assert NVIDIA.sharpness == pytest.approx(sharpness, abs=0.2)
    assert NVIDIA.spec_ridge_flops_per_byte == pytest.approx(FP8_PEAK_H800 / calibrate.HBM_BYTES_PER_S["H800"].value)
    errors = [
        p.efficiency
        / (NVIDIA.plateau_efficiency * me.smoothed_roofline(p.intensity, NVIDIA.ridge_flops_per_byte, NVIDIA.sharpness))
        - 1
        for p in DEEPGEMM
    ]
    assert max(abs(e) for e in errors) <= NVIDIA.max_fit_error < max(abs(e) for e in errors) + 0.01
    # a far softer knee than the TPU's: at three times the ridge a GPU product keeps about 90 % of its plateau
    assert me.smoothed_roofline(3, 1, NVIDIA.sharpness) < 0.92 < 0.99 < me.smoothed_roofline(3, 1, CURVE.sharpness)


def test_the_planners_curves_are_these_and_amds_is_assumed():
    """calibrate.MATMUL_SHAPE_CURVE holds each fitted curve's ridge ratio; the
    Instinct parts take NVIDIA's curve at their own spec ridge, marked assumed."""
    from shardbook.planner import calibrate

    for kernels, curve in (("tpu", "tpu"), ("nvidia", "nvidia")):
        figure = calibrate.MATMUL_SHAPE_CURVE[kernels]
        assert figure.value == me.CURVES[curve].ridge_ratio and figure.source != "assumed"
    amd = calibrate.MATMUL_SHAPE_CURVE["amd"]
    assert amd.source == "assumed" and amd.provisional and amd.value == NVIDIA.ridge_ratio
    assert ("matmul shape curve (ridge / spec ridge)", "amd") in {(t, k) for t, k, _ in calibrate.assumed()}
    assert calibrate.matmul_shape_curve("MI355X") == ("nvidia", amd.value)
    assert calibrate.matmul_shape_curve("H100") == ("nvidia", NVIDIA.ridge_ratio)
    assert calibrate.matmul_shape_curve("TPU v6e") == ("tpu", CURVE.ridge_ratio)
