"""Chapter 7's v5p and Ironwood candidates as the TPU compiler sees them
(shardbook.hlo.mesh_plans): the committed results
(code/shardbook/data/compiled_mesh_plans.json, written by `make
tpu-artifacts`) hold the plans the chapter's planner cells pick, compiled
for their topologies, multislice included. None of these needs libtpu."""

import json

import pytest

from conftest import ROOT
from shardbook import memory, models
from shardbook.hlo import compile_plan as cp
from shardbook.hlo import mesh_plans

DATA = ROOT / mesh_plans.MESH_FILE
KINDS = {"all_gather", "reduce_scatter", "all_reduce", "all_to_all", "collective_permute"}


@pytest.fixture(scope="module")
def committed():
    return mesh_plans.load()


def test_the_committed_file_holds_the_chapters_plans_with_their_provenance(committed):
    assert committed["command"] == mesh_plans.MESH_COMMAND and "make tpu-artifacts" in committed["command"]
    assert committed["environment"] == cp.TPU_ENV
    assert committed["jax_version"] == "0.10.2" and committed["libtpu_version"].startswith("0.0.")
    assert "not run on a TPU" in committed["about"]
    # the plans the file holds are PLANS, by name and in order: a change of PLANS needs a recompile
    assert [e["name"] for e in committed["plans"]] == list(mesh_plans.PLANS)
    assert [e["plan"] for e in committed["plans"]] == [cp.plan_dict(p) for p in mesh_plans.PLANS.values()]
    for entry in committed["plans"]:
        plan = mesh_plans.PLANS[entry["name"]]
        one = cp.slice_topology(plan)
        assert entry["topology"] == (one if plan.slices == 1 else f"{plan.slices} × {one}")
        assert entry["compiler_mesh"] == cp.compiler_mesh(plan, one)
        assert entry["devices_per_chip"] == cp.DEVICES_PER_CHIP[one.split(":")[0]]
        assert entry["compiler_devices"] == plan.n_devices * entry["devices_per_chip"]
        assert 0 < entry["memory_analysis"]["alias_size_in_bytes"] <= entry["memory_analysis"]["output_size_in_bytes"]
        assert entry["collectives"] and set(entry["collectives"]) <= KINDS
        assert "compile_s" not in entry  # nothing that differs between two compiles
    # byte-reproducible: sorted keys, one layout, no time stamps
    assert DATA.read_text() == json.dumps(committed, indent=1, sort_keys=True) + "\n"


def test_the_plans_are_the_chapters_v5p_and_ironwood_cases():
    plans = mesh_plans.PLANS
    skipped = {name: plan for name, (plan, _) in mesh_plans.NOT_COMPILED.items()}
    assert not set(plans) & set(skipped) and all(why for _, why in mesh_plans.NOT_COMPILED.values())
    assert {p.accelerator for p in plans.values()} == {"TPU v5p", "Ironwood"}
    for plan in {**plans, **skipped}.values():
        cp.check_plan(plan)  # what compile_plan builds: dp, fsdp, tp; eager attention; none or full
        assert (plan.model, plan.seq_len, plan.batch_seqs) == (mesh_plans.MODEL, 4096, 1024)
    # the v5p case spans the recipe's 8,192 chips as two slices of 4,096 (one v5p slice holds fewer)
    for plan in (plans["v5p_explorer"], skipped["v5p_dcn_dp"]):
        assert plan.n_devices == mesh_plans.V5P_CHIPS and plan.slices == 2
        assert cp.slice_topology(plan) == "v5p:16x16x16"
    assert skipped["v5p_dcn_dp"].mesh["dp"] == skipped["v5p_dcn_dp"].slices  # DP across the slices, FSDP inside
    assert set(mesh_plans.NOTES) == set(plans)


@pytest.mark.slow
def test_the_plans_are_what_the_planner_picks_today():
    # the chapter's planner cells, run again: a planner change that moves its pick fails here until
    # PLANS changes and `make tpu-artifacts` recompiles them
    skipped = {name: plan for name, (plan, _) in mesh_plans.NOT_COMPILED.items()}
    assert mesh_plans.candidates() == {**mesh_plans.PLANS, **skipped}


def test_several_slices_tile_several_topologies():
    plan = mesh_plans.PLANS["v5p_explorer"]
    assert cp.compiler_mesh(plan, "v5p:16x16x16") == {"dp": 1, "fsdp": 1024, "tp": 8}
    with pytest.raises(ValueError, match=r"--mesh: 8192 devices do not tile 2 × v5p:8x8x8 \(1024 chips"):
        cp.compiler_mesh(plan, "v5p:8x8x8")
    with pytest.raises(ValueError, match="--slices: 3 slices must divide the mesh's 8192 devices"):
        cp.check_plan(cp.Plan(plan.model, plan.accelerator, plan.mesh, 4096, 1024, 1, "none", slices=3))
    # one slice is not written, so the validation set's committed plans keep their form
    assert "slices" not in cp.plan_dict(cp.VALIDATION[0]) and cp.plan_dict(plan)["slices"] == 2
    assert cp.plan_from_dict(cp.plan_dict(plan)) == plan


def test_the_compilers_arguments_are_the_planners_state(committed):
    # weights, master copy and Adam moments (14 bytes a parameter) and the token batches, per chip,
    # within 1 %; at 8,192 ways the RMSNorm weights, which every device keeps whole (both of an Ironwood
    # chip's devices), are a sixth of it
    for entry in committed["plans"]:
        plan = cp.plan_from_dict(entry["plan"])
        m = models.get(plan.model)
        r = memory.state_recipe(plan.state_recipe)
        per_param = r.weight_bytes + r.master_bytes + r.optimizer_bytes
        norms = 2 * m.n_layers * m.d_model + m.d_model
        shards = plan.mesh.get("fsdp", 1) * plan.mesh.get("tp", 1)
        state = ((models.param_count(m) - norms) / shards + entry["devices_per_chip"] * norms) * per_param
        tokens = 2 * 4 * plan.batch_seqs * plan.seq_len / plan.data_ranks
        assert cp.memory_totals(entry)["arguments"] == pytest.approx(state + tokens, rel=1e-2), entry["name"]


def test_the_rows_set_the_compiler_beside_the_planner(committed):
    rows = mesh_plans.rows(committed)
    assert list(rows) == list(mesh_plans.PLANS)
    for name, row in rows.items():
        entry = next(e for e in committed["plans"] if e["name"] == name)
        k = entry["devices_per_chip"]
        assert row["compiler_temporary_bytes"] == k * entry["memory_analysis"]["temp_size_in_bytes"]
        assert row["compiler_peak_bytes"] == k * entry["memory_analysis"]["peak_memory_in_bytes"]
        assert row["peak_ratio"] == pytest.approx(row["compiler_peak_bytes"] / row["planner_bytes"])
        assert sum(row["compiler_collectives"].values()) == row["compiler_collective_bytes"]
        assert set(row["planner_collective_axes"]) <= {"dp", "fsdp", "tp"} and row["note"]


def test_chapter_7_reads_the_committed_plans():
    text = (ROOT / "chapters" / "07_choosing_a_mesh.md").read_text()
    assert "mesh_plans.rows()" in text and "mesh_plans.PLANS" in text
