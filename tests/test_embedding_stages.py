"""Where a pipeline keeps the embedding and the output layer, and which device
holds the most.

Megatron-LM puts the input embedding on the first pipeline stage and the
output layer on the last; with tied embeddings and more than one stage it
keeps a copy of the word embedding on both and all-reduces its gradient
between them (narayanan2021megatron; megatron-lm). Llama 3 takes one layer
from the first and last stages for balance (dubey2024llama3 §3.3.2).
DeepSeek-V3's DualPipe puts the shallowest layers with the embedding and the
deepest with the output head on the same rank (deepseek2024v3 §3.2.3).
The small model below is counted by hand: D = 64, F = 256, 4 heads of 16,
4 layers, a vocabulary of 1,000.
"""

import inspect

import pytest

from shardbook import memory, models, pipeline, planner
from shardbook.planner import layout, memory_plan

D, F, V, LAYERS = 64, 256, 1000, 4
LAYER = 4 * D * D + 2 * D + 3 * D * F  # Q, K, V, O; two RMSNorms; gate, up, down
TABLE = V * D
FINAL_NORM = D
MEGATRON = memory.STATE_RECIPES["megatron"]  # 2 + 4 + 4 + 8 bytes per parameter


def _tiny(tied, vocab=V):
    return models.Model(
        "tiny",
        "narayanan2021megatron",
        D,
        F,
        LAYERS,
        4,
        4,
        16,
        vocab,
        tied_embeddings=tied,
    )


def _layout(model, mesh, global_tokens, **options):
    """A planner Layout with evaluate's defaults for what `options` leaves out."""
    takes = inspect.signature(layout.layout).parameters  # evaluate's own options (stack) stay behind
    defaults = {
        name: p.default
        for name, p in inspect.signature(planner.evaluate).parameters.items()
        if p.kind is p.KEYWORD_ONLY and name in takes
    }
    defaults.update(options)
    defaults.pop("recompute")
    return layout.layout(model, "H100", mesh, global_tokens, recompute=None, **defaults)


def _stages(tied, schedule="1f1b", vocab=V, policy="full"):
    mesh = {"pp": 2, "tp": 2}
    lay = _layout(_tiny(tied, vocab), mesh, 128 * 8, seq_len=128, state_recipe="megatron", schedule=schedule)
    return lay, memory_plan.device_breakdowns(lay, policy)


def test_models_split_the_ends_from_the_layers():
    for tied in (False, True):
        m = _tiny(tied)
        first, last = models.end_param_counts(m)
        assert first == TABLE
        assert last == (0 if tied else TABLE) + FINAL_NORM
        assert models.param_count(m) == first + last + LAYERS * LAYER


@pytest.mark.parametrize("tied", [False, True])
def test_first_stage_holds_the_embedding_and_last_the_output_layer(tied):
    # pp 2, tp 2: two layers a stage; the embedding (vocabulary-parallel, /tp) on stage 0, the
    # output projection (its own matrix, or with tied embeddings Megatron's copy of the table)
    # and the final norm on stage 1
    _, stages = _stages(tied)
    assert set(stages) == {"stage 0", "stage 1"}
    first = (2 * LAYER + TABLE) / 2
    last = (2 * LAYER + TABLE + FINAL_NORM) / 2
    for label, params in (("stage 0", first), ("stage 1", last)):
        assert stages[label]["weights"] == pytest.approx(MEGATRON.weight_bytes * params, rel=1e-12)
        assert stages[label]["gradients"] == pytest.approx(MEGATRON.gradient_bytes * params, rel=1e-12)
        assert stages[label]["master_weights"] == pytest.approx(MEGATRON.master_bytes * params, rel=1e-12)
        assert stages[label]["optimizer_state"] == pytest.approx(MEGATRON.optimizer_bytes * params, rel=1e-12)
    assert stages["stage 0"]["logits"] == 0 and stages["stage 1"]["logits"] > 0


def test_tied_embeddings_keep_a_copy_on_both_ends():
    # Megatron-LM with tied embeddings and pp > 1: the table on the first stage and a copy on the
    # last, so the pipeline holds it twice; with pp = 1 once
    tied, _ = _stages(True)
    untied, _ = _stages(False)
    assert tied.embedding_local == untied.embedding_local == TABLE / 2
    assert tied.head_local == untied.head_local == (TABLE + FINAL_NORM) / 2
    one = _layout(_tiny(True), {"tp": 2}, 128 * 8, seq_len=128)
    assert one.head_local == FINAL_NORM / 2
    held = sum(tied.dense_layer_local * sum(row) for row in tied.chunk_layers) + tied.embedding_local + tied.head_local
    assert held * 2 == pytest.approx(models.param_count(_tiny(True)) + TABLE, rel=1e-12)


