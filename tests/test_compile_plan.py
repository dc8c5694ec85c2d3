"""The compiler's verdict on a plan (shardbook.hlo.compile_plan): reading
a compiled TPU program's loops and collectives, the topology a plan
compiles for, what `--compile` refuses, and the committed compiler results
of the validation plans (code/shardbook/data/compiled_plans.json) against
the planner. None of these needs libtpu; `make tpu-artifacts` recompiles
the file with .venv-tpu."""

import json
import subprocess
import sys

import pytest
from test_planner_cli import _cli, _refused  # the command line as a reader runs it, and its one-line refusal

from conftest import JAX_SUBPROCESS_GUARD_S, ROOT
from shardbook import memory, models
from shardbook.hlo import compile_plan as cp

DATA = ROOT / cp.VALIDATION_FILE

# a compiled program in the TPU compiler's own form: a while loop whose condition compares its
# counter with a constant, an asynchronous all-gather in the body, an all-reduce in the entry
PROGRAM = """HloModule jit_step, num_partitions=4

%cond (p: (s32[], bf16[8,16])) -> pred[] {
  %c = s32[]{:T(128)} constant(32)
  %p = (s32[]{:T(128)}, bf16[8,16]{1,0}) parameter(0)
  %i = s32[]{:T(128)} get-tuple-element(%p), index=0
  ROOT %lt = pred[]{:T(512)} compare(%i, %c), direction=LT
}

%body (q: (s32[], bf16[8,16])) -> (s32[], bf16[8,16]) {
  %q = (s32[]{:T(128)}, bf16[8,16]{1,0}) parameter(0)
  %x = bf16[8,16]{1,0} get-tuple-element(%q), index=1
  %ag = bf16[32,16]{1,0} all-gather-start(%x), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}
  %agd = bf16[32,16]{1,0} all-gather-done(%ag)
  ROOT %t = (s32[]{:T(128)}, bf16[8,16]{1,0}) tuple(%q)
}

ENTRY %main (a: bf16[8,16]) -> bf16[8,16] {
  %a = bf16[8,16]{1,0} parameter(0)
  %w = (s32[], bf16[8,16]) while(%init), condition=%cond, body=%body
  ROOT %ar = bf16[8,16]{1,0} all-reduce(%a), channel_id=2, replica_groups={{0,1,2,3}}, to_apply=%add
}
"""


def test_a_loops_collectives_count_once_per_iteration():
    runs = cp.executions(PROGRAM)
    assert runs["main"] == 1 and runs["body"] == 32 and runs["cond"] == 32
    found = cp.per_step(PROGRAM)
    assert found["all_gather"]["count"] == 32 and found["all_reduce"]["count"] == 1
    assert found["all_gather"]["full_buffer_bytes"] == 32 * 32 * 16 * 2
    assert found["all_reduce"]["full_buffer_bytes"] == 8 * 16 * 2
    # the ring formulas: a gather sends 3/4 of its result, an all-reduce twice 3/4 of its buffer
    assert found["all_gather"]["bytes_sent_per_device"] == pytest.approx(32 * 32 * 16 * 2 * 3 / 4)
    assert found["all_reduce"]["bytes_sent_per_device"] == pytest.approx(2 * 8 * 16 * 2 * 3 / 4)


def test_a_loop_whose_count_cannot_be_read_is_refused():
    unreadable = PROGRAM.replace("compare(%i, %c), direction=LT", "compare(%i, %i), direction=NE")
    with pytest.raises(ValueError, match="cannot tell how often a while loop runs"):
        cp.per_step(unreadable)


@pytest.mark.parametrize(
    "accelerator, n, name",
    [
        ("TPU v5p", 8, "v5p:2x2x2"),
        ("TPU v5p", 64, "v5p:4x4x4"),
        ("TPU v5p", 512, "v5p:8x8x8"),
        ("TPU v5e", 256, "v5e:16x16"),
        ("TPU v6e", 32, "v6e:4x8"),
        ("Ironwood", 64, "tpu7x:4x4x4"),
    ],
)
def test_the_topology_of_a_plan(accelerator, n, name):
    assert cp.topology_for(accelerator, n) == name
    assert cp.topology_chips(name)[1] == n


