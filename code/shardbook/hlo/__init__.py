"""Real compiler artifacts: capture, inventory, prediction and rendering.

    python -m shardbook.hlo list
    python -m shardbook.hlo capture --all --out hlo_artifacts
    python -m shardbook.hlo compare              # recapture to a temp folder and diff
    python -m shardbook.hlo run fsdp_matmul --processes 2

`import shardbook.hlo` does not import JAX (the fixtures are declared in
shardbook.programs.registry); the capture runs each fixture in
its own process (XLA's dump flags are process-wide).
"""

from ..programs import registry

# The committed fixtures, in declaration order (shardbook.programs.registry).
FIXTURE_NAMES = tuple(registry.FIXTURES)


def check_name(name):
    """`name` if a fixture of that name is declared, else a ValueError naming them."""
    return registry.get(name).name