@pytest.mark.parametrize("tied", [False, True])
def test_dualpipe_device_zero_holds_both_ends(tied):
    # deepseek2024v3 §3.2.3: device 0 runs stages 0 and p−1, so it holds the embedding and the
    # output layer, each stage's weights and gradients once (two stages), the master weights and
    # optimizer state of half the pair's parameters (memory_plan._state), and the logits
    lay, devices = _stages(tied, schedule="dualpipe")
    assert set(devices) == {"device 0 (stages 0 and 1)"}
    both = 4 * LAYER + TABLE + TABLE + FINAL_NORM  # tied: the table and its copy
    device = devices["device 0 (stages 0 and 1)"]
    assert device["weights"] == pytest.approx(MEGATRON.weight_bytes * both / 2, rel=1e-12)
    assert device["gradients"] == pytest.approx(MEGATRON.gradient_bytes * both / 2, rel=1e-12)
    assert device["master_weights"] == pytest.approx(MEGATRON.master_bytes * both / 4, rel=1e-12)
    assert device["optimizer_state"] == pytest.approx(MEGATRON.optimizer_bytes * both / 4, rel=1e-12)
    assert device["logits"] > 0
    # on four stages device 1 runs stages 1 and 2: layers only
    lay = _layout(
        models.with_changes(_tiny(tied), n_layers=8),
        {"pp": 4},
        128 * 16,
        seq_len=128,
        state_recipe="megatron",
        schedule="dualpipe",
    )
    out = memory_plan.devices(lay)
    assert list(out) == ["device 0 (stages 0 and 3)", "device 1 (stages 1 and 2)"]
    (zero, one) = out.values()
    assert zero[0] == pytest.approx(4 * LAYER + TABLE + TABLE + FINAL_NORM, rel=1e-12)
    assert one[0] == pytest.approx(4 * LAYER, rel=1e-12)
    assert zero[5] and not one[5]  # the logits


def test_one_stage_is_unchanged():
    # pp = 1: every parameter on the one device, tied counted once
    for tied in (False, True):
        lay = _layout(_tiny(tied), {"tp": 2}, 128 * 8, seq_len=128, state_recipe="megatron")
        (label, (dense, expert, layers, copies, _, logits)), *rest = memory_plan.devices(lay).items()
        assert not rest and copies == 1 and logits and layers == LAYERS and expert == 0
        assert dense == pytest.approx(models.param_count(_tiny(tied)) / 2, rel=1e-12)
        breakdown = memory_plan.device_breakdowns(lay, "full")[label]
        state = memory.state_breakdown_bytes(models.param_count(_tiny(tied)) / 2, "megatron")
        for key, value in state.items():
            assert breakdown[key] == pytest.approx(value, rel=1e-12)


def test_the_peak_device_is_the_stage_that_holds_the_most():
    # 1F1B on 2 stages: stage 0 keeps 2 microbatches in flight, stage 1 one and the logits (6
    # bytes a logit, Megatron's FP32 copy, /tp). Keeping every activation with a vocabulary of
    # 200, stage 0 holds the most; with full recomputation (a layer keeps its input) and a
    # vocabulary of 200,000 the last stage's logits and output layer outweigh it
    lay, small = _stages(False, vocab=200, policy="none")
    label, breakdown = memory_plan.peak_device(lay, "none")
    assert label == "stage 0" and breakdown == small["stage 0"] and breakdown["logits"] == 0
    assert small["stage 0"]["activations"] == pytest.approx(2 * small["stage 1"]["activations"], rel=1e-12)
    assert memory_plan.device_memory(lay, "none") == (breakdown, "none", True, "stage 0")
    lay, large = _stages(False, vocab=200_000)
    label, breakdown = memory_plan.peak_device(lay, "full")
    assert label == "stage 1" and breakdown["logits"] > 0
    assert breakdown["headroom"] == min(b["headroom"] for b in large.values())
    assert memory_plan.device_memory(lay, "full") == (breakdown, "full", True, "stage 1")


def test_uneven_pipelines_take_the_layers_from_the_ends():
    # dubey2024llama3 §3.3.2: 126 layers on 16 stages, one layer fewer on the first and the last
    lay = _layout(
        "LLaMA-3 405B",
        {"tp": 8, "pp": 16, "fsdp": 128},
        16 * 2**20,
        seq_len=8192,
        uneven_pipeline=True,
        schedule="interleaved",
        n_virtual=8,
    )
    layers = [sum(row) for row in lay.chunk_layers]
    assert layers[0] == layers[-1] == 7 and set(layers[1:-1]) == {8}
    devices = memory_plan.devices(lay)
    assert devices["stage 0"][0] == pytest.approx(7 * lay.dense_layer_local + lay.embedding_local, rel=1e-12)
    assert devices["stage 15"][0] == pytest.approx(7 * lay.dense_layer_local + lay.head_local, rel=1e-12)
    assert devices["stage 1"][0] == pytest.approx(8 * lay.dense_layer_local, rel=1e-12)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "zero_bubble", "interleaved"])
