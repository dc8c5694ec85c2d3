"""An accelerator file's [calibration] table: the planner's calibration
(planner.calibrate, keyed by preset name) for an accelerator the presets do
not describe. `based_on` takes a preset's figures, each figure given in the
file (a value and its source) replaces one; a file without the table keeps
the defaults, and the command line's header says which figures came from
where. Bad input is one ValueError (one line and exit code 2 on the command
line) naming the key and the rule."""

import dataclasses
import json
import re
from pathlib import Path

import pytest

from conftest import run_main
from shardbook import accelerator_file, explorer, hardware
from shardbook.planner import calibrate, cli, inputs, page, timing

EXAMPLE = Path(__file__).parent / "data" / "accelerators" / "my-h100.toml"
MESHES = ({"fsdp": 64}, {"fsdp": 8, "tp": 8}, {"fsdp": 16, "tp": 2, "pp": 2})
STEP = dict(seq_len=4096, micro_batch_seqs=1, recompute="none")
TOKENS = 4 * 2**20


def _h100_file(name, calibration=None):
    """The H100 preset as an accelerator file's contents, renamed, with a
    [calibration] table when one is given."""
    data = json.loads(json.dumps(_as_dict(hardware.get("H100"))))
    data["name"] = name
    if calibration is not None:
        data["calibration"] = calibration
    return data


def _as_dict(acc):
    data = {name: getattr(acc, name) for name in hardware.Accelerator.DESCRIPTIVE}
    for name, figure in acc.figures():
        data[name] = {"value": float(figure), "source": figure.source, "kind": figure.kind, "note": figure.note}
    return data


@pytest.mark.slow  # two default searches, the file's and the preset's: seconds of one core (make test runs it)
def test_based_on_a_preset_gives_exactly_the_presets_numbers():
    acc = accelerator_file.from_dict(_h100_file("H100 by file", {"based_on": "H100"}))
    assert dataclasses.replace(acc, name="H100", calibration=None) == hardware.get("H100")  # the same hardware
    for mesh in MESHES:
        mine = explorer.evaluate("LLaMA-3 8B", acc, mesh, TOKENS, **STEP)
        preset = explorer.evaluate("LLaMA-3 8B", "H100", mesh, TOKENS, **STEP)
        assert mine.expected_step_s == preset.expected_step_s, mesh
        assert mine.expected_terms == preset.expected_terms, mesh
        assert (mine.step_s, mine.hbm_bytes, mine.fits) == (preset.step_s, preset.hbm_bytes, preset.fits), mesh
    ranked = explorer.explore("LLaMA-3 8B", acc, 64, TOKENS, seq_len=4096)
    assert [(c.label, c.expected_step_s) for c in ranked] == [
        (c.label, c.expected_step_s) for c in explorer.explore("LLaMA-3 8B", "H100", 64, TOKENS, seq_len=4096)
    ]


def test_the_example_file_is_the_h100_preset_calibrated_as_h100():
    acc = accelerator_file.from_file(EXAMPLE)
    assert dataclasses.replace(acc, name="H100", calibration=None) == hardware.get("H100")
    # its one figure of its own, the 81,559 MiB nvidia-smi reports (modal-gpu-memory), is the preset's
    assert calibrate.hbm_capacity_bytes(acc) == calibrate.hbm_capacity_bytes("H100") == 81_559 * 2**20
    for mesh in MESHES:
        assert (
            explorer.evaluate("LLaMA-3 70B", acc, mesh, TOKENS, **STEP).expected_step_s
            == explorer.evaluate("LLaMA-3 70B", "H100", mesh, TOKENS, **STEP).expected_step_s
        )


def test_a_matmul_efficiency_of_its_own_scales_the_math_in_proportion():
    half = calibrate.matmul_efficiency("H100") / 2
    acc = accelerator_file.from_dict(
        _h100_file(
            "Slow H100", {"based_on": "H100", "matmul_efficiency": {"value": half, "source": "my GEMM benchmark"}}
        )
    )
    assert calibrate.matmul_efficiency(acc) == half
    for mesh in MESHES:
        mine = explorer.evaluate("LLaMA-3 8B", acc, mesh, TOKENS, **STEP).expected_terms
        preset = explorer.evaluate("LLaMA-3 8B", "H100", mesh, TOKENS, **STEP).expected_terms
        # the math term is the matmuls at the sustained efficiency plus the elementwise work at HBM bandwidth:
        # half the efficiency, twice the matmul time; the HBM-bound part stays
        assert mine["elementwise"] == preset["elementwise"] > 0
        assert mine["math"] - mine["elementwise"] == pytest.approx(2 * (preset["math"] - preset["elementwise"]))
        assert {k: v for k, v in mine.items() if k not in ("math", "bubble")} == {
            k: v for k, v in preset.items() if k not in ("math", "bubble")
        }


