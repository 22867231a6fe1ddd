"""The step-time model: compute per rank, the strategy's exchange, how much of it hides.

For a network trained with a strategy at ``p`` ranks, one step takes::

    step(p) = compute(per-rank batch) x stretch(p) + exposed(exchange(p)) + overhead

* **compute** — one rank alone, from the records (data_parallel at 1 rank, network ``train``):
  ``c0 + c1 x batch`` fitted over the batches measured (proportional to the batch where only one
  was). ``stretch`` is 1 on GPUs; on CPUs, ranks that ask for more threads than the node has
  cores share them (``ranks x threads / cores``), the one machine effect the model knows.
* **exchange** — the bytes each strategy moves per step
  (``suite.strategies.sent_bytes_per_step`` defines them; the gradient's size
  is the records' or the zoo graph's), as alpha-beta collectives (``collectives.py``) in buckets
  (DDP's 25 MiB, Horovod's 64 MiB fusion buffer), one after another.
* **exposed** — what the backward pass does not hide: with a multi-rank training record the
  hidden share is *measured* (``1 - (step - compute) / exchange`` at the records' rank counts);
  without one, a *timeline*: gradients become ready at an even rate over the backward pass (2/3
  of the compute, the usual 1:2 forward:backward FLOP ratio), each bucket is sent when it is
  ready and the link is free, and what is left after the backward pass is exposed.
* **overhead** — what a strategy's record at the fitted rank counts shows beyond compute and
  exposed exchange (compression arithmetic, hooks, contention), held constant in ``p``; 0 where
  there is no such record.

Every figure says where it came from; the band is the fit's residuals propagated (compute's
confidence interval, twice the collective fit's rms residual, the calibration's residuals),
which covers measurement noise, not the model's form: the checks against measured and
published results are what speak to that.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from suite import strategies as S
from suite.projection import collectives as C
from suite.projection.records import ComputePoint, Machine, TrainPoint

MiB = 1 << 20
#: bytes per bucket of the framework's own gradient exchange: DDP's bucket_cap_mb default (25),
#: Horovod's Tensor Fusion buffer default (64 MB, docs/tensor-fusion.rst); one message elsewhere
DEFAULT_BUCKET = {
    "pytorch": 25 * MiB,
    "horovod": 64 * MiB,
    "horovod-tensorflow": 64 * MiB,
}
BACKWARD_FRACTION = 2.0 / 3.0
#: strategies whose exchange runs inside the backward pass (DDP hooks, Horovod)
OVERLAPPED = ("allreduce", "fp16", "bf16", "powersgd", "adasum")
PARAMETER_SERVER = ("ps-sync", "ps-async", "ssp", "2bit", "1bit")
OVERLAP_MODES = ("auto", "timeline", "none", "full")


@dataclass
class Compute:
    """One rank's step time against its batch, with where it came from."""

    c0: float
    c1: float
    how: str
    rel_u: float
    threads: int | None
    cores: int | None
    device_kind: str
    fitted_from: list[str]
    residuals: list[float] = field(default_factory=list)

    def seconds(self, batch: float) -> float:
        return self.c0 + self.c1 * batch

    def describe(self) -> dict[str, Any]:
        return {
            "seconds_per_step": f"{self.c0:.4g} + {self.c1:.4g} x batch",
            "c0_s": self.c0, "c1_s_per_sample": self.c1, "how": self.how,
            "relative_uncertainty": self.rel_u, "threads_per_rank": self.threads,
            "cores": self.cores, "fitted_from": self.fitted_from,
            "residuals": self.residuals,
        }  # fmt: skip


