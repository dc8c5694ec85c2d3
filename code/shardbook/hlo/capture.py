"""Capture one fixture's HLO before and after SPMD partitioning.

The parent process (standard library only) starts a worker process with
XLA's dump flags, picks that fixture's module out of the dump, removes
absolute paths and addresses, prunes and renders the DOT, writes meta.json,
and only then replaces the fixture's folder: a failed capture leaves the
committed artifacts untouched.
"""

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .. import REPOSITORY_ROOT, _validate, sharding
from ..devices import xla_flags_with_device_count
from . import FIXTURE_NAMES, check_name, dot
from .inventory import inventory, summary
from .predict import HLO_DTYPE, predict

FILES = (
    "before_partitioning.txt",
    "after_partitioning.txt",
    "before_partitioning.dot",
    "after_partitioning.dot",
    "after_partitioning.svg",
)
DUMP_FLAGS = "--xla_dump_hlo_as_text --xla_dump_hlo_as_dot --xla_dump_hlo_pass_re=spmd-partitioning"


class CaptureError(RuntimeError):
    """A fixture could not be compiled and captured (the worker's error is in the message)."""


def relativize(text):
    """Drop machine-specific path prefixes: the repository root and
    everything up to site-packages/."""
    text = text.replace(str(REPOSITORY_ROOT) + "/", "")
    return re.sub(r"/[^\s\"':]*?/site-packages/", "site-packages/", text)


def worker_env(dump_dir, name, n_devices=8):
    """The environment of a process that compiles fixture `name` (or each
    of a list of fixtures) on `n_devices` CPU devices and dumps its HLO into
    `dump_dir`."""
    env = dict(os.environ)
    # one order, the device count first, so that meta.json records the same string on every capture
    env["XLA_FLAGS"] = dump_flags(dump_dir, name, xla_flags_with_device_count("", n_devices))
    env.setdefault("JAX_PLATFORMS", "cpu")
    return env


def dump_flags(dump_dir, name, flags=""):
    """XLA_FLAGS `flags` with the dump flags of fixture `name` (or each of a
    list of fixtures) into `dump_dir` in place of any dump flags it had;
    the other flags (the device count, say) are kept, in their order."""
    names = [name] if isinstance(name, str) else list(name)
    modules = names[0] if len(names) == 1 else "(" + "|".join(names) + ")"
    kept = [f for f in (flags or "").split() if not f.startswith("--xla_dump_")]
    return " ".join(
        [*kept, f"--xla_dump_to={dump_dir}", *DUMP_FLAGS.split(), f"--xla_dump_hlo_module_re=^jit_{modules}$"]
    )


def find_dumps(dump_dir, name):
    """The dump files of fixture `name` in `dump_dir`: ({artifact name: path},
    and the CPU backend's final HLO or None); CaptureError when the dump is missing or ambiguous."""
    dump = Path(dump_dir)
    modules = sorted({p.name.split(".")[0] for p in dump.glob(f"module_*.jit_{name}.*")})
    if len(modules) != 1:
        found = ", ".join(sorted(p.name for p in dump.iterdir())[:10]) or "nothing"
        raise CaptureError(f"fixture {name}: expected one HLO module named jit_{name}, found {len(modules)} ({found})")
    prefix = f"{modules[0]}.jit_{name}"
    picks = {}
    for suffix in ("txt", "dot"):
        before = dump / f"{prefix}.before_optimizations.{suffix}"
        after = sorted(dump.glob(f"{prefix}.*after_spmd-partitioning*.{suffix}"))
        if not before.exists() or len(after) != 1:
            raise CaptureError(
                f"fixture {name}: missing {suffix} dumps (before: {before.exists()}, after-partitioning: {len(after)})"
            )
        picks[f"before_partitioning.{suffix}"] = before
        picks[f"after_partitioning.{suffix}"] = after[0]
    cpu_after = dump / f"{prefix}.cpu_after_optimizations.txt"
    return picks, cpu_after if cpu_after.exists() else None


def _strip_debug_tables(hlo_text):
    """Remove the FileNames/FunctionNames/FileLocations/StackFrames tables:
    they hold paths and line numbers of the Python that traced the program."""
    return re.sub(r"\nFileNames\n.*?\n\n(?=ENTRY|%|HloModule|\S+ \{|[\w.]+ \()", "\n\n", hlo_text, flags=re.S)


def clean_hlo(text):
    """HLO text without what differs from machine to machine: source-location
    tables, stack frame ids and path prefixes."""
    text = _strip_debug_tables(text)
    text = re.sub(r",? ?stack_frame_id=\d+", "", text)
    return relativize(text)


def stable_module_number(text, dump_name):
    """`text` from the dump file `dump_name` (module_NNNN.jit_NAME....) with
    that module's number written as module_0000: XLA numbers the modules in
    the order one process compiles them, so the same fixture would otherwise
    carry another number when `make artifacts` compiles it after others."""
    module = dump_name.split(".")[0]
    if not re.fullmatch(r"module_\d+", module):
        raise CaptureError(f"{dump_name}: not an XLA dump file name (module_NNNN.jit_NAME...)")
    return re.sub(rf"\b{module}\.", "module_0000.", text)