def test_figures_without_based_on_and_the_ones_left_out():
    acc = accelerator_file.from_dict(
        _h100_file(
            "Partly calibrated",
            {
                "hbm_bytes_per_s": {"value": "3.35 TB/s", "source": "nvidia-h100-datasheet"},
                "scale_out_latency_s": {"value": "8 us", "source": "our nccl-tests run"},
                "in_switch_reduction": {"value": True, "source": "NCCL_ALGO=NVLS"},
            },
        )
    )
    assert calibrate.hbm_bytes_per_s(acc) == 3.35e12
    assert calibrate.scale_out_latency_s(acc) == pytest.approx(8e-6)
    assert calibrate.has_in_switch_reduction(acc)
    # what the file leaves out and has no based_on for: the defaults, or none
    assert calibrate.matmul_efficiency(acc) == calibrate.DEFAULT_MATMUL_EFFICIENCY.value
    assert calibrate.scale_up_efficiency(acc) == calibrate.DEFAULT_SCALE_UP_EFFICIENCY.value
    assert calibrate.fp8_peak_ratio(acc) == 1.0
    assert calibrate.hbm_capacity_bytes(acc) == 80e9  # the datasheet's
    # keyed by family or fabric, as for a preset
    assert calibrate.scale_out_efficiency(acc) == calibrate.SCALE_OUT_EFFICIENCY["gpu"].value
    assert calibrate.scale_up_latency_s(acc) == calibrate.SCALE_UP_LATENCY_S["switch"].value
    note = inputs.accelerator_note(acc)
    assert note.startswith(
        "Partly calibrated's calibration: from its file HBM bandwidth 3.35 TB/s, in-switch all-reduce on, "
        "scale-out latency 8 µs; defaults for matmul efficiency 0.65, scale-up efficiency 0.8; none for HBM capacity"
    ), note


def test_based_on_takes_a_reported_capacity_and_in_switch_reduction_only_where_they_apply():
    data = _h100_file("Bigger H100", {"based_on": "H100"})
    data["hbm_bytes"] = {"value": "94 GB", "source": "a 94 GB part"}
    acc = accelerator_file.from_dict(data)
    assert calibrate.hbm_capacity_bytes(acc) == 94e9  # not the 80 GB H100's 85.5 GB
    assert calibrate.hbm_bytes_per_s(acc) == calibrate.hbm_bytes_per_s("H100")
    # nor in-switch reduction for a fabric without a switch
    data = _h100_file("Meshed H100", {"based_on": "H100"})
    data["scale_up_fabric"] = "full_mesh"
    acc = accelerator_file.from_dict(data)
    assert calibrate.has_in_switch_reduction("H100") and not calibrate.has_in_switch_reduction(acc)
    assert "defaults for in-switch all-reduce off" in inputs.accelerator_note(acc)


def test_a_file_without_calibration_behaves_as_before_and_says_so():
    acc = accelerator_file.from_dict(_h100_file("Plain H100"))
    assert calibrate.matmul_efficiency(acc) == calibrate.DEFAULT_MATMUL_EFFICIENCY.value
    assert calibrate.scale_up_efficiency(acc) == calibrate.DEFAULT_SCALE_UP_EFFICIENCY.value
    assert calibrate.hbm_bytes_per_s(acc) is None and calibrate.fp8_peak_ratio(acc) == 1.0
    assert not calibrate.has_in_switch_reduction(acc) and calibrate.hbm_capacity_bytes(acc) == 80e9
    assert explorer.evaluate("LLaMA-3 8B", acc, {"fsdp": 64}, TOKENS, **STEP).expected_terms["elementwise"] == 0
    assert inputs.accelerator_note(acc) == (
        "Plain H100 is not a preset and its file has no [calibration] table: defaults for matmul efficiency 0.65, "
        "scale-up efficiency 0.8, in-switch all-reduce off; none for HBM bandwidth (no weight-streaming floor, "
        "no elementwise term), HBM capacity (the datasheet's 80.0 GB used), FP8 peak ratio (no FP8 speedup); "
        "of these, only the HBM capacity bears on memory (whether it fits). "
        "Plain H100's matmul efficiency (0.65) is assumed, not fitted on any published run: its expected step "
        "times and their band rest on it (the validation appendix shows how far an unfitted accelerator can "
        "miss); time a few steps before trusting the ranking, the bound holds either way"
    )
    assert inputs.accelerator_note("H100") == ""


