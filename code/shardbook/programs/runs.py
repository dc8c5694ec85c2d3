"""Train the small model under a scheme and record what the compiler says
about its step: the losses, each parameter's first-step gradient norm, the
collectives, memory_analysis(), cost_analysis() and the measured step time.

One run per scheme is shared by everything that asks for it: the chapter
"One model on every mesh" and the tests read the same record, kept in
``_build/model_runs/<key>/<scheme>.json``. The key is a hash of the code that
produces the record (this module, the model, the schemes, the HLO reader),
the JAX version and the XLA flags, so a change to any of them runs the
schemes again; a record is written to a temporary file and then renamed, so
an interrupted run leaves nothing half-written.
"""

import argparse
import hashlib
import inspect
import json
import sys

try:
    import fcntl
except ImportError:  # Windows: no lock; a scheme may then be trained twice, harmlessly
    fcntl = None
import os
import platform
import re
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from .. import REPOSITORY_ROOT
from ..devices import usable_cores

N_STEPS = 20


def default_cache_dir(root=REPOSITORY_ROOT, environ=os.environ):
    """Where the records are kept: `_build/model_runs` in a checkout of the
    repository (beside the build that reads them); for a package installed
    from it with pip (a chapter downloaded as a notebook), the user's cache
    folder ($XDG_CACHE_HOME or ~/.cache, then shardbook/model_runs)."""
    if (Path(root) / "code" / "pyproject.toml").is_file():
        return Path(root) / "_build" / "model_runs"
    cache = environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "shardbook" / "model_runs"


CACHE_DIR = default_cache_dir()
_KEY_FILES = (
    "programs/model.py",
    "programs/schemes.py",
    "programs/runs.py",
    "programs/fixtures.py",
    "hlo/inventory.py",
)


def cache_key(n_steps=N_STEPS):
    """Hash of what a record depends on."""
    import jax

    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for name in _KEY_FILES:
        digest.update(name.encode() + b"\0" + (package / name).read_bytes())
    digest.update(f"{jax.__version__}|{os.environ.get('XLA_FLAGS', '')}|{n_steps}".encode())
    return digest.hexdigest()[:16]


def machine():
    """A one-line description of the machine that measured the step times."""
    model_name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model_name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model_name}, {os.cpu_count()} cores, {platform.system()}"


def _place(tree, shardings):
    """Host arrays onto (possibly other processes') devices: each process
    fills only its own shards, so the same code runs on one process or many."""
    import jax

    def one(x, sharding):
        x = np.asarray(x)
        return jax.make_array_from_callback(x.shape, sharding, lambda index: x[index])

    return jax.tree_util.tree_map(one, tree, shardings)


def _replicated(mesh):
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    return NamedSharding(mesh, P())


# How closely a run must reproduce its reference (the scheme's single-device
# run, or the same scheme in one process). float32 everywhere: the first loss
# is the same computation and agrees to rounding; after that a sharded
# reduction sums in another order, and Adam (learning rate 3e-3, a loss that
# is not monotone) amplifies that rounding: measured on this book's machine,
# at most 2e-6 over the first two steps and 2e-5 over twenty for every dense
# scheme. So the first two steps to 1e-5, where a wrong collective or
# gradient shows at once, and the whole curve to 3e-4. The MoE variant routes each token to its
# top two experts: once rounding moves a router logit across a tie, a token
# changes experts (or is dropped at capacity), a discrete change the dense
# model has no counterpart of. Measured, EP against one device: 1e-7 for the
# first two steps, up to 3e-2 by step 20; its whole curve is held to 6e-2.
EARLY_STEPS, EARLY_RTOL = 2, 1e-5
LOSS_RTOL, MOE_LOSS_RTOL = 3e-4, 6e-2
# Adam's update does not change when every gradient is multiplied by a constant (its first step is
# lr·sign(g)), so the losses cannot show a gradient summed where it should be averaged: the records
# also hold each parameter's first-step gradient norm, read from Adam's first moment after one step
# ((1 − β1)·g: no collective is added to the step), and a run's must match its reference's. Measured,
# every scheme against one device: at most 1.9e-7 (tp_sp; float32 sums in another order); a doubled
# gradient is off by 1.
GRADIENT_RTOL = 1e-4


def loss_differences(reference, losses):
    """Relative difference per step."""
    if len(reference) != len(losses):
        raise ValueError(f"losses: {len(losses)} steps, the reference has {len(reference)}")
    return [abs(a - b) / abs(a) for a, b in zip(reference, losses, strict=True)]


def gradient_differences(reference, norms):
    """Relative difference per parameter of two records' first-step
    gradient norms ({parameter: norm})."""
    if set(reference) != set(norms):
        raise ValueError(f"norms: the parameters differ: {sorted(set(reference) ^ set(norms))}")
    return {name: abs(norms[name] - want) / abs(want) for name, want in reference.items()}


