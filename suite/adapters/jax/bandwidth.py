"""The STREAM triad ``a = b + s*c`` through JAX on its device: the memory bandwidth of an
accelerator the host-side NumPy triad (suite/membw.py) cannot reach. Counted as STREAM does
(3 arrays x 4 bytes per element), best of ``passes``, each pass timed with the framework's own
synchronisation; the values are checked (``b + s*c`` is exact with STREAM's constants)."""

from __future__ import annotations

import time
from typing import Any

from suite.membw import B_VALUE, C_VALUE, DEFAULT_ARRAY_BYTES, SCALAR, Bandwidth, device_result


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
    return device_result("jax", str(jax.devices()[0]), times, n, 4, wrong, "fp32")
