"""The suite's PyTorch loader record next to DLIO (Argonne's ``dlio-benchmark``) in its own
environment, on the same files, format, batch, reader threads and simulated compute time, in
one run, interleaved (suite, DLIO, DLIO, suite, ...). Target: within 15%, or the reason.

    .venv/bin/python -m benchmarks.validation.dlio_vs_suite [--dlio ~/.cache/dlsuite/dlio-venv/bin/dlio_benchmark]
        [--workers 2] [--batch 32] [--compute-ms 10] [--rounds 2] [--json out.json]

The workload is DLIO's: its JPEG reader opens each file with Pillow and decodes it
(``np.asarray(Image.open(f))``), no crop, flip or normalisation, and returns a fixed tensor;
``read_threads`` is the PyTorch DataLoader's ``num_workers``; ``computation_time`` is slept per
step. The suite's side is the ``loader`` benchmark with ``transform = "decode"`` (each JPEG
decoded and dropped) and ``compute_ms`` slept per batch, warm (DLIO's second epoch reads a
cache its first warmed; the suite reads a warm-up epoch first). DLIO's figure is its mean
training throughput over ``epochs`` epochs (the first included: its workers start then); the
suite's is its measured epoch's steady rate and its headline (median of windows).

DLIO needs its data laid out its way: ``DATA/train/<subfolder>/*.jpeg`` (the extension spelled
as ``dataset.format``), so a tree of symbolic links named ``.jpeg`` points at the suite's
files (docs/reference/training-level.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from suite.datasets.location import resolve_data_dir
from suite.levels.training import dataset as D

TOLERANCE = 0.15


def dlio_tree(data: D.TaskData, where: Path) -> tuple[Path, int]:
    """DATA/train/<class>/<stem>.jpeg -> the suite's files; DATA/valid (DLIO wants it)."""
    root = where / "DATA"
    (root / "valid").mkdir(parents=True, exist_ok=True)
    classes = set()
    for rel in data.catalogue.relpaths:
        cls, name = rel.split("/", 1)
        classes.add(cls)
        d = root / "train" / cls
        d.mkdir(parents=True, exist_ok=True)
        link = d / (Path(name).stem + ".jpeg")
        if not link.exists():
            link.symlink_to(data.format_path / rel)
    return root, len(classes)


def run_dlio(exe: str, root: Path, classes: int, data: D.TaskData, workers: int, batch: int,
             compute_s: float, out: Path, epochs: int) -> dict[str, Any]:  # fmt: skip
    args = [
        exe, "workload=default", "++workload.workflow.generate_data=False",
        "++workload.workflow.evaluation=False", "++workload.workflow.profiling=False",
        f"++workload.dataset.data_folder={root}", "++workload.dataset.format=jpeg",
        f"++workload.dataset.num_files_train={data.samples}",
        f"++workload.dataset.record_length={int(data.mean_sample_bytes)}",
        "++workload.dataset.num_samples_per_file=1",
        f"++workload.dataset.num_subfolders_train={classes}",
        "++workload.dataset.num_subfolders_eval=0", "++workload.dataset.num_files_eval=0",
        "++workload.reader.data_loader=pytorch", f"++workload.reader.read_threads={workers}",
        f"++workload.reader.batch_size={batch}", f"++workload.train.epochs={epochs}",
        f"++workload.train.computation_time={compute_s}",
        f"++workload.output.folder={out}", f"hydra.run.dir={out}",
    ]  # fmt: skip
    proc = subprocess.run(args, capture_output=True, text=True, timeout=1800, cwd=out.parent)
    summary = out / "summary.json"
    if proc.returncode != 0 or not summary.is_file():
        raise SystemExit(f"dlio_benchmark failed ({proc.returncode}): {proc.stderr[-2000:]}")
    m = json.loads(summary.read_text())["metric"]
    per_epoch = m["train_throughput_samples_per_second"]
    return {"mean": m["train_throughput_mean_samples_per_second"], "per_epoch": per_epoch,
            "last_epoch": per_epoch[-1], "au_percentage": m.get("train_au_mean_percentage")}  # fmt: skip


def suite_record(workers: int, batch: int, compute_ms: float, data_dir: str) -> dict[str, Any]:
    from suite.adapters import ADAPTERS
    from suite.levels import execute

    adapter = ADAPTERS.load("pytorch")()
    device = adapter.setup("cpu")
    task = {"benchmark": "loader", "level": "training", "dtype": "fp32", "seed": 0,
            "world_size": 1, "data": {"dir": data_dir},
            "params": {"format": "folder", "workers": workers, "batch": batch, "cache": "warm",
                       "transform": "decode", "dataset": "quick", "compute_ms": compute_ms}}  # fmt: skip
    out = execute(task, adapter, device)
    assert isinstance(out, dict)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--dlio", default=str(Path.home() / ".cache/dlsuite/dlio-venv/bin/dlio_benchmark")
    )
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--compute-ms", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=2, help="DLIO's epochs per run")
    ap.add_argument("--json")
    args = ap.parse_args()
    if not Path(args.dlio).exists():
        raise SystemExit(
            f"--dlio {args.dlio}: not found; install it as docs/reference/training-level.md says"
        )
    data_dir = str(resolve_data_dir().path)
    data = D.ensure({"dataset": "quick"}, "folder", data_dir, 0)
    work = Path(tempfile.mkdtemp(prefix="dlio-vs-suite-"))
    root, classes = dlio_tree(data, work)
    rows = []
    for r in range(args.rounds):
        got: dict[str, Any] = {}
        for side in ("suite", "dlio") if r % 2 == 0 else ("dlio", "suite"):
            if side == "suite":
                rec = suite_record(args.workers, args.batch, args.compute_ms, data_dir)
                got["suite_steady"] = rec["pipeline"]["epoch"]["steady_rate"]
                got["suite_epoch"] = rec["pipeline"]["epoch"]["epoch_rate"]
                got["suite_headline"] = next(m["value"] for m in rec["metrics"]
                                             if m["name"] == "throughput")  # fmt: skip
                got["suite_checks_passed"] = rec["correctness"]["passed"]
            else:
                out = work / f"dlio-{r}"
                out.mkdir()
                d = run_dlio(args.dlio, root, classes, data, args.workers, args.batch,
                             args.compute_ms / 1000.0, out, args.epochs)  # fmt: skip
                got["dlio_mean"], got["dlio_last_epoch"] = d["mean"], d["last_epoch"]
                got["dlio_per_epoch"] = d["per_epoch"]
        # like with like: DLIO's last (warm) epoch timed whole, the suite's measured epoch whole
        got["ratio_epoch"] = got["suite_epoch"] / got["dlio_last_epoch"]
        got["ratio_steady"] = got["suite_steady"] / got["dlio_last_epoch"]
        rows.append(got)
        print(json.dumps({"round": r, **got}), flush=True)
    ratio = statistics.median(r["ratio_epoch"] for r in rows)
    summary = {"workers": args.workers, "batch": args.batch, "compute_ms": args.compute_ms,
               "rounds": len(rows), "median_ratio_epoch": ratio,
               "median_ratio_steady": statistics.median(r["ratio_steady"] for r in rows),
               "within_15pct": abs(ratio - 1) <= TOLERANCE, "load_average": os.getloadavg(),
               "dataset": str(data.path), "files": data.samples}  # fmt: skip
    print(json.dumps(summary))
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "rounds": rows}, indent=2))
    return 0 if summary["within_15pct"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