@pytest.mark.parametrize(
    "accelerator, n, message",
    [
        ("TPU v5p", 24, "--topology: 24 chips of TPU v5p is not a power of two"),
        ("TPU v5e", 512, "--topology: TPU v5e slices stop at 16x16"),
        ("H100", 8, "--compile: compiles for TPU topologies only"),
    ],
)
def test_a_topology_that_is_not_there_is_refused(accelerator, n, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        cp.topology_for(accelerator, n)


def test_ironwood_chips_are_two_devices_and_the_mesh_must_tile_the_topology():
    plan = cp.Plan("LLaMA-3 70B", "Ironwood", {"fsdp": 16, "tp": 4}, 4096, 32, 2)
    assert cp.compiler_mesh(plan, "tpu7x:4x4x4") == {"dp": 1, "fsdp": 32, "tp": 4}
    dp = cp.Plan("LLaMA-3 8B", "Ironwood", {"dp": 16, "tp": 4}, 4096, 32, 2)
    assert cp.compiler_mesh(dp, "tpu7x:4x4x4") == {"dp": 32, "fsdp": 1, "tp": 4}
    with pytest.raises(ValueError, match=r"--mesh: 64 devices do not tile v5p:8x8x8 \(512 chips, 512 devices\)"):
        cp.compiler_mesh(cp.Plan("LLaMA-3 8B", "TPU v5p", {"fsdp": 64}, 4096, 64, 1), "v5p:8x8x8")
    with pytest.raises(ValueError, match="--topology: v5e:8x8 is not a TPU v5p topology"):
        cp.compiler_mesh(cp.Plan("LLaMA-3 8B", "TPU v5p", {"fsdp": 64}, 4096, 64, 1), "v5e:8x8")
    with pytest.raises(ValueError, match="--micro-batch: a tpu7x chip is 2 devices"):
        cp.compiler_mesh(cp.Plan("LLaMA-3 8B", "Ironwood", {"fsdp": 64}, 4096, 64, 1), "tpu7x:4x4x4")
    with pytest.raises(ValueError, match="--topology: 'v9:4x4' is not a topology name"):
        cp.topology_chips("v9:4x4")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"mesh": {"fsdp": 8, "pp": 8}}, "--compile: builds meshes over dp, fsdp, tp only; pp=8"),
        ({"attention": "flash"}, "--compile: builds eager attention"),
        ({"mesh": {"fsdp": 2, "tp": 32}}, "--compile: tp=32 must divide the KV heads (8)"),
        ({"batch_seqs": 100}, "--compile: the batch (100 sequences) must split into whole microbatches"),
        ({"recompute": "selective"}, "--compile: recompute must be none or full"),
        ({"model": "DeepSeek-V3"}, "--compile: builds LLaMA- and Mixtral-style models only"),
        ({"accelerator": "H100"}, "--compile: compiles for TPU topologies only"),
    ],
)
def test_what_the_program_does_not_build_is_refused(change, message):
    plan = dict(model="LLaMA-3 8B", accelerator="TPU v5p", mesh={"fsdp": 64}, seq_len=4096, batch_seqs=64)
    plan.update(micro_batch_seqs=1, **change)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        cp.check_plan(cp.Plan(**plan))


def test_compile_refuses_a_config_or_accelerator_file_before_it_compiles_a_preset(tmp_path):
    """--compile builds presets by name: a config.json named like a preset (here LLaMA-3 8B's name with
    8 of its 32 layers) was priced as the file but compiled as the preset, the two printed side by
    side as if they matched; an accelerator file's TPU was called an 'unknown preset'."""
    config = json.loads((ROOT / "tests" / "data" / "hf_configs" / "llama3-8b.json").read_text())
    config.update(_name_or_path="LLaMA-3 8B", num_hidden_layers=8)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    args = ("TPU v5p", "64", "256K", "--mesh", "fsdp=64", "--attention", "eager", "--compile")
    _refused(_cli("--config", str(path), *args), "--compile: compiles the model presets only; 'LLaMA-3 8B' comes")
    from shardbook import accelerator_file

    tpu = tmp_path / "my-tpu.toml"
    tpu.write_text(accelerator_file.to_toml("TPU v5p").replace('name = "TPU v5p"', 'name = "My TPU"'))
    ran = _cli("LLaMA-3 8B", "--accelerator-file", str(tpu), *args[1:])
    _refused(ran, "--compile: compiles the TPU presets only; 'My TPU' comes from --accelerator-file")


def test_compile_without_libtpu_says_how_to_get_it():
    # the project's .venv has jax[cpu] only: the compile module is imported, libtpu is not there
    result = _cli("LLaMA-3 8B", "TPU v5p", "64", "256K", "--mesh", "fsdp=64", "--attention", "eager", "--compile")
    _refused(result, "--compile: libtpu is not installed in this Python")
    assert "`make tpu-artifacts` creates .venv-tpu" in result.stderr and ".venv-tpu/bin/python" in result.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (("H100", "64", "--mesh", "fsdp=64"), "--compile: compiles for TPU topologies only"),
        (("TPU v5p", "64", "--mesh", "fsdp=64", "--topology", "v9:4x4"), "--topology: 'v9:4x4' is not a topology name"),
        (("TPU v5p", "64", "--mesh", "fsdp=64", "--topology", "v5p:8x8x8"), "--mesh: 64 devices do not tile v5p:8x8x8"),
        (("TPU v5p", "64"), "--compile: compiles one plan; name its mesh with --mesh"),
    ],
)
def test_compile_refuses_in_one_line(args, message):
    extra = () if "H100" in args else ("--attention", "eager")
    _refused(_cli("LLaMA-3 8B", *args, "256K", "--compile", *extra), message)


