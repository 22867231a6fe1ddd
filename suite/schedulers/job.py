"""Inside the allocation: ``python -m suite.schedulers.job RUN_DIR/slurm/s<N>/plan.json``.

The batch script execs this. It takes its array element's tasks (``SLURM_ARRAY_TASK_ID``) from
the plan the host wrote and runs them with the ordinary runner (scheduler ``none``) into the
element's own run directory, ``part-<i>/``: the launcher (``srun`` by default) starts the ranks
on the allocation's nodes inside the chosen backend, and every record carries the job's
``scheduler`` section. A requeued or restarted element resumes its part: a task it already has
a record for is not run again. Exit code 0 when the runner finished (whatever the records say);
the host reads the records, not the exit code.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

from rich.console import Console


def main(argv: list[str] | None = None) -> int:
    from suite import runner
    from suite.errors import SuiteError
    from suite.plan import Task
    from suite.schedulers.slurm import SlurmScheduler
    from suite.settings import RunConfig

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m suite.schedulers.job PLAN.json", file=sys.stderr)
        return 2
    plan_path = Path(args[0])
    plan = json.loads(plan_path.read_text())
    index = int(os.environ.get("SLURM_ARRAY_TASK_ID") or 0)
    if not 0 <= index < len(plan["elements"]):
        print(f"dlsuite: array element {index} is not in {plan_path}", file=sys.stderr)
        return 2
    tasks = [Task(**t) for t in plan["elements"][index]]
    known = {f.name for f in dataclasses.fields(RunConfig)}
    cfg = RunConfig(**{k: v for k, v in plan["config"].items() if k in known})
    part = plan_path.parent / f"part-{index}"
    cfg.out, cfg.resume, cfg.scheduler = str(part), True, "none"
    _adopt_run_id(Path(plan["run_dir"]), part, plan["run_id"], [t.task_id for t in tasks])
    console = Console(stderr=True, width=160)
    console.print(
        f"dlsuite job: element {index} of {plan_path} on {os.environ.get('SLURMD_NODENAME')} "
        f"(job {os.environ.get('SLURM_JOB_ID')}, nodes {os.environ.get('SLURM_JOB_NODELIST')}): "
        f"{len(tasks)} task(s)"
    )
    try:
        outcome = runner.run(
            cfg, tasks, ["(slurm job)", str(plan_path)], console=console,
            scheduler_section=SlurmScheduler.record_section(os.environ),
        )  # fmt: skip
    except KeyboardInterrupt:
        console.print("dlsuite job: terminated (SIGTERM: cancelled, preempted or out of time)")
        return 143
    except SuiteError as exc:
        print(f"dlsuite: error: {exc}", file=sys.stderr)
        return exc.exit_code
    statuses = [r["status"] for r in outcome.records]
    console.print(
        f"dlsuite job: element {index} finished: {len(statuses)} record(s), "
        + ", ".join(f"{s}={statuses.count(s)}" for s in sorted(set(statuses)))
    )
    return 0


def _adopt_run_id(run_dir: Path, part: Path, run_id: str, task_ids: list[str]) -> None:
    """The part's manifest starts as a copy of the run's, so the records carry the run's id."""
    manifest = part / "manifest.json"
    if manifest.exists():
        return
    part.mkdir(parents=True, exist_ok=True)
    try:
        doc = json.loads((run_dir / "manifest.json").read_text())
    except (OSError, ValueError):
        return  # the runner makes a new one; only the run id differs
    doc.update(run_id=run_id, tasks=task_ids, resumes=0, state="pending")
    tmp = manifest.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, manifest)


if __name__ == "__main__":
    raise SystemExit(main())
