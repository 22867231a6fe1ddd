"""Merge the per-rank records of a multi-rank task into one record per parameter point, and
add scaling efficiency against the 1-rank run of the same benchmark. Host side: plain data."""

from __future__ import annotations

import copy
import json
import re
import statistics
from typing import Any

from suite.metrics import REGISTRY
from suite.telemetry import merge_rank_telemetry

SCALING_EFFICIENCY = REGISTRY["scaling_efficiency"]


def _key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True)


def group_by_point(rank_records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for rec in rank_records:
        groups.setdefault(_key(rec["benchmark"]["params"]), []).append(rec)
    return groups


def merge_ranks(recs: list[dict[str, Any]], world_size: int, launcher: str) -> dict[str, Any]:
    """One record from the ranks' records of one parameter point.

    Each metric keeps the *worst* rank's statistics (the slowest time, the lowest rate: what the
    job as a whole gets) and adds ``across_ranks`` = min/median/max of the ranks' values, so
    stragglers show. Correctness is every rank's checks, prefixed with the rank.
    """
    recs = sorted(recs, key=lambda r: r.get("rank") or 0)
    present = {int(r.get("rank") or 0) for r in recs}
    base = copy.deepcopy(recs[0])
    base["rank"] = None
    hosts = sorted({r["host"] for r in recs})
    per_rank = [{"rank": r.get("rank"), "host": r["host"], "status": r["status"],
                 "duration_s": r["duration_s"]} for r in recs]  # fmt: skip
    for entry, r in zip(per_rank, recs, strict=True):
        node = (r.get("scheduler") or {}).get("node")
        if node:  # the scheduler's node (several Slurm nodes may share one host name)
            entry["node"] = node
    base["distributed"] = {
        "world_size": world_size,
        "launcher": launcher,
        "backend": (recs[0].get("work") or {}).get("dist_backend"),
        "nodes": hosts,
        "ranks": per_rank,
    }
    base["duration_s"] = max(r["duration_s"] for r in recs)
    bad = [r for r in recs if r["status"] != "ok"]
    if bad:
        worst = bad[0]
        base.update({k: worst.get(k) for k in ("status", "reason", "error") if k in worst})
        base["reason"] = f"rank {worst.get('rank')}: {worst.get('reason') or worst['status']}"
        for key in ("metrics", "correctness", "measurement"):
            base.pop(key, None)
        return base
    missing = sorted(set(range(world_size)) - present)
    if missing:
        # Every rank wrote records, but not for this point (one rank failed the whole sweep
        # with a record of the task's parameters, say): the point was not measured on all
        # ranks, so it is no "ok" of the job.
        base["status"] = "failed"
        base["reason"] = f"rank(s) {missing} wrote no record for this parameter point"
        base["error"] = {"type": "RankFailed", "message": base["reason"]}
        for key in ("metrics", "correctness", "measurement"):
            base.pop(key, None)
        return base
    merged = []
    for entry in recs[0]["metrics"]:
        name = entry["name"]
        if not all(any(m["name"] == name for m in r["metrics"]) for r in recs):
            continue  # not measured on every rank (energy where one rank's GPU has no counter)
        entries = [next(m for m in r["metrics"] if m["name"] == name) for r in recs]
        values = [m["value"] for m in entries]
        pick = max if not entry["higher_is_better"] else min
        worst_i = values.index(pick(values))
        out = dict(entries[worst_i])
        out["across_ranks"] = {"min": min(values), "median": statistics.median(values), "max": max(values),
                               "worst_rank": recs[worst_i].get("rank")}  # fmt: skip
        merged.append(out)
    base["metrics"] = merged
    checks = []
    for r in recs:
        for c in r["correctness"]["checks"]:
            checks.append({**c, "name": f"rank{r.get('rank')}.{c['name']}"})
    base["correctness"] = {"passed": all(c["passed"] for c in checks), "checks": checks}
    base["telemetry"] = merge_rank_telemetry(recs)
    return base


LOG_TAIL = "\n--- worker log (tail) ---\n"

# torchrun's error summary names the rank whose failure it saw first; Open MPI's mpirun says
# which rank exited on a signal or with a non-zero status.
_TORCHRUN_ROOT = re.compile(
    r"Root Cause \(first observed failure\):.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)"
    r"(?:[^\n]*?\((SIG[A-Z0-9]+)\))?",
    re.S,
)
_MPIRUN_SIGNAL = re.compile(r"process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+)")
_MPIRUN_STATUS = re.compile(r"Process name: \[\[\d+,\d+\],(\d+)\]\s+Exit code:\s+(-?\d+)")


_SPAWN_ROOT = re.compile(r"\[dlsuite\.spawn\] rank (\d+) failed \(([^)]*)\)")


def launcher_root_cause(log: str) -> str | None:
    """The rank the launcher's own report blames first, from the tail of the task's log."""
    m = _TORCHRUN_ROOT.search(log)
    if m:
        how = m.group(3) or f"exit code {m.group(2)}"
        return f"torchrun saw rank {m.group(1)} fail first ({how})"
    m = _SPAWN_ROOT.search(log)
    if m:
        return f"spawn saw rank {m.group(1)} fail first ({m.group(2)})"
    m = _MPIRUN_SIGNAL.search(log)
    if m:
        return f"mpirun saw rank {m.group(1)} exit on signal {m.group(2)}"
    m = _MPIRUN_STATUS.search(log)
    if m:
        return f"mpirun saw rank {m.group(1)} exit with code {m.group(2)}"
    return None


def missing_ranks_record(
    skeleton: dict[str, Any], seen: set[int], world_size: int, message: str
) -> dict[str, Any]:
    """The task's one record when some ranks wrote nothing: ``failed``, naming the missing
    ranks and, when the launcher's report in the log says so, the rank that failed first.
    The skeleton's error (a failure record: log path and log tail) is kept."""
    rec = copy.deepcopy(skeleton)
    missing = sorted(set(range(world_size)) - seen)
    old = rec.get("error") or {}
    text = old.get("message") or ""
    tail = text[text.index(LOG_TAIL) :] if LOG_TAIL in text else ""
    cause = launcher_root_cause(tail)
    rec["status"] = "failed"
    rec["reason"] = f"rank(s) {missing} wrote no record: {message}" + (
        f"; {cause}" if cause else ""
    )
    rec["error"] = {**old, "type": "RankFailed", "message": rec["reason"] + tail}
    return rec


def scaling_key(rec: dict[str, Any]) -> str:
    """What a data_parallel record shares with its 1-rank baseline: everything but the
    world size and ``scaling`` (at 1 rank strong and weak scaling at a batch are one
    configuration, which the plan measures once: ``suite.plan._one_rank_baseline_once``)."""
    dev = rec.get("device") or {}
    params = {k: v for k, v in rec["benchmark"]["params"].items() if k != "scaling"}
    return json.dumps(
        [
            rec["benchmark"]["level"],
            rec["benchmark"]["name"],
            params,
            rec["framework"]["name"],
            rec["dtype"],
            dev.get("kind"),
            dev.get("name"),
        ],
        sort_keys=True,
    )


def add_scaling_efficiency(rec: dict[str, Any], baseline: dict[str, Any] | None) -> None:
    """Throughput (global samples/s) at N ranks over N x the 1-rank throughput of the same run.

    Strong scaling (fixed global batch) and weak scaling (fixed per-rank batch) both reduce to
    this ratio of total throughputs; 100% is perfect."""
    if rec["status"] != "ok" or rec["world_size"] < 2:
        return
    work = rec.setdefault("work", {})
    if baseline is None or baseline["status"] != "ok":
        work["scaling_efficiency_unavailable"] = (
            "no successful 1-rank run of this benchmark in this run"
        )
        return
    m_n = next(m for m in rec["metrics"] if m["name"] == "throughput")
    m_1 = next(m for m in baseline["metrics"] if m["name"] == "throughput")
    n = rec["world_size"]
    entry = SCALING_EFFICIENCY.entry(value=100.0 * m_n["value"] / (n * m_1["value"]))
    ci_n, ci_1 = m_n.get("ci95"), m_1.get("ci95")
    if ci_n and ci_1 and min(ci_1) > 0:
        # monotone in both throughputs: the ends of both intervals give the ends of the ratio
        entry["ci95"] = [100.0 * min(ci_n) / (n * max(ci_1)), 100.0 * max(ci_n) / (n * min(ci_1))]
        work["scaling_efficiency_interval"] = SCALING_INTERVAL
    else:
        which = [w for w, ci in ((f"{n} ranks'", ci_n), ("1 rank's", ci_1)) if not ci]
        work["scaling_efficiency_interval"] = (
            f"none: the {' and '.join(which) or '1 rank'} throughput has "
            + ("no interval" if which else "an interval reaching 0")
        )
    rec["metrics"].append(entry)
    work["scaling_baseline_task_id"] = baseline["task_id"]


#: how a scaling efficiency's ``ci95`` is made (the record's ``work.scaling_efficiency_interval``)
SCALING_INTERVAL = (
    "from the 95% intervals of the median of both throughputs: N ranks' low end over 1 rank's "
    "high end, to N ranks' high end over 1 rank's low end (the report's rule for a ratio). It "
    "holds the ratio of the two true medians whenever both intervals hold theirs: at least "
    "0.95^2 = 90% of the time for two independent tasks, and wider than a 95% interval for "
    "errors of normal shape; it says nothing of load that differed between the two tasks"
)


def strategy_key(rec: dict[str, Any]) -> str:
    """What a strategies record shares with its allreduce baseline: everything but the
    strategy (network, batches, digits settings, framework, dtype, world size, device)."""
    params = {
        k: v for k, v in rec["benchmark"]["params"].items() if k not in ("strategy", "options")
    }
    dev = rec.get("device") or {}
    return json.dumps(
        [params, rec["framework"]["name"], rec["dtype"], rec["world_size"], dev.get("kind"),
         dev.get("name")],
        sort_keys=True,
    )  # fmt: skip


def _metric(rec: dict[str, Any], name: str) -> float | None:
    return next((m["value"] for m in rec.get("metrics") or [] if m["name"] == name), None)


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


class StrategyBaselines:
    """The host's half of the strategies benchmark: each strategy's record is compared with
    the ``allreduce`` record of the same framework, network and world size in this run (the
    plan runs the baseline first), and the comparison is written into its ``strategy``
    section (``vs_baseline``) before the record is appended."""

    def __init__(self, records: Any = ()) -> None:
        self.baselines: dict[str, dict[str, Any]] = {}
        for rec in records:
            self.observe(rec)

    def observe(self, rec: dict[str, Any]) -> None:
        from suite.strategies import BASELINE

        section = rec.get("strategy")
        if rec["benchmark"]["name"] != "strategies" or rec["status"] != "ok" or not section:
            return
        if section["name"] == BASELINE:
            self.baselines[strategy_key(rec)] = rec
            return
        if "vs_baseline" in section or "baseline_unavailable" in section:
            return  # compared already (a record read back on --resume)
        add_strategy_cost(rec, self.baselines.get(strategy_key(rec)))


def add_strategy_cost(rec: dict[str, Any], baseline: dict[str, Any] | None) -> None:
    """Throughput, bytes and the statistical cost of ``rec``'s strategy over the baseline's:
    ratios (this / allreduce) and the final accuracy's difference (this - allreduce)."""
    section = rec["strategy"]
    if baseline is None:
        section["vs_baseline"] = None
        section["baseline_unavailable"] = (
            "no successful allreduce record of this framework, network and world size in this run"
        )
        return
    section["vs_baseline"] = {
        "baseline_task_id": baseline["task_id"],
        "throughput_ratio": _ratio(_metric(rec, "throughput"), _metric(baseline, "throughput")),
        "bytes_per_step_ratio": _ratio(
            _metric(rec, "bytes_per_step"), _metric(baseline, "bytes_per_step")
        ),
        "time_to_accuracy_ratio": _ratio(
            _metric(rec, "time_to_accuracy"), _metric(baseline, "time_to_accuracy")
        ),
        "steps_to_target_ratio": _ratio(
            _metric(rec, "steps_to_target"), _metric(baseline, "steps_to_target")
        ),
        "final_accuracy_delta": (
            None
            if _metric(rec, "final_accuracy") is None or _metric(baseline, "final_accuracy") is None
            else float(_metric(rec, "final_accuracy") or 0.0)
            - float(_metric(baseline, "final_accuracy") or 0.0)
        ),
    }