def _backend_notes(dtype, after_text, cpu_after):
    notes = []
    hlo_dtype = HLO_DTYPE[dtype]
    if cpu_after is not None and hlo_dtype in ("f16", "bf16"):
        opt = cpu_after.read_text()
        after_dots = re.findall(r"= (\w+)\[[^\]]*\][^=]*? dot\(", after_text)
        opt_dots = re.findall(r"= (\w+)\[[^\]]*\][^=]*? dot\(", opt)
        if after_dots and opt_dots and hlo_dtype in after_dots and "f32" in opt_dots and hlo_dtype not in opt_dots:
            notes.append(
                f"CPU backend: the partitioned dot is {hlo_dtype}; after the CPU backend's later passes "
                f"it is computed in f32 (operands converted), which a GPU pipeline does not do."
            )
    if re.search(r"dynamic-slice\(%all-reduce", after_text):
        notes.append(
            "The SPMD partitioner (the same on every backend) reduces the gradient with an all-reduce whose "
            "result each device then slices (dynamic-slice) to its own shard; a GPU compilation fuses the pair "
            "into a reduce-scatter in a later pass (ReduceScatterCreator), which the CPU backend does not run."
        )
    return notes


def compile_for_dump(name):
    """Compile fixture `name` in this process (whose XLA_FLAGS, set by
    :func:`run_worker`, make XLA dump its HLO) and describe what was compiled:
    the declaration's layout, and the JAX version and platform."""
    import jax
    import jaxlib

    from ..programs import fixtures

    fx = fixtures.get(name)
    mesh = fixtures.mesh_for(fx)
    fixtures.jitted(fx, mesh).lower(*fixtures.abstract_args(fx, mesh)).compile()
    return {
        "mesh": fx.mesh_axes,
        "specs": {k: list(v) for k, v in fx.specs.items()},
        "shapes": {k: list(v) for k, v in fx.shapes.items()},
        "dtype": fx.dtype,
        "summary": fx.summary,
        "manual": fx.manual,
        "jax_version": jax.__version__,
        "jaxlib_version": jaxlib.__version__,
        "platform": jax.devices()[0].platform,
    }


def run_worker(names, dump_dir, timeout_s=300):
    """Compile the fixtures `names` in one fresh process with XLA's dump
    flags aimed at `dump_dir` (they are process-wide; each fixture is its own
    module, jit_NAME, dumped to its own files); returns {name: the worker's
    report}. One process for all of them: starting JAX costs more than most
    of these compilations."""
    cmd = [sys.executable, "-m", "shardbook.hlo", "_worker", *names]
    timeout_s = timeout_s * len(names)
    result = subprocess.run(
        cmd, env=worker_env(dump_dir, names), capture_output=True, text=True, timeout=timeout_s, cwd=REPOSITORY_ROOT
    )
    if result.returncode:
        raise CaptureError(f"fixture {', '.join(names)}: the compile worker failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def temporary_folder(prefix):
    """A new folder in the system's temporary folder, removed on the way out
    of the block, however the block ends. Its random name is chosen before
    the folder is made, so a SIGTERM that shardbook.hlo turns into
    SystemExit just after the folder appears still removes it:
    tempfile.TemporaryDirectory leaks it when the signal lands between its
    mkdtemp and the registration of its cleanup."""
    path = Path(tempfile.gettempdir()) / f"{prefix}{secrets.token_hex(8)}"
    try:
        path.mkdir(mode=0o700)  # 64 random bits: a name no other process holds
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def capture(name, out_root, log=print):
    """Capture fixture `name` into out_root/name (replaced only on success)."""
    return capture_many([name], out_root, log)[name]


def capture_many(names, out_root, log=print):
    """Capture the fixtures `names` into out_root/NAME each, compiled by one
    worker process; each folder is replaced only once its own files are all
    written, and none is touched if the worker fails. Returns {name: meta}."""
    names = [check_name(n) for n in names]
    out_root = Path(out_root)
    out_root.mkdir(parents=True, exist_ok=True)
    dot.dot_binary()  # fail early, with the package name, if Graphviz is missing
    with temporary_folder("hlo-capture-") as tmp:
        dump_dir = tmp / "dump"
        infos = run_worker(names, dump_dir)
        metas = {}
        for name in names:
            metas[name] = _write_capture(name, infos[name], dump_dir, out_root)
            log(f"captured {name}: {len(metas[name]['inventory'])} collective(s)")
    return metas


def _write_capture(name, info, dump_dir, out_root):
    """Fixture `name`'s files from the dump, written beside out_root/name and
    then moved into its place; its meta.json document."""
    picks, cpu_after = find_dumps(dump_dir, name)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=out_root))
    staging.chmod(0o755)
    try:
        after_text = clean_hlo(picks["after_partitioning.txt"].read_text())
        (staging / "before_partitioning.txt").write_text(clean_hlo(picks["before_partitioning.txt"].read_text()))
        (staging / "after_partitioning.txt").write_text(after_text)
        for key in ("before_partitioning.dot", "after_partitioning.dot"):
            text = stable_module_number(picks[key].read_text(), picks[key].name)
            (staging / key).write_text(relativize(dot.sanitize(text)))
        title = f"<b>{name}</b>: after SPMD partitioning (device-local)"
        pruned = dot.prune((staging / "after_partitioning.dot").read_text(), title)
        (staging / "after_partitioning.svg").write_text(dot.render_svg(pruned))
        meta = _meta(name, info, after_text, _backend_notes(info["dtype"], after_text, cpu_after))
        meta["sha256"] = {f: hashlib.sha256((staging / f).read_bytes()).hexdigest() for f in FILES}
        (staging / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=False) + "\n")
        # the TPU capture (hlo_artifacts/NAME/tpu, shardbook.hlo.tpu_capture) is libtpu's, not this
        # capture's: it is kept as it is
        if (out_root / name / "tpu").is_dir():
            shutil.copytree(out_root / name / "tpu", staging / "tpu")
        _replace(staging, out_root / name)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return meta


