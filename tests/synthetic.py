"""Synthetic result records that validate against schemas/result.schema.json.

For what the suite cannot produce yet (distributed levels, GPU telemetry timelines) and for
fast unit tests of report/compare/references. Every builder validates what it returns.
"""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

from suite.metrics import Check, Metric
from suite.results import ResultsFile, validate_record

TIME = Metric("time", "s", higher_is_better=False)
FLOP_RATE = Metric("flop_rate", "TFLOP/s", higher_is_better=True)
BANDWIDTH = Metric("bandwidth", "GB/s", higher_is_better=True)
PERCENT_OF_PEAK = Metric("percent_of_peak", "%", higher_is_better=True)
BUSBW = Metric("busbw", "GB/s", higher_is_better=True)
ALGBW = Metric("algbw", "GB/s", higher_is_better=True)
THROUGHPUT = Metric("throughput", "samples/s", higher_is_better=True)
SCALING_EFFICIENCY = Metric("scaling_efficiency", "%", higher_is_better=True)

CPU = {"kind": "cpu", "name": "AMD EPYC", "count": 1, "cores": 2, "driver": None}
GPU = {"kind": "gpu", "name": "NVIDIA H100 80GB HBM3", "count": 1, "driver": "550.54"}


def samples(center: float, rel_spread: float = 0.01, n: int = 21) -> list[float]:
    """``n`` samples spread evenly ±rel_spread around ``center`` (median = center)."""
    return [center * (1 + rel_spread * (2 * i / (n - 1) - 1)) for i in range(n)]


