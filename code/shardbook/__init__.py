"""shardbook: the cost model, presets, ledger and JAX fixtures of the book.

`import shardbook` loads only standard-library modules (the cost model can run
in a browser's Python); `shardbook.hlo` and `shardbook.devices` import JAX
when they are used.
"""

from . import collectives, hardware, memory, models, moe, pipeline, roofline, sharding, training, units  # noqa: F401

__version__ = "0.1.0"
