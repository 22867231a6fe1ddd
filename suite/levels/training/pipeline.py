"""Measuring an input pipeline: epochs read through a framework's loader, timed per batch,
with the process tree's CPU time and storage reads, the page-cache state, and the checks.

Framework-neutral (NumPy, psutil, Pillow): the loader is the adapter's
(:class:`~suite.adapters.data_words.Loader`).

**The window statistic.** A pipeline is not a callable to repeat: it is a stream whose first
batches wait for workers to start and buffers to fill, and whose cold epoch can be read only
once. So the measured epoch is timed batch by batch (the arrival time of each), its first
``warmup`` batches (the fill: ``2 x workers + 1``, at most a quarter of the epoch) left out,
and the rest cut into windows of ``k`` consecutive batches, ``k`` a multiple of the
number of workers (their batches arrive in bursts: a window that cuts a burst would time its
gap or its wait) chosen for about :data:`MIN_WINDOWS` windows. A window's rate is its samples over the time from the arrival of
the batch before it to the arrival of its last. The record's samples/s and MB/s are the
median of the window rates with the 95% CI of the median (``suite.metrics.summarise``: the
statistic of the suite's measure loop); its ``measurement`` says ``warmup_iters`` (fill
batches), ``inner_repeats`` (``k``), ``samples`` (windows) and ``stop_reason``
``max_samples`` (the epoch's end).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from suite.adapters.data_words import Batch, Loader, rgb8
from suite.metrics import Check

#: at least this many windows in the measured epoch (fewer batches: one batch a window)
MIN_WINDOWS = 10
#: a pipeline record's ``target_ci_rel``: one epoch is what a (cold) read gives, so its
#: windows' interval cannot be narrowed by sampling longer, as the measure loop's (0.02, for
#: calls repeated at will) is; wider than a quarter of the median, the epoch's pace varied too
#: much to read one rate from it, and the record is *noisy* (``suite.results.noisy``: the
#: tables say so, ``--retry-noisy`` reads it again)
TARGET_CI_REL = 0.25
#: MLPerf Storage's rule: an accelerator counts as fed when it is kept at least this busy
BUSY_SHARE = 0.9
#: the decoded pixels agree with the reference decode (libjpeg-turbo through Pillow) when the
#: mean absolute difference is at most this many levels (of 255) and no more than
#: PIXEL_BAD_SHARE_MAX of the values differ by more than PIXEL_BAD_LEVELS: JPEG decoders may
#: differ in their IDCT (TensorFlow's default is libjpeg's fast integer IDCT) and chroma
#: upsampling (fancy or not), which moves values by a few levels; a wrong channel order, a
#: wrong orientation or another image moves them by tens
PIXEL_MEAN_TOL = 2.0
PIXEL_BAD_LEVELS = 16
PIXEL_BAD_SHARE_MAX = 0.01
#: how many samples the pixel check decodes twice
PIXEL_SAMPLES = 6
#: a cold read must take at least this share of the bytes it read from storage; a warm one at
#: most WARM_MAX_SHARE
COLD_MIN_SHARE = 0.8
WARM_MAX_SHARE = 0.05
#: batches of a second loader with the same seed compared with the first's epoch 0
SAME_SEED_BATCHES = 3


# -- the process tree's counters -----------------------------------------------------------


def _tree() -> list[Any]:
    import psutil

    me = psutil.Process()
    try:
        return [me, *me.children(recursive=True)]
    except psutil.Error:
        return [me]


def tree_snapshot() -> dict[int, tuple[float, int, int]]:
    """pid -> (CPU seconds, read_bytes from storage, rchar) for this process and every
    descendant (the loader's worker processes). Each process's figures include its children
    that ended and were reaped (the kernel adds a reaped child's I/O to its parent's
    ``/proc/<pid>/io``; psutil's ``children_user``/``children_system`` its CPU time), so a
    loader whose workers end with the epoch (Grain starts them per epoch) is counted whole."""
    import psutil

    out: dict[int, tuple[float, int, int]] = {}
    for p in _tree():
        try:
            t = p.cpu_times()
            io = _io(p.pid)
            cpu = t.user + t.system + t.children_user + t.children_system
            out[p.pid] = (cpu, io.get("read_bytes", 0), io.get("rchar", 0))
        except (psutil.Error, OSError):
            continue
    return out


def _io(pid: int) -> dict[str, int]:
    from suite.datasets.storage import io_counters

    try:
        return io_counters(pid)
    except OSError:
        return {}


def tree_delta(
    a: dict[int, tuple[float, int, int]], b: dict[int, tuple[float, int, int]]
) -> dict[str, Any]:
    """CPU seconds and bytes between two snapshots of the tree: the sum at ``b`` less the sum
    at ``a`` (a process that ended between them is in its reaper's figures at ``b``; one not
    reaped yet is ``lost``)."""
    cpu = sum(v[0] for v in b.values()) - sum(v[0] for v in a.values())
    rb = sum(v[1] for v in b.values()) - sum(v[1] for v in a.values())
    rc = sum(v[2] for v in b.values()) - sum(v[2] for v in a.values())
    return {"cpu_s": max(0.0, cpu), "read_bytes": int(max(0, rb)), "rchar": int(max(0, rc)),
            "processes": len(b), "lost": sorted(set(a) - set(b))}  # fmt: skip


def disk_sectors(disk: str | None) -> int | None:
    if not disk:
        return None
    from suite.datasets.storage import diskstats

    entry = diskstats(disk).get(disk)
    return None if entry is None else entry["sectors_read"]


# -- an epoch ------------------------------------------------------------------------------


@dataclass
class Start:
    """The clock and counters at a starting point (before a loader is built)."""

    t: float
    snapshot: dict[int, tuple[float, int, int]]
    sectors: int | None

    @classmethod
    def now(cls, disk: str | None = None) -> Start:
        snap, sectors = tree_snapshot(), disk_sectors(disk)
        return cls(time.perf_counter(), snap, sectors)


@dataclass
class Epoch:
    """One epoch as delivered: batch arrival times (from the iterator's creation), sizes,
    the ids and labels in order, padding, corrupt samples, and the counters over it."""

    index: int
    start: float
    arrivals: list[float] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    ids: list[np.ndarray] = field(default_factory=list)
    labels: list[np.ndarray] = field(default_factory=list)
    pad: int = 0
    corrupt: list[int] = field(default_factory=list)
    end: float = 0.0
    counters: dict[str, Any] = field(default_factory=dict)
    device_bytes_read: int | None = None
    #: a warm epoch: what it reads of the dataset, and how much of that was not in the page
    #: cache before it began and after it ended (``dataset_residency``)
    residency: dict[str, Any] | None = None

    @property
    def order(self) -> np.ndarray:
        return np.concatenate(self.ids) if self.ids else np.zeros(0, np.int64)

    @property
    def all_labels(self) -> np.ndarray:
        return np.concatenate(self.labels) if self.labels else np.zeros(0, np.int64)

    @property
    def first_batch_s(self) -> float:
        return self.arrivals[0] - self.start if self.arrivals else math.nan

    @property
    def seconds(self) -> float:
        return self.end - self.start


def read_epoch(
    loader: Loader,
    index: int,
    *,
    disk: str | None = None,
    on_batch: Callable[[Batch], None] | None = None,
    limit: int | None = None,
    since: Start | None = None,
) -> Epoch:
    """Iterate epoch ``index`` to its end (or ``limit`` batches), timing each batch's
    arrival; ``on_batch`` (the consumer: a training step) runs after each arrival.
    ``since``: counters and clock taken before the loader was built (its first epoch: a
    loader may start reading in its constructor, MXNet's ImageRecordIter does)."""
    start = since or Start.now(disk)
    snap0, sect0 = start.snapshot, start.sectors
    ep = Epoch(index, start.t)
    for batch in loader.epoch(index):
        ep.arrivals.append(time.perf_counter())
        n = len(batch.ids)
        ep.sizes.append(n)
        ep.ids.append(np.asarray(batch.ids, dtype=np.int64).reshape(-1))
        ep.labels.append(np.asarray(batch.labels).astype(np.int64).reshape(-1))
        ep.pad += int(batch.pad)
        ep.corrupt += [int(c) for c in batch.corrupt]
        if on_batch is not None:
            on_batch(batch)
        if limit is not None and len(ep.sizes) >= limit:
            break
    ep.end = time.perf_counter()
    ep.counters = tree_delta(snap0, tree_snapshot())
    sect1 = disk_sectors(disk)
    if sect0 is not None and sect1 is not None:
        ep.device_bytes_read = 512 * (sect1 - sect0)
    return ep


@dataclass
class Windows:
    warmup: int
    per_window: int
    rates: list[float]
    batch_times: list[float]
    steady_rate: float
    steady_seconds: float
    steady_samples: int


def ci_rel(samples: list[float]) -> float | None:
    """The relative width of the 95% CI of the median of ``samples`` (None below two)."""
    from suite.metrics import summarise

    if len(samples) < 2:
        return None
    s = summarise(samples)
    return float(s.ci_rel_width) if np.isfinite(s.ci_rel_width) else None


def windows(ep: Epoch, workers: int) -> Windows:
    """The window statistic of the module docstring over epoch ``ep`` read by ``workers``
    loader workers."""
    n = len(ep.arrivals)
    if n < 3:
        raise ValueError(f"an epoch of {n} batches is too short to time; give more samples "
                         "or a smaller batch")  # fmt: skip
    # the fill: workers starting and queues filling (2 x workers + 1), at most a quarter
    warm = max(1, min(2 * max(1, workers) + 1, n // 4))
    rest = n - warm
    # a window spans a whole number of rounds of the workers: with several workers, batches
    # arrive in bursts (each worker finishes its batch at about the same time), and a window
    # that cuts a burst would time its gap or its wait
    per_round = max(1, workers)
    k = per_round * max(1, -(-(rest // MIN_WINDOWS) // per_round))
    rates, per_batch = [], []
    # arrivals[warm - 1] is the reference: the first window begins when that batch arrived
    i = warm
    while i + k <= n:
        t0, t1 = ep.arrivals[i - 1], ep.arrivals[i + k - 1]
        samples = sum(ep.sizes[i : i + k])
        dt = max(t1 - t0, 1e-9)
        rates.append(samples / dt)
        per_batch.append(dt / k)
        i += k
    last = i - 1
    steady_s = ep.arrivals[last] - ep.arrivals[warm - 1]
    steady_n = sum(ep.sizes[warm : last + 1])
    return Windows(warm, k, rates, per_batch, steady_n / max(steady_s, 1e-9), steady_s, steady_n)


# -- the checks ----------------------------------------------------------------------------


def exactly_once(epochs: list[Epoch], expected: int | set[int], pad_declared: int,
                 name: str = "exactly_once_per_epoch", shard: bool = False) -> Check:  # fmt: skip
    """Every expected id once per epoch: duplicates beyond the declared padding and drops
    counted, over every epoch read (error: their share of the expected samples). ``expected``:
    the ids 0 .. n-1 (an int, counted with NumPy: 1.28M ids in milliseconds) or a set.
    ``shard``: one rank's share of a sharded epoch, whose ids are not known in advance (a
    sampler draws them per epoch): duplicates and unknown ids count, drops are the union's
    check."""
    if isinstance(expected, int):
        n, table = expected, None
    else:
        table = np.asarray(sorted(expected), dtype=np.int64)
        n = int(table.size)
    dupes = drops = unknown = pad = 0
    per_epoch = []
    for ep in epochs:
        ids = ep.order
        if table is None:
            known = (ids >= 0) & (ids < n)
            slot = ids[known]
        else:
            pos = np.searchsorted(table, ids)
            known = (pos < n) & (table[np.minimum(pos, n - 1)] == ids) if n else ids < ids
            slot = pos[known]
        counts = np.bincount(slot, minlength=n)
        extra_ids = ids[~known]
        d = int((counts - 1).clip(min=0).sum()) + int(extra_ids.size - np.unique(extra_ids).size)
        missing = 0 if shard else int((counts == 0).sum())
        extra = int(np.unique(extra_ids).size)
        dupes += max(0, d - ep.pad)
        drops += missing
        unknown += extra
        pad += ep.pad
        per_epoch.append({"epoch": ep.index, "delivered": int(ids.size), "duplicates": d,
                          "declared_padding": ep.pad, "missing": missing, "unknown": extra})  # fmt: skip
    bad = dupes + drops + unknown
    total = max(1, n * len(epochs))
    return Check(name, bad / total, 0.0,
                 detail={"epochs": per_epoch, "expected": n, "padding_declared": pad_declared})  # fmt: skip


def labels_match(epochs: list[Epoch], labels: list[int]) -> Check:
    table = np.asarray(labels, dtype=np.int64)
    bad = total = 0
    examples: list[int] = []
    for ep in epochs:
        ids, got = ep.order, ep.all_labels
        ok = (ids >= 0) & (ids < table.size)
        want = np.where(ok, table[np.clip(ids, 0, table.size - 1)], -1)
        wrong = np.nonzero(want != got)[0]
        bad += int(wrong.size)
        total += int(ids.size)
        examples += [int(ids[j]) for j in wrong[:5]]
    return Check("labels_match_files", bad / max(1, total), 0.0,
                 detail={"mismatched": bad, "checked": total, "examples": examples[:5]})  # fmt: skip


def _adjacent_share(seq: np.ndarray, position: np.ndarray) -> float:
    """The share of consecutive pairs of ``seq`` that sit next to each other (in that order)
    in the order ``position`` gives (position[id] = index there)."""
    if seq.size < 2:
        return 0.0
    p = position[seq]
    return float(np.mean(np.diff(p) == 1))


#: the share of neighbours a shuffled order may keep: 0.1, or on a small epoch six chance
#: neighbours (a shuffle of n keeps about one pair of neighbours: Poisson(1), P(>= 6) = 0.06%)
ORDER_SHARE_MAX = 0.1
ORDER_CHANCE_PAIRS = 6


def order_tolerance(n: int) -> float:
    return max(ORDER_SHARE_MAX, ORDER_CHANCE_PAIRS / max(1, n - 1))


def shuffle_checks(epochs: list[Epoch], stored: np.ndarray, shuffled: bool) -> list[Check]:
    """The order differs from the stored order, and between epochs: the share of
    consecutive deliveries that were neighbours there (1.0 for a sequential read, about 2/N
    shuffled)."""
    out: list[Check] = []
    n = int(stored.size)
    pos = np.empty(n, dtype=np.int64)
    pos[stored] = np.arange(n)
    if not shuffled:
        return out
    e0 = epochs[0].order
    e0 = e0[(e0 >= 0) & (e0 < n)]
    share = _adjacent_share(e0, pos)
    tol = order_tolerance(int(e0.size))
    out.append(Check("order_differs_from_storage", share, tol,
                     detail={"adjacent_share": share, "samples": int(e0.size)}))  # fmt: skip
    if len(epochs) > 1:
        e1 = epochs[1].order
        e1 = e1[(e1 >= 0) & (e1 < n)]
        pos0 = np.full(n, -10, dtype=np.int64)
        pos0[e0] = np.arange(e0.size)
        share01 = _adjacent_share(e1, pos0)
        same = float(np.mean(e0[: min(e0.size, e1.size)] == e1[: min(e0.size, e1.size)]))
        out.append(Check("order_differs_between_epochs", share01, tol,
                         detail={"adjacent_share": share01, "same_position_share": same}))  # fmt: skip
    return out


def same_seed(first: Epoch, again: list[np.ndarray]) -> Check:
    """A second loader with the same seed delivers epoch 0's first batches in the same order."""
    a = np.concatenate(again) if again else np.zeros(0, np.int64)
    b = first.order[: a.size]
    differ = int(np.sum(a != b)) if a.size == b.size else int(a.size)
    return Check("same_seed_same_order", differ / max(1, a.size), 0.0,
                 detail={"compared": int(a.size), "differing": differ})  # fmt: skip


def reference_decode(data: bytes) -> np.ndarray:
    """The reference: libjpeg-turbo through Pillow, RGB, H x W x 3 uint8 (a 16-bit image by
    its high byte, as TensorFlow and OpenCV decode it: :func:`rgb8`)."""
    import io

    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        return np.asarray(rgb8(im))


def pixel_check(loader: Loader, samples: list[tuple[int, bytes]]) -> list[Check]:
    """The framework's decode of each sample's bytes against the reference decode, before
    any augmentation (see the tolerances above)."""
    worst_mean = 0.0
    worst_bad = 0.0
    rows = []
    shape_mismatch = 0
    unreadable = []
    for sid, data in samples:
        try:
            ref = reference_decode(data)
        except Exception:  # noqa: BLE001 - a corrupt sample: counted elsewhere, named here
            unreadable.append(sid)
            continue
        got = np.asarray(loader.decode(data))
        if got.shape != ref.shape:
            shape_mismatch += 1
            rows.append({"id": sid, "shape": list(got.shape), "reference_shape": list(ref.shape)})
            continue
        diff = np.abs(got.astype(np.int16) - ref.astype(np.int16))
        mean = float(diff.mean())
        bad = float(np.mean(diff > PIXEL_BAD_LEVELS))
        worst_mean, worst_bad = max(worst_mean, mean), max(worst_bad, bad)
        rows.append({"id": sid, "mean_abs": mean, "max_abs": int(diff.max()),
                     f"share_over_{PIXEL_BAD_LEVELS}": bad})  # fmt: skip
    detail = {
        "reference": "libjpeg-turbo through Pillow (RGB)",
        "samples": rows,
        "shape_mismatches": shape_mismatch,
        # drawn for the check but not decodable by the reference: corrupt, so not compared
        "not_compared_corrupt": unreadable,
    }
    # no sample compared, or one of another shape: the check cannot pass (error infinite)
    failed = shape_mismatch > 0 or not rows
    return [
        Check("pixels_mean_abs_vs_reference", math.inf if failed else worst_mean,
              PIXEL_MEAN_TOL, detail=detail),
        Check(f"pixels_share_over_{PIXEL_BAD_LEVELS}_levels", math.inf if failed else worst_bad,
              PIXEL_BAD_SHARE_MAX),
    ]  # fmt: skip


def dataset_residency(targets: list[Any]) -> dict[str, Any]:
    """How much of ``targets`` (files, or ``(path, offset, length)`` ranges) is not in the
    page cache now (``mincore``: reads nothing), or why that is not known."""
    from suite.datasets.storage import resident_bytes

    try:
        resident, total = resident_bytes(targets)
    except OSError as exc:
        return {"unknown": f"mincore over the dataset's files failed: {exc}"}
    return {"bytes": total, "not_resident": total - resident}


def dataset_read_bytes(read_bytes: int, residency: dict[str, Any] | None) -> int:
    """An epoch's bytes of the dataset from storage: the process tree's bytes from storage,
    at most what the page cache allows. Cold (``resident_after``): the bytes of the files it
    read that are in the page cache after it (evicted before it, they came in with this
    epoch's reads). Warm (``not_resident_before``/``_after``): the bytes of those files not in
    the page cache before it or after it. The tree's alone where residency is not known."""
    if residency is not None and "resident_after" in residency:
        return int(min(read_bytes, residency["resident_after"]))
    if residency is not None and "not_resident_before" in residency:
        missing = max(residency["not_resident_before"], residency["not_resident_after"])
        return int(min(read_bytes, missing))
    return int(read_bytes)


def cache_check(
    state: str,
    read_bytes: int,
    expected_bytes: float,
    eviction: dict[str, Any] | None,
    residency: dict[str, Any] | None = None,
) -> Check:
    """Cold: the eviction was verified and the epoch took at least COLD_MIN_SHARE of its bytes
    from storage; warm: at most WARM_MAX_SHARE (error: the share read from storage).

    Warm, with ``residency`` (the dataset's bytes not in the page cache before the epoch and
    after it: ``not_resident_before``, ``not_resident_after``): the process tree's bytes from
    storage also count the modules and libraries of loader workers started fresh for the
    epoch (Grain's, PyTorch's without persistent workers), which the kernel had dropped on a
    loaded machine: 135 KB against a 136 KB dataset failed JAX's check with its dataset whole
    in the cache. The epoch cannot have read more of the dataset from storage than was not
    in the cache, so the error is the smaller of the tree's share and the dataset's share
    not resident (before, or after: pages dropped during the epoch and not read again).

    Cold, with ``residency`` (``resident_after``: the bytes of the files the epoch read that
    are in the page cache after it, all evicted before it): the same workers' reads made a
    2-rank JAX cold task read 5.6 times its shard "from storage"; the share counted is that
    of :func:`dataset_read_bytes`, what the tree read and the dataset's pages hold."""
    share = read_bytes / max(1.0, expected_bytes)
    if state == "cold":
        verified = bool(eviction and eviction.get("verified"))
        cold_detail: dict[str, Any] = {"share_from_storage": share, "eviction_verified": verified}
        counted = share
        if residency is not None and "resident_after" in residency:
            counted = dataset_read_bytes(read_bytes, residency) / max(1.0, expected_bytes)
            cold_detail.update(dataset_share_from_storage=counted,
                               counted="the smaller of the tree's bytes from storage and the "
                                       "dataset's bytes in the page cache after the epoch")  # fmt: skip
        # error: the share of the epoch's bytes that did not come from storage
        return Check("cold_read_from_storage", 1.0 - counted if verified else 1.0,
                     1.0 - COLD_MIN_SHARE, detail=cold_detail)  # fmt: skip
    detail: dict[str, Any] = {"share_from_storage": share}
    error = share
    if residency is not None and "not_resident_before" in residency:
        missing = max(residency["not_resident_before"], residency["not_resident_after"])
        dataset_share = missing / max(1.0, expected_bytes)
        error = dataset_read_bytes(read_bytes, residency) / max(1.0, expected_bytes)
        detail.update(dataset_not_resident_share=dataset_share,
                      counted="the smaller of the tree's share from storage and the "
                              "dataset's share not in the page cache (mincore)")  # fmt: skip
    elif residency is not None:
        detail["dataset_residency"] = residency.get("unknown")
    return Check("warm_read_from_cache", error, WARM_MAX_SHARE, detail=detail)


# -- feeding capacity ----------------------------------------------------------------------


def feeding_rates(root: Path | None = None) -> list[dict[str, Any]]:
    """Accelerator consumption rates (samples/s) from references/: the entries whose note
    starts ``feeding:`` (training throughput the suite measured, with its source)."""
    import tomllib

    from suite.provenance import SOURCE_ROOT

    folder = root or Path(SOURCE_ROOT) / "references"
    out = []
    for f in sorted(folder.glob("*.toml")) if folder.is_dir() else []:
        try:
            doc = tomllib.loads(f.read_text())
        except (OSError, ValueError):
            continue
        for ref in doc.get("reference", []):
            if ref.get("metric") == "throughput" and str(ref.get("note", "")).startswith(
                "feeding:"
            ):
                out.append({
                    "accelerator": ref.get("device", "?"),
                    "network": (ref.get("params") or {}).get("network", ref.get("benchmark")),
                    "dtype": ref.get("dtype"),
                    "batch": (ref.get("params") or {}).get("batch"),
                    "rate": float(ref["value"]),
                    "source": f"references/{f.name}: " + str(ref["note"])[len("feeding:"):].strip(),
                })  # fmt: skip
    return out


def feeding_capacity(rate: float, consumers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """How many accelerators consuming at each consumer's rate this pipeline keeps at least
    BUSY_SHARE busy (MLPerf Storage's rule): floor(rate / (BUSY_SHARE x consumer rate)), and
    the share of one accelerator it can feed."""
    return [
        {**c, "accelerators": int(math.floor(rate / (BUSY_SHARE * c["rate"]) + 1e-9)),
         "share_of_one": rate / c["rate"], "busy_share": BUSY_SHARE}
        for c in consumers if c.get("rate")
    ]  # fmt: skip
