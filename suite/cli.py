"""The command line: ``dlsuite run | list | validate``. Host side: imports no DL framework.

Any SuiteError (bad input, missing dependency) becomes one line on stderr and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
from pathlib import Path
from typing import Any, NoReturn

from rich.console import Console
from rich.table import Table

from suite.errors import SuiteError


class ArgumentParser(argparse.ArgumentParser):
    """argparse that reports bad flags as one line and exit code 2, with no usage dump."""

    def error(self, message: str) -> NoReturn:
        print(f"dlsuite: error: {message} (see `{self.prog} --help`)", file=sys.stderr)
        raise SystemExit(2)


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive, finite number of seconds")
    return v


def _int_csv(text: str) -> list[int]:
    try:
        return [int(v) for v in _csv(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of integers"
        ) from None


def _csv(text: str) -> list[str]:
    from suite.config import split_list

    return split_list(text)


def build_parser() -> ArgumentParser:
    p = ArgumentParser(prog="dlsuite", description="Multi-framework deep-learning benchmark suite.")
    from suite import __version__
    from suite.config import plugin_choices

    def choices(key: str) -> str:  # the registry's names (no plug-in module is imported)
        return ", ".join(c for c in plugin_choices(key) if c != "auto")

    p.add_argument("--version", action="version", version=f"dlsuite {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=ArgumentParser)

    r = sub.add_parser("run", help="plan and run benchmarks, writing RUN_DIR/results.jsonl")
    r.add_argument(
        "--level",
        type=_csv,
        help="operator, network, distributed, training or all (comma-separated)",
    )
    r.add_argument(
        "--framework",
        dest="frameworks",
        type=_csv,
        help="framework(s), comma-separated (see `dlsuite list`)",
    )
    r.add_argument(
        "--benchmark", dest="benchmarks", type=_csv, help="only these benchmarks (comma-separated)"
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
        "--dtype", dest="dtypes", type=_csv, help="fp32,tf32,bf16,fp16 (default fp32,bf16,fp16)"
    )
    r.add_argument(
        "--quick",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="small sizes that run in seconds on a CPU",
    )
    r.add_argument(
        "--network", dest="networks", type=_csv, help="network level: only these zoo networks"
    )
    r.add_argument(
        "--model", help="network level: a user ONNX file to train/infer instead of the zoo"
    )
    r.add_argument(
        "--batch",
        type=_int_csv,
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
        type=_csv,
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
        type=_csv,
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
    r.add_argument("--timeout", type=_positive_float, help="per-task timeout in seconds")
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

    ev = sub.add_parser("envs", help="the per-framework environments of the venv backend")
    ev.add_argument("--envs-dir", dest="envs_dir", help="default: .venvs in the source tree")
    evs = ev.add_subparsers(dest="envs_command", required=True)
    evl = evs.add_parser("list", help="every environment, whether it is current, its size")
    evl.add_argument("--json", action="store_true", help="machine-readable output")
    evc = evs.add_parser("create", help="build a framework's environment now (reused if there)")
    evc.add_argument("frameworks", type=_csv, metavar="FRAMEWORK[,FRAMEWORK]")
    evc.add_argument(
        "--with", dest="extra", type=_csv, default=[], help="extra packages, e.g. pytest"
    )
    evp = evs.add_parser("prune", help="remove stale (requirements changed) or half-built ones")
    evp.add_argument("--all", dest="everything", action="store_true", help="remove all")
    evp.add_argument("--dry-run", action="store_true", help="say what would go")

    ls = sub.add_parser(
        "list", help="levels, benchmarks, frameworks (with availability) and metrics"
    )
    ls.add_argument("--json", action="store_true", help="machine-readable output")

    rp = sub.add_parser(
        "report", help="Markdown and self-contained HTML report of one or more runs"
    )
    rp.add_argument(
        "run_dirs", nargs="+", metavar="RUN_DIR", help="run directories (or results.jsonl files)"
    )
    rp.add_argument("--format", dest="fmt", choices=("md", "html", "both"), default="both")
    rp.add_argument("--out", help="output directory (default: the first RUN_DIR)")

    cp = sub.add_parser("compare", help="compare two runs; exit code 1 on any regression")
    cp.add_argument("base", metavar="BASE", help="run directory or results.jsonl")
    cp.add_argument("new", metavar="NEW", help="run directory or results.jsonl")
    cp.add_argument(
        "--tolerance", default="5%", help="relative tolerance, 5%% or 0.05 (default 5%%)"
    )

    cr = sub.add_parser(
        "check-references", help="check a run against reference values (references/*.toml)"
    )
    cr.add_argument("run_dir", metavar="RUN_DIR", help="run directory or results.jsonl")
    cr.add_argument(
        "references", nargs="+", metavar="REFERENCES", help="references .toml files or directories"
    )

    from suite import history_cli, images_cli, reframe_config

    images_cli.add_parser(sub, _csv)
    history_cli.add_parser(sub, r, rp)  # `history`; run's and report's --history flags
    reframe_config.add_parser(sub, _csv)
    from suite import data_cli
    from suite.projection import cli as projection_cli

    projection_cli.add_parser(sub)
    data_cli.add_parser(sub, _csv)

    ins = sub.add_parser(
        "inspect",
        help="a user's ONNX model: inputs, ops, which frameworks run it, parameters, FLOPs",
    )
    ins.add_argument("model", metavar="MODEL.onnx", help="the ONNX file (as for --model)")
    ins.add_argument("--json", action="store_true", help="machine-readable output")

    v = sub.add_parser(
        "validate", help="validate a results file (or a run directory) against the schema"
    )
    v.add_argument("path", help="results.jsonl or a run directory")
    return p


def cmd_run(args: argparse.Namespace, argv: list[str]) -> int:
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
    console = Console() if sys.stdout.isatty() else Console(width=180)
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
    from suite.history_cli import after_run

    after_run(args, outcome.run_dir, outcome.records)  # the history store; never fails the run
    return summary.run_exit_code(outcome.records, strict=args.strict)


def cmd_list(args: argparse.Namespace) -> int:
    from suite import metrics
    from suite.adapters import ADAPTERS
    from suite.levels import LEVELS, benchmark_names, load_benchmark

    levels: dict[str, Any] = {}
    for level in LEVELS:
        levels[level] = {
            name: load_benchmark(level, name).summary for name in benchmark_names(level)
        }
    frameworks = {name: framework_status(name) for name in ADAPTERS.names()}
    mets = {
        m.name: {
            "unit": m.unit,
            "higher_is_better": m.higher_is_better,
            "description": m.description,
        }
        for m in metrics.REGISTRY.values()
    }
    doc = {
        "levels": levels,
        "frameworks": frameworks,
        "metrics": mets,
    }
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0
    c = Console()
    for level, benches in levels.items():
        c.print(f"[bold]level {level}[/]")
        for name, text in benches.items():
            c.print(f"  {name:<10} {text}")
    c.print("[bold]frameworks[/] (backend auto: local when available here, else its venv)")
    for name, info in frameworks.items():
        if info["available"]:
            state = f"[green]available here[/] {info['version']}"
        else:
            state = f"[yellow]not here[/] ({info['reason']})"
        venv = info["environment"]
        if venv["recipe"] is None:
            where = "no environment recipe"
        else:
            where = f"venv {venv['name']} " + ("[green]built[/]" if venv["built"] else "not built")
        c.print(f"  {name:<10} {state}; {where}")
    c.print("[bold]metrics[/]")
    for name, m in mets.items():
        c.print(
            f"  {name:<16} {m['unit']:<10} {'higher' if m['higher_is_better'] else 'lower'} is better"
        )
    return 0


def framework_status(name: str) -> dict[str, Any]:
    """Availability here, the installed version, and the framework's venv (built or not)."""
    from suite import envs
    from suite.adapters import ADAPTERS

    out: dict[str, Any] = {}
    try:
        cls = ADAPTERS.load(name)
        ok, why = cls.available()
        out.update(available=ok, reason=why or None, version=cls.installed_version())
    except SuiteError as exc:
        out.update(available=False, reason=str(exc), version=None)
    try:
        env = envs.env_for(name)
        recipe: str | None = str(envs.requirements_file(name))
        out["environment"] = {
            "recipe": recipe,
            "name": env.name,
            "path": str(env.path),
            "built": env.built,
        }
    except SuiteError:
        out["environment"] = {"recipe": None, "name": None, "path": None, "built": False}
    return out


