"""Telemetry of a task, taken inside the worker: GPU (NVML) and host (psutil) samples during
each timed region, and the quiet-machine check before the task.

:class:`TaskTelemetry` is what the worker uses:

* :meth:`~TaskTelemetry.open` finds the GPUs the rank uses (CUDA_VISIBLE_DEVICES and LOCAL_RANK
  mapped to NVML handles by UUID; see :mod:`suite.telemetry.nvml`), or says why there are none;
* :meth:`~TaskTelemetry.quiet_check` runs the check of :mod:`suite.telemetry.quiet`;
* :meth:`~TaskTelemetry.region` is the executors' ``timed_region``: a daemon thread samples
  every ``interval_ms`` while the region runs, sleeping on an :class:`threading.Event` that the
  region's end sets; the energy counter is read at entry and exit. Each entry is a *segment*
  (a sweep times one segment per parameter point);
* :meth:`~TaskTelemetry.section` and :meth:`~TaskTelemetry.energy_metric` turn a segment into
  the record's ``telemetry`` section and the energy metric;
* the full series goes to ``RUN_DIR/telemetry/<task_id>-rank<r>.jsonl``, written after each
  segment (never during one): one JSON object a line, ``kind`` ``"gpu"`` or ``"host"``, ``t``
  seconds since the first segment began, ``segment``.

Importing this package imports neither pynvml nor psutil; the classes do, when used.
"""

from __future__ import annotations

import json
import os
import resource
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from suite.telemetry.nvml import (
    NVML_GPU_UTILIZATION_SAMPLES,
    NVML_MEMORY_UTILIZATION_SAMPLES,
    GpuReader,
    NvmlUnavailable,
    decode_throttle,
)

DEFAULT_INTERVAL_MS = 100.0
GPU_FIELDS = ("gpu_util_pct", "mem_util_pct", "mem_used_mb", "power_w", "sm_clock_mhz",
              "mem_clock_mhz", "temp_c")  # fmt: skip
#: utilisation fields the driver also keeps as timestamped samples (see ``driver_window``)
DRIVER_SAMPLED = {"gpu_util_pct": NVML_GPU_UTILIZATION_SAMPLES,
                  "mem_util_pct": NVML_MEMORY_UTILIZATION_SAMPLES}  # fmt: skip
POLLED_UTIL_NOTE = (
    "polled readings: each is the driver's latest sample, which averages its last sampling "
    "period (1/6 s to 1 s), so the first readings of a region include time before it"
)
PROCESS_EVERY_S = 1.0  # how often the sampler lists the GPUs' compute processes
#: the window of ``counter_power`` (s)
POWER_WINDOW_S = 0.5
#: the shortest timed region where GPU energy is measured (``MeasureConfig.min_time_s``): the
#: energy counter's ~100 ms steps make a region's energy uncertain by up to a step at each
#: end, 10% at most over 2 s (a 0.2 s operator region could be off by half)
GPU_MIN_REGION_S = 2.0
CPU_REASON = "task runs on the CPU: no GPU to sample"


def field_summary(values: Sequence[float]) -> dict[str, Any] | None:
    """``{"mean", "p5", "p95", "max", "n"}`` of the finite values (percentiles with linear
    interpolation, as NumPy's default); None when there are none."""
    import math

    import numpy as np

    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    if x.size == 0:
        return None
    p5, p95 = np.percentile(x, [5, 95])
    return {"mean": float(x.mean()), "p5": float(p5), "p95": float(p95),
            "max": float(x.max()), "n": int(x.size)}  # fmt: skip


def trapezoid(points: Sequence[tuple[float, float]]) -> float:
    """Trapezoid integral of ``(t, value)`` points in time order."""
    return sum((t1 - t0) * (v0 + v1) / 2 for (t0, v0), (t1, v1) in pairwise(points))


def power_integral_j(rows: Sequence[dict[str, Any]]) -> float | None:
    """Trapezoid integral of ``power_w`` over ``t`` (J); None with fewer than two readings."""
    pts = [(r["t"], r["power_w"]) for r in rows if r.get("power_w") is not None]
    return trapezoid(pts) if len(pts) >= 2 else None


