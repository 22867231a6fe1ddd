"""The alpha-beta cost of collectives, its physical fit to a run's message-size sweeps, the links'
achieved share of their line rate, and NCCL's choice between ring and tree.

A message of ``m`` bytes between two ranks costs ``alpha + m / B`` (latency plus bytes over
bandwidth; Hockney's model). A collective algorithm is a number of such steps and a volume
that each rank sends, so its time at ``p`` ranks is ``launch + steps(p) * alpha + volume(p) * m /
B`` (Thakur, Rabenseifner and Gropp 2005, "Optimization of Collective Communication Operations in
MPICH"; the terms below are theirs), where ``launch`` is what one call costs whatever its size
(a kernel launch and the library's set-up: NCCL's "base latency", ``src/graph/tuning.cc``):

=====================  =======================  ========================
allreduce algorithm    latency steps            bytes sent per byte
=====================  =======================  ========================
ring                   2 (p - 1)                2 (p - 1) / p
halving-doubling       2 log2 p                 2 (p - 1) / p
tree (binomial)        2 ceil(log2 p)           2 ceil(log2 p)
=====================  =======================  ========================

(Rabenseifner's reduce-scatter by recursive halving then allgather by recursive doubling is the
"halving-doubling" row, for ``p`` a power of two; otherwise the ranks beyond the largest power of
two ``p'`` below ``p`` first hand their vector to a partner and get the result back last:
``2 log2 p' + 2`` steps and ``2 (p' - 1) / p' + 2`` bytes per byte. A binomial-tree reduce
then broadcast, not pipelined, is "tree".) The reduction's arithmetic is not a separate term: a
fit to measured times folds it into the bandwidth. At 2 ranks ring and halving-doubling coincide
(2 steps, 1 byte per byte); they part from 3 ranks on.

Several nodes: ``ranks_per_node`` ranks share a node whose link to the others is slower. A
step-synchronous flat ring (gloo's, MPI's) takes ``2 (p - 1)`` steps each waiting for its slowest
link; halving-doubling and tree are taken hierarchically, as Goyal et al. (2017) ran theirs.

**NCCL** (``algorithm="nccl"``) pipelines its rings in chunks, so a ring's latency is the sum of
its hops' latencies, ``2 (p - n)`` inside the nodes and ``2 (n - 1)`` between them, not ``2 (p -
1)`` times the slowest; from 2.4 on it also has a double binary tree, latency ``2 ((g - 1)
alpha_intra + log2 n alpha_inter)`` and a bandwidth of 0.92 x 0.5 of the link's, and picks,
message by message, the faster of the two (``ncclTopoTuneModel`` in ``src/graph/tuning.cc``;
NCCL 2.3.7's sources have no tree, 2.4.2 adds it with ``NCCL_TREE_THRESHOLD``).

**Achieved share of line rate.** A link given by its line rate (a data sheet's figure) carries
less: the share measured on the user's own multi-node sweep where there is one, else a published
measurement for its kind of link (:data:`LINK_KINDS`, each with its source), whose range widens
the band. A fitted link's bandwidth is achieved by definition.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

#: the algorithms of the alpha-beta table; "nccl" is NCCL's own ring or tree (see above)
ALGORITHMS = ("ring", "halving-doubling", "tree")
NCCL = "nccl"
ALL_ALGORITHMS = (*ALGORITHMS, NCCL)
#: collectives whose records the fit reads (the suite's collective benchmarks)
COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "broadcast")
#: the floor of a fitted latency: a latency is strictly positive; a fit that ends on the floor
#: says its records cannot show one
MIN_LATENCY_S = 1e-9
#: NCCL's first release with trees (2.4.2; 2.3.7's sources have none)
NCCL_TREE_SINCE = (2, 4)
#: NCCL's per-call base latency, protocol Simple (tuning.cc, baseLatencies: ring and tree 8.4 us)
NCCL_LAUNCH_S = 8.4e-6
#: NCCL's tree: bus bandwidth x 0.92 (its allreduce refinement), algorithm bandwidth x 0.5
NCCL_TREE_BW = 0.92 * 0.5


@dataclass(frozen=True)
class LinkKind:
    """A kind of link and the share of its line rate that measurements reached."""

    name: str
    low: float
    high: float
    source: str

    @property
    def share(self) -> float:
        """The middle of the measured range (the central value of the projection)."""
        return (self.low + self.high) / 2.0


#: measured shares of line rate by kind of link: nccl-tests' bus bandwidth (or perftest where
#: said) over the link's line rate, from the issue threads named
LINK_KINDS: dict[str, LinkKind] = {
    "ethernet": LinkKind(
        "ethernet",
        0.32,
        0.60,
        "NCCL over TCP sockets: NVIDIA/nccl#450 (4 nodes x 8 V100, 100 Gbit/s TCP: nccl-tests "
        "allreduce bus bandwidth 4-6 GB/s of 12.5, 0.32-0.48) and NVIDIA/nccl#209 (32 Gbit/s "
        "TCP: 'not more than 60% of wire speed' with large messages)",
    ),
    "roce": LinkKind(
        "roce",
        0.75,
        0.90,
        "RoCE: NVIDIA/nccl#495 (2 A100 nodes, 8 x 100 Gbit/s RoCE: nccl-tests 600 of 800 "
        "Gbit/s, 'roughly matching our expectation' say NCCL's developers) and "
        "NVIDIA/nccl-tests#112 (200 Gbit/s RoCEv2: ib_write_bw about 180 Gbit/s)",
    ),
    "infiniband": LinkKind(
        "infiniband",
        0.96,
        0.976,
        "InfiniBand: NVIDIA/nccl-tests#29 (NCCL's developer, 2019: 12.2 GB/s bus bandwidth on "
        "one 100 Gbit/s EDR card 'is as good as you can get', 0.976; a DGX-1's four EDR cards "
        "48 GB/s, 0.96)",
    ),
    "nvlink": LinkKind(
        "nvlink",
        0.69,
        0.82,
        "NVLink: NVIDIA/nccl-tests#212 (NCCL's developer: 450 GB/s line rate, 'with the protocol "
        "overhead (~20%) NCCL can get an effective NVLink bandwidth of 370GB/s', 0.82) and "
        "NVIDIA/nccl-tests#178 (two A100 on 12 NVLink 3 links, 300 GB/s: bus bandwidth 208 "
        "GB/s, 0.69)",
    ),
    "pcie-host": LinkKind(
        "pcie-host",
        0.63,
        0.71,
        "PCIe between GPUs that cannot reach each other directly (across CPU sockets), through "
        "host memory: NVIDIA/nccl-tests#178 (NCCL's ring over a SYS path, PCIe 4.0 x16, 31.5 "
        "GB/s: bus bandwidth 20 GB/s, 0.63) and NVIDIA/nccl#814 (p2pBandwidthLatencyTest with "
        "P2P disabled, PCIe 4.0 x16: 20.1-22.4 GB/s one way, 0.64-0.71)",
    ),
}
_KIND_WORDS = (
    ("roce", r"roce"),
    ("infiniband", r"infiniband|\bib\b|\b(edr|hdr|ndr|fdr|qdr)\b"),
    ("nvlink", r"nvlink|nvswitch"),
    ("ethernet", r"ethernet|\bgbe\b|[0-9]gbe|\btcp\b"),
)


def kind_of(text: str) -> str | None:
    """The kind of link a name says (``"25 Gbit Ethernet, TCP"`` is ethernet; RoCE before
    Ethernet: RoCE runs on Ethernet but is not TCP), None when it says none."""
    low = text.lower()
    for kind, pattern in _KIND_WORDS:
        if re.search(pattern, low):
            return kind
    return None


def _log2(p: int) -> int:
    return math.ceil(math.log2(p)) if p > 1 else 0


def factors(op: str, algorithm: str, p: int) -> tuple[float, float]:
    """(latency steps, bytes each rank sends per byte of the message) of ``op`` at ``p`` ranks
    on one kind of link. ``m`` is the whole message: an allreduce's buffer, an allgather's
    output, a reduce-scatter's input (nccl-tests' convention, as the records hold it). NCCL on
    one node is its ring."""
    if p < 2:
        return 0.0, 0.0
    if algorithm == NCCL:
        algorithm = "ring"
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}")
    lg = _log2(p)
    if op == "allreduce":
        if algorithm == "halving-doubling":
            low = 1 << (p.bit_length() - 1)  # the largest power of two <= p
            if low == p:
                return 2.0 * lg, 2.0 * (p - 1) / p
            # Rabenseifner / MPICH for p not a power of two: the p - low extra ranks hand their
            # whole vector to a partner first and get the result back last (one step and m
            # bytes each way), halving-doubling runs among the low ranks
            return 2.0 * math.log2(low) + 2.0, 2.0 * (low - 1) / low + 2.0
        return {
            "ring": (2.0 * (p - 1), 2.0 * (p - 1) / p),
            "tree": (2.0 * lg, 2.0 * lg),
        }[algorithm]
    if op in ("allgather", "reduce_scatter"):
        return {
            "ring": (float(p - 1), (p - 1) / p),
            "halving-doubling": (float(lg), (p - 1) / p),
            "tree": (2.0 * lg, float(lg)),
        }[algorithm]
    if op == "broadcast":
        return {
            "ring": (float(p - 1), 1.0),  # a pipelined chain
            "halving-doubling": (float(lg + p - 1), 2.0 * (p - 1) / p),  # scatter + allgather
            "tree": (float(lg), float(lg)),
        }[algorithm]
    raise ValueError(f"unknown collective {op!r}")


@dataclass(frozen=True)
class Link:
    """One kind of link: its latency (s), the bandwidth it achieves (bytes/s) and where both
    come from; where it was given by its line rate, that rate, the share applied and the range
    of shares measured for its kind (the band)."""

    latency_s: float
    bandwidth: float
    source: str
    name: str = ""
    kind: str | None = None
    line_rate: float | None = None
    share: float | None = None  # applied to line_rate; None: the bandwidth is achieved as is
    share_range: tuple[float, float] | None = None
    share_source: str = ""

    def at_share(self, share: float) -> Link:
        """The same link at another share of its line rate (the band's ends)."""
        if self.line_rate is None:
            return self
        return replace(self, bandwidth=self.line_rate * share, share=share)


def given_link(
    latency_s: float,
    line_rate: float,
    source: str,
    name: str = "",
    kind: str | None = None,
    share: float | None = None,
    share_source: str = "",
) -> Link:
    """A link given by its line rate (flags, a site profile, a paper): the achieved share is
    ``share`` where measured (the user's multi-node sweep), else its kind's published one. A
    link whose kind is not known keeps its line rate, and its band spans every kind's
    measured range (the caller reports it as 'no usable band': name the kind)."""
    kind = kind or kind_of(name)
    if share is not None:
        return Link(latency_s, line_rate * share, source, name, kind, line_rate, share,
                    (share, share), share_source)  # fmt: skip
    lk = LINK_KINDS.get(kind or "")
    if lk is None:
        lows = min(k.low for k in LINK_KINDS.values())
        return Link(latency_s, line_rate, source, name, kind, line_rate, 1.0, (lows, 1.0),
                    "kind of link not known: its line rate is used, and the band spans every "
                    "kind's measured share")  # fmt: skip
    return Link(latency_s, line_rate * lk.share, source, name, kind, line_rate, lk.share,
                (lk.low, lk.high), lk.source)  # fmt: skip


@dataclass(frozen=True)
class Topology:
    """Where ``ranks`` ranks run: ``ranks_per_node`` to a node, ``intra`` links inside a node,
    ``inter`` between nodes (needed only when the ranks span nodes); ``launch_s`` is what one
    collective call costs whatever its size; ``nccl_tree`` whether NCCL may use its tree."""

    ranks: int
    ranks_per_node: int
    intra: Link
    inter: Link | None = None
    launch_s: float = 0.0
    nccl_tree: bool = True

    @property
    def nodes(self) -> int:
        return math.ceil(self.ranks / max(1, self.ranks_per_node))

    @property
    def local(self) -> int:
        """Ranks on one node (the last node may hold fewer; the model takes the full ones)."""
        return min(self.ranks, max(1, self.ranks_per_node))


def nccl_times(message: float, topo: Topology) -> dict[str, float]:
    """NCCL's ring and (from 2.4, across nodes) tree for one allreduce, as its tuning model
    prices them (without the per-call launch)."""
    p, g, n = topo.ranks, topo.local, topo.nodes
    a_i, b_i = topo.intra.latency_s, topo.intra.bandwidth
    if n == 1:
        return {"ring": 2 * (p - 1) * a_i + 2 * (p - 1) / p * message / b_i}
    if topo.inter is None:
        raise ValueError("ranks span nodes but no inter-node link was given")
    a_e, b_e = topo.inter.latency_s, topo.inter.bandwidth
    b = min(b_i, b_e) if g > 1 else b_e
    inter_steps = 2 * (n - 1)
    out = {"ring": (2 * (p - 1) - inter_steps) * a_i + inter_steps * a_e
           + 2 * (p - 1) / p * message / b}  # fmt: skip
    if topo.nccl_tree:
        out["tree"] = 2 * ((g - 1) * a_i + _log2(n) * a_e) + message / (NCCL_TREE_BW * b)
    return out


def allreduce_time(message: float, topo: Topology, algorithm: str) -> float:
    """Seconds for one allreduce of ``message`` bytes over ``topo`` with ``algorithm``,
    the call's launch included."""
    p, g, n = topo.ranks, topo.local, topo.nodes
    if p < 2 or message <= 0:
        return 0.0
    if algorithm == NCCL:
        return topo.launch_s + min(nccl_times(message, topo).values())
    a_i, b_i = topo.intra.latency_s, topo.intra.bandwidth
    if n == 1:
        steps, volume = factors("allreduce", algorithm, p)
        return topo.launch_s + steps * a_i + volume * message / b_i
    if topo.inter is None:
        raise ValueError("ranks span nodes but no inter-node link was given")
    a_e, b_e = topo.inter.latency_s, topo.inter.bandwidth
    if algorithm == "ring":
        # a flat step-synchronous ring: every step waits for its slowest link (the links inside
        # a node are in the ring only where a node holds two ranks or more)
        steps, volume = factors("allreduce", "ring", p)
        if g == 1:
            return topo.launch_s + steps * a_e + volume * message / b_e
        return topo.launch_s + steps * max(a_i, a_e) + volume * message / min(b_i, b_e)
    if algorithm == "tree":
        return (
            topo.launch_s
            + 2 * _log2(g) * (a_i + message / b_i)
            + 2 * _log2(n) * (a_e + message / b_e)
        )
    # halving-doubling among the nodes; a pipelined reduce and broadcast inside each node
    inside = 2.0 * ((g - 1) * a_i + message / b_i) if g > 1 else 0.0
    steps, volume = factors("allreduce", "halving-doubling", n)
    return topo.launch_s + inside + steps * a_e + volume * message / b_e


def nccl_choice(message: float, topo: Topology) -> str:
    """Which of its algorithms NCCL's tuning model picks for this message (ring or tree)."""
    times = nccl_times(message, topo)
    return min(times, key=lambda k: times[k])


def buckets(total: float, bucket: float) -> list[float]:
    """``total`` bytes sent as messages of at most ``bucket`` bytes (DDP's buckets, Horovod's
    fusion buffer): the sizes, in the order they are sent."""
    if total <= 0:
        return []
    if bucket <= 0 or bucket >= total:
        return [float(total)]
    k = math.floor(total / bucket)
    rest = total - k * bucket
    return [float(bucket)] * k + ([rest] if rest > 0 else [])


#: DDP's first bucket (the last layers' gradients, ready first): 1 MiB whatever bucket_cap_mb
#: says (torch/nn/parallel/distributed.py, _DEFAULT_FIRST_BUCKET_BYTES)
DDP_FIRST_BUCKET = float(1 << 20)


def ddp_buckets(
    tensors: Sequence[float], cap: float, first: float = DDP_FIRST_BUCKET
) -> list[float]:
    """DDP's buckets of ``tensors`` (bytes, in the order the backward pass produces them): a
    bucket takes whole tensors until it holds ``cap`` bytes or more (a tensor is never split, so
    one larger than the cap is a bucket of its own); the first bucket's cap is ``first``
    (``compute_bucket_assignment_by_size`` in PyTorch's reducer)."""
    out: list[float] = []
    size = 0.0
    limit = min(first, cap) if first else cap
    for t in tensors:
        size += float(t)
        if size >= limit:
            out.append(size)
            size, limit = 0.0, cap
    if size > 0:
        out.append(size)
    return out


# -- fitting -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Point:
    """One measured collective: ``seconds`` (median) for ``message`` bytes at ``ranks``."""

    op: str
    ranks: int
    message: float
    seconds: float
    record: str = ""  # the record's task id (and rank) for "fitted from"


@dataclass
class Fit:
    """latency, bandwidth (and, from several world sizes, the per-call launch) of one link,
    fitted to one collective's points under one algorithm, with the residuals (relative:
    (model - measured) / measured) at every point it was fitted to, and the terms the fit left
    at a physical bound (then the points cannot tell that term: the projection says so)."""

    op: str
    algorithm: str
    latency_s: float
    bandwidth: float
    residuals: list[float]
    points: list[Point] = field(default_factory=list)
    launch_s: float = 0.0
    at_bound: list[str] = field(default_factory=list)
    line_rate: float | None = None

    @property
    def rms(self) -> float:
        r = np.asarray(self.residuals)
        return float(np.sqrt(np.mean(r**2))) if r.size else 0.0

    @property
    def max_abs(self) -> float:
        return float(np.max(np.abs(self.residuals))) if self.residuals else 0.0

    @property
    def usable(self) -> bool:
        return not self.at_bound

    def predict(self, message: float, ranks: int) -> float:
        steps, volume = factors(self.op, self.algorithm, ranks)
        return self.launch_s + steps * self.latency_s + volume * message / self.bandwidth

    def link(self, source: str, name: str = "") -> Link:
        return Link(self.latency_s, self.bandwidth, source, name)


def fit(points: Sequence[Point], algorithm: str, line_rate: float | None = None) -> Fit:
    """Least squares in relative error (each point weighted by 1/time, so 8 B and 16 MiB
    count alike) of ``time = launch + steps(p) alpha + volume(p) m / B`` over ``points``, every
    term physical: alpha at least :data:`MIN_LATENCY_S`, B at most ``line_rate`` (finite where
    no line rate is known), launch non-negative and fitted only where the points span several
    world sizes (at one world size it cannot be told from ``steps x alpha``: alpha holds it).
    A term that ends on its bound is named in ``at_bound``. Needs two message sizes at least."""
    from scipy.optimize import lsq_linear

    pts = [q for q in points if q.seconds > 0 and q.ranks >= 2]
    if len({(q.ranks, q.message) for q in pts}) < 2:
        raise ValueError("an alpha-beta fit needs at least two message sizes")
    op = pts[0].op
    with_launch = len({q.ranks for q in pts}) > 1
    rows = []
    for q in pts:
        steps, volume = factors(op, algorithm, q.ranks)
        row = [steps / q.seconds, volume * q.message / q.seconds]
        rows.append(([1.0 / q.seconds] if with_launch else []) + row)
    a = np.asarray(rows)
    norms = np.linalg.norm(a, axis=0)
    norms[norms == 0] = 1.0
    inv_bw_floor = 1.0 / line_rate if line_rate else 1e-18  # 1e18 B/s: "infinite"
    lower = np.array(([0.0] if with_launch else []) + [MIN_LATENCY_S, inv_bw_floor])
    res = lsq_linear(
        a / norms, np.ones(len(pts)), bounds=(lower * norms, np.full(len(lower), np.inf))
    )
    coef = res.x / norms
    launch = float(coef[0]) if with_launch else 0.0
    alpha, inv_bw = float(coef[-2]), float(coef[-1])
    # a term at its bound, or too small to matter at any point (under 1% of every point's
    # time: the points do not show it), is a term the fit could not determine
    share_lat = max(factors(op, algorithm, q.ranks)[0] * alpha / q.seconds for q in pts)
    share_bw = max(factors(op, algorithm, q.ranks)[1] * q.message * inv_bw / q.seconds for q in pts)
    at_bound = []
    if alpha <= MIN_LATENCY_S * 1.001 or share_lat < 0.01:
        at_bound.append(
            "latency fitted to zero: the sweep's small messages are no slower than its "
            "bandwidth term explains"
        )
    if line_rate and inv_bw <= inv_bw_floor * 1.001:
        at_bound.append(
            "bandwidth fitted to the line rate: the sweep's large messages ask for more than "
            "the link carries"
        )
    elif share_bw < 0.01:
        at_bound.append(
            "bandwidth fitted to infinity: the sweep's large messages were no slower than its "
            "small ones"
        )
    f = Fit(op, algorithm, alpha, 1.0 / inv_bw, [], list(pts), launch, at_bound, line_rate)
    f.residuals = [(f.predict(q.message, q.ranks) - q.seconds) / q.seconds for q in pts]
    return f


def fit_all(points: Sequence[Point], line_rate: float | None = None) -> dict[str, Fit]:
    """The fit under every algorithm; which one describes the points best is only meaningful
    where they span at least two world sizes (at 2 ranks ring and halving-doubling agree)."""
    return {alg: fit(points, alg, line_rate) for alg in ALGORITHMS}


def best_algorithm(fits: dict[str, Fit]) -> str | None:
    """The algorithm whose fit has the smallest rms residual, when the points span several
    world sizes (else None: the points cannot tell the algorithms apart)."""
    any_fit = next(iter(fits.values()))
    if len({q.ranks for q in any_fit.points}) < 2:
        return None
    return min(fits, key=lambda alg: fits[alg].rms)


def parse_version(text: str | None) -> tuple[int, ...] | None:
    """``"2.18.3"`` -> (2, 18, 3); None where there is no version."""
    if not text:
        return None
    nums = re.findall(r"\d+", str(text))
    return tuple(int(n) for n in nums[:3]) if nums else None