def test_stage_activations_follow_the_schedule(schedule):
    p, m, v = 4, 8, (2 if schedule == "interleaved" else 1)
    chunks = [[2] * v for _ in range(p)]
    held = pipeline.stage_activation_layer_microbatches(schedule, p, m, v, chunks)
    assert held[0] == pytest.approx(pipeline.schedule_activation_microbatches(schedule, p, m, v) * 2 * v)
    if schedule == "interleaved":
        # the closed form for equal chunks is the simulation's issue order, stage by stage
        assert held == pytest.approx(pipeline._interleaved_stage_peaks(p, m, v, chunks))
    elif schedule == "gpipe":
        assert held == [16.0] * 4
    elif schedule == "1f1b":
        assert held == [8.0, 6.0, 4.0, 2.0]  # min(p − s, m) microbatches of 2 layers
    else:
        # ZB-H1 defers the later stages' weight gradients: every stage holds the first stage's p
        assert held == [8.0] * 4
    with pytest.raises(ValueError, match="chunk_layers"):
        pipeline.stage_activation_layer_microbatches(schedule, p, m, v, chunks[:-1])
    with pytest.raises(ValueError, match="schedule"):
        pipeline.stage_activation_layer_microbatches("dualpipe", p, m, 1, [[2]] * p)


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "zero_bubble"])
@pytest.mark.parametrize("p", [2, 3, 4, 8])
@pytest.mark.parametrize("m", [1, 2, 3, 4, 6, 8, 16])
def test_the_planners_stage_activations_are_what_the_simulated_schedule_holds(schedule, p, m):
    # the closed form the planner prices memory with, against chapter 6's simulated timeline
    # (pipeline.schedule, held_activations: each microbatch held from its forward to its last
    # backward or weight gradient), stage by stage, in microbatches of one layer
    closed = pipeline.stage_activation_layer_microbatches(schedule, p, m, 1, [[1]] * p)
    assert closed == pipeline.held_activations(pipeline.schedule(schedule, p, m))


def test_published_pipelines_report_the_device_that_holds_the_most():
    # deepseek2024v3 §3.2.3: DualPipe's rank 0 holds the shallowest layers with the embedding and
    # the deepest with the output head, and the loss's logits; Narayanan et al.'s 1T GPT (SC21
    # Table 1, tied embeddings, 2 layers a stage) holds the most on its first stage: the table and
    # 8 microbatches in flight (narayanan2021megatron)
    from shardbook import measured

    deepseek = planner.bound_for_run(measured.run_named("DeepSeek-V3, 2,048 H800"))
    assert deepseek.memory_device == "device 0 (stages 0 and 15)"
    assert deepseek.memory_breakdown["logits"] > 0
    gpt = planner.bound_for_run(measured.run_named("Megatron GPT 1008.0B, 3,072 A100"))
    assert gpt.memory_device == "stage 0" and gpt.memory_breakdown["logits"] == 0
    single = planner.bound_for_run(measured.run_named("Megatron GPT 1.7B, 32 A100"))
    assert single.memory_device == "the device"


def test_a_pipeline_nearly_as_deep_as_the_model_takes_layers_inward():
    # 61 layers on 48 stages: the first and last stages cannot give up the 35 missing layers, so
    # the stages next in give them up too, each keeping one layer; the deepest keep ceil(61/48)
    chunks = layout.stage_chunk_layers(61, 48, 1, True)
    layers = [sum(row) for row in chunks]
    assert sum(layers) == 61 and max(layers) == 2 and min(layers) == 1
    assert layers[0] == layers[-1] == 1
    assert layout.stage_chunk_layers(61, 16, 1, True) == pipeline.uneven_chunk_layers(61, 16, 1)
    cand = planner.evaluate("DeepSeek-V3", "H800", {"pp": 48}, 48 * 4096 * 96, recompute="full", uneven_pipeline=True)
    assert cand.memory_device.startswith("stage ")
    # with virtual stages the chunks cannot shrink that far: the mesh is unusable, with the reason
    with pytest.raises(memory_plan.Unusable, match="n_layers"):
        layout.stage_chunk_layers(7, 6, 2, True)