def counter_power(
    points: Sequence[tuple[float, float | None]], window_s: float = POWER_WINDOW_S
) -> list[float | None]:
    """Power (W) at each ``(t, energy_mj)`` point from the energy counter: the energy since
    the latest earlier point at least ``window_s`` before it, over that time; None where no
    point is that old or a reading is missing.

    The window is what makes the slope usable: NVML's energy counter advanced in steps of
    about 100 ms on an H100 (stop 13: increments of 0 J over 13-31 ms, then 27 J within
    0.7 ms), so a slope over one 100 ms sample is 0, 1 or 2 steps. Over 0.5 s the error is
    at most one step in five."""
    out: list[float | None] = []
    for j, (t, e) in enumerate(points):
        watts = None
        if e is not None:
            for t0, e0 in reversed(points[:j]):
                if e0 is not None and t - t0 >= window_s:
                    watts = (e - e0) / 1000.0 / (t - t0) if e >= e0 else None
                    break
        out.append(watts)
    return out


def driver_window(
    samples: Sequence[tuple[int, float]], start_us: int, end_us: int
) -> tuple[list[float], float | None, str | None]:
    """The values of the driver's samples whose sampling period lies inside the region
    ``[start_us, end_us]`` (wall clock), the period in ms (the median spacing of the samples),
    and why there are none when there are none.

    A sample's value averages the period that ends at its timestamp, so one is kept when
    ``timestamp - period >= start`` and ``timestamp <= end`` (10% of a period of slack each
    way for the driver's jitter)."""
    import numpy as np

    pts = sorted(samples)
    if len(pts) < 2:
        return (
            [],
            None,
            (
                "fewer than two driver samples since the region began: it is shorter than the "
                "driver's sampling period"
            ),
        )
    period_us = float(np.median(np.diff([t for t, _ in pts])))
    if period_us <= 0:
        return [], None, "the driver's samples carry no increasing timestamps"
    slack = 0.1 * period_us
    kept = [v for t, v in pts if t - period_us >= start_us - slack and t <= end_us + slack]
    why = (
        None
        if kept
        else (f"no driver sample's period ({period_us / 1000:.0f} ms) lies inside the region")
    )
    return kept, period_us / 1000.0, why


def work_items(record: dict[str, Any]) -> tuple[float, str] | None:
    """How much work the record's timed region did: (count, "sample" | "call").

    The region wraps the sampling phase of ``measure()``: ``measurement.sampled_calls`` calls
    of the timed callable (records from before stop 13 have only ``calls``, warm-up and
    calibration included, which their region then covered too). A call is one operator call
    (operators, collectives: per call), one training or inference step of ``batch`` samples
    (network ``train``/``infer``: ``work.samples_per_step``), or one data-parallel step of
    ``work.per_rank_batch`` samples on this rank. Tasks whose region is not one ``measure()``
    (``digits``, ``agreement``) carry no ``calls``: no energy per item.
    """
    measurement = record.get("measurement") or {}
    calls = measurement.get("sampled_calls", measurement.get("calls"))
    if not calls:
        return None
    work = record.get("work") or {}
    level = record["benchmark"]["level"]
    if level == "network" and work.get("samples_per_step"):
        return float(calls * work["samples_per_step"]), "sample"
    if level == "distributed" and work.get("per_rank_batch"):
        return float(calls * work["per_rank_batch"]), "sample"
    if level in ("operator", "distributed"):
        return float(calls), "call"
    return None


@dataclass
class Segment:
    """One timed region's samples."""

    index: int
    t0: float  # perf_counter at entry
    gpu_rows: list[dict[str, Any]] = field(default_factory=list)
    host_rows: list[dict[str, Any]] = field(default_factory=list)
    energy0: list[int | None] = field(default_factory=list)
    energy1: list[int | None] = field(default_factory=list)
    processes: list[dict[tuple[str, int], dict[str, Any]]] = field(default_factory=list)
    #: wall clock (µs) at the region's entry and exit: the driver samples' time base
    wall0_us: int = 0
    wall1_us: int = 0
    #: per reader: the driver's samples since entry, by field (None: NVML gave none)
    driver: list[dict[str, list[tuple[int, float]] | None]] = field(default_factory=list)
    #: t (s since the first region began) at this region's entry
    t_start: float = 0.0
    duration_s: float = 0.0
    ticks: int = 0
    tick_s: list[float] = field(default_factory=list)
    thread_cpu_s: float = 0.0
    host_summary: dict[str, Any] = field(default_factory=dict)