def test_compile_on_flash_attention_asks_for_eager():
    result = _cli("LLaMA-3 8B", "TPU v5p", "64", "256K", "--mesh", "fsdp=64", "--compile")
    _refused(result, "--compile: the compiled step keeps eager attention's probabilities")


def test_topology_needs_compile():
    _refused(_cli("LLaMA-3 8B", "TPU v5p", "64", "256K", "--topology", "v5p:4x4x4"), "--topology: names the slice")


@pytest.fixture(scope="module")
def committed():
    return cp.load_validation()


def test_the_committed_file_is_the_validation_set_with_its_provenance(committed):
    assert committed["command"] == cp.VALIDATION_COMMAND
    assert committed["environment"] == cp.TPU_ENV
    assert committed["jax_version"] == "0.10.2" and committed["libtpu_version"].startswith("0.0.")
    assert "not run on a TPU" in committed["about"]
    # the plans the file holds are the declared ones, in order: a change of VALIDATION needs a recompile
    assert [p["plan"] for p in committed["plans"]] == [cp.plan_dict(p) for p in cp.VALIDATION]
    for entry, plan in zip(committed["plans"], cp.VALIDATION, strict=True):
        assert entry["topology"] == cp.topology_for(plan.accelerator, plan.n_devices)
        assert entry["compiler_mesh"] == cp.compiler_mesh(plan, entry["topology"])
        assert entry["devices_per_chip"] == cp.DEVICES_PER_CHIP[entry["topology"].split(":")[0]]
        assert entry["compiler_devices"] == plan.n_devices * entry["devices_per_chip"]
        mem = entry["memory_analysis"]
        assert set(mem) == {
            "argument_size_in_bytes",
            "output_size_in_bytes",
            "alias_size_in_bytes",
            "temp_size_in_bytes",
            "generated_code_size_in_bytes",
            "peak_memory_in_bytes",
        }
        assert 0 < mem["alias_size_in_bytes"] <= mem["output_size_in_bytes"]  # the state is donated
        assert set(entry["collectives"]) <= {
            "all_gather",
            "reduce_scatter",
            "all_reduce",
            "all_to_all",
            "collective_permute",
        }
        assert "compile_s" not in entry  # nothing that differs between two compiles
    assert DATA.read_text().endswith("\n") and json.loads(DATA.read_text()) == committed


def test_the_compilers_arguments_are_the_planners_state(committed):
    # weights, master copy and Adam moments, 14 bytes a parameter under bf16_master (the gradients live
    # inside the step): the compiler's arguments per chip, with the token batches, within 1 % (the
    # replicated norms and the padding to the TPU's tiles: 0.85 % at most, 8B over 256 chips). Where
    # an Ironwood chip's second device doubles dp, each of its two devices keeps a replica: twice
    # the state a chip, which the planner (one device a chip) does not count.
    for entry in committed["plans"]:
        plan = cp.Plan(**entry["plan"])
        r = memory.state_recipe(plan.state_recipe)
        params = models.param_count(plan.model) / (plan.mesh.get("fsdp", 1) * plan.mesh.get("tp", 1))
        doubled_dp = entry["compiler_mesh"]["dp"] != plan.mesh.get("dp", 1)
        replicas = entry["devices_per_chip"] if doubled_dp else 1
        state = replicas * params * (r.weight_bytes + r.master_bytes + r.optimizer_bytes)
        tokens = 2 * 4 * plan.batch_seqs * plan.seq_len / plan.data_ranks
        arguments = cp.memory_totals(entry)["arguments"]
        assert arguments == pytest.approx(state + tokens, rel=1e-2), cp.label(plan)
        assert arguments > state + tokens


