"""The explanation study: everything the report's Findings need for one network and a set of
frameworks, run as four `dlsuite run` commands and one `dlsuite report`, resumable.

    python -m benchmarks.studies.explain_study --network resnet18 --frameworks pytorch,tensorflow,jax \\
        --quick --out runs/explain-resnet18           # the quick size (32 px, 1/4 width, batch 4)
    python -m benchmarks.studies.explain_study --network resnet18 --fields resolution=224,width=4 \\
        --batch 4 --out runs/explain-resnet18-224     # 224 px, where the feed's pipeline matches
    python -m benchmarks.studies.explain_study ... --print    # the command sequence only (docs/guide/explain.md)
    make explain NETWORK=resnet18 FRAMEWORKS=pytorch,tensorflow,jax ARGS=--quick

The steps (each in its own run directory under --out, continued with --resume when it exists):

1. ``operator``: the operator level at the network's shapes (``--sizes from:NETWORK,...``), every
   convolution, GEMM, normalisation, softmax, attention product and GELU of its graph, forward
   and backward, deduplicated;
2. ``network``: the network level's ``train`` and ``infer`` at the same architecture and batch;
3. ``training``: the ``feed`` benchmark (the framework's own input pipeline feeding the same
   network at 224 px, against the same training from memory), one pipeline per format asked
   for (a framework that reads no such format is skipped by the plan, with its reason);
4. ``distributed``: data-parallel training at the same per-rank batch on ``--world-size`` ranks
   and on one (weak scaling, the baseline of the same run), its exposed communication;
5. ``collectives``: the allreduce sweep at ``--world-size`` ranks, which the projection fits its
   link to (the report shows the projection's dominant term beside each bound);
6. the report of them all (Findings first), into ``--out/report``.

Where an operator record finished with a failed check (on a loaded machine the timer's own check
can), its sizes are measured again into ``operator-retry``: a step whose operators are not all
measured has no remainder. The architecture is written out in full (``study-<level>.toml``:
the zoo size's fields plus --fields)
so that the four runs see the same network: a configuration's terms match only when network,
resolution, width and per-rank batch agree. The feed trains at the loader's 224 px: at another
resolution its record stands beside the others but bounds no configuration (the report says so).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from suite.config import split_list
from suite.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]

FEED_NETWORKS = ("resnet18", "resnet50")
FEED_RESOLUTION = 224


@dataclass
class Step:
    name: str
    argv: list[str]
    out: Path | None  # the run directory (None: the report)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return str(v)


def _table(d: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in d.items()) + "}"


def architecture(network: str, fields: dict[str, Any], quick: bool) -> dict[str, Any]:
    """The zoo network's size for the size set, with ``fields`` over it, validated."""
    from suite.onnx import zoo

    net = zoo.get(network)
    spec = net.sizes("quick" if quick else "full")[0]
    arch = net.validate({**spec.params, **fields})
    return {k: v for k, v in arch.items() if k in spec.params or k in fields}


def default_batch(network: str, quick: bool) -> int:
    from suite.levels.network.workload import TRAIN_BATCHES

    return TRAIN_BATCHES["quick" if quick else "full"].get(network, [4])[0]


def study_configs(network: str, arch: dict[str, Any], batch: int, formats: list[str],
                  workers: int, feed_steps: int) -> dict[str, str]:  # fmt: skip
    """Level -> its config file's text: the network, feed and data-parallel sizes at one
    architecture and per-rank batch (a run refuses sections of levels it does not run)."""
    net = {"network": network, "batch": batch, **arch}
    head = "# written by benchmarks/studies/explain_study.py: one architecture and per-rank batch\n"
    out = {
        "network": head
        + "".join(f"[network.{b}]\nsizes = [{_table(net)}]\n" for b in ("train", "infer")),
        "distributed": head + "[distributed.data_parallel]\n"
        f"sizes = [{_table({**net, 'scaling': 'weak'})}]\n",
    }
    if network in FEED_NETWORKS:
        feeds = [
            {"network": network, "width": arch.get("width", 1), "batch": batch, "format": f,
             "workers": workers, "dataset": "quick", "steps": feed_steps, "warmup": 2}
            for f in formats
        ]  # fmt: skip
        out["training"] = head + "[training.feed]\nsizes = [" + ", ".join(
            _table(f) for f in feeds) + "]\n"  # fmt: skip
    return out