def cmd_envs(args: argparse.Namespace) -> int:
    from suite import envs

    root = envs.envs_root(args.envs_dir)
    if args.envs_command == "create":
        failed = 0
        for fw in args.frameworks:
            try:
                env = envs.ensure(fw, root, extra=tuple(args.extra))
                print(env.path)
            except envs.EnvBuildError as exc:
                print(f"dlsuite: error: {exc}", file=sys.stderr)
                failed += 1
        return 1 if failed else 0
    if args.envs_command == "prune":
        gone = envs.prune(root, everything=args.everything, dry_run=args.dry_run)
        verb = "would remove" if args.dry_run else "removed"
        print(f"{verb} {len(gone)} environment(s) in {root}" + "".join(f"\n  {g}" for g in gone))
        return 0
    rows = envs.list_envs(root)
    if args.json:
        print(json.dumps({"root": str(root), "environments": rows}, indent=2))
        return 0
    table = Table(title=f"environments in {root}")
    for col in ("name", "framework", "state", "python", "size", "created"):
        table.add_column(col)
    for e in rows:
        state = "current" if e["current"] else "stale (requirements changed)"
        if not e["built"]:
            state = "half-built"
        table.add_row(
            e["name"],
            e["framework"],
            state,
            e["python"] or "",
            f"{e['size_mb']:.0f} MB",
            (e["created_at"] or "")[:19],
        )
    _console().print(table)
    return 0


