"""The committed TPU captures (hlo_artifacts/NAME/tpu): complete, clean,
what the cost model's rules predict once the declared TPU differences are
applied, and those differences asserted one by one. None of these needs
libtpu; the tests marked jax recapture with .venv-tpu where `make
tpu-artifacts` made it, and are skipped where it did not."""

import json
import math
import re
import shutil
import subprocess
import sys

import pytest

from conftest import JAX_SUBPROCESS_GUARD_S, ROOT, assert_clean_files
from shardbook import hlo
from shardbook.hlo import inventory, schedule, tpu_capture, tpu_rules
from shardbook.hlo import predict as predict_module
from shardbook.programs import registry
from shardbook.units import BYTES_PER_ELEMENT

ARTIFACTS = ROOT / "hlo_artifacts"
TPU_PYTHON = ROOT / ".venv-tpu" / "bin" / "python"
needs_libtpu = pytest.mark.skipif(not TPU_PYTHON.exists(), reason="no .venv-tpu here (`make tpu-artifacts` makes it)")


def _meta(name):
    return json.loads((ARTIFACTS / name / "tpu" / "meta.json").read_text())


def _cpu_meta(name):
    return json.loads((ARTIFACTS / name / "meta.json").read_text())


def _text(name):
    return (ARTIFACTS / name / "tpu" / "optimized.txt").read_text()


def _specs(fx):
    return {k: tuple(tuple(e) if isinstance(e, list) else e for e in v) for k, v in fx.specs.items()}


def _predicted(name):
    fx = registry.get(name)
    return predict_module.predict(name, fx.mesh_axes, _specs(fx), fx.shapes, tpu_rules.tpu_dtype(fx.dtype))


def _kinds(entries):
    return [e["kind"] for e in entries]


@pytest.mark.parametrize("name", hlo.FIXTURE_NAMES)
def test_every_fixture_has_a_clean_tpu_capture(name):
    folder = ARTIFACTS / name / "tpu"
    meta = _meta(name)
    assert sorted(p.name for p in folder.iterdir()) == sorted([*tpu_capture.FILES, "meta.json"])
    assert_clean_files(folder, tpu_capture.FILES, meta["sha256"], f"{name}/tpu")
    assert meta["fixture"] == name and meta["topology"] == tpu_rules.TOPOLOGY == "v5p:2x2x2"
    assert meta["num_devices"] == 8 and meta["device_kind"] == "TPU v5"
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.\d+)?", meta["libtpu_version"])
    assert meta["jax_version"] == _cpu_meta(name)["jax_version"], "the TPU capture is of another JAX than the CPU's"
    fx = registry.get(name)
    assert meta["cpu_dtype"] == fx.dtype and meta["dtype"] == tpu_rules.tpu_dtype(fx.dtype)
    assert meta["dtype"] != "float16", "a TPU computes in bfloat16"
    assert meta["environment"] == {"TPU_SKIP_MDS_QUERY": "1", "JAX_PLATFORMS": "cpu"}
    svg = (folder / "optimized.svg").read_text()
    assert "<svg" in svg and "@import" not in svg and "fonts.googleapis" not in svg
    assert f"jit_{name}" in _text(name).splitlines()[0]


@pytest.mark.parametrize("name", hlo.FIXTURE_NAMES)
def test_memory_analysis_holds_each_devices_shards(name):
    """memory_analysis() counts each argument's device-local shard at the
    TPU dtype, byte for byte (these shapes fill the TPU's tiles: no padding)."""
    memory = _meta(name)["memory_analysis"]
    fx = registry.get(name)
    size = BYTES_PER_ELEMENT[predict_module.HLO_DTYPE[tpu_rules.tpu_dtype(fx.dtype)]]
    local = _cpu_meta(name)["local_shapes"]
    assert memory["argument_size_in_bytes"] == sum(math.prod(s) * size for s in local.values())
    assert memory["output_size_in_bytes"] > 0 and memory["generated_code_size_in_bytes"] > 0


