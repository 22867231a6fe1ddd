"""Telemetry logic without a GPU: summaries, CUDA_VISIBLE_DEVICES -> NVML mapping (a fake NVML
module object is injected: this tests our mapping and reading logic, not NVML), throttle
decoding, the quiet verdict from injected readings, energy per item, rank merging, and the
sampler thread writing its series."""

from __future__ import annotations

import json
import math
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from suite.telemetry import (
    TaskTelemetry,
    counter_power,
    driver_window,
    energy_metric,
    field_summary,
    merge_rank_telemetry,
    power_integral_j,
    work_items,
)
from suite.telemetry import nvml as N
from suite.telemetry.quiet import Thresholds, is_refusal, refusal_reason, verdict

# -- a fake pynvml -------------------------------------------------------------------------------


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value

    def __str__(self) -> str:
        return {3: "Not Supported", 6: "Not Found", 13: "Function Not Found"}.get(
            self.value, f"error {self.value}"
        )


class Dev:
    def __init__(self, uuid: str, name: str = "NVIDIA H100 80GB HBM3", **kw: Any) -> None:
        self.uuid, self.name = uuid, name
        self.migs: list[Dev] = kw.get("migs", [])
        self.parent: Dev | None = None
        self.gi, self.ci = kw.get("gi", 0), kw.get("ci", 0)
        self.util = kw.get("util", 0)
        self.power_mw = kw.get("power_mw", 70_000)
        self.energy_mj = kw.get("energy_mj", 1_000_000)
        self.mask = kw.get("mask", 0x1)
        self.procs: list[int] = kw.get("procs", [])
        self.unsupported: set[str] = set(kw.get("unsupported", ()))
        self.calls: dict[str, int] = {}
        for m in self.migs:
            m.parent = self


class FakeNVML:
    """The subset of pynvml the suite calls, over a list of ``Dev``."""

    NVMLError = FakeNVMLError

    def __init__(self, devices: list[Dev]) -> None:
        self.devices = devices

    def _count(self, dev: Dev, name: str) -> None:
        dev.calls[name] = dev.calls.get(name, 0) + 1
        if name in dev.unsupported or (dev.parent is not None and name in MIG_UNSUPPORTED):
            raise FakeNVMLError(3)

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> Dev:
        return self.devices[i]

    def nvmlDeviceGetName(self, d: Dev) -> str:
        return d.name

    def nvmlDeviceGetUUID(self, d: Dev) -> str:
        return d.uuid

    def nvmlDeviceGetMigMode(self, d: Dev) -> list[int]:
        if d.parent is not None:
            raise FakeNVMLError(3)
        return [1, 1] if d.migs else [0, 0]

    def nvmlDeviceGetMaxMigDeviceCount(self, d: Dev) -> int:
        return 7 if d.migs else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, d: Dev, i: int) -> Dev:
        if i >= len(d.migs):
            raise FakeNVMLError(6)
        return d.migs[i]

    def nvmlDeviceGetGpuInstanceId(self, d: Dev) -> int:
        return d.gi

    def nvmlDeviceGetComputeInstanceId(self, d: Dev) -> int:
        return d.ci

    def nvmlDeviceGetUtilizationRates(self, d: Dev) -> Any:
        self._count(d, "util")

        class U:
            gpu, memory = d.util, d.util // 2

        return U()

    def nvmlDeviceGetMemoryInfo(self, d: Dev) -> Any:
        self._count(d, "mem")

        class M:
            used = 2 * 2**30

        return M()

    def nvmlDeviceGetPowerUsage(self, d: Dev) -> int:
        self._count(d, "power")
        return d.power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, d: Dev) -> int:
        self._count(d, "energy")
        d.energy_mj += 7000  # 7 J per read
        return d.energy_mj

    def nvmlDeviceGetClockInfo(self, d: Dev, kind: int) -> int:
        self._count(d, "clock")
        return 1980 if kind == N.NVML_CLOCK_SM else 2619

    def nvmlDeviceGetTemperature(self, d: Dev, sensor: int) -> int:
        self._count(d, "temp")
        return 41

    def nvmlDeviceGetCurrentClocksEventReasons(self, d: Dev) -> int:
        self._count(d, "events")
        return d.mask

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, d: Dev) -> int:
        self._count(d, "throttle")
        return d.mask

    def nvmlDeviceGetSamples(self, d: Dev, kind: int, since_us: int) -> tuple[int, list[Any]]:
        """The driver's buffer: a sample every 50 ms of the last 2 s of wall clock."""
        self._count(d, "samples")
        now = time.time_ns() // 1000
        value = d.util if kind == N.NVML_GPU_UTILIZATION_SAMPLES else d.util // 2

        class V:
            uiVal = value

        class S:
            def __init__(self, ts: int) -> None:
                self.timeStamp, self.sampleValue = ts, V()

        got = [S(ts) for ts in range(now - 2_000_000, now + 1, 50_000) if ts > since_us]
        if not got:
            raise FakeNVMLError(6)  # NVML_ERROR_NOT_FOUND: nothing since that time
        return 1, [S(0), *got]  # an unused (zero) slot of the buffer first

    def nvmlDeviceGetComputeRunningProcesses(self, d: Dev) -> list[Any]:
        class P:
            def __init__(self, pid: int) -> None:
                self.pid, self.usedGpuMemory = pid, 512 * 2**20

        return [P(pid) for pid in d.procs]


