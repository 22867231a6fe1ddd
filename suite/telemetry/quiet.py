"""The quiet-machine check, run by the worker before a task's timing starts.

For a short window (``QUIET_WINDOW_S``) it reads the task's CPU cores (who else keeps them busy,
hypervisor steal, the load average) and, for a GPU task, the task's GPUs (utilisation while
the task is still idle, throttle reasons, compute processes that are not the task's). The
readings become findings; a finding with ``busy: true`` makes the machine not quiet. The
verdict logic (:func:`verdict`) is a pure function of the readings, tested with injected ones.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from suite.telemetry.nvml import GpuReader, decode_throttle, harmful_throttle

QUIET_WINDOW_S = 0.25  # 25 scheduler ticks per core: enough to see a busy core, small per task
#: A CPU window shorter than this is not judged: the kernel counts CPU time in ticks of 10 ms
#: (USER_HZ 100), so over 15 ms one tick of another process reads as 0.7 of a core and a
#: window of 5 ms saw 4 of 2 cores busy (measured: the quick network level's agreement tasks,
#: whose warm-up is a few ms, were "busy" on a quiet machine). A timed task's window is
#: stretched to it at its first timed region (``TaskTelemetry.quiet_end(settle=True)``).
MIN_CPU_WINDOW_S = QUIET_WINDOW_S
QUIET_INTERVAL_S = 0.1


@dataclass(frozen=True)
class Thresholds:
    #: other processes may keep at most max(this, ``other_cpu_fraction`` x usable cores) busy
    other_cpu_cores: float = 0.5
    other_cpu_fraction: float = 0.1
    #: hypervisor steal (other virtual machines on the same host), same rule
    steal_cores: float = 0.5
    #: GPU utilisation while the task is idle, any reading above this is another workload
    gpu_idle_util_pct: float = 10.0
    #: storage holding the task's data (suite/telemetry/storage.py): another process reading
    #: plus writing more than this, or the data's device moving more than this that the
    #: task did not, is another workload (a cold ImageNet read on one NVMe is ~1-3 GB/s;
    #: page-cache writeback of a log is well under)
    other_io_mb_s: float = 10.0
    #: ... or the data's device busy (I/O in flight) more than this share of the window
    device_util_pct: float = 30.0

    def cpu_limit(self, cores: int) -> float:
        return max(self.other_cpu_cores, self.other_cpu_fraction * cores)

    def steal_limit(self, cores: int) -> float:
        return max(self.steal_cores, self.other_cpu_fraction * cores)


def _finding(check: str, busy: bool, message: str, **evidence: Any) -> dict[str, Any]:
    return {"check": check, "busy": busy, "message": message, "evidence": evidence}


def verdict(readings: dict[str, Any], th: Thresholds | None = None) -> dict[str, Any]:
    """``{"quiet", "findings", "readings"}`` from the readings of :func:`take_readings`.

    ``readings["cpu"]``: :meth:`CpuWindow.finish` output (or None); ``readings["gpus"]``: per
    GPU ``{"index", "uuid", "util_pct": [...], "throttle": [names], "other_processes": [...]}``.
    Findings with ``busy: false`` are notes: they are recorded but do not make the machine
    busy (the load average lags a minute and counts the run's own previous tasks).
    """
    th = th or Thresholds()
    findings: list[dict[str, Any]] = []
    cpu = readings.get("cpu")
    if cpu and float(cpu["window_s"]) < MIN_CPU_WINDOW_S:
        findings.append(_finding(
            "cpu_window_short", False,
            f"CPU load not judged: the window lasted {1e3 * float(cpu['window_s']):.0f} ms, "
            f"less than the {1e3 * MIN_CPU_WINDOW_S:.0f} ms the kernel's 10 ms CPU-time ticks "
            "need (a task that times nothing ends its window early)",
            window_s=float(cpu["window_s"]), min_window_s=MIN_CPU_WINDOW_S,
        ))  # fmt: skip
    elif cpu:
        cores = int(cpu["usable_cores"])
        limit = th.cpu_limit(cores)
        other = float(cpu["other_cores"])
        if other > limit:
            top = ", ".join(
                f"{p['name']} (pid {p['pid']}, {100 * p['cores']:.0f}% of a core)"
                for p in cpu.get("top_other_processes", [])[:3]
            )
            findings.append(_finding(
                "cpu_other_load", True,
                f"other processes kept {other:.2f} of the task's {cores} usable CPU cores busy "
                f"over {cpu['window_s']:.1f} s (limit {limit:.2f})" + (f"; top: {top}" if top else ""),
                other_cores=other, limit=limit, usable_cores=cores,
                top_other_processes=cpu.get("top_other_processes", []),
            ))  # fmt: skip
        steal = float(cpu.get("steal_cores") or 0.0)
        if steal > th.steal_limit(cores):
            findings.append(_finding(
                "cpu_steal", True,
                f"the hypervisor gave {steal:.2f} of the task's {cores} CPU cores to other "
                f"virtual machines (steal time; limit {th.steal_limit(cores):.2f})",
                steal_cores=steal, limit=th.steal_limit(cores),
            ))  # fmt: skip
        load1, logical = cpu.get("loadavg_1m"), int(cpu.get("logical_cpus") or cores)
        if load1 is not None and load1 > logical:
            findings.append(_finding(
                "load_average", False,
                f"1-minute load average {load1:.2f} exceeds the {logical} CPUs (a note: it lags "
                "a minute and counts this run's own earlier tasks)",
                loadavg_1m=load1, logical_cpus=logical,
            ))  # fmt: skip
    for g in readings.get("gpus") or []:
        where = f"GPU {g['index']} ({g['uuid']})"
        others = g.get("other_processes") or []
        if others:
            desc = ", ".join(
                f"{p.get('name') or '?'} (pid {p['pid']}"
                + (f", {p['used_memory_mb']:.0f} MB" if p.get("used_memory_mb") is not None else "")
                + ("" if p.get("visible", True) else ", pid not visible here")
                + ")"
                for p in others[:5]
            )
            findings.append(_finding(
                "gpu_other_processes", True,
                f"{len(others)} other compute process(es) on {where}: {desc}",
                gpu=g["index"], uuid=g["uuid"], processes=others,
            ))  # fmt: skip
        utils = [u for u in g.get("util_pct") or [] if u is not None]
        if utils and max(utils) > th.gpu_idle_util_pct:
            findings.append(_finding(
                "gpu_busy_while_idle", True,
                f"{where} was {max(utils):.0f}% utilised before the task started "
                f"(limit {th.gpu_idle_util_pct:.0f}%)",
                gpu=g["index"], uuid=g["uuid"], util_pct=utils, limit=th.gpu_idle_util_pct,
            ))  # fmt: skip
        bad = harmful_throttle(g.get("throttle") or [])
        if bad:
            findings.append(_finding(
                "gpu_throttling", True,
                f"{where} clocks are held down: {', '.join(bad)}",
                gpu=g["index"], uuid=g["uuid"], reasons=g.get("throttle"),
                temp_c=g.get("temp_c"), power_w=g.get("power_w"),
            ))  # fmt: skip
    from suite.telemetry.storage import storage_findings

    findings += storage_findings(readings.get("storage"), th)
    return {
        "quiet": not any(f["busy"] for f in findings),
        "findings": findings,
        "readings": readings,
    }


REFUSAL_PREFIXES = ("machine not quiet", "machine not known to be quiet")


def refusal_reason(result: dict[str, Any]) -> str:
    """The ``skipped`` record's reason under ``--require-quiet``: every busy finding."""
    busy = [f["message"] for f in result["findings"] if f["busy"]]
    return "machine not quiet (--require-quiet): " + "; ".join(busy)


def is_refusal(record: dict[str, Any]) -> bool:
    """Whether a record is a task refused by ``--require-quiet``."""
    return record.get("status") == "skipped" and str(record.get("reason", "")).startswith(
        REFUSAL_PREFIXES
    )


def take_readings(
    gpus: list[GpuReader],
    own: set[int],
    window_s: float = QUIET_WINDOW_S,
    with_cpu: bool = True,
    storage_paths: list[str] | None = None,
) -> dict[str, Any]:
    """Sample the task's cores and GPUs for ``window_s`` (utilisation and throttle reasons
    every ``QUIET_INTERVAL_S``; processes and CPU accounting over the whole window), and the
    storage holding ``storage_paths`` (the task's data; suite/telemetry/storage.py)."""
    from suite.telemetry.host import CpuWindow
    from suite.telemetry.storage import StorageWindow

    cpu_window = CpuWindow(own) if with_cpu else None
    if cpu_window is not None:
        cpu_window.start()
    storage = StorageWindow(list(storage_paths), own) if storage_paths else None
    if storage is not None:
        storage.start()
    per_gpu: list[dict[str, Any]] = [
        {"index": r.ref.index, "uuid": r.ref.uuid, "util_pct": [], "throttle": set(),
         "temp_c": None, "power_w": None} for r in gpus
    ]  # fmt: skip
    t_end = time.perf_counter() + window_s
    while True:
        for reader, g in zip(gpus, per_gpu, strict=True):
            sample = reader.read()
            if "gpu_util_pct" in sample:
                g["util_pct"].append(sample["gpu_util_pct"])
            if "throttle_mask" in sample:
                g["throttle"].update(decode_throttle(sample["throttle_mask"]))
            g["temp_c"] = sample.get("temp_c", g["temp_c"])
            g["power_w"] = sample.get("power_w", g["power_w"])
        left = t_end - time.perf_counter()
        if left <= 0:
            break
        time.sleep(min(QUIET_INTERVAL_S, left))
    for reader, g in zip(gpus, per_gpu, strict=True):
        g["throttle"] = sorted(g["throttle"])
        g["other_processes"] = other_gpu_processes(reader, own)
        if "gpu_util_pct" in reader.unsupported:
            g["util_unavailable"] = reader.unsupported["gpu_util_pct"]
    out = {
        "window_s": window_s,
        "cpu": cpu_window.finish() if cpu_window is not None else None,
        "gpus": per_gpu,
    }
    if storage is not None:
        out["storage"] = storage.finish()
    return out


class QuietRefusal(Exception):
    """Raised at the first timed region's entry under ``--require-quiet`` when the readings
    of the warm-up say the machine is not quiet: the task becomes a skipped record."""


class QuietWindow:
    """The quiet check over the task's own warm-up instead of a window of its own.

    :meth:`begin` (before the task builds anything) takes the GPU readings that need the
    task idle, once: utilisation (the driver's average over its last sampling period, which
    ends now: the task has not used the GPU yet), throttle reasons, temperature and power;
    and starts the CPU accounting. :meth:`end` (at the first timed region's entry: the
    warm-up and calibration were the window) finishes the CPU accounting with the task's
    processes as they are by then (a loader's workers, started during the warm-up, are the
    task's own) and lists the GPUs' compute processes that are not the task's. The readings
    are those of :func:`take_readings`, so :func:`verdict` is unchanged."""

    def __init__(self, gpus: list[GpuReader], own: set[int], with_cpu: bool = True) -> None:
        self.gpus, self.own, self.with_cpu = gpus, own, with_cpu

    def begin(self) -> None:
        from suite.telemetry.host import CpuWindow

        self.t0 = time.perf_counter()
        self.cpu = CpuWindow(set(self.own)) if self.with_cpu else None
        if self.cpu is not None:
            self.cpu.start()
        self.per_gpu: list[dict[str, Any]] = []
        for reader in self.gpus:
            sample = reader.read()
            g: dict[str, Any] = {
                "index": reader.ref.index, "uuid": reader.ref.uuid,
                "util_pct": [sample["gpu_util_pct"]] if "gpu_util_pct" in sample else [],
                "throttle": sorted(decode_throttle(sample["throttle_mask"]))
                if "throttle_mask" in sample else [],
                "temp_c": sample.get("temp_c"), "power_w": sample.get("power_w"),
            }  # fmt: skip
            if "gpu_util_pct" in reader.unsupported:
                g["util_unavailable"] = reader.unsupported["gpu_util_pct"]
            self.per_gpu.append(g)

    def end(self, own: set[int]) -> dict[str, Any]:
        cpu = None
        if self.cpu is not None:
            self.cpu.own = set(own) | self.cpu.own
            cpu = self.cpu.finish()
        for reader, g in zip(self.gpus, self.per_gpu, strict=True):
            g["other_processes"] = other_gpu_processes(reader, own)
        return {
            "window_s": time.perf_counter() - self.t0,
            "window": "the task's warm-up (GPU utilisation and throttling: one reading before it)",
            "cpu": cpu,
            "gpus": self.per_gpu,
        }


def other_gpu_processes(reader: GpuReader, own: set[int]) -> list[dict[str, Any]]:
    """Compute processes on the reader's device whose pid is not one of ``own``.

    Inside a container without the host's PID namespace NVML reports host pids, which this
    process cannot see (``visible: false``); the task's own process can then be among them.
    """
    import psutil

    out = []
    for p in reader.processes():
        pid = int(p.pid)
        if pid in own:
            continue
        mem = getattr(p, "usedGpuMemory", None)
        entry: dict[str, Any] = {
            "pid": pid,
            "used_memory_mb": mem / 2**20 if isinstance(mem, int) else None,
            "name": None,
            "visible": True,
        }
        try:
            entry["name"] = psutil.Process(pid).name()
        except psutil.NoSuchProcess:
            entry["visible"] = False
        except psutil.Error:
            pass
        out.append(entry)
    return out
