"""Chapter 7's TPU candidates compiled for their topologies: the meshes the
chapter's planner cells pick for LLaMA-3 70B on v5p and on Ironwood, as
shardbook.hlo.compile_plan builds them (dp, fsdp and tp only; eager
attention; recompute none or full), and the committed compiler results
(MESH_FILE, written by `make tpu-artifacts`) beside the planner's.

`candidates()` derives the plans from the planner as the chapter does (it
runs the explorer: seconds), `PLANS` holds those compiled and
`NOT_COMPILED` the others with the reason; a test keeps them equal, so that a planner change that moves the chapter's pick fails
until the plans are recompiled. Where the chapter's pick is not what
compile_plan builds, the nearest plan it builds is compiled and `NOTES`
says what changed.
"""

import math

from .compile_plan import Plan, comparison, load_validation, write_validation

MODEL = "LLaMA-3 70B"
SEQ_LEN = 4096
BATCH_SEQS = 1024  # the Scaling Book's batch, the chapter's case: 1,024 sequences of 4,096 tokens
V5P_CHIPS = 8192  # the Scaling Book's recipe: 1,024 data × 2 sequence × 4 tensor
V5P_SLICES = 2  # 8,192 chips are more than one v5p slice: two slices of 4,096 over DCN

# what `make tpu-artifacts` compiles, by name (candidates() derives the same from the planner)
PLANS = {
    "v5p_explorer": Plan(MODEL, "TPU v5p", {"fsdp": 1024, "tp": 8}, SEQ_LEN, BATCH_SEQS, 1, "none", slices=V5P_SLICES),
    "ironwood_split": Plan(MODEL, "Ironwood", {"fsdp": 512, "tp": 2}, SEQ_LEN, BATCH_SEQS, 2, "full"),
}
NOTES = {
    "v5p_explorer": "the explorer's pick over dp, fsdp, tp, ep and pp on the recipe's chips; it is also the "
    "nearest dp × fsdp × tp plan to its pick with a sequence axis and to the recipe (the cp axis folded into tp); "
    "compiled with eager attention where the planner chose flash attention",
    "ironwood_split": "FSDP + TP at the chapter's best split on the largest power-of-two Ironwood slice on which "
    "the batch stays compute-bound; compiled with eager attention and full recomputation, where the planner with "
    "eager attention picks selective recomputation, which compile_plan does not build",
}
# the chapter's candidates that are not compiled, each with its plan and why
NOT_COMPILED = {
    "v5p_dcn_dp": (
        Plan(MODEL, "TPU v5p", {"dp": 2, "fsdp": 512, "tp": 8}, SEQ_LEN, BATCH_SEQS, 1, "none", slices=V5P_SLICES),
        "the chapter's comparison: the explorer's pick with a sequence axis, rearranged to keep FSDP inside a "
        "slice and data parallelism across the two (its cp axis folded into tp); libtpu 0.0.42.1 stops with "
        "SIGFPE in its all-reduce fusion (cross_replica_sharding_util::ComputeShardingConfig1D) compiling it, "
        "while the same mesh on one slice (dp 2 × fsdp 256 × tp 8 on v5p:16x16x16) compiles",
    ),
}
MESH_FILE = "code/shardbook/data/compiled_mesh_plans.json"
MESH_COMMAND = "make tpu-artifacts (python -m shardbook.hlo compile-mesh-plans --out " + MESH_FILE + ")"
ABOUT = (
    "The TPU compiler's per-device memory (memory_analysis) and collectives per step for chapter 7's v5p and "
    "Ironwood candidate meshes (shardbook.hlo.mesh_plans), compiled ahead of time on a CPU host (not run on a TPU)"
)


def _pow2_at_most(x):
    return 2 ** math.floor(math.log2(x))


def _pow2_nearest(x):
    return 2 ** round(math.log2(x))


