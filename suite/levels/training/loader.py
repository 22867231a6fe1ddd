"""The ``loader`` benchmark of the training level: a framework's own input pipeline reading a
dataset from storage, cold or warm, at a number of loader workers and a batch size.

One record per task: samples/s and MB/s (window statistic: suite/levels/training/pipeline.py),
time to first batch, CPU cores the pipeline used (every process of the task's tree), bytes it
took from storage (its processes' ``/proc/<pid>/io`` and the disk's ``/proc/diskstats``), the
page-cache state (evicted and verified, or warmed by a first epoch), the feeding capacity
(how many accelerators at a measured consumption rate it keeps >= 90% busy), and the checks:
every sample exactly once per epoch (across ranks too), labels, decoded pixels against a
reference decode, the shuffled order, the same order for the same seed. Imports no framework.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path, PurePath
from typing import Any, ClassVar

import numpy as np

from suite.adapters.base import Adapter
from suite.adapters.data_words import DATA_FORMATS, DECODE_PLACES, TRANSFORMS, Loader
from suite.benchmark import Benchmark, Context, Field, Params, Result, SizeSpec
from suite.datasets.make import SIZES
from suite.errors import ConfigError
from suite.levels.training import dataset as D
from suite.levels.training import pipeline as P
from suite.metrics import Check
from suite.metrics.performance import (
    BATCH_TIME,
    FEEDING_CAPACITY,
    PIPELINE_CPU_CORES,
    READ_RATE,
    STORAGE_READ,
    THROUGHPUT,
    TIME_TO_FIRST_BATCH,
)

CACHE_STATES = ("cold", "warm")


def usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def worker_sweep(cores: int, quick: bool) -> list[int]:
    """1, 2, 4 ... up to the cores (quick: 1 and 2, as far as the cores go)."""
    top = min(cores, 2) if quick else cores
    out, w = [], 1
    while w <= top:
        out.append(w)
        w *= 2
    if out[-1] != top:
        out.append(top)
    return out


DATA_FIELDS: dict[str, Field] = {
    "format": Field(str, default="folder", choices=DATA_FORMATS),
    "workers": Field(int, default=2, positive=False, below=1025),
    "batch": Field(int, default=32, below=65537),
    "transform": Field(str, default="train", choices=tuple(TRANSFORMS)),
    #: the suite's dataset by size (None with a user's: ``data``)
    "dataset": Field(str, default="quick", choices=("quick", "full"), nullable=True),
    "images": Field(int, default=None, nullable=True, below=10_000_001),
    "classes": Field(int, default=None, nullable=True, below=100_001),
    "data": Field(str, default=None, nullable=True),
    #: a user's labels count from 0 or 1 (None: detected from the labels read)
    "label_base": Field(int, default=None, nullable=True, positive=False, choices=(0, 1)),
    #: where the JPEGs are decoded: the loader's workers on the host, or the accelerator's
    #: own decoder (nvJPEG) with the workers only reading bytes (docs/reference/training-level.md)
    "decode": Field(str, default="host", choices=DECODE_PLACES),
}


class DataBenchmark(Benchmark):
    """A training-level benchmark that reads a dataset through the framework's own loader
    (``loader``, ``feed``): its data fields are checked, and a format or decode place the
    adapter does not read is declined, on the host from the class and in the worker with the
    device too."""

    level: ClassVar[str] = "training"

    def check(self, params: Params) -> None:
        check_data_fields(self.name, params)

    def host_declined(self, adapter_cls: type[Adapter], params: Params, dtype: str) -> str:
        # read from the class: no worker
        return loader_declined(adapter_cls, params["format"], params["decode"], params["transform"])

    def declined(self, ctx: Context) -> str:
        return super().declined(ctx) or loader_declined_here(ctx)


class LoaderBenchmark(DataBenchmark):
    name: ClassVar[str] = "loader"
    summary: ClassVar[str] = (
        "input pipeline: the framework's own loader over a dataset on storage, cold and warm; "
        "samples/s, MB/s, CPU cores, bytes from storage, feeding capacity, exactly-once"
    )
    fields: ClassVar[dict[str, Field]] = {
        **DATA_FIELDS,
        "cache": Field(str, default="warm", choices=CACHE_STATES),
        #: a simulated step per batch in the measured epoch (a peer's "computation time")
        "compute_ms": Field(float, default=0.0, positive=False, below=1e6),
    }

    def sizes(self, size_set: str) -> list[SizeSpec]:
        quick = size_set == "quick"
        out = []
        for fmt in DATA_FORMATS:
            for workers in worker_sweep(usable_cores(), quick):
                for cache in CACHE_STATES:
                    p = {"format": fmt, "workers": workers, "batch": 32 if quick else 256,
                         "transform": "train", "dataset": "quick" if quick else "full",
                         "cache": cache}  # fmt: skip
                    src = ("the quick set (2,000 JPEGs, 100 classes)" if quick
                           else "the full set (50,000 JPEGs, 1,000 classes), ImageNet's batch 256")  # fmt: skip
                    out.append(SizeSpec(p, src))
        return out

    def label(self, p: Params) -> str:
        return f"{p['format']} w{p['workers']} b{p['batch']} {p['transform']} {p['cache']}" + (
            f" {short_path(p['data'])}" if p.get("data") else ""
        )

    def check_world(self, params: Params, world: int) -> None:
        return None

    def run(self, ctx: Context) -> Result:
        return run_loader(ctx)


def short_path(path: str) -> str:
    """A dataset's path in a table's label: its last two parts (``…/imagenet/train``); the
    record's params keep it whole."""
    parts = PurePath(path).parts
    return path if len(parts) <= 3 else "…/" + "/".join(parts[-2:])


