"""The worker: ``python -m suite.worker TASK.json`` inside the task's environment.

The only place an adapter (and so a framework) is imported. It runs one task and writes its
record(s), validated, to the task's ``record_path``; a task that fails still gets a record.
Exit code 0 means a record was written (whatever its status), non-zero that none could be.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import schemas
from suite.cpuinfo import usable_cores
from suite.errors import SuiteError, UnsupportedError
from suite.provenance import hostname, now_iso, worker_provenance
from suite.results import dumps, finite_or_null, record_skeleton, validate_record


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    name = type(exc).__name__
    return (
        name in ("OutOfMemoryError", "ResourceExhaustedError")
        or "out of memory" in str(exc).lower()
    )


class HostSampler:
    """Process CPU utilisation, load and peak RSS over the timed region."""

    def __enter__(self) -> HostSampler:
        self.t0 = time.perf_counter()
        self.c0 = os.times()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = time.perf_counter() - self.t0
        c1 = os.times()
        cpu = (c1.user - self.c0.user) + (c1.system - self.c0.system)
        cores = usable_cores()
        self.summary = {
            "process_cpu_util_mean": cpu / wall / cores if wall > 0 else None,
            "process_cpu_seconds": cpu,
            "cores": cores,
            "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
            "loadavg_1m": os.getloadavg()[0],
        }


def run_task(task: dict[str, Any]) -> list[dict[str, Any]]:
    """Run the task on this rank; one record, or one per parameter point of a sweep."""
    from suite.adapters import ADAPTERS
    from suite.launchers.base import export_rank_env, rank_env
    from suite.levels import level_module

    started = now_iso()
    t0 = time.perf_counter()
    ranks = rank_env()
    export_rank_env(ranks)
    record = record_skeleton(task, host=hostname(), started_at=started)
    record["rank"] = ranks.rank
    record["backend"].update(python=sys.executable, environment=sys.prefix)
    several: list[dict[str, Any]] = []
    sampler = HostSampler()
    try:
        adapter_cls = ADAPTERS.load(task["framework"])
        record["framework"].update(
            version=adapter_cls.installed_version(), adapter_version=adapter_cls.adapter_version
        )
        ok, why = adapter_cls.available()
        if not ok:
            raise SuiteError(f"{task['framework']} is not available here: {why}")
        if task["level"] not in adapter_cls.levels:
            raise UnsupportedError(
                adapter_cls.levels_reason
                or f"{task['framework']} does not run the {task['level']} level"
            )
        if task.get("xla"):
            if not adapter_cls.xla_capable:
                raise UnsupportedError(
                    f"{task['framework']} has no XLA compilation of operators; run it without --xla"
                )
            os.environ["DLSUITE_TF_XLA"] = "1"  # read by the TensorFlow adapter's setup
        adapter = adapter_cls()
        device = adapter.setup(task["device"])
        if task.get("peak_tflops"):
            device.peak_tflops.update(task["peak_tflops"])
            configured = ", ".join(sorted(task["peak_tflops"]))
            device.peak_source = (
                f"configured for {configured}: [device] peak_tflops in the config file; "
                f"other dtypes: {device.peak_source}"
            )
        record["device"] = device.to_dict()
        record["provenance"] = worker_provenance(task.get("provenance", {}), adapter.versions())
        gpu_reason = (
            "GPU telemetry (NVML) is not implemented yet"
            if device.kind == "gpu"
            else "task runs on the CPU: no GPU to sample"
        )
        record["telemetry"]["gpu_unavailable_reason"] = gpu_reason
        result = level_module(task["level"]).execute(
            task, adapter, device, timed_region=lambda: sampler
        )
        for fields in result if isinstance(result, list) else [result]:
            rec = json.loads(json.dumps(record))  # a deep copy per record
            rec["benchmark"]["params"] = fields.pop("params", task["params"])
            rec.update(fields)
            rec["status"] = "ok"
            rec["telemetry"]["host"] = getattr(sampler, "summary", None)
            several.append(rec)
    except UnsupportedError as exc:
        record.update(status="skipped", reason=str(exc))
    except Exception as exc:  # noqa: BLE001 - any failure becomes a record; the run goes on
        status = "oom" if _is_oom(exc) else "failed"
        record.update(
            status=status,
            reason=f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:500],
            error={
                "type": type(exc).__name__,
                "message": str(exc)[:4000],
                "traceback": traceback.format_exc()[-8000:],
            },
        )
    duration = time.perf_counter() - t0
    out = several or [record]
    for rec in out:
        rec["duration_s"] = duration
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m suite.worker TASK.json", file=sys.stderr)
        return 2
    task = json.loads(Path(args[0]).read_text())
    schemas.validate("task", task)
    records = [finite_or_null(r) for r in run_task(task)]
    for i, record in enumerate(records):
        try:
            validate_record(record)
        except SuiteError as exc:  # a suite bug: still leave a valid record saying so
            records[i] = {
                **record_skeleton(task, host=hostname(), started_at=record["started_at"]),
                "rank": record.get("rank"),
                "status": "failed",
                "reason": f"record failed schema validation: {exc}",
                "error": {"type": "SchemaError", "message": str(exc)},
            }
            validate_record(records[i])
    # One file per rank: ranks never interleave their writes.
    rank = records[0].get("rank") or 0
    out = Path(task["record_path"] + (f".rank{rank}" if task["world_size"] > 1 else ""))
    with out.open("a", encoding="utf-8") as fh:
        for record in records:
            fh.write(dumps(record) + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    record = records[0]
    print(f"[dlsuite.worker] {task['task_id']}: {record['status']}", flush=True)
    if task["world_size"] > 1 and any(r["status"] in ("failed", "oom") for r in records):
        # Exit non-zero so the launcher (torchrun, mpirun, srun) stops the other ranks, which
        # may be blocked in a collective waiting for this one; the record is already written.
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