def candidates():
    """{name: Plan} of the chapter's candidates as the planner picks them
    today, in the form compile_plan builds (see NOTES): the explorer's
    default pick for the v5p case, and FSDP + TP at the roofline's best
    split on the largest power-of-two Ironwood slice that keeps the same
    batch compute-bound."""
    from .. import explorer, hardware, models, roofline

    batch = BATCH_SEQS * SEQ_LEN
    best = explorer.explore(MODEL, "TPU v5p", V5P_CHIPS, batch, seq_len=SEQ_LEN, tp_comm_overlap=True)[0]
    v5p_mesh = {a: d for a, d in best.mesh.items() if d > 1}
    v5p = Plan(
        MODEL,
        "TPU v5p",
        v5p_mesh,
        SEQ_LEN,
        BATCH_SEQS,
        best.micro_batch_seqs,
        best.recompute,
        slices=best.placement[next(iter(v5p_mesh))].n_domains,
    )
    # as the chapter: the pick with a sequence axis, its FSDP axis split into DP across the slices
    with_cp = explorer.explore(
        MODEL, "TPU v5p", V5P_CHIPS, batch, axes=("dp", "fsdp", "tp", "cp"), seq_len=SEQ_LEN, tp_comm_overlap=True
    )[0]
    n_slices = with_cp.placement["fsdp"].n_domains
    dcn_mesh = {"dp": n_slices, "fsdp": with_cp.fsdp // n_slices, "tp": with_cp.tp, "cp": with_cp.cp}
    # priced as the explorer ranks it (its options searched), as the chapter compares it
    dcn = explorer.best_for_mesh(
        MODEL, "TPU v5p", dcn_mesh, batch, n_devices=V5P_CHIPS, seq_len=SEQ_LEN, tp_comm_overlap=True
    )
    dcn_dp = Plan(
        MODEL,
        "TPU v5p",
        {"dp": n_slices, "fsdp": dcn.fsdp, "tp": dcn.tp * dcn.cp},
        SEQ_LEN,
        BATCH_SEQS,
        dcn.micro_batch_seqs,
        dcn.recompute,
        slices=n_slices,
    )

    iw = hardware.get("Ironwood")
    c, w, f = iw.bf16_dense_flops_per_s, iw.collective_bytes_per_s, models.get(MODEL).d_ff
    chips = _pow2_at_most(min(roofline.fsdp_tp_max_devices(batch, f, c, w), iw.scale_up_domain_size))
    fsdp = _pow2_nearest(roofline.fsdp_tp_optimal_fsdp(batch, chips, f))
    per_chip = 2  # an Ironwood chip is two devices, each taking half of the chip's microbatch
    ironwood = Plan(MODEL, "Ironwood", {"fsdp": fsdp, "tp": chips // fsdp}, SEQ_LEN, BATCH_SEQS, per_chip, "full")
    return {"v5p_explorer": v5p, "v5p_dcn_dp": dcn_dp, "ironwood_split": ironwood}


def write(out_path, log=print, workers=2):
    """Compile PLANS into `out_path` (compile_plan.write_validation)."""
    return write_validation(
        out_path,
        plans=tuple(PLANS.values()),
        log=log,
        workers=workers,
        about=ABOUT,
        command=MESH_COMMAND,
        names=list(PLANS),
    )


def load(path=None):
    """The committed compiler results of the chapter's candidates."""
    from .. import REPOSITORY_ROOT

    return load_validation(REPOSITORY_ROOT / MESH_FILE if path is None else path)


def rows(data=None):
    """{name: comparison row} of the committed results, each with the
    compiler's arguments and temporaries per chip and its collectives by
    kind (full-buffer bytes per chip) beside the planner's by axis."""
    data = load() if data is None else data
    out = {}
    for entry in data["plans"]:
        row = comparison(entry)
        k, mem = entry["devices_per_chip"], entry["memory_analysis"]
        row["compiler_temporary_bytes"] = k * mem["temp_size_in_bytes"]
        row["compiler_collectives"] = {kind: k * c["full_buffer_bytes"] for kind, c in entry["collectives"].items()}
        row["compiler_mesh"] = entry["compiler_mesh"]
        row["note"] = NOTES[entry["name"]]
        out[entry["name"]] = row
    return out