MIG_UNSUPPORTED = {"util", "power", "energy", "clock", "temp", "events", "throttle"}


def machine() -> FakeNVML:
    migs = [Dev("MIG-cccc0001-aaaa", gi=1, ci=0), Dev("MIG-cccc0002-bbbb", gi=2, ci=0)]
    return FakeNVML(
        [
            Dev("GPU-aaaa1111-0000"),
            Dev("GPU-bbbb2222-0000"),
            Dev("GPU-bbbc3333-0000", migs=migs),
        ]
    )


def uuids(refs: list[N.GpuRef]) -> list[str]:
    return [r.uuid for r in refs]


# -- summaries ----------------------------------------------------------------------------------


def test_field_summary_percentiles_and_filtering() -> None:
    s = field_summary([float(v) for v in range(1, 101)] + [None, math.nan])  # type: ignore[list-item]
    assert s == {"mean": 50.5, "p5": pytest.approx(5.95), "p95": pytest.approx(95.05),
                 "max": 100.0, "n": 100}  # fmt: skip
    assert field_summary([]) is None and field_summary([math.inf]) is None
    assert field_summary([3.0]) == {"mean": 3.0, "p5": 3.0, "p95": 3.0, "max": 3.0, "n": 1}


def test_power_integral_is_a_trapezoid() -> None:
    rows = [{"t": 0.0, "power_w": 100.0}, {"t": 1.0, "power_w": 300.0}, {"t": 2.0}]
    assert power_integral_j(rows) == 200.0
    assert power_integral_j(rows[:1]) is None


# -- throttle reasons ---------------------------------------------------------------------------


def test_decode_throttle() -> None:
    assert N.decode_throttle(0) == []
    assert N.decode_throttle(0x1 | 0x4) == ["gpu_idle", "sw_power_cap"]
    assert N.decode_throttle(0x40 | 0x80) == ["hw_thermal_slowdown", "hw_power_brake_slowdown"]
    assert N.decode_throttle(0x800 | 0x8) == ["hw_slowdown", "unknown_0x800"]
    assert N.harmful_throttle(["gpu_idle", "applications_clocks_setting", "sync_boost"]) == []
    assert N.harmful_throttle(["gpu_idle", "sw_thermal_slowdown"]) == ["sw_thermal_slowdown"]


# -- CUDA_VISIBLE_DEVICES -> NVML ---------------------------------------------------------------


def test_unset_means_every_gpu_with_mig_devices_in_place_of_their_gpu() -> None:
    v = N.visible_gpus(machine(), {})
    assert uuids(v.visible) == ["GPU-aaaa1111-0000", "GPU-bbbb2222-0000",
                                "MIG-cccc0001-aaaa", "MIG-cccc0002-bbbb"]  # fmt: skip
    assert [r.index for r in v.visible] == [0, 1, 2, 2]
    assert [r.mig for r in v.visible] == [False, False, True, True]
    assert v.visible[2].parent.uuid == "GPU-bbbc3333-0000"
    assert v.notes == []