def gradient_problems(reference, norms):
    """What is wrong with `norms` ({parameter: first-step gradient norm})
    against `reference`'s ([] when every parameter's agrees within
    GRADIENT_RTOL)."""
    if set(reference) != set(norms):
        return [f"the parameters differ: {sorted(set(reference) ^ set(norms))}"]
    return [
        f"{name}: first-step gradient norm {norms[name]:.6g}, one device {reference[name]:.6g}"
        for name, diff in gradient_differences(reference, norms).items()
        if diff > GRADIENT_RTOL
    ]


def _gradient_norms(first_moment, mesh, b1):
    """{parameter path: L2 norm of its gradient} from Adam's first moment
    after one step, (1 − b1)·g, computed as its own small program so the
    training step is unchanged; replicated, so every process can read it."""
    import jax
    import jax.numpy as jnp

    leaves, _ = jax.tree_util.tree_flatten_with_path(first_moment)

    def l2_norms(xs):
        return [jnp.sqrt(jnp.sum(jnp.square(x))) for x in xs]

    norms = jax.jit(l2_norms, out_shardings=_replicated(mesh))([x for _, x in leaves])
    return {
        jax.tree_util.keystr(path): float(n.addressable_shards[0].data) / (1 - b1)
        for (path, _), n in zip(leaves, norms, strict=True)
    }


def loss_problems(reference, losses, moe=False):
    """What is wrong with `losses` against `reference` ([] when they agree)."""
    diff = loss_differences(reference, losses)
    problems = []
    if max(diff[:EARLY_STEPS]) >= EARLY_RTOL:
        problems.append(
            f"the first {EARLY_STEPS} losses differ by {max(diff[:EARLY_STEPS]):.2e} (limit {EARLY_RTOL:.0e})"
        )
    limit = MOE_LOSS_RTOL if moe else LOSS_RTOL
    if max(diff) >= limit:
        problems.append(f"the losses differ by up to {max(diff):.2e} (limit {limit:.0e})")
    return problems


def run(scheme_name, n_steps=N_STEPS, devices=None, log=None):
    """Compile and train `scheme_name` for `n_steps` steps; the record (a
    dict of plain values). No cache: see :func:`report`."""
    import jax

    from ..hlo import inventory
    from . import model, schemes

    scheme = schemes.check(schemes.get(scheme_name))
    start = time.perf_counter()
    jitted, mesh, param_sh, batch_sh = schemes.jitted_step(scheme, devices)
    compiled = jitted.lower(*schemes.abstract_arguments(scheme, mesh, param_sh, batch_sh)).compile()
    compile_s = time.perf_counter() - start
    init = model.init_params(scheme.config)
    params = _place(init, param_sh)
    zeros = jax.tree_util.tree_map(np.zeros_like, init)
    opt_state = {
        "m": _place(zeros, param_sh),
        "v": _place(zeros, param_sh),
        "step": _place(np.int32(0), _replicated(mesh)),
    }
    losses, step_s, gradient_norms = [], [], None
    b1 = inspect.signature(model.train_step).parameters["b1"].default
    for batch in model.batches(scheme.config, n_steps):
        t = time.perf_counter()
        params, opt_state, loss = compiled(params, opt_state, _place(batch, batch_sh))
        losses.append(float(loss.addressable_shards[0].data))  # waits for the step
        step_s.append(time.perf_counter() - t)
        if gradient_norms is None:
            gradient_norms = _gradient_norms(opt_state["m"], mesh, b1)
    memory = compiled.memory_analysis()
    cost = compiled.cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    text = compiled.as_text()
    collectives = inventory.inventory(text)
    record = {
        "scheme": scheme.name,
        "mesh_axes": scheme.mesh_axes,
        "n_devices": mesh.size,
        "losses": losses,
        "first_step_gradient_norms": gradient_norms,
        "collectives": collectives,
        # instructions (a combined collective of several tensors counts once),
        # and how many of them the backend split into an asynchronous start/done pair
        "collective_instructions": len({e["name"].split("#")[0] for e in collectives}),
        "async_collective_starts": sum(text.count(f"{op}-start(") for op in inventory.HLO_OPCODES),
        "memory": {
            "argument_bytes": memory.argument_size_in_bytes,
            "output_bytes": memory.output_size_in_bytes,
            "temporary_bytes": memory.temp_size_in_bytes,
            "alias_bytes": memory.alias_size_in_bytes,
        },
        "flops_per_device": float(cost["flops"]),
        "compile_s": compile_s,
        # the first step also transfers and warms up: the median of the rest
        "step_s": statistics.median(step_s[1:]) if len(step_s) > 1 else step_s[0],
        "machine": machine(),
        "cpu_cores": usable_cores(),  # those this process could run on (make test's trainer: one)
        "jax_version": jax.__version__,
    }
    if log:
        log(
            f"{scheme.name}: compiled in {compile_s:.1f} s, {n_steps} steps, "
            f"loss {losses[0]:.3f} -> {losses[-1]:.3f}, {record['step_s'] * 1e3:.0f} ms per step"
        )
    return record


