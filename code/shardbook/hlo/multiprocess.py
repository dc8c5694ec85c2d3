"""Run a fixture across several JAX processes joined by jax.distributed.

Here: 2 processes of 4 simulated CPU devices on 127.0.0.1, with gloo CPU
collectives. On a cluster the same worker runs once per host (or per GPU
process) with the platform, coordinator address and process id of that
cluster; see the README.
"""

import json
import math
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from .. import REPOSITORY_ROOT
from ..programs import registry
from . import check_name
from .capture import clean_hlo, compare_inventories, dump_flags, find_dumps, load_meta, temporary_folder, worker_env
from .inventory import inventory, summary


def reference(name, args):
    """The fixture's result computed on one device, in float32 numpy (its
    declaration's reference, shardbook.programs.registry)."""
    return registry.get(name).reference(*[np.asarray(x, dtype=np.float32) for x in args])


def global_inputs(fixture):
    """The fixture's arguments as every process builds them: float32 arrays of
    its global shapes from one seeded generator, scaled by 0.1."""
    rng = np.random.default_rng(0)
    return [(0.1 * rng.standard_normal(fixture.shapes[a])).astype(np.float32) for a in fixture.arg_names]


def execute_and_check(name, devices=None):
    """Run the fixture on the mesh of global devices, check every
    addressable shard against the single-device reference; returns the
    largest absolute error."""
    import jax

    from ..programs import fixtures

    fx = fixtures.get(name)
    mesh = fixtures.mesh_for(fx, devices)
    fn = fixtures.jitted(fx, mesh)
    host = global_inputs(fx)
    dtype = jax.numpy.dtype(fx.dtype)
    arrays = [
        jax.make_array_from_callback(h.shape, s.sharding, lambda idx, h=h: h[idx].astype(dtype))
        for h, s in zip(host, fixtures.abstract_args(fx, mesh), strict=True)
    ]
    out = fn(*arrays)
    expected = reference(name, [h.astype(dtype).astype(np.float32) for h in host])
    tol = {"float32": 1e-4, "float16": 2e-2, "bfloat16": 6e-2}[fx.dtype]
    worst = 0.0
    for shard in out.addressable_shards:
        got = np.asarray(shard.data, dtype=np.float32)
        want = expected[shard.index]
        err = float(np.max(np.abs(got - want))) if got.size else 0.0
        scale = float(np.max(np.abs(want))) or 1.0
        if err > tol * max(scale, 1.0):
            raise AssertionError(
                f"{name}: shard {shard.index} on {shard.device} differs from the reference by {err:.3g}"
            )
        worst = max(worst, err)
    return worst


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(name, n_processes=2, timeout_s=240, artifacts=REPOSITORY_ROOT / "hlo_artifacts", log=print):
    """Start `n_processes` workers of 8/n CPU devices each; every worker
    executes and checks the fixture and compares its partitioned HLO with the
    single-process capture. Returns the per-process reports."""
    check_name(name)
    if n_processes < 1 or 8 % n_processes:
        raise ValueError(f"processes: must divide 8 (the mesh size), got {n_processes}")
    check_timeout(timeout_s)
    port = _free_port()
    with temporary_folder(f"mp-{name}-") as tmp:
        dumps = [Path(tmp) / f"dump{pid}" for pid in range(n_processes)]
        reports = _run_workers(
            name,
            timeout_s,
            n_processes,
            port,
            tmp,
            command=lambda pid: ["process", name, "--dump", str(dumps[pid]), "--artifacts", str(artifacts)],
            env=lambda pid: worker_env(dumps[pid], name, n_devices=8 // n_processes),
        )
    for r in reports:
        log(
            f"{name}: process {r['process_id']} of {r['num_processes']}: "
            f"{r['local_devices']} local / {r['global_devices']} global devices, "
            f"max |error| {r['max_abs_error']:.2e}, partitioned HLO matches the capture: {r['hlo_matches']}"
        )
    return reports


def _read(handle):
    handle.flush()
    handle.seek(0)
    return handle.read()


# JAX's own default: a cluster's process that sends no heartbeat for this
# long is declared dead (jax.distributed.initialize).
HEARTBEAT_TIMEOUT_S = 100
# After the first worker fails, how long its peers get to exit too, so that
# every failure is reported (the first one is often the cause).
GRACE_AFTER_A_FAILURE_S = 5


def _failure_report(pid, code, log):
    """A failed worker's exit and the last lines of its stderr, without the
    native stack frames (`    @ 0x...`) that would push out the message
    that names the cause."""
    lines = [line for line in _read(log).strip().splitlines() if not line.lstrip().startswith("@ ")]
    how = f"exited {code}"
    if code == -9:
        how += " (SIGKILL: on a local run, most often the kernel's out-of-memory killer)"
    return f"process {pid} {how}:\n" + "\n".join(lines[-12:])


def _wait(name, procs, logs, timeout_s):
    """Wait for every worker; the first one that fails stops the rest, after
    a short grace in which a peer's own failure is reported too (its peers
    would otherwise wait for the coordinator until their own timeouts)."""
    deadline = time.monotonic() + timeout_s
    failed = {}  # pid -> exit code, in the order they were seen
    failed_at = None
    while True:
        codes = [p.poll() for p in procs]
        for pid, code in enumerate(codes):
            if code not in (None, 0) and pid not in failed:
                failed[pid] = code
                failed_at = failed_at or time.monotonic()
        if failed and (
            all(code is not None for code in codes) or time.monotonic() - failed_at > GRACE_AFTER_A_FAILURE_S
        ):
            first = next(iter(failed))
            reports = [_failure_report(pid, code, logs[pid][1]) for pid, code in failed.items()]
            raise RuntimeError(
                f"{name}: process {first} exited {failed[first]}; the other workers were stopped:\n"
                + "\n".join(reports)
            )
        if not failed and all(code == 0 for code in codes):
            return [json.loads(_read(out).strip().splitlines()[-1]) for out, _ in logs]
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name}: the workers did not finish within {timeout_s} s; all were stopped")
        time.sleep(0.1)


