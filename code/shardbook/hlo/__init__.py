"""Real compiler artifacts: capture, inventory, prediction and rendering.

    python -m shardbook.hlo list
    python -m shardbook.hlo capture --all --out hlo_artifacts
    python -m shardbook.hlo compare              # recapture to a temp folder and diff
    python -m shardbook.hlo run fsdp_matmul --processes 2

`import shardbook.hlo` does not import JAX; the capture runs each fixture in
its own process (XLA's dump flags are process-wide).
"""




FIXTURE_NAMES = (
    "dp_matmul", "fsdp_matmul", "tp_matmul", "fsdp_ep_linear", "fsdp_train_step",
    "fsdp_manual", "megatron_mlp", "megatron_mlp_sp", "moe_dispatch", "pipeline_stages",
)


def check_name(name):
    if name not in FIXTURE_NAMES:
        raise ValueError(f"fixture: unknown fixture {name!r}; known: {', '.join(FIXTURE_NAMES)}")
    return name