def _console() -> Console:
    return Console() if sys.stdout.isatty() else Console(width=180)


def cmd_report(args: argparse.Namespace) -> int:
    from suite.history_cli import report_sections
    from suite.projection.report_section import dominant_terms, projection_section
    from suite.report import report_main

    out = Path(args.out) if args.out else None
    # the projection section (it projects the runs' distributed records), and the History
    # section with --trends / --history: sections of packages above the report; the
    # projection's terms reach the report's bounds and findings through ``projected``
    extra = [projection_section, *report_sections(args)]
    for path in report_main(
        [Path(p) for p in args.run_dirs], args.fmt, out, extra, projected=dominant_terms
    ):
        print(f"wrote {path}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from suite.compare import compare_main, parse_tolerance

    return compare_main(
        Path(args.base), Path(args.new), parse_tolerance(args.tolerance), _console()
    )


def cmd_check_references(args: argparse.Namespace) -> int:
    from suite.references import check_references_main

    return check_references_main(Path(args.run_dir), [Path(p) for p in args.references], _console())


def cmd_validate(args: argparse.Namespace) -> int:
    from suite.results import validate_file

    path = Path(args.path)
    if path.is_dir():
        path = path / "results.jsonl"
    n = validate_file(path)
    print(f"{path}: {n} records valid")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    """Host side: onnx and NumPy only; the adapters' op lists are class attributes."""
    from suite.adapters import ADAPTERS
    from suite.onnx import inspect, zoo

    model = zoo.load_user_model(args.model)
    adapters = {}
    for name in ADAPTERS.names():
        try:
            cls = ADAPTERS.load(name)
        except SuiteError:
            continue
        network = "network" in cls.words and "network" in cls.levels
        adapters[name] = (network, frozenset(cls.onnx_ops))
    info = inspect.inspect_model(model, adapters)
    print(json.dumps(info, indent=2) if args.json else inspect.render(info))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    try:
        if args.command == "run":
            return cmd_run(args, argv)
        if args.command == "list":
            return cmd_list(args)
        if args.command == "envs":
            return cmd_envs(args)
        if args.command == "images":
            from suite import images_cli

            return images_cli.main(args)
        if args.command == "history":
            from suite import history_cli

            return history_cli.main(args)
        if args.command == "reframe":
            from suite import reframe_config

            return reframe_config.main(args, argv)
        if args.command == "data":
            from suite import data_cli

            return data_cli.main(args)
        if args.command == "report":
            return cmd_report(args)
        if args.command == "compare":
            return cmd_compare(args)
        if args.command == "check-references":
            return cmd_check_references(args)
        if args.command == "inspect":
            return cmd_inspect(args)
        if getattr(args, "handler", None) is not None:  # subcommands that register a handler
            return int(args.handler(args))
        return cmd_validate(args)
    except SuiteError as exc:
        print(f"dlsuite: error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
