"""Capture each fixture as the TPU compiler builds it, on a CPU host.

With libtpu installed (jax[tpu]==0.10.2, in .venv-tpu: `make tpu-artifacts`),
JAX compiles ahead of time for a TPU topology that is not there:
`jax.experimental.topologies.get_topology_desc` describes the slice, a Mesh
is built over its devices, and `jit(...).lower(ShapeDtypeStructs).compile()`
runs libtpu's whole pipeline. What is kept, in hlo_artifacts/NAME/tpu/::

    optimized.txt   the optimized TPU program (compiled.as_text()), cleaned as the CPU capture is
    optimized.dot   XLA's DOT of it (dumped after optimizations), sanitized
    optimized.svg   the pruned subgraph, rendered by graphviz
    meta.json       topology, dtype, jax/jaxlib/libtpu versions, memory_analysis(),
                    the collective inventory, the asynchronous pairs, the rule's prediction
                    and the declared TPU differences (shardbook.hlo.tpu_rules), sha256 per file

As for the CPU capture, the parent process uses the standard library only:
a worker process (the same Python, which must have libtpu) compiles with
XLA's dump flags (process-wide), and the folder is replaced only once all
its files are written.
"""

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .. import REPOSITORY_ROOT
from . import check_name, dot
from .capture import CaptureError, _replace, clean_hlo, relativize, stable_module_number, temporary_folder
from .inventory import async_pairs, inventory, summary
from .predict import HLO_DTYPE, predict
from .tpu_rules import EXPECTED_DIFFERENCES, TOPOLOGY, expected_on_tpu, tpu_dtype

FILES = ("optimized.txt", "optimized.dot", "optimized.svg")
SUBFOLDER = "tpu"
DUMP_FLAGS = "--xla_dump_hlo_as_dot"
# what libtpu needs to compile ahead of time on a host without a TPU
TPU_ENV = {"TPU_SKIP_MDS_QUERY": "1", "JAX_PLATFORMS": "cpu"}
INSTALL_HINT = (
    "run `make tpu-artifacts`, which installs jax[tpu]==0.10.2 (libtpu, Google Cloud's terms) "
    "from requirements-tpu.lock into .venv-tpu and captures with it"
)
KNOWN_TOPOLOGIES = "v5e:4x4 to v5e:16x16, v5p:2x2x2 to v5p:16x20x28, v6e:16x16, tpu7x:4x4x4 (two devices per chip)"


def check_libtpu():
    """A RuntimeError naming what is missing and how to get it, unless this
    Python can import libtpu."""
    if importlib.util.find_spec("libtpu") is None:
        raise RuntimeError(f"libtpu is not installed in this Python ({sys.executable}); {INSTALL_HINT}")


def worker_env(dump_dir, names):
    """The environment of the worker: the TPU variables and XLA's DOT dump
    of the fixtures `names` into `dump_dir` (no other XLA flag)."""
    env = dict(os.environ)
    env.update(TPU_ENV)
    modules = "(" + "|".join(names) + ")"
    env["XLA_FLAGS"] = f"--xla_dump_to={dump_dir} {DUMP_FLAGS} --xla_dump_hlo_module_re=^jit_{modules}$"
    return env


def compile_for_tpu(names, topology, out_dir):
    """In the worker: compile fixtures `names` for `topology`, write each
    optimized program to out_dir/NAME.txt and return {name: description}.
    ValueError (one line) for a topology libtpu does not know or a mesh
    that does not tile its devices."""
    import dataclasses
    import importlib.metadata

    import jax
    import jaxlib
    from jax.experimental import topologies

    from ..programs import fixtures

    try:
        topo = topologies.get_topology_desc(platform="tpu", topology_name=topology)
    except Exception as exc:  # JaxRuntimeError, RuntimeError: libtpu's own words, first line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(
            f"--topology: libtpu cannot describe {topology!r} ({first}); names that work: {KNOWN_TOPOLOGIES}"
        ) from None
    devices = list(topo.devices)
    reports = {}
    for name in names:
        fx = fixtures.get(name)
        n = 1
        for size in fx.mesh_axes.values():
            n *= size
        if n != len(devices):
            raise ValueError(
                f"--topology: fixture {name}'s mesh {fx.mesh_axes} has {n} devices and {topology} has "
                f"{len(devices)}; the mesh must tile the topology's devices exactly (v5p:2x2x2 has 8)"
            )
        fx = dataclasses.replace(fx, dtype=tpu_dtype(fx.dtype))
        mesh = fixtures.mesh_for(fx, devices)
        compiled = fixtures.jitted(fx, mesh).lower(*fixtures.abstract_args(fx, mesh)).compile()
        (Path(out_dir) / f"{name}.txt").write_text(compiled.as_text())
        stats = compiled.memory_analysis()
        memory = {k: int(getattr(stats, k)) for k in sorted(dir(stats)) if k.endswith("_in_bytes")}
        reports[name] = {
            "dtype": fx.dtype,
            "device_kind": devices[0].device_kind,
            "num_devices": len(devices),
            "memory_analysis": memory,
            "jax_version": jax.__version__,
            "jaxlib_version": jaxlib.__version__,
            "libtpu_version": importlib.metadata.version("libtpu"),
        }
    return reports