class TrainingFailed(RuntimeError):
    """A scheme's training raised; the message names the scheme."""


def _folder(cache_dir, n_steps):
    folder = Path(cache_dir or CACHE_DIR) / cache_key(n_steps)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _lock(folder, scheme_name):
    """Wait for, then hold, the one lock on `scheme_name`'s record; closing
    the returned file releases it."""
    lock = open(folder / f".{scheme_name}.lock", "w")
    if fcntl is not None:
        fcntl.flock(lock, fcntl.LOCK_EX)
    return lock


def _read_or_run(folder, scheme_name, n_steps, log):
    """The record, read when present, else run and written (under the lock)."""
    path = folder / f"{scheme_name}.json"
    if path.exists():
        try:
            return json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            pass  # a damaged record is recomputed
    try:
        record = run(scheme_name, n_steps, log=log)
    except Exception as exc:  # one line that names the scheme; the cause's traceback goes to the log
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        raise TrainingFailed(f"training scheme {scheme_name} failed: {type(exc).__name__}: {first}") from exc
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{scheme_name}-", suffix=".json")
    with os.fdopen(fd, "w") as fh:
        json.dump(record, fh)
    os.replace(tmp, path)
    return record


def report(scheme_name, n_steps=N_STEPS, cache_dir=None, log=None):
    """The record of `scheme_name`: read from the cache when the code, JAX
    and the flags are those that wrote it, else run and cached."""
    from . import schemes

    schemes.get(scheme_name)  # an unknown name fails here, with the list
    folder = _folder(cache_dir, n_steps)
    # one process computes a scheme at a time: `make test` trains the schemes in
    # the background while the book builds, and a chapter that reaches one
    # being trained waits for it instead of training it twice
    with _lock(folder, scheme_name):
        return _read_or_run(folder, scheme_name, n_steps, log)


def reports(names=None, log=None, claim_all=False, n_steps=N_STEPS, cache_dir=None):
    """{name: record} for the named schemes (all by default), in order.

    With `claim_all`, the locks of all of them are taken before the first is
    trained and each is released once its record is written: another process
    that asks for a scheme not yet reached waits for this one's record rather
    than training it too (at its own, perhaps lower, priority)."""
    from . import schemes

    names = list(names or schemes.SCHEMES)
    for name in names:
        schemes.get(name)
    folder = _folder(cache_dir, n_steps)
    claimed = {name: _lock(folder, name) for name in names} if claim_all else {}
    out = {}
    try:
        for i, name in enumerate(names, 1):
            step_log = (lambda msg, i=i: log(f"[{i}/{len(names)}] {msg}")) if log else None
            if name in claimed:
                out[name] = _read_or_run(folder, name, n_steps, step_log)
                claimed.pop(name).close()
            else:
                out[name] = report(name, n_steps, cache_dir, log=step_log)
    finally:
        for lock in claimed.values():
            lock.close()
    return out


def deal(names, n_processes):
    """The schemes `names` dealt out in turn to `n_processes` trainers (the
    first to the first, the second to the second, ...): the cheap and the
    costly schemes of the list spread over them."""
    return [list(names[i::n_processes]) for i in range(n_processes)]


def _train_in_processes(names, n_processes):
    """Train `names` in `n_processes` child processes, each held to a core
    of its own (`--core I`) and given its share (:func:`deal`); they write
    to this process's output, each line prefixed with its core. Returns the
    exit status: 0 if every child succeeded."""
    import subprocess

    sys.stdout.flush()
    children = [
        subprocess.Popen([sys.executable, "-m", "shardbook.programs.runs", *share, "--core", str(index)])
        for index, share in enumerate(deal(names, n_processes))
        if share
    ]
    statuses = [child.wait() for child in children]
    return next((s for s in statuses if s), 0)


def _processes(option, n_schemes):
    """How many one-core trainers `--processes` asks for (None: train here,
    on every core). ValueError for a count that is not from 1 to the cores
    available, RuntimeError where no process can be held to a core."""
    can_hold = hasattr(os, "sched_setaffinity")
    if option is None or (option == "auto" and not can_hold):
        return None
    if option == "auto":
        return max(1, min(usable_cores(), n_schemes))
    if not option.isdigit() or not 1 <= int(option) <= usable_cores():
        raise ValueError(f"processes: must be 'auto' or from 1 to {usable_cores()} (one core each), got {option}")
    if not can_hold:
        raise RuntimeError("processes: this platform cannot hold a process to a core; leave --processes out")
    return int(option)


