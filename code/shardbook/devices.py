"""Give JAX N simulated CPU devices before it initialises.

Every chapter's first code cell calls :func:`use_cpu_devices`. XLA reads the
device-count flag once, when the first backend starts, so the call must come
before anything asks JAX for devices.
"""

import os
import re

FLAG = "--xla_force_host_platform_device_count"


def xla_flags_with_device_count(flags, n_devices):
    """`flags` (an XLA_FLAGS string) with the device-count flag set to n."""
    kept = re.sub(rf"{FLAG}=\S+", "", flags or "").split()
    return " ".join(kept + [f"{FLAG}={n_devices}"])


def use_cpu_devices(n_devices=8):
    """Make JAX run on `n_devices` simulated CPU devices; returns jax.devices().

    Raises RuntimeError when JAX already started with another platform or
    fewer devices (restart the kernel and run this cell first)."""
    if not isinstance(n_devices, int) or isinstance(n_devices, bool) or n_devices < 1:
        raise ValueError(f"n_devices: must be an integer >= 1, got {n_devices!r}")
    os.environ["XLA_FLAGS"] = xla_flags_with_device_count(os.environ.get("XLA_FLAGS", ""), n_devices)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    devices = jax.devices()
    if devices[0].platform != "cpu" or len(devices) < n_devices:
        raise RuntimeError(
            f"JAX already initialised with {len(devices)} {devices[0].platform} device(s); "
            f"this book needs {n_devices} CPU devices. Restart the kernel and run this cell "
            f"before anything else imports or uses JAX (or export XLA_FLAGS={FLAG}={n_devices})."
        )
    return devices[:n_devices]


def usable_cores():
    """How many CPU cores this process may run on (its affinity, where the
    platform has one; else every core)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def hold_to_core(index):
    """Hold this process to one core, the `index`-th (from 0) of those it may
    run on, so that the thread pools JAX creates when it starts have one
    thread; returns that core's number. Call it before anything asks JAX for
    devices.

    Raises ValueError for an index outside the cores available, and
    RuntimeError where the platform cannot hold a process to a core
    (os.sched_setaffinity is Linux's)."""
    available = usable_cores()
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < available:
        raise ValueError(f"core: must be an integer from 0 to {available - 1} (the cores available), got {index!r}")
    if not hasattr(os, "sched_setaffinity"):
        raise RuntimeError("core: this platform cannot hold a process to one of its cores (no sched_setaffinity)")
    core = sorted(os.sched_getaffinity(0))[index]
    os.sched_setaffinity(0, {core})
    return core


def environment_report():
    """Versions and devices, as rows of (item, value) for the introduction."""
    import platform

    import jax
    import jaxlib

    devices = jax.devices()
    return [
        ("Python", platform.python_version()),
        ("jax", jax.__version__),
        ("jaxlib", jaxlib.__version__),
        ("platform", devices[0].platform),
        ("devices", str(len(devices))),
        ("device ids", ", ".join(str(d.id) for d in devices)),
    ]