def fit_compute(points: Sequence[ComputePoint]) -> Compute:
    """``seconds = c0 + c1 x batch`` (non-negative, relative least squares) over the distinct
    batches measured; proportional (``c0 = 0``) from a single batch."""
    from scipy.optimize import nnls

    by_batch: dict[float, list[ComputePoint]] = {}
    for p in points:
        by_batch.setdefault(p.batch, []).append(p)
    batches = sorted(by_batch)
    med = {b: float(np.median([p.seconds for p in by_batch[b]])) for b in batches}
    rel_ci = max((p.rel_ci for p in points), default=0.0)
    first = points[0].machine
    ids = [p.record for p in points]
    if len(batches) == 1:
        b = batches[0]
        return Compute(
            0.0, med[b] / b, f"one batch measured ({b:g}): step time taken proportional to the "
            "batch", rel_ci, first.threads, first.cores, first.device_kind, ids, [0.0],
        )  # fmt: skip
    a = np.array([[1.0 / med[b], b / med[b]] for b in batches])
    coef, _ = nnls(a, np.ones(len(batches)))
    c0, c1 = float(coef[0]), float(coef[1])
    res = [(c0 + c1 * b - med[b]) / med[b] for b in batches]
    rms = float(np.sqrt(np.mean(np.square(res))))
    return Compute(
        c0, c1, f"c0 + c1 x batch fitted over batches {', '.join(f'{b:g}' for b in batches)}",
        max(rel_ci, rms), first.threads, first.cores, first.device_kind, ids, res,
    )  # fmt: skip


@dataclass(frozen=True)
class Placement:
    """Where the target ranks run and how compute shares a node."""

    topology: C.Topology
    algorithm: str
    bucket: float | None  # bytes; None = the whole gradient in one message
    threads: int | None  # per rank at the target
    stretch: float  # compute multiplier (CPU cores shared by more threads than they have)
    oversubscribed: bool
    #: explicit messages (bytes, in the order the backward pass produces them) instead of
    #: buckets: one allreduce per layer, as Goyal et al. ran theirs
    tensors: tuple[float, ...] | None = None