@pytest.mark.parametrize("name", hlo.FIXTURE_NAMES)
def test_tpu_program_is_the_rule_with_its_declared_differences(name):
    """The inventory read from optimized.txt is the rule's prediction (at
    the TPU dtype) with this fixture's declared differences applied, in
    order; and meta.json records the same."""
    fx = registry.get(name)
    captured = inventory.summary(inventory.inventory(_text(name)))
    expected = tpu_rules.expected_on_tpu(name, _predicted(name), fx.mesh_axes)
    assert captured == expected
    meta = _meta(name)
    assert meta["inventory"] == captured and meta["expected_on_tpu"] == expected
    declared = [
        {"rewrite": d.rewrite, "args": json.loads(json.dumps(d.args)), "reason": d.reason}
        for d in tpu_rules.EXPECTED_DIFFERENCES.get(name, ())
    ]
    assert meta["expected_differences"] == declared


@pytest.mark.parametrize("name", sorted(tpu_rules.EXPECTED_DIFFERENCES))
def test_each_declared_difference_is_needed(name):
    """Leaving out any one declared difference breaks the match: none is a
    no-op kept by habit."""
    fx = registry.get(name)
    captured = inventory.summary(inventory.inventory(_text(name)))
    diffs = tpu_rules.EXPECTED_DIFFERENCES[name]
    for skip in range(len(diffs)):
        out = _predicted(name)
        for i, d in enumerate(diffs):
            if i != skip:
                out = tpu_rules.REWRITES[d.rewrite](out, fx.mesh_axes, *d.args)
        assert out != captured, f"{name}: {diffs[skip].rewrite} changes nothing"
        assert diffs[skip].reason


def test_fixtures_without_differences_match_the_rule_as_is():
    same = [n for n in hlo.FIXTURE_NAMES if n not in tpu_rules.EXPECTED_DIFFERENCES]
    assert same == ["dp_matmul", "fsdp_matmul", "tp_matmul", "fsdp_ep_linear", "megatron_mlp", "moe_dispatch"] + [
        "pipeline_stages",
        "moe_dispatch_auto",
    ]
    for name in same:
        assert inventory.summary(inventory.inventory(_text(name))) == _predicted(name), name
        as_bf16 = [{**e, "dtype": "bf16" if e["dtype"] == "f16" else e["dtype"]} for e in _cpu_meta(name)["inventory"]]
        assert _meta(name)["inventory"] == as_bf16, name


def test_reduce_scatters_become_all_reduces_on_tpu():
    """The sequence-parallel and manual-FSDP fixtures: a reduce-scatter on
    the CPU backend, an all-reduce of the whole buffer and then a
    dynamic-slice of its shard on the TPU (twice the ring bytes)."""
    for name in ("megatron_mlp_sp", "fsdp_manual"):
        cpu, tpu = _cpu_meta(name)["inventory"], _meta(name)["inventory"]
        assert _kinds(cpu) == ["all_gather", "reduce_scatter"] and _kinds(tpu) == ["all_gather", "all_reduce"]
        assert tpu[1]["result_shape"] == cpu[1]["operand_shape"]
        assert tpu[1]["bytes_sent_per_rank"] == 2 * _predicted(name)[1]["bytes_sent_per_rank"]
        text = _text(name)
        (called,) = re.findall(r"= \S+ fusion\([^)]*%all-reduce\b[^)]*\), kind=\w+, calls=%([\w.\-]+)", text)
        body = re.search(rf"^%{re.escape(called)} \(.*?^\}}", text, re.M | re.S).group(0)
        assert "dynamic-slice(" in body, f"{name}: the all-reduce's consumer {called} keeps no shard"
        assert not re.search(r"\breduce-scatter\(", _text(name))


def test_expert_on_batch_gathers_once_on_tpu():
    """moe_dispatch_expert_on_batch: two gathers on the CPU backend (over
    fsdp, then over expert), one over all 8 devices on the TPU, the same
    bytes per device; its gathered weights make the largest temporaries."""
    cpu, tpu = (
        _cpu_meta("moe_dispatch_expert_on_batch")["inventory"],
        _meta("moe_dispatch_expert_on_batch")["inventory"],
    )
    assert _kinds(cpu) == ["all_gather", "all_gather"] and [e["group_size"] for e in cpu] == [2, 4]
    (gather,) = tpu
    assert gather["kind"] == "all_gather" and gather["group_size"] == 8
    assert gather["replica_groups"] == [[0, 4, 1, 5, 2, 6, 3, 7]]
    assert gather["bytes_sent_per_rank"] == sum(e["bytes_sent_per_rank"] for e in cpu)
    # the gathered blocks are ordered by a copy that changes a bitcast view's layout; no transpose
    text = _text("moe_dispatch_expert_on_batch")
    view = re.search(r"%([\w.\-]+) = bf16\[[0-9,]+\]\{([0-9,]+)[^}]*\} bitcast\(%all-gather[\w.]*\)", text)
    copied = re.search(rf"= bf16\[[0-9,]+\]\{{([0-9,]+)[^}}]*\}} copy\(%{re.escape(view.group(1))}\)", text)
    assert copied.group(1) != view.group(2) and " transpose(" not in text
    whole_w = math.prod(registry.get("moe_dispatch_expert_on_batch").shapes["w"]) * 2
    temps = {n: _meta(n)["memory_analysis"]["temp_size_in_bytes"] for n in hlo.FIXTURE_NAMES}
    assert temps["moe_dispatch_expert_on_batch"] >= whole_w
    assert max(temps, key=temps.get) == "moe_dispatch_expert_on_batch"


