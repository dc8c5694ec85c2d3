"""An accelerator file (TOML or JSON) read into hardware.Accelerator, validated
as the presets are: every preset written as a template reads back equal, with
its sources; units parse or are refused in one line."""

import json
import re

import pytest

from shardbook import accelerator_file, hardware
from shardbook.units import GB, TFLOP


@pytest.mark.parametrize("name", hardware.names())
def test_every_preset_round_trips_through_its_template(name, tmp_path):
    preset = hardware.get(name)
    path = tmp_path / "accelerator.toml"
    path.write_text(accelerator_file.to_toml(preset))
    got = accelerator_file.from_file(path)
    assert got == preset
    assert [(f, v.source, v.kind, v.note) for f, v in got.figures()] == [
        (f, v.source, v.kind, v.note) for f, v in preset.figures()
    ]


def _h100_like():
    return {
        "name": "My H100",
        "family": "gpu",
        "scale_up_fabric": "switch",
        "scale_out_layout": "rail_optimized",
        "bf16_dense_flops_per_s": {"value": "989.5 TFLOP/s", "source": "nvidia-h100-datasheet"},
        "hbm_bytes": {"value": "80 GB", "source": "nvidia-h100-datasheet"},
        "scale_up_link_bytes_per_s": {"value": "25 GB/s", "source": "nvidia-nvlink"},
        "scale_up_link_bidirectional_bytes_per_s": {"value": "50 GB/s", "source": "nvidia-nvlink"},
        "scale_up_egress_bytes_per_s": {"value": 450e9, "source": "18 NVLinks x 25 GB/s", "kind": "derived"},
        "scale_up_domain_size": {"value": 8, "source": "HGX H100"},
        "scale_out_bytes_per_s": {"value": "400 Gb/s", "source": "ConnectX-7", "note": "one NIC per GPU"},
        "scale_out_nics_per_device": {"value": "1", "source": "HGX H100"},
    }


def test_units_parse_and_a_json_file_reads(tmp_path):
    path = tmp_path / "gpu.json"
    path.write_text(json.dumps(_h100_like()))
    acc = accelerator_file.from_file(path)
    assert acc.bf16_dense_flops_per_s == pytest.approx(989.5 * TFLOP)
    assert acc.hbm_bytes == 80 * GB
    assert acc.scale_out_bytes_per_s == 50 * GB  # 400 Gb/s, bits
    assert acc.scale_up_egress_bytes_per_s.kind == "derived"
    assert acc.host_link_bytes_per_s is None  # optional, left out
    assert accelerator_file.from_dict({**_h100_like(), "hbm_bytes": {"value": "80 GiB", "source": "x"}}).hbm_bytes == (
        80 * 2**30
    )


@pytest.mark.parametrize(
    "change,message",
    [
        ({"hbm_bytes": {"value": "80 GB/s", "source": "x"}}, "hbm_bytes.value '80 GB/s': unit 'GB/s' does not parse"),
        ({"hbm_bytes": {"value": "eighty GB", "source": "x"}}, "is not a number followed by a unit"),
        ({"scale_up_domain_size": {"value": "8 GB", "source": "x"}}, "unit 'GB' does not parse; valid: none"),
        ({"hbm_bytes": {"value": "80 GB"}}, "hbm_bytes: missing 'source' \\(every figure needs a value and its source"),
        ({"hbm_bytes": 80e9}, "hbm_bytes must be a table with a value and a source, got 80000000000.0"),
        (
            {"hbm_bytes": {"value": "-80 GB", "source": "x"}},
            "hbm_bytes: must be positive and finite, got -80000000000.0",
        ),
        ({"hbm_bytes": {"value": float("inf"), "source": "x"}}, "hbm_bytes.value must be a finite number, got inf"),
        ({"hbm_bytes": {"value": "1e400 GB", "source": "x"}}, "hbm_bytes.value '1e400 GB' is not a finite number"),
        ({"hbm_bytes": {"value": 10**400, "source": "x"}}, "hbm_bytes.value is too large for a float, got 401 digits"),
        (
            {"scale_up_fabric": "torus", "torus_dims": 3},
            "torus_wraparound_side: a torus needs the side its slices must span to wrap",
        ),
        (
            {"scale_up_fabric": "torus", "torus_dims": 3, "torus_wraparound_side": 4, "torus_wraparound_rule": "cubes"},
            "torus_wraparound_rule: unknown value 'cubes'; valid: whole_cubes, full_axis",
        ),
        ({"torus_wraparound_side": 4}, "torus_wraparound_side: only a torus has a wraparound rule"),
        ({"largest_slice_devices": {"value": 16, "source": "x"}}, "largest_slice_devices: at most the scale-up domain"),
        ({"hbm_bytes": {"value": "80 GB", "source": "x", "kind": "guess"}}, "hbm_bytes.kind: unknown value 'guess'"),
        ({"hbm_bytes": {"value": "80 GB", "source": "x", "unit": "GB"}}, "hbm_bytes: unknown key 'unit'"),
        ({"hbm_gb": 80}, "unknown field 'hbm_gb'; fields: name, family"),
        ({"family": "npu"}, "family: unknown value 'npu'; valid: gpu, tpu"),
        ({"scale_up_fabric": "torus"}, "torus_dims: must be > 0 exactly when scale_up_fabric is 'torus'"),
        ({"hbm_bytes": {"value": True, "source": "x"}}, "hbm_bytes.value must be a number or a string with a unit"),
    ],
)
def test_bad_fields_get_one_line(change, message):
    with pytest.raises(ValueError, match=message):
        accelerator_file.from_dict({**_h100_like(), **change})