def place(
    ranks: int,
    ranks_per_node: int,
    intra: C.Link,
    inter: C.Link | None,
    algorithm: str,
    bucket: float | None,
    compute: Compute,
    tensors: Sequence[float] | None = None,
) -> Placement:
    topo = C.Topology(ranks, ranks_per_node, intra, inter)
    local = topo.local
    stretch, threads, over = 1.0, compute.threads, False
    if compute.device_kind == "cpu" and compute.cores:
        # the suite's launchers give each of a node's ranks cores // ranks threads (at least 1);
        # one rank alone keeps what it was measured with
        threads = max(1, compute.cores // local) if local > 1 else (compute.threads or 1)
        if compute.threads and threads != compute.threads:
            stretch *= compute.threads / threads  # perfect thread scaling: stated in the record
        busy = local * threads
        if busy > compute.cores:
            over = True
            stretch *= busy / compute.cores
    return Placement(
        topo, algorithm, bucket, threads, stretch, over, tuple(tensors) if tensors else None
    )


@dataclass
class Breakdown:
    """One step at one rank count: its parts in seconds."""

    compute: float
    exchange: float  # the strategy's communication, were nothing hidden
    exposed: float  # the part of it that the step waits for
    overhead: float
    total: float
    note: str = ""

    @property
    def hidden_share(self) -> float | None:
        return None if self.exchange <= 0 else 1.0 - self.exposed / self.exchange


@dataclass
class Overlap:
    """How much of an overlapped exchange hides behind the backward pass."""

    mode: str  # measured | timeline | none | full | fixed
    hidden: float | None = None  # the share, for measured and fixed
    fitted_from: list[str] = field(default_factory=list)
    raw: list[float] = field(default_factory=list)  # the measured shares before clipping

    def exposed(
        self, bucket_times: Sequence[float], bucket_bytes: Sequence[float], backward: float
    ) -> float:
        total = float(sum(bucket_times))
        if total <= 0:
            return 0.0
        window = max(0.0, total - backward)  # no mode hides more than the backward pass lasts
        if self.mode == "none":
            return total
        if self.mode == "full":
            return window
        if self.mode in ("measured", "fixed"):
            return max((1.0 - float(self.hidden or 0.0)) * total, window)
        return timeline_exposed(bucket_times, bucket_bytes, backward)

    def describe(self) -> str:
        if self.mode == "timeline":
            return (
                "timeline: gradients ready at an even rate over the backward pass (2/3 of the "
                "compute), buckets sent in order when ready and the link is free"
            )
        if self.mode == "measured":
            return f"measured: {100 * (self.hidden or 0):.0f}% of the exchange hidden"
        if self.mode == "fixed":
            return f"given: {100 * (self.hidden or 0):.0f}% of the exchange hidden"
        return {"none": "none: the whole exchange after the backward pass",
                "full": "full: hidden up to the length of the backward pass"}[self.mode]  # fmt: skip


def timeline_exposed(
    bucket_times: Sequence[float], bucket_bytes: Sequence[float], backward: float
) -> float:
    """The exchange left after the backward pass when bucket ``k`` is ready once the backward
    pass has produced its bytes (an even rate over ``backward`` seconds) and buckets go one at a
    time, in order."""
    total = float(sum(bucket_bytes)) or 1.0
    done, end = 0.0, 0.0
    for t, b in zip(bucket_times, bucket_bytes, strict=True):
        done += b
        ready = backward * done / total
        end = max(end, ready) + t
    return max(0.0, end - backward)


@dataclass
class Exchange:
    """A strategy's messages in one step: each allreduce's bytes (buckets) or a named model."""

    messages: list[float]
    kind: str  # allreduce | average | parameter-server | pipeline
    model: str  # how the bytes were counted
    per_step_factor: float = 1.0  # local SGD: 1/period


def gradient_exchange(
    strategy: str,
    options: dict[str, Any],
    grad_bytes: float,
    bucket: float | None,
    ratio: float | None,
    tensors: Sequence[float] | None = None,
) -> Exchange:
    """The messages of one step of ``strategy`` for a gradient of ``grad_bytes`` (fp32), in
    buckets (or one message per tensor where ``tensors`` lists their bytes).

    The bytes are those of the strategy's own definition,
    ``strategies.sent_bytes_per_step``: what a rank sends per step divided by the ring factor
    is the message an allreduce carries; a parameter server's push is the message itself.
    PowerSGD's factors depend on the tensors' shapes, which only the worker saw: its record's
    compression ratio stands in."""
    st = S.get(strategy)
    opts = S.validate_options(st, options)
    elems = [int(b // S.ITEMSIZE) for b in tensors] if tensors else [int(grad_bytes // S.ITEMSIZE)]
    wire = S.sent_bytes_per_step(st, opts, [(n,) for n in elems], 2)
    full = float(sum(elems) * S.ITEMSIZE)
    cap = bucket if bucket else full
    parts = [float(b) for b in tensors] if tensors else C.buckets(full, cap)
    ring2 = S.ring_factor(2)
    if strategy in ("allreduce", "adasum", "fp16", "bf16"):
        scale = wire["bytes"] / ring2 / full  # 1, or 1/2 for a 16-bit cast
        return Exchange([p * scale for p in parts], "allreduce", wire["model"])
    if strategy == "powersgd":
        r = ratio or 1.0
        # the hook allreduces P, then Q, then the tensors it leaves uncompressed: three calls
        # per bucket sharing its compressed bytes
        msgs = [p / r / 3 for p in parts for _ in range(3)]
        return Exchange(msgs, "allreduce", f"{wire['model']}; compression {r:.3g}x (the "
                        "record's ratio): three allreduces per bucket")  # fmt: skip
    if strategy == "local-sgd":
        # the whole model averaged once every `period` steps: bytes / uncompressed = 1/period
        return Exchange(parts, "average", wire["model"], wire["bytes"] / wire["uncompressed"])
    if strategy in PARAMETER_SERVER:
        return Exchange([float(wire["bytes"])], "parameter-server", wire["model"])
    raise ValueError(f"no exchange model for strategy {strategy!r}")


def ps_time(total_bytes: float, place_: Placement, servers: int) -> float:
    """Push then pull through the busiest link: a worker's (its own bytes) or a server's
    (``ranks / servers`` workers' share each)."""
    topo = place_.topology
    link = topo.inter if topo.nodes > 1 and topo.inter is not None else topo.intra
    load = max(1.0, topo.ranks / max(1, servers))
    return 2.0 * (link.latency_s + total_bytes * load / link.bandwidth)


def pipeline_time(
    compute_global: float, cut_bytes: float, microbatches: int, place_: Placement
) -> float:
    """GPipe: ``(m + k - 1)`` slots, each a stage's share of one micro-batch's forward and
    backward and one send of the activations and one of their gradients across a cut."""
    topo = place_.topology
    k, m = topo.ranks, max(1, microbatches)
    link = topo.inter if topo.nodes > 1 and topo.inter is not None else topo.intra
    send = link.latency_s + cut_bytes / m / link.bandwidth
    return (m + k - 1) * (compute_global / (k * m) + 2.0 * send)


def step(
    strategy: str,
    options: dict[str, Any],
    compute: Compute,
    per_rank_batch: float,
    global_batch: float,
    grad_bytes: float,
    place_: Placement,
    overlap: Overlap,
    overhead: float = 0.0,
    ratio: float | None = None,
    servers: int = 1,
    cut_bytes: float | None = None,
) -> Breakdown:
    """One step of ``strategy`` at ``place_``: compute, exchange, exposed part, total."""
    topo = place_.topology
    if strategy == "pipeline":
        base = compute.seconds(global_batch) * place_.stretch
        if topo.ranks < 2:
            return Breakdown(base, 0.0, 0.0, 0.0, base)
        mb = int(options.get("microbatches", 4))
        t = pipeline_time(base, cut_bytes or 0.0, mb, place_)
        bubble = (mb + topo.ranks - 1) * base / (topo.ranks * mb)
        return Breakdown(bubble, t - bubble, t - bubble, overhead, t + overhead,
                         f"GPipe, {mb} micro-batches, {topo.ranks} stages")  # fmt: skip
    comp = compute.seconds(per_rank_batch) * place_.stretch
    if topo.ranks < 2:
        return Breakdown(comp, 0.0, 0.0, 0.0, comp)
    ex = gradient_exchange(strategy, options, grad_bytes, place_.bucket, ratio, place_.tensors)
    if ex.kind == "parameter-server":
        t = ps_time(ex.messages[0], place_, servers)
        if strategy in ("ps-async", "ssp"):
            # nobody waits for the others: a worker's own round trip, unless the servers are
            # the bottleneck for everyone
            serve = 2.0 * ex.messages[0] * topo.ranks / max(1, servers) / _link(place_).bandwidth
            total = max(comp + t + overhead, serve)
            return Breakdown(comp, t, total - comp - overhead, overhead, total, ex.model)
        return Breakdown(comp, t, t, overhead, comp + t + overhead, ex.model)
    times = [C.allreduce_time(m, topo, place_.algorithm) for m in ex.messages]
    exchange = float(sum(times)) * ex.per_step_factor
    if ex.kind == "average" or strategy not in OVERLAPPED:
        exposed = exchange
    else:
        exposed = overlap.exposed(times, ex.messages, BACKWARD_FRACTION * comp)
    return Breakdown(comp, exchange, exposed, overhead, comp + exposed + overhead, ex.model)


def _link(place_: Placement) -> C.Link:
    topo = place_.topology
    return topo.inter if topo.nodes > 1 and topo.inter is not None else topo.intra


# -- calibration against the records at the fitted rank counts ---------------------------------


def calibrate_overlap(
    rows: Sequence[tuple[TrainPoint, Breakdown]],
) -> tuple[Overlap, list[float]]:
    """The hidden share ``h`` that best explains ``step - compute = (1 - h) exchange + o`` over
    the records (a grid over [0, 1], ``o`` their mean rest); with one record ``o`` is 0 unless
    ``h`` had to be clipped. Returns the overlap and the per-record raw shares."""
    raw = []
    for tp, b in rows:
        raw.append(1.0 - (tp.step_s - b.compute) / b.exchange if b.exchange > 0 else 1.0)
    ys = np.array([tp.step_s - b.compute for tp, b in rows])
    xs = np.array([b.exchange for _, b in rows])
    best = (math.inf, 0.0)
    for h in np.linspace(0.0, 1.0, 101):
        rest = ys - (1.0 - h) * xs
        o = float(np.mean(rest)) if len(rows) > 1 else 0.0
        if len(rows) == 1:
            # one record: h explains it where it can; the clipped rest is the overhead
            sse = abs(float(rest[0]))
        else:
            sse = float(np.sum((rest - o) ** 2))
        if sse < best[0] - 1e-15:
            best = (sse, float(h))
    h = best[1]
    return Overlap("measured", h, [tp.record for tp, _ in rows], raw), raw


def fitted_overhead(rows: Sequence[tuple[TrainPoint, Breakdown]]) -> float:
    """The per-step time the model leaves unexplained at the fitted records (their mean)."""
    return float(np.mean([tp.step_s - b.total for tp, b in rows])) if rows else 0.0


def machine_label(m: Machine) -> str:
    return f"{m.framework} {m.backend} on {m.device_kind} ({m.device_name})"