def test_float32_inputs_travel_in_bfloat16():
    """At DEFAULT precision the TPU moves a float32 dot input as bfloat16:
    the FSDP gather, the context-parallel K/V gathers, ring hops and the
    Ulysses all-to-alls of q, k, v; gradients and outputs stay float32."""
    for name, bf16, f32 in (
        ("fsdp_train_step", [0], [1]),
        ("fsdp_manual", [0], [1]),
        ("context_all_gather_kv", [0, 1], []),
        ("context_ulysses", [0, 1, 2], [3]),
        ("collective_matmul", list(range(7)), []),
        ("context_ring", list(range(14)), []),
        ("pipeline_stages", [], [0]),  # tanh's output, not a dot's input
    ):
        assert _meta(name)["dtype"] == "float32"
        inv = _meta(name)["inventory"]
        assert [i for i, e in enumerate(inv) if e["dtype"] == "bf16"] == bf16, name
        assert [i for i, e in enumerate(inv) if e["dtype"] == "f32"] == f32, name
        cpu = _cpu_meta(name)["inventory"]
        for i in bf16:
            assert cpu[i]["dtype"] == "f32" and inv[i]["bytes_sent_per_rank"] * 2 == cpu[i]["bytes_sent_per_rank"]


@pytest.mark.parametrize("name", hlo.FIXTURE_NAMES)
def test_asynchronous_pairs(name):
    """On the TPU every collective-permute is an asynchronous start/done
    pair and, in these small programs, the other collectives stay
    synchronous; the CPU backend has no asynchronous collective at all."""
    text = _text(name)
    pairs = _meta(name)["async_pairs"]
    assert pairs == [list(p) for p in inventory.async_pairs(text)]
    permutes = [e for e in _meta(name)["inventory"] if e["kind"] == "collective_permute"]
    assert [p[0] for p in pairs] == ["collective_permute"] * len(permutes)
    for _, start, done in pairs:
        assert re.search(rf"%{re.escape(start)} = .* collective-permute-start\(", text)
        assert re.search(rf"%{re.escape(done)} = .* collective-permute-done\(%{re.escape(start)}\)", text)
    for op in ("all-gather", "all-reduce", "all-to-all", "reduce-scatter"):
        assert f" {op}-start(" not in text
    cpu_text = (ARTIFACTS / name / "after_partitioning.txt").read_text()
    assert inventory.async_pairs(cpu_text) == [] and "-start(" not in cpu_text


def test_each_collective_matmul_hop_is_in_flight_over_one_dot():
    """collective_matmul on the TPU: between each hop's start and its done
    the scheduled program runs exactly one of the dot fusions, a different
    one each time (chapter 4: the latency-hiding scheduler's placement)."""
    dots = schedule.matmuls_in_flight(_text("collective_matmul"))
    assert len(dots) == 7 and all(len(d) == 1 for d in dots)
    assert len({d[0] for d in dots}) == 7
    calls = {
        d[0]: re.search(rf"%{re.escape(d[0])} = .* calls=%([\w.\-]+)", _text("collective_matmul")).group(1)
        for d in dots
    }
    for called in calls.values():  # each one multiplies: its fused computation is a convolution
        body = re.search(rf"^%{re.escape(called)} \(.*?^\}}", _text("collective_matmul"), re.M | re.S).group(0)
        assert " convolution(" in body