def retry_config(run_dir: Path) -> str | None:
    """A config re-measuring the operator sizes whose records finished with a failed check
    (on a loaded machine, the timer's own check can fail): a step whose operators are not
    all measured has no remainder. None when every record passed."""
    from suite.results import read_records

    results = run_dir / "results.jsonl"
    if not results.exists():
        return None
    bad: dict[str, list[dict[str, Any]]] = {}
    for rec in read_records(results, strict=False):
        if rec.get("status") == "ok" and not (rec.get("correctness") or {}).get("passed"):
            sizes = bad.setdefault(rec["benchmark"]["name"], [])
            if rec["benchmark"]["params"] not in sizes:
                sizes.append(rec["benchmark"]["params"])
    if not bad:
        return None
    return "".join(
        f"[operator.{name}]\nsizes = [{', '.join(_table(p) for p in sizes)}]\n"
        for name, sizes in bad.items()
    )


def plan(args: argparse.Namespace) -> tuple[list[Step], dict[str, str]]:
    """The study's commands and its config files (name -> text)."""
    fields: dict[str, Any] = {}
    if args.fields:
        from suite.levels.operator.from_network import parse

        _, fields = parse(f"from:{args.network},{args.fields}")
    arch = architecture(args.network, fields, args.quick)
    # --batch 0 is the user's (refused by the steps' plan), not the default
    batch = args.batch if args.batch is not None else default_batch(args.network, args.quick)
    out = Path(args.out)
    configs = study_configs(args.network, arch, batch, args.formats.split(","), args.workers,
                            args.feed_steps)  # fmt: skip
    dlsuite = [args.python, "-m", "suite"]
    common = ["--framework", args.frameworks, "--dtype", args.dtype]
    if args.quick:
        common.append("--quick")
    if args.device:
        common += ["--device", args.device]
    sizes = "from:" + ",".join([args.network, *(f"{k}={v}" for k, v in arch.items())])

    def config(level: str) -> list[str]:
        return ["--config", str(out / f"study-{level}.toml")]

    runs = {
        "operator": ["--level", "operator", "--sizes", sizes, "--batch", str(batch)],
        "network": ["--level", "network", "--benchmark", "train,infer", *config("network")],
        "training": ["--level", "training", "--benchmark", "feed", *config("training")],
        "distributed": ["--level", "distributed", "--benchmark", "data_parallel",
                        "--world-size", str(args.world_size), *config("distributed")],
        # the allreduce sweep the projection fits its link to (its dominant term, beside the
        # bound's verdict)
        "collectives": ["--level", "distributed", "--benchmark", "allreduce",
                        "--world-size", str(args.world_size)],
    }  # fmt: skip
    from suite.adapters import ADAPTERS

    names = ADAPTERS.names()
    # as dlsuite run splits --framework: an empty entry ("pytorch,") is no name
    wanted = split_list(args.frameworks)
    wrong = [f for f in wanted if f not in names]
    if wrong or not wanted:
        what = f"unknown framework {wrong[0]!r}" if wrong else "no framework named"
        raise ConfigError(f"--frameworks {args.frameworks!r}: {what}; use some of: "
                          f"{', '.join(names)} (comma-separated)")  # fmt: skip
    levels = [n.strip() for n in args.levels.split(",") if n.strip()]
    unknown = [n for n in levels if n not in runs]
    if unknown or not levels:
        what = f"unknown step {unknown[0]!r}" if unknown else "no step named"
        raise ConfigError(f"--levels {args.levels!r}: {what}; choose from: {', '.join(runs)} "
                          "(comma-separated; default: all)")  # fmt: skip
    if "training" not in configs:
        if levels == ["training"]:
            raise ConfigError(
                f"--levels training: the feed benchmark trains {' and '.join(FEED_NETWORKS)} "
                f"only, not {args.network}; run another step, or --network {FEED_NETWORKS[0]}")  # fmt: skip
        del runs["training"]
    steps = []
    for name, argv in runs.items():
        if name not in levels:
            continue
        d = out / name
        resume = ["--resume"] if (d / "manifest.json").exists() else []
        steps.append(Step(name, [*dlsuite, "run", *argv, *common, "--out", str(d), *resume], d))
    return steps, {f"study-{k}.toml": v for k, v in configs.items()}