@pytest.mark.parametrize(
    ("cvd", "want"),
    [
        ("1", ["GPU-bbbb2222-0000"]),
        ("1,0", ["GPU-bbbb2222-0000", "GPU-aaaa1111-0000"]),
        (" 0 , 1 ", ["GPU-aaaa1111-0000", "GPU-bbbb2222-0000"]),
        ("GPU-bbbb2222-0000", ["GPU-bbbb2222-0000"]),
        ("GPU-bbbb", ["GPU-bbbb2222-0000"]),  # a unique prefix, as CUDA accepts
        ("GPU-aaaa,1", ["GPU-aaaa1111-0000", "GPU-bbbb2222-0000"]),
        ("MIG-cccc0002", ["MIG-cccc0002-bbbb"]),
        ("MIG-GPU-bbbc3333-0000/1/0", ["MIG-cccc0001-aaaa"]),  # legacy MIG form
        ("", []),
        ("-1", []),
        ("NoDevFiles", []),
    ],
)
def test_cuda_visible_devices_entries(cvd: str, want: list[str]) -> None:
    assert uuids(N.visible_gpus(machine(), {"CUDA_VISIBLE_DEVICES": cvd}).visible) == want


def test_parsing_stops_at_the_first_invalid_entry_as_cuda_does() -> None:
    v = N.visible_gpus(machine(), {"CUDA_VISIBLE_DEVICES": "1,7,0"})
    assert uuids(v.visible) == ["GPU-bbbb2222-0000"]
    assert "'7' names no device" in v.notes[0]
    # an ambiguous prefix names no device either
    v = N.visible_gpus(machine(), {"CUDA_VISIBLE_DEVICES": "GPU-bbb,0"})
    assert v.visible == [] and "GPU-bbb" in v.notes[0]


def test_mixed_models_without_pci_bus_order_get_a_note() -> None:
    nv = FakeNVML([Dev("GPU-a", name="NVIDIA A100"), Dev("GPU-b", name="NVIDIA H100")])
    assert "CUDA_DEVICE_ORDER" in N.visible_gpus(nv, {}).notes[0]
    assert N.visible_gpus(nv, {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}).notes == []
    assert N.visible_gpus(nv, {"CUDA_VISIBLE_DEVICES": "GPU-b"}).notes == []  # UUIDs: exact


def test_local_rank_picks_the_ranks_gpu() -> None:
    visible = N.visible_gpus(machine(), {"CUDA_VISIBLE_DEVICES": "1,0"}).visible
    assert uuids(N.rank_gpus(visible, 0)) == ["GPU-bbbb2222-0000"]
    assert uuids(N.rank_gpus(visible, 1)) == ["GPU-aaaa1111-0000"]
    # one GPU per rank (Slurm's per-task binding): every rank's LOCAL_RANK maps to it
    one = N.visible_gpus(machine(), {"CUDA_VISIBLE_DEVICES": "0"}).visible
    assert uuids(N.rank_gpus(one, 3)) == ["GPU-aaaa1111-0000"]
    assert N.rank_gpus([], 0) == []


def test_task_telemetry_open_maps_through_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    nv = machine()
    monkeypatch.setattr(N, "open_nvml", lambda: nv)
    tel = TaskTelemetry(task_id="t", rank=1, world_size=2)
    tel.open("gpu", {"CUDA_VISIBLE_DEVICES": "GPU-bbbb,GPU-aaaa", "LOCAL_RANK": "1"})
    assert tel.gpu_reason is None and uuids([r.ref for r in tel.readers]) == ["GPU-aaaa1111-0000"]
    tel.open("gpu", {"CUDA_VISIBLE_DEVICES": ""})
    assert tel.gpu_reason == "no GPU in CUDA_VISIBLE_DEVICES='' that NVML knows"
    tel.open("cpu")
    assert tel.gpu_reason == "task runs on the CPU: no GPU to sample"


def test_no_nvml_library_is_a_reason_not_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> None:
        raise N.NvmlUnavailable("no NVML library: nvmlInit failed (NVML Shared Library Not Found)")

    monkeypatch.setattr(N, "open_nvml", missing)
    tel = TaskTelemetry(task_id="t", rank=0, world_size=1)
    tel.open("gpu", {})
    assert tel.gpu_reason.startswith("no NVML library") and tel.readers == []