def test_ring_attention_hides_only_its_later_hops_on_tpu():
    """context_ring on the TPU: of its 14 start/done pairs the first 6 have
    no matmul between start and done, each of the other 8 has one (chapter 4)."""
    dots = schedule.matmuls_in_flight(_text("context_ring"))
    assert [len(d) for d in dots] == [0] * 6 + [1] * 8


def test_the_pipeline_send_has_nothing_in_flight_on_tpu():
    """pipeline_stages on the TPU: the one send's start is followed at once by its done (chapter 6)."""
    (pair,) = schedule.in_flight(_text("pipeline_stages"))
    assert pair["kind"] == "collective_permute" and pair["between"] == []


@pytest.mark.parametrize("name", hlo.FIXTURE_NAMES)
def test_in_flight_finds_the_pairs_async_pairs_lists(name):
    pairs = schedule.in_flight(_text(name))
    assert [[p["kind"], p["start"], p["done"]] for p in pairs] == _meta(name)["async_pairs"]


def test_in_flight_reads_only_a_scheduled_module():
    text = (ARTIFACTS / "collective_matmul" / "after_partitioning.txt").read_text()
    with pytest.raises(ValueError, match="not scheduled"):
        schedule.in_flight(text)


def test_in_flight_on_a_small_program():
    text = """HloModule m, is_scheduled=true

%mul (a: f32[2,2], b: f32[2,2]) -> f32[2,2] {
  %a = f32[2,2]{1,0} parameter(0)
  %b = f32[2,2]{1,0} parameter(1)
  ROOT %d = f32[2,2]{1,0} dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main (x: f32[2,2]) -> f32[2,2] {
  %x = f32[2,2]{1,0} parameter(0)
  %s = (f32[2,2]{1,0}, f32[2,2]{1,0}, u32[]{:S(2)}, u32[]{:S(2)}) collective-permute-start(%x), source_target_pairs={{0,1},{1,0}}
  %n = f32[2,2]{1,0} negate(%x)
  %f = f32[2,2]{1,0} fusion(%x, %n), kind=kOutput, calls=%mul
  %t = f32[2,2]{1,0} collective-permute-done(%s)
  %s2 = (f32[2,2]{1,0}, f32[2,2]{1,0}, u32[]{:S(2)}, u32[]{:S(2)}) collective-permute-start(%t), source_target_pairs={{0,1},{1,0}}
  %t2 = f32[2,2]{1,0} collective-permute-done(%s2)
  ROOT %r = f32[2,2]{1,0} add(%t2, %f)
}
"""
    pairs = schedule.in_flight(text)
    assert [(p["start"], p["done"], p["between"]) for p in pairs] == [
        ("s", "t", [("n", "negate"), ("f", "fusion")]),
        ("s2", "t2", []),
    ]
    assert schedule.matmuls_in_flight(text) == [["f"], []]
    with pytest.raises(ValueError, match="collective-permute-start s2 has no done"):
        schedule.in_flight(text.replace("  %t2 = f32[2,2]{1,0} collective-permute-done(%s2)\n", ""))


def test_async_pairs_reads_a_start_without_its_done_as_an_error():
    text = "  %cp = (f32[2]{0}, f32[2]{0}, u32[]{:S(2)}, u32[]{:S(2)}) collective-permute-start(%a), channel_id=1\n"
    with pytest.raises(ValueError, match="collective-permute-start cp has no collective-permute-done"):
        inventory.async_pairs(text)


def test_inventory_reads_an_async_start_with_tpu_layouts():
    text = (
        "HloModule m, num_partitions=2\n"
        "ENTRY %main (a: f32[4,128]) -> f32[4,128] {\n"
        "  %a = f32[4,128]{1,0:T(8,128)} parameter(0)\n"
        "  %cp = (f32[4,128]{1,0:T(8,128)}, f32[4,128]{1,0:T(8,128)}, u32[]{:S(2)}, u32[]{:S(2)}) "
        "collective-permute-start(%a), channel_id=1, source_target_pairs={{0,1},{1,0}}\n"
        "  ROOT %d = f32[4,128]{1,0:T(8,128)} collective-permute-done(%cp)\n"
        "}\n"
    )
    (entry,) = inventory.summary(inventory.inventory(text))
    assert entry["kind"] == "collective_permute" and entry["result_shape"] == [4, 128]
    assert entry["operand_shape"] == [4, 128] and entry["bytes_sent_per_rank"] == 4 * 128 * 4
    assert inventory.async_pairs(text) == [("collective_permute", "cp", "d")]