def _replace(staging, target):
    backup = None
    if target.exists():
        backup = target.with_name(f".{target.name}.old")
        shutil.rmtree(backup, ignore_errors=True)
        target.rename(backup)
    staging.rename(target)
    if backup is not None:
        shutil.rmtree(backup)


def _meta(name, info, after_text, notes):
    mesh, specs, shapes = info["mesh"], info["specs"], info["shapes"]
    spec_lists = {k: [list(e) if isinstance(e, (list, tuple)) else e for e in v] for k, v in specs.items()}
    local = {a: list(sharding.local_shape(shapes[a], _tuple_spec(specs[a]), mesh)) for a in shapes}
    inv = summary(inventory(after_text))
    return {
        "fixture": name,
        "summary": info["summary"],
        "mesh": mesh,
        "specs": spec_lists,
        "global_shapes": shapes,
        "local_shapes": local,
        "dtype": info["dtype"],
        "manual": info["manual"],
        "jax_version": info["jax_version"],
        "jaxlib_version": info["jaxlib_version"],
        "platform": info["platform"],
        "xla_flags": worker_env("<temporary folder>", name)["XLA_FLAGS"],
        "command": f"python -m shardbook.hlo capture {name}",
        "files_pruned": "HLO text: source-location tables and stack_frame_id removed; DOT: node ids renumbered, "
        "tooltips and stylesheet removed; SVG: tuple, get-tuple-element and copy nodes contracted",
        "backend_notes": notes,
        "inventory": inv,
        "predicted": predict(name, mesh, {k: _tuple_spec(v) for k, v in specs.items()}, shapes, info["dtype"]),
    }


def _tuple_spec(spec):
    return tuple(tuple(e) if isinstance(e, list) else e for e in spec)


def load_meta(folder):
    """A fixture's meta.json, checked: ValueError naming the file when it is
    missing, not JSON, or has no collective inventory."""
    path = Path(folder) / "meta.json"
    meta = _validate.read_json(path, missing="run `make artifacts`", remedy="restore it or run `make artifacts`")
    if not isinstance(meta, dict) or not isinstance(meta.get("inventory"), list):
        raise ValueError(
            f"{path}: has no collective inventory (an 'inventory' list); restore it or run `make artifacts`"
        )
    for i, entry in enumerate(meta["inventory"]):
        problem = _inventory_entry_problem(entry)
        if problem:
            raise ValueError(f"{path}: inventory[{i}] {problem}; restore it or run `make artifacts`")
    return meta


# what every collective of an inventory holds (capture's own records), as compare reads them
_ENTRY_FIELDS = {"kind": str, "dtype": str, "operand_shape": list, "result_shape": list, "group_size": int}


def _inventory_entry_problem(entry):
    """Why `entry` is not a collective as capture records one, or ''."""
    if not isinstance(entry, dict):
        return "is not an object"
    for key, kind in _ENTRY_FIELDS.items():
        value = entry.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            return f"has no {key} ({kind.__name__})"
    if not isinstance(entry.get("replica_groups", entry.get("source_target_pairs")), list):
        return "has no replica_groups or source_target_pairs (list)"
    return ""


def compare_inventories(committed, fresh):
    """Readable lines for every difference in collectives, shapes, dtypes or
    groups between two meta.json documents (empty when they agree)."""
    lines = []
    for key in ("mesh", "global_shapes", "local_shapes", "dtype", "jax_version", "jaxlib_version"):
        if committed.get(key) != fresh.get(key):
            lines.append(f"  {key}: committed {committed.get(key)} -> now {fresh.get(key)}")
    a, b = committed["inventory"], fresh["inventory"]
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else None
        y = b[i] if i < len(b) else None
        if x != y:
            lines.append(f"  collective {i}: committed {_short(x)}\n{' ' * 16}now {_short(y)}")
    return lines


def _short(entry):
    if entry is None:
        return "(none)"
    groups = entry.get("replica_groups") or entry.get("source_target_pairs")
    return f"{entry['kind']} {entry['dtype']}{entry['operand_shape']} -> {entry['result_shape']} over {entry['group_size']} {groups}"


__all__ = ["capture", "compare_inventories", "load_meta", "CaptureError", "FIXTURE_NAMES"]
