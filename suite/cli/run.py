"""``dlsuite run``: plan and run benchmarks, writing RUN_DIR/results.jsonl."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from typing import Any

from rich.console import Console

from suite.cli.common import ArgumentParser, csv, int_csv, positive_float
from suite.cli.common import console as cli_console


def add_parser(sub: Any, parsers: dict[str, ArgumentParser]) -> ArgumentParser:
    from suite.config import plugin_choices

    def choices(key: str) -> str:  # the registry's names (no plug-in module is imported)
        return ", ".join(c for c in plugin_choices(key) if c != "auto")

    r = sub.add_parser("run", help="plan and run benchmarks, writing RUN_DIR/results.jsonl")
    r.add_argument(
        "--level",
        type=csv,
        help="operator, network, distributed, training or all (comma-separated)",
    )
    r.add_argument(
        "--framework",
        dest="frameworks",
        type=csv,
        help="framework(s), comma-separated (see `dlsuite list`)",
    )
    r.add_argument(
        "--benchmark", dest="benchmarks", type=csv, help="only these benchmarks (comma-separated)"
    )
    r.add_argument(
        "--backend",
        help="where workers run: auto (default: local when the framework imports here, else "
        "venv, the framework's own environment in .venvs/) or one of: "
        f"{choices('backend')} (docker and apptainer: the framework's image, see "
        "docs/containers.md)",
    )
    r.add_argument(
        "--device", help="cpu, cuda or auto (default: cuda when the framework sees a GPU)"
    )
    r.add_argument(
        "--dtype", dest="dtypes", type=csv, help="fp32,tf32,bf16,fp16 (default fp32,bf16,fp16)"
    )
    r.add_argument(
        "--quick",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="small sizes that run in seconds on a CPU",
    )
    r.add_argument(
        "--network", dest="networks", type=csv, help="network level: only these zoo networks"
    )
    r.add_argument(
        "--model", help="network level: a user ONNX file to train/infer instead of the zoo"
    )
    r.add_argument(
        "--batch",
        type=int_csv,
        help="network level: batch sizes (comma-separated); with --sizes from:..., the batch "
        "the operators' shapes are taken at",
    )
    r.add_argument(
        "--sizes",
        dest="operator_sizes",
        metavar="from:NETWORK",
        help="operator level: the sizes of every operator in a network's graph at the run's "
        "batch and dtype, deduplicated, forward and backward: from:resnet50, "
        "from:resnet18,resolution=224,width=4 (a zoo network and its fields) or "
        "from:PATH.onnx (a model of yours); the network at --quick or full size",
    )
    r.add_argument(
        "--compile",
        action="store_true",
        default=None,
        help="network level: torch.compile the model",
    )
    r.add_argument(
        "--xla",
        action="store_true",
        default=None,
        help="operator level: compile the operators with XLA (TensorFlow's jit_compile)",
    )
    r.add_argument(
        "--world-size", dest="world_size", type=int, help="distributed level: ranks (default 2)"
    )
    r.add_argument(
        "--nodes", type=int, help="distributed level: nodes the ranks spread over (default 1)"
    )
    r.add_argument(
        "--launcher",
        help="distributed level: auto (default: the framework's own, torchrun for PyTorch, "
        f"else spawn) or one of: {choices('launcher')}",
    )
    r.add_argument(
        "--strategy",
        dest="strategies",
        type=csv,
        help="distributed level, strategies benchmark: only these strategies (comma-separated; "
        "allreduce, the baseline, always runs): allreduce, ps-sync, ps-async, ssp, fp16, bf16, "
        "powersgd, 2bit, 1bit, local-sgd, pipeline, adasum",
    )
    r.add_argument(
        "--dist-backend",
        dest="dist_backend",
        help="auto (NCCL on GPUs, gloo on CPUs), gloo, nccl, mpi",
    )
    r.add_argument(
        "--data",
        help="training level: a dataset of yours (ImageFolder, TFRecord, RecordIO, WebDataset "
        "or a `dlsuite data make` directory) instead of the suite's; checked up front",
    )
    r.add_argument(
        "--format",
        dest="formats",
        type=csv,
        help="training level: only these dataset formats (folder, webdataset, tfrecord, "
        "recordio); with --data, one the dataset does not hold is an error at planning "
        "(default: what --data holds, else every format)",
    )
    r.add_argument(
        "--images",
        type=int,
        help="training level: the images a loader reads: with --data a stratified subset of "
        "the dataset (whole shards of TFRecord and WebDataset), else the suite dataset's size",
    )
    r.add_argument(
        "--label-base",
        dest="label_base",
        type=int,
        choices=(0, 1),
        help="training level: a packed dataset's labels count from 0 or 1 (default: detected, "
        "a 0 anywhere means 0-based)",
    )
    r.add_argument(
        "--data-dir",
        dest="data_dir",
        help="training level: where the suite's datasets are made on first use and reused "
        "(default: DLSUITE_DATA_DIR, [run] data_dir, the site's data_dir, ~/.cache/dlsuite/data)",
    )
    r.add_argument("--config", help="TOML config file (CLI flags override it)")
    r.add_argument("--out", help="run directory (default runs/<timestamp>-<level>)")
    r.add_argument(
        "--resume",
        action="store_true",
        default=None,
        help="continue the run in --out, skipping finished tasks",
    )
    r.add_argument("--timeout", type=positive_float, help="per-task timeout in seconds")
    r.add_argument(
        "--isolate",
        help="session (default): one worker process runs a sequence of tasks of one "
        "environment, device and rank set, a crashed or timed-out task costs only itself; "
        "task: a new worker process for every task",
    )
    r.add_argument(
        "--retry-noisy",
        dest="retry_noisy",
        type=int,
        metavar="N",
        help="measure again, at the end of the run, records whose confidence interval of the "
        "median ended wider than the target (up to N rounds; default 0)",
    )
    r.add_argument("--seed", type=int, help="seed of the input generator")
    r.add_argument(
        "--telemetry-interval",
        dest="telemetry_interval_ms",
        type=float,
        metavar="MS",
        help="telemetry sampling interval in the timed region, milliseconds (default 100)",
    )
    r.add_argument(
        "--telemetry",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="sample telemetry in the timed region (default on); --no-telemetry runs no "
        "sampler thread, to measure its cost (the energy counter and the driver's own "
        "utilisation samples are still read around each timed region)",
    )
    r.add_argument(
        "--require-quiet",
        dest="require_quiet",
        action="store_true",
        default=None,
        help="refuse (skip) a task when the quiet-machine check finds other load on its CPU "
        "cores or GPUs",
    )
    r.add_argument("--dry-run", action="store_true", help="print the plan and exit")
    r.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 for every failed correctness check, also one the adapter declares known "
        "(a framework bug, a documented difference from the paper its documentation cites); "
        "without it such a run exits 0 when every failed check is declared",
    )
    r.add_argument(
        "--envs-dir", dest="envs_dir", help="where the venv backend keeps environments (.venvs)"
    )
    r.add_argument(
        "--scheduler",
        help=f"when and on which nodes: one of {choices('scheduler')} (default none: now, "
        "here; slurm: job arrays, needs --site)",
    )
    r.add_argument(
        "--site", help="site profile: a name in sites/ (e.g. local) or the path of a .toml"
    )
    r.add_argument("--partition", help="slurm: a partition of the site (default: the site's)")
    r.add_argument(
        "--tasks-per-job",
        dest="tasks_per_job",
        type=int,
        help="slurm: tasks per array element (default: the site's, else 1)",
    )
    r.add_argument(
        "--job-name", dest="job_name", help="slurm: job name (default dlsuite-<run dir name>)"
    )
    return r


def main(args: argparse.Namespace, argv: list[str]) -> int:
    from suite import config, plan, rundir, summary

    cli: dict[str, Any] = {
        k: getattr(args, k)
        for k in (
            "level",
            "frameworks",
            "benchmarks",
            "backend",
            "device",
            "dtypes",
            "quick",
            "config",
            "out",
            "resume",
            "timeout",
            "seed",
            "telemetry_interval_ms",
            "telemetry",
            "require_quiet",
            "networks",
            "model",
            "operator_sizes",
            "batch",
            "compile",
            "xla",
            "world_size",
            "nodes",
            "launcher",
            "dist_backend",
            "strategies",
            "envs_dir",
            "data",
            "data_dir",
            "formats",
            "images",
            "label_base",
            "scheduler",
            "site",
            "partition",
            "tasks_per_job",
            "job_name",
            "isolate",
            "retry_noisy",
        )
    }
    from suite.schedulers import SCHEDULERS

    cfg = config.resolve(cli)
    tasks = plan.build(cfg)
    scheduler = SCHEDULERS.load(cfg.scheduler)(cfg)
    console = cli_console()
    cfg.out = cfg.out or str(rundir.default_run_dir(cfg))
    for note in cfg.plan_notes:
        console.print(f"dlsuite: {note}", style="yellow", markup=False, soft_wrap=True)
    if args.dry_run:
        for t in tasks:
            console.print(
                f"{t.task_id}  {t.benchmark} {json.dumps(t.params)} {t.dtype} ({t.source})"
            )
        console.print(f"{len(tasks)} tasks")
        for line in scheduler.describe(tasks):
            print(line)  # scripts verbatim: no markup, no wrapping
        return 0
    try:
        outcome = scheduler.run(tasks, argv, console=Console(stderr=True))
    except KeyboardInterrupt:
        print(
            "dlsuite: interrupted; records so far are kept. Continue with: "
            f"dlsuite run --resume --out {shlex.quote(cfg.out)} (and the same other flags)",
            file=sys.stderr,
        )
        return 130
    console.print(summary.table(outcome.records, title=f"dlsuite run {outcome.run_dir}"))
    bad = [r for r in outcome.records if r["status"] in ("failed", "timeout", "oom")]
    wrong = [r for r in outcome.records if r["status"] == "ok" and not r["correctness"]["passed"]]
    console.print(
        f"{len(outcome.records)} records in {outcome.run_dir / 'results.jsonl'}: "
        f"{sum(r['status'] == 'ok' for r in outcome.records)} ok, "
        f"{sum(r['status'] == 'skipped' for r in outcome.records)} skipped, {len(bad)} failed, "
        f"{len(wrong)} with failed correctness checks"
    )
    for bug in sorted({b for r in wrong for b in summary.known_bugs(r)}):
        n = sum(bug in summary.known_bugs(r) for r in wrong)
        console.print(f"  {n} of them a known bug of the framework, not of the suite: {bug}")
    docs = {
        d["documented_difference"]: d.get("documented_in", "")
        for r in wrong
        for c in r["correctness"]["checks"]
        if not c["passed"] and (d := c.get("detail") or {}).get("documented_difference")
    }
    for what, where in sorted(docs.items()):
        n = sum(
            any(
                (c.get("detail") or {}).get("documented_difference") == what
                for c in r["correctness"]["checks"]
                if not c["passed"]
            )
            for r in wrong
        )
        console.print(
            f"  {n} of them a documented difference of the framework: {what} ({where})",
            markup=False,
            soft_wrap=True,
        )
    unexplained = [r for r in wrong if not summary.declared_known(r)]
    if wrong and not unexplained and not args.strict:
        console.print(
            "  every failed check is declared known (exit 0; --strict counts them as failures)"
        )
    from suite.cli.history import after_run

    after_run(args, outcome.run_dir, outcome.records)  # the history store; never fails the run
    return summary.run_exit_code(outcome.records, strict=args.strict)
