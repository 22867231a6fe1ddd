"""CPU description and its peak FLOP rate.

Two figures exist: an *estimate* from the ISA (cores x clock x FLOP/cycle) and a *measurement*
(the best of several large fp32 GEMMs through NumPy's BLAS — framework-neutral). The clock of
the estimate is measured on x86-64 (a chain of dependent integer adds on every usable core at
once, :func:`measure_clock_ghz`): virtual machines report the base clock in /proc/cpuinfo
while their cores run at the boost clock, and the project's Zen 5 VM reports 2.60 GHz where
its cores run at 4.1. Elsewhere the clock is cpufreq's maximum, else /proc/cpuinfo's. The
peak used for "% of peak" is the larger of the two figures, and the record's ``peak_source``
says which it was. A site can override it (``[device] peak_tflops``). The measurements take
about a second and are cached per host, CPU and usable core count in ~/.cache/dlsuite (one
entry per key, under a lock).

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


def peak_cores() -> tuple[int, str]:
    """The physical cores among the usable CPUs, which the peak counts (the SMT threads of a
    core share its FMA pipes), and, where fewer than the usable CPUs, how they were told apart:
    distinct ``thread_siblings_list`` in sysfs; for an injected CPU, or without sysfs, the
    usable CPUs scaled by its ``cpu cores`` / ``siblings``. A 2-way SMT node counted every
    hyperthread and doubled its peak."""
    usable = usable_cores()
    if not injected():
        try:
            cpus = sorted(os.sched_getaffinity(0))
            siblings_of = {
                Path(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list")
                .read_text()
                .strip()
                for c in cpus
            }
        except (AttributeError, OSError):
            pass
        else:
            if len(siblings_of) >= usable:
                return usable, ""
            return len(siblings_of), f"of {usable} usable CPUs, SMT siblings counted once (sysfs)"
    info = cpu_facts()
    siblings, per_package = _int_field(info, "siblings"), _int_field(info, "cpu cores")
    if siblings and per_package and per_package < siblings:
        return max(1, round(usable * per_package / siblings)), (
            f"of {usable} usable CPUs, {siblings // per_package} threads per core "
            "(cpu cores / siblings)"
        )
    return usable, ""


#: adds per round of :data:`_ADD_CHAIN`
_ADDS_PER_ROUND = 16
#: x86-64 machine code of ``long f(long n, long, long k)``: n rounds of 16 dependent
#: ``add rax, rdx`` (48 01 d0; one cycle of latency each on every x86-64 core; a register
#: operand, not an immediate, which a renamer could fold), beside them ``dec rdi`` (48 ff cf)
#: and ``jnz`` back to the first add (75, an 8-bit offset from the next instruction): 16 n
#: cycles; then ``ret`` (c3)
_ADD_CHAIN = (
    bytes.fromhex("4801d0" * _ADDS_PER_ROUND + "48ffcf")
    + bytes([0x75, (-(3 * _ADDS_PER_ROUND + 3 + 2)) & 0xFF])
    + bytes.fromhex("c3")
)


def x86_64() -> bool:
    """Whether this machine runs x86-64 code (the only code :data:`_ADD_CHAIN` is)."""
    return platform.machine().lower() in ("x86_64", "amd64")


def _add_chain() -> Callable[[int], int] | None:
    """:data:`_ADD_CHAIN` in executable memory as a function of the number of rounds (the call
    releases the GIL), or None where it cannot run (not x86-64, no executable mapping)."""
    if not x86_64():
        return None
    import ctypes
    import mmap

    try:
        mem = mmap.mmap(
            -1,
            mmap.PAGESIZE,
            flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS,
            prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC,
        )
    except (OSError, ValueError, AttributeError):
        return None  # W^X policy, no mmap: no measured clock
    mem.write(_ADD_CHAIN)
    address = ctypes.addressof(ctypes.c_char.from_buffer(mem))
    run = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_long, ctypes.c_long, ctypes.c_long)(address)

    def rounds(n: int) -> int:
        return int(run(n, 0, 1))

    rounds.memory = mem  # type: ignore[attr-defined]  # the mapping lives as long as the function
    return rounds


def measure_clock_ghz(seconds: float = 0.15) -> float | None:
    """The clock the usable cores run at together, in GHz, measured: one thread per usable core
    runs :data:`_ADD_CHAIN` (its adds take one cycle each) at the same time, each keeping its
    best of several calls; the mean over the cores. None where it cannot run (not x86-64, no
    executable memory) or gives no plausible clock. Other processes on the cores make it a
    floor (the caller's quiet check says so); so does a kernel that preempts the thread."""
    import threading

    chain = _add_chain()
    if chain is None:
        return None
    chain(1000)  # the page is mapped and the code runs
    n = 200_000
    t0 = time.perf_counter()
    chain(n)
    dt = time.perf_counter() - t0
    calls = 5
    n = max(n, int(n * seconds / calls / max(dt, 1e-9)))  # calls of seconds / calls each
    cores = usable_cores()
    best = [0.0] * cores
    start = threading.Barrier(cores)

    def core(i: int) -> None:
        start.wait()
        for _ in range(calls):
            t = time.perf_counter()
            chain(n)
            best[i] = max(best[i], n * _ADDS_PER_ROUND / (time.perf_counter() - t) / 1e9)

    threads = [threading.Thread(target=core, args=(i,)) for i in range(cores)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    ghz = sum(best) / cores
    return ghz if 0.2 < ghz < 10.0 else None


def _max_ghz(info: dict[str, str]) -> tuple[float | None, str]:
    """The clock the ISA estimate uses when none was measured: cpufreq's maximum (not an
    injected CPU's), else the cpu MHz line."""
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


#: AMD family 0x1A (Zen 5) models whose AVX-512 runs on 256-bit halves: the mobile parts
#: (Strix Point 0x20-0x2F, Krackan Point 0x60-0x6F). The server (Turin 0x00-0x1F), desktop
#: (Granite Ridge 0x40-0x4F) and Strix Halo (0x70-0x7F) cores have full 512-bit FMA pipes.
ZEN5_HALF_WIDTH_MODELS = frozenset(range(0x20, 0x30)) | frozenset(range(0x60, 0x70))


def fp32_flops_per_cycle(
    flags: set[str], vendor: str, family: int | None = None, model: int | None = None
) -> int:
    """FP32 FLOP per cycle per core from the vector ISA (2 FMA pipes assumed where present).

    AVX-512: Intel server cores have two 512-bit FMA pipes (64). AMD Zen 4 (family 0x19)
    executes AVX-512 on its two 256-bit pipes, two cycles each (32); Zen 5 (family 0x1A) has two
    512-bit FMA pipes in its server and desktop cores (64) and 256-bit ones in its mobile cores
    (A. Yee, "Zen5's AVX512 Teardown", numberworld.org, 2024). On the project's Zen 5 VM
    (family 26 model 2) a probe measured 32 FLOP/cycle for 256-bit FMAs and 64 for 512-bit
    (docs/results/cpu-clock/)."""
    if "avx512f" in flags:
        if vendor != "AuthenticAMD":
            return 64
        if family is not None and family >= 0x1A and model not in ZEN5_HALF_WIDTH_MODELS:
            return 64
        return 32
    if "avx2" in flags and "fma" in flags:
        return 32
    if "avx" in flags:
        return 16
    if platform.machine() in ("aarch64", "arm64"):
        return 16  # 2x 128-bit NEON FMA, conservative
    return 8


def _int_field(info: dict[str, str], key: str) -> int | None:
    try:
        return int(info[key])
    except (KeyError, ValueError):
        return None


def estimate_peak(measured_ghz: float | None = None) -> PeakEstimate:
    """cores x clock x FLOP/cycle per dtype; the clock is ``measured_ghz`` when given (not for an
    injected CPU, whose clock is its own cpu MHz line), else :func:`_max_ghz`'s."""
    info = cpu_facts()
    isa = set(info.get("flags", "").split())
    vendor_id = info.get("vendor_id", "")
    if measured_ghz is not None and not injected():
        ghz: float | None = measured_ghz
        clock_src = "measured: dependent adds on every core"
    else:
        ghz, clock_src = _max_ghz(info)
    cores, smt = peak_cores()
    if ghz is None:
        return PeakEstimate({}, "unknown: no clock frequency readable")
    per_cycle = fp32_flops_per_cycle(
        isa, vendor_id, _int_field(info, "cpu family"), _int_field(info, "model")
    )
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
        f"estimated: {cores} core{'s' if cores != 1 else ''}{f' ({smt})' if smt else ''} x "
        f"{ghz:.2f} GHz ({clock_src}) x "
        f"{per_cycle} fp32 FLOP/cycle (from ISA flags)"
    )
    return PeakEstimate(peaks, src)


@dataclass(frozen=True)
class GemmMeasurement:
    tflops: float
    #: cores of this process's CPUs other processes kept busy while it ran (None: not known)
    other_cores: float | None
    #: the most of them the quiet check allows (None: not known)
    busy_limit: float | None = None
    #: the cores' clock measured in the same window (None: not asked for, or not measurable)
    clock_ghz: float | None = None

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
    n: int = 2048, repeats: int = 5, watch: CpuWatch | None = None, clock: bool = False
) -> GemmMeasurement:
    """Best fp32 GEMM rate of NumPy's BLAS on seeded random (never zero) operands, with how
    busy other processes kept this process's cores meanwhile (``watch``: the quiet check's CPU
    window): a rate taken beside other work is a floor, not the machine's peak. With ``clock``
    the cores' clock is measured first, in the same window (:func:`measure_clock_ghz`)."""
    import numpy as np

    window = watch[0]() if watch is not None else None
    if window is not None:
        window.start()
    ghz = measure_clock_ghz() if clock else None
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
    return GemmMeasurement(2.0 * n**3 / best / 1e12, other, watch[1] if watch else None, ghz)


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
    key = f"{socket.gethostname()}|{model_name()}|{usable_cores()}"
    measured, ghz, note = _cached_measurement(key, _cache_path(), watch)
    est = estimate_peak(ghz)
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


