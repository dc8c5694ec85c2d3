"""The small model's training step (chapter 8) as the TPU compiler builds it.

Each sharded scheme of shardbook.programs.schemes is compiled ahead of time
for the TPU topology of the fixtures' captures (tpu_rules.TOPOLOGY, eight
devices) with libtpu on a CPU host, as shardbook.hlo.tpu_capture does for
the fixtures, and what chapter 8 sets beside its CPU runs is kept in one
committed file, `code/shardbook/data/one_model_tpu.json` (a package data
file, so that a downloaded chapter has it too): per scheme, the collectives
by kind (count, bytes each device sends and group sizes, from
inventory.inventory), the
collective instructions (a combined all-reduce of several tensors is one),
the asynchronous start/done pairs by kind and how many of them have a
matmul scheduled between start and done (shardbook.hlo.schedule), and
memory_analysis(). The
programs themselves (about a megabyte of text each) are not kept.

    make tpu-artifacts       # with the fixtures; or alone, in .venv-tpu:
    PYTHONPATH=code .venv-tpu/bin/python -m shardbook.hlo.tpu_model --out code/shardbook/data/one_model_tpu.json

The file holds no timestamp: a recapture on the same versions rewrites it
byte for byte.
"""

import argparse
import json
import os
import sys
from pathlib import Path

from .tpu_rules import TOPOLOGY

DATA_FILE = Path(__file__).resolve().parents[1] / "data" / "one_model_tpu.json"
TPU_ENV = {"TPU_SKIP_MDS_QUERY": "1", "JAX_PLATFORMS": "cpu"}


def summarize(text, memory):
    """What the chapter reads of one compiled step: collectives by kind
    ({kind: {"count", "bytes_per_rank", "group_sizes", "dtypes",
    "in_backward"}}, dtypes {HLO element type: count}, in_backward the
    count JAX names as part of the backward, transpose(...); a reduce-scatter
    libtpu fused from an all-reduce and a slice is a reduce-scatter, as
    inventory lists it), the number of collective
    instructions, the asynchronous pairs by kind, how many of them have a
    matmul between start and done, and the memory analysis ({name: bytes})."""
    from .inventory import async_pairs, inventory
    from .schedule import in_flight, matmuls_in_flight

    by_kind = {}
    entries = inventory(text)
    for e in entries:
        kind = by_kind.setdefault(
            e["kind"], {"count": 0, "bytes_per_rank": 0, "group_sizes": [], "dtypes": {}, "in_backward": 0}
        )
        kind["count"] += 1
        # the backward's collectives: JAX names their operation transpose(jvp(...))
        kind["in_backward"] += "transpose(" in e.get("op_name", "")
        kind["dtypes"][e["dtype"]] = kind["dtypes"].get(e["dtype"], 0) + 1
        kind["bytes_per_rank"] += int(e["bytes_sent_per_rank"])
        # the distinct group sizes (a permute's: its number of pairs)
        kind["group_sizes"] = sorted({*kind["group_sizes"], e["group_size"]})
    pairs = {}
    for kind, _start, _done in async_pairs(text):
        pairs[kind] = pairs.get(kind, 0) + 1
    # how many of those pairs have a matmul scheduled between their start and their done
    over_matmul = {kind: 0 for kind in pairs}
    for pair, dots in zip(in_flight(text), matmuls_in_flight(text), strict=True):
        over_matmul[pair["kind"]] += bool(dots)
    return {
        "collectives": {k: {**v, "dtypes": dict(sorted(v["dtypes"].items()))} for k, v in sorted(by_kind.items())},
        "collective_instructions": len({e["name"].split("#")[0] for e in entries}),
        "async_pairs": dict(sorted(pairs.items())),
        "async_pairs_over_a_matmul": dict(sorted(over_matmul.items())),
        "memory_analysis": dict(sorted(memory.items())),
    }


def compile_schemes(topology=TOPOLOGY):
    """In a Python with libtpu: compile every sharded scheme's training step
    for `topology`; the document the data file holds."""
    import importlib.metadata

    import jax
    from jax.experimental import topologies

    from ..programs import schemes

    devices = list(topologies.get_topology_desc(platform="tpu", topology_name=topology).devices)
    out = {
        "topology": topology,
        "device_kind": devices[0].device_kind,
        "jax_version": jax.__version__,
        "libtpu_version": importlib.metadata.version("libtpu"),
        "command": "make tpu-artifacts",
        "schemes": {},
    }
    for name, scheme in schemes.SCHEMES.items():
        if not scheme.mesh_axes:
            continue
        jitted, mesh, param_sh, batch_sh = schemes.jitted_step(scheme, devices)
        compiled = jitted.lower(*schemes.abstract_arguments(scheme, mesh, param_sh, batch_sh)).compile()
        stats = compiled.memory_analysis()
        memory = {k: int(getattr(stats, k)) for k in dir(stats) if k.endswith("_in_bytes")}
        out["schemes"][name] = summarize(compiled.as_text(), memory)
    return out


def load(path=DATA_FILE):
    """The committed document (ValueError naming the file when it is missing or not JSON)."""
    from .. import _validate

    return _validate.read_json(
        path, missing="run `make tpu-artifacts`", remedy="restore it or run `make tpu-artifacts`"
    )


def main(argv=None):
    """Compile and write the data file (`--out`), through a temporary file."""
    parser = argparse.ArgumentParser(prog="python -m shardbook.hlo.tpu_model", description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(DATA_FILE))
    parser.add_argument("--topology", default=TOPOLOGY)
    args = parser.parse_args(argv)
    from .tpu_capture import check_libtpu

    try:
        check_libtpu()
    except RuntimeError as exc:
        print(f"shardbook.hlo.tpu_model: {exc}", file=sys.stderr)
        return 2
    for key, value in TPU_ENV.items():
        os.environ.setdefault(key, value)
    document = compile_schemes(args.topology)
    out = Path(args.out)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(json.dumps(document, indent=1, sort_keys=False) + "\n")
    tmp.replace(out)
    print(f"shardbook.hlo.tpu_model: {len(document['schemes'])} schemes for {args.topology} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
