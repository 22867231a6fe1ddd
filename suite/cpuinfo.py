"""CPU description and its peak FLOP rate.

Two figures exist: an *estimate* from the ISA (cores x clock x FLOP/cycle) and a *measurement*
(the best of several large fp32 GEMMs through NumPy's BLAS — framework-neutral). Virtual
machines report the base clock while cores boost above it, so the estimate alone can sit below
what a framework achieves; the peak used for "% of peak" is the larger of the two, and the
record's ``peak_source`` says which it was. A site can override it (``[device] peak_tflops``).
The measurement takes about a second and is cached per host, CPU and usable core count in
~/.cache/dlsuite (one entry per key, under a lock).

Every CPU fact the suite reads (model name, vendor, ISA flags, clock) comes from one source,
:func:`cpu_facts`: ``/proc/cpuinfo``, or the file named by ``DLSUITE_CPUINFO`` (same format),
so the whole test suite can run as if on another CPU (``make test CPUINFO=tests/cpus/...``).
What the frameworks themselves decide from the real CPU (oneDNN's kernels, TensorFlow's bf16
path) is not changed by it: the adapters ask the framework, never this module.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CPUINFO_VAR = "DLSUITE_CPUINFO"


def cpuinfo_source() -> str:
    """Where the CPU facts are read from: ``DLSUITE_CPUINFO`` when set, else /proc/cpuinfo."""
    return os.environ.get(CPUINFO_VAR) or "/proc/cpuinfo"


def cpu_facts() -> dict[str, str]:
    """The first processor block of :func:`cpuinfo_source` (``model name``, ``vendor_id``,
    ``flags``, ``cpu MHz``...). An injected file that cannot be read is an error, not a
    silent fall-back to the real CPU."""
    source = cpuinfo_source()
    if source != "/proc/cpuinfo":
        try:
            text = Path(source).read_text()
        except OSError as exc:
            raise RuntimeError(f"{CPUINFO_VAR}={source}: cannot read it ({exc})") from None
        return _parse(text)
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    return _parse(text)


def injected() -> bool:
    """Whether the CPU facts come from ``DLSUITE_CPUINFO`` instead of this machine."""
    return cpuinfo_source() != "/proc/cpuinfo"


def flags() -> set[str]:
    return set(cpu_facts().get("flags", "").split())


def vendor() -> str:
    return cpu_facts().get("vendor_id", "")


def _parse(text: str) -> dict[str, str]:
    info: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            break  # first processor block is enough
        key, _, value = line.partition(":")
        info[key.strip()] = value.strip()
    return info


def model_name() -> str:
    return cpu_facts().get("model name") or platform.processor() or platform.machine()


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _max_ghz(info: dict[str, str]) -> tuple[float | None, str]:
    p = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    try:
        if not injected():  # an injected CPU's clock is its own cpu MHz line
            return int(p.read_text()) / 1e6, "cpufreq max"
    except (OSError, ValueError):
        pass
    try:
        return float(info["cpu MHz"]) / 1e3, "/proc/cpuinfo cpu MHz"
    except (KeyError, ValueError):
        return None, ""


@dataclass(frozen=True)
class PeakEstimate:
    tflops: dict[str, float]
    source: str


def fp32_flops_per_cycle(flags: set[str], vendor: str) -> int:
    """FP32 FLOP per cycle per core from the vector ISA (2 FMA pipes assumed where present)."""
    if "avx512f" in flags:
        # AMD Zen 4 executes AVX-512 on two 256-bit FMA pipes; Intel server cores have two 512-bit.
        return 32 if vendor == "AuthenticAMD" else 64
    if "avx2" in flags and "fma" in flags:
        return 32
    if "avx" in flags:
        return 16
    if platform.machine() in ("aarch64", "arm64"):
        return 16  # 2x 128-bit NEON FMA, conservative
    return 8


def estimate_peak() -> PeakEstimate:
    info = cpu_facts()
    isa = set(info.get("flags", "").split())
    vendor_id = info.get("vendor_id", "")
    ghz, clock_src = _max_ghz(info)
    cores = usable_cores()
    if ghz is None:
        return PeakEstimate({}, "unknown: no clock frequency readable")
    per_cycle = fp32_flops_per_cycle(isa, vendor_id)
    fp32 = cores * ghz * per_cycle / 1e3
    peaks = {"fp32": fp32}
    # bf16: AMX tiles are far faster; AVX512_BF16 dot products double the fp32 rate.
    if "amx_bf16" in isa:
        peaks["bf16"] = cores * ghz * 1024 / 1e3
    elif "avx512_bf16" in isa:
        peaks["bf16"] = 2 * fp32
    else:
        peaks["bf16"] = fp32  # converted to fp32 and computed there
    peaks["fp16"] = (
        cores * ghz * 1024 / 1e3
        if "amx_fp16" in isa
        else (2 * fp32 if "avx512_fp16" in isa else fp32)
    )
    src = (
        f"estimated: {cores} cores x {ghz:.2f} GHz ({clock_src}) x {per_cycle} fp32 FLOP/cycle "
        f"(from ISA flags); not measured"
    )
    return PeakEstimate(peaks, src)


@dataclass(frozen=True)
class GemmMeasurement:
    tflops: float
    #: cores of this process's CPUs other processes kept busy while it ran (None: not known)
    other_cores: float | None
    #: the most of them the quiet check allows (None: not known)
    busy_limit: float | None = None

    @property
    def contended(self) -> bool:
        """Whether other processes took more than the quiet check allows (a lower rate)."""
        if self.other_cores is None or self.busy_limit is None:
            return False
        return self.other_cores > self.busy_limit


#: the quiet check's CPU window (suite.telemetry.host.CpuWindow of this process) and its limit
#: of other processes' cores, given by the caller: this module sits below telemetry
CpuWatch = tuple[Callable[[], Any], float]


def measure_fp32_gemm(
    n: int = 2048, repeats: int = 5, watch: CpuWatch | None = None
) -> GemmMeasurement:
    """Best fp32 GEMM rate of NumPy's BLAS on seeded random (never zero) operands, with how
    busy other processes kept this process's cores meanwhile (``watch``: the quiet check's CPU
    window): a rate taken beside other work is a floor, not the machine's peak."""
    import numpy as np

    window = watch[0]() if watch is not None else None
    if window is not None:
        window.start()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    a @ b  # warm-up: threads, pages
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    other = float(window.finish()["other_cores"]) if window is not None else None
    return GemmMeasurement(2.0 * n**3 / best / 1e12, other, watch[1] if watch else None)


