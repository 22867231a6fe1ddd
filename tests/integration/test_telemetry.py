"""Telemetry and the quiet-machine check for real: on this CPU machine (host telemetry, no GPU,
a real busy CPU refused by --require-quiet) and, marked ``gpu``, on an NVIDIA GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from suite.telemetry.host import usable_cpus
from tests.helpers import cli, records


def _series(run_dir: Path, rec: dict) -> list[dict]:
    path = run_dir / rec["telemetry"]["series"]
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.numpy
def test_cpu_run_has_host_telemetry_a_verdict_and_a_series(tmp_path: Path) -> None:
    out = tmp_path / "run"
    # the region is the sampling phase, which a quick CPU task may finish within one 50 ms
    # interval: a config's min_time_s holds it open for 0.4 s
    cfg = tmp_path / "min-time.toml"
    cfg.write_text("[measure]\nmin_time_s = 0.4\n")
    proc = cli("run", "--quick", "--framework", "numpy", "--benchmark", "gemm,softmax",
               "--dtype", "fp32", "--device", "cpu", "--telemetry-interval", "50",
               "--config", str(cfg), "--out", str(out), timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    recs = records(out)
    assert recs and all(r["status"] == "ok" for r in recs)
    for r in recs:
        tel = r["telemetry"]
        assert tel["gpu"] is None
        assert tel["gpu_unavailable_reason"] == "task runs on the CPU: no GPU to sample"
        host = tel["host"]
        assert host["interval_ms"] == 50.0 and host["process_rss_mb"]["max"] > 10
        assert host["system_cpu_util_pct"]["n"] >= 1 and host["process_cpu_seconds"] > 0
        assert host["sampler"]["ticks"] >= 1 and "max_rss_mb" in host and "loadavg_1m" in host
        quiet = tel["quiet"]
        assert isinstance(quiet["quiet"], bool) and quiet["required"] is False
        assert quiet["readings"]["cpu"]["usable_cores"] == len(usable_cpus())
        assert quiet["quiet"] == (not any(f["busy"] for f in quiet["findings"]))
        assert r["measurement"]["calls"] >= r["measurement"]["samples"]
        # the region is the sampling phase: warm-up and calibration are outside it
        m = r["measurement"]
        assert m["sampled_calls"] == m["samples"] * m["inner_repeats"] + m["rewarm_calls"]
        assert m["sampled_calls"] < m["calls"]
        assert host["duration_s"] == pytest.approx(m["elapsed_s"], abs=0.05)
        assert m["min_time_s"] == 0.4 and m["elapsed_s"] >= 0.4
        assert not any(m["name"].startswith("energy") for m in r["metrics"])  # no GPU energy
        series = _series(out, r)
        assert tel["series"] == f"telemetry/{r['task_id']}-rank0.jsonl"
        assert series and {s["kind"] for s in series} == {"host"}
        assert all(s["rss_mb"] > 0 for s in series)
    # the report plots the host timelines and says how busy the CPU was
    rep = cli("report", str(out), "--format", "md")
    assert rep.returncode == 0, rep.stderr
    md = (out / "report.md").read_text()
    section = md.split("## Utilisation and power timelines", 1)[1].split("\n## ", 1)[0]
    assert "No telemetry timelines" not in section and "telemetry-operator-gemm" in section
    assert "mean host CPU (%)" in section


@pytest.mark.numpy
def test_require_quiet_refuses_a_busy_cpu_and_names_the_load(tmp_path: Path) -> None:
    cores = len(usable_cpus())
    spin = "import os, time\nos.nice(0)\nwhile True: pass\n"
    loops = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(cores)]
    try:
        time.sleep(1.0)  # let them take the cores
        out = tmp_path / "busy"
        proc = cli("run", "--quick", "--framework", "numpy", "--benchmark", "gemm",
                   "--dtype", "fp32", "--device", "cpu", "--require-quiet", "--out", str(out),
                   timeout=300)  # fmt: skip
    finally:
        for p in loops:
            p.kill()
            p.wait()
    # refused tasks are skipped, not failed: the run itself succeeds
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    recs = records(out)
    assert recs and all(r["status"] == "skipped" for r in recs)
    for r in recs:
        reason = r["reason"]
        assert reason.startswith("machine not quiet (--require-quiet): other processes kept")
        assert f"of the task's {cores} usable CPU cores busy" in reason and "; top: " in reason
        quiet = r["telemetry"]["quiet"]
        assert quiet["quiet"] is False and quiet["required"] is True and quiet["refused"] is True
        finding = next(f for f in quiet["findings"] if f["check"] == "cpu_other_load")
        # over the check's own limit: the loops share the cores with the other test worker
        # under CI, so how far over it they get is not this test's to fix (0.87 of 2 seen)
        assert finding["evidence"]["other_cores"] > finding["evidence"]["limit"] > 0
        # (the loops are not always the heaviest processes named: this machine is shared)
        assert finding["evidence"]["top_other_processes"]
        assert "metrics" not in r and not (out / "telemetry").exists()


# -- on an NVIDIA GPU ---------------------------------------------------------------------------

GEMM_CONFIG = """
[run]
benchmarks = ["gemm"]
dtypes = ["bf16"]
device = "cuda"

