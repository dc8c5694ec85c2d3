"""Command line of shardbook.hlo; `python -m shardbook.hlo --help`."""

import argparse
import json
import sys
import time
from pathlib import Path

from .. import REPOSITORY_ROOT, _cli
from . import FIXTURE_NAMES, check_name

# the folders and files the commands read and write by default: the repository's, wherever the
# command runs from (`compare` from code/ once looked for code/hlo_artifacts and found nothing)
ARTIFACTS = str(REPOSITORY_ROOT / "hlo_artifacts")
DATA = REPOSITORY_ROOT / "code" / "shardbook" / "data"


def _list(args, parser):
    for n in FIXTURE_NAMES:
        print(n)
    return 0


def _run_capture(args, parser, capture_many, what, written, *extra):
    """Capture the fixtures `args` names (or --all) into --out with
    `capture_many(names, out, *extra, log=...)`, with a line per fixture."""
    if args.all and args.names:  # `capture nosuch --all` started every fixture without a word on the name
        raise ValueError("--all: captures every fixture; drop the names, or drop --all")
    names = list(FIXTURE_NAMES) if args.all else [check_name(n) for n in args.names]
    if not names:
        parser.error("name the fixtures to capture, or pass --all")
    if not args.out.strip():
        raise ValueError("--out: must name a folder, got ''")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise ValueError(f"--out: {args.out} is a file; give a folder ({written} is written there)")
    start = time.monotonic()
    print(f"compiling {len(names)} fixture(s){what} in one worker process ...", flush=True)
    done = iter(range(1, len(names) + 1))
    try:
        capture_many(names, args.out, *extra, log=lambda line: print(f"[{next(done)}/{len(names)}] {line}", flush=True))
    except OSError as exc:  # a folder that cannot be made or written (`--out /proc/x`)
        raise ValueError(f"--out: {args.out} cannot be written ({exc.strerror or exc})") from None
    return names, time.monotonic() - start


def _capture(args, parser):
    from .capture import capture_many

    names, took = _run_capture(args, parser, capture_many, "", "one sub-folder per fixture")
    print(f"captured {len(names)} fixture(s) into {args.out} in {took:.1f} s")
    return 0


def _capture_tpu(args, parser):
    from .tpu_capture import capture_many

    what = f" for TPU {args.topology}"
    names, took = _run_capture(args, parser, capture_many, what, "NAME/tpu per fixture", args.topology)
    print(f"captured {len(names)} fixture(s) for TPU into {args.out} in {took:.1f} s")
    return 0


def _compile_plans(args, parser):
    from .compile_plan import write_validation

    write_validation(args.out, log=lambda line: print(line, flush=True))
    return 0


def _compile_mesh_plans(args, parser):
    from .mesh_plans import write

    write(args.out, log=lambda line: print(line, flush=True), workers=args.workers)
    return 0


def _tpu_worker(args, parser):
    from .tpu_capture import compile_for_tpu

    try:
        reports = compile_for_tpu([check_name(n) for n in args.names], args.topology, args.texts)
    except ValueError as exc:
        print(json.dumps({"error": str(exc)}))
        return 2
    print(json.dumps(reports))
    return 0


def _compare(args, parser):
    from .capture import capture_many, compare_inventories, load_meta, temporary_folder

    names = [check_name(n) for n in args.names] or list(FIXTURE_NAMES)
    missing = [n for n in names if not (Path(args.artifacts) / n / "meta.json").is_file()]
    if missing:
        raise ValueError(
            f"--artifacts: no committed artifact of {', '.join(missing)} in {args.artifacts}; give the "
            "repository's hlo_artifacts folder, or run `make artifacts`"
        )
    # a damaged file fails here, before compiling
    committed = {n: load_meta(Path(args.artifacts) / n) for n in names}
    failed = 0
    with temporary_folder("hlo-compare-") as tmp:
        fresh = capture_many(names, tmp, log=lambda *_: None)
        for n in names:
            diff = compare_inventories(committed[n], fresh[n])
            print(f"{n}: {'matches' if not diff else 'DIFFERS'}")
            for line in diff:
                print(line)
            failed += bool(diff)
    return 1 if failed else 0


def _run(args, parser):
    from .multiprocess import run as run_mp

    reports = run_mp(check_name(args.name), args.processes, args.timeout)
    return 0 if all(r["hlo_matches"] for r in reports) else 1