#: a contended measurement is taken again after this long (not at every task of a busy run)
REMEASURE_AFTER_S = 600.0
#: quiet measurements, each at least REMEASURE_AFTER_S after the last, before a peak is kept
#: without measuring again
QUIET_TO_SETTLE = 2


def _cache_path() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "dlsuite"
    return base / "cpu-peak.json"


def peak(watch: CpuWatch | None = None) -> PeakEstimate:
    """The CPU peak used for % of peak: max(ISA estimate, measured NumPy fp32 GEMM), per dtype.
    Without ``watch`` a measurement's contention is not known (taken as quiet)."""
    est = estimate_peak()
    key = f"{socket.gethostname()}|{model_name()}|{usable_cores()}"
    measured, note = _cached_measurement(key, _cache_path(), watch)
    est_fp32 = est.tflops.get("fp32", 0.0)
    if measured <= est_fp32:
        return PeakEstimate(
            est.tflops,
            est.source + f"; NumPy fp32 GEMM measured {measured * 1e3:.1f} GFLOP/s" + note,
        )
    factor = measured / est_fp32 if est_fp32 else 1.0
    scaled = {k: v * factor for k, v in est.tflops.items()} if est_fp32 else {"fp32": measured}
    return PeakEstimate(
        scaled,
        f"measured: NumPy fp32 GEMM 2048^3 best of 5 = {measured * 1e3:.1f} GFLOP/s{note}, "
        f"above the ISA estimate ({est.source}); bf16/fp16 scaled by the ISA ratios",
    )