def loader_declined(
    adapter_cls: type[Adapter], fmt: str, decode: str = "host", transform: str = "train"
) -> str:
    """Why the adapter does not read ``fmt`` with ``transform`` ("" when it does), naming the
    frameworks that read the format where it is the format."""
    reason = adapter_cls.loader_declined(fmt, decode)
    if reason:
        return D.with_readers(reason, fmt) if decode == "host" else reason
    why = adapter_cls.unsupported_transforms.get(transform)
    return f"{adapter_cls.name}: {why}" if why else ""


def loader_declined_here(ctx: Context) -> str:
    """Why this worker's adapter cannot run the loader the task asks for ("" when it can):
    the class's declarations, and a device decode on a device that is not an accelerator."""
    p = ctx.params
    why = loader_declined(type(ctx.adapter), p["format"], p["decode"], p["transform"])
    if not why and p["decode"] == "device" and ctx.device.kind != "gpu":
        why = (
            f"decode = device needs an accelerator ({ctx.adapter.device_decoder}); this task "
            f"runs on the {ctx.device.kind}"
        )
    return why


def check_data_fields(owner: str, params: Params) -> None:
    if params.get("data"):
        from suite.safety import check_text

        check_text(params["data"], f"{owner}.data")
    if params.get("images") is not None and params.get("classes") is not None:
        if params["images"] < params["classes"]:
            raise ConfigError(f"{owner}.images: at least one image per class ({params['classes']})")
    if not params.get("data") and params.get("dataset") in SIZES:
        # one of the suite dataset's counts overridden, the other its size's: checked here,
        # naming the field, not at the space check, whose message names `data make`'s flags
        size, (classes, images) = params["dataset"], SIZES[params["dataset"]]
        if params.get("images") is None and (params.get("classes") or 0) > images:
            raise ConfigError(
                f"{owner}.classes: {params['classes']} classes for the {size} set's {images} "
                f"images; give classes <= {images}, or set images too"
            )
        if params.get("classes") is None and 0 < (params.get("images") or classes) < classes:
            raise ConfigError(
                f"{owner}.images: {params['images']} images for the {size} set's {classes} "
                f"classes (at least one per class); give images >= {classes}, or set classes too"
            )