# -- reading ------------------------------------------------------------------------------------


def test_reader_fields_and_units() -> None:
    nv = machine()
    nv.devices[0].util, nv.devices[0].power_mw, nv.devices[0].mask = 97, 612_500, 0x4
    row = N.GpuReader(nv, N.visible_gpus(nv, {}).visible[0]).read()
    assert row == {"gpu_util_pct": 97.0, "mem_util_pct": 48.0, "mem_used_mb": 2048.0,
                   "power_w": 612.5, "energy_mj": 1_007_000, "sm_clock_mhz": 1980.0,
                   "mem_clock_mhz": 2619.0, "temp_c": 41.0, "throttle_mask": 0x4}  # fmt: skip


def test_unsupported_fields_are_dropped_after_the_first_try() -> None:
    nv = machine()
    dev = nv.devices[1]
    dev.unsupported = {"energy", "events"}
    reader = N.GpuReader(nv, N.visible_gpus(nv, {}).visible[1])
    for _ in range(3):
        row = reader.read()
    assert "energy_mj" not in row and row["throttle_mask"] == 0x1  # the older name answered
    assert dev.calls["energy"] == 1 and dev.calls["events"] == 1 and dev.calls["throttle"] == 3
    assert set(reader.unsupported) == {"energy_mj", "event_reasons"}


def test_mig_device_reads_memory_own_and_power_from_its_gpu() -> None:
    nv = machine()
    ref = N.visible_gpus(nv, {"CUDA_VISIBLE_DEVICES": "MIG-cccc0001"}).visible[0]
    reader = N.GpuReader(nv, ref)
    row = reader.read()
    assert "gpu_util_pct" not in row and "gpu_util_pct" in reader.unsupported
    assert row["mem_used_mb"] == 2048.0 and row["power_w"] == 70.0 and "energy_mj" in row
    assert nv.devices[2].calls["power"] == 1  # the physical GPU answered


# -- the quiet verdict --------------------------------------------------------------------------


def cpu(other: float = 0.0, cores: int = 2, **kw: Any) -> dict[str, Any]:
    return {"window_s": 0.5, "usable_cores": cores, "logical_cpus": cores, "busy_cores": other,
            "own_cores": 0.0, "other_cores": other, "steal_cores": kw.get("steal", 0.0),
            "loadavg_1m": kw.get("load", 0.1),
            "top_other_processes": kw.get("top", [])}  # fmt: skip


def gpu(**kw: Any) -> dict[str, Any]:
    return {"index": 0, "uuid": "GPU-aaaa", "util_pct": kw.get("util", [0.0, 0.0]),
            "throttle": kw.get("throttle", ["gpu_idle"]),
            "other_processes": kw.get("procs", [])}  # fmt: skip


def busy_checks(v: dict[str, Any]) -> list[str]:
    return [f["check"] for f in v["findings"] if f["busy"]]


def test_a_quiet_machine() -> None:
    v = verdict({"cpu": cpu(0.1), "gpus": [gpu()]})
    assert v["quiet"] is True and busy_checks(v) == []


def test_other_cpu_load_names_the_processes() -> None:
    top = [
        {"pid": 4242, "name": "stress", "cores": 0.99},
        {"pid": 4243, "name": "make", "cores": 0.5},
    ]
    v = verdict({"cpu": cpu(1.49, top=top), "gpus": []})
    assert v["quiet"] is False and busy_checks(v) == ["cpu_other_load"]
    msg = refusal_reason(v)
    assert msg.startswith("machine not quiet (--require-quiet): other processes kept 1.49 of")
    assert "stress (pid 4242, 99% of a core)" in msg and "limit 0.50" in msg


def test_cpu_limit_scales_with_cores() -> None:
    th = Thresholds()
    assert th.cpu_limit(2) == 0.5 and th.cpu_limit(64) == pytest.approx(6.4)
    assert verdict({"cpu": cpu(4.0, cores=64)})["quiet"] is True
    assert verdict({"cpu": cpu(7.0, cores=64)})["quiet"] is False


def test_load_average_is_a_note_and_steal_is_busy() -> None:
    v = verdict({"cpu": cpu(0.0, load=9.0)})
    assert v["quiet"] is True and [f["check"] for f in v["findings"]] == ["load_average"]
    v = verdict({"cpu": cpu(0.0, steal=0.9)})
    assert busy_checks(v) == ["cpu_steal"]


