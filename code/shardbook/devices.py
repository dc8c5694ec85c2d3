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


def limit_host_cores(n_cores):
    """Hold this process to the first `n_cores` of the cores it may run on,
    so that the thread pools JAX creates when it starts are sized to them;
    returns the number of cores it may now use. Call it before anything asks
    JAX for devices.

    Raises ValueError for a count below 1 or above the cores available, and
    RuntimeError where the platform cannot hold a process to some cores
    (os.sched_setaffinity is Linux's)."""
    available = usable_cores()
    if not isinstance(n_cores, int) or isinstance(n_cores, bool) or not 1 <= n_cores <= available:
        raise ValueError(f"n_cores: must be an integer from 1 to {available} (the cores available), got {n_cores!r}")
    if not hasattr(os, "sched_setaffinity"):
        raise RuntimeError("n_cores: this platform cannot hold a process to some of its cores (no sched_setaffinity)")
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:n_cores])
    return usable_cores()


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
