"""`make gpu-check`'s telemetry step and its summary (benchmarks/validation/gpu_check.py). Imports no
framework: it reads the steps' JSON and the runs' records, and starts `dlsuite` runs as
subprocesses."""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

#: the target of every suite/bare ratio (benchmarks/validation/gpu_check_steps.py)
RATIO_TARGET = (0.97, 1.03)
#: GPU utilisation the GEMM loop must reach (the issue's "over 90%")
UTIL_TARGET_PCT = 90.0
#: power "well above idle": at least this many times the idle reading
POWER_OVER_IDLE = 2.0
#: MLPerf Storage's rule: an accelerator counts as fed at >= 90% busy
FED_SHARE = 0.9


def records(run: Path) -> list[dict[str, Any]]:
    path = run / "results.jsonl"
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            out.append(json.loads(line))
    return out


def metric(rec: dict[str, Any], name: str, key: str = "median") -> float | None:
    for m in rec.get("metrics") or []:
        if m.get("name") == name:
            v = m.get(key, m.get("value"))
            return float(v) if isinstance(v, (int, float)) else None
    return None


def _ci(rec: dict[str, Any], name: str) -> list[float] | None:
    for m in rec.get("metrics") or []:
        if m.get("name") == name and m.get("ci95"):
            return [float(v) for v in m["ci95"]]
    return None


def _passed(rec: dict[str, Any]) -> bool:
    return bool((rec.get("correctness") or {}).get("passed"))


def _gpu_dev(rec: dict[str, Any]) -> dict[str, Any]:
    gpu = (rec.get("telemetry") or {}).get("gpu") or {}
    devs = gpu.get("devices") or [{}]
    return devs[0]


def _field(dev: dict[str, Any], name: str) -> float | None:
    f = (dev.get("fields") or {}).get(name)
    return float(f["mean"]) if f else None


# -- the telemetry step ---------------------------------------------------------------------


def idle_power_w(device: str, seconds: float = 3.0) -> dict[str, Any]:
    """The GPU's power before the step's work: the median of NVML's reading over ``seconds``
    (None on the CPU)."""
    if device != "cuda":
        return {"idle_power_w": None, "why": "no GPU in the CPU rehearsal"}
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        vals = []
        t_end = time.monotonic() + seconds
        while time.monotonic() < t_end:
            vals.append(pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0)
            time.sleep(0.1)
        util = pynvml.nvmlDeviceGetUtilizationRates(h).gpu
        pynvml.nvmlShutdown()
        return {"idle_power_w": statistics.median(vals), "n": len(vals), "util_pct": util}
    except Exception as exc:  # noqa: BLE001 - a missing reading is reported, not fatal
        return {"idle_power_w": None, "why": f"{type(exc).__name__}: {exc}"}


def _dlsuite(root: Path, out: Path, config: Path, device: str, *extra: str) -> int:
    argv = [sys.executable, "-m", "suite", "run", "--config", str(config), "--out", str(out),
            "--no-history", "--device", device, "--backend", "local", *extra]  # fmt: skip
    if (out / "results.jsonl").is_file():
        argv.append("--resume")
    return subprocess.run(argv, cwd=root).returncode


def telemetry_step(device: str, out: Path, root: Path) -> int:
    """The GEMM with the sampler and without it (``--no-telemetry``), the idle power before
    them, and a ResNet-50 training record for its energy per sample."""
    configs = root / "benchmarks" / "validation" / "gpu-check"
    idle = idle_power_w(device)
    rcs = [
        _dlsuite(root, out / "runs" / "telemetry-on", configs / f"gemm-{device}.toml", device),
        _dlsuite(root, out / "runs" / "telemetry-off", configs / f"gemm-{device}.toml", device,
                 "--no-telemetry"),
        _dlsuite(root, out / "runs" / "resnet50-energy", configs / f"resnet50-{device}.toml",
                 device),
    ]  # fmt: skip
    fig = telemetry_figures(out, idle)
    (out / "steps" / "telemetry.json").write_text(json.dumps(fig, indent=1))
    return 0 if all(rc == 0 for rc in rcs) and fig.get("records_ok") else 1


