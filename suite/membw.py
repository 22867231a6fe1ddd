"""The host's memory bandwidth, measured: a STREAM-style triad in NumPy, run on threads.

``a[i] = b[i] + s * c[i]`` over float64 arrays far larger than the last-level cache, split
into one contiguous slice per thread (NumPy's loops release the GIL, so the threads run in
parallel) and processed in blocks that fit the L2 cache: ``a = s * c`` then ``a += b`` on a
block rereads ``a`` from cache, so memory sees what STREAM's fused loop sees. Bandwidth is
counted as STREAM does, 3 x 8 bytes per element (read b, read c, write a; the cache's
write-allocate read of ``a`` is not counted), and reported as the best of several passes.
Each thread first-touches its own slice (what matters on a multi-socket machine).

Sizes follow STREAM's rule (each array at least 4x the last-level cache) unless that would
take more than a quarter of the available memory; the record says which. The result is
verified (every checked element equals ``b + s*c`` exactly) and cached per host, CPU, core
count and thread count in ``~/.cache/dlsuite/membw.json``, like the compute peak
(:mod:`suite.cpuinfo`).

Imports NumPy only (host side and every environment).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from suite import cpuinfo

#: STREAM's scalar and initial values: never zero, and b + s*c is exact in float64
SCALAR, B_VALUE, C_VALUE = 3.0, 2.0, 0.5
#: float64 elements per block: 32 Ki elements = 256 KiB per array, the three blocks well
#: inside a 1-2 MiB L2 (the second pass over ``a`` must hit the cache)
BLOCK = 1 << 15
#: STREAM: each array at least this many times the last-level cache
LLC_FACTOR = 4
#: the arrays together take at most this share of the available memory
MEMORY_SHARE = 0.25
CACHE_VERSION = 1


@dataclass(frozen=True)
class Bandwidth:
    """A measured memory bandwidth and how it was measured."""

    gbps: float  # best pass, GB/s (10^9 bytes per second)
    median_gbps: float
    threads: int
    array_bytes: int  # bytes of each of the three arrays
    passes: int
    llc_bytes: int | None
    source: str

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def llc_bytes() -> int | None:
    """The size of the largest cache level of cpu0 (sysfs), or None where unreadable."""
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    best = None
    try:
        for index in base.glob("index*"):
            text = (index / "size").read_text().strip()
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
            digits = text[:-1] if text[-1:].isalpha() else text
            size = int(digits) * mult
            best = size if best is None else max(best, size)
    except (OSError, ValueError):
        return None
    return best


def available_bytes() -> int:
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # noqa: BLE001 - psutil missing or unreadable /proc: assume 4 GiB
        return 4 << 30


def array_size(llc: int | None = None, available: int | None = None) -> tuple[int, str]:
    """Bytes per array and why: 4x the last-level cache (STREAM), at least 64 MiB, at most a
    quarter of the available memory over the three arrays. ``llc`` None reads sysfs; 0 means
    unknown."""
    llc = llc_bytes() if llc is None else llc
    available = available_bytes() if available is None else available
    wanted = max(LLC_FACTOR * (llc or 0), 64 << 20)
    cap = int(available * MEMORY_SHARE / 3)
    if wanted <= cap:
        why = f"{LLC_FACTOR}x the last-level cache" if llc else "64 MiB (cache size unknown)"
        return wanted, why
    ratio = f"{cap / llc:.1f}x the last-level cache" if llc else "cache size unknown"
    return cap, f"capped at a quarter of the available memory ({ratio}; STREAM asks {LLC_FACTOR}x)"


def _slices(n: int, parts: int) -> list[slice]:
    step = -(-n // parts)
    return [slice(i, min(i + step, n)) for i in range(0, n, step)]


def triad(
    array_bytes: int | None = None, threads: int | None = None, passes: int = 10
) -> Bandwidth:
    """Run the triad and return its bandwidth (raises RuntimeError if a value is wrong)."""
    import numpy as np

    size_note = "given"
    if array_bytes is None:
        array_bytes, size_note = array_size()
    threads = threads or cpuinfo.usable_cores()
    n = max(array_bytes // 8, threads * BLOCK)
    a = np.empty(n)
    b = np.empty(n)
    c = np.empty(n)
    parts = _slices(n, threads)

    def first_touch(sl: slice) -> None:
        a[sl] = 0.0
        b[sl] = B_VALUE
        c[sl] = C_VALUE

    def work(sl: slice) -> None:
        for start in range(sl.start, sl.stop, BLOCK):
            blk = slice(start, min(start + BLOCK, sl.stop))
            out = a[blk]
            np.multiply(c[blk], SCALAR, out=out)
            np.add(out, b[blk], out=out)

    times: list[float] = []
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(first_touch, parts))
        list(pool.map(work, parts))  # warm-up pass: pages, threads, caches
        for _ in range(passes):
            t0 = time.perf_counter()
            list(pool.map(work, parts))
            times.append(time.perf_counter() - t0)
    expected = B_VALUE + SCALAR * C_VALUE
    check = np.concatenate([a[:: max(1, n // 100_000)], a[-BLOCK:]])
    wrong = int(np.count_nonzero(check != expected))
    if wrong:
        raise RuntimeError(f"triad: {wrong} of {check.size} checked elements are not {expected}")
    moved = 3 * 8 * n
    best = moved / min(times) / 1e9
    median = moved / sorted(times)[len(times) // 2] / 1e9
    llc = llc_bytes()
    source = (
        f"measured: STREAM-style triad a = b + 3*c in NumPy float64, {threads} threads, "
        f"3 arrays x {n * 8 / 2**20:.0f} MiB ({size_note}), best of {passes} passes "
        f"(median {median:.1f} GB/s), 24 bytes per element counted; "
        f"{check.size} values checked"
    )
    return Bandwidth(best, median, threads, n * 8, passes, llc, source)


def _cache_path() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dlsuite"
    return base / "membw.json"


def cache_key(threads: int) -> str:
    return (
        f"{socket.gethostname()}|{cpuinfo.model_name()}|{cpuinfo.usable_cores()}|{threads}"
        f"|v{CACHE_VERSION}"
    )


def _cached(path: Path, key: str) -> Bandwidth | None:
    try:
        entry = json.loads(path.read_text()).get(key)
        return Bandwidth(**entry) if entry else None
    except (OSError, ValueError, TypeError, AttributeError):
        return None


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """One measurement at a time per cache file: two workers starting together on a fresh
    host would otherwise measure each other's traffic."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(path.with_suffix(".lock"), "w")  # noqa: SIM115 - held for the block
    except OSError:
        yield
        return
    with fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def cpu_bandwidth(threads: int | None = None, *, refresh: bool = False) -> Bandwidth:
    """The host's memory bandwidth with ``threads`` threads (all usable cores by default):
    from the cache when this host, CPU and thread count were measured before, else measured
    now (a few seconds) and cached."""
    threads = threads or cpuinfo.usable_cores()
    key = cache_key(threads)
    path = _cache_path()
    if not refresh and (hit := _cached(path, key)) is not None:
        return hit
    with _locked(path):
        if not refresh and (hit := _cached(path, key)) is not None:
            return hit  # measured by another process while this one waited
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        result = triad(threads=threads)
        result = replace(result, source=f"{result.source}; load average {load:.2f} before")
        _store(path, key, result)
    return result


