"""The mesh explorer: enumeration, memory filter, ranking, and the compiled
programs of its candidates."""

import math

import pytest

from shardbook import explorer, hardware, memory, models


def test_factorizations_respect_the_model():
    meshes = explorer.factorizations(8, "LLaMA-3 8B")
    assert all(math.prod(m) == 8 for m in meshes)
    assert all(ep == 1 for _, _, ep, _ in meshes)  # dense: no expert axis
    moe = explorer.factorizations(8, "Mixtral 8x22B")
    assert (1, 1, 8, 1) in moe and (2, 1, 4, 1) in moe
    assert all(models.get("Mixtral 8x22B").n_kv_heads % tp == 0 for _, tp, _, _ in moe)


def test_ranking_puts_fitting_meshes_first_and_sorts_by_step_time():
    found = explorer.explore("LLaMA-3 70B", "H100", 8, 2**20)
    fits = [c.fits for c in found]
    assert fits == sorted(fits, reverse=True)
    fitting = [c.step_s for c in found if c.fits]
    assert fitting == sorted(fitting)
    # persistent state is the replicated state divided by the shards
    one = explorer.evaluate("LLaMA-3 70B", "H100", (8, 1, 1, 1), 2**20)
    assert one.state_bytes_per_device == pytest.approx(memory.state_bytes_per_device(models.param_count("LLaMA-3 70B"), "fsdp", 8))
    assert one.fits == (one.state_bytes_per_device <= hardware.get("H100").hbm_bytes)


def test_terms_follow_the_mesh():
    fsdp = explorer.evaluate("LLaMA-3 8B", "MI355X", (8, 1, 1, 1), 2**20)
    tp = explorer.evaluate("LLaMA-3 8B", "MI355X", (1, 8, 1, 1), 2**20)
    pp = explorer.evaluate("LLaMA-3 8B", "MI355X", (1, 1, 1, 8), 2**20)
    assert fsdp.tp_s == 0 and fsdp.bubble_s == 0 and fsdp.fsdp_s > 0
    assert tp.fsdp_s == 0 and tp.tp_s > 0
    assert pp.bubble_s > 0 and pp.fsdp_s == 0
    assert explorer.predicted_collectives(fsdp) == [("all_gather", "fsdp"), ("reduce_scatter", "fsdp")]


def test_compiled_candidates_have_the_predicted_groups():
    from shardbook.hlo import explore

    compiled = explore.compiled_collectives(4, 2)
    kinds = {(k, g) for k, g in compiled}
    assert ("all_gather", 4) in kinds and ("all_reduce", 2) in kinds
    # CPU backend: the gradient reduction over fsdp is an all-reduce
    assert ("all_reduce", 4) in kinds and not any(k == "reduce_scatter" for k, _ in compiled)