def _task_id(level: str, name: str, framework: str, dtype: str, params: dict[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:10]
    return f"{level}-{name}-{framework}-{dtype}-{digest}"


def base(
    *,
    level: str = "operator",
    name: str = "gemm",
    params: dict[str, Any] | None = None,
    dtype: str = "fp32",
    framework: str = "pytorch",
    status: str = "ok",
    world_size: int = 1,
    rank: int | None = 0,
    task_id: str | None = None,
) -> dict[str, Any]:
    params = dict(params if params is not None else {"m": 256, "n": 256, "k": 256})
    return {
        "schema_version": "1",
        "run_id": "synthetic0001",
        "task_id": task_id or _task_id(level, name, framework, dtype, {**params, "ws": world_size}),
        "status": status,
        "benchmark": {"level": level, "name": name, "params": params, "size_set": "quick"},
        "framework": {"name": framework, "version": "2.13.0+cpu", "adapter_version": "1"},
        "backend": {"kind": "local", "image": None},
        "dtype": dtype,
        "rank": rank,
        "world_size": world_size,
        "host": "node01",
        "telemetry": {"gpu": None, "gpu_unavailable_reason": "synthetic", "host": None},
        "provenance": {
            "suite_version": "0.1.0",
            "git_commit": "0123456789abcdef0123456789abcdef01234567",
            "git_dirty": False,
            "python": "3.11.7",
            "numpy": "2.4.6",
            "platform": "Linux-x86_64",
            "versions": {"torch": "2.13.0+cpu", "cuda": None},
        },
        "started_at": "2026-01-01T00:00:00+00:00",
        "duration_s": 1.0,
    }


def _ok_fields(rec: dict[str, Any], device: dict[str, Any], checks: list[Check]) -> None:
    rec["device"] = copy.deepcopy(device)
    rec["correctness"] = {
        "passed": all(c.passed for c in checks),
        "checks": [c.to_dict() for c in checks],
    }
    rec["measurement"] = {
        "warmup_iters": 3,
        "inner_repeats": 1,
        "samples": 21,
        "stop_reason": "ci_target_met",
    }


def operator_record(
    name: str = "gemm",
    params: dict[str, Any] | None = None,
    *,
    dtype: str = "fp32",
    time_s: float = 1.8e-4,
    flops: float = 2 * 256**3,
    nbytes: float = 4 * 3 * 256**2,
    peak_tflops: float = 0.21,
    device: dict[str, Any] | None = None,
    framework: str = "pytorch",
    error: float = 2e-7,
    tolerance: float = 1e-5,
    task_id: str | None = None,
) -> dict[str, Any]:
    """An ok operator record with time, flop_rate, bandwidth, % of peak and two checks."""
    rec = base(name=name, params=params, dtype=dtype, framework=framework, task_id=task_id)
    dev = copy.deepcopy(device or CPU)
    dev["peak_tflops"] = {dtype: peak_tflops}
    dev["peak_source"] = "synthetic: declared for a test"
    _ok_fields(
        rec,
        dev,
        [
            Check("c.max_rel_error_vs_fp64", error * 1.5, tolerance * 10),
            Check("c.l2_rel_error_vs_fp64", error, tolerance),
        ],
    )
    ts = samples(time_s)
    rate = FLOP_RATE.entry([flops / t / 1e12 for t in ts])
    rec["metrics"] = [
        TIME.entry(ts),
        rate,
        BANDWIDTH.entry([nbytes / t / 1e9 for t in ts]),
        PERCENT_OF_PEAK.entry(value=100 * rate["value"] / peak_tflops),
    ]
    rec["work"] = {
        "flops": flops,
        "bytes": nbytes,
        "arithmetic_intensity": flops / nbytes,
        "peak_tflops": peak_tflops,
    }
    validate_record(rec)
    return rec


def collective_record(
    name: str = "allreduce",
    message_bytes: int = 1 << 20,
    *,
    world_size: int = 8,
    busbw_gbps: float = 100.0,
    rank: int | None = 0,
    framework: str = "pytorch",
    dtype: str = "fp32",
) -> dict[str, Any]:
    """An ok collective record: time, algbw and busbw (nccl-tests' allreduce factor)."""
    rec = base(
        level="distributed",
        name=name,
        params={"message_bytes": message_bytes},
        dtype=dtype,
        framework=framework,
        world_size=world_size,
        rank=rank,
    )
    _ok_fields(rec, {**GPU, "count": world_size}, [Check("value_vs_expected", 0.0, 1e-6)])
    factor = 2 * (world_size - 1) / world_size
    algbw = busbw_gbps / factor
    t = message_bytes / (algbw * 1e9)
    ts = samples(t, 0.02)
    rec["metrics"] = [
        TIME.entry(ts),
        ALGBW.entry([message_bytes / x / 1e9 for x in ts]),
        BUSBW.entry([message_bytes / x / 1e9 * factor for x in ts]),
    ]
    validate_record(rec)
    return rec


def scaling_record(
    name: str = "ddp_train",
    *,
    world_size: int = 2,
    efficiency_pct: float = 95.0,
    throughput: float = 1000.0,
    framework: str = "pytorch",
) -> dict[str, Any]:
    rec = base(
        level="distributed",
        name=name,
        params={"network": "resnet18", "batch_per_rank": 32},
        framework=framework,
        world_size=world_size,
    )
    _ok_fields(rec, {**GPU, "count": world_size}, [Check("weights_equal_across_ranks", 0.0, 1e-6)])
    tp = throughput * world_size * efficiency_pct / 100
    rec["metrics"] = [
        TIME.entry(samples(32 * world_size / tp)),
        THROUGHPUT.entry(samples(tp)),
        SCALING_EFFICIENCY.entry(value=efficiency_pct),
    ]
    validate_record(rec)
    return rec


def strategy_record(
    strategy: str = "allreduce",
    *,
    framework: str = "pytorch",
    world_size: int = 2,
    throughput: float = 5000.0,
    bytes_per_step: float | None = None,
    tta: float | None = 1.0,
    steps: int | None = 49,
    final: float = 0.97,
    network: str = "mlp",
) -> dict[str, Any]:
    """A merged ``strategies`` record as the worker and the host write it (before the host's
    comparison with the allreduce baseline)."""
    from suite import strategies as S
    from suite.levels.distributed.strategy_run import DIGITS_DEFAULTS
    from suite.metrics import REGISTRY

    s = S.get(strategy)
    options = S.validate_options(s, {})
    params = {"network": network, "batch": 48, "lr": 0.01, "strategy": strategy,
              "options": options, "digits": dict(DIGITS_DEFAULTS["quick"])}  # fmt: skip
    rec = base(level="distributed", name="strategies", params=params, framework=framework,
               world_size=world_size, rank=None)  # fmt: skip
    _ok_fields(rec, CPU, [Check("digits.reached_target_accuracy.shortfall", 0.0, 0.0)])
    full = 104488.0
    sent = bytes_per_step if bytes_per_step is not None else (
        full / 2 if s.compression == "fp16" else full
    )  # fmt: skip
    rec["metrics"] = [
        REGISTRY["step_time"].entry(samples(48 / throughput)),
        THROUGHPUT.entry(samples(throughput)),
        REGISTRY["throughput_per_rank"].entry(samples(throughput / world_size)),
        REGISTRY["bytes_per_step"].entry(value=sent),
        REGISTRY["comm_share"].entry(value=40.0),
        REGISTRY["final_accuracy"].entry(value=final),
        REGISTRY["distance_from_sync"].entry(value=0.0 if s.exact else 0.05),
    ]
    if s.compression:
        rec["metrics"].append(REGISTRY["compression_ratio"].entry(value=full / sent))
    if tta is not None and steps is not None:
        rec["metrics"] += [REGISTRY["time_to_accuracy"].entry(value=tta),
                           REGISTRY["steps_to_target"].entry(value=steps)]  # fmt: skip
    rec["strategy"] = {
        **s.describe(),
        "options": options,
        "mechanism": f"{framework}'s own mechanism for {strategy}",
        "bytes_per_step": {"computed": sent, "uncompressed": full, "model": "synthetic",
                           "written_by_process": sent + 576.0, "value_is": "computed"},
        "digits": {"target_accuracy": 0.95, "budget_steps": 174, "steps_to_target": steps,
                   "time_to_accuracy_s": tta, "final_accuracy": final,
                   "distance_from_sync": 0.0 if s.exact else 0.05,
                   "curve": [[7, 0.1, 0.7], [float(steps or 174), tta or 2.0, final]]},
    }  # fmt: skip
    rec["distributed"] = {"world_size": world_size, "launcher": "torchrun", "backend": "gloo",
                          "nodes": ["node01"], "ranks": [{"rank": r, "host": "node01",
                          "status": "ok"} for r in range(world_size)]}  # fmt: skip
    validate_record(rec)
    return rec


def failed_record(name: str = "conv2d", status: str = "failed", **kw: Any) -> dict[str, Any]:
    rec = base(name=name, status=status, rank=None, **kw)
    rec["reason"] = "worker exited with code 1"
    rec["error"] = {"type": "WorkerDied", "message": "boom\ntraceback...", "log": "logs/x.log"}
    validate_record(rec)
    return rec


def skipped_record(name: str = "attention", **kw: Any) -> dict[str, Any]:
    rec = base(name=name, status="skipped", rank=None, **kw)
    rec["reason"] = "fp16 on the CPU is not supported by this adapter"
    validate_record(rec)
    return rec


def write_run(
    run_dir: Path,
    records: list[dict[str, Any]],
    telemetry: dict[str, list[dict[str, Any]]] | None = None,
) -> Path:
    """A run directory: results.jsonl (validated on append), a manifest, telemetry files."""
    run_dir.mkdir(parents=True, exist_ok=True)
    results = ResultsFile(run_dir / "results.jsonl")
    for rec in records:
        results.append(rec)
    (run_dir / "manifest.json").write_text(
        json.dumps(
            {
                "run_id": "synthetic0001",
                "created_at": "2026-01-01T00:00:00+00:00",
                "state": "finished",
                "argv": ["run", "--synthetic"],
            }
        )
    )
    for task_id, lines in (telemetry or {}).items():
        (run_dir / "telemetry").mkdir(exist_ok=True)
        (run_dir / "telemetry" / f"{task_id}.jsonl").write_text(
            "".join(json.dumps(line) + "\n" for line in lines)
        )
    return run_dir


def gpu_timeline(gpus: int = 2, seconds: float = 3.0, hz: float = 10.0) -> list[dict[str, Any]]:
    """Telemetry lines {"t", "gpu", "util", "power_w", "mem_used_mb"}: a ramp then a plateau."""
    out = []
    for i in range(int(seconds * hz)):
        t = i / hz
        for g in range(gpus):
            level = min(1.0, t / 0.5)
            out.append(
                {
                    "t": t,
                    "gpu": g,
                    "util": 95.0 * level,
                    "power_w": 80.0 + 500.0 * level - 10 * g,
                    "mem_used_mb": 1000.0 + 100 * g,
                }
            )
    return out


def scaled(rec: dict[str, Any], time_factor: float) -> dict[str, Any]:
    """A copy with every time-like metric (unit s) × factor and every rate ÷ factor, CIs too."""
    out = copy.deepcopy(rec)
    for m in out.get("metrics") or []:
        if m["unit"] == "s":
            f = time_factor
        elif m["higher_is_better"]:
            f = 1 / time_factor
        else:
            continue
        for key in ("value", "median", "mean", "min", "max", "p5", "p95", "p99", "iqr"):
            if key in m:
                m[key] *= f
        if "ci95" in m:
            m["ci95"] = sorted(x * f for x in m["ci95"])
    validate_record(out)
    return out


#: what the quiet check says of a task run beside another process (suite/telemetry/quiet.py)
BUSY_MESSAGE = "other processes kept 1.04 of 2 cores busy"


def mark_busy(*records: dict[str, Any], message: str = BUSY_MESSAGE) -> None:
    """Each ok record measured while the quiet-machine check found other load."""
    for rec in records:
        if rec["status"] == "ok":
            rec["telemetry"]["quiet"] = {"quiet": False, "findings": [
                {"check": "cpu_other_load", "busy": True, "message": message, "evidence": {}},
                {"check": "load_average", "busy": False, "message": "load 2.9", "evidence": {}},
            ]}  # fmt: skip