def rank_world(ctx: Context) -> tuple[int, int]:
    from suite.launchers.base import rank_env

    r = rank_env()
    return r.rank, max(1, int(ctx.task.get("world_size", 1)))


def prepare(ctx: Context) -> tuple[D.TaskData, dict[str, Any]]:
    """The dataset (made on first use) and the storage facts of its format's directory."""
    from suite.datasets.storage import storage_facts

    data_dir = (ctx.task.get("data") or {}).get("dir")
    t0 = time.perf_counter()
    data = D.ensure(ctx.params, ctx.params["format"], data_dir, ctx.seed,
                    world=rank_world(ctx)[1])  # fmt: skip
    data.prepare_s = time.perf_counter() - t0
    return data, storage_facts(data.format_path)


def sample_bytes(data: D.TaskData, ids: list[int]) -> list[tuple[int, bytes]]:
    """The encoded bytes of samples ``ids``: a suite dataset's from its folder (its packed
    copies hold the same bytes, checked when they were written); a user's packed dataset's
    read from the format at the place its index gives."""
    return [(i, data.image_bytes(i)) for i in ids]


def stored_order(data: D.TaskData) -> np.ndarray:
    """Sample ids in the order the format stores them (the folder: id order; a user's packed
    dataset: id order, ids being given in stored order; a packed copy of a suite dataset: the
    writers' seeded order, suite/datasets/formats.py)."""
    n = data.samples
    if data.format == "folder" or data.manifest is None:
        return np.arange(n)
    seed = int(data.manifest["params"]["seed"])
    return np.random.default_rng([seed, 0x6F72646572]).permutation(n)


def run_loader(ctx: Context) -> Result:
    p = ctx.params
    rank, world = rank_world(ctx)
    data, facts = prepare(ctx)
    spec = data.spec(workers=p["workers"], batch=p["batch"], transform=p["transform"],
                     seed=ctx.seed, rank=rank, world=world, decode=p["decode"])  # fmt: skip
    eviction = None
    if p["cache"] == "cold":
        from suite.datasets.storage import evict

        eviction = evict(D.eviction_targets(data), facts["fs_type"])
        if world > 1:  # no rank reads before every rank has evicted (see ranks_evicted)
            eviction["ranks_evicted"] = ranks_evicted(ctx, rank, world)
    start = P.Start.now(facts.get("disk"))  # epoch 0 counts from here: the loader's build
    loader = ctx.adapter.data_loader(spec)
    try:
        epochs, measured, _ = _read(ctx, loader, p["cache"], facts.get("disk"), start,
                                         p["compute_ms"] / 1000.0, data)  # fmt: skip
        again = _same_seed(ctx, spec, P.SAME_SEED_BATCHES)
        pixels = P.pixel_check(loader, sample_bytes(data, _pixel_ids(data, ctx.seed)))
        description = loader.describe()
    finally:
        loader.close()
    extra: list[Check] = []
    ranks = None
    if world > 1:
        ranks, extra = gather_ranks(ctx, epochs, measured, p["workers"], rank, world, data,
                                    p["cache"], eviction)  # fmt: skip
    result = build_result(ctx, data, facts, eviction, epochs, measured, description, again,
                          pixels, spec.world, extra, shard=world > 1)  # fmt: skip
    if ranks is not None:
        result.sections["pipeline"]["ranks"] = ranks
    return result


#: how long rank 0 waits for the other ranks' ids (they read the same number of samples)
GATHER_TIMEOUT_S = 600.0


#: why a rank's own cold-read share is not judged where ranks share a node's page cache
SHARED_CACHE = (
    "this rank shares its node's page cache with another rank of the task: the kernel's "
    "read-ahead of one rank fills another's part (one RecordIO file: a rank read 2.0 times its "
    "part, the other 0), so rank 0 judges the node's ranks together "
    "(cold_read_from_storage_across_ranks)"
)


