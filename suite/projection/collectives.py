"""The alpha-beta cost of collectives, and its fit to a run's message-size sweeps.

A message of ``m`` bytes between two ranks costs ``alpha + m / B`` (latency plus bytes over
bandwidth; Hockney's model). A collective algorithm is a number of such steps and a volume
that each rank sends, so its time at ``p`` ranks is ``steps(p) * alpha + volume(p) * m / B``
(Thakur, Rabenseifner and Gropp 2005, "Optimization of Collective Communication Operations in
MPICH"; the terms below are theirs):

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
then broadcast, not pipelined, is "tree".) The
reduction's arithmetic is not a separate term: a fit to measured times folds it into the
bandwidth. At 2 ranks ring and halving-doubling coincide (2 steps, 1 byte per byte); they part
from 3 ranks on, which is where measurements at several world sizes tell the algorithms apart.

Several nodes: ``ranks_per_node`` ranks share a node whose link to the others is slower. A flat
ring through every rank (nodes contiguous, NCCL's ring) takes ``2 (p - 1)`` steps each waiting
for its slowest link; halving-doubling and tree are taken hierarchically, as Goyal et al. (2017)
ran theirs: reduce inside the node, the algorithm among the nodes, broadcast inside the node.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

ALGORITHMS = ("ring", "halving-doubling", "tree")
#: collectives whose records the fit reads (the suite's collective benchmarks)
COLLECTIVES = ("allreduce", "allgather", "reduce_scatter", "broadcast")


def _log2(p: int) -> int:
    return math.ceil(math.log2(p)) if p > 1 else 0


def factors(op: str, algorithm: str, p: int) -> tuple[float, float]:
    """(latency steps, bytes each rank sends per byte of the message) of ``op`` at ``p`` ranks
    on one kind of link. ``m`` is the whole message: an allreduce's buffer, an allgather's
    output, a reduce-scatter's input (nccl-tests' convention, as the records hold it)."""
    if p < 2:
        return 0.0, 0.0
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
    """One kind of link: its latency (s), its bandwidth (bytes/s) and where both come from."""

    latency_s: float
    bandwidth: float
    source: str
    name: str = ""


@dataclass(frozen=True)
class Topology:
    """Where ``ranks`` ranks run: ``ranks_per_node`` to a node, ``intra`` links inside a node,
    ``inter`` between nodes (needed only when the ranks span nodes)."""

    ranks: int
    ranks_per_node: int
    intra: Link
    inter: Link | None = None

    @property
    def nodes(self) -> int:
        return math.ceil(self.ranks / max(1, self.ranks_per_node))

    @property
    def local(self) -> int:
        """Ranks on one node (the last node may hold fewer; the model takes the full ones)."""
        return min(self.ranks, max(1, self.ranks_per_node))


def allreduce_time(message: float, topo: Topology, algorithm: str) -> float:
    """Seconds for one allreduce of ``message`` bytes over ``topo`` with ``algorithm``."""
    p, g, n = topo.ranks, topo.local, topo.nodes
    if p < 2 or message <= 0:
        return 0.0
    a_i, b_i = topo.intra.latency_s, topo.intra.bandwidth
    if n == 1:
        steps, volume = factors("allreduce", algorithm, p)
        return steps * a_i + volume * message / b_i
    if topo.inter is None:
        raise ValueError("ranks span nodes but no inter-node link was given")
    a_e, b_e = topo.inter.latency_s, topo.inter.bandwidth
    if algorithm == "ring":
        # a flat ring: every step waits for its slowest link (the links inside a node are in the
        # ring only where a node holds two ranks or more); each node's link to the next node
        # carries one ring edge
        steps, volume = factors("allreduce", "ring", p)
        if g == 1:
            return steps * a_e + volume * message / b_e
        return steps * max(a_i, a_e) + volume * message / min(b_i, b_e)
    if algorithm == "tree":
        return 2 * _log2(g) * (a_i + message / b_i) + 2 * _log2(n) * (a_e + message / b_e)
    # halving-doubling among the nodes; a pipelined reduce and broadcast inside each node
    inside = 2.0 * ((g - 1) * a_i + message / b_i) if g > 1 else 0.0
    steps, volume = factors("allreduce", "halving-doubling", n)
    return inside + steps * a_e + volume * message / b_e


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


def exchange_time(total: float, bucket: float, topo: Topology, algorithm: str) -> float:
    """An exchange of ``total`` bytes in buckets, one allreduce per bucket, one after another."""
    return sum(allreduce_time(m, topo, algorithm) for m in buckets(total, bucket))


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
    """alpha and B of one link, fitted to one collective's points under one algorithm, with the
    residuals (relative: (model - measured) / measured) at every point it was fitted to."""

    op: str
    algorithm: str
    latency_s: float
    bandwidth: float
    residuals: list[float]
    points: list[Point] = field(default_factory=list)

    @property
    def rms(self) -> float:
        r = np.asarray(self.residuals)
        return float(np.sqrt(np.mean(r**2))) if r.size else 0.0

    @property
    def max_abs(self) -> float:
        return float(np.max(np.abs(self.residuals))) if self.residuals else 0.0

    def predict(self, message: float, ranks: int) -> float:
        steps, volume = factors(self.op, self.algorithm, ranks)
        return steps * self.latency_s + volume * message / self.bandwidth

    def link(self, source: str, name: str = "") -> Link:
        return Link(self.latency_s, self.bandwidth, source, name)


def fit(points: Sequence[Point], algorithm: str) -> Fit:
    """Least squares in relative error (each point weighted by 1/time, so 8 B and 16 MiB
    count alike) of ``time = steps(p) alpha + volume(p) m / B`` over ``points``, alpha and 1/B
    kept non-negative. Needs two message sizes at least (one sweep does)."""
    from scipy.optimize import nnls

    pts = [q for q in points if q.seconds > 0 and q.ranks >= 2]
    if len({(q.ranks, q.message) for q in pts}) < 2:
        raise ValueError("an alpha-beta fit needs at least two message sizes")
    op = pts[0].op
    rows, ones = [], []
    for q in pts:
        steps, volume = factors(op, algorithm, q.ranks)
        rows.append([steps / q.seconds, volume * q.message / q.seconds])
        ones.append(1.0)
    a = np.asarray(rows)
    # columns scaled to unit norm so that nnls sees a well-conditioned problem
    norms = np.linalg.norm(a, axis=0)
    norms[norms == 0] = 1.0
    coef, _ = nnls(a / norms, np.asarray(ones))
    alpha, inv_bw = coef / norms
    bandwidth = 1.0 / inv_bw if inv_bw > 0 else math.inf
    f = Fit(op, algorithm, float(alpha), float(bandwidth), [], list(pts))
    f.residuals = [(f.predict(q.message, q.ranks) - q.seconds) / q.seconds for q in pts]
    return f


def fit_all(points: Sequence[Point]) -> dict[str, Fit]:
    """The fit under every algorithm; which one describes the points best is only meaningful
    where they span at least two world sizes (at 2 ranks ring and halving-doubling agree)."""
    return {alg: fit(points, alg) for alg in ALGORITHMS}


def best_algorithm(fits: dict[str, Fit]) -> str | None:
    """The algorithm whose fit has the smallest rms residual, when the points span several
    world sizes (else None: the points cannot tell the algorithms apart)."""
    any_fit = next(iter(fits.values()))
    if len({q.ranks for q in any_fit.points}) < 2:
        return None
    return min(fits, key=lambda alg: fits[alg].rms)