def telemetry_figures(out: Path, idle: dict[str, Any]) -> dict[str, Any]:
    on = records(out / "runs" / "telemetry-on")
    off = records(out / "runs" / "telemetry-off")
    r50 = records(out / "runs" / "resnet50-energy")
    fig: dict[str, Any] = {"idle": idle}
    ok = bool(on and off and r50) and all(r["status"] == "ok" for r in on + off + r50)
    fig["records_ok"] = ok
    if on and off:
        t_on, t_off = metric(on[0], "time"), metric(off[0], "time")
        ci_on, ci_off = _ci(on[0], "time"), _ci(off[0], "time")
        dev = _gpu_dev(on[0])
        power = dev.get("mean_power_w")
        util = _field(dev, "gpu_util_pct")
        fig["gemm"] = {
            "case": on[0]["benchmark"]["params"] | {"dtype": on[0]["benchmark"]["params"].get(
                "dtype", on[0].get("dtype"))},
            "time_on_s": t_on, "ci_on": ci_on, "time_off_s": t_off, "ci_off": ci_off,
            "tflops_on": metric(on[0], "flop_rate"),
            "sampler_cost": (t_on / t_off - 1.0) if t_on and t_off else None,
            "sampler_cost_decided": bool(ci_on and ci_off and (ci_on[0] > ci_off[1]
                                                              or ci_on[1] < ci_off[0])),
            "gpu_util_pct": util,
            "gpu_util_source": (dev.get("utilisation") or {}).get("gpu_util_pct"),
            "mean_power_w": power,
            "energy_per_call_j": metric(on[0], "energy_per_call", "value"),
            "util_met": util is not None and util > UTIL_TARGET_PCT,
            "power_met": (power is not None and idle.get("idle_power_w")
                          and power > POWER_OVER_IDLE * idle["idle_power_w"]),
            "off_section": (off[0].get("telemetry") or {}).get("sampling"),
            "correct": _passed(on[0]) and _passed(off[0]),
        }  # fmt: skip
    if r50:
        rec = r50[0]
        fig["resnet50"] = {
            "status": rec["status"],
            "throughput": metric(rec, "throughput"),
            "energy_per_sample_j": metric(rec, "energy_per_sample", "value"),
            "mean_power_w": _gpu_dev(rec).get("mean_power_w"),
            "correct": _passed(rec),
        }
    return fig


# -- the summary ----------------------------------------------------------------------------


def _fmt(v: Any, spec: str = ".3g", unit: str = "") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return f"{v:{spec}}{unit}"


def _ratio_line(fig: dict[str, Any]) -> str:
    ok = (fig.get("correctness") or {}).get("passed")
    judged = "met" if fig["met"] else "NOT met"
    if not str(fig.get("device_kind", "gpu")) == "gpu":
        judged = "not judged in the CPU rehearsal"
    return (f"{fig['case']}: suite/bare **{fig['ratio']:.3f}** (rounds "
            f"{', '.join(f'{r:.3f}' for r in fig['per_round'])}; target "
            f"{RATIO_TARGET[0]}-{RATIO_TARGET[1]} {judged}); "
            f"correctness {'pass' if ok else 'FAIL'}"
            + (f" (partial: the {fig.get('rounds_done')} round(s) done before the step was "
               "stopped)" if fig.get("partial") else ""))  # fmt: skip


def feed_figures(out: Path) -> dict[str, Any]:
    """Per decode place: the loader's steady rate, the feed's training rate from memory and
    fed, the input-bound share, and the feeding capacity against this device's own rate."""
    recs = records(out / "runs" / "feed")
    rows: dict[str, dict[str, Any]] = {}
    for rec in recs:
        p = rec["benchmark"]["params"]
        place = p.get("decode", "host")
        row = rows.setdefault(place, {"decode": place})
        name = rec["benchmark"]["name"]
        if rec["status"] == "skipped":
            row["skipped"] = rec.get("reason") or ""
            continue
        if rec["status"] != "ok":
            row.setdefault("not_ok", []).append(
                f"{name}: {rec['status']} {rec.get('reason') or ''}"[:200]
            )
            continue
        if name == "loader":
            rate = metric(rec, "throughput")
            if rate is not None and rate > row.get("loader_rate", 0.0):
                row.update(loader_rate=rate, loader_workers=p.get("workers"),
                           loader_correct=_passed(rec))  # fmt: skip
        elif name == "feed":
            e2e = rec.get("end_to_end") or {}
            row.update(train_rate_memory=e2e.get("train_rate_memory"),
                       train_rate_fed=e2e.get("train_rate_fed"),
                       input_bound_share=e2e.get("input_bound_share"),
                       feed_workers=p.get("workers"), feed_batch=p.get("batch"),
                       network=p.get("network"), feed_correct=_passed(rec),
                       dtype=e2e.get("dtype", rec.get("benchmark", {}).get("dtype")))  # fmt: skip
    for row in rows.values():
        rate, train = row.get("loader_rate"), row.get("train_rate_memory")
        if rate and train:
            row["feeding_capacity"] = math.floor(rate / (FED_SHARE * train))
            row["share_of_one"] = rate / (FED_SHARE * train)
    return {"rows": list(rows.values()), "records": len(recs)}