def run_worker(names, topology, work_dir, timeout_s=300):
    """Compile `names` for `topology` in one fresh process of this Python;
    {name: report}. A refused input comes back as a ValueError (one line)."""
    dump_dir = Path(work_dir) / "dump"
    text_dir = Path(work_dir) / "text"
    text_dir.mkdir(parents=True)
    cmd = [sys.executable, "-m", "shardbook.hlo", "_tpu_worker", "--topology", topology, "--texts", str(text_dir)]
    result = subprocess.run(
        [*cmd, *names],
        env=worker_env(dump_dir, names),
        capture_output=True,
        text=True,
        timeout=timeout_s * len(names),
        cwd=REPOSITORY_ROOT,
    )
    last = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    report = json.loads(last) if last.startswith("{") else None
    if result.returncode == 2 and report and "error" in report:
        raise ValueError(report["error"])
    if result.returncode or report is None:
        raise CaptureError(f"fixture {', '.join(names)}: the TPU compile worker failed:\n{result.stderr[-3000:]}")
    return report, dump_dir, text_dir


def find_dot(dump_dir, name):
    """The DOT of fixture `name`'s optimized program in `dump_dir`."""
    found = sorted(Path(dump_dir).glob(f"module_*.jit_{name}.*after_optimizations.dot"))
    if len(found) != 1:
        raise CaptureError(f"fixture {name}: expected one after_optimizations.dot in the dump, found {len(found)}")
    return found[0]


def capture_many(names, out_root, topology=TOPOLOGY, log=print):
    """Capture fixtures `names` for `topology` into out_root/NAME/tpu (each
    replaced only once its files are all written); {name: meta}."""
    names = [check_name(n) for n in names]
    check_libtpu()
    out_root = Path(out_root)
    out_root.mkdir(parents=True, exist_ok=True)
    dot.dot_binary()
    with temporary_folder("hlo-tpu-capture-") as tmp:
        reports, dump_dir, text_dir = run_worker(names, topology, tmp)
        metas = {}
        for name in names:
            metas[name] = _write(name, topology, reports[name], dump_dir, text_dir, out_root)
            log(f"captured {name} for {topology}: {len(metas[name]['inventory'])} collective(s)")
    return metas


def _write(name, topology, report, dump_dir, text_dir, out_root):
    folder = out_root / name
    folder.mkdir(exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{SUBFOLDER}-", dir=folder))
    staging.chmod(0o755)
    try:
        text = clean_hlo((text_dir / f"{name}.txt").read_text())
        (staging / "optimized.txt").write_text(text)
        dot_path = find_dot(dump_dir, name)
        dot_text = relativize(dot.sanitize(stable_module_number(dot_path.read_text(), dot_path.name)))
        (staging / "optimized.dot").write_text(dot_text)
        title = f"<b>{name}</b>: optimized for TPU {topology} (device-local)"
        (staging / "optimized.svg").write_text(dot.render_svg(dot.prune(dot_text, title)))
        meta = _meta(name, topology, report, text)
        meta["sha256"] = {f: hashlib.sha256((staging / f).read_bytes()).hexdigest() for f in FILES}
        (staging / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
        _replace(staging, folder / SUBFOLDER)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return meta


def _meta(name, topology, report, text):
    from ..programs import registry

    fx = registry.get(name)
    specs = {k: tuple(tuple(e) if isinstance(e, list) else e for e in v) for k, v in fx.specs.items()}
    predicted = predict(name, fx.mesh_axes, specs, fx.shapes, report["dtype"])
    return {
        "fixture": name,
        "topology": topology,
        "device_kind": report["device_kind"],
        "num_devices": report["num_devices"],
        "mesh": fx.mesh_axes,
        "dtype": report["dtype"],
        "cpu_dtype": fx.dtype,
        "hlo_dtype": HLO_DTYPE[report["dtype"]],
        "jax_version": report["jax_version"],
        "jaxlib_version": report["jaxlib_version"],
        "libtpu_version": report["libtpu_version"],
        "platform": "tpu (compiled ahead of time on a CPU host; not run)",
        "environment": dict(TPU_ENV),
        "xla_flags": worker_env("<temporary folder>", [name])["XLA_FLAGS"],
        "command": f"python -m shardbook.hlo capture-tpu {name} --topology {topology}",
        "files_pruned": "HLO text: source-location tables and stack_frame_id removed; DOT: node ids renumbered, "
        "tooltips and stylesheet removed; SVG: tuple, get-tuple-element and copy nodes contracted",
        "memory_analysis": report["memory_analysis"],
        "inventory": summary(inventory(text)),
        "async_pairs": [list(p) for p in async_pairs(text)],
        "predicted": predicted,
        "expected_differences": [
            {"rewrite": d.rewrite, "args": list(d.args), "reason": d.reason} for d in EXPECTED_DIFFERENCES.get(name, ())
        ],
        "expected_on_tpu": expected_on_tpu(name, predicted, fx.mesh_axes),
    }


def load_meta(folder):
    """A fixture's TPU meta.json (folder is hlo_artifacts/NAME/tpu)."""
    from .. import _validate

    path = Path(folder) / "meta.json"
    return _validate.read_json(path, missing=INSTALL_HINT, remedy=f"restore it or {INSTALL_HINT}")
