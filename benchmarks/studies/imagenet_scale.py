"""The training level at ImageNet's size: a tree of 1,281,167 small files in 1,000 class
folders (ILSVRC-2012 train's counts; a few hundred bytes each, valid JPEGs), on local disk,
and what the suite does with it, each timed and its memory measured:

1. making the tree (2 processes; its time is reported, not a target);
2. listing it warm (``os.scandir`` over every folder, one ``stat`` a file);
3. ``dlsuite data info PATH --json`` (layout, samples, classes, digest, page cache sample);
4. planning: ``dlsuite run --level training --benchmark loader --data PATH --framework
   pytorch --quick --dry-run``;
5. **planning and the first batch**: the run's own code in one process, as host and worker do
   it (``config.resolve`` + ``plan.build``: the host lists the tree and caches the listing in
   the data dir; then the worker's ``dataset.ensure``: the listing (the host's, cached), digest
   and catalogue of all 1,281,167 files; then PyTorch's ``DataLoader`` with 2 worker processes
   over the whole catalogue to its first batch), wall time from the start and the **PSS
   summed** over the process and its loader workers (sampled every 50 ms: the target is
   <= 60 s and < 2 GiB on 2 cores, warm metadata cache); a first run (no listing cached), then
   again (cached);
6. a real ``dlsuite run`` over the whole tree, stopped by its task timeout (``--cap``, well
   into its first epoch): the PSS summed over host, worker and loader workers;
7. a real ``dlsuite run`` reading a stratified subset (``--images``), cold: host, worker and
   loader processes, the whole tree listed by both, only the subset evicted and read; its
   wall time, the PSS summed over its process tree, and the record's figures;
8. the exactly-once bookkeeping of one 1,281,167-sample epoch (NumPy);
9. ``dlsuite data evict PATH``: every file dropped from the page cache and checked.

    python -m benchmarks.studies.imagenet_scale --root /local/disk/imagenet-scale [--keep]
        [--images 1281167 --classes 1000] [--subset 10000] [--out docs/results/imagenet-scale]

Timings depend on the machine's load: the script records the load average before and after
each step and the machine (CPU model, cores, AMX), and writes everything to ``OUT/result.json``
with the subset run's records (``OUT/subset-run/results.jsonl``).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from multiprocessing import Pool
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

#: ILSVRC-2012 train: 1,281,167 images in 1,000 classes
IMAGENET_IMAGES, IMAGENET_CLASSES = 1_281_167, 1_000
#: distinct tiny JPEGs the files are drawn from
VARIANTS = 64


def tiny_jpegs(n: int = VARIANTS) -> list[bytes]:
    """``n`` small valid JPEGs (16 x 12 crops of scikit-learn's photographs, quality 75)."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_sample_images

    photos = [np.asarray(p) for p in load_sample_images().images]
    rng = np.random.default_rng(0)
    out = []
    for i in range(n):
        p = photos[i % 2]
        y, x = int(rng.integers(0, p.shape[0] - 48)), int(rng.integers(0, p.shape[1] - 64))
        im = Image.fromarray(p[y : y + 48, x : x + 64]).resize((16, 12))
        buf = io.BytesIO()
        im.save(buf, format="JPEG", quality=75)
        out.append(buf.getvalue())
    return out


def _counts(images: int, classes: int) -> list[int]:
    base, extra = divmod(images, classes)
    return [base + (1 if c < extra else 0) for c in range(classes)]


def _write_classes(args: tuple[str, list[int], list[int], list[bytes]]) -> int:
    root, classes, counts, blobs = args
    n = 0
    for c, k in zip(classes, counts, strict=True):
        d = os.path.join(root, f"n{c:08d}")
        os.mkdir(d)
        for j in range(k):
            with open(os.path.join(d, f"n{c:08d}_{j}.JPEG"), "wb") as fh:
                fh.write(blobs[(c * 7919 + j) % len(blobs)])
            n += 1
    return n


def make_tree(root: Path, images: int, classes: int, procs: int = 2) -> dict[str, Any]:
    marker = root / ".imagenet-scale.json"
    if marker.is_file():
        doc: dict[str, Any] = json.loads(marker.read_text())
        if doc.get("images") == images and doc.get("classes") == classes:
            return {**doc, "reused": True}
    if root.exists():
        shutil.rmtree(root)
    tmp = root.with_name(root.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    blobs = tiny_jpegs()
    counts = _counts(images, classes)
    t0 = time.perf_counter()
    chunks = [list(range(i, classes, procs * 8)) for i in range(procs * 8)]
    jobs = [(str(tmp), ch, [counts[c] for c in ch], blobs) for ch in chunks]
    with Pool(procs) as pool:
        written = sum(pool.map(_write_classes, jobs))
    t_write = time.perf_counter() - t0
    os.sync()
    t_total = time.perf_counter() - t0
    tmp.rename(root)
    doc = {"images": written, "classes": classes, "procs": procs, "write_s": t_write,
           "write_and_sync_s": t_total, "bytes_per_file": [min(map(len, blobs)), max(map(len, blobs))],
           "made_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}  # fmt: skip
    marker.write_text(json.dumps(doc))
    return {**doc, "reused": False}


# -- measuring ---------------------------------------------------------------------------------


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


class PssSampler:
    """The PSS summed over a process tree (a pid and its descendants), sampled every
    ``interval`` seconds: the largest sum seen, and its parts at that moment."""

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        self.pid, self.interval = pid, interval
        self.peak, self.parts, self.samples = 0, {}, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        import psutil

        while not self._stop.is_set():
            try:
                top = psutil.Process(self.pid)
                procs = [top, *top.children(recursive=True)]
            except psutil.Error:
                procs = []
            parts = {}
            for p in procs:
                try:
                    parts[p.pid] = (p.name(), p.memory_full_info().pss)
                except psutil.Error:
                    continue
            total = sum(v[1] for v in parts.values())
            self.samples += 1
            if total > self.peak:
                self.peak, self.parts = total, parts
            self._stop.wait(self.interval)

    def result(self) -> dict[str, Any]:
        return {"pss_peak_bytes": self.peak, "pss_peak_gib": self.peak / 2**30,
                "processes_at_peak": [{"pid": k, "name": v[0], "pss_mb": v[1] / 1e6}
                                      for k, v in sorted(self.parts.items())],
                "pss_samples": self.samples, "interval_s": self.interval}  # fmt: skip


def timed_cli(argv: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """``python -m suite ARGV`` as a user runs it: wall time, exit code, PSS of its tree."""
    before = load()
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "suite", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, **(env or {}), "PYTHONPATH": str(ROOT)})  # fmt: skip
    with PssSampler(proc.pid) as pss:
        out, err = proc.communicate()
    wall = time.perf_counter() - t0
    return {"argv": ["dlsuite", *argv], "exit": proc.returncode, "wall_s": wall,
            "load_before": before, "load_after": load(), **pss.result(),
            "stdout_tail": out[-3000:], "stderr_tail": err[-3000:]}  # fmt: skip


def warm_listing(root: Path) -> dict[str, Any]:
    t0 = time.perf_counter()
    n = size = 0
    for d in os.scandir(root):
        if d.is_dir():
            for e in os.scandir(d.path):
                n += 1
                size += e.stat().st_size
    return {"files": n, "bytes": size, "seconds": time.perf_counter() - t0, "load": load()}


def first_batch(root: Path, data_dir: Path) -> dict[str, Any]:
    """Planning and the first batch over the whole tree, the run's code in this process (the
    worker's steps after its import: the dataset found and catalogued, the loader built)."""
    child = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.studies.imagenet_scale", "--_first-batch", str(root), "--_data-dir", str(data_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    before = load()
    with PssSampler(child.pid) as pss:
        out, err = child.communicate()
    doc: dict[str, Any] = json.loads(out.strip().splitlines()[-1]) if child.returncode == 0 else {
        "error": err[-3000:]}  # fmt: skip
    return {**doc, "exit": child.returncode, "load_before": before, "load_after": load(),
            **pss.result()}  # fmt: skip


def _first_batch_child(root: str, data_dir: str) -> None:
    t0 = time.perf_counter()
    phases: dict[str, float] = {}

    def mark(name: str) -> None:
        phases[name] = time.perf_counter() - t0

    from suite import config, plan
    from suite.levels.training import dataset as D

    mark("imports")
    cfg = config.resolve({"level": ["training"], "frameworks": ["pytorch"],
                          "benchmarks": ["loader"], "quick": True, "data": root,
                          "data_dir": data_dir}, env={})  # fmt: skip
    mark("config_and_detect")
    tasks = plan.build(cfg)
    mark("plan")
    task = next(t for t in tasks if t.params["workers"] == 2 and t.params["cache"] == "warm")
    from suite.adapters import ADAPTERS

    adapter = ADAPTERS.load("pytorch")()
    adapter.setup("cpu")
    mark("adapter_setup (torch imported)")
    data = D.ensure(task.params, task.params["format"], data_dir, cfg.seed)
    mark("dataset_ensure (worker: listing, digest, catalogue)")
    spec = data.spec(workers=2, batch=task.params["batch"], transform="train", seed=0)
    loader = adapter.data_loader(spec)
    mark("loader_built")
    batch = next(iter(loader.epoch(0)))
    mark("first_batch")
    ok = len(batch.ids) == task.params["batch"] and all(0 <= i < data.samples for i in batch.ids)
    loader.close()
    print(json.dumps({"phases_s": phases, "planning_and_first_batch_s": phases["first_batch"],
                      "tasks": len(tasks), "samples": data.samples, "batch": len(batch.ids),
                      "ids_valid": bool(ok), "digest": data.digest}))  # fmt: skip


def bookkeeping(n: int) -> dict[str, Any]:
    import numpy as np

    from suite.levels.training import pipeline as P

    ep = P.Epoch(0, 0.0)
    ep.ids = np.array_split(np.random.default_rng(0).permutation(n), -(-n // 256))
    ep.labels = [np.zeros(a.size, np.int64) for a in ep.ids]
    t0 = time.perf_counter()
    check = P.exactly_once([ep], n, 0)
    t1 = time.perf_counter()
    labels = P.labels_match([ep], [0] * n)
    t2 = time.perf_counter()
    return {"samples": n, "exactly_once_s": t1 - t0, "labels_s": t2 - t1,
            "passed": bool(check.passed and labels.passed)}  # fmt: skip


def machine() -> dict[str, Any]:
    info = Path("/proc/cpuinfo").read_text()
    model = next((ln.split(":", 1)[1].strip() for ln in info.splitlines()
                  if ln.startswith("model name")), "?")  # fmt: skip
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "amx": "amx_bf16" in info,
        "memory_gib": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30,
    }


def main() -> int:
    if "--_first-batch" in sys.argv:
        a = sys.argv
        _first_batch_child(a[a.index("--_first-batch") + 1], a[a.index("--_data-dir") + 1])
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, required=True, help="where the tree is made (local disk)")
    ap.add_argument("--images", type=int, default=IMAGENET_IMAGES)
    ap.add_argument("--classes", type=int, default=IMAGENET_CLASSES)
    ap.add_argument("--subset", type=int, default=10_000, help="images the real run reads")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "imagenet-scale")
    ap.add_argument("--keep", action="store_true", help="keep the tree (else removed at the end)")
    ap.add_argument("--cap", type=float, default=120.0,
                    help="task timeout of the real run over the whole tree (its PSS is measured)")  # fmt: skip
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    data_dir = a.root.with_name(a.root.name + "-datadir")
    result: dict[str, Any] = {"machine": machine(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                              "load_at_start": load()}  # fmt: skip

    def step(name: str, value: Any) -> None:
        result[name] = value
        (a.out / "result.json").write_text(json.dumps(result, indent=2, default=str))
        print(f"{name}: {json.dumps(value, default=str)[:400]}", flush=True)

    step("make_tree", make_tree(a.root, a.images, a.classes))
    step("listing_cold_or_warm", warm_listing(a.root))  # warms the metadata cache
    step("listing_warm", warm_listing(a.root))
    info_dir = a.root.with_name(a.root.name + "-infodir")
    for d in (data_dir, info_dir):
        shutil.rmtree(d, ignore_errors=True)  # no listing cached: a first run
    step("data_info", timed_cli(["data", "info", str(a.root), "--json", "--data-dir",
                                 str(info_dir)]))  # fmt: skip
    step("data_info_cached", timed_cli(["data", "info", str(a.root), "--json", "--data-dir",
                                        str(info_dir)]))  # fmt: skip
    step("plan_dry_run", timed_cli(["run", "--level", "training", "--benchmark", "loader",
                                    "--data", str(a.root), "--framework", "pytorch", "--quick",
                                    "--dry-run", "--data-dir", str(info_dir)]))  # fmt: skip
    # planning and the first batch: a first run (nothing cached: the host lists the tree and
    # caches the listing, the worker reuses it), then the same again (the listing cached)
    step("planning_and_first_batch", first_batch(a.root, data_dir))
    step("planning_and_first_batch_again", first_batch(a.root, data_dir))
    # the run's processes together on the whole tree: a real run (host, worker, loader
    # workers) over all 1,281,167 files, stopped by its task timeout well into its first
    # epoch (an epoch of 1.28M images takes hours on 2 cores): its PSS summed at the peak
    full_dir = a.out / "full-run-capped"
    shutil.rmtree(full_dir, ignore_errors=True)
    warm = a.out / "full-size.toml"
    warm.write_text('[training.loader]\nsizes = [{format = "folder", workers = 2, batch = 64, '
                    'cache = "warm"}]\n')  # fmt: skip
    step("full_run_capped", timed_cli(["run", "--level", "training", "--benchmark", "loader",
                                       "--data", str(a.root), "--framework", "pytorch",
                                       "--config", str(warm), "--timeout", str(a.cap),
                                       "--out", str(full_dir), "--data-dir", str(data_dir)]))  # fmt: skip
    run_dir = a.out / "subset-run"
    shutil.rmtree(run_dir, ignore_errors=True)
    conf = a.out / "subset-size.toml"
    conf.write_text('[training.loader]\nsizes = [{format = "folder", workers = 2, batch = 64, '
                    'cache = "cold"}]\n')  # fmt: skip
    step("subset_run", timed_cli(["run", "--level", "training", "--benchmark", "loader",
                                  "--data", str(a.root), "--framework", "pytorch", "--images",
                                  str(a.subset), "--config", str(conf), "--out", str(run_dir),
                                  "--data-dir", str(data_dir)]))  # fmt: skip
    recs = [json.loads(x) for x in (run_dir / "results.jsonl").read_text().splitlines()] if (
        run_dir / "results.jsonl").is_file() else []  # fmt: skip
    if recs:
        r = recs[0]
        p = r.get("pipeline", {})
        step("subset_record", {
            "status": r["status"], "checks_passed": r.get("correctness", {}).get("passed"),
            "dataset": {k: p.get("dataset", {}).get(k) for k in (
                "samples", "subset", "prepare_s", "digest", "fs_type", "mount_point")},
            "eviction": (p.get("cache") or {}).get("eviction"),
            "read_bytes_from_storage": (p.get("cache") or {}).get("read_bytes_from_storage"),
            "time_to_first_batch_s": (p.get("epoch") or {}).get("first_epoch_first_batch_s"),
            "throughput": next((m["median"] for m in r.get("metrics", [])
                                if m["name"] == "throughput"), None),
        })  # fmt: skip
    step("bookkeeping", bookkeeping(a.images))
    # cache eviction of the whole tree, checked (what a cold epoch over all of it does first)
    step("evict_whole_tree", timed_cli(["data", "evict", str(a.root), "--json"]))
    result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    step("load_at_end", load())
    shutil.rmtree(info_dir, ignore_errors=True)
    if not a.keep:
        shutil.rmtree(a.root, ignore_errors=True)
        shutil.rmtree(data_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
