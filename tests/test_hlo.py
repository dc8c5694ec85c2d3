"""The committed HLO artifacts: complete, deterministic, what the cost model
predicts, unchanged by a recapture, and runnable across two processes."""

import json
import re
import shutil
import subprocess
import sys

import pytest

from conftest import JAX_SUBPROCESS_GUARD_S, ROOT, assert_clean_files
from shardbook import hlo
from shardbook.hlo import capture, dot, inventory
from shardbook.hlo import predict as predict_module

ARTIFACTS = ROOT / "hlo_artifacts"


def _meta(name):
    return json.loads((ARTIFACTS / name / "meta.json").read_text())


def _text(name, which="after"):
    return (ARTIFACTS / name / f"{which}_partitioning.txt").read_text()


@pytest.mark.parametrize("name", hlo.FIXTURE_NAMES)
def test_artifact_folder_is_complete_and_clean(name):
    folder = ARTIFACTS / name
    meta = _meta(name)
    assert_clean_files(folder, capture.FILES, meta["sha256"], name)
    for key in (
        "fixture",
        "mesh",
        "specs",
        "global_shapes",
        "local_shapes",
        "dtype",
        "jax_version",
        "jaxlib_version",
        "platform",
        "xla_flags",
        "command",
        "inventory",
    ):
        assert key in meta, key
    svg = (folder / "after_partitioning.svg").read_text()
    assert "@import" not in svg and "stylesheet" not in svg and "fonts.googleapis" not in svg
    assert "<svg" in svg and "graphviz version" not in svg


@pytest.mark.parametrize("name", hlo.FIXTURE_NAMES)
def test_compiler_agrees_with_the_cost_model(name):
    meta = _meta(name)
    spec = {k: tuple(tuple(e) if isinstance(e, list) else e for e in v) for k, v in meta["specs"].items()}
    predicted = predict_module.predict(name, meta["mesh"], spec, meta["global_shapes"], meta["dtype"])
    captured = inventory.summary(inventory.inventory(_text(name)))
    assert captured == predicted


def test_fsdp_matmul_before_and_after():
    before = _text("fsdp_matmul", "before")
    assert "f16[1024,512]" in before and "f16[512,512]" in before
    assert 'xla.sdy.sharding="#sdy.sharding<@mesh, [{\\"fsdp\\"}, {}]>"' in before
    assert "xla.sdy.FuncResultSharding" in before
    after = _text("fsdp_matmul")
    assert re.search(r"\(param: f16\[128,512\], param\.1: f16\[64,512\]\)", after)
    assert re.search(r"= f16\[512,512\]\{1,0\} all-gather\(%param\.1\)", after)
    assert re.search(r"= f16\[128,512\]\{1,0\} dot\(%param, %all-gather\)", after)


def test_dp_matmul_needs_no_collective():
    after = _text("dp_matmul")
    assert re.search(r"f16\[128,512\]\{1,0\} dot\(", after) and "f16[512,512]" in after
    assert inventory.inventory(after) == []


def test_tp_matmul_sums_partials_over_eight():
    after = _text("tp_matmul")
    assert "f16[1024,64]" in after and "f16[64,512]" in after
    (ar,) = inventory.inventory(after)
    assert ar["kind"] == "all_reduce" and ar["result_shape"] == [1024, 512] and ar["group_size"] == 8


def test_fsdp_ep_linear_gathers_in_pairs():
    meta = _meta("fsdp_ep_linear")
    assert meta["local_shapes"] == {"x": [128, 512], "w": [256, 512]}
    (ag,) = meta["inventory"]
    assert ag["group_size"] == 2 and ag["replica_groups"] == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_train_step_as_this_backend_emits_it():
    kinds = [c["kind"] for c in _meta("fsdp_train_step")["inventory"]]
    # CPU backend: all-reduce + dynamic-slice where a GPU pipeline forms reduce-scatter
    assert kinds == ["all_gather", "all_reduce"]
    assert re.search(r"dynamic-slice\(%all-reduce", _text("fsdp_train_step"))
    assert any("reduce-scatter" in n for n in _meta("fsdp_train_step")["backend_notes"])
    assert [c["kind"] for c in _meta("fsdp_manual")["inventory"]] == ["all_gather", "reduce_scatter"]


def test_the_cpu_backends_final_program_keeps_the_all_reduce_and_slice():
    """Chapter 3: the captures stop after SPMD partitioning; the CPU
    backend's compiled program (its later passes run) still reduces the
    gradient by an all-reduce and slices its shard: no pass forms the
    reduce-scatter a GPU pipeline would."""
    from shardbook.programs import fixtures

    fx = fixtures.get("fsdp_train_step")
    mesh = fixtures.mesh_for(fx)
    compiled = fixtures.jitted(fx, mesh).lower(*fixtures.abstract_args(fx, mesh)).compile().as_text()
    assert re.search(r"= \S+ all-reduce\(", compiled) and "dynamic-slice" in compiled
    assert "reduce-scatter" not in compiled


def test_megatron_and_sequence_parallel():
    assert [c["kind"] for c in _meta("megatron_mlp")["inventory"]] == ["all_reduce"]
    assert [c["kind"] for c in _meta("megatron_mlp_sp")["inventory"]] == ["all_gather", "reduce_scatter"]