def _store(path: Path, key: str, result: Bandwidth) -> None:
    doc: dict[str, object]
    try:
        doc = json.loads(path.read_text()) if path.exists() else {}
        if not isinstance(doc, dict):
            doc = {}
    except (OSError, ValueError):
        doc = {}
    doc[key] = result.to_dict()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(doc, indent=1))
        tmp.replace(path)
    except OSError:
        pass  # read-only home (containers): measure again next time


#: ``off`` skips the measurement; a number (GB/s) is used as the host's bandwidth
ENV = "DLSUITE_MEMBW"


def device_extra() -> dict[str, object]:
    """What a CPU record's ``device`` block carries about memory bandwidth:
    ``peak_bandwidth_gbps`` (the roofline's memory roof) and ``peak_bandwidth_source``; where
    the measurement fails or is switched off (``DLSUITE_MEMBW=off``), only the source, saying
    why. ``DLSUITE_MEMBW=<GB/s>`` declares the value instead of measuring it."""
    setting = os.environ.get(ENV, "").strip()
    if setting.lower() == "off":
        return {"peak_bandwidth_source": f"not measured: {ENV}=off"}
    if setting:
        try:
            value = float(setting)
            if not value > 0:
                raise ValueError
        except ValueError:
            return {
                "peak_bandwidth_source": f"not measured: {ENV}={setting!r} is not a positive number"
            }
        return {
            "peak_bandwidth_gbps": value,
            "peak_bandwidth_source": f"configured: {ENV}={setting}",
        }
    try:
        bw = cpu_bandwidth()
    except (MemoryError, RuntimeError, OSError) as exc:
        return {"peak_bandwidth_source": f"not measured: {type(exc).__name__}: {exc}"}
    return {"peak_bandwidth_gbps": round(bw.gbps, 3), "peak_bandwidth_source": bw.source}


# -- a framework's triad on its device (the adapters' memory_bandwidth) ---------------------

#: bytes of each array of a device triad (or 4x the device's L2 cache where that is larger)
DEFAULT_ARRAY_BYTES = 1 << 30


def device_result(
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