def _train(args, parser):
    import os

    from ..devices import use_cpu_devices
    from ..programs import runs, schemes
    from .multiprocess import check_timeout

    check_timeout(args.timeout)  # one process does not use it, but a wrong one is refused all the same

    if args.processes == 1 and os.environ.get("JAX_PLATFORMS", "cpu") == "cpu":
        use_cpu_devices(schemes.N_DEVICES)  # a one-process run on this machine: 8 simulated devices

    scheme = schemes.check(schemes.get(args.name))
    if args.processes == 1:
        record = runs.run(scheme.name, log=print)
        if scheme.mesh_axes:
            reference = runs.report(scheme.reference, log=print)
            problems = runs.loss_problems(reference["losses"], record["losses"], scheme.config.is_moe)
            worst = max(runs.loss_differences(reference["losses"], record["losses"]))
            print(
                f"{scheme.name}: largest relative loss difference from one device ({scheme.reference}) "
                f"{worst:.1e}: {'agrees' if not problems else 'DIFFERS'}"
            )
            for p in problems:
                print(f"  {p}")
            return 1 if problems else 0
        return 0
    from .multiprocess import train

    _, problems = train(scheme.name, args.processes, args.timeout)
    for p in problems:
        print(f"  {p}")
    return 1 if problems else 0


def _reference(args, parser):
    """The child of `train --processes N` (multiprocess.reference_record):
    the one-process record on 8 simulated CPU devices, as one JSON line; its
    progress on stderr."""
    from ..devices import use_cpu_devices
    from ..programs import runs, schemes

    use_cpu_devices(schemes.N_DEVICES)
    record = runs.report(schemes.check(schemes.get(args.name)).name, log=lambda m: print(m, file=sys.stderr))
    print(json.dumps(record))
    return 0


def _train_worker(args, parser):
    from .multiprocess import check_coordinator, check_heartbeat_timeout, check_processes, train_process_main

    check_coordinator(args.coordinator)  # before JAX starts: a malformed address can crash its runtime
    check_processes(args.num_processes, args.process_id)
    check_heartbeat_timeout(args.heartbeat_timeout)

    train_process_main(args.name, args.coordinator, args.num_processes, args.process_id, args.heartbeat_timeout)
    return 0


def _capture_worker(args, parser):
    from .capture import compile_for_dump

    print(json.dumps({name: compile_for_dump(check_name(name)) for name in args.names}))
    return 0


def _process(args, parser):
    from .multiprocess import check_coordinator, check_heartbeat_timeout, check_processes, process_main

    check_coordinator(args.coordinator)  # before JAX starts: a malformed address can crash its runtime
    check_processes(args.num_processes, args.process_id)
    check_heartbeat_timeout(args.heartbeat_timeout)
    process_main(
        check_name(args.name),
        args.coordinator,
        args.num_processes,
        args.process_id,
        args.dump,
        args.artifacts,
        args.heartbeat_timeout,
    )
    return 0


HEARTBEAT_HELP = "seconds without a heartbeat before a process is declared dead (default 100, JAX's)"


