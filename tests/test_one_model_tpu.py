"""Chapter 8's small model compiled for a TPU slice: the committed summary
(code/shardbook/data/one_model_tpu.json, written by `make tpu-artifacts`
through shardbook.hlo.tpu_model) holds what the chapter says of it. The
chapter checks the same claims against its CPU runs; here they are checked
against the cost model's terms, which the CPU programs match to the byte."""

import json
import re
import subprocess
import sys

import pytest

from conftest import ROOT
from shardbook.hlo import tpu_model, tpu_rules
from shardbook.programs import predicted, schemes

DOC = tpu_model.load()
STEPS = DOC["schemes"]
SHARDED = [n for n, s in schemes.SCHEMES.items() if s.mesh_axes]


def _tpu(name):
    return {k: v["bytes_per_rank"] for k, v in STEPS[name]["collectives"].items()}


def _predicted(name):
    kinds = {}
    for term in predicted.collective_terms(schemes.SCHEMES[name]):
        kinds[term.kind] = kinds.get(term.kind, 0) + term.bytes_per_rank
    return kinds


def test_every_sharded_scheme_is_captured_with_its_provenance():
    assert list(STEPS) == SHARDED
    assert DOC["topology"] == tpu_rules.TOPOLOGY
    lock = (ROOT / "requirements-tpu.lock").read_text()
    assert re.search(rf"^libtpu=={re.escape(DOC['libtpu_version'])} ", lock, re.M), DOC["libtpu_version"]
    assert re.search(rf"^jax\[cpu\]=={re.escape(DOC['jax_version'])}$", (ROOT / "requirements.txt").read_text(), re.M)
    for name, step in STEPS.items():
        memory = step["memory_analysis"]
        assert memory["argument_size_in_bytes"] > 0 and memory["temp_size_in_bytes"] > 0, name


def test_only_the_collective_permutes_are_asynchronous_and_every_one_is():
    with_permutes = []
    for name, step in STEPS.items():
        permutes = step["collectives"].get("collective_permute", {}).get("count", 0)
        assert step["async_pairs"] == ({"collective_permute": permutes} if permutes else {}), name
        if permutes:
            with_permutes.append(name)
    assert with_permutes == ["fsdp_tp", "cp", "pp"]


def test_dp_tp_and_pp_send_the_cpu_programs_bytes_and_the_others_do_not():
    same = [n for n in SHARDED if _tpu(n) == _predicted(n)]
    assert same == ["dp", "tp", "pp"], same
    assert STEPS["dp"]["collective_instructions"] == 1  # every gradient in one combined all-reduce


def test_context_parallel_gradients_are_reduced_in_one_stage():
    assert _tpu("cp")["all_reduce"] == _tpu("dp")["all_reduce"] < _predicted("cp")["all_reduce"]
    assert _tpu("cp")["collective_permute"] < _predicted("cp")["collective_permute"]
    # once over all eight devices: every all-reduce of the step has one group of 8
    assert STEPS["cp"]["collectives"]["all_reduce"]["group_sizes"] == [8]


def test_the_scheduler_puts_a_matmul_inside_some_permutes_and_not_others():
    """What the TPU programs run while a send is in flight (chapter 8):
    under cp and pp part of the pairs have a matmul between start and done,
    part have none; fsdp_tp's one pair has none."""
    over = {n: STEPS[n]["async_pairs_over_a_matmul"] for n in SHARDED}
    assert over["fsdp_tp"] == {"collective_permute": 0}
    for name in ("cp", "pp"):
        pairs = STEPS[name]["async_pairs"]["collective_permute"]
        assert 0 < over[name]["collective_permute"] < pairs, name
    assert all(over[n] == {} for n in SHARDED if n not in ("fsdp_tp", "cp", "pp"))


def test_the_expert_step_has_no_all_to_all_on_the_tpu():
    assert "all_to_all" in _predicted("ep") and "all_to_all" not in _tpu("ep")
    assert sum(_tpu("ep").values()) > sum(_predicted("ep").values())


def test_the_fsdp_and_sequence_parallel_schemes_gather_fewer_bytes():
    fewer = [
        n for n in SHARDED if "all_gather" in _tpu(n) and _tpu(n)["all_gather"] < _predicted(n).get("all_gather", 0)
    ]
    assert fewer == ["fsdp", "tp_sp", "fsdp_tp"], fewer


def test_summarize_counts_a_committed_tpu_program_as_its_capture_does():
    folder = ROOT / "hlo_artifacts" / "collective_matmul" / "tpu"
    meta = json.loads((folder / "meta.json").read_text())
    summary = tpu_model.summarize((folder / "optimized.txt").read_text(), {"temp_size_in_bytes": 1})
    counts = {}
    for entry in meta["inventory"]:
        counts[entry["kind"]] = counts.get(entry["kind"], 0) + 1
    assert {k: v["count"] for k, v in summary["collectives"].items()} == counts
    assert sum(summary["async_pairs"].values()) == len(meta["async_pairs"])
    assert summary["async_pairs_over_a_matmul"] == {"collective_permute": 7}  # each hop over one dot
    assert summary["collectives"]["collective_permute"]["group_sizes"] == [8]
    assert summary["memory_analysis"] == {"temp_size_in_bytes": 1}


def test_without_libtpu_the_command_says_how_to_get_it(tmp_path):
    import importlib.util

    if importlib.util.find_spec("libtpu") is not None:
        pytest.skip("libtpu is installed in this Python")
    done = subprocess.run(
        [sys.executable, "-m", "shardbook.hlo.tpu_model", "--out", str(tmp_path / "x.json")],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "libtpu is not installed" in lines[0] and "make tpu-artifacts" in lines[0], lines
    assert not (tmp_path / "x.json").exists()