def nccl_figures(out: Path) -> dict[str, Any]:
    recs = records(out / "runs" / "nccl")
    rows = []
    for rec in recs:
        b = rec["benchmark"]
        rows.append({
            "benchmark": b["name"], "params": b["params"], "status": rec["status"],
            "backend": (rec.get("work") or {}).get("dist_backend")
            or (rec.get("distributed") or {}).get("backend"),
            "time": metric(rec, "time") or metric(rec, "step_time"),
            "algbw": metric(rec, "algbw"), "correct": _passed(rec),
            "reason": rec.get("reason"),
        })  # fmt: skip
    return {"rows": rows}


def run_counts(out: Path, name: str) -> dict[str, Any]:
    recs = records(out / "runs" / name)
    status: dict[str, int] = {}
    for r in recs:
        status[r["status"]] = status.get(r["status"], 0) + 1
    failed_checks = sum(1 for r in recs if r["status"] == "ok" and not _passed(r))
    return {"records": len(recs), "status": status, "failed_checks": failed_checks}


def junit_counts(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root)
    keys = ("tests", "failures", "errors", "skipped")
    return {k: sum(int(s.get(k, 0)) for s in suites) for k in keys} | {
        "time_s": sum(float(s.get("time", 0.0)) for s in suites)
    }


def run_report(out: Path, root: Path, timeout: float = 180.0) -> str:
    runs = sorted(str(p) for p in (out / "runs").iterdir() if (p / "results.jsonl").is_file())
    if not runs:
        return "no run to report yet"
    argv = [sys.executable, "-m", "suite", "report", *runs, "--out", str(out / "report")]
    try:
        path = os.pathsep.join([str(root), *filter(None, [os.environ.get("PYTHONPATH")])])
        done = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "PYTHONPATH": path})  # fmt: skip
    except subprocess.TimeoutExpired:
        return f"dlsuite report: timed out after {timeout:.0f} s (run it here over runs/)"
    (out / "logs" / "report.log").write_text(done.stdout + done.stderr)
    return (
        "report/report.md, report/report.html"
        if done.returncode == 0
        else (f"dlsuite report failed (exit {done.returncode}): logs/report.log")
    )


def finish(
    out: Path,
    state: dict[str, Any],
    steps: list[Any],
    device: str,
    root: Path,
    report_timeout: float = 180.0,
) -> str:
    """The report over every run and the one-screen summary (README.md in ``out``)."""
    report = run_report(out, root, report_timeout)
    calls = state.get("calls") or []
    m = (calls[-1].get("machine") if calls else {}) or {}
    gpu = "; ".join(m.get("gpus") or []) or "no GPU (the CPU rehearsal)"
    lines = [f"# gpu-check ({device}): {gpu}", "",
             f"Machine: {m.get('cpu')}, {m.get('cores')} cores, Python {m.get('python')}; "
             f"{len(calls)} call(s); report: {report}. Produced by `make gpu-check` "
             "(benchmarks/validation/gpu_check.py, docs/guide/gpu-check.md).", "",
             "| step | status | time | what it shows |", "| --- | --- | ---: | --- |"]  # fmt: skip
    figures: dict[str, Any] = {}
    for step in steps:
        st = state["steps"].get(step.name)
        if st is None:
            lines.append(f"| {step.name} | pending | | {step.what} |")
            continue
        shown = _step_text(step.name, out, st, figures)
        t = _fmt(st.get("elapsed_s"), ".0f", " s")
        status = "cut at the call's end (continues)" if st.get("cut_by_call") else st["status"]
        lines.append(f"| {step.name} | {status} | {t} | {shown} |")
    (out / "figures.json").write_text(json.dumps(figures, indent=1, default=float))
    text = "\n".join(lines) + "\n"
    (out / "README.md").write_text(text)
    return text