def test_moe_dispatch_all_to_all_over_experts():
    meta = _meta("moe_dispatch")
    a2a = [c for c in meta["inventory"] if c["kind"] == "all_to_all"]
    assert len(a2a) == 1 and a2a[0]["replica_groups"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert meta["specs"]["w"] == ["expert", "fsdp", None]


def test_pipeline_permute_pairs():
    (cp,) = _meta("pipeline_stages")["inventory"]
    assert cp["kind"] == "collective_permute"
    assert cp["source_target_pairs"] == [[i, (i + 1) % 8] for i in range(8)]


def test_replica_group_notations():
    assert inventory.parse_replica_groups("replica_groups={{0,2},{1,3}}", 4) == [[0, 2], [1, 3]]
    assert inventory.parse_replica_groups("replica_groups=[4,2]<=[8]", 8) == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert inventory.parse_replica_groups("replica_groups=[2,4]<=[4,2]T(1,0)", 8) == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert inventory.parse_replica_groups("replica_groups=mesh['a'=2,'b'=4] {'a'}", 8) == [
        [0, 4],
        [1, 5],
        [2, 6],
        [3, 7],
    ]
    assert inventory.parse_replica_groups("replica_groups={}", 4) == [[0, 1, 2, 3]]


def test_recapture_matches_committed(tmp_path):
    """Every fixture compiled again (by one worker process, as `make
    artifacts` does): the same collectives and every committed file byte
    for byte, meta.json and the DOT included, so that `make artifacts` in a
    fresh clone leaves `git status` clean (XLA numbers the modules in the
    order one process compiles them; the DOT labels carry module_0000 and
    meta.json one order of the XLA flags)."""
    failures = []
    recaptured = capture.capture_many(hlo.FIXTURE_NAMES, tmp_path, log=lambda *_: None)
    for name in hlo.FIXTURE_NAMES:
        diff = capture.compare_inventories(_meta(name), recaptured[name])
        if diff:
            failures.append(f"{name}:\n" + "\n".join(diff))
        # NAME/tpu is the TPU capture's (tests/test_hlo_tpu.py), which this one keeps
        files = sorted(p.name for p in (ARTIFACTS / name).iterdir() if p.name != "tpu")
        assert files == sorted(p.name for p in (tmp_path / name).iterdir()), name
        for f in files:
            if (tmp_path / name / f).read_bytes() != (ARTIFACTS / name / f).read_bytes():
                failures.append(f"{name}/{f}: recapture is not byte-identical")
    assert not failures, "the compiler's output changed; review, then `make artifacts`:\n" + "\n".join(failures)


def test_planted_artifact_change_is_caught(tmp_path):
    shutil.copytree(ARTIFACTS / "fsdp_ep_linear", tmp_path / "fsdp_ep_linear")
    meta_path = tmp_path / "fsdp_ep_linear" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["inventory"][0]["group_size"] = 4
    meta["inventory"][0]["replica_groups"] = [[0, 1, 2, 3], [4, 5, 6, 7]]
    meta_path.write_text(json.dumps(meta))
    result = subprocess.run(
        [sys.executable, "-m", "shardbook.hlo", "compare", "fsdp_ep_linear", "--artifacts", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=JAX_SUBPROCESS_GUARD_S,
        cwd=ROOT,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "fsdp_ep_linear: DIFFERS" in result.stdout
    assert "over 4 [[0, 1, 2, 3], [4, 5, 6, 7]]" in result.stdout and "over 2 [[0, 4]" in result.stdout


@pytest.mark.parametrize("name", ["fsdp_matmul", "moe_dispatch", "hsdp_train_step", "collective_matmul"])
def test_two_processes_agree_with_one(name):
    from shardbook.hlo import multiprocess

    reports = multiprocess.run(name, 2, timeout_s=JAX_SUBPROCESS_GUARD_S, log=lambda *_: None)
    assert sorted(r["process_id"] for r in reports) == [0, 1]
    assert all(r["global_devices"] == 8 and r["local_devices"] == 4 for r in reports)
    assert all(r["hlo_matches"] is True for r in reports), [r.get("hlo_diff") for r in reports]


def test_unknown_fixture_lists_known():
    result = subprocess.run(
        [sys.executable, "-m", "shardbook.hlo", "capture", "nope"], capture_output=True, text=True, cwd=ROOT
    )
    assert result.returncode == 2
    assert "unknown fixture 'nope'; known: dp_matmul, fsdp_matmul" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_dot_names_the_debian_package(monkeypatch):
    monkeypatch.setattr(dot.shutil, "which", lambda _: None)
    with pytest.raises(RuntimeError, match="Debian package 'graphviz'"):
        dot.render_svg("digraph G {}")


def test_capture_that_finds_no_module_names_the_fixture(tmp_path):
    (tmp_path / "module_0001.jit_other.before_optimizations.txt").write_text("")
    with pytest.raises(
        capture.CaptureError, match="fixture fsdp_matmul: expected one HLO module named jit_fsdp_matmul, found 0"
    ):
        capture.find_dumps(tmp_path, "fsdp_matmul")


def test_failed_capture_leaves_artifacts_untouched(tmp_path, monkeypatch):
    shutil.copytree(ARTIFACTS / "fsdp_matmul", tmp_path / "fsdp_matmul")
    folder = tmp_path / "fsdp_matmul"
    before = {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert "tpu/meta.json" in before  # the TPU capture inside it is left alone too

    def broken(_):
        raise RuntimeError("dot failed: planted")

    monkeypatch.setattr(capture.dot, "render_svg", broken)
    with pytest.raises(RuntimeError, match="planted"):
        capture.capture("fsdp_matmul", tmp_path, log=lambda *_: None)
    after = {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert after == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fsdp_matmul"]


def test_combined_collectives_are_listed_per_operand():
    text = (
        "HloModule m, num_partitions=8\n"
        "ENTRY %main (a: f32[4,8], b: f32[8,2]) -> f32[4,8] {\n"
        "  %a = f32[4,8]{1,0} parameter(0)\n"
        "  %b = f32[8,2]{1,0} parameter(1)\n"
        "  %all-reduce.2 = (f32[4,8]{1,0}, f32[8,2]{1,0}) all-reduce(%a, %b), channel_id=3, "
        "replica_groups=mesh['axis_0'=1,'axis_1'=8] {'axis_1'}, use_global_device_ids=true, to_apply=%add\n"
        "}\n"
    )
    entries = inventory.inventory(text)
    assert [(e["kind"], e["operand_shape"], e["group_size"]) for e in entries] == [
        ("all_reduce", [4, 8], 8),
        ("all_reduce", [8, 2], 8),
    ]


@pytest.mark.parametrize(
    "attrs,groups",
    [
        # a 4 x 2 mesh numbered data-major (device = 2·data + tp), as XLA
        # writes it for a step whose mesh axes it has reordered: the pairs
        # are the tp groups, whichever of its own axes XLA names
        (
            "replica_groups=mesh['axis_0'=2,'axis_1'=1,'axis_2'=4], device_ids=([4,2]T(1,0)) {'axis_0'}",
            [[0, 1], [2, 3], [4, 5], [6, 7]],
        ),
        (
            "replica_groups=mesh['axis_0'=4,'axis_1'=2], device_ids=([2,4]T(1,0)) {'axis_0'}",
            [[0, 1, 2, 3], [4, 5, 6, 7]],
        ),
        ("replica_groups=mesh['axis_0'=4,'axis_1'=2,'axis_2'=1] {'axis_0'}", [[0, 2, 4, 6], [1, 3, 5, 7]]),
        ("replica_groups=mesh['a'=2,'b'=2], device_ids=(3,2,1,0) {'b'}", [[3, 2], [1, 0]]),
        ("replica_groups=[4,2]<=[8]", [[0, 1], [2, 3], [4, 5], [6, 7]]),
        ("replica_groups={{0,2},{1,3}}", [[0, 2], [1, 3]]),
        ("replica_groups={}", [list(range(8))]),
    ],
)
def test_replica_groups_in_every_notation(attrs, groups):
    assert inventory.parse_replica_groups(attrs + ", dimensions={0}", 8) == groups


def test_an_unknown_replica_group_notation_is_an_error_not_a_guess():
    with pytest.raises(ValueError, match="replica_groups: a notation this reader does not know"):
        inventory.parse_replica_groups("replica_groups=ring(8), dimensions={0}", 8)


def _hlo_cli(*args, cwd=None):
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "shardbook.hlo", *args],
        capture_output=True,
        text=True,
        timeout=JAX_SUBPROCESS_GUARD_S,
        cwd=cwd,
    )


@pytest.mark.parametrize(
    "content,message",
    [
        ("{bad", "not valid JSON"),
        ('{"fixture": "fsdp_matmul"}', "has no collective inventory"),
        # an entry damaged by hand reached compare's printing and ended in a KeyError traceback
        ('{"inventory": [{"op": "all-reduce", "bytes": -5}]}', "inventory[0] has no kind (str)"),
        (
            '{"inventory": [{"kind": "all_gather", "dtype": "f32", "operand_shape": [8], "result_shape": [64],'
            ' "replica_groups": [[0, 1]]}]}',
            "inventory[0] has no group_size (int)",
        ),
        ('{"inventory": [7]}', "inventory[0] is not an object"),
    ],
)
def test_compare_names_a_damaged_meta_file_before_compiling(tmp_path, content, message):
    folder = tmp_path / "fsdp_matmul"
    folder.mkdir()
    (folder / "meta.json").write_text(content)
    result = _hlo_cli("compare", "fsdp_matmul", "--artifacts", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip().startswith(f"shardbook.hlo: {folder / 'meta.json'}: ")
    assert message in result.stderr and "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_compare_reads_the_repositorys_artifacts_from_any_folder_and_refuses_a_missing_one(tmp_path):
    """From code/, `compare dp_matmul` looked for code/hlo_artifacts, printed "no committed artifact ...;
    run `make artifacts`" (which would have written a stray folder there) and exited 1, as if it differed."""
    from shardbook.hlo import __main__ as hlo_main

    assert hlo_main.ARTIFACTS == str(ROOT / "hlo_artifacts")
    parser = hlo_main._parser()
    for command, option in (("compare", "artifacts"), ("capture", "out"), ("capture-tpu", "out")):
        assert getattr(parser.parse_args([command]), option) == hlo_main.ARTIFACTS
    (tmp_path / "dp_matmul").mkdir()  # a folder without its meta.json
    result = _hlo_cli("compare", "dp_matmul", "--artifacts", str(tmp_path), cwd=ROOT / "code")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert f"--artifacts: no committed artifact of dp_matmul in {tmp_path}" in result.stderr


@pytest.mark.parametrize(
    "args,message",
    [
        (("capture", "nosuch", "--all"), "--all: captures every fixture; drop the names, or drop --all"),
        (("capture", "dp_matmul", "--out", ""), "--out: must name a folder, got ''"),
        (("capture", "dp_matmul", "--out", "/proc/x"), "--out: /proc/x cannot be written (No such file or directory)"),
        (("train", "dp", "--timeout", "-1"), "--timeout: must be a finite number of seconds above 0, got -1.0"),
    ],
)
def test_what_once_ran_regardless_is_refused_in_one_line(args, message):
    # `capture nosuch --all` captured every fixture, `--out ""` wrote into the working folder, and a
    # one-process `train --timeout -1` trained: each is refused before any work
    result = _hlo_cli(*args)
    assert result.returncode == 2 and result.stderr == f"shardbook.hlo: {message}\n", result.stderr


def test_a_temporary_folder_is_removed_however_its_block_ends(tmp_path, monkeypatch):
    """The fresh-clone run of 2026-12-07 left a /tmp/hlo-capture-* folder behind a SIGTERM that landed
    as tempfile.TemporaryDirectory made it, before it had registered its cleanup. capture.temporary_folder
    chooses the name first: an exit raised as the folder appears (here, from inside mkdir, after the
    folder exists) still removes it."""
    import tempfile
    from pathlib import Path

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with capture.temporary_folder("hlo-capture-") as folder:
        assert folder.is_dir() and folder.parent == tmp_path and folder.name.startswith("hlo-capture-")
        (folder / "dump").mkdir()
        (folder / "dump" / "module.txt").write_text("HloModule m")
    assert not folder.exists()
    with pytest.raises(RuntimeError, match="the worker failed"):
        with capture.temporary_folder("hlo-capture-"):
            raise RuntimeError("the worker failed")
    made = Path.mkdir

    def made_then_stopped(self, *args, **kwargs):
        made(self, *args, **kwargs)
        raise SystemExit(143)  # the SIGTERM handler's exit, at the first check after os.mkdir returned

    monkeypatch.setattr(Path, "mkdir", made_then_stopped)
    with pytest.raises(SystemExit):
        with capture.temporary_folder("hlo-capture-"):
            pytest.fail("the block must not run")
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []


def test_a_capture_stopped_by_sigterm_removes_its_temporary_folder(tmp_path):
    """`timeout 8 ... capture --all` left a /tmp/hlo-capture-* folder of 7-11 MB each time: SIGTERM
    ended Python without running the cleanup that Ctrl-C runs."""
    import os
    import signal
    import time

    env = dict(os.environ, TMPDIR=str(tmp_path))
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardbook.hlo", "capture", "dp_matmul", "--out", str(tmp_path / "out")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(tmp_path.glob("hlo-capture-*")):
        time.sleep(0.05)
    assert list(tmp_path.glob("hlo-capture-*")), "the capture never made its temporary folder"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=JAX_SUBPROCESS_GUARD_S)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert not list(tmp_path.glob("hlo-capture-*")) and not (tmp_path / "out" / "dp_matmul").exists()


def test_capture_refuses_an_out_that_is_a_file(tmp_path):
    out = tmp_path / "not-a-folder"
    out.write_text("")
    result = _hlo_cli("capture", "fsdp_matmul", "--out", str(out))
    assert result.returncode == 2
    assert f"--out: {out} is a file" in result.stderr and "Traceback" not in result.stderr


def test_a_failing_worker_is_reported_at_once(monkeypatch):
    """With the coordinator's port already taken, process 0 cannot start the
    coordinator: the run reports it as soon as process 0 exits and stops the
    other worker, which would otherwise wait for the coordinator until its
    heartbeat timeout (the run's 600 s). Judged by who ended each worker, not
    by a wall clock: a loaded machine (CI took 88 s to start two JAX
    processes) says nothing about waiting."""
    import signal
    import socket
    import subprocess

    from shardbook.hlo import multiprocess

    started = []

    class RecordingPopen(subprocess.Popen):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            started.append(self)

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        monkeypatch.setattr(multiprocess, "_free_port", lambda: taken.getsockname()[1])
        monkeypatch.setattr(multiprocess.subprocess, "Popen", RecordingPopen)
        with pytest.raises(
            RuntimeError, match="fsdp_matmul: process 0 exited -?[0-9]+; the other workers were stopped"
        ):
            multiprocess.run("fsdp_matmul", 2, timeout_s=JAX_SUBPROCESS_GUARD_S, log=lambda *_: None)
    process_0, process_1 = started
    assert process_0.returncode not in (0, -signal.SIGKILL)  # it failed by itself (the gRPC abort)
    assert process_1.returncode == -signal.SIGKILL  # still waiting when the run stopped it


def test_a_local_coordinator_listens_on_the_loopback_only():
    from shardbook.hlo.multiprocess import coordinator_bind_address

    assert coordinator_bind_address("127.0.0.1:4567") == "127.0.0.1:4567"
    assert coordinator_bind_address("node-0.cluster:1234") is None


def test_a_new_fixture_is_one_declaration(monkeypatch):
    """A throwaway fixture declared in the registry, and nothing else: the
    package lists it, predicts its collectives, compiles it, finds those
    collectives in its partitioned HLO, and checks its result against its
    reference; what `make artifacts` then captures reads the same declaration."""
    import jax

    from shardbook.hlo import check_name, multiprocess
    from shardbook.programs import fixtures, registry

    throwaway = registry.Fixture(
        "throwaway_dp_tp",
        {"data": 4, "tp": 2},
        {"x": ("data", "tp"), "w": ("tp", None), "out": ("data", None)},
        {"x": (256, 128), "w": (128, 64)},
        "float32",
        "A data × tensor matmul declared only in a test.",
        program="matmul",
        predict=predict_module.all_reduce_partial_sums,
        reference=registry.matmul,
    )
    monkeypatch.setitem(registry.FIXTURES, throwaway.name, throwaway)
    assert check_name(throwaway.name) == throwaway.name
    predicted = predict_module.predict(
        throwaway.name, throwaway.mesh_axes, throwaway.specs, throwaway.shapes, "float32"
    )
    assert [(p["kind"], p["group_size"], p["operand_shape"]) for p in predicted] == [("all_reduce", 2, [64, 64])]
    mesh = fixtures.make_mesh(throwaway.mesh_axes)
    lowered = fixtures.jitted(throwaway, mesh).lower(*fixtures.abstract_args(throwaway, mesh))
    compiled_text = lowered.compile().as_text()
    found = inventory.summary(inventory.inventory(compiled_text))
    assert [(c["kind"], c["group_size"], c["operand_shape"]) for c in found] == [("all_reduce", 2, [64, 64])]
    assert multiprocess.execute_and_check(throwaway.name, jax.devices()[:8]) < 1e-4


def test_registry_refuses_a_duplicate_or_incomplete_declaration():
    from shardbook.programs import registry

    existing = registry.get("dp_matmul")
    with pytest.raises(ValueError, match="already declared"):
        registry.register(existing)
    incomplete = registry.Fixture(
        "incomplete",
        {"data": 8},
        {"x": ("data",)},
        {"x": (8,), "w": (8,)},
        "float32",
        "",
        program="matmul",
        predict=predict_module.no_collective,
        reference=registry.matmul,
    )
    with pytest.raises(ValueError, match="missing"):
        registry.register(incomplete)


def test_inventory_reads_a_collective_whose_operand_it_has_not_seen():
    """A compiled module can define a collective's operand inside a fusion the
    parser does not read: an all-to-all's bytes then come from its result (the
    same size), a reduce-scatter's from n results (this crashed on the small
    model's compiled FSDP step)."""
    text = (
        "HloModule m, num_partitions=8\n"
        "%a = f32[8,16]{1,0} all-to-all(%fusion.3), replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}\n"
        "%b = f32[2,16]{1,0} reduce-scatter(%fusion.4), replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}\n"
    )
    a, b = inventory.inventory(text)
    assert a["kind"] == "all_to_all" and a["bytes_sent_per_rank"] == 8 * 16 * 4 * 7 / 8
    assert b["kind"] == "reduce_scatter" and b["bytes_sent_per_rank"] == 8 * 2 * 16 * 4 * 7 / 8


@pytest.mark.parametrize("module", ["shardbook.programs.fixtures", "shardbook.programs.model", "shardbook.hlo.capture"])
def test_each_module_imports_first(module):
    """The registry imports shardbook.hlo's prediction rules and shardbook.hlo
    reads the registry: each side must import on its own, first, in a fresh
    interpreter (a cycle once broke `import shardbook.programs.fixtures`)."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-1500:]


def test_collective_matmul_sends_each_block_beside_the_dot_that_reads_it():
    """The decomposed all-gather: n−1 permutes and n dots in the partitioned
    HLO, no all-gather, and every permute's operand is also a dot's operand
    (nothing orders the transfer after the multiply)."""
    import re

    hlo = (ARTIFACTS / "collective_matmul" / "after_partitioning.txt").read_text()
    permute_operands = [op.strip() for op in re.findall(r"collective-permute\(([^)]*)\)", hlo)]
    dot_lhs = [ops.split(",")[0].strip() for ops in re.findall(r" dot\(([^)]*)\)", hlo)]
    assert "all-gather" not in hlo
    assert (len(permute_operands), len(dot_lhs)) == (7, 8)
    assert all(op in dot_lhs for op in permute_operands)


@pytest.mark.parametrize(
    "name",
    [
        "context_ring",
        "context_all_gather_kv",
        "context_ulysses",
        "moe_dispatch_auto",
        "moe_dispatch_expert_on_batch",
        "collective_matmul",  # chapter 4: the result equals the plain product
    ],
)
def test_the_fixture_computes_its_single_device_result(name):
    """Each way of splitting the sequence (and each dispatch constraint)
    computes the same thing as one device: every shard against the float32
    numpy reference of its declaration."""
    import jax

    from shardbook.hlo import multiprocess
    from shardbook.programs import registry

    # float32: softmax and matmuls to a few ulps of 0.1-sized values; bfloat16
    # inputs rounded to 8 bits and products summed over 512 in bfloat16
    limit = {"float32": 1e-5, "bfloat16": 2e-2}[registry.get(name).dtype]
    assert multiprocess.execute_and_check(name, jax.devices()[:8]) < limit


def test_the_dispatch_constraint_decides_what_travels():
    """moe_dispatch_no_expert_sharding (MaxText): with expert on E the tokens
    move by all-to-all; with expert left on the rows no token moves and every
    device gathers all eight experts' weights."""
    auto = _meta("moe_dispatch_auto")["inventory"]
    on_batch = _meta("moe_dispatch_expert_on_batch")["inventory"]
    assert [c["kind"] for c in auto] == ["all_to_all", "all_gather"]
    assert [c["kind"] for c in on_batch] == ["all_gather", "all_gather"]
    assert on_batch[-1]["result_shape"] == [8, 512, 1024]  # every expert, whole
    assert sum(c["bytes_sent_per_rank"] for c in on_batch) > 3 * sum(c["bytes_sent_per_rank"] for c in auto)
    assert "all-to-all" not in _text("moe_dispatch_expert_on_batch")


def test_hybrid_mesh_keeps_each_slice_together():
    """create_hybrid_device_mesh on simulated slices: the fsdp groups stay
    inside a slice, the replica groups join device i of each slice (the
    same local rank, the rail a GPU cluster's scale-out network joins)."""
    import jax

    from shardbook.programs import fixtures

    mesh = fixtures.hybrid_mesh({"replica": 2, "fsdp": 4}, {"replica": 2}, jax.devices()[:8])
    assert [[d.id for d in row] for row in mesh.devices] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    inventory = _meta("hsdp_train_step")["inventory"]
    assert [c["replica_groups"] for c in inventory] == [
        [[0, 1, 2, 3], [4, 5, 6, 7]],
        [[0, 1, 2, 3], [4, 5, 6, 7]],
        [[0, 4], [1, 5], [2, 6], [3, 7]],
    ]
    # only a quarter of the gradient crosses between slices
    assert inventory[2]["operand_shape"][0] * inventory[2]["operand_shape"][1] * 4 == 512 * 512
    with pytest.raises(ValueError, match="dcn_axes: axis 'fsdp' of size 4 cannot span 3 slices"):
        fixtures.hybrid_mesh({"replica": 2, "fsdp": 4}, {"fsdp": 3}, jax.devices()[:8])
    with pytest.raises(ValueError, match=r"dcn_axes: \['pod'\] are not axes of the mesh"):
        fixtures.hybrid_mesh({"replica": 2, "fsdp": 4}, {"pod": 2}, jax.devices()[:8])


# --- the multi-process commands' arguments (reliability audit, finding 7) -----

BAD_COORDINATORS = [
    "127.0.0.1:abc",  # segfaulted in JAX's runtime (rc 139) before the check
    "notanaddress",  # IndexError traceback from inside JAX
    "127.0.0.1:99999",
    "127.0.0.1:",
    "127.0.0.1:0",
    ":1234",
    "[::1]:x",
    "::1:1234",
]


def _plain_env(**extra):
    """This process's environment as a plain shell has it: no XLA_FLAGS."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    return {**env, **extra}


def _one_worker(command, coordinator, tmp_path, *flags):
    """`hlo process` or `hlo train-process` as process 0 of 1, with `flags` after the others."""
    name = "fsdp_matmul" if command == "process" else "dp"
    extra = ["--dump", str(tmp_path / "dump"), "--artifacts", str(ARTIFACTS)] if command == "process" else []
    return subprocess.run(
        [sys.executable, "-m", "shardbook.hlo", command, name, "--coordinator", coordinator]
        + ["--num-processes", "1", "--process-id", "0", *flags, *extra],
        capture_output=True,
        text=True,
        timeout=JAX_SUBPROCESS_GUARD_S,
        cwd=ROOT,
    )


@pytest.mark.parametrize("command", ["process", "train-process"])
@pytest.mark.parametrize("coordinator", BAD_COORDINATORS)
def test_a_bad_coordinator_is_one_line_before_jax_starts(command, coordinator, tmp_path):
    result = _one_worker(command, coordinator, tmp_path)
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardbook.hlo: --coordinator: must be HOST:PORT"), lines
    assert repr(coordinator) in lines[0] or repr(coordinator.rpartition(":")[2]) in lines[0]


@pytest.mark.parametrize(
    ("n", "pid", "flag"), [("0", "0", "--num-processes"), ("2", "2", "--process-id"), ("2", "-1", "--process-id")]
)
def test_a_bad_process_count_or_id_is_one_line(n, pid, flag, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "shardbook.hlo", "process", "fsdp_matmul", "--coordinator", "127.0.0.1:1234"]
        + ["--num-processes", n, "--process-id", pid, "--dump", str(tmp_path), "--artifacts", str(ARTIFACTS)],
        capture_output=True,
        text=True,
        timeout=JAX_SUBPROCESS_GUARD_S,
        cwd=ROOT,
    )
    assert result.returncode == 2 and result.stderr.startswith(f"shardbook.hlo: {flag}: must be"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("command", ["process", "train-process"])
@pytest.mark.parametrize("seconds", ["0", "-5"])
def test_a_bad_heartbeat_timeout_is_one_line_before_jax_starts(command, seconds, tmp_path):
    result = _one_worker(command, "127.0.0.1:1234", tmp_path, "--heartbeat-timeout", seconds)
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    lines = result.stderr.strip().splitlines()
    assert lines == [f"shardbook.hlo: --heartbeat-timeout: must be a whole number of seconds >= 1, got {seconds}"]


@pytest.mark.parametrize("command", [["run", "dp_matmul"], ["train", "dp", "--processes", "2"]])
@pytest.mark.parametrize("seconds", ["inf", "nan", "0", "-5"])
def test_a_bad_timeout_is_one_line_before_any_worker_starts(command, seconds):
    """inf reached the workers' heartbeat as int(inf), a traceback; 0 or less
    started them and then stopped them (the CLI reliability review)."""
    result = _hlo_cli(*command, "--timeout", seconds, cwd=ROOT)
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("shardbook.hlo: --timeout: must be a finite number of seconds"), (
        lines
    )


def test_a_bad_process_count_names_the_flag_the_reader_typed():
    """The library's refusal said 'processes:', which is no option of the
    command line; the reader typed --processes (`train`'s: test_model)."""
    result = _hlo_cli("run", "fsdp_matmul", "--processes", "3", cwd=ROOT)
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert result.stderr.strip().splitlines() == ["shardbook.hlo: --processes: must divide 8 (the mesh size), got 3"]


@pytest.mark.parametrize("command", ["process", "train-process"])
def test_a_process_count_that_does_not_divide_the_mesh_is_one_line_before_jax_starts(command, tmp_path):
    """Process 0 of 3 waited for peers that could never make a mesh of 8."""
    result = _one_worker(command, "127.0.0.1:1234", tmp_path, "--num-processes", "3")
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert result.stderr.strip().splitlines() == [
        "shardbook.hlo: --num-processes: must divide 8 (the mesh's devices), got 3"
    ]


def test_the_workers_command_line_default_heartbeat_is_jaxs():
    """A cluster's worker keeps JAX's 100 s unless told otherwise."""
    import inspect

    import jax

    from shardbook.hlo import __main__ as cli
    from shardbook.hlo import multiprocess

    jax_default = inspect.signature(jax.distributed.initialize).parameters["heartbeat_timeout_seconds"].default
    assert multiprocess.HEARTBEAT_TIMEOUT_S == jax_default
    for command in ("process", "train-process"):
        action = next(
            a
            for a in cli._parser()._subparsers._group_actions[0].choices[command]._actions
            if a.dest == "heartbeat_timeout"
        )
        assert action.default == jax_default, command


def test_a_local_run_gives_its_workers_the_runs_own_heartbeat_timeout(monkeypatch, tmp_path):
    """On one machine a starved worker is alive (the CI run where a loaded
    machine let JAX's 100 s heartbeat abort both workers): the workers
    are started with the run's timeout as their heartbeat timeout."""
    from shardbook.hlo import multiprocess

    started = []
    real_popen = subprocess.Popen

    def record(cmd, **kwargs):
        started.append(cmd)
        return real_popen([sys.executable, "-c", "raise SystemExit(3)"], **kwargs)

    monkeypatch.setattr(multiprocess.subprocess, "Popen", record)
    with pytest.raises(RuntimeError, match="process 0 exited 3"):
        multiprocess._run_workers(
            "dp", 437, 2, 1234, tmp_path, command=lambda pid: ["train-process", "dp"], env=lambda pid: {}
        )
    assert len(started) == 2
    for cmd in started:
        assert cmd[cmd.index("--heartbeat-timeout") + 1] == "437", cmd


def test_every_failed_worker_is_reported_with_its_message_not_its_stack(monkeypatch, tmp_path):
    """The CI failure showed only process 0's native stack frames (`@ 0x...`),
    which pushed out the line saying why it aborted and hid the peer that
    failed first: now each failed worker is named, frames left out."""
    from shardbook.hlo import multiprocess

    # Process 0 fails only once the watcher has seen process 1 fail (a fixed
    # sleep raced a loaded CI machine, where both exits fell in one poll).
    released = tmp_path / "process-1-seen-failing"
    scripts = {
        0: "import os, sys, time; deadline = time.monotonic() + 60\n"
        f"while not os.path.exists({str(released)!r}) and time.monotonic() < deadline: time.sleep(0.02)\n"
        "print('F0000 Terminating process because a peer died', file=sys.stderr)\n"
        "[print(f'    @     0x{i:012x}  frame{i}', file=sys.stderr) for i in range(20)]\nraise SystemExit(6)",
        1: "import sys; print('RuntimeError: worker one ran out of something', file=sys.stderr); raise SystemExit(1)",
    }
    real_popen = subprocess.Popen

    class ReleasingPopen(real_popen):
        """Process 1's poll, once it reports the failure, lets process 0 go on."""

        def poll(self):
            code = super().poll()
            if self.pid_in_run == 1 and code not in (None, 0):
                released.touch()
            return code

    def start(cmd, **kw):
        pid = int(cmd[cmd.index("--process-id") + 1])
        proc = ReleasingPopen([sys.executable, "-c", scripts[pid]], **kw)
        proc.pid_in_run = pid
        return proc

    monkeypatch.setattr(multiprocess.subprocess, "Popen", start)
    with pytest.raises(RuntimeError) as caught:
        multiprocess._run_workers(
            "dp", 60, 2, 1234, tmp_path, command=lambda pid: ["train-process", "dp"], env=lambda pid: {}
        )
    message = str(caught.value)
    assert message.startswith("dp: process 1 exited 1;"), message
    assert "worker one ran out of something" in message
    assert "process 0 exited 6" in message and "Terminating process because a peer died" in message
    assert "0x0000" not in message


def test_train_process_refuses_a_one_device_scheme_across_processes_as_train_does():
    # two workers of `single`: process 0 trained alone and reported, process 1 failed inside JAX
    result = _hlo_cli(
        "train-process", "single", "--coordinator", "127.0.0.1:1", "--num-processes", "2", "--process-id", "1"
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert "single: runs on one device; pick a scheme with a mesh to split across processes" in result.stderr


def test_process_refuses_a_mistyped_artifacts_folder_before_jax_starts(tmp_path):
    """`process --artifacts /nonexistent/typo` ran the fixture, skipped the HLO check and exited 0
    ("hlo_matches": null); now the folder is checked before JAX starts and the peers wait."""
    result = _hlo_cli(
        "process", "dp_matmul", "--coordinator", "127.0.0.1:1", "--num-processes", "1", "--process-id", "0",
        "--dump", str(tmp_path / "dump"), "--artifacts", str(tmp_path / "typo"),
    )  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert f"--artifacts: no committed artifact {tmp_path / 'typo' / 'dp_matmul' / 'meta.json'}" in result.stderr
    assert not (tmp_path / "dump").exists()  # refused before anything was prepared


def test_the_readme_cluster_command_sets_its_own_dump_flags(tmp_path):
    """The README's `hlo process` command as a person runs it on one host
    (8 CPU devices here, one process): the worker sets the dump flags from
    --dump, and makes the folder, before JAX starts (audit finding 8)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dump = tmp_path / "not-made-yet" / "hlo-dump"
    result = subprocess.run(
        [sys.executable, "-m", "shardbook.hlo", "process", "moe_dispatch", "--coordinator", f"127.0.0.1:{port}"]
        + ["--num-processes", "1", "--process-id", "0", "--dump", str(dump), "--artifacts", "hlo_artifacts"],
        capture_output=True,
        text=True,
        timeout=JAX_SUBPROCESS_GUARD_S,
        cwd=ROOT,
        env=_plain_env(XLA_FLAGS="--xla_force_host_platform_device_count=8"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["hlo_matches"] is True and report["global_devices"] == 8, report
    assert list(dump.glob("module_*.jit_moe_dispatch.*after_spmd-partitioning*.txt"))


def test_training_across_processes_works_from_a_plain_shell():
    """`hlo train SCHEME --processes 2` as the README gives it, in a shell
    with no XLA_FLAGS: FSDP × TP as two JAX processes of four CPU devices
    each (gloo collectives between them), whose losses match the
    one-process reference; that reference runs in a child process of 8
    devices, not in the caller's one-device process. (One run checks the
    command and the training across processes: each trains the scheme
    twice over, some 40 s of processor time.)"""
    result = subprocess.run(
        [sys.executable, "-m", "shardbook.hlo", "train", "fsdp_tp", "--processes", "2"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env=_plain_env(),
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    # multiprocess.train's line per process: its devices, its losses and whether they agree
    done = re.findall(
        r"^fsdp_tp: process (\d) of 2: (\d+) local / (\d+) global devices, loss ([\d.]+) -> ([\d.]+), .*: (\w+)$",
        result.stdout,
        re.M,
    )
    assert sorted(d[0] for d in done) == ["0", "1"], result.stdout
    assert all((local, total) == ("4", "8") for _, local, total, *_ in done), done
    assert all(float(last) < float(first) / 10 for *_, first, last, _ in done), done
    assert [d[-1] for d in done] == ["agrees", "agrees"], result.stdout


def test_a_scheme_that_fails_to_train_is_named_in_one_line(monkeypatch, tmp_path, capsys):
    """What the build's one-line failure reads (runs.FAILED_LINE): the last
    line on stderr names the scheme; the cause's traceback comes before it."""
    from shardbook.programs import runs

    def broken(*args, **kwargs):
        raise FloatingPointError("loss is nan at step 3")

    monkeypatch.setattr(runs, "run", broken)
    monkeypatch.setattr(runs, "CACHE_DIR", tmp_path)
    assert runs.main(["tp"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == "shardbook.programs.runs: training scheme tp failed: FloatingPointError: loss is nan at step 3"
    assert runs.FAILED_LINE.search(last).group(1) == "tp"


@pytest.mark.parametrize("name", ["dp_matmul", "fsdp_matmul", "tp_matmul"])
def test_the_cpu_backend_computes_float16_dots_in_float32(name):
    """Chapter 2: the partitioned dot is f16, and the CPU backend's later
    passes (the compiled program, which the captures stop before) compute it
    in f32 from converted operands; meta.json's backend note says so."""
    from shardbook.programs import fixtures

    fx = fixtures.get(name)
    mesh = fixtures.mesh_for(fx)
    compiled = fixtures.jitted(fx, mesh).lower(*fixtures.abstract_args(fx, mesh)).compile().as_text()
    assert fx.dtype == "float16" and re.findall(r"= (\w+)\[[^\]]*\][^=]*? dot\(", _text(name)) == ["f16"]
    optimized = re.findall(r"= (\w+)\[[^\]]*\][^=]*? dot\(", compiled)
    assert optimized and set(optimized) == {"f32"}
    assert re.search(r"= f32\[[^\]]*\][^=]*? convert\(", compiled)
    assert any("computed in f32" in note for note in _meta(name)["backend_notes"])
