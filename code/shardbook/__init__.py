"""shardbook: the cost model, presets, ledger and JAX fixtures of the book.

The package has three layers (DESIGN.md, "Layers"), named in LAYERS below:

- the cost model and presets: standard library only, so that the same code
  runs in a reader's browser (Pyodide) on the live pages;
- JAX programs and the tools that read what XLA makes of them:
  shardbook.programs (the fixtures' registry and programs, the small
  model), shardbook.hlo (capture, inventory, prediction, DOT, the
  multi-process run) and shardbook.devices; they import JAX when used;
- the book's machinery: the ledger of numbers that chapters call (top
  level, since the live pages run it too) and shardbook.book (the committed
  numbers and the build check, the prose lint, figures, the Sphinx
  extension, the site server, the benchmark, the PDF, the Jupyter view).

`import shardbook` loads only standard-library modules.
"""

from pathlib import Path

from . import collectives, hardware, memory, models, moe, pipeline, roofline, sharding, training, units  # noqa: F401

__version__ = "0.1.0"

# The checkout this package is installed from (editable): chapters/, tests/,
# hlo_artifacts/, node_modules/ and _build/ are found from here.
REPOSITORY_ROOT = Path(__file__).resolve().parents[2]

# Every module of the package, by layer. A new module is added to one of
# these; tests check that each file is in exactly one layer and that the
# cost-model layer (and the ledger, which the live pages also run) imports
# nothing outside the standard library.
LAYERS = {
    "cost_model": (
        "_validate",
        "_cli",
        "units",
        "hardware",
        "accelerator_file",
        "models",
        "hf_config",
        "measured",
        "sharding",
        "collectives",
        "fabric",
        "memory",
        "roofline",
        "matmul_efficiency",
        "pipeline",
        "moe",
        "training",
        "attention",
        "context",
        "overlap",
        "maxtext",
        "explorer",
        "planner",
        "validation",
        "transfer",
    ),
    "programs": ("programs", "hlo", "devices"),
    "book": ("ledger", "book"),
}
# What the live pages load into the browser: the cost model and the ledger
# (whose value formatting and evaluate() the live mode calls).
BROWSER_MODULES = ("__init__", *LAYERS["cost_model"], "ledger")