[measure]
# run the whole budget (an unreachable CI target): 4 s of GEMMs, many driver samples
time_budget_s = 4.0
target_ci_rel = 1e-9
warmup_s = 0.5

[operator.gemm]
sizes = [{m = 8192, n = 8192, k = 8192}]
"""


@pytest.mark.gpu
@pytest.mark.pytorch
def test_gemm_loop_on_gpu_shows_utilisation_power_and_energy(tmp_path: Path) -> None:
    import pynvml

    pynvml.nvmlInit()
    try:
        cvd = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
        handle = (
            pynvml.nvmlDeviceGetHandleByIndex(int(cvd))
            if cvd.isdigit()
            else pynvml.nvmlDeviceGetHandleByUUID(cvd)
        )
        idle_w = pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
        uuid = pynvml.nvmlDeviceGetUUID(handle)
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
    finally:
        pynvml.nvmlShutdown()
    cfg = tmp_path / "gemm.toml"
    cfg.write_text(GEMM_CONFIG)
    out = tmp_path / "gpu-gemm"
    proc = cli("run", "--config", str(cfg), "--out", str(out), timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (r,) = records(out)
    assert r["status"] == "ok", r.get("reason")
    tel = r["telemetry"]
    assert tel["gpu_unavailable_reason"] is None, tel["gpu_unavailable_reason"]
    (dev,) = tel["gpu"]["devices"]
    assert dev["uuid"] == uuid, (dev["uuid"], uuid)
    fields = dev["fields"]
    # utilisation from the driver's samples inside the region (the first polled reading of
    # an H100 covered time before it and read 0%)
    assert dev["utilisation"]["gpu_util_pct"]["source"] == "driver samples inside the region"
    assert fields["gpu_util_pct"]["mean"] > 90, fields["gpu_util_pct"]
    # power from the energy counter's slope, well above idle; NVML's own power reading is a
    # trailing average on Hopper and lags it, but over 4 s it must rise above idle too
    assert fields["energy_power_w"]["mean"] > idle_w + 150, (fields["energy_power_w"], idle_w)
    assert dev["mean_power_w"] > idle_w + 150, (dev["mean_power_w"], idle_w)
    assert fields["power_w"]["max"] > idle_w + 100, (fields["power_w"], idle_w)
    assert fields["sm_clock_mhz"]["max"] > 0 and fields["mem_used_mb"]["max"] > 1000
    assert dev["energy_source"] == "counter" and dev["energy_j"] > 0
    # the counter and the integral of the power samples agree roughly
    series = [s for s in _series(out, r) if s["kind"] == "gpu"]
    assert len(series) >= 20
    energy = next(m for m in r["metrics"] if m["name"] == "energy_per_call")
    assert energy["unit"] == "J/call" and energy["value"] > 0
    assert tel["gpu"]["work"]["items"] == r["measurement"]["sampled_calls"]
    assert energy["value"] == pytest.approx(dev["energy_j"] / r["measurement"]["sampled_calls"])
    # 2·8192³ FLOP per call at well under 1000 TFLOP/s and 1000 W: more than 1 J per call
    assert energy["value"] > 1.0
    # the worker's own process was on the GPU (a CUDA context), yet is not "another process"
    assert dev["other_processes"] == [], dev["other_processes"]
    assert not any(f["check"] == "gpu_other_processes" for f in tel["quiet"]["findings"]), tel[
        "quiet"
    ]


@pytest.mark.gpu
@pytest.mark.pytorch
def test_network_training_on_gpu_has_energy_per_sample(tmp_path: Path) -> None:
    out = tmp_path / "gpu-net"
    proc = cli("run", "--level", "network", "--quick", "--device", "cuda", "--dtype", "fp32",
               "--benchmark", "train", "--network", "resnet18", "--out", str(out), timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    recs = records(out)
    assert recs
    for r in recs:
        m = next(m for m in r["metrics"] if m["name"] == "energy_per_sample")
        assert m["unit"] == "J/sample" and m["value"] > 0
        items = r["telemetry"]["gpu"]["work"]
        assert items["unit"] == "sample"
        assert items["items"] == r["measurement"]["sampled_calls"] * r["work"]["samples_per_step"]
