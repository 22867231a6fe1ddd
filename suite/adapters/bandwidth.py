"""Device memory bandwidth through a framework: the STREAM triad ``a = b + s*c`` as one fused
kernel per pass, for the devices the host-side NumPy triad (:mod:`suite.membw`) cannot reach
(GPUs). Worker side: imports the framework it is asked for, lazily.

Counted as STREAM does (3 arrays x itemsize per element), best of ``passes``, each pass timed
with the framework's own synchronisation; the values are checked (``b + s*c`` is exact with
STREAM's constants). Arrays default to 1 GiB each, or 4x the device's L2 cache where that is
larger, capped at a quarter of the free device memory over the three arrays.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from suite.membw import B_VALUE, C_VALUE, SCALAR, Bandwidth

DEFAULT_ARRAY_BYTES = 1 << 30


def _result(
    framework: str, device: str, times: list[float], n: int, itemsize: int, wrong: int, dtype: str
) -> Bandwidth:
    if wrong:
        raise RuntimeError(f"{framework} triad on {device}: {wrong} wrong values")
    moved = 3 * itemsize * n
    ordered = sorted(times)
    best = moved / ordered[0] / 1e9
    median = moved / ordered[len(ordered) // 2] / 1e9
    source = (
        f"measured: STREAM-style triad a = b + 3*c with {framework} on {device}, {dtype}, "
        f"3 arrays x {n * itemsize / 2**20:.0f} MiB, best of {len(times)} passes "
        f"(median {median:.1f} GB/s), {3 * itemsize} bytes per element counted; values checked"
    )
    return Bandwidth(best, median, 0, n * itemsize, len(times), None, source)


def torch_triad(
    device: str = "cuda", array_bytes: int | None = None, passes: int = 20
) -> Bandwidth:
    """The triad with ``torch.add(b, c, alpha=s, out=a)`` (one kernel) on ``device``."""
    import torch

    dev = torch.device(device)
    nbytes = array_bytes or DEFAULT_ARRAY_BYTES
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        l2 = int(getattr(props, "L2_cache_size", 0) or 0)
        free, _total = torch.cuda.mem_get_info(dev)
        nbytes = min(max(nbytes, 4 * l2), free // 12)
    n = nbytes // 4
    b = torch.full((n,), B_VALUE, dtype=torch.float32, device=dev)
    c = torch.full((n,), C_VALUE, dtype=torch.float32, device=dev)
    a = torch.empty_like(b)

    def sync() -> None:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)

    torch.add(b, c, alpha=SCALAR, out=a)  # warm-up
    sync()
    times: list[float] = []
    for _ in range(passes):
        if dev.type == "cuda":
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.add(b, c, alpha=SCALAR, out=a)
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop) / 1e3)
        else:
            t0 = time.perf_counter()
            torch.add(b, c, alpha=SCALAR, out=a)
            times.append(time.perf_counter() - t0)
    wrong = int((a != B_VALUE + SCALAR * C_VALUE).sum().item())
    name = (
        torch.cuda.get_device_name(dev)
        if dev.type == "cuda"
        else f"cpu ({torch.get_num_threads()} threads)"
    )
    return _result("torch", name, times, n, 4, wrong, "fp32")


def jax_triad(array_bytes: int | None = None, passes: int = 20) -> Bandwidth:
    """The triad as one jitted XLA kernel on JAX's default device."""
    import jax
    import jax.numpy as jnp

    n = (array_bytes or DEFAULT_ARRAY_BYTES) // 4
    b = jnp.full((n,), B_VALUE, dtype=jnp.float32)
    c = jnp.full((n,), C_VALUE, dtype=jnp.float32)
    fn = jax.jit(lambda b, c: b + SCALAR * c)
    a: Any = fn(b, c).block_until_ready()
    times: list[float] = []
    for _ in range(passes):
        t0 = time.perf_counter()
        a = fn(b, c).block_until_ready()
        times.append(time.perf_counter() - t0)
    wrong = int((a != B_VALUE + SCALAR * C_VALUE).sum())
    return _result("jax", str(jax.devices()[0]), times, n, 4, wrong, "fp32")


TRIADS: dict[str, Callable[..., Bandwidth]] = {"pytorch": torch_triad, "jax": jax_triad}


def device_bandwidth(framework: str, **kwargs: Any) -> Bandwidth:
    """The triad of ``framework`` (``pytorch`` or ``jax``) on its accelerator."""
    try:
        fn = TRIADS[framework]
    except KeyError:
        raise ValueError(
            f"no device triad for {framework!r}; available: {', '.join(TRIADS)}"
        ) from None
    return fn(**kwargs)
