"""Measure one TPU chip: BF16 matmul throughput over the shapes the book's
meshes produce, HBM bandwidth, and the small model's training step.

``python -m shardbook.programs.measure --out FILE`` (``make measure``) runs
on a host with a TPU and writes one JSON file: the provenance (chip kind,
JAX, jaxlib and libtpu versions, date, command) and every measurement with
its shape and units in the names. Without a TPU it refuses in one line and
exits 2; nothing in the book or its tests needs the chip, they read the
committed file.

How a time is taken. Each program is compiled and run twice to warm up.
Then, for each of ``repeats`` trials, the same call is dispatched
``n_calls`` times back to back and the last result waited for
(block_until_ready): the chip runs the calls one after another, so the
trial's wall clock over ``n_calls`` is the time of one call on the chip,
as long as the host dispatches calls faster than the chip finishes them
(``n_calls`` is chosen so that a trial holds about 20 ms of work at the
chip's peak). The median over the trials is reported (``time_s``). Each
call is also timed alone, dispatched and waited for (``blocked_time_s``,
the median of ``repeats``), which adds the round trip from host to chip.

The host's dispatch sets a floor under both: ``dispatch`` records the
pipelined and the blocked time of a trivial program (a scalar add). On
the v5e host of this book's measurement (data/measured_tpu_v5e.json) a
call could not be dispatched in much under 0.12 ms and a round trip took
about 0.6 ms, so a matmul whose ``time_s`` is near that floor was faster
on the chip than it reads: its FLOP/s is a lower bound (see
shardbook.matmul_efficiency, which leaves such points out of its fit).
"""

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from .. import models

# What the chip's datasheet says, to size the trials (not used in any result).
_PEAK_FLOPS_PER_S = 197e12
_PEAK_HBM_BYTES_PER_S = 819e9
TRIAL_WORK_S = 0.02
MAX_CALLS = 400

SQUARES = (1024, 2048, 4096, 8192, 16384)
TP_DEGREES = (1, 2, 4, 8, 16, 32)
TP_MODELS = ("LLaMA-3 70B", "LLaMA-3 8B")
# Tokens per device of a microbatch (one 8,192-token sequence, or fewer)
TOKENS_PER_DEVICE = 8192
SMALL_TOKENS = (128, 256, 512, 1024, 2048, 4096)
HBM_SIZES_BYTES = (2**26, 2**28, 2**30)
# MoE: the experts one device holds and the tokens each receives. A device
# with E_local experts and T tokens routed to it runs one grouped matmul of
# E_local groups; expert parallelism raises the tokens per expert, pure FSDP
# (every expert on every device) lowers them.
MOE_MODELS = ("DeepSeek-V2-Lite", "Mixtral 8x7B")
MOE_LOCAL_EXPERTS = 8
MOE_TOKENS_PER_EXPERT = (64, 128, 256, 512, 1024, 2048, 4096, 8192)
PERMUTE_TOKENS = (4096, 16384, 65536)


class NoTPU(RuntimeError):
    """No TPU is visible to JAX on this host."""