def _fused_module(emitter):
    # libtpu's fused reduce-scatter as it prints it: the called computation first, holding an
    # all-reduce (one array, and a combined pair) and the slices that keep each device's shard
    return (
        "HloModule m, num_partitions=4\n"
        "%all-reduce-scatter (input: f32[8,16]) -> f32[2,16] {\n"
        "  %input = f32[8,16]{1,0} parameter(0)\n"
        "  %all-reduce.1 = f32[8,16]{1,0} all-reduce(%input), replica_groups={{0,1,2,3}}, to_apply=%add\n"
        "  ROOT %dynamic-slice.1 = f32[2,16]{1,0} dynamic-slice(%all-reduce.1, %i, %z), dynamic_slice_sizes={2,16}\n"
        "}\n"
        "%all-reduce-scatter.2 (input_0: f32[8,4], input_1: f32[4,8]) -> (f32[2,4], f32[1,8]) {\n"
        "  %all-reduce.2 = (f32[8,4]{1,0}, f32[4,8]{1,0}) all-reduce(%input_0, %input_1), replica_groups={{0,1,2,3}}, "
        "to_apply=%add\n"
        "  ROOT %tuple.1 = (f32[2,4]{1,0}, f32[1,8]{1,0}) tuple(%s0, %s1)\n"
        "}\n"
        # a second fusion whose parameter has the first one's name and another shape
        "%all-reduce-scatter.3 (input: f32[4,16]) -> f32[1,16] {\n"
        "  %input = f32[4,16]{1,0} parameter(0)\n"
        "  %all-reduce.3 = f32[4,16]{1,0} all-reduce(%input), replica_groups={{0,1,2,3}}, to_apply=%add\n"
        "  ROOT %dynamic-slice.3 = f32[1,16]{1,0} dynamic-slice(%all-reduce.3, %i, %z), dynamic_slice_sizes={1,16}\n"
        "}\n"
        "ENTRY %main (g: f32[8,16], h: f32[8,4], k: f32[4,8], m: f32[4,16]) -> f32[2,16] {\n"
        "  %g = f32[8,16]{1,0} parameter(0)\n"
        "  %f3 = f32[1,16]{1,0} fusion(%m), kind=kCustom, calls=%all-reduce-scatter.3, "
        f'backend_config={{"collective_algorithm_config":{{"emitter":"{emitter}"}}}}\n'
        "  %f2 = (f32[2,4]{1,0}, f32[1,8]{1,0}) fusion(%h, %k), kind=kCustom, calls=%all-reduce-scatter.2, "
        f'backend_config={{"collective_algorithm_config":{{"emitter":"AllReduceScatterFusion"}}}}\n'
        "  ROOT %f = f32[2,16]{1,0} fusion(%g), kind=kCustom, calls=%all-reduce-scatter, "
        f'backend_config={{"collective_algorithm_config":{{"emitter":"{emitter}"}}}}\n'
        "}\n"
    )


def test_inventory_reads_libtpus_fused_reduce_scatter_as_one():
    """An all-reduce in a computation a custom fusion with a reduce-scatter
    emitter calls is the reduce-scatter libtpu runs: its result the shard,
    (n-1)/n of the operand sent, not an all-reduce's 2(n-1)/n; a combined
    one gives one reduce-scatter per operand, each with its shard."""
    entries = inventory.inventory(_fused_module("SingleInputAllReduceScatterFusion"))
    kinds = [(e["kind"], e["operand_shape"], e["result_shape"], e["bytes_sent_per_rank"]) for e in entries]
    assert kinds == [
        ("reduce_scatter", [8, 16], [2, 16], 3 / 4 * 8 * 16 * 4),
        ("reduce_scatter", [8, 4], [2, 4], 3 / 4 * 8 * 4 * 4),
        ("reduce_scatter", [4, 8], [1, 8], 3 / 4 * 4 * 8 * 4),
        ("reduce_scatter", [4, 16], [1, 16], 3 / 4 * 4 * 16 * 4),
    ]
    assert {e["fused"] for e in entries} == {"all-reduce-scatter", "all-reduce-scatter.2", "all-reduce-scatter.3"}
    # an all-reduce in a fusion with another emitter stays an all-reduce, at its own bytes
    other = inventory.inventory(_fused_module("SomeOtherEmitter"))
    assert other[0]["kind"] == "all_reduce" and other[0]["bytes_sent_per_rank"] == 2 * 3 / 4 * 8 * 16 * 4