def shares_page_cache(ctx: Context, world: int) -> bool:
    """Whether another rank of the task runs on this rank's node (the ranks are spread evenly
    over the task's nodes)."""
    nodes = max(1, int(ctx.task.get("nodes") or 1))
    return world > 1 and world // nodes > 1


def ranks_evicted(ctx: Context, rank: int, world: int) -> dict[str, Any]:
    """Several ranks of a cold task: each evicts what the task reads, then waits here until
    every rank has (a file per rank beside the task's records), so no rank's eviction drops
    pages another rank has already read ahead. Without it a rank that started first read its
    shard, and part of it again after a later rank's eviction: 2.05 times its shard from
    storage in a 2-rank TFRecord task here (rank 1: 1.04), its cold rate and MB/s with it.
    Returns the wait and the ranks seen; after ``GATHER_TIMEOUT_S`` the rank goes on and the
    ranks missing are listed."""
    base = ctx.task.get("record_path")
    if not base:
        return {"waited_s": 0.0, "ranks": [rank], "missing": []}
    Path(f"{base}.evicted.rank{rank}").write_text("")
    began = time.monotonic()
    deadline = began + GATHER_TIMEOUT_S
    while True:
        seen = [r for r in range(world) if Path(f"{base}.evicted.rank{r}").is_file()]
        if len(seen) == world or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    missing = sorted(set(range(world)) - set(seen))
    return {"waited_s": time.monotonic() - began, "ranks": seen, "missing": missing}


def gather_ranks(ctx: Context, epochs: list[P.Epoch], measured: P.Epoch, workers: int,
                 rank: int, world: int, data: D.TaskData, cache: str = "warm",
                 eviction: dict[str, Any] | None = None,
                 ) -> tuple[dict[str, Any] | None, list[Check]]:  # fmt: skip
    """Several ranks: each writes the ids it delivered per epoch and its rate to a file
    beside the task's records; rank 0 waits for every rank's and checks that the union is
    every sample exactly once per epoch (the declared padding aside), and sums the rates
    (the aggregate throughput). Files, not a collective: the loader benchmark starts no
    process group, whatever the framework."""
    import json

    base = ctx.task.get("record_path")
    if not base:
        return None, []
    w = P.windows(measured, workers)
    mine = {"rank": rank, "steady_rate": w.steady_rate, "samples": int(sum(measured.sizes)),
            "epochs": [{"ids": e.order.tolist(), "pad": e.pad} for e in epochs],
            "host": socket.gethostname(), "read_bytes": int(measured.counters["read_bytes"]),
            "resident_after": (measured.residency or {}).get("resident_after"),
            "expected_bytes": float(sum(measured.sizes) * data.mean_sample_bytes),
            "evicted": bool(eviction and eviction.get("verified"))}  # fmt: skip
    out = Path(f"{base}.ids.rank{rank}.json")
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(mine))
    tmp.replace(out)
    if rank != 0:
        return None, []
    deadline = time.monotonic() + GATHER_TIMEOUT_S
    docs: dict[int, dict[str, Any]] = {}
    while len(docs) < world and time.monotonic() < deadline:
        for r in range(world):
            f = Path(f"{base}.ids.rank{r}.json")
            if r not in docs and f.is_file():
                docs[r] = json.loads(f.read_text())
        if len(docs) < world:
            time.sleep(0.2)
    if len(docs) == world:
        remove_rank_files(base, world)
    union: list[P.Epoch] = []
    for e in range(len(epochs)):
        ep = P.Epoch(e, 0.0)
        for r in sorted(docs):
            ep.ids.append(np.asarray(docs[r]["epochs"][e]["ids"], dtype=np.int64))
            ep.pad += int(docs[r]["epochs"][e]["pad"])
        union.append(ep)
    check = P.exactly_once(union, data.samples, sum(e.pad for e in union),
                           name="exactly_once_across_ranks")  # fmt: skip
    check.detail["ranks_reported"] = sorted(docs)  # type: ignore[index]
    if len(docs) < world:
        check = Check(check.name, float("inf"), 0.0, detail={**(check.detail or {}),
                      "missing_ranks": sorted(set(range(world)) - set(docs))})  # fmt: skip
    checks = [check]
    if cache == "cold" and shares_page_cache(ctx, world):
        checks.append(_cold_across_ranks(docs))
    rates = {r: d["steady_rate"] for r, d in sorted(docs.items())}
    ranks = {"world_size": world, "per_rank_rate": rates,
             "aggregate_rate": float(sum(rates.values())),
             "gathered": "ids and rates through files beside the records"}  # fmt: skip
    return ranks, checks