@pytest.mark.slow  # two default searches per preset: seconds of one core (make test runs them)
@pytest.mark.parametrize("preset", [n for n in hardware.names() if hardware.get(n).scale_up_fabric == "torus"])
def test_a_renamed_tpu_template_plans_as_its_preset_does(preset, tmp_path):
    # the README's route for a reader's own machine: the template, a name of its own, the
    # preset's calibration by based_on; the torus's wraparound rule and largest slice travel
    # in the file, so the planner prices the same meshes the same way
    from shardbook import explorer

    text = accelerator_file.to_toml(preset).replace(f'name = "{preset}"', 'name = "Our TPU"', 1)
    path = tmp_path / "our-tpu.toml"
    path.write_text(text + f'\n[calibration]\nbased_on = "{preset}"\n')
    ours = accelerator_file.from_file(path)
    topology = ("torus_dims", "torus_wraparound_side", "torus_wraparound_rule", "largest_slice_devices")
    assert [getattr(ours, f) for f in topology] == [getattr(hardware.get(preset), f) for f in topology]
    mine = explorer.explore("LLaMA-3 8B", ours, 256, 2**22)[:3]
    theirs = explorer.explore("LLaMA-3 8B", preset, 256, 2**22)[:3]
    assert [(c.label, c.expected_step_s, c.step_s) for c in mine] == [
        (c.label, c.expected_step_s, c.step_s) for c in theirs
    ]


def test_missing_fields_and_bad_files(tmp_path):
    data = _h100_like()
    del data["scale_out_bytes_per_s"]
    with pytest.raises(ValueError, match="accelerator: missing field 'scale_out_bytes_per_s'"):
        accelerator_file.from_dict(data)
    bad = tmp_path / "a.toml"
    bad.write_text("name = ")
    with pytest.raises(ValueError, match="a.toml: not valid TOML"):
        accelerator_file.from_file(bad)
    bad = tmp_path / "a.json"
    bad.write_text("{")
    with pytest.raises(ValueError, match="a.json: not valid JSON"):
        accelerator_file.from_file(bad)
    with pytest.raises(ValueError, match="must end in .toml or .json"):
        accelerator_file.from_file(tmp_path / "a.yaml")
    with pytest.raises(ValueError, match="no such file"):
        accelerator_file.from_file(tmp_path / "missing.toml")
    with pytest.raises(ValueError, match="path: must be the path of a .toml or .json file, got 3"):
        accelerator_file.from_file(3)
    bad.write_text("[1]")
    with pytest.raises(ValueError, match="must hold a table of the Accelerator's fields, got list"):
        accelerator_file.from_file(bad)
    # a key given twice: TOML refuses it; JSON kept the last value without a word (1 TB of HBM, then 80 GB)
    bad.write_text('{"name": "X", "hbm_bytes": {"value": 1e12}, "hbm_bytes": {"value": 8e10}}')
    with pytest.raises(ValueError, match="a.json: the key 'hbm_bytes' is given twice in one object"):
        accelerator_file.from_file(bad)


def test_a_wraparound_rule_off_a_torus_names_the_field_given():
    with pytest.raises(ValueError, match="torus_wraparound_rule: only a torus has a wraparound rule"):
        accelerator_file.from_dict({**_h100_like(), "torus_wraparound_rule": "full_axis"})


@pytest.mark.parametrize(
    "field,value,message",
    [
        # the review's two: a link ten times both of its directions, an egress below one link
        ("scale_up_link_bytes_per_s", "5e11", "scale_up_link_bidirectional_bytes_per_s: both directions of a link"),
        ("scale_up_egress_bytes_per_s", "1e9", "scale_up_egress_bytes_per_s: the device's whole scale-up egress"),
    ],
)
def test_link_figures_that_contradict_each_other_are_refused(field, value, message):
    text = accelerator_file.to_toml("TPU v5p").replace('name = "TPU v5p"', 'name = "My TPU"')
    start = text.index(f"[{field}]\nvalue = ")
    end = text.index("\n", start + len(field) + 3)
    spoiled = text[: start + len(field) + 3] + f"value = {value}" + text[end:]
    with pytest.raises(ValueError, match=rf"my.toml: My TPU\.{re.escape(message)} must carry at least one link"):
        accelerator_file.from_text(spoiled, "toml", "my.toml")
    assert accelerator_file.from_text(text, "toml", "my.toml").name == "My TPU"  # the template itself is read
