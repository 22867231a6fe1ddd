"""Merge the per-rank records of a multi-rank task into one record per parameter point, and
add scaling efficiency against the 1-rank run of the same benchmark. Host side: plain data."""

from __future__ import annotations

import copy
import json
import statistics
from typing import Any

from metrics import Metric

SCALING_EFFICIENCY = Metric(
    "scaling_efficiency", "%", True, "throughput at N ranks over N x throughput at 1 rank, same run"
)


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
    base = copy.deepcopy(recs[0])
    base["rank"] = None
    hosts = sorted({r["host"] for r in recs})
    per_rank = [{"rank": r.get("rank"), "host": r["host"], "status": r["status"],
                 "duration_s": r["duration_s"]} for r in recs]  # fmt: skip
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
    merged = []
    for entry in recs[0]["metrics"]:
        name = entry["name"]
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
    base["telemetry"]["host"] = {"per_rank": [r["telemetry"].get("host") for r in recs]}
    return base


def missing_ranks_record(
    skeleton: dict[str, Any], seen: set[int], world_size: int, message: str
) -> dict[str, Any]:
    rec = copy.deepcopy(skeleton)
    missing = sorted(set(range(world_size)) - seen)
    rec["status"] = "failed"
    rec["reason"] = f"rank(s) {missing} wrote no record: {message}"
    rec["error"] = {"type": "RankFailed", "message": rec["reason"]}
    return rec


def scaling_key(rec: dict[str, Any]) -> str:
    dev = rec.get("device") or {}
    return json.dumps(
        [
            rec["benchmark"]["level"],
            rec["benchmark"]["name"],
            rec["benchmark"]["params"],
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
    tp_n = next(m["value"] for m in rec["metrics"] if m["name"] == "throughput")
    tp_1 = next(m["value"] for m in baseline["metrics"] if m["name"] == "throughput")
    eff = 100.0 * tp_n / (rec["world_size"] * tp_1)
    rec["metrics"].append(SCALING_EFFICIENCY.entry(value=eff))
    work["scaling_baseline_task_id"] = baseline["task_id"]