def test_each_file_read_under_one_name_prices_its_own_accelerator():
    """The last review's hazard: calibration was registered by name, so a
    second file read under the same name re-priced an Accelerator already
    held. Each read accelerator now carries its own."""
    calibrated = _h100_file("Edited H100", {"matmul_efficiency": {"value": 0.4, "source": "first try"}})
    first = accelerator_file.from_dict(calibrated)
    acc = accelerator_file.from_dict(
        {**calibrated, "calibration": {"matmul_efficiency": {"value": 0.3, "source": "x"}}}
    )
    assert calibrate.matmul_efficiency(acc) == 0.3 and calibrate.matmul_efficiency(first) == 0.4
    assert first != acc and dataclasses.replace(first, calibration=None) == dataclasses.replace(acc, calibration=None)

    # the math, which η prices (this step is bound by FSDP's traffic: it once passed on a last-bit difference)
    step = explorer.evaluate("LLaMA-3 8B", acc, {"fsdp": 8, "tp": 8}, TOKENS, **STEP).expected_step_s
    math = explorer.evaluate("LLaMA-3 8B", acc, {"fsdp": 8, "tp": 8}, TOKENS, **STEP).expected_terms["math"]
    faster = explorer.evaluate("LLaMA-3 8B", first, {"fsdp": 8, "tp": 8}, TOKENS, **STEP).expected_terms["math"]
    assert faster == pytest.approx(math * 0.3 / 0.4, rel=1e-12)
    linked = accelerator_file.from_dict(
        {**calibrated, "calibration": {"scale_up_efficiency": {"value": 0.5, "source": "x"}}}
    )
    # the achieved link rates follow the scale-up efficiency (timing caches them by efficiency)
    assert explorer.evaluate("LLaMA-3 8B", linked, {"fsdp": 8, "tp": 8}, TOKENS, **STEP).expected_step_s != step
    assert calibrate.matmul_efficiency(linked) == calibrate.DEFAULT_MATMUL_EFFICIENCY.value
    assert explorer.evaluate("LLaMA-3 8B", acc, {"fsdp": 8, "tp": 8}, TOKENS, **STEP).expected_step_s == step
    # one search's block, both accelerators: the collectives it remembers are kept apart by calibration
    linked_step = explorer.evaluate("LLaMA-3 8B", linked, {"fsdp": 8, "tp": 8}, TOKENS, **STEP).expected_step_s
    with timing.shared_costs():
        assert explorer.evaluate("LLaMA-3 8B", acc, {"fsdp": 8, "tp": 8}, TOKENS, **STEP).expected_step_s == step
        assert explorer.evaluate("LLaMA-3 8B", linked, {"fsdp": 8, "tp": 8}, TOKENS, **STEP).expected_step_s == (
            linked_step
        )
    edited = accelerator_file.from_dict(_h100_file("Edited H100"))  # no table: no calibration of its own
    assert edited.calibration is None and calibrate.matmul_efficiency(acc) == 0.3
    assert calibrate.matmul_efficiency(edited) == calibrate.DEFAULT_MATMUL_EFFICIENCY.value


def test_the_template_writes_the_calibration_back():
    table = {
        "based_on": "H100",
        "matmul_efficiency": {"value": 0.45, "source": "our run", "note": "model FLOPs / (step x peak)"},
        "in_switch_reduction": {"value": False, "source": "NCCL_NVLS_ENABLE=0"},
    }
    acc = accelerator_file.from_dict(_h100_file("Round trip", table))
    text = accelerator_file.to_toml(acc)
    assert '[calibration]\nbased_on = "H100"' in text and "[calibration.matmul_efficiency]" in text
    again = accelerator_file.from_text(text, "toml")
    assert again == acc and again.calibration == acc.calibration and acc.calibration is not None