def test_how_fsdp_is_reduced_and_gathered_on_each_tpu(committed):
    """Chapter 97: on v5p, v5e and v6e no FSDP plan keeps a reduce-scatter,
    whether FSDP spans the slice or shares it with tp; FSDP alone over a whole
    v5p torus has no all-gather either (all-reduces and two all-to-alls), while
    v5e keeps its all-gathers; Ironwood keeps reduce-scatters; and on the older
    chips collective permutes appear exactly in the plans with a tp axis."""
    plans = committed["plans"]
    older = [e for e in plans if not e["topology"].startswith("tpu7x")]
    fsdp = [e for e in plans if e["plan"]["mesh"].get("fsdp", 1) > 1]
    assert all("reduce_scatter" not in e["collectives"] for e in fsdp if e in older)
    assert any(e["plan"]["mesh"].get("tp", 1) > 1 for e in fsdp if e in older)
    assert all("reduce_scatter" in e["collectives"] for e in fsdp if e not in older)
    whole = [
        e for e in fsdp if list(e["plan"]["mesh"]) == ["fsdp"] and e["plan"]["mesh"]["fsdp"] == e["compiler_devices"]
    ]
    v5p = [e for e in whole if e["topology"].startswith("v5p")]
    v5e = [e for e in whole if e["topology"].startswith("v5e")]
    assert len(v5p) == 3 and all(e["collectives"]["all_to_all"]["count"] == 2 for e in v5p)
    assert all(set(e["collectives"]) == {"all_reduce", "all_to_all"} for e in v5p)
    assert v5e and all("all_gather" in e["collectives"] for e in v5e)
    assert all(("collective_permute" in e["collectives"]) == (e["plan"]["mesh"].get("tp", 1) > 1) for e in older)


def test_the_planner_command_line_reaches_the_compiler_only_when_asked():
    # the browser loads shardbook.planner.cli; the compile module (the JAX layer) is imported by
    # --compile alone, so importing the command line, or running it without --compile, leaves it out
    code = (
        "import sys, shardbook.planner.cli as c; c.main(['LLaMA-3 8B', 'TPU v5p', '64', '256K', '--mesh', 'fsdp=64']);"
        "sys.exit(1 if any(m.startswith('shardbook.hlo') for m in sys.modules) else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=JAX_SUBPROCESS_GUARD_S
    )
    assert result.returncode == 0, result.stderr


def _compiled_fsdp_kinds(entry):
    """(gather kind, reduction kind) of FSDP's collectives as the compiler emitted them, read off the
    compiled plan alone: a plan with no all-gather left gathered its weights by all-reduces (dp × tp
    plans, which have no FSDP, keep theirs: TP's gathers are all-gathers in every plan), one with no
    reduce-scatter left reduced its gradients by all-reduces (TP's reduce-scatters go the same way)."""
    found = entry["collectives"]
    gather = "all_gather" if "all_gather" in found else "all_reduce"
    reduce = "reduce_scatter" if "reduce_scatter" in found else "all_reduce"
    assert reduce in found and gather in found
    return gather, reduce


def test_the_planner_prices_fsdp_with_the_collectives_the_compiler_emits(committed):
    # every FSDP plan compiled: the kinds the planner prices FSDP's gathers and gradient reduction by
    # (planner.explain's record of the step it prices) are the kinds the compiler emitted
    fsdp_plans = [e for e in committed["plans"] if e["plan"]["mesh"].get("fsdp", 1) > 1]
    assert len(fsdp_plans) >= 10
    seen = set()
    for entry in fsdp_plans:
        gather, reduce = _compiled_fsdp_kinds(entry)
        seen.add((entry["topology"].split(":")[0], gather, reduce))
        plan = cp.Plan(**entry["plan"])
        priced = cp.planner_side(plan)["collective_kinds"]["fsdp"]
        expected = {gather, reduce}
        assert set(priced) == expected, (cp.label(plan), entry["topology"], priced, expected)
        if gather == reduce:  # both all-reduces: the weights' bytes and the gradients' in one
            continue
        assert priced[gather] == pytest.approx(2 * priced[reduce])  # two gathers a microbatch, one reduction
    # the rule the file shows (timing.ALL_REDUCE_GRADIENT_TPUS): gradients all-reduced on v5p, v5e and v6e,
    # reduce-scattered on Ironwood; weights gathered by all-reduces over a whole wrapping 3D slice
    assert {s[2] for s in seen if s[0] != "tpu7x"} == {"all_reduce"}
    assert {s[2] for s in seen if s[0] == "tpu7x"} == {"reduce_scatter"}
    assert ("v5p", "all_reduce", "all_reduce") in seen and ("v5e", "all_gather", "all_reduce") in seen
    assert ("tpu7x", "all_reduce", "reduce_scatter") in seen and ("tpu7x", "all_gather", "reduce_scatter") in seen


def test_an_all_reduce_sends_twice_a_gathers_share():
    from shardbook.planner.explain import ring_share

    assert ring_share("all_reduce", 64) == pytest.approx(2 * 63 / 64)
    assert ring_share("all_gather", 64) == ring_share("reduce_scatter", 64) == pytest.approx(63 / 64)
    assert ring_share("send", 2) == 1.0