def remove_rank_files(base: str, world: int) -> None:
    """The files the ranks met through (``.evicted.rankN``, ``.ids.rankN.json``), once rank 0
    holds every rank's ids: a rank writes its ids only after it passed the eviction barrier,
    so no rank reads either file again. They were left in the run's ``tasks/``, two per rank
    and task. Where a rank never reported they stay, beside the record that says so."""
    for r in range(world):
        for f in (Path(f"{base}.evicted.rank{r}"), Path(f"{base}.ids.rank{r}.json")):
            f.unlink(missing_ok=True)


def _cold_across_ranks(docs: dict[int, dict[str, Any]]) -> Check:
    """The cold read judged per node, over the ranks that share its page cache: the bytes
    they took from storage against the bytes they delivered (the worst node)."""
    hosts: dict[str, list[dict[str, Any]]] = {}
    for d in docs.values():
        hosts.setdefault(str(d.get("host")), []).append(d)
    worst: Check | None = None
    per_host = {}
    for host, ranks in sorted(hosts.items()):
        read = sum(int(d.get("read_bytes", 0)) for d in ranks)
        expected = sum(float(d.get("expected_bytes", 0.0)) for d in ranks)
        verified = all(d.get("evicted") for d in ranks)
        # the node's bytes of the dataset (P.dataset_read_bytes), not its workers' imports:
        # what the ranks' files hold in the page cache together (one rank's read-ahead fills
        # another's part of a RecordIO file: counted in that part)
        came_in = [d.get("resident_after") for d in ranks]
        residency = None
        if all(isinstance(c, int) for c in came_in):
            residency = {"resident_after": sum(int(c or 0) for c in came_in)}
        one = P.cache_check("cold", read, expected, {"verified": verified}, residency)
        per_host[host] = {"ranks": sorted(int(d["rank"]) for d in ranks),
                          **(one.detail or {})}  # fmt: skip
        if worst is None or one.error > worst.error:
            worst = one
    assert worst is not None
    return Check("cold_read_from_storage_across_ranks", worst.error, worst.tolerance,
                 detail={"per_node": per_host})  # fmt: skip


def epoch_targets(data: D.TaskData, ids: np.ndarray) -> list[Any]:
    """What a rank's epoch read of the dataset: the files of the samples it delivered (a
    folder: a file per sample id), else what a cold epoch evicts."""
    if data.format == "folder" and len(data.files) == data.samples:
        return [data.files[i] for i in sorted({int(i) for i in ids if 0 <= i < data.samples})]
    return D.eviction_targets(data)