class TaskTelemetry:
    """The telemetry of one task on one rank (see the module docstring)."""

    def __init__(
        self,
        *,
        task_id: str,
        rank: int,
        world_size: int,
        interval_ms: float = DEFAULT_INTERVAL_MS,
        series_dir: Path | None = None,
        sampling: bool = True,
    ) -> None:
        self.task_id, self.rank, self.world_size = task_id, rank, world_size
        self.interval_s = max(interval_ms, 1.0) / 1000.0
        #: False (--no-telemetry): no sampler thread in a timed region; the energy counter,
        #: the driver's own utilisation samples and the host's CPU times are still read at
        #: its entry and exit (what the sampler costs is the thread, so that is what goes)
        self.sampling = sampling
        self.series_path = series_dir / f"{task_id}-rank{rank}.jsonl" if series_dir else None
        self.nvml: Any = None
        self.readers: list[GpuReader] = []
        self.gpu_reason: str | None = CPU_REASON
        self.notes: list[str] = []
        self.segments: list[Segment] = []
        self.host: Any = None
        self.host_reason: str | None = None
        self.own: set[int] = {os.getpid()}
        self._origin: float | None = None
        self._series_started = False
        try:
            from suite.telemetry.host import HostReader, own_pids

            self.host = HostReader()
            self.own = own_pids(world_size)
        except ImportError:
            self.host_reason = "psutil is not installed: no per-sample host telemetry"

    # -- set-up -----------------------------------------------------------------------------

    def open(self, device_kind: str, env: dict[str, str] | None = None) -> None:
        """Find the rank's GPUs for a task on ``device_kind`` ("gpu" or "cpu")."""
        if device_kind != "gpu":
            self.gpu_reason = CPU_REASON
            return
        from suite.telemetry import nvml as N

        env = dict(os.environ if env is None else env)
        try:
            self.nvml = N.open_nvml()
        except NvmlUnavailable as exc:
            self.gpu_reason = str(exc)
            return
        try:
            visible = N.visible_gpus(self.nvml, env)
        except self.nvml.NVMLError as exc:
            self.gpu_reason = f"NVML could not list the GPUs ({exc})"
            return
        self.notes += visible.notes
        local_rank = int(env.get("LOCAL_RANK", "0") or 0)
        refs = N.rank_gpus(visible.visible, local_rank)
        if not refs:
            cvd = env.get("CUDA_VISIBLE_DEVICES")
            self.gpu_reason = (
                f"no GPU in CUDA_VISIBLE_DEVICES={cvd!r} that NVML knows"
                if cvd is not None
                else "NVML sees no GPU"
            ) + ("; " + "; ".join(visible.notes) if visible.notes else "")
            return
        self.readers = [N.GpuReader(self.nvml, r) for r in refs]
        self.gpu_reason = None

    def close(self) -> None:
        if self.nvml is not None:
            from suite.telemetry.nvml import close_nvml

            close_nvml(self.nvml)
            self.nvml = None

    # -- the quiet check --------------------------------------------------------------------

    def quiet_check(
        self, window_s: float | None = None, storage_paths: list[str] | None = None
    ) -> dict[str, Any]:
        """The quiet-machine verdict for this task's cores and GPUs (takes ``window_s``), and
        for the storage holding ``storage_paths`` (the task's data, read before the task
        touches it)."""
        from suite.telemetry import quiet as Q

        self._refresh_own()
        readings = Q.take_readings(
            self.readers,
            self.own,
            Q.QUIET_WINDOW_S if window_s is None else window_s,
            with_cpu=self.host is not None,
            storage_paths=storage_paths,
        )
        if self.host is None:
            readings["cpu_unavailable"] = self.host_reason
        return Q.verdict(readings)

    def quiet_begin(
        self,
        *,
        required: bool = False,
        storage_paths: list[str] | None = None,
        storage_window_s: float | None = None,
    ) -> None:
        """Start the quiet check (:class:`~suite.telemetry.quiet.QuietWindow`): it reads
        over the task's warm-up and ends at the first timed region's entry (or at
        :meth:`quiet_end`). The storage holding ``storage_paths`` is read first, over its
        own short window, before the task touches its data (so a cold read stays cold)."""
        from suite.telemetry import quiet as Q

        self._refresh_own()
        self.quiet_required = required
        self.quiet_unavailable_reason: str | None = None
        self._quiet_storage = None
        if storage_paths:
            from suite.telemetry.storage import take_storage_readings

            window = Q.QUIET_WINDOW_S if storage_window_s is None else storage_window_s
            self._quiet_storage = take_storage_readings(storage_paths, self.own, window)
        self._quiet_window: Any = Q.QuietWindow(self.readers, self.own, self.host is not None)
        self._quiet_window.begin()
        self.quiet_result: dict[str, Any] | None = None

    def quiet_end(self, settle: bool = False) -> dict[str, Any] | None:
        """The verdict over the window :meth:`quiet_begin` started (ended now if no timed
        region ended it); with ``required`` and a busy verdict, ``refused`` is set. With
        ``settle`` (a timed region is about to start) a window shorter than the CPU
        accounting needs (``quiet.MIN_CPU_WINDOW_S``) is first waited out: the task is idle
        then, so what runs is other load; a window ended without ``settle`` (the task timed
        nothing) is not stretched, and its CPU load is not judged when too short."""
        window = getattr(self, "_quiet_window", None)
        if window is None:
            return getattr(self, "quiet_result", None)
        from suite.telemetry import quiet as Q

        if settle and window.cpu is not None:
            left = Q.MIN_CPU_WINDOW_S - (time.perf_counter() - window.cpu.t0)
            if left > 0:
                time.sleep(left)
        self._quiet_window = None
        try:
            self._refresh_own()
            readings = window.end(self.own)
            if self._quiet_storage is not None:
                readings["storage"] = self._quiet_storage
            if self.host is None:
                readings["cpu_unavailable"] = self.host_reason
            result = Q.verdict(readings)
        except Exception as exc:  # noqa: BLE001 - telemetry never fails a task by itself
            self.quiet_unavailable_reason = f"the quiet check failed: {type(exc).__name__}: {exc}"
            return None
        result["required"] = self.quiet_required
        if self.quiet_required and not result["quiet"]:
            result["refused"] = True
        self.quiet_result = result
        return result

    # -- sampling ---------------------------------------------------------------------------

    def region(self) -> _Region:
        return _Region(self)

    def _refresh_own(self) -> None:
        """The task's own pids now (the framework may have started helper processes)."""
        if self.host is not None:
            from suite.telemetry.host import own_pids

            self.own = own_pids(self.world_size)

    def _processes(self) -> dict[tuple[str, int], dict[str, Any]]:
        """Other compute processes on the rank's GPUs now, keyed by (GPU UUID, pid)."""
        from suite.telemetry.quiet import other_gpu_processes

        out: dict[tuple[str, int], dict[str, Any]] = {}
        for reader in self.readers:
            for p in other_gpu_processes(reader, self.own):
                out[(reader.ref.uuid, p["pid"])] = p
        return out

    def _sample(self, seg: Segment, t: float) -> None:
        for reader in self.readers:
            row: dict[str, Any] = {"t": t, "kind": "gpu", "segment": seg.index,
                                   "gpu": reader.ref.index, "uuid": reader.ref.uuid}  # fmt: skip
            row.update(reader.read())
            if "throttle_mask" in row:
                row["throttle"] = decode_throttle(row["throttle_mask"])
            # the report's timeline reads "util"
            if "gpu_util_pct" in row:
                row["util"] = row["gpu_util_pct"]
            seg.gpu_rows.append(row)
        if self.host is not None:
            seg.host_rows.append({"t": t, "kind": "host", "segment": seg.index, **self.host.read()})

    def _loop(self, seg: Segment, stop: threading.Event) -> None:
        """Sample every interval until ``stop`` is set; the first sample is one interval in
        (a rate over less is noise), the last one is taken by the region's exit."""
        origin = self._origin or seg.t0
        next_processes = time.perf_counter() + PROCESS_EVERY_S
        c0 = time.thread_time()
        spent = 0.0
        while not stop.wait(max(0.0, self.interval_s - spent)):
            t0 = time.perf_counter()
            self._tick(seg, t0 - origin, processes=bool(self.readers) and t0 >= next_processes)
            if t0 >= next_processes:
                next_processes = t0 + PROCESS_EVERY_S
            spent = time.perf_counter() - t0
            seg.tick_s.append(spent)
        seg.thread_cpu_s = time.thread_time() - c0

    def _tick(self, seg: Segment, t: float, processes: bool = False) -> None:
        try:
            self._sample(seg, t)
            if processes:
                seg.processes.append(self._processes())
        except Exception:  # noqa: BLE001 - a failing read must never stop the task
            pass

    # -- record sections --------------------------------------------------------------------

    def _gpu_summary(self, segs: list[Segment]) -> dict[str, Any] | None:
        if not self.readers:
            return None
        devices = []
        duration = sum(s.duration_s for s in segs)
        total_energy = 0.0
        have_energy = True
        for i, reader in enumerate(self.readers):
            rows = [r for s in segs for r in s.gpu_rows if r.get("uuid") == reader.ref.uuid]
            fields = {f: field_summary([r[f] for r in rows if f in r]) for f in GPU_FIELDS}
            fields["energy_power_w"] = field_summary(self._counter_power(segs, i))
            utilisation = self._driver_utilisation(segs, i, fields)
            energy_j, source = 0.0, "counter"
            for s in segs:
                e0, e1 = s.energy0[i] if s.energy0 else None, s.energy1[i] if s.energy1 else None
                if e0 is not None and e1 is not None and e1 >= e0:
                    energy_j += (e1 - e0) / 1000.0
                else:
                    seg_rows = [r for r in s.gpu_rows if r.get("uuid") == reader.ref.uuid]
                    integral = power_integral_j(seg_rows)
                    if integral is None:
                        have_energy = False
                        break
                    energy_j, source = energy_j + integral, "power_integral"
            reasons: dict[str, int] = {}
            masks = [r["throttle_mask"] for r in rows if "throttle_mask" in r]
            for m in masks:
                for name in decode_throttle(m):
                    reasons[name] = reasons.get(name, 0) + 1
            others: dict[int, dict[str, Any]] = {}
            for s in segs:
                for snap in s.processes:
                    for (uuid, pid), p in snap.items():
                        if uuid == reader.ref.uuid:
                            others[pid] = p
            dev: dict[str, Any] = {
                **reader.ref.describe(),
                "fields": {k: v for k, v in fields.items() if v is not None},
                "utilisation": utilisation,
                "energy_j": energy_j if have_energy else None,
                "energy_source": source if have_energy else None,
                # the region's mean power: energy over the regions' time
                "mean_power_w": energy_j / duration if have_energy and duration > 0 else None,
                "energy_scope": (
                    "the whole physical GPU (shared with its other MIG devices)"
                    if reader.ref.mig
                    else "the GPU"
                ),
                # share of the samples in which each clock-event reason was active
                "throttle_reasons": {k: v / len(masks) for k, v in sorted(reasons.items())},
                "other_processes": list(others.values()),
                "unsupported": sorted(reader.unsupported),
            }
            devices.append(dev)
            if have_energy:
                total_energy += energy_j
        return {
            "interval_ms": self.interval_s * 1000.0,
            "devices": devices,
            "energy_j": total_energy if have_energy else None,
            "notes": list(self.notes),
        }

    def _counter_power(self, segs: list[Segment], i: int) -> list[float]:
        """Reader ``i``'s power from the energy counter over ``POWER_WINDOW_S`` windows, each
        region anchored at its entry reading (NVML's own power reading lags: see
        ``counter_power``)."""
        uuid = self.readers[i].ref.uuid
        out: list[float] = []
        for s in segs:
            e0 = s.energy0[i] if s.energy0 else None
            rows = [r for r in s.gpu_rows if r.get("uuid") == uuid]
            points = [(s.t_start, e0), *((r["t"], r.get("energy_mj")) for r in rows)]
            out += [w for w in counter_power(points)[1:] if w is not None]
        return out

    def _driver_utilisation(
        self, segs: list[Segment], i: int, fields: dict[str, Any]
    ) -> dict[str, Any]:
        """Replace the polled utilisation summaries in ``fields`` by the driver's samples that
        lie inside the regions, where NVML gives them (the polled ones stay, as
        ``<field>_polled``); say which source each field's summary is from."""
        out: dict[str, Any] = {}
        for key in DRIVER_SAMPLED:
            values: list[float] = []
            periods: list[float] = []
            why: str | None = None
            for s in segs:
                got = s.driver[i].get(key) if i < len(s.driver) else None
                if got is None:
                    values, why = [], "NVML gave no driver samples (nvmlDeviceGetSamples)"
                    break
                kept, period, reason = driver_window(got, s.wall0_us, s.wall1_us)
                values += kept
                if period is not None:
                    periods.append(period)
                why = why or reason
            if values:
                fields[f"{key}_polled"] = fields.get(key)
                fields[key] = field_summary(values)
                out[key] = {"source": "driver samples inside the region",
                            "driver_period_ms": max(periods), "n": len(values)}  # fmt: skip
            else:
                out[key] = {"source": POLLED_UTIL_NOTE, "why_not_driver": why}
        return out

    def _host_summary(self, segs: list[Segment]) -> dict[str, Any] | None:
        if not segs:
            return None
        base = dict(segs[-1].host_summary)
        if len(segs) > 1:  # several regions: the totals over all of them
            wall = sum(s.duration_s for s in segs)
            cpu = sum(s.host_summary.get("process_cpu_seconds", 0.0) for s in segs)
            base["process_cpu_seconds"] = cpu
            base["process_cpu_util_mean"] = cpu / wall / base["cores"] if wall > 0 else None
        rows = [r for s in segs for r in s.host_rows]
        if self.host is not None:
            base["interval_ms"] = self.interval_s * 1000.0
            base["system_cpu_util_pct"] = field_summary([r["cpu_util_pct"] for r in rows])
            base["process_cpu_pct"] = field_summary([r["proc_cpu_pct"] for r in rows])
            base["process_rss_mb"] = field_summary([r["rss_mb"] for r in rows])
        else:
            base["per_sample_unavailable"] = self.host_reason
        ticks = [t for s in segs for t in s.tick_s]
        wall = sum(s.duration_s for s in segs)
        base["sampler"] = {
            "ticks": len(ticks),
            "mean_tick_ms": 1000.0 * sum(ticks) / len(ticks) if ticks else None,
            "max_tick_ms": 1000.0 * max(ticks) if ticks else None,
            "thread_cpu_s": sum(s.thread_cpu_s for s in segs),
            # share of the region's wall time the sampler thread spent reading
            "duty_pct": 100.0 * sum(ticks) / wall if wall > 0 else None,
        }
        return base

    def section(self, segment: int | None = None) -> dict[str, Any]:
        """The record's ``telemetry``: one segment's, or (None) all segments together."""
        segs = self.segments if segment is None else self.segments[segment : segment + 1]
        return {
            "gpu": self._gpu_summary(segs) if segs else None,
            "gpu_unavailable_reason": self.gpu_reason or (None if segs else "no timed region ran"),
            "host": self._host_summary(segs),
            "series": self._series_name() if segs else None,
            "sampling": self.sampling,
        }

    def _series_name(self) -> str | None:
        if self.series_path is None or not self._series_started:
            return None
        return f"telemetry/{self.series_path.name}"

    def _write_series(self, seg: Segment) -> None:
        if self.series_path is None:
            return
        try:
            self.series_path.parent.mkdir(parents=True, exist_ok=True)
            rows = sorted(seg.gpu_rows + seg.host_rows, key=lambda r: r["t"])
            mode = "a" if self._series_started else "w"
            with self.series_path.open(mode, encoding="utf-8") as fh:
                for row in rows:
                    fh.write(json.dumps(row, separators=(",", ":")) + "\n")
            self._series_started = True
        except OSError as exc:
            self.notes.append(f"could not write {self.series_path}: {exc.strerror}")