def test_gpu_findings() -> None:
    proc = {"pid": 777, "name": "python", "used_memory_mb": 1024.0, "visible": True}
    v = verdict({"cpu": cpu(), "gpus": [gpu(procs=[proc], util=[0.0, 35.0],
                                            throttle=["gpu_idle", "hw_thermal_slowdown"])]})  # fmt: skip
    assert busy_checks(v) == ["gpu_other_processes", "gpu_busy_while_idle", "gpu_throttling"]
    msg = refusal_reason(v)
    assert "1 other compute process(es) on GPU 0 (GPU-aaaa): python (pid 777, 1024 MB)" in msg
    assert "35% utilised before the task started" in msg and "hw_thermal_slowdown" in msg
    # benign reasons and low utilisation are quiet
    assert verdict({"gpus": [gpu(util=[5.0], throttle=["gpu_idle", "sync_boost"])]})["quiet"]


def test_is_refusal() -> None:
    assert is_refusal({"status": "skipped", "reason": "machine not quiet (--require-quiet): x"})
    assert not is_refusal({"status": "skipped", "reason": "fp16 on the CPU"})
    assert not is_refusal({"status": "failed", "reason": "machine not quiet"})


# -- energy per item ----------------------------------------------------------------------------


def rec(level: str, calls: int | None, **work: Any) -> dict[str, Any]:
    return {"benchmark": {"level": level, "name": "x"},
            "measurement": {"calls": calls} if calls else {}, "work": work}  # fmt: skip


def test_work_items_per_level() -> None:
    assert work_items(rec("operator", 120)) == (120.0, "call")
    assert work_items(rec("network", 50, samples_per_step=32)) == (1600.0, "sample")
    assert work_items(rec("distributed", 40, per_rank_batch=24)) == (960.0, "sample")
    assert work_items(rec("distributed", 40, bytes=8)) == (40.0, "call")
    assert work_items(rec("network", None)) is None  # digits, agreement: not one measure()


def test_energy_metric() -> None:
    section = {"gpu": {"energy_j": 48.0}}
    m = energy_metric(section, rec("network", 50, samples_per_step=32))
    assert m == {"name": "energy_per_sample", "unit": "J/sample", "higher_is_better": False,
                 "value": 0.03}  # fmt: skip
    m = energy_metric(section, rec("operator", 96))
    assert m is not None and m["name"] == "energy_per_call" and m["value"] == 0.5
    assert energy_metric({"gpu": None}, rec("operator", 96)) is None
    assert energy_metric({"gpu": {"energy_j": None}}, rec("operator", 96)) is None


def test_energy_metrics_are_registered() -> None:
    from suite.metrics import REGISTRY

    assert REGISTRY["energy_per_sample"].unit == "J/sample"
    assert REGISTRY["energy_per_call"].higher_is_better is False


# -- the sampler thread, with a fake GPU --------------------------------------------------------