def _read_entries(path: Path) -> dict[str, dict[str, Any]]:
    """The cache's entries by key (host|CPU|usable cores); an unreadable file holds none."""
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(loaded, dict):
        return {}
    # the suite before entries by key wrote one entry with its key inside
    raw = loaded.get("entries", {loaded.get("key"): loaded})
    entries: dict[str, dict[str, Any]] = {}
    for k, e in raw.items() if isinstance(raw, dict) else ():
        try:
            float(e["fp32_tflops"])
        except (KeyError, TypeError, ValueError):
            continue
        if isinstance(k, str):
            entries[k] = {f: v for f, v in e.items() if f != "key"}
    return entries


def _cached_measurement(key: str, path: Path, watch: CpuWatch | None) -> tuple[float, str]:
    """This key's rate from the cache, measured (and the cache updated) when it must be.

    One file holds an entry per key: a task with another key (a Slurm rank given one CPU, a
    container's host name) once replaced the file, and the next task of this key, finding no
    entry, kept a rate measured beside `make test` (0.123 TFLOP/s where 0.254 runs quiet).
    Read, measure and write happen under an exclusive lock, so concurrent tasks measure once
    and never drop each other's entries."""
    try:
        import fcntl

        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path.with_name(path.name + ".lock"), "a")  # noqa: SIM115 - held below
    except (OSError, ImportError):
        lock = None  # read-only home (containers), no fcntl: measure, keep nothing
    try:
        if lock is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        entries = _read_entries(path)
        entry, rate, note = _settled_measurement(entries.get(key, {}), watch)
        if lock is not None and entry is not entries.get(key):
            entries[key] = entry
            try:
                from suite.rundir import write_text_atomic

                write_text_atomic(path, json.dumps({"entries": entries}, indent=1))
            except OSError:
                pass  # read-only home: measure again next time
        return rate, note
    finally:
        if lock is not None:
            lock.close()  # releases the lock


def _settled_measurement(
    cached: dict[str, Any], watch: CpuWatch | None
) -> tuple[dict[str, Any], float, str]:
    """The entry to keep (``cached`` itself when nothing was measured), its rate and a note.

    A peak is the highest rate the machine reaches: a rate measured while other processes
    kept the cores busy (a test suite, another job) is only a floor. So the cache keeps the
    highest rate seen, and until :data:`QUIET_TO_SETTLE` measurements were quiet (``quiet``;
    ``settled`` then) a rate older than :data:`REMEASURE_AFTER_S` is measured again (an entry
    of an older suite, which did not say, too). One quiet measurement did not prove enough: a
    fresh VM's first, taken while its environments were being built and judged quiet (0.25
    other cores), settled at 0.126 TFLOP/s; the quiet VM gave 0.151 80 minutes later. The
    note says when the rate kept is not settled."""
    now = time.time()
    # an entry of the suite that settled on one quiet measurement counts it as one
    quiet = int(cached.get("quiet", 1 if cached.get("settled") else 0))
    settled = quiet >= QUIET_TO_SETTLE
    age = now - float(cached.get("measured_at") or 0.0)
    if cached and (settled or ("settled" in cached and age < REMEASURE_AFTER_S)):
        rate = float(cached["fp32_tflops"])
    else:
        m = measure_fp32_gemm(watch=watch)
        rate = max(m.tflops, float(cached.get("fp32_tflops") or 0.0))
        quiet += not m.contended
        settled = quiet >= QUIET_TO_SETTLE
        cached = {
            "fp32_tflops": rate,
            "settled": settled,
            "quiet": quiet,
            "measured_at": now,
            "other_cores": m.other_cores,
        }
    if settled:
        return cached, rate, ""
    if quiet:
        return (
            cached,
            rate,
            f" ({quiet} of the {QUIET_TO_SETTLE} quiet measurements that settle it: measured "
            f"again after {REMEASURE_AFTER_S / 60:.0f} min, the highest rate kept)",
        )
    other = cached.get("other_cores")
    return (
        cached,
        rate,
        (
            " (measured while other processes kept "
            + (f"{float(other):.2f} cores" if other is not None else "the cores")
            + " busy: a floor, measured again until the machine is quiet)"
        ),
    )