def check_heartbeat_timeout(seconds):
    """`seconds` as an int from 1 up; ValueError naming the option otherwise."""
    if not isinstance(seconds, int) or isinstance(seconds, bool) or seconds < 1:
        raise ValueError(f"--heartbeat-timeout: must be a whole number of seconds >= 1, got {seconds!r}")
    return seconds


def check_coordinator(coordinator):
    """`coordinator` as (host, port): `host:port` (an IPv6 host in brackets,
    `[::1]:1234`) with a port from 1 to 65535. ValueError naming the rule
    otherwise, raised before JAX's distributed runtime sees the address (a
    malformed one can crash it)."""
    text = coordinator if isinstance(coordinator, str) else ""
    host, sep, port = text.rpartition(":")
    rule = "must be HOST:PORT with a port from 1 to 65535 (for example 127.0.0.1:1234)"
    if not text or text != text.strip() or not sep:
        raise ValueError(f"--coordinator: {rule}, got {coordinator!r}")
    bracketed = host.startswith("[") and host.endswith("]")
    if not host.strip("[]") or any(c.isspace() for c in host) or (":" in host and not bracketed):
        raise ValueError(f"--coordinator: {rule}; the host is missing or malformed in {coordinator!r}")
    if not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65535:
        raise ValueError(f"--coordinator: {rule}; the port is {port!r}")
    return host, int(port)


def check_timeout(seconds):
    """`seconds` if it is a finite number above 0; ValueError naming
    --timeout otherwise (inf or nan would reach the workers' heartbeat as an
    integer, and 0 or less would stop them as they start)."""
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"--timeout: must be a finite number of seconds above 0, got {seconds!r}")
    return seconds


def check_processes(num_processes, process_id):
    """ValueError unless 1 <= num_processes, num_processes divides the eight
    devices every fixture's and scheme's mesh has (a count that does not
    would leave the peers waiting for a process that never comes), and
    0 <= process_id < num_processes."""
    if not isinstance(num_processes, int) or isinstance(num_processes, bool) or num_processes < 1:
        raise ValueError(f"--num-processes: must be an integer >= 1, got {num_processes!r}")
    if 8 % num_processes:
        raise ValueError(f"--num-processes: must divide 8 (the mesh's devices), got {num_processes}")
    if not isinstance(process_id, int) or isinstance(process_id, bool) or not 0 <= process_id < num_processes:
        raise ValueError(
            f"--process-id: must be an integer from 0 to {num_processes - 1} (--num-processes - 1), got {process_id!r}"
        )


