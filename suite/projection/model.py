"""The step-time model: compute per rank, the strategy's messages, how much of them hides, and
the framework's own work per step.

For a network trained with a strategy at ``p`` ranks, one step takes::

    step(p) = compute(per-rank batch) x stretch(p) + exposed(messages(p)) + copies + overhead

* **compute** — one rank alone, from the records (data_parallel at 1 rank, network ``train``):
  ``c0 + c1 x batch`` fitted over the batches measured (proportional to the batch where only one
  was). ``stretch`` is 1 on GPUs; on CPUs, ranks that ask for more threads than the node has
  cores share them (``ranks x threads / cores``); where the runs measured the same step without
  its exchange at several ranks (``no_sync``), the slowdown of sharing the node is measured.
* **messages** — the bytes each strategy moves per step
  (``suite.strategies.sent_bytes_per_step`` defines them; the gradient's size is the records' or
  the zoo graph's), one collective call per message: DDP's buckets (25 MiB), Horovod's fusion
  *by cycle* (every ``HOROVOD_CYCLE_TIME`` its background thread fuses what became ready since
  the last cycle, up to the fusion threshold, and negotiates it among the ranks), or one
  message per tensor. Every call pays the per-call launch and the algorithm's latency steps:
  small buckets cost (``collectives.py``).
* **exposed** — what the backward pass does not hide: measured where a multi-rank record of the
  network allows (the exposure factor ``e = (step - compute) / exchange`` at the fitted rank
  counts: ``1 - e`` hidden where ``e <= 1``; ``e > 1`` means nothing hid and the exchange
  inside the step cost ``e`` times its standalone time, communication and compute slowing each
  other), else a *timeline*: gradients become ready at an even rate over the backward pass (2/3
  of the compute), each message is sent when it is ready and the link is free.
* **stragglers** — a synchronous step waits for the slowest of its ``p`` ranks: with one rank's
  step time spread ``sigma`` (relative, from the one-rank records' own samples), the expected
  slowest of ``p`` is ``1 + sigma x E[max of p standard normals]`` times the median (extreme-value
  statistics; ``~ sqrt(2 ln p)`` for large ``p``), :func:`expected_max_normal`.
* **interference** — compute slowed while the exchange runs beside it (NCCL's kernels hold SMs
  and move the link's bytes through GPU memory): the backward pass lasts ``f x`` the time the
  exchange runs beside it longer, where ``f`` is given (a published setup's SMs and memory
  traffic) or measured (the exposure factor ``e > 1`` of a multi-rank record).
* **copies** — the framework's own work per step: DDP copies each bucket's gradients in and
  the averaged ones out, Horovod into and out of its fusion buffer (4 x the gradient's bytes
  of memory traffic at the measured memory bandwidth); none at one rank (the baseline runs
  without either).
* **overhead** — what a strategy's own records at the fitted rank counts show beyond all of the
  above (a compression hook's arithmetic, contention), held constant in ``p``, never negative.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from suite import strategies as S
from suite.projection import collectives as C
from suite.projection.records import ComputePoint

MiB = 1 << 20
#: bytes per bucket of the framework's own gradient exchange: DDP's bucket_cap_mb default (25,
#: torch/nn/parallel/distributed.py), Horovod's fusion threshold (128 MB since 0.21, 64 MB
#: before: docs/tensor-fusion.rst, horovod#2468); one message elsewhere (JAX on CPUs:
#: :data:`XLA_CPU`)
DEFAULT_BUCKET = {
    "pytorch": 25 * MiB,
    "horovod": 128 * MiB,
    "horovod-tensorflow": 128 * MiB,
}
#: XLA on CPUs (JAX over gloo): the step's pmeans combined into one all-reduce of every tensor
#: (XLA's AllReduceCombiner), which starts once the last gradient is made and which the runtime
#: sends as one gloo call per tensor (``AllReduceThunk::Execute``,
#: xla/backends/cpu/runtime/all_reduce_thunk.cc); the data_parallel benchmark's bucket ravels
#: them into flat buffers first (suite/adapters/jax/distributed.py)
XLA_CPU = ("jax",)
#: Horovod's cycle (HOROVOD_CYCLE_TIME): 1 ms since 0.21 (horovod#2468), 5 ms before
HOROVOD_CYCLE_S = 1e-3
#: how Horovod's ranks agree each cycle on what to allreduce (:class:`Fusion`)
COORDINATION = ("collective", "point-to-point", "point-to-point per tensor")
CYCLE_FUSION = ("horovod", "horovod-tensorflow")
BACKWARD_FRACTION = 2.0 / 3.0
#: strategies whose exchange runs inside the backward pass (DDP hooks, Horovod)
OVERLAPPED = ("allreduce", "fp16", "bf16", "powersgd", "adasum")
PARAMETER_SERVER = ("ps-sync", "ps-async", "ssp", "2bit", "1bit")
OVERLAP_MODES = ("auto", "timeline", "none", "full")
#: bytes of memory traffic per gradient byte of the framework's copies: into the bucket (read +
#: write) and the averaged values out (read + write); PyTorch's DDP documentation names the
#: copy ("gradient_as_bucket_view ... avoid the overhead of copying between gradients and
#: allreduce communication buckets"), Horovod's docs/tensor-fusion.rst steps 3 and 5
COPY_TRAFFIC = 4.0


@functools.lru_cache(maxsize=4096)
def expected_max_normal(n: int) -> float:
    """E[max of ``n`` independent standard normals] (0 for one): how many standard deviations
    past the median the slowest of ``n`` ranks is expected to be. Integrated numerically from
    the maximum's density ``n phi(x) Phi(x)^(n-1)`` (order statistics; ~ sqrt(2 ln n) as n
    grows: 1.03 at 4, 1.42 at 8, 2.51 at 100, 3.04 at 512)."""
    if n <= 1:
        return 0.0
    return _max_normal_moments(n)[0]


@functools.lru_cache(maxsize=4096)
def sd_max_normal(n: int) -> float:
    """The standard deviation of the maximum of ``n`` independent standard normals (1 for one):
    how much the slowest of ``n`` draws varies from one draw of ``n`` to the next (0.61 at 8,
    0.39 at 256)."""
    if n <= 1:
        return 1.0
    return _max_normal_moments(n)[1]


def _max_normal_moments(n: int) -> tuple[float, float]:
    """Mean and standard deviation of the maximum of ``n`` standard normals, integrated from its
    density ``n phi(x) Phi(x)^(n-1)``."""
    from scipy.integrate import trapezoid
    from scipy.special import log_ndtr

    x = np.linspace(-8.0, 9.0, 6801)
    logpdf = -0.5 * x * x - 0.5 * math.log(2 * math.pi)
    dens = n * np.exp(logpdf + (n - 1) * log_ndtr(x))
    mass = trapezoid(dens, x)
    mean = float(trapezoid(x * dens, x) / mass)
    var = float(trapezoid((x - mean) ** 2 * dens, x) / mass)
    return mean, math.sqrt(max(0.0, var))


@dataclass
class Compute:
    """One rank's step time against its batch, with where it came from; ``spread`` is one
    rank's step-to-step spread (sigma over the median) from ``spread_n`` samples (0: none
    known, no stragglers modelled)."""

    c0: float
    c1: float
    how: str
    rel_u: float
    threads: int | None
    cores: int | None
    device_kind: str
    fitted_from: list[str]
    residuals: list[float] = field(default_factory=list)
    spread: float = 0.0
    spread_n: int = 0
    spread_from: str = ""

    def seconds(self, batch: float) -> float:
        return self.c0 + self.c1 * batch

    def scaled(self, factor: float) -> Compute:
        """The same compute ``factor`` times slower (a band's end)."""
        return dataclasses.replace(self, c0=self.c0 * factor, c1=self.c1 * factor)

    def with_spread(self, spread: float, source: str | None = None) -> Compute:
        """The same compute with another step-time spread (the band's ends, a given one)."""
        return dataclasses.replace(
            self,
            spread=max(0.0, spread),
            spread_from=self.spread_from if source is None else source,
        )

    def straggle(self, ranks: int) -> float:
        """The factor by which the slowest of ``ranks`` ranks' compute exceeds the median."""
        return 1.0 + self.spread * expected_max_normal(ranks)

    def describe(self) -> dict[str, Any]:
        return {
            "seconds_per_step": f"{self.c0:.4g} + {self.c1:.4g} x batch",
            "c0_s": self.c0, "c1_s_per_sample": self.c1, "how": self.how,
            "relative_uncertainty": self.rel_u, "threads_per_rank": self.threads,
            "cores": self.cores, "fitted_from": self.fitted_from,
            "residuals": self.residuals, "step_spread": self.spread,
            "step_spread_samples": self.spread_n, "step_spread_from": self.spread_from,
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
    # each record's confidence interval, and records of the same batch disagreeing (half their
    # range over the median): two one-rank runs of one batch far apart say the compute is unknown
    rel_ci = max((p.rel_ci for p in points), default=0.0)
    for b in batches:
        secs = [p.seconds for p in by_batch[b]]
        rel_ci = max(rel_ci, (max(secs) - min(secs)) / 2.0 / med[b])
    first = points[0].machine
    ids = [p.record for p in points]
    spread, spread_n, spread_from = _spread(points)
    if len(batches) == 1:
        b = batches[0]
        return Compute(
            0.0, med[b] / b, f"one batch measured ({b:g}): step time taken proportional to the "
            "batch", rel_ci, first.threads, first.cores, first.device_kind, ids, [0.0],
            spread, spread_n, spread_from,
        )  # fmt: skip
    a = np.array([[1.0 / med[b], b / med[b]] for b in batches])
    coef, _ = nnls(a, np.ones(len(batches)))
    c0, c1 = float(coef[0]), float(coef[1])
    res = [(c0 + c1 * b - med[b]) / med[b] for b in batches]
    rms = float(np.sqrt(np.mean(np.square(res))))
    return Compute(
        c0, c1, f"c0 + c1 x batch fitted over batches {', '.join(f'{b:g}' for b in batches)}",
        max(rel_ci, rms), first.threads, first.cores, first.device_kind, ids, res,
        spread, spread_n, spread_from,
    )  # fmt: skip


def _spread(points: Sequence[ComputePoint]) -> tuple[float, int, str]:
    """One rank's step-to-step spread (sigma over the median) from the one-rank records' own
    samples: the median over the records of each one's interquartile range / 1.349 (sigma of a
    normal distribution) over its median; the samples behind it; where it came from."""
    known = [p for p in points if p.spread is not None and p.samples > 1]
    if not known:
        return 0.0, 0, "no one-rank record holds its step-time samples' spread: no stragglers"
    value = float(np.median([p.spread for p in known]))
    n = int(min(p.samples for p in known))
    return (
        value,
        n,
        (
            f"the one-rank records' step times ({', '.join(p.record for p in known)}): interquartile "
            f"range / 1.349 over the median, {100 * value:.2g}% (at least {n} samples each)"
        ),
    )


@dataclass(frozen=True)
class Fusion:
    """How gradients become messages: ``buckets`` of at most ``bucket`` bytes in the order the
    backward pass produces them (DDP; one message where ``bucket`` is None), one message per
    tensor (``tensors``), or Horovod's ``cycle``: every ``cycle_s`` what is ready, fused up to
    ``bucket`` bytes; ``sleep_after`` is Horovod before 0.13, whose thread slept a whole cycle
    after each round of allreduces (later ones sleep what is left of the cycle).

    Each cycle the ranks agree on what is ready (:data:`COORDINATION`): ``collective`` (Horovod
    from mid-2018, #276, and its response cache from 0.16: one small collective a cycle) or the
    coordinator's point-to-point messages of Horovod before (rank 0 receives every other rank's
    requests and a "done", then sends each fused response and a "done" to every rank, one
    message at a time, ``message_s`` each; before 0.12 one request message per tensor, of which
    the gradient has ``tensor_count``). ``async_ops``: the thread enqueues each allreduce on a
    GPU stream and goes on (Horovod's NCCL path, a finalizer thread waits for it), instead of
    running it itself (MPI or gloo on the CPU)."""

    mode: str = "buckets"  # buckets | tensors | cycle
    bucket: float | None = None
    cycle_s: float = HOROVOD_CYCLE_S
    sleep_after: bool = False
    tensors: tuple[float, ...] | None = None
    #: buckets: the gradient's tensors (bytes, backward order) where the zoo graph gives them:
    #: DDP's buckets are made of whole tensors, its first one 1 MiB (``C.ddp_buckets``)
    layers: tuple[float, ...] | None = None
    coordination: str = "collective"
    message_s: float = 0.0
    tensor_count: float = 0.0
    async_ops: bool = False
    #: cycle: the gradient's tensors (bytes, backward order) where known: a tensor is ready once
    #: the backward pass has produced all of it, and a cycle fuses whole tensors (in order, up
    #: to ``bucket``; a larger one goes alone), so no cycle sends more messages than tensors
    granules: tuple[float, ...] | None = None
    #: when each tensor (of ``granules``, or ``tensors``: backward order) is ready, as a share
    #: of the backward pass (its layers' work done so far); None: at an even rate of bytes
    ready_at: tuple[float, ...] | None = None
    #: how the messages were made, where a rule of its own made them (JAX's on CPUs)
    said: str = ""

    def negotiate(self, ranks: int, latency_s: float, tensors: float, messages: int) -> float:
        """Seconds the coordinator spends agreeing on one cycle's ``messages`` fused messages
        of ``tensors`` tensors among ``ranks`` ranks."""
        if ranks < 2:
            return 0.0
        if self.coordination == "collective":
            return 2.0 * math.ceil(math.log2(ranks)) * latency_s
        requests = (
            tensors if self.coordination == "point-to-point per tensor" else float(tensors > 0)
        )
        # requests and a done received from each other rank, each response and a done sent
        return self.message_s * (ranks - 1) * (requests + 1.0 + messages + 1.0)

    def describe(self) -> str:
        if self.mode == "cycle":
            return (f"Horovod fusion by cycle: every {self.cycle_s * 1e3:g} ms what is ready, up "
                    f"to {(self.bucket or 0) / MiB:.4g} MiB a message")  # fmt: skip
        if self.said:
            return self.said
        if self.mode == "tensors":
            return "one message per tensor, in the order the backward pass produces them"
        if not self.bucket:
            return "one message"
        if self.layers:
            return (f"DDP's buckets of whole tensors up to {self.bucket / MiB:.4g} MiB (the first "
                    "1 MiB)")  # fmt: skip
        return f"buckets of {self.bucket / MiB:.4g} MiB"


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
    fusion: Fusion = Fusion()
    #: bytes/s of memory the framework's copies run at (None: not measured, copies omitted)
    memory_bandwidth: float | None = None
    copies: bool = False  # the framework copies gradients into buckets (DDP, Horovod)
    #: compute's slowdown while the exchange runs beside it (0: none modelled; a measured
    #: exposure factor holds it where records at several ranks were fitted)
    interference: float = 0.0


def thread_floor(compute: Compute, place_: Placement) -> float:
    """The least a rank's compute can be, as a share of what :func:`place`'s stretch gives it,
    where the ranks run fewer threads than the one-rank record (the stretch assumes perfect
    thread scaling; at this floor the extra threads gained nothing); 1 elsewhere."""
    if compute.threads and place_.threads and place_.threads < compute.threads:
        return place_.threads / compute.threads
    return 1.0


def place(
    ranks: int,
    ranks_per_node: int,
    intra: C.Link,
    inter: C.Link | None,
    algorithm: str,
    bucket: float | None,
    compute: Compute,
    tensors: Sequence[float] | None = None,
    *,
    launch_s: float = 0.0,
    nccl_tree: bool = True,
    fusion: Fusion | None = None,
    memory_bandwidth: float | None = None,
    copies: bool = False,
    interference: float = 0.0,
) -> Placement:
    topo = C.Topology(ranks, ranks_per_node, intra, inter, launch_s, nccl_tree)
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
    if fusion is None:
        fusion = (
            Fusion("tensors", bucket, tensors=tuple(tensors))
            if tensors
            else Fusion("buckets", bucket)
        )
    return Placement(
        topo, algorithm, bucket, threads, stretch, over, tuple(tensors) if tensors else None,
        fusion, memory_bandwidth, copies, interference,
    )  # fmt: skip


@dataclass
class Breakdown:
    """One step at one rank count: its parts in seconds."""

    compute: float
    exchange: float  # the strategy's communication, were nothing hidden
    exposed: float  # the part of it that the step waits for
    overhead: float
    total: float
    note: str = ""
    copies: float = 0.0  # the framework's own copies (DDP buckets, Horovod's fusion buffer)
    messages: int = 0  # collective calls per step
    latency: float = 0.0  # of the exchange: what its calls cost whatever their size
    #: of compute: what waiting for the slowest rank adds, and compute slowed by the exchange
    #: running beside it
    straggle: float = 0.0
    interfered: float = 0.0

    @property
    def hidden_share(self) -> float | None:
        if self.exchange <= 0:
            return None
        return max(0.0, 1.0 - self.exposed / self.exchange)

    def parts(self) -> dict[str, float]:
        """The step's terms by name (what dominates is the largest)."""
        return {"compute": self.compute, "exchange": self.exposed, "copies": self.copies,
                "overhead": self.overhead}  # fmt: skip


@dataclass
class Overlap:
    """How much of an overlapped exchange hides behind the backward pass."""

    mode: str  # measured | timeline | none | full | fixed
    hidden: float | None = None  # the share, for measured (exposure <= 1) and fixed
    fitted_from: list[str] = field(default_factory=list)
    raw: list[float] = field(default_factory=list)  # the measured exposure factors
    #: measured: the exchange inside the step costs this many times its standalone time
    #: (> 1: nothing hid, and communication and compute slowed each other)
    exposure: float | None = None
    why: str = ""  # where the mode was chosen by a rule rather than given or measured

    def exposed(
        self,
        bucket_times: Sequence[float],
        bucket_bytes: Sequence[float],
        backward: float,
        ready: Sequence[float] | None = None,
    ) -> float:
        total = float(sum(bucket_times))
        if total <= 0:
            return 0.0
        window = max(0.0, total - backward)  # no mode hides more than the backward pass lasts
        if self.mode == "none":
            return total
        if self.mode == "full":
            return window
        if self.mode == "measured" and self.exposure is not None and self.exposure > 1.0:
            return self.exposure * total
        if self.mode in ("measured", "fixed"):
            return max((1.0 - float(self.hidden or 0.0)) * total, window)
        return timeline_exposed(bucket_times, bucket_bytes, backward, ready)

    def describe(self) -> str:
        if self.mode == "timeline":
            return (
                "timeline: gradients ready at an even rate over the backward pass (2/3 of the "
                "compute), messages sent in order when ready and the link is free"
            )
        if self.mode == "measured":
            if self.exposure is not None and self.exposure > 1.0:
                return (f"measured: nothing hidden; the exchange inside the step cost "
                        f"{self.exposure:.2f}x its standalone time (compute and communication "
                        "slowed each other)")  # fmt: skip
            return f"measured: {100 * (self.hidden or 0):.0f}% of the exchange hidden"
        if self.mode == "fixed":
            return f"given: {100 * (self.hidden or 0):.0f}% of the exchange hidden"
        text = {"none": "none: the whole exchange after the backward pass",
                "full": "full: hidden up to the length of the backward pass"}[self.mode]  # fmt: skip
        return f"{text} ({self.why})" if self.why else text


def timeline_exposed(
    bucket_times: Sequence[float],
    bucket_bytes: Sequence[float],
    backward: float,
    ready: Sequence[float] | None = None,
) -> float:
    """The exchange left after the backward pass when message ``k`` is ready once the backward
    pass has produced its bytes (an even rate over ``backward`` seconds; or at ``ready[k]``)
    and messages go one at a time, in order."""
    total = float(sum(bucket_bytes)) or 1.0
    done, end = 0.0, 0.0
    for k, (t, b) in enumerate(zip(bucket_times, bucket_bytes, strict=True)):
        done += b
        when = ready[k] if ready is not None else backward * done / total
        end = max(end, when) + t
    return max(0.0, end - backward)


def cycle_exchange(
    total: float,
    backward: float,
    fusion: Fusion,
    call: Any,
    negotiate: Any,
) -> tuple[list[float], list[float], list[float]]:
    """Horovod's fusion by cycle: its background thread wakes every ``fusion.cycle_s``, fuses
    the bytes that became ready since (an even rate over ``backward``) into messages of at
    most ``fusion.bucket`` bytes, negotiates them among the ranks (``negotiate(tensors,
    messages)`` seconds: the cycle's share of the gradient's tensors, its messages) and
    allreduces them (``call(bytes)`` seconds each: run by the thread itself, or enqueued on a
    stream where ``fusion.async_ops``), then sleeps until its next cycle (a whole cycle after its
    work where ``fusion.sleep_after``). Returns each message's time, bytes and the moment it
    may start (once negotiated; the link takes them one at a time)."""
    times: list[float] = []
    sizes: list[float] = []
    ready: list[float] = []
    if total <= 0:
        return times, sizes, ready
    cycle = max(fusion.cycle_s, 1e-6)
    cap = fusion.bucket or total
    backward = max(backward, 0.0)
    grains: list[float] | None = None
    if fusion.granules and sum(fusion.granules) > 0:
        k = total / float(sum(fusion.granules))  # a 16-bit cast scales every tensor
        grains = [g * k for g in fusion.granules]
        ends = np.cumsum(grains)
        # a tensor is ready once the backward pass has produced it: by its layers' work where
        # known, else once an even rate of bytes has reached its end
        due = (np.maximum.accumulate(np.asarray(fusion.ready_at, float)) * total
               if fusion.ready_at is not None else ends)  # fmt: skip
    done = 0  # tensors sent (granules)
    sent, wake = 0.0, cycle
    while sent < total * (1 - 1e-12):
        continuous = total if backward <= 0 else total * min(1.0, wake / backward)
        if grains is None:
            produced = continuous
            chunks = C.buckets(produced - sent, cap) if produced - sent > total * 1e-12 else []
            tensors = fusion.tensor_count * (produced - sent) / total
        else:
            ready_to = int(np.searchsorted(due, continuous * (1 + 1e-12), side="right"))
            chunks = fuse(grains[done:ready_to], cap)
            tensors = float(ready_to - done)
            produced = float(ends[ready_to - 1]) if ready_to > 0 else 0.0
            done = max(done, ready_to)
        if chunks:
            coord = float(negotiate(tensors, len(chunks)))
            busy = 0.0
            for chunk in chunks:
                t = call(chunk)
                times.append(t)
                sizes.append(chunk)
                ready.append(wake + coord)
                busy += t
            work = coord + (0.0 if fusion.async_ops else busy)
            sent = produced
        else:
            work = float(negotiate(0.0, 0))
        wake = wake + work + cycle if fusion.sleep_after else wake + max(cycle, work)
    return times, sizes, ready


def fuse(tensors: Sequence[float], cap: float) -> list[float]:
    """Tensors (bytes, in order) fused into messages as Horovod does: consecutive tensors while
    the message stays within ``cap`` bytes; one larger than ``cap`` goes alone."""
    out: list[float] = []
    cur = 0.0
    for t in tensors:
        if cur > 0 and cur + t > cap:
            out.append(cur)
            cur = 0.0
        cur += t
    if cur > 0:
        out.append(cur)
    return out


@dataclass
class Exchange:
    """A strategy's messages in one step: each allreduce's bytes (buckets) or a named model."""

    messages: list[float]
    kind: str  # allreduce | average | parameter-server | pipeline
    model: str  # how the bytes were counted
    per_step_factor: float = 1.0  # local SGD: 1/period
    scale: float = 1.0  # bytes on the wire per fp32 byte (1/2 for a 16-bit cast)


def gradient_exchange(
    strategy: str,
    options: dict[str, Any],
    grad_bytes: float,
    bucket: float | None,
    ratio: float | None,
    tensors: Sequence[float] | None = None,
    layers: Sequence[float] | None = None,
) -> Exchange:
    """The messages of one step of ``strategy`` for a gradient of ``grad_bytes`` (fp32), in
    buckets (or one message per tensor where ``tensors`` lists their bytes; DDP's buckets of
    whole tensors where ``layers`` lists them).

    The bytes are those of the strategy's own definition,
    ``strategies.sent_bytes_per_step``: what a rank sends per step divided by the ring factor
    is the message an allreduce carries; a parameter server's push is the message itself.
    PowerSGD's factors depend on the tensors' shapes, which only the worker saw: its record's
    compression ratio stands in. A 16-bit cast halves the bytes of every message: DDP's hook
    casts each fp32 bucket (its buckets are counted in fp32 bytes), so the messages are the
    fp32 buckets halved; Horovod's compressor casts each tensor before it is fused, which the
    fusion by cycle (:func:`cycle_exchange`) does with the halved total."""
    st = S.get(strategy)
    opts = S.validate_options(st, options)
    elems = [int(b // S.ITEMSIZE) for b in tensors] if tensors else [int(grad_bytes // S.ITEMSIZE)]
    wire = S.sent_bytes_per_step(st, opts, [(n,) for n in elems], 2)
    full = float(sum(elems) * S.ITEMSIZE)
    cap = bucket if bucket else full
    if tensors:
        parts = [float(b) for b in tensors]
    elif layers and bucket:
        parts = C.ddp_buckets(layers, cap)
    else:
        parts = C.buckets(full, cap)
    ring2 = S.ring_factor(2)
    if strategy in ("allreduce", "adasum", "fp16", "bf16"):
        scale = wire["bytes"] / ring2 / full  # 1, or 1/2 for a 16-bit cast
        return Exchange([p * scale for p in parts], "allreduce", wire["model"], 1.0, scale)
    if strategy == "powersgd":
        r = ratio or 1.0
        # the hook allreduces P, then Q, then the tensors it leaves uncompressed: three calls
        # per bucket sharing its compressed bytes
        msgs = [p / r / 3 for p in parts for _ in range(3)]
        return Exchange(msgs, "allreduce", f"{wire['model']}; compression {r:.3g}x (the "
                        "record's ratio): three allreduces per bucket", 1.0, 1.0 / r)  # fmt: skip
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
    link = _link(place_)
    load = max(1.0, topo.ranks / max(1, servers))
    # the push and the pull are a call each: each pays the per-call launch
    return 2.0 * (topo.launch_s + link.latency_s + total_bytes * load / link.bandwidth)


def pipeline_time(
    compute_global: float, cut_bytes: float, microbatches: int, place_: Placement
) -> float:
    """GPipe: ``(m + k - 1)`` slots, each a stage's share of one micro-batch's forward and
    backward and one send of the activations and one of their gradients across a cut."""
    topo = place_.topology
    k, m = topo.ranks, max(1, microbatches)
    link = _link(place_)
    send = topo.launch_s + link.latency_s + cut_bytes / m / link.bandwidth  # a call each
    return (m + k - 1) * (compute_global / (k * m) + 2.0 * send)


def copy_time(grad_bytes: float, place_: Placement) -> float:
    """The framework's copies of the gradients into its buckets (or fusion buffer) and out."""
    if not place_.copies or not place_.memory_bandwidth or place_.topology.ranks < 2:
        return 0.0
    return COPY_TRAFFIC * grad_bytes / place_.memory_bandwidth


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
    contention: float = 1.0,
) -> Breakdown:
    """One step of ``strategy`` at ``place_``: compute, exchange, exposed part, copies, total.
    ``contention`` multiplies compute where ranks share a node (measured at the fitted ranks)."""
    topo = place_.topology
    if strategy == "pipeline":
        base = compute.seconds(global_batch) * place_.stretch
        if topo.ranks < 2:
            return Breakdown(base, 0.0, 0.0, 0.0, base)
        mb = int(options.get("microbatches", 4))
        t = pipeline_time(base, cut_bytes or 0.0, mb, place_)
        bubble = (mb + topo.ranks - 1) * base / (topo.ranks * mb)
        return Breakdown(bubble, t - bubble, t - bubble, overhead, t + overhead,
                         f"GPipe, {mb} micro-batches, {topo.ranks} stages", messages=2 * (mb + topo.ranks - 1))  # fmt: skip
    comp = compute.seconds(per_rank_batch) * place_.stretch
    if topo.ranks < 2:
        return Breakdown(comp, 0.0, 0.0, 0.0, comp)
    comp *= contention if topo.local > 1 else 1.0
    # a synchronous step waits for the slowest rank (its compute, not the median's)
    slowest = comp * compute.straggle(topo.ranks)
    straggle, comp = slowest - comp, slowest
    fusion = place_.fusion
    ex = gradient_exchange(strategy, options, grad_bytes, place_.bucket, ratio,
                           fusion.tensors if fusion.mode == "tensors" else place_.tensors,
                           fusion.layers)  # fmt: skip
    if ex.kind == "parameter-server":
        t = ps_time(ex.messages[0], place_, servers)
        if strategy in ("ps-async", "ssp"):
            # nobody waits for the others: a worker's own round trip, unless the servers are
            # the bottleneck for everyone
            serve = 2.0 * ex.messages[0] * topo.ranks / max(1, servers) / _link(place_).bandwidth
            total = max(comp - straggle + t + overhead, serve)
            return Breakdown(comp - straggle, t, total - comp + straggle - overhead, overhead,
                             total, ex.model, messages=2)  # fmt: skip
        return Breakdown(comp, t, t, overhead, comp + t + overhead, ex.model, messages=2,
                         straggle=straggle)  # fmt: skip

    def call(m: float) -> float:
        return C.allreduce_time(m, topo, place_.algorithm)

    cyclic = fusion.mode == "cycle" and ex.kind == "allreduce" and strategy in OVERLAPPED
    note = f"{ex.model}; {fusion.describe()}" if cyclic else ex.model
    overlapped = ex.kind != "average" and strategy in OVERLAPPED

    def messages(backward: float) -> tuple[list[float], list[float], list[float] | None, float]:
        """Each message's time and bytes, when it is ready, and the part the step waits for,
        with a backward pass of ``backward`` seconds."""
        if cyclic:
            link = _link(place_)

            def negotiate(tensors: float, messages: int) -> float:
                return fusion.negotiate(topo.ranks, link.latency_s, tensors, messages)

            times, sizes, ready = cycle_exchange(
                float(sum(ex.messages)), backward, fusion, call, negotiate
            )
        else:
            sizes, ready = list(ex.messages), None
            times = [call(m) for m in sizes]
            if (fusion.mode == "tensors" and fusion.ready_at is not None
                    and len(fusion.ready_at) == len(sizes)):  # fmt: skip
                ready = [backward * f for f in fusion.ready_at]
        total = float(sum(times)) * ex.per_step_factor
        shown = overlap.exposed(times, sizes, backward, ready) if overlapped else total
        return times, sizes, ready, shown

    backward = BACKWARD_FRACTION * comp
    times, sizes, ready, exposed = messages(backward)
    exchange = float(sum(times)) * ex.per_step_factor
    interfered = 0.0
    if overlapped and place_.interference > 0 and overlap.mode in ("timeline", "full", "fixed"):
        # the exchange that ran beside the backward pass slowed it: the backward pass lasts
        # longer by that share of the time they ran together, and its messages are ready later
        beside = min(max(0.0, exchange - exposed), backward)
        interfered = place_.interference * beside
        times, sizes, ready, exposed = messages(backward + interfered)
        exchange = float(sum(times)) * ex.per_step_factor
        comp += interfered
    latency = float(sum(call(1e-300) for _ in sizes)) * ex.per_step_factor if sizes else 0.0
    copies = copy_time(grad_bytes, place_) if ex.kind == "allreduce" else 0.0
    return Breakdown(comp, exchange, exposed, overhead, comp + exposed + copies + overhead, note,
                     copies, len(sizes), latency, straggle, interfered)  # fmt: skip


def _link(place_: Placement) -> C.Link:
    topo = place_.topology
    return topo.inter if topo.nodes > 1 and topo.inter is not None else topo.intra


# -- calibration against the records at the fitted rank counts ---------------------------------


@dataclass
class Calibration:
    """What the records at the fitted rank counts say beyond the model: the exposure factor of
    the exchange (hidden share or slowdown) and a per-step overhead, each physical (never
    negative); ``problem`` where they cannot be (the reason, one line)."""

    overlap: Overlap
    overhead: float
    residuals: list[float]
    problem: str | None = None


def calibrate(
    rows: Sequence[tuple[float, float, float, float, str]],
    tolerance: Sequence[float],
    backward: Sequence[float],
) -> Calibration:
    """``rows``: (measured step, modelled compute, modelled copies, modelled exchange, record)
    at each fitted rank count; ``tolerance``: each record's noise in seconds (its and its
    compute's confidence intervals); ``backward``: each step's backward pass.

    One record: the exposure factor ``e = (step - compute - copies) / exchange`` up to 1
    (hidden share ``1 - e``); what exceeds the whole exchange is a per-step overhead ``o`` (one
    record cannot tell a constant from a slowdown that grows with the exchange: the constant is
    the smaller claim). Several: ``e`` (a slowdown where ``e > 1``: communication and compute
    slowing each other, as measured) and ``o`` by non-negative least squares. A step shorter
    than its compute and copies by more than its noise cannot be fitted (``problem``)."""
    from scipy.optimize import nnls

    ids = [r[4] for r in rows]
    rest = np.array([s - c - k for s, c, k, _, _ in rows])
    xs = np.array([x for _, _, _, x, _ in rows])
    for (s, c, k, _, _rid), tol, r in zip(rows, tolerance, rest, strict=True):
        if r < -tol:
            return Calibration(
                Overlap("none"), 0.0, [], f"the step ({s * 1e3:.3g} ms) "
                f"is shorter than its compute alone ({(c + k) * 1e3:.3g} ms, from the one-rank "
                "record) by more than their noise",
            )  # fmt: skip
    raw = [float(r / x) if x > 0 else 0.0 for r, x in zip(rest, xs, strict=True)]
    rest = np.maximum(rest, 0.0)
    if not np.any(xs > 0):
        o = float(np.mean(rest)) if len(rows) > 1 else 0.0
        return Calibration(Overlap("none"), o, [0.0] * len(rows))
    if len(rows) == 1:
        e = min(1.0, float(rest[0] / xs[0]))
        o = max(0.0, float(rest[0] - e * xs[0]))
    else:
        coef, _ = nnls(np.column_stack([xs, np.ones(len(rows))]), rest)
        e, o = float(coef[0]), float(coef[1])
    # no mode hides more than the backward pass lasts: e >= 1 - backward / exchange
    floor = max(0.0, float(np.max(1.0 - np.asarray(backward) / np.where(xs > 0, xs, np.inf))))
    e = max(e, floor)
    ov = Overlap("measured", hidden=max(0.0, 1.0 - e), fitted_from=ids, raw=raw, exposure=e)
    model = e * xs + o
    for m, (s, c, k, _, _rid), tol in zip(model, rows, tolerance, strict=True):
        # the least a step can take: its compute, its copies and the exchange the backward pass
        # cannot hide; a step shorter than that by more than its noise cannot be fitted
        if m + c + k - s > tol:
            return Calibration(
                Overlap("none"), 0.0, [], f"the step ({s * 1e3:.3g} ms) is shorter than its "
                f"compute and the exchange its backward pass cannot hide ({(m + c + k) * 1e3:.3g} "
                "ms) by more than their noise",
            )  # fmt: skip
    res = [float((m + c + k - s) / s) for m, (s, c, k, _, _) in zip(model, rows, strict=True)]
    return Calibration(ov, o, res)


def fitted_overhead(
    rows: Sequence[tuple[float, float, str]], tolerance: Sequence[float]
) -> tuple[float, str | None]:
    """The per-step time a strategy's records leave unexplained by the model at the fitted rank
    counts (``rows``: measured step, modelled step, record id): their mean, never negative; a
    record shorter than the model by more than its noise is a problem (the reason)."""
    if not rows:
        return 0.0, None
    diffs = [s - m for s, m, _ in rows]
    for (s, m, _rid), tol in zip(rows, tolerance, strict=True):
        if s - m < -tol:
            return 0.0, (f"the step ({s * 1e3:.3g} ms) is shorter than the model's compute and "
                         f"exchange ({m * 1e3:.3g} ms) by more than its noise")  # fmt: skip
    return max(0.0, float(np.mean(diffs))), None