def test_region_samples_writes_series_and_summarises(tmp_path: Path) -> None:
    nv = machine()
    nv.devices[0].util, nv.devices[0].power_mw = 95, 400_000
    nv.devices[0].procs = [os.getpid(), 999_999_999]  # ours, and a pid that does not exist
    tel = TaskTelemetry(task_id="op-x", rank=0, world_size=1, interval_ms=20,
                        series_dir=tmp_path / "telemetry")  # fmt: skip
    tel.readers = [N.GpuReader(nv, N.visible_gpus(nv, {}).visible[0])]
    tel.gpu_reason = None
    with tel.region():
        time.sleep(0.3)
    with tel.region():  # a second timed region (a sweep's next point)
        time.sleep(0.1)
    assert len(tel.segments) == 2
    sec = tel.section(0)
    dev = sec["gpu"]["devices"][0]
    assert dev["fields"]["gpu_util_pct"]["mean"] == 95.0
    # utilisation from the driver's samples inside the region (the fake: one per 50 ms)
    assert dev["utilisation"]["gpu_util_pct"]["source"] == "driver samples inside the region"
    assert dev["utilisation"]["gpu_util_pct"]["driver_period_ms"] == pytest.approx(50.0)
    assert 3 <= dev["fields"]["gpu_util_pct"]["n"] <= 7  # 0.3 s of 50 ms periods
    assert dev["fields"]["gpu_util_pct_polled"]["mean"] == 95.0
    assert dev["fields"]["mem_util_pct"]["mean"] == 47.0
    assert dev["fields"]["power_w"]["max"] == 400.0 and dev["fields"]["power_w"]["n"] >= 5
    # the counter is read at entry and exit (the fake adds 7 J per read): a positive delta
    assert dev["energy_source"] == "counter" and dev["energy_j"] > 0
    assert dev["mean_power_w"] == pytest.approx(dev["energy_j"] / tel.segments[0].duration_s)
    # no 0.5 s window fits in a 0.3 s region: no power from the counter's slope
    assert "energy_power_w" not in dev["fields"]
    assert dev["throttle_reasons"] == {"gpu_idle": 1.0}
    assert [p["pid"] for p in dev["other_processes"]] == [999_999_999]
    assert dev["other_processes"][0]["visible"] is False
    host = sec["host"]
    assert host["process_rss_mb"]["n"] >= 5 and host["sampler"]["ticks"] >= 5
    assert host["sampler"]["duty_pct"] < 50
    both = tel.section(None)
    assert both["gpu"]["energy_j"] > sec["gpu"]["energy_j"]
    lines = [
        json.loads(x)
        for x in (tmp_path / "telemetry" / "op-x-rank0.jsonl").read_text().splitlines()
    ]
    assert {x["kind"] for x in lines} == {"gpu", "host"}
    assert {x["segment"] for x in lines} == {0, 1}
    gpu_lines = [x for x in lines if x["kind"] == "gpu"]
    assert all(x["util"] == 95.0 and x["throttle"] == ["gpu_idle"] for x in gpu_lines)
    assert sec["series"] == "telemetry/op-x-rank0.jsonl"
    ts = [x["t"] for x in lines]
    assert ts == sorted(ts)


def test_sampling_off_runs_no_thread_but_keeps_the_counter_and_the_driver_samples() -> None:
    nv = machine()
    nv.devices[0].util, nv.devices[0].power_mw = 95, 400_000
    tel = TaskTelemetry(task_id="op-off", rank=0, world_size=1, interval_ms=20, sampling=False)
    tel.readers = [N.GpuReader(nv, N.visible_gpus(nv, {}).visible[0])]
    tel.gpu_reason = None
    threads = threading.active_count()
    with tel.region():
        assert threading.active_count() == threads  # no sampler thread started
        time.sleep(0.3)
    sec = tel.section(0)
    assert sec["sampling"] is False
    assert sec["host"]["sampler"]["ticks"] == 0
    dev = sec["gpu"]["devices"][0]
    # what the region's entry and exit read: the energy counter and the driver's own samples
    assert dev["energy_source"] == "counter" and dev["energy_j"] > 0
    assert dev["utilisation"]["gpu_util_pct"]["source"] == "driver samples inside the region"
    assert dev["fields"]["gpu_util_pct"]["mean"] == 95.0


def test_driver_window_keeps_samples_whose_period_lies_inside_the_region() -> None:
    # a 100 ms driver period; the region runs from 1.00 s to 1.55 s (µs below)
    start, end = 1_000_000, 1_550_000
    samples = [(1_050_000, 0.0),  # its period began 50 ms before the region: dropped
               (1_150_000, 97.0), (1_250_000, 98.0), (1_350_000, 97.0), (1_450_000, 99.0),
               (1_550_000, 97.0),
               (1_650_000, 30.0)]  # after the region: dropped  # fmt: skip
    kept, period, why = driver_window(samples, start, end)
    assert kept == [97.0, 98.0, 97.0, 99.0, 97.0] and period == 100.0 and why is None
    kept, period, why = driver_window(samples[:1], start, end)
    assert kept == [] and period is None and "fewer than two" in why
    kept, _, why = driver_window([(1_050_000, 5.0), (1_150_000, 5.0)], start, 1_100_000)
    assert kept == [] and "no driver sample's period (100 ms)" in why