BAD = [
    ({"matmul_efficiency": {"value": 0.5}}, "calibration.matmul_efficiency: missing 'source' (every calibration"),
    ({"matmul_efficiency": {"value": 0.5, "source": " "}}, "calibration.matmul_efficiency.source must be a non-empty"),
    ({"matmul_efficiency": 0.5}, "calibration.matmul_efficiency must be a table with a value and a source, got 0.5"),
    ({"matmul_efficiency": {"source": "x"}}, "calibration.matmul_efficiency: missing 'value'"),
    ({"matmul_efficiency": {"value": 0, "source": "x"}}, "calibration.matmul_efficiency: must be a fraction in"),
    (
        {"matmul_efficiency": {"value": 1.2, "source": "x"}},
        "calibration.matmul_efficiency: must be a fraction in [0.01, 1], got 1.2",
    ),
    (
        {"scale_up_efficiency": {"value": -0.1, "source": "x"}},
        "calibration.scale_up_efficiency: must be a fraction in [0.01, 1]",
    ),
    (
        {"scale_out_efficiency": {"value": float("nan"), "source": "x"}},
        "calibration.scale_out_efficiency: must be a fraction in [0.01, 1], got nan",
    ),
    ({"hbm_bytes_per_s": {"value": 0, "source": "x"}}, "calibration.hbm_bytes_per_s: must be a bandwidth > 0, got 0"),
    (
        {"hbm_bytes_per_s": {"value": "-3 TB/s", "source": "x"}},
        "calibration.hbm_bytes_per_s: must be a bandwidth > 0, got -3000000000000.0",
    ),
    ({"hbm_capacity_bytes": {"value": "80 GB/s", "source": "x"}}, "calibration.hbm_capacity_bytes.value '80 GB/s'"),
    ({"fp8_peak_ratio": {"value": 0.5, "source": "x"}}, "calibration.fp8_peak_ratio: must be a ratio from 1"),
    ({"scale_up_latency_s": {"value": "-1 us", "source": "x"}}, "calibration.scale_up_latency_s: must be seconds >= 0"),
    ({"matmul_efficiency": {"value": True, "source": "x"}}, "calibration.matmul_efficiency.value must be a number"),
    (
        {"in_switch_reduction": {"value": "yes", "source": "x"}},
        "calibration.in_switch_reduction.value must be true or false, got 'yes'",
    ),
    (
        {"matmul_efficiency": {"value": 0.5, "source": "x", "kind": "spec"}},
        "calibration.matmul_efficiency: unknown key 'kind'; keys: value, source, note",
    ),
    ({"matmul_eff": {"value": 0.5, "source": "x"}}, "calibration: unknown key 'matmul_eff'; keys: based_on, matmul_"),
    ({"based_on": "H1000"}, "calibration.based_on: must name a preset, got 'H1000'; presets: MI355X"),
    ({"based_on": "TPU v5p"}, "calibration.based_on: 'TPU v5p' is a tpu, this accelerator a gpu"),
]


@pytest.mark.parametrize("table,message", BAD)
def test_each_bad_figure_is_one_value_error(table, message):
    with pytest.raises(ValueError) as caught:
        accelerator_file.from_dict(_h100_file("Bad", table))
    assert str(caught.value).startswith("accelerator: " + message), str(caught.value)
    assert len(str(caught.value).splitlines()) == 1


def test_bad_tables_and_names():
    with pytest.raises(ValueError, match="accelerator: calibration must be a table of figures"):
        accelerator_file.from_dict(_h100_file("Bad", 3))
    # a preset's calibration is fixed: a file under a preset's name may not replace it
    with pytest.raises(ValueError, match="the accelerator's name 'H100' is a preset's, whose calibration is fixed"):
        accelerator_file.from_dict(_h100_file("H100", {"based_on": "H100"}))
    full_mesh = _h100_file("Mesh GPU", {"in_switch_reduction": {"value": True, "source": "x"}})
    full_mesh["scale_up_fabric"] = "full_mesh"
    with pytest.raises(ValueError, match="in_switch_reduction: true needs scale_up_fabric 'switch'"):
        accelerator_file.from_dict(full_mesh)


def _cli(*args):
    """`python -m shardbook.explorer ARGS`, run in this process (conftest.run_main)."""
    return run_main(explorer.main, *args)


def _toml(path, name, calibration_lines):
    text = accelerator_file.to_toml("H100").replace('name = "H100"', f'name = "{name}"')
    path.write_text(text + "\n[calibration]\n" + "\n".join(calibration_lines) + "\n")
    return str(path)


@pytest.mark.parametrize(
    "lines,message",
    [
        (["matmul_efficiency = { value = 0.55 }"], "calibration.matmul_efficiency: missing 'source'"),
        (['matmul_efficiency = { value = 1.5, source = "x" }'], "calibration.matmul_efficiency: must be a fraction"),
        (['hbm_bytes_per_s = { value = "0 TB/s", source = "x" }'], "calibration.hbm_bytes_per_s: must be a bandwidth"),
        (['efficiency = { value = 0.5, source = "x" }'], "calibration: unknown key 'efficiency'"),
        (['based_on = "H-100"'], "calibration.based_on: must name a preset, got 'H-100'"),
    ],
)
def test_the_command_line_refuses_in_one_line(tmp_path, lines, message):
    path = _toml(tmp_path / "bad.toml", "Bad", lines)
    result = _cli("LLaMA-3 8B", path, "64", "4M")
    assert result.returncode == 2, result.stdout
    assert result.stderr.startswith(f"error: {path}: {message}"), result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow  # default searches by the command line, one per file: seconds of one core (make test runs it)
