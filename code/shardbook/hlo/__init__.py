"""Real compiler artifacts: capture, inventory, prediction and rendering.

    python -m shardbook.hlo list
    python -m shardbook.hlo capture --all --out hlo_artifacts
    python -m shardbook.hlo compare              # recapture to a temp folder and diff
    python -m shardbook.hlo run fsdp_matmul --processes 2
    python -m shardbook.hlo capture-tpu --all    # with libtpu (.venv-tpu): hlo_artifacts/NAME/tpu

`import shardbook.hlo` does not import JAX (the fixtures are declared in
shardbook.programs.registry); the capture runs each fixture in
its own process (XLA's dump flags are process-wide).
"""


def __getattr__(name):
    # FIXTURE_NAMES: the declared fixtures, in declaration order, read from
    # the registry when asked (the registry imports nothing of this package:
    # tests/test_layers.py).
    if name == "FIXTURE_NAMES":
        from ..programs import registry

        return tuple(registry.FIXTURES)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def check_name(name):
    """`name` if a fixture of that name is declared, else a ValueError naming them."""
    from ..programs import registry

    return registry.get(name).name