def energy_metric(section: dict[str, Any], record: dict[str, Any]) -> dict[str, Any] | None:
    """``energy_per_sample`` (J/sample) or ``energy_per_call`` (J/call) for a record whose
    telemetry measured GPU energy, from :func:`work_items`; None otherwise."""
    from suite.metrics.energy import ENERGY_PER_CALL, ENERGY_PER_SAMPLE

    gpu = section.get("gpu")
    energy = gpu.get("energy_j") if gpu else None
    items = work_items(record)
    if energy is None or items is None or items[0] <= 0:
        return None
    count, unit = items
    metric = ENERGY_PER_SAMPLE if unit == "sample" else ENERGY_PER_CALL
    return metric.entry(value=energy / count)


def merge_rank_telemetry(recs: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``telemetry`` of a merged multi-rank record: host and GPU sections per rank (each
    GPU device tagged with its rank, energy summed over the ranks' GPUs), the quiet verdicts
    combined (quiet only if every rank's was; findings tagged with the rank)."""
    out: dict[str, Any] = {
        "gpu": None,
        "gpu_unavailable_reason": None,
        "host": {"per_rank": [(r.get("telemetry") or {}).get("host") for r in recs]},
    }
    gpus = [(r.get("rank"), (r.get("telemetry") or {}).get("gpu")) for r in recs]
    if any(g for _, g in gpus):
        devices = [{**d, "rank": rank} for rank, g in gpus if g for d in g.get("devices", [])]
        energies = [g.get("energy_j") if g else None for _, g in gpus]
        out["gpu"] = {
            "devices": devices,
            "energy_j": None if any(e is None for e in energies) else sum(energies),
            "notes": [f"rank {rank}: {n}" for rank, g in gpus if g for n in g.get("notes", [])],
        }
    reasons = {
        str(why) for r in recs if (why := (r.get("telemetry") or {}).get("gpu_unavailable_reason"))
    }
    if reasons:
        out["gpu_unavailable_reason"] = "; ".join(sorted(reasons))
    quiets = [(r.get("rank"), (r.get("telemetry") or {}).get("quiet")) for r in recs]
    if any(q for _, q in quiets):
        out["quiet"] = {
            "quiet": all(q["quiet"] for _, q in quiets if q),
            "findings": [{**f, "rank": rank} for rank, q in quiets if q for f in q["findings"]],
            "required": any(q.get("required") for _, q in quiets if q),
        }
    series = [(r.get("telemetry") or {}).get("series") for r in recs]
    out["series"] = series[0] if series and series[0] else None
    return out


class _Region:
    """One timed region: starts the sampler thread on entry, stops it and reads the energy
    counter on exit, then writes the segment's series."""

    def __init__(self, tel: TaskTelemetry) -> None:
        self.tel = tel

    def __enter__(self) -> _Region:
        tel = self.tel
        if getattr(tel, "_quiet_window", None) is not None:  # the warm-up was its window
            from suite.telemetry.quiet import QuietRefusal, refusal_reason

            quiet = tel.quiet_end(settle=True)
            if quiet is not None and quiet.get("refused"):
                raise QuietRefusal(refusal_reason(quiet))
            if quiet is None and tel.quiet_required:
                why = tel.quiet_unavailable_reason
                raise QuietRefusal(f"machine not known to be quiet (--require-quiet): {why}")
        seg = Segment(index=len(tel.segments), t0=time.perf_counter())
        if tel._origin is None:
            tel._origin = seg.t0
        if tel.readers:
            tel._refresh_own()
            seg.processes.append(tel._processes())
        self.seg = seg
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        if tel.sampling:
            self.thread = threading.Thread(
                target=tel._loop, args=(seg, self.stop), name="dlsuite-telemetry", daemon=True
            )
        if tel.host is not None:
            tel.host.read()  # the first sample then covers the region only
        # last before the region: the energy counter and the clocks
        seg.energy0 = [r.energy_mj() for r in tel.readers]
        self.cpu0 = os.times()
        seg.t0 = time.perf_counter()
        seg.wall0_us = time.time_ns() // 1000
        seg.t_start = seg.t0 - (tel._origin or seg.t0)
        if self.thread is not None:
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        tel, seg = self.tel, self.seg
        end = time.perf_counter()
        seg.wall1_us = time.time_ns() // 1000
        c1 = os.times()
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=5.0)
        tel._tick(seg, end - (tel._origin or seg.t0), processes=bool(tel.readers))
        seg.energy1 = [r.energy_mj() for r in tel.readers]
        seg.driver = [
            {key: r.driver_samples(kind, seg.wall0_us) for key, kind in DRIVER_SAMPLED.items()}
            for r in tel.readers
        ]
        seg.duration_s = end - seg.t0
        from suite.telemetry.host import usable_cpus

        cpu = (c1.user - self.cpu0.user) + (c1.system - self.cpu0.system)
        cores = len(usable_cpus())
        seg.host_summary = {
            "process_cpu_util_mean": cpu / seg.duration_s / cores if seg.duration_s > 0 else None,
            "process_cpu_seconds": cpu,
            "cores": cores,
            "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
            "loadavg_1m": os.getloadavg()[0],
            "duration_s": seg.duration_s,
        }
        tel.segments.append(seg)
        tel._write_series(seg)