def test_counter_power_uses_a_window_of_half_a_second() -> None:
    # a counter that advances 70 J every 100 ms (700 W), read every 100 ms slightly off phase
    pts = [(0.0, 0.0)] + [(0.1 * k + 0.01, 70_000.0 * k) for k in range(1, 11)]
    watts = counter_power(pts)
    assert watts[:5] == [None] * 5  # none of those has a reading 0.5 s before it
    assert all(w == pytest.approx(700, rel=0.05) for w in watts[5:])
    # a missing reading is skipped; a counter that went back gives no power
    assert counter_power([(0.0, 0.0), (0.3, None), (0.6, 300_000.0)]) == [None, None, 500.0]
    assert counter_power([(0.0, 5.0), (0.6, 1.0)]) == [None, None]


def test_region_power_from_the_counter_over_half_a_second() -> None:
    nv = machine()
    tel = TaskTelemetry(task_id="op-z", rank=0, world_size=1, interval_ms=50)
    tel.readers = [N.GpuReader(nv, N.visible_gpus(nv, {}).visible[0])]
    tel.gpu_reason = None
    with tel.region():
        time.sleep(0.8)
    rows = tel.segments[0].gpu_rows
    # a power for each reading at least 0.5 s after the region's entry, none before
    late = [r for r in rows if r["t"] - tel.segments[0].t_start >= 0.5]
    assert late and len(late) < len(rows)
    power = tel.section()["gpu"]["devices"][0]["fields"]["energy_power_w"]
    assert power["n"] == len(late)
    # the fake counter adds 7 J per read, once per 50 ms sample: about 140 W
    assert 100 < power["p5"] <= power["max"] < 160, power
    # the series keeps the counter's readings, not a power derived from them
    assert all("energy_mj" in r and "energy_power_w" not in r for r in rows)


def test_without_driver_samples_the_polled_readings_stand() -> None:
    nv = machine()
    nv.devices[0].util = 60
    nv.devices[0].unsupported = {"samples"}
    tel = TaskTelemetry(task_id="op-y", rank=0, world_size=1, interval_ms=20)
    tel.readers = [N.GpuReader(nv, N.visible_gpus(nv, {}).visible[0])]
    tel.gpu_reason = None
    with tel.region():
        time.sleep(0.12)
    dev = tel.section()["gpu"]["devices"][0]
    assert (
        dev["fields"]["gpu_util_pct"]["mean"] == 60.0 and "gpu_util_pct_polled" not in dev["fields"]
    )
    util = dev["utilisation"]["gpu_util_pct"]
    assert (
        util["source"].startswith("polled readings")
        and "nvmlDeviceGetSamples" in util["why_not_driver"]
    )
    assert "driver_samples_1" in dev["unsupported"]


def test_cpu_task_section_has_host_only() -> None:
    tel = TaskTelemetry(task_id="t", rank=0, world_size=1, interval_ms=10)
    tel.open("cpu")
    with tel.region():
        sum(range(200_000))
    sec = tel.section()
    assert sec["gpu"] is None and sec["gpu_unavailable_reason"].startswith("task runs on the CPU")
    assert sec["host"]["process_cpu_seconds"] >= 0 and "system_cpu_util_pct" in sec["host"]
    assert sec["series"] is None  # no run directory


# -- ranks --------------------------------------------------------------------------------------


def test_merge_rank_telemetry() -> None:
    def r(rank: int, quiet: bool, energy: float) -> dict[str, Any]:
        finding = {"check": "cpu_other_load", "busy": True, "message": "m", "evidence": {}}
        return {"rank": rank, "telemetry": {
            "gpu": {"devices": [{"index": rank, "uuid": f"GPU-{rank}", "fields": {}}], "energy_j": energy},
            "gpu_unavailable_reason": None, "host": {"cores": 2},
            "quiet": {"quiet": quiet, "findings": [] if quiet else [finding]}}}  # fmt: skip

    m = merge_rank_telemetry([r(0, True, 10.0), r(1, False, 12.5)])
    assert m["gpu"]["energy_j"] == 22.5 and [d["rank"] for d in m["gpu"]["devices"]] == [0, 1]
    assert m["host"] == {"per_rank": [{"cores": 2}, {"cores": 2}]}
    assert m["quiet"]["quiet"] is False and m["quiet"]["findings"][0]["rank"] == 1