def main(argv=None):
    """`python -m shardbook.programs.runs [SCHEME ...] [--processes N]`:
    train and record the schemes (all by default) that have no current
    record, claiming them all first (see `reports`), on 8 simulated CPU
    devices; with `--processes N`, in N processes of one core each."""
    from ..devices import hold_to_core, use_cpu_devices
    from . import schemes  # imports JAX; its backend starts only with use_cpu_devices

    parser = argparse.ArgumentParser(
        prog="python -m shardbook.programs.runs",
        description="Train the small model under each scheme and record its losses, collectives, memory and FLOPs.",
    )
    parser.add_argument("names", nargs="*", help=f"schemes (default: all of {', '.join(schemes.SCHEMES)})")
    parser.add_argument(
        "--processes",
        help="train in this many processes, each held to a core of its own, the schemes dealt out in turn; "
        "'auto' (make test): one per core where the platform can hold a process to a core, else a single "
        "process on every core. XLA's CPU steps take about a fifth less processor time on one thread than on two",
    )
    parser.add_argument("--core", type=int, help=argparse.SUPPRESS)  # one of those processes: its core
    args = parser.parse_args(argv)
    try:
        for name in args.names:
            schemes.get(name)
        names = args.names or list(schemes.SCHEMES)
        n_processes = _processes(args.processes, len(names))
        if n_processes is not None:
            return _train_in_processes(names, n_processes)
        prefix = ""
        if args.core is not None:
            prefix = f"core {hold_to_core(args.core)}: "
        use_cpu_devices(schemes.N_DEVICES)
        reports(names, log=lambda msg: print(prefix + msg, flush=True), claim_all=True)
    except (ValueError, RuntimeError) as exc:
        if isinstance(exc, TrainingFailed):
            import traceback

            traceback.print_exception(exc.__cause__, file=sys.stderr)  # for the log; the line below says what failed
        print(f"shardbook.programs.runs: {exc}", file=sys.stderr, flush=True)
        return 2
    return 0


# --- the build's side: records before the pages that read them ---------------

FAILED_LINE = re.compile(r"training scheme (\S+) failed")


def _alive(pid):
    """True while process `pid` runs (an exited child not yet reaped, a
    zombie, counts as gone)."""
    try:
        os.kill(pid, 0)
    except (OSError, ValueError):
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc: the signal said it exists


def _trainer_pid(build_dir):
    """The pid of the background trainer that `make book` / `make test`
    started (train-in-background), or None when none is running."""
    build = Path(build_dir)
    status = build / "model_runs.status"
    try:
        pid = int((build / "model_runs.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    if status.exists() and status.read_text().strip():
        return None  # it has finished
    return pid if _alive(pid) else None


def _trained_so_far(log_path):
    try:
        lines = Path(log_path).read_text(errors="replace").splitlines()
    except OSError:
        return 0, ""
    done = [line for line in lines if ": compiled in " in line]
    return len(done), (done[-1] if done else "")


def ensure_records(build_dir, log=print, poll_s=1.0, report_every_s=15.0, command=None, cwd=REPOSITORY_ROOT):
    """Make sure every scheme has a current record before a page that reads
    them runs, outside any notebook cell (so no cell timeout applies): wait,
    however long it takes, for the background trainer of `make book` /
    `make test` (log: BUILD/model_runs.log), saying how far it has got every
    `report_every_s` seconds; then train whatever is still missing in a
    process of its own (`command`; by default this module's command line),
    its output appended to the log. RuntimeError with one line naming the
    scheme and the log when training fails."""
    build = Path(build_dir)
    log_path = build / "model_runs.log"
    pid = _trainer_pid(build)
    if pid is not None:
        start = last = time.monotonic()
        log(f"shardbook: waiting for the background training of the small model (log: {log_path})")
        while _trainer_pid(build) is not None:
            time.sleep(poll_s)
            if time.monotonic() - last >= report_every_s:
                last = time.monotonic()
                n_done, latest = _trained_so_far(log_path)
                log(
                    f"shardbook: still training after {last - start:.0f} s: {n_done} scheme(s) trained"
                    + (f", the last: {latest.split(': ', 1)[-1]}" if latest else "")
                )
    import subprocess

    build.mkdir(parents=True, exist_ok=True)
    cmd = command or [sys.executable, "-m", "shardbook.programs.runs"]
    with open(log_path, "a") as out:
        done = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=out, text=True)
    if done.returncode != 0:
        found = FAILED_LINE.findall(log_path.read_text(errors="replace"))
        what = f"on scheme {found[-1]}" if found else f"(exit {done.returncode})"
        raise RuntimeError(f"training the small model failed {what}; see {log_path}")


if __name__ == "__main__":
    sys.exit(main())