def _prepare_dump(dump, name):
    """Make the dump folder and set this process's XLA dump flags for fixture
    `name` (before JAX starts its backend: XLA reads them once), so that a
    worker started by hand on a cluster writes what it then reads."""
    folder = Path(dump)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--dump: {dump} is a file; give a folder for XLA's HLO dumps")
    folder.mkdir(parents=True, exist_ok=True)
    os.environ["XLA_FLAGS"] = dump_flags(folder.resolve(), name, os.environ.get("XLA_FLAGS", ""))


def coordinator_bind_address(coordinator):
    """Where the coordinator listens: a loopback coordinator (a local run)
    binds the loopback only; any other address keeps JAX's default (every
    interface), as a cluster needs."""
    host = coordinator.rsplit(":", 1)[0]
    return coordinator if host in ("127.0.0.1", "localhost") else None


def process_main(
    name, coordinator, num_processes, process_id, dump, artifacts, heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S
):
    """One worker of `run` (also what a cluster launcher starts per process):
    the arguments are checked, and the dump flags set, before JAX starts."""
    check_name(name)
    check_coordinator(coordinator)
    check_processes(num_processes, process_id)
    check_heartbeat_timeout(heartbeat_timeout_s)
    # the committed artifact this run is checked against, read before JAX starts and the peers wait:
    # a mistyped --artifacts once skipped the check and reported success ("hlo_matches": null)
    committed_path = Path(artifacts) / name / "meta.json"
    if not committed_path.is_file():
        raise ValueError(
            f"--artifacts: no committed artifact {committed_path}; give the repository's hlo_artifacts folder"
        )
    committed = load_meta(committed_path.parent)
    _prepare_dump(dump, name)
    import jax

    if jax.config.jax_platforms in (None, "", "cpu"):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=coordinator,
        num_processes=num_processes,
        process_id=process_id,
        coordinator_bind_address=coordinator_bind_address(coordinator),
        heartbeat_timeout_seconds=heartbeat_timeout_s,
    )
    worst = execute_and_check(name)
    report = {
        "fixture": name,
        "process_id": jax.process_index(),
        "num_processes": jax.process_count(),
        "local_devices": jax.local_device_count(),
        "global_devices": jax.device_count(),
        "max_abs_error": worst,
    }
    picks, _ = find_dumps(dump, name)
    fresh = {"inventory": summary(inventory(clean_hlo(picks["after_partitioning.txt"].read_text())))}
    diff = compare_inventories({"inventory": committed["inventory"]}, fresh)
    report["hlo_matches"] = not diff
    report["hlo_diff"] = diff
    jax.distributed.shutdown()
    print(json.dumps(report))
    return report


# --- the small model, trained across processes --------------------------------


def _run_workers(name, timeout_s, n_processes, port, tmp, command, env):
    """Start one worker per process id, `python -m shardbook.hlo`, then
    command(pid) and the jax.distributed flags, in environment env(pid) with
    the devices simulated on the CPU (output to files in `tmp`); wait for
    their reports and stop any worker still running. Returns the reports.

    The workers' heartbeat timeout is the run's own: on one machine this
    process sees a worker exit at once, so a worker that is alive but starved
    of CPU (a loaded machine) is not a dead one, as JAX's 100 s would call it
    and then abort every peer."""
    procs, logs = [], []
    for pid in range(n_processes):
        worker = dict(env(pid))
        worker["JAX_PLATFORMS"] = "cpu"  # this local run simulates the devices
        cmd = [
            sys.executable,
            "-m",
            "shardbook.hlo",
            *command(pid),
            "--coordinator",
            f"127.0.0.1:{port}",
            "--num-processes",
            str(n_processes),
            "--process-id",
            str(pid),
            "--heartbeat-timeout",
            str(max(1, int(timeout_s))),
        ]
        out, err = open(Path(tmp) / f"out{pid}", "w+"), open(Path(tmp) / f"err{pid}", "w+")
        logs.append((out, err))
        procs.append(subprocess.Popen(cmd, env=worker, stdout=out, stderr=err, text=True, cwd=REPOSITORY_ROOT))
    try:
        return _wait(name, procs, logs, timeout_s)
    finally:
        for q in procs:
            if q.poll() is None:
                q.kill()
                q.wait()
        for out, err in logs:
            out.close()
            err.close()