def _cached_measurement(
    key: str, path: Path, watch: CpuWatch | None
) -> tuple[float, float | None, str]:
    """This key's GEMM rate and clock from the cache, measured (and the cache updated) when
    they must be.

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
        entry, rate, ghz, note = _settled_measurement(entries.get(key, {}), watch)
        if lock is not None and entry is not entries.get(key):
            entries[key] = entry
            try:
                from suite.rundir import write_text_atomic

                write_text_atomic(path, json.dumps({"entries": entries}, indent=1))
            except OSError:
                pass  # read-only home: measure again next time
        return rate, ghz, note
    finally:
        if lock is not None:
            lock.close()  # releases the lock


def _settled_measurement(
    cached: dict[str, Any], watch: CpuWatch | None
) -> tuple[dict[str, Any], float, float | None, str]:
    """The entry to keep (``cached`` itself when nothing was measured), its GEMM rate, its
    clock (GHz; None where not measurable) and a note.

    A peak is the highest rate the machine reaches: a rate measured while other processes
    kept the cores busy (a test suite, another job) is only a floor. So the cache keeps the
    highest rate seen, and until :data:`QUIET_TO_SETTLE` measurements were quiet (``quiet``;
    ``settled`` then) a rate older than :data:`REMEASURE_AFTER_S` is measured again (an entry
    of an older suite, which did not say, too). One quiet measurement did not prove enough: a
    fresh VM's first, taken while its environments were being built and judged quiet (0.25
    other cores), settled at 0.126 TFLOP/s; the quiet VM gave 0.151 80 minutes later. The
    note says when the rate kept is not settled. The clock is measured in the same window
    and kept the same way, its highest value (dependent adds beside a busy process read half
    the clock). An entry of a suite that did not measure the clock settles again: its rate
    stays the floor, and its clock needs quiet measurements of its own."""
    now = time.time()
    # an entry of the suite that settled on one quiet measurement counts it as one; one
    # without a clock has had no quiet measurement of it
    quiet = int(cached.get("quiet", 1 if cached.get("settled") else 0))
    if cached and "clock_ghz" not in cached:
        quiet = 0
    settled = quiet >= QUIET_TO_SETTLE
    age = now - float(cached.get("measured_at") or 0.0)
    recent = "settled" in cached and "clock_ghz" in cached and age < REMEASURE_AFTER_S
    if cached and (settled or recent):
        rate = float(cached["fp32_tflops"])
    else:
        m = measure_fp32_gemm(watch=watch, clock=True)
        rate = max(m.tflops, float(cached.get("fp32_tflops") or 0.0))
        clocks = [c for c in (m.clock_ghz, cached.get("clock_ghz")) if c is not None]
        quiet += not m.contended
        settled = quiet >= QUIET_TO_SETTLE
        cached = {
            "fp32_tflops": rate,
            "clock_ghz": max(clocks) if clocks else None,
            "settled": settled,
            "quiet": quiet,
            "measured_at": now,
            "other_cores": m.other_cores,
        }
    ghz = cached["clock_ghz"]
    ghz = float(ghz) if ghz is not None else None
    if settled:
        return cached, rate, ghz, ""
    if quiet:
        return (
            cached,
            rate,
            ghz,
            f" ({quiet} of the {QUIET_TO_SETTLE} quiet measurements that settle it: measured "
            f"again after {REMEASURE_AFTER_S / 60:.0f} min, the highest rate kept)",
        )
    other = cached.get("other_cores")
    return (
        cached,
        rate,
        ghz,
        (
            " (measured while other processes kept "
            + (f"{float(other):.2f} cores" if other is not None else "the cores")
            + " busy: a floor, measured again until the machine is quiet)"
        ),
    )