def projections(model_name, n_tp, tokens=TOKENS_PER_DEVICE):
    """The four matmuls of one layer of `model_name` on one device under
    tensor parallelism of degree `n_tp` (Megatron's split): (label, M, K, N)
    with M tokens, K the contraction. The MLP's gate and up projections are
    each [D, F/y]; the down projection [F/y, D]; attention's fused QKV
    [D, (H + 2·KV)·hd / y]; its output projection [H·hd / y, D]."""
    m = models.get(model_name)
    qkv = (m.n_heads + 2 * m.n_kv_heads) * m.head_dim
    out = []
    for name, k, n in (
        ("mlp_up", m.d_model, m.d_ff // n_tp),
        ("mlp_down", m.d_ff // n_tp, m.d_model),
        ("attn_qkv", m.d_model, qkv // n_tp),
        ("attn_out", m.n_heads * m.head_dim // n_tp, m.d_model),
    ):
        out.append((f"{model_name} {name}, TP {n_tp}", tokens, k, n))
    return out


def matmul_shapes(quick=False):
    """Every (label, M, K, N) of the sweep; `quick`: a handful, small."""
    if quick:
        return [("square 1024", 1024, 1024, 1024), ("LLaMA-3 8B mlp_up, TP 32, 256 tokens", 256, 4096, 448)]
    shapes = [(f"square {s}", s, s, s) for s in SQUARES]
    for name in TP_MODELS:
        for y in TP_DEGREES:
            shapes += projections(name, y)
    d, f = models.get("LLaMA-3 70B").d_model, models.get("LLaMA-3 70B").d_ff
    for tokens in SMALL_TOKENS:
        shapes.append((f"{tokens} tokens x {d} x {d}", tokens, d, d))
        shapes.append((f"LLaMA-3 70B mlp_up, TP 8, {tokens} tokens", tokens, d, f // 8))
    return shapes


def _n_calls(estimate_s):
    return max(3, min(MAX_CALLS, math.ceil(TRIAL_WORK_S / estimate_s)))


def _time(fn, args, n_calls, repeats):
    """(median pipelined seconds per call, its trials, median blocked seconds)."""
    import jax

    for _ in range(2):
        jax.block_until_ready(fn(*args))
    trials = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(n_calls):
            out = fn(*args)
        jax.block_until_ready(out)
        trials.append((time.perf_counter() - start) / n_calls)
    blocked = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        blocked.append(time.perf_counter() - start)
    return statistics.median(trials), trials, statistics.median(blocked)


def measure_matmul(label, m, k, n, repeats):
    """One BF16 matmul [M, K]·[K, N] -> [M, N] (BF16 out, float32
    accumulation), timed both ways of the module's docstring."""
    import jax
    import jax.numpy as jnp

    key_a, key_b = jax.random.split(jax.random.key(0))
    a = jax.random.normal(key_a, (m, k), jnp.bfloat16)
    b = jax.random.normal(key_b, (k, n), jnp.bfloat16)
    fn = jax.jit(lambda a, b: a @ b)
    flops = 2 * m * k * n
    bytes_moved = 2 * (m * k + k * n + m * n)
    estimate_s = max(flops / _PEAK_FLOPS_PER_S, bytes_moved / _PEAK_HBM_BYTES_PER_S)
    n_calls = _n_calls(estimate_s)
    time_s, trials, blocked_s = _time(fn, (a, b), n_calls, repeats)
    del a, b
    return {
        "label": label,
        "m": m,
        "k": k,
        "n": n,
        "flops": flops,
        "min_hbm_bytes": bytes_moved,
        "n_calls_per_trial": n_calls,
        "time_s": time_s,
        "trial_times_s": trials,
        "flops_per_s": flops / time_s,
        "blocked_time_s": blocked_s,
        "blocked_flops_per_s": flops / blocked_s,
    }


def grouped_shapes(quick=False):
    """(label, model, local experts, tokens per expert, K, N): the MLP's
    first projection (d_model -> the expert's d_ff) of each MoE model."""
    shapes = []
    for name in MOE_MODELS[:1] if quick else MOE_MODELS:
        m = models.get(name)
        for tokens in MOE_TOKENS_PER_EXPERT[2:4] if quick else MOE_TOKENS_PER_EXPERT:
            label = f"{name} expert up, {MOE_LOCAL_EXPERTS} experts x {tokens} tokens"
            shapes.append((label, name, MOE_LOCAL_EXPERTS, tokens, m.d_model, m.d_ff))
    return shapes


def measure_grouped(label, model_name, n_groups, tokens_per_group, k, n, repeats):
    """The same grouped matmul two ways: jax.lax.ragged_dot over the
    tokens sorted by expert ([G·T, K] · [G, K, N], equal group sizes), and a
    batched einsum of the padded layout ([G, T, K] · [G, K, N], what a
    capacity-padded dispatch runs); a dense [G·T, K] · [K, N] of the same
    FLOPs gives the reference."""
    import jax
    import jax.numpy as jnp

    key_a, key_b = jax.random.split(jax.random.key(0))
    m_total = n_groups * tokens_per_group
    x = jax.random.normal(key_a, (m_total, k), jnp.bfloat16)
    w = jax.random.normal(key_b, (n_groups, k, n), jnp.bfloat16)
    sizes = jnp.full((n_groups,), tokens_per_group, jnp.int32)
    flops = 2 * m_total * k * n
    bytes_moved = 2 * (m_total * k + n_groups * k * n + m_total * n)
    n_calls = _n_calls(max(flops / _PEAK_FLOPS_PER_S, bytes_moved / _PEAK_HBM_BYTES_PER_S))
    row = {
        "label": label,
        "model": model_name,
        "n_groups": n_groups,
        "tokens_per_group": tokens_per_group,
        "k": k,
        "n": n,
        "flops": flops,
        "min_hbm_bytes": bytes_moved,
        "n_calls_per_trial": n_calls,
    }
    programs = (
        ("ragged_dot", jax.jit(lambda x, w, g: jax.lax.ragged_dot(x, w, g)), (x, w, sizes)),
        (
            "batched_einsum",
            jax.jit(lambda x, w: jnp.einsum("gtk,gkn->gtn", x.reshape(n_groups, tokens_per_group, k), w)),
            (x, w),
        ),
        ("dense_same_flops", jax.jit(lambda x, w: x @ w[0]), (x, w)),
    )
    for kind, fn, args in programs:
        time_s, trials, blocked_s = _time(fn, args, n_calls, repeats)
        row[f"{kind}_time_s"] = time_s
        row[f"{kind}_trial_times_s"] = trials
        row[f"{kind}_flops_per_s"] = flops / time_s
        row[f"{kind}_blocked_time_s"] = blocked_s
    del x, w
    return row


def measure_permute(n_tokens, d_model, top_k, repeats):
    """The dispatch's data movement on one device: each token copied top_k
    times into expert order (argsort of the routing, then a gather), and
    back (a scatter-add of the top_k copies). Both are memory-bound."""
    import jax
    import jax.numpy as jnp

    key_x, key_e = jax.random.split(jax.random.key(2))
    x = jax.random.normal(key_x, (n_tokens, d_model), jnp.bfloat16)
    expert = jax.random.randint(key_e, (n_tokens * top_k,), 0, 64, jnp.int32)

    def permute(x, expert):
        order = jnp.argsort(expert)
        return jnp.take(x, order // top_k, axis=0), order

    def unpermute(y, order):
        return jnp.zeros((n_tokens, d_model), y.dtype).at[order // top_k].add(y)

    permute_fn = jax.jit(permute)
    unpermute_fn = jax.jit(unpermute)
    y, order = permute_fn(x, expert)
    routed_bytes = 2 * n_tokens * top_k * d_model
    row = {"n_tokens": n_tokens, "d_model": d_model, "top_k": top_k, "routed_activation_bytes": routed_bytes}
    for kind, fn, args in (("permute", permute_fn, (x, expert)), ("unpermute", unpermute_fn, (y, order))):
        n_calls = _n_calls(2 * routed_bytes / _PEAK_HBM_BYTES_PER_S)
        time_s, trials, blocked_s = _time(fn, args, n_calls, repeats)
        row[f"{kind}_n_calls_per_trial"] = n_calls
        row[f"{kind}_time_s"] = time_s
        row[f"{kind}_trial_times_s"] = trials
        row[f"{kind}_blocked_time_s"] = blocked_s
        # bytes the pass must move at least: read and write the routed copies
        row[f"{kind}_min_bytes_per_s"] = 2 * routed_bytes / time_s
    del x, y
    return row


def measure_hbm(size_bytes, repeats):
    """Streaming: a scaled copy y = 2·x of `size_bytes` of float32 (reads
    and writes it: 2·size bytes) and a sum of it (reads it once)."""
    import jax
    import jax.numpy as jnp

    x = jax.random.normal(jax.random.key(1), (size_bytes // 4,), jnp.float32)
    out = []
    for kind, fn, moved in (
        ("copy_scaled", jax.jit(lambda x: 2 * x), 2 * size_bytes),
        ("sum", jax.jit(lambda x: jnp.sum(x)), size_bytes),
    ):
        n_calls = _n_calls(moved / _PEAK_HBM_BYTES_PER_S)
        time_s, trials, blocked_s = _time(fn, (x,), n_calls, repeats)
        out.append(
            {
                "kind": kind,
                "array_bytes": size_bytes,
                "hbm_bytes": moved,
                "n_calls_per_trial": n_calls,
                "time_s": time_s,
                "trial_times_s": trials,
                "hbm_bytes_per_s": moved / time_s,
                "blocked_time_s": blocked_s,
            }
        )
    del x
    return out


def measure_training_step(scheme_name, n_steps):
    """The book's small model (shardbook.programs.model) trained on one chip
    under `scheme_name` ('single' or 'single_moe'), as chapter 8's runs
    train it (shardbook.programs.runs.run: float32, each step waited for;
    the median step after the first)."""
    import jax

    from . import runs

    record = runs.run(scheme_name, n_steps=n_steps, devices=jax.devices()[:1])
    return {
        "scheme": record["scheme"],
        "n_steps": n_steps,
        "step_s": record["step_s"],
        "compile_s": record["compile_s"],
        "flops_per_step": record["flops_per_device"],
        "flops_per_s": record["flops_per_device"] / record["step_s"],
        "first_loss": record["losses"][0],
        "last_loss": record["losses"][-1],
        "argument_bytes": record["memory"]["argument_bytes"],
        "temporary_bytes": record["memory"]["temporary_bytes"],
    }


def _dispatch_floor(repeats):
    """The round trip of a trivial program (a scalar add), blocked per call."""
    import jax
    import jax.numpy as jnp

    fn = jax.jit(lambda x: x + 1)
    x = jnp.float32(0)
    _, _, blocked_s = _time(fn, (x,), 50, repeats)
    pipelined_s, _, _ = _time(fn, (x,), 200, 3)
    return {"blocked_time_s": blocked_s, "pipelined_time_s": pipelined_s}


def _libtpu_version():
    from importlib import metadata

    for dist in ("libtpu", "libtpu-nightly"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return None


def provenance(argv):
    """Who measured what, with what: the chip, the software, the date."""
    import jax
    import jaxlib

    device = jax.devices()[0]
    stats = {}
    try:
        stats = device.memory_stats() or {}
    except Exception:  # noqa: BLE001 - not every backend reports memory
        stats = {}
    client = getattr(device, "client", None)
    return {
        "device_kind": device.device_kind,
        "platform": device.platform,
        "n_devices": jax.device_count(),
        "memory_bytes_limit": stats.get("bytes_limit"),
        "jax_version": jax.__version__,
        "jaxlib_version": jaxlib.__version__,
        "libtpu_version": _libtpu_version(),
        "platform_version": getattr(client, "platform_version", None),
        "python_version": platform.python_version(),
        "host_cpus": os.cpu_count(),
        "date_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": "python -m shardbook.programs.measure " + " ".join(argv),
        "method": (
            "median over trials; a trial dispatches the same jitted call n_calls_per_trial times back to back "
            "and waits for the last (block_until_ready); two warm-up calls first. blocked_*: each call waited "
            "for alone (the host-chip round trip included)."
        ),
    }


def _require_tpu(allow_cpu):
    try:
        import jax
    except ImportError:
        raise NoTPU("jax is not installed in this Python") from None
    try:
        platform_name = jax.devices()[0].platform
    except RuntimeError as error:
        raise NoTPU(f"JAX found no device ({str(error).splitlines()[0]})") from None
    if platform_name != "tpu" and not allow_cpu:
        raise NoTPU(f"JAX's devices are {platform_name}, not tpu")


def write_json(path, data):
    """Write `data` to `path` through a temporary file renamed into place."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


SECTIONS = ("dense", "moe")


def measure_moe(data, quick, repeats, log):
    """Grouped matmuls by tokens per expert, and the permute/unpermute passes."""
    data["grouped_matmul_bf16"] = []
    for label, name, groups, tokens, k, n in grouped_shapes(quick):
        row = measure_grouped(label, name, groups, tokens, k, n, repeats)
        data["grouped_matmul_bf16"].append(row)
        log(
            f"  {label:55s} ragged_dot {row['ragged_dot_flops_per_s'] / 1e12:6.1f}, batched "
            f"{row['batched_einsum_flops_per_s'] / 1e12:6.1f}, dense {row['dense_same_flops_flops_per_s'] / 1e12:6.1f} TFLOP/s"
        )
    data["permute"] = []
    m = models.get(MOE_MODELS[0])
    for tokens in PERMUTE_TOKENS[:1] if quick else PERMUTE_TOKENS:
        row = measure_permute(tokens, m.d_model, m.top_k, repeats)
        data["permute"].append(row)
        log(
            f"  permute {tokens} tokens x top {m.top_k}: {row['permute_time_s'] * 1e3:.3f} ms, "
            f"unpermute {row['unpermute_time_s'] * 1e3:.3f} ms"
        )
    return data


def measure(argv, quick=False, repeats=20, n_steps=20, log=print, section="dense"):
    """The measurements of `section` ('dense': matmuls, HBM, the small
    model's step; 'moe': grouped matmuls and the dispatch's permutes), as
    the dict the data file holds."""
    if section not in SECTIONS:
        raise ValueError(f"section: must be one of {', '.join(SECTIONS)}, got {section!r}")
    data = {"provenance": provenance(argv), "dispatch": _dispatch_floor(repeats)}
    log(f"measuring on {data['provenance']['device_kind']} (JAX {data['provenance']['jax_version']})")
    if section == "moe":
        return measure_moe(data, quick, repeats, log)
    data["matmul_bf16"] = []
    for label, m, k, n in matmul_shapes(quick):
        row = measure_matmul(label, m, k, n, repeats)
        data["matmul_bf16"].append(row)
        log(
            f"  {label:45s} {m}x{k}x{n}: {row['flops_per_s'] / 1e12:7.1f} TFLOP/s ({row['blocked_flops_per_s'] / 1e12:.1f} blocked)"
        )
    data["hbm"] = []
    for size in HBM_SIZES_BYTES[:1] if quick else HBM_SIZES_BYTES:
        for row in measure_hbm(size, repeats):
            data["hbm"].append(row)
            log(f"  HBM {row['kind']:12s} {size / 2**20:6.0f} MiB: {row['hbm_bytes_per_s'] / 1e9:6.1f} GB/s")
    data["training_step"] = []
    for scheme in ("single",) if quick else ("single", "single_moe"):
        row = measure_training_step(scheme, n_steps)
        data["training_step"].append(row)
        log(f"  small model {scheme}: {row['step_s'] * 1e3:.2f} ms per step, {row['flops_per_s'] / 1e12:.3f} TFLOP/s")
    return data


def main(argv=None):
    """The command line (``python -m shardbook.programs.measure --out FILE``);
    returns the exit status: 0, or 2 with one line when there is no TPU or
    an argument is bad."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m shardbook.programs.measure", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="the JSON file to write (temporary file, then renamed)")
    parser.add_argument("--quick", action="store_true", help="a few small shapes and 3 repeats (a smoke test)")
    parser.add_argument("--repeats", type=int, default=20, help="trials per measurement (the median is kept)")
    parser.add_argument("--allow-cpu", action="store_true", help="run on a CPU (tests of the writer; never committed)")
    parser.add_argument(
        "--section",
        default="dense",
        help="dense (matmuls, HBM, the small model's step; default) or moe (grouped matmuls by tokens per expert, permutes)",
    )
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.exit(2, f"measure: --repeats must be a positive integer, got {args.repeats}\n")
    if args.section not in SECTIONS:
        parser.exit(2, f"measure: --section must be one of {', '.join(SECTIONS)}, got {args.section!r}\n")
    try:
        _require_tpu(args.allow_cpu)
    except NoTPU as error:
        print(f"measure: no TPU on this host ({error}); run it where a TPU is attached", file=sys.stderr)
        return 2
    repeats = 3 if args.quick else args.repeats
    # the command as given, the output named without its folder (no absolute path is committed)
    shown = [Path(a).name if i and argv[i - 1] == "--out" else a for i, a in enumerate(argv)]
    data = measure(shown, quick=args.quick, repeats=repeats, n_steps=5 if args.quick else 20, section=args.section)
    write_json(args.out, data)
    print(f"measure: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