def _parser():
    parser = argparse.ArgumentParser(
        prog="python -m shardbook.hlo",
        description="Capture, compare and run the book's HLO fixtures; train the small model on a mesh.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="list the fixtures").set_defaults(handler=_list)
    cap = sub.add_parser("capture", help="capture fixtures into a folder (default: the repository's hlo_artifacts)")
    cap.add_argument("names", nargs="*")
    cap.add_argument("--all", action="store_true")
    cap.add_argument("--out", default=ARTIFACTS)
    cap.set_defaults(handler=_capture)
    tpu = sub.add_parser(
        "capture-tpu",
        help="compile fixtures for a TPU topology ahead of time (needs libtpu: `make tpu-artifacts`) into OUT/NAME/tpu",
    )
    tpu.add_argument("names", nargs="*")
    tpu.add_argument("--all", action="store_true")
    tpu.add_argument("--out", default=ARTIFACTS)
    tpu.add_argument("--topology", default="v5p:2x2x2", help="a libtpu topology name (default v5p:2x2x2)")
    tpu.set_defaults(handler=_capture_tpu)
    plans = sub.add_parser(
        "compile-plans",
        help="with libtpu: compile the planner's validation plans for their TPU topologies into one JSON file",
    )
    plans.add_argument("--out", default=str(DATA / "compiled_plans.json"))
    plans.set_defaults(handler=_compile_plans)
    mesh_plans = sub.add_parser(
        "compile-mesh-plans",
        help="with libtpu: compile chapter 7's v5p and Ironwood candidates (shardbook.hlo.mesh_plans) into one JSON file",
    )
    mesh_plans.add_argument("--out", default=str(DATA / "compiled_mesh_plans.json"))
    mesh_plans.add_argument("--workers", type=int, default=2, help="plans compiled at once (default 2)")
    mesh_plans.set_defaults(handler=_compile_mesh_plans)
    cmp_ = sub.add_parser("compare", help="recapture into a temporary folder and diff the inventories")
    cmp_.add_argument("names", nargs="*")
    cmp_.add_argument("--artifacts", default=ARTIFACTS)
    cmp_.set_defaults(handler=_compare)
    run = sub.add_parser("run", help="run a fixture as several JAX processes on this machine and check it")
    run.add_argument("name")
    run.add_argument("--processes", type=int, default=2)
    run.add_argument("--timeout", type=float, default=240)
    run.set_defaults(handler=_run)
    tr = sub.add_parser(
        "train",
        help="train the small model under a scheme (shardbook.programs.schemes) and check its losses; "
        "--processes N splits it across N JAX processes",
    )
    tr.add_argument("name")
    tr.add_argument("--processes", type=int, default=1)
    tr.add_argument("--timeout", type=float, default=600)
    tr.set_defaults(handler=_train)
    # one process of a multi-process training run: what a cluster starts on every host
    worker = sub.add_parser("train-process", help="one process of a multi-process training run (one per host)")
    worker.add_argument("name")
    worker.add_argument("--coordinator", required=True)
    worker.add_argument("--num-processes", type=int, required=True)
    worker.add_argument("--process-id", type=int, required=True)
    worker.add_argument("--heartbeat-timeout", type=int, default=100, help=HEARTBEAT_HELP)
    worker.set_defaults(handler=_train_worker)
    # one process of a multi-process (multi-host) run: what a cluster starts on every host
    proc = sub.add_parser("process", help="one process of a multi-process run (start one per host on a cluster)")
    proc.add_argument("name")
    proc.add_argument("--coordinator", required=True, help="host:port of process 0")
    proc.add_argument("--num-processes", type=int, required=True)
    proc.add_argument("--process-id", type=int, required=True)
    proc.add_argument("--dump", required=True, help="folder for XLA's HLO dumps")
    proc.add_argument("--artifacts", required=True, help="the committed hlo_artifacts folder to compare with")
    proc.add_argument("--heartbeat-timeout", type=int, default=100, help=HEARTBEAT_HELP)
    proc.set_defaults(handler=_process)
    # internal: the capture's child process (XLA's dump flags are process-wide)
    sub.add_parser("_worker").add_argument("names", nargs="+")
    sub.choices["_worker"].set_defaults(handler=_capture_worker)
    # internal: the TPU capture's child process (libtpu; XLA's dump flags)
    tw = sub.add_parser("_tpu_worker")
    tw.add_argument("names", nargs="+")
    tw.add_argument("--topology", required=True)
    tw.add_argument("--texts", required=True)
    tw.set_defaults(handler=_tpu_worker)
    # internal: the one-process reference of `train --processes N`, on 8 devices
    sub.add_parser("_reference").add_argument("name")
    sub.choices["_reference"].set_defaults(handler=_reference)
    return parser


def main(argv=None):
    """`python -m shardbook.hlo COMMAND`: list, capture, compare, run and
    train the fixtures and schemes (see --help); a refused input or a
    failed worker is one line on stderr and exit code 2."""
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return args.handler(args, parser)
    except (ValueError, RuntimeError, TimeoutError, OSError) as exc:
        # a library's 'processes: ...' is the reader's --processes
        command = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[args.command]
        print(f"shardbook.hlo: {_cli.as_flag(command, str(exc))}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    import signal

    # a SIGTERM (`timeout`, a scheduler) ends as Ctrl-C does: the temporary folders go on the way out
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    sys.exit(main())