def test_the_tpu_lock_is_the_cpu_locks_jax_plus_libtpu():
    """requirements-tpu.lock: jax[tpu] at the version of requirements.lock,
    every package hashed and at requirements.lock's version where both have
    it, libtpu pinned; .venv-tpu is ignored by git."""
    from test_build_guards import _lock_pins

    lock = _lock_pins(ROOT / "requirements.lock")
    tpu = _lock_pins(ROOT / "requirements-tpu.lock")
    assert {"jax", "jaxlib", "numpy", "libtpu"} <= set(tpu)
    assert all(n_hashes for _, n_hashes in tpu.values()), "an entry without a hash"
    assert all(lock[n][0] == v for n, (v, _) in tpu.items() if n in lock), (
        "requirements-tpu.lock drifts from requirements.lock"
    )
    assert tpu["jax"][0] == lock["jax"][0] == _meta("fsdp_matmul")["jax_version"]
    assert tpu["libtpu"][0] == _meta("fsdp_matmul")["libtpu_version"]
    assert ".venv-tpu/" in (ROOT / ".gitignore").read_text().splitlines()
    makefile = (ROOT / "Makefile").read_text()
    assert "--require-hashes --only-binary :all: -r requirements-tpu.lock" in makefile
    assert re.search(r"^\.PHONY:.*\btpu-artifacts\b", makefile, re.M)


def test_capture_tpu_without_libtpu_says_how_to_get_it(tmp_path):
    """In an environment without libtpu (.venv, CI): one line, exit code 2."""
    result = subprocess.run(
        [sys.executable, "-m", "shardbook.hlo", "capture-tpu", "fsdp_matmul", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=JAX_SUBPROCESS_GUARD_S,
    )
    if result.returncode == 0:
        pytest.skip("this Python has libtpu")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "libtpu is not installed" in line and "make tpu-artifacts" in line
    assert list(tmp_path.iterdir()) == []


def _tpu_cli(*args):
    return subprocess.run(
        [str(TPU_PYTHON), "-m", "shardbook.hlo", "capture-tpu", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "code")},
    )


@needs_libtpu
@pytest.mark.jax
@pytest.mark.parametrize(
    ("topology", "message"),
    [
        ("bogus", "--topology: libtpu cannot describe 'bogus'"),
        ("v9z:2x2", "--topology: libtpu cannot describe 'v9z:2x2'"),
        ("v5e:4x4", "fixture fsdp_matmul's mesh {'fsdp': 8} has 8 devices and v5e:4x4 has 16"),
    ],
)
def test_a_bad_topology_is_one_line(tmp_path, topology, message):
    result = _tpu_cli("fsdp_matmul", "--topology", topology, "--out", str(tmp_path))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert message in line and ("names that work" in line or "v5p:2x2x2 has 8" in line)
    assert list(tmp_path.iterdir()) == []


@needs_libtpu
@pytest.mark.jax
def test_tpu_recapture_is_byte_identical(tmp_path):
    """Every fixture compiled again for v5p:2x2x2: every committed file byte
    for byte (what `make tpu-artifacts` must leave: a clean git status)."""
    result = _tpu_cli("--all", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    failures = []
    for name in hlo.FIXTURE_NAMES:
        for f in [*tpu_capture.FILES, "meta.json"]:
            if (tmp_path / name / "tpu" / f).read_bytes() != (ARTIFACTS / name / "tpu" / f).read_bytes():
                failures.append(f"{name}/tpu/{f}")
    assert not failures, "libtpu's output changed; review, then `make tpu-artifacts`: " + ", ".join(failures)


@pytest.mark.jax
def test_a_cpu_capture_keeps_the_tpu_capture(tmp_path):
    """`make artifacts` replaces NAME/ but not NAME/tpu (libtpu's, not its own)."""
    from shardbook.hlo import capture

    shutil.copytree(ARTIFACTS / "fsdp_matmul", tmp_path / "fsdp_matmul")
    before = {p.name: p.read_bytes() for p in (tmp_path / "fsdp_matmul" / "tpu").iterdir()}
    capture.capture("fsdp_matmul", tmp_path, log=lambda *_: None)
    assert {p.name: p.read_bytes() for p in (tmp_path / "fsdp_matmul" / "tpu").iterdir()} == before