def _read(ctx: Context, loader: Loader, cache: str, disk: str | None, start: P.Start,
          compute_s: float = 0.0, data: D.TaskData | None = None,
          ) -> tuple[list[P.Epoch], P.Epoch, P.Epoch]:  # fmt: skip
    """Cold: epoch 0 measured (just evicted), epoch 1 for the order checks. Warm: epoch 0
    warms the page cache (and the workers), epoch 1 is measured, with the dataset's residency
    in the page cache before and after it (``P.cache_check``). Epoch 0's clock and counters
    start before the loader was built."""
    step = (lambda b: time.sleep(compute_s)) if compute_s > 0 else None
    if cache == "cold":
        with ctx.timed_region():
            first = P.read_epoch(loader, 0, disk=disk, since=start, on_batch=step)
        if data is not None:  # what of the dataset came in with the epoch (P.cache_check)
            after = P.dataset_residency(epoch_targets(data, first.order))
            first.residency = after if "unknown" in after else {
                "bytes": after["bytes"], "method": "mincore",
                "resident_after": after["bytes"] - after["not_resident"]}  # fmt: skip
        second = P.read_epoch(loader, 1, disk=disk)
        return [first, second], first, second
    first = P.read_epoch(loader, 0, disk=disk, since=start)
    targets = epoch_targets(data, first.order) if data is not None else None
    before = P.dataset_residency(targets) if targets is not None else None
    with ctx.timed_region():
        second = P.read_epoch(loader, 1, disk=disk, on_batch=step)
    if targets is not None and before is not None:
        after = P.dataset_residency(targets)
        if "unknown" in before or "unknown" in after:
            second.residency = {"unknown": before.get("unknown") or after.get("unknown")}
        else:
            second.residency = {"bytes": before["bytes"], "method": "mincore",
                                "not_resident_before": before["not_resident"],
                                "not_resident_after": after["not_resident"]}  # fmt: skip
    return [first, second], second, first


def _same_seed(ctx: Context, spec: Any, batches: int) -> list[np.ndarray] | None:
    loader = ctx.adapter.data_loader(spec)
    try:
        if not loader.describe().get("deterministic", True):
            return None
        ep = P.read_epoch(loader, 0, limit=batches)
        return ep.ids
    finally:
        loader.close()


def _pixel_ids(data: D.TaskData, seed: int) -> list[int]:
    rng = np.random.default_rng([seed, 0x706978])
    n = min(P.PIXEL_SAMPLES, data.samples)
    return sorted(int(i) for i in rng.choice(data.samples, size=n, replace=False))