def train(name, n_processes=2, timeout_s=600, log=print):
    """Train scheme `name` of shardbook.programs.schemes as `n_processes`
    JAX processes of 8/n CPU devices on this machine, joined by
    jax.distributed, and check every process's losses against the same
    scheme trained in one process (shardbook.programs.runs, cached).
    Returns (per-process reports, problems); no problems means they agree."""
    from ..programs import runs, schemes

    scheme = schemes.check(schemes.get(name))
    if n_processes < 2 or 8 % n_processes:
        raise ValueError(f"processes: must divide 8 (the mesh size) and be at least 2, got {n_processes}")
    check_timeout(timeout_s)
    _check_splits(scheme, name)
    log(f"{name}: the one-process reference on 8 CPU devices (cached after its first run)")
    reference = reference_record(name, timeout_s, log)
    port = _free_port()
    with temporary_folder(f"mp-train-{name}-") as tmp:
        log(f"{name}: {n_processes} processes of {8 // n_processes} CPU devices, coordinator 127.0.0.1:{port}")
        reports = _run_workers(
            name,
            timeout_s,
            n_processes,
            port,
            tmp,
            command=lambda pid: ["train-process", name],
            env=lambda pid: {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={8 // n_processes}"},
        )
    problems = []
    for r in reports:
        found = runs.loss_problems(reference["losses"], r["losses"], scheme.config.is_moe)
        worst = max(runs.loss_differences(reference["losses"], r["losses"]))
        log(
            f"{name}: process {r['process_id']} of {r['num_processes']}: {r['local_devices']} local / "
            f"{r['global_devices']} global devices, loss {r['losses'][0]:.4f} -> {r['losses'][-1]:.4f}, "
            f"largest relative difference from one process {worst:.1e}: {'agrees' if not found else 'DIFFERS'}"
        )
        problems += [f"process {r['process_id']}: {p}" for p in found]
    return reports, problems


def reference_record(name, timeout_s=600, log=print):
    """The one-process record of scheme `name` (shardbook.programs.runs,
    cached), computed in a child process on 8 simulated CPU devices: the
    calling process may have started JAX with fewer (a plain shell gives
    one), and XLA reads the device count only once per process."""
    from ..devices import xla_flags_with_device_count

    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"
    env["XLA_FLAGS"] = xla_flags_with_device_count(env.get("XLA_FLAGS", ""), 8)
    cmd = [sys.executable, "-m", "shardbook.hlo", "_reference", name]
    try:
        done = subprocess.run(cmd, env=env, cwd=REPOSITORY_ROOT, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise TimeoutError(f"{name}: the one-process reference did not finish within {timeout_s} s") from None
    for line in done.stderr.splitlines():
        if done.returncode == 0:
            log(line)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-12:])
        raise RuntimeError(f"{name}: the one-process reference exited {done.returncode}:\n{tail}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _check_splits(scheme, name):
    """ValueError when scheme `name` has no mesh to split across processes."""
    if not scheme.mesh_axes:
        raise ValueError(f"{name}: runs on one device; pick a scheme with a mesh to split across processes")


def train_process_main(name, coordinator, num_processes, process_id, heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S):
    """One worker of `train` (also what a cluster launcher starts per process);
    the arguments are checked before JAX starts."""
    from ..programs import runs, schemes

    scheme = schemes.check(schemes.get(name))
    check_coordinator(coordinator)
    check_processes(num_processes, process_id)
    if num_processes > 1:  # one process may run any scheme; a second one would hold no shard of it
        _check_splits(scheme, name)
    check_heartbeat_timeout(heartbeat_timeout_s)
    import jax

    if jax.config.jax_platforms in (None, "", "cpu"):
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=coordinator,
        num_processes=num_processes,
        process_id=process_id,
        coordinator_bind_address=coordinator_bind_address(coordinator),
        heartbeat_timeout_seconds=heartbeat_timeout_s,
    )
    record = runs.run(name)
    report = {
        "scheme": name,
        "process_id": jax.process_index(),
        "num_processes": jax.process_count(),
        "local_devices": jax.local_device_count(),
        "global_devices": jax.device_count(),
        "losses": record["losses"],
        "step_s": record["step_s"],
    }
    jax.distributed.shutdown()
    print(json.dumps(report))
    return report