def _step_json(path: Path) -> dict[str, Any] | None:
    """A step's figures, None where there are none (or a write cut off: not whole JSON)."""
    try:
        doc: dict[str, Any] = json.loads(path.read_text())
        return doc
    except (OSError, ValueError):
        return None


def _step_text(name: str, out: Path, st: dict[str, Any], figures: dict[str, Any]) -> str:
    if st["status"] == "skipped":
        return st.get("reason", "")
    path = out / "steps" / f"{name}.json"
    if name.startswith("ratio-"):
        fig = _step_json(path)
        if fig is None:
            return "no result (see the log)"
        figures[name] = fig
        return _ratio_line(fig)
    if name == "telemetry":
        fig = _step_json(path)
        if fig is None:
            return "no result (see the log)"
        figures[name] = fig
        g, r = fig.get("gemm") or {}, fig.get("resnet50") or {}
        idle = (fig.get("idle") or {}).get("idle_power_w")
        cost = g.get("sampler_cost")
        return (f"GEMM {_fmt(g.get('tflops_on'), '.1f')} TFLOP/s, utilisation "
                f"{_fmt(g.get('gpu_util_pct'), '.0f', '%')} (target >{UTIL_TARGET_PCT:.0f}%: "
                f"{'met' if g.get('util_met') else 'not met'}), {_fmt(g.get('mean_power_w'), '.0f', ' W')} "
                f"against {_fmt(idle, '.0f', ' W')} idle; sampler cost "
                f"{_fmt(None if cost is None else 100 * cost, '+.2f', '%')} "
                f"({'beyond' if g.get('sampler_cost_decided') else 'within'} the two CIs); "
                f"ResNet-50 {_fmt(r.get('throughput'), '.0f')} img/s, "
                f"{_fmt(r.get('energy_per_sample_j'), '.3g', ' J')}/sample")  # fmt: skip
    if name == "feed":
        fig = feed_figures(out)
        figures[name] = fig
        parts = []
        for row in fig["rows"]:
            if "skipped" in row and "loader_rate" not in row and "train_rate_memory" not in row:
                parts.append(f"{row['decode']} decode: skipped ({row['skipped']})")
                continue
            parts.append(
                f"{row['decode']} decode: loader {_fmt(row.get('loader_rate'), '.0f')} img/s "
                f"(w{row.get('loader_workers')}), training {_fmt(row.get('train_rate_memory'), '.0f')} "
                f"img/s from memory, {_fmt(row.get('train_rate_fed'), '.0f')} fed, input-bound "
                f"{_fmt(None if row.get('input_bound_share') is None else 100 * row['input_bound_share'], '.0f', '%')}, "
                f"feeds {_fmt(row.get('share_of_one'), '.2f')} of this device"
                + (f" [{'; '.join(row['not_ok'])}]" if row.get("not_ok") else ""))  # fmt: skip
        return "; ".join(parts) or "no records"
    if name == "nccl":
        fig = nccl_figures(out)
        figures[name] = fig
        ok = sum(1 for r in fig["rows"] if r["status"] == "ok" and r["correct"])
        backends = sorted({str(r["backend"]) for r in fig["rows"] if r["backend"]})
        big = [r for r in fig["rows"] if r["algbw"] is not None]
        top = max(big, key=lambda r: r["params"].get("message_bytes", 0)) if big else None
        return (f"{ok}/{len(fig['rows'])} records ok and correct, backend "
                f"{', '.join(backends) or '-'}" + (
                    f"; allreduce {top['params'].get('message_bytes', 0) / 2**20:.0f} MiB "
                    f"{_fmt(top['algbw'], '.1f')} GB/s algbw" if top else ""))  # fmt: skip
    if name in ("jax-operator", "pytorch-operator", "network"):
        c = run_counts(out, name)
        figures[name] = c
        return f"{c['records']} records: {c['status']}; {c['failed_checks']} with a failed check"
    if name.startswith("gpu-test"):
        c = junit_counts(out / "logs" / f"{name}.xml")
        figures[name] = c
        return "no junit file (see the log)" if c is None else (
            f"{c['tests']} tests: {c['failures']} failed, {c['errors']} errors, "
            f"{c['skipped']} skipped in {c['time_s']:.0f} s")  # fmt: skip
    return ""


def archive_filter(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    """Leave the dataset made on the machine out of the archive (its records describe it)."""
    parts = Path(info.name).parts
    if len(parts) > 1 and parts[1] == "data":
        return None
    return info