def build_result(ctx: Context, data: D.TaskData, facts: dict[str, Any],
                 eviction: dict[str, Any] | None, epochs: list[P.Epoch], measured: P.Epoch,
                 description: dict[str, Any], again: list[np.ndarray] | None,
                 pixels: list[Check], world: int, extra_checks: list[Check] | None = None,
                 shard: bool = False) -> Result:  # fmt: skip
    p = ctx.params
    w = P.windows(measured, p["workers"])
    per_sample = data.mean_sample_bytes
    rates = w.rates
    mb_rates = [r * per_sample / 1e6 for r in rates]
    counters = measured.counters
    cores = counters["cpu_s"] / max(measured.seconds, 1e-9)
    delivered = int(sum(measured.sizes))
    expected_bytes = delivered * per_sample
    consumers = P.feeding_rates()
    feeding = P.feeding_capacity(w.steady_rate, consumers)
    expected = data.samples
    checks = [
        P.exactly_once(
            epochs,
            expected,
            sum(e.pad for e in epochs),
            name="exactly_once_in_this_rank" if shard else "exactly_once_per_epoch",
            shard=shard,
        ),
        P.labels_match(epochs, data.catalogue.labels),
        *pixels,
        *P.shuffle_checks(epochs, stored_order(data), shuffled=True),
        *(extra_checks or []),
    ]
    not_checked = []
    cache = P.cache_check(p["cache"], counters["read_bytes"], expected_bytes, eviction,
                          measured.residency)  # fmt: skip
    if p["cache"] == "cold" and shares_page_cache(ctx, world):
        not_checked.append(f"{cache.name}: {SHARED_CACHE}")
    else:
        checks.append(cache)
    if again is not None:
        checks.append(P.same_seed(epochs[0], again))
    else:
        not_checked.append(
            f"same_seed_same_order: {description.get('deterministic_reason', 'not deterministic')}"
        )
    metrics = [
        THROUGHPUT.entry(rates),
        READ_RATE.entry(mb_rates),
        BATCH_TIME.entry(w.batch_times),
        TIME_TO_FIRST_BATCH.entry(value=epochs[0].first_batch_s),
        PIPELINE_CPU_CORES.entry(value=cores),
        # the dataset's bytes from storage: the tree's figure also counted the modules and
        # libraries fresh loader workers re-read (135 KB of imports beside a 136 KB dataset);
        # the tree's whole stays in pipeline.cache.read_bytes_from_storage
        STORAGE_READ.entry(
            value=P.dataset_read_bytes(counters["read_bytes"], measured.residency) / 1e6
        ),
    ]
    if feeding:
        metrics.append(FEEDING_CAPACITY.entry(value=float(feeding[0]["accelerators"])))

    corrupt = sorted(set(measured.corrupt) | {c for e in epochs for c in e.corrupt})
    dataset = data.describe()
    dataset.update(fs_type=facts.get("fs_type"), mount_point=facts.get("mount_point"),
                   mount_source=facts.get("mount_source"), corrupt=len(corrupt))  # fmt: skip
    section = {
        "dataset": dataset,
        "storage": facts,
        "loader": description,
        "transform": TRANSFORMS[p["transform"]],
        "compute_ms": p["compute_ms"],
        "cache": {
            "state": p["cache"],
            "eviction": eviction,
            "read_bytes_from_storage": counters["read_bytes"],
            "device_bytes_read": measured.device_bytes_read,
            "device": facts.get("disk"),
            "bytes_expected": expected_bytes,
            "share_from_storage": counters["read_bytes"] / max(1.0, expected_bytes),
            "dataset_residency": measured.residency,
            # what of read_bytes_from_storage was the dataset's (P.dataset_read_bytes): the
            # tree's figure also counts modules its fresh loader workers re-read
            "dataset_read_bytes": P.dataset_read_bytes(counters["read_bytes"], measured.residency),
        },
        "epoch": {
            "measured": measured.index,
            "seconds": measured.seconds,
            "samples": delivered,
            "batches": len(measured.sizes),
            "epoch_rate": delivered / max(measured.seconds, 1e-9),
            "steady_rate": w.steady_rate,
            "time_to_first_batch_s": measured.first_batch_s,
            "first_epoch_first_batch_s": epochs[0].first_batch_s,
        },
        "cpu": {"cpu_s": counters["cpu_s"], "cores_used": cores,
                "processes": counters["processes"], "lost_processes": len(counters["lost"]),
                "note": "CPU time of every process of the task's tree (the worker and its "
                        "loader processes; threads included) over the measured epoch's wall time"},  # fmt: skip
        "feeding": feeding,
        "feeding_rule": f"floor(steady samples/s / ({P.BUSY_SHARE} x accelerator samples/s)): "
                        "accelerators kept at least 90% busy (MLPerf Storage's rule)",
        "corrupt": {"count": len(corrupt), "ids": corrupt[:50],
                    "files": [data.catalogue.relpaths[i] for i in corrupt[:20]
                              if 0 <= i < len(data.catalogue.relpaths)]},  # fmt: skip
        "rank": rank_world(ctx)[0],
        "world_size": world,
        "not_checked": not_checked,
        "window": "the measured epoch's batches after the warm-up, cut into windows of "
                  "inner_repeats batches; a window's rate: its samples over the time between "
                  "the arrival of the batch before it and of its last batch",
    }  # fmt: skip
    measurement = {
        "warmup_iters": w.warmup,
        "inner_repeats": w.per_window,
        "samples": len(rates),
        "stop_reason": "max_samples",
        "elapsed_s": w.steady_seconds,
        "ci_rel_width": P.ci_rel(rates),
        "target_ci_rel": P.TARGET_CI_REL,
        "window": "the measured epoch (see pipeline.window)",
    }
    return Result(metrics=metrics, checks=checks, measurement=measurement,
                  work={"bytes": expected_bytes}, sections={"pipeline": section})  # fmt: skip
