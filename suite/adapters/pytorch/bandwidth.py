"""The STREAM triad ``a = b + s*c`` through PyTorch on its device: the memory bandwidth of an
accelerator the host-side NumPy triad (suite/membw.py) cannot reach. Counted as STREAM does
(3 arrays x 4 bytes per element), best of ``passes``, each pass timed with the framework's own
synchronisation; the values are checked (``b + s*c`` is exact with STREAM's constants)."""

from __future__ import annotations

import time

from suite.membw import B_VALUE, C_VALUE, DEFAULT_ARRAY_BYTES, SCALAR, Bandwidth, device_result


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
    return device_result("torch", name, times, n, 4, wrong, "fp32")