def test_the_header_says_where_each_figure_came_from(tmp_path, capsys):
    path = _toml(
        tmp_path / "mine.toml",
        "Mine",
        ['based_on = "H100"', 'matmul_efficiency = { value = 0.45, source = "our run" }'],
    )
    assert cli.main(["LLaMA-3 8B", path, "64", "4M", "--top", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("LLaMA-3 8B on 64 × Mine (80 GB HBM each, 85.5 GB as the device reports it)")
    assert lines[2] == (
        "Mine's calibration: from its file matmul efficiency 0.45; from H100 (based_on) scale-up efficiency 0.82, "
        "HBM bandwidth 3.35 TB/s, HBM capacity 85.5 GB, FP8 peak ratio 2×, in-switch all-reduce on; "
        "of these, only the HBM capacity bears on memory (whether it fits)"
    )


@pytest.mark.slow  # two default searches through the page: seconds of one core (make test runs it)
def test_the_page_reads_a_pasted_calibration():
    text = EXAMPLE.read_text()
    form = {"model": "LLaMA-3 8B", "config": "", "accelerator": "H100", "accelerator_file": text,
            "n_devices": "64", "batch": "4M", "batch_seqs": "", "seq_len": "4096"}  # fmt: skip
    mine = page.plan(form)
    preset = page.plan({**form, "accelerator_file": ""})
    assert mine["ok"] and mine["accelerator_note"].startswith("My H100 node's calibration: from its file HBM capacity")
    assert [r["expected_step_s"] for r in mine["top"]] == [r["expected_step_s"] for r in preset["top"]]
    bad = page.plan({**form, "accelerator_file": text.replace('based_on = "H100"', 'based_on = "h100"')})
    assert bad == {
        "ok": False,
        "error": "accelerator file: calibration.based_on: must name a preset, got 'h100'; presets: "
        + ", ".join(hardware.names()),
    }


def test_a_file_under_a_presets_name_must_keep_its_figures(tmp_path):
    # the planner's calibration is looked up by name (NVML's capacity among it): a file that kept
    # "H100" but changed the HBM was planned against the preset's 85.5 GB with no word (a review)
    template = accelerator_file.to_toml("H100")
    assert accelerator_file.from_text(template, "toml", "same.toml").name == "H100"  # unchanged: allowed
    changed = template.replace("value = 80000000000.0", "value = 94000000000.0", 1)
    assert changed != template
    with pytest.raises(ValueError, match="name: 'H100' is a preset's name, and the file's hbm_bytes differs"):
        accelerator_file.from_text(changed, "toml", "my94.toml")
    renamed = changed.replace('name = "H100"', 'name = "My 94 GB GPU"')
    assert float(accelerator_file.from_text(renamed, "toml", "mine.toml").hbm_bytes) == 94e9
    path = tmp_path / "my94.toml"
    path.write_text(changed)
    result = _cli("LLaMA-3 8B", str(path), "64", "4M")
    assert result.returncode == 2 and result.stderr.startswith(f"error: {path}: name: 'H100'"), result.stderr


def test_a_domain_is_a_whole_number_of_devices():
    text = accelerator_file.to_toml("H100").replace('name = "H100"', 'name = "Half"')
    bad = re.sub(r"(\[scale_up_domain_size\]\nvalue = )8\.0", r"\g<1>7.5", text)
    assert bad != text
    with pytest.raises(ValueError, match="Half.scale_up_domain_size: must be a whole number of devices, got 7.5"):
        accelerator_file.from_text(bad, "toml", "half.toml")


def test_a_reported_capacity_above_the_printed_hbm_read_as_gib_is_refused():
    # the reliability probe: 1,000 GB of capacity on an 80 GB device was accepted ("764.7 / 1,000 fits");
    # NVML's 81,559 MiB for the 80 GB H100 (85.5 GB, the preset's own figure) stays allowed
    big = {"hbm_capacity_bytes": {"value": "1000 GB", "source": "x"}}
    with pytest.raises(
        ValueError, match="calibration.hbm_capacity_bytes: 1,000.0 GB is more than the file's hbm_bytes"
    ):
        accelerator_file.from_dict(_h100_file("Big", big))
    nvml = {"hbm_capacity_bytes": {"value": "81559 MiB", "source": "nvidia-smi"}}
    assert calibrate.hbm_capacity_bytes(accelerator_file.from_dict(_h100_file("Reported", nvml))) == 81559 * 2**20