def retry_step(args: argparse.Namespace) -> Step | None:
    """After the operator step: its failed-check sizes measured again, in a run of their own
    (the report takes a size from there where the first run's record failed)."""
    out = Path(args.out)
    text = retry_config(out / "operator")
    if text is None:
        return None
    (out / "study-operator-retry.toml").write_text(text, encoding="utf-8")
    d = out / "operator-retry"
    names = ",".join(line[len("[operator.") : -1] for line in text.splitlines()
                     if line.startswith("[operator."))  # fmt: skip
    argv = [args.python, "-m", "suite", "run", "--level", "operator", "--benchmark", names,
            "--config", str(out / "study-operator-retry.toml"), "--framework", args.frameworks, "--dtype",
            args.dtype, *(["--quick"] if args.quick else []),
            *(["--device", args.device] if args.device else []), "--out", str(d),
            *(["--resume"] if (d / "manifest.json").exists() else [])]  # fmt: skip
    return Step("operator-retry", argv, d)


def report_step(args: argparse.Namespace, dirs: list[Path]) -> Step:
    out = Path(args.out)
    argv = [args.python, "-m", "suite", "report", *(str(d) for d in dirs),
            "--out", str(out / "report")]  # fmt: skip
    return Step("report", argv, None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--network", default="resnet18", help="a zoo network (default resnet18)")
    ap.add_argument("--fields", default="", help="architecture fields over the zoo size, "
                    "e.g. resolution=224,width=4")  # fmt: skip
    ap.add_argument("--frameworks", default="pytorch,tensorflow,jax")
    ap.add_argument("--batch", type=int, default=None, help="per-rank batch (default: the "
                    "network level's for the size set)")  # fmt: skip
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--quick", action="store_true", help="the zoo network's quick size and "
                    "the quick time budget")  # fmt: skip
    ap.add_argument("--device", default=None)
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--formats", default="folder,tfrecord", help="the feed's pipelines (each "
                    "framework runs those it reads)")  # fmt: skip
    ap.add_argument("--workers", type=int, default=1, help="the feed's loader workers")
    ap.add_argument("--feed-steps", type=int, default=8)
    ap.add_argument("--levels", default="operator,network,training,distributed,collectives",
                    help="the steps to run (default: all)")  # fmt: skip
    ap.add_argument("--out", required=True)
    ap.add_argument("--python", default=sys.executable, help="the interpreter with dlsuite")
    ap.add_argument("--print", action="store_true", help="print the commands, run nothing")
    args = ap.parse_args(argv)
    try:
        steps, configs = plan(args)
    except ConfigError as exc:
        print(f"explain_study: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    if args.print:
        for name, text in configs.items():
            print(f"# {out / name}:\n{text}")
        for s in steps:
            print(shlex.join(s.argv))
        print("# then, where operator records failed a check: the same sizes again into "
              f"{out / 'operator-retry'} (study-operator-retry.toml)")  # fmt: skip
        print(shlex.join(report_step(args, [s.out for s in steps if s.out]).argv))
        return 0
    out.mkdir(parents=True, exist_ok=True)
    for name, text in configs.items():
        (out / name).write_text(text, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}  # fmt: skip
    worst = 0

    def run(s: Step) -> int:
        print(f"== {s.name}: {shlex.join(s.argv)}", flush=True)
        return subprocess.run(s.argv, env=env, check=False).returncode

    # every step planned first (`--dry-run`: nothing runs), so that bad input a later step
    # refuses (`--world-size 1` for the collectives, `--batch 0`, a dtype) stops the study
    # before the first measures anything, not after it and the steps between
    for s in steps:
        planned = subprocess.run([*s.argv, "--dry-run"], env=env, check=False,
                                 capture_output=True, text=True)  # fmt: skip
        if planned.returncode == 2:
            why = (planned.stderr.strip() or planned.stdout.strip()).splitlines()
            print(f"explain_study: the {s.name} step: {why[-1] if why else 'refused'}; "
                  f"nothing was run (change the study's flag, or leave the step out with "
                  f"--levels)", file=sys.stderr)  # fmt: skip
            return 2
    for s in steps:
        rc = run(s)
        if rc == 2:
            return 2  # bad input: the command said why
        worst = max(worst, rc)  # 1: a record failed; the others still run, the report shows it
        if s.name == "operator":
            retry = retry_step(args)
            if retry is not None:
                worst = max(worst, run(retry))
    # the report: every run of the study so far (a step run alone, --levels, joins the others)
    every = [out / n for n in ("operator", "operator-retry", "network", "training", "distributed",
                               "collectives")]  # fmt: skip
    rc = run(report_step(args, [d for d in every if (d / "results.jsonl").exists()]))
    return rc if rc else worst


if __name__ == "__main__":
    raise SystemExit(main())
