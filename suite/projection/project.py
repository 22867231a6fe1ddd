"""``dlsuite project``'s engine: from runs' records to projections at other rank counts.

:func:`project` fits the links (alpha-beta, per collective, framework and backend, inside a node
and between nodes, every term physical), the compute per step at one rank, what the records at
the fitted rank counts say beyond the model (the exchange's exposure, a strategy's overhead,
compute slowed by sharing the node), one rank's step-time spread (the wait for the slowest rank,
capped by what the records at the fitted rank counts leave room for), then predicts every network x strategy of the runs at the
asked rank counts and at every layout the runs measured. A row whose inputs cannot support a fit
(one rank slower than two, a term at its physical bound, records the quiet check called busy)
carries the reason in one line and no numbers. Every projected row has a band from every source
it knows (compute, the collective fit, the links' share of line rate, the calibration), and is
a usable band only while it is at most :data:`MAX_BAND_POINTS` points of efficiency wide.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from suite import strategies as S
from suite.errors import ConfigError
from suite.onnx import USER_MODEL
from suite.projection import collectives as C
from suite.projection import model as M
from suite.projection.hardware import Hardware, link_doc, resolve
from suite.projection.published import MAX_MESSAGES
from suite.projection.records import (
    ComputePoint,
    Extracted,
    Load,
    TrainPoint,
    arch_label,
    extract,
    graph_tensors,
    pipeline_max_stages,
    trainable_tensors,
)
from suite.report.load import Run, label_runs

SCHEMA = "dlsuite-projection/2"
#: a band wider than this (points of scaling efficiency) is no usable band
MAX_BAND_POINTS = 20.0


@dataclass
class Settings:
    ranks: list[int]
    #: multi-rank records the model may be fitted to (by world size); None: all. One-rank
    #: compute records are always used (compute is "one rank alone" by definition).
    fit_ranks: list[int] | None = None
    algorithm: str | None = None  # None: the backend's (NCCL's choice, gloo's ring, best fit)
    overlap: str = "auto"  # auto | timeline | none | full | a hidden share in [0, 1]
    bucket: float | None = None  # bytes per bucket; None: the records' or the framework's
    servers: int = 1  # parameter servers
    hardware: Hardware = field(default_factory=Hardware)
    compute_runs: Sequence[Run] = ()
    #: runs only compared with, never fitted to (e.g. the same benchmarks at 3 and 4 ranks)
    check_runs: Sequence[Run] = ()
    #: fit to records the quiet-machine check called busy (each such row says so)
    accept_busy: bool = False
    nccl_version: str | None = None  # None: the records' (trees from 2.4)
    cycle_ms: float | None = None  # Horovod's HOROVOD_CYCLE_TIME; None: the records', else 1 ms
    #: one rank's step-time spread (sigma over the median) at the target, for the slowest
    #: rank's wait; None: the one-rank records' own samples
    step_spread: float | None = None

    def check(self) -> None:
        if not self.ranks:
            raise ConfigError("--ranks: give at least one rank count, e.g. --ranks 2,8,64")
        for flag, counts in (("--ranks", self.ranks), ("--fit-ranks", self.fit_ranks or [])):
            bad = [r for r in counts if r <= 0]
            if bad:
                raise ConfigError(
                    f"{flag} {','.join(map(str, counts))}: {bad[0]} is not a positive rank "
                    "count; give rank counts of 1 or more, e.g. 2,8,64"
                )
        if self.algorithm is not None and self.algorithm not in C.ALL_ALGORITHMS:
            raise ConfigError(
                f"--algorithm {self.algorithm!r}: choose one of {', '.join(C.ALL_ALGORITHMS)}"
            )
        if self.overlap not in M.OVERLAP_MODES:
            try:
                h = float(self.overlap)
            except ValueError:
                h = math.nan
            if not 0.0 <= h <= 1.0:
                raise ConfigError(
                    f"--overlap {self.overlap!r}: one of {', '.join(M.OVERLAP_MODES)} or a hidden "
                    "share between 0 and 1"
                )
        if self.servers <= 0:
            raise ConfigError(f"--servers {self.servers}: must be a positive integer")
        if self.bucket is not None and self.bucket <= 0:
            raise ConfigError("--bucket: must be a positive size, e.g. 25MiB")
        if self.nccl_version is not None and C.parse_version(self.nccl_version) is None:
            raise ConfigError(f"--nccl-version {self.nccl_version!r}: give a version, e.g. 2.18")
        if self.cycle_ms is not None and not self.cycle_ms > 0:
            raise ConfigError(f"--cycle-time {self.cycle_ms}: give a positive time in ms, e.g. 1")
        if self.step_spread is not None and not 0.0 <= self.step_spread < 1.0:
            raise ConfigError(
                f"--step-spread {self.step_spread}: give one rank's step-time spread as sigma "
                "over the median, between 0 and 1 (e.g. 0.003; 0 leaves stragglers out)"
            )


def _in_fit(ranks: int, s: Settings) -> bool:
    """Whether a training record of ``ranks`` ranks may be fitted to (collectives always are)."""
    return ranks == 1 or s.fit_ranks is None or ranks in s.fit_ranks


class CannotFit(Exception):
    """The inputs of a case cannot support a fit: its rows carry the reason, no numbers."""


# -- links -------------------------------------------------------------------------------------


@dataclass
class LinkFit:
    framework: str
    backend: str
    scope: str  # intra | inter
    op: str
    fits: dict[str, C.Fit]
    best: str | None
    ranks_per_node: int
    loads: list[tuple[str, Load]] = field(default_factory=list)

    @property
    def world_sizes(self) -> list[int]:
        """The rank counts its sweeps ran at (every algorithm is fitted to the same points)."""
        return sorted({q.ranks for q in next(iter(self.fits.values())).points})

    def doc(self) -> dict[str, Any]:
        any_fit = next(iter(self.fits.values()))
        return {
            "framework": self.framework, "backend": self.backend, "scope": self.scope,
            "op": self.op, "best_algorithm": self.best,
            "world_sizes": self.world_sizes,
            "points": len(any_fit.points),
            "fitted_from": sorted({q.record for q in any_fit.points}),
            "algorithms": {
                alg: {"latency_s": f.latency_s, "bandwidth_bytes_per_s": f.bandwidth,
                      "launch_s": f.launch_s, "rms_rel_residual": f.rms,
                      "max_abs_rel_residual": f.max_abs, "at_bound": f.at_bound}
                for alg, f in self.fits.items()
            },
        }  # fmt: skip


def fit_links(ex: Extracted, s: Settings) -> list[LinkFit]:
    groups: dict[tuple[str, str, str, str], list[Any]] = {}
    for cp in ex.collectives:
        scope = "inter" if cp.nodes > 1 else "intra"
        groups.setdefault(
            (cp.machine.framework, cp.machine.backend, scope, cp.point.op), []
        ).append(cp)
    out = []
    for (fw, backend, scope, op), cps in sorted(groups.items()):
        pts = [cp.point for cp in cps]
        if len({(p.ranks, p.message) for p in pts}) < 2:
            continue
        fits = C.fit_all(pts)
        g = max(1, round(np.median([cp.point.ranks / cp.nodes for cp in cps])))
        loads = [(cp.point.record, cp.load) for cp in cps]
        out.append(LinkFit(fw, backend, scope, op, fits, C.best_algorithm(fits), g, loads))
    return out


def _link_from(lf: LinkFit | None, algorithm: str, what: str) -> C.Link | None:
    if lf is None:
        return None
    f = lf.fits["ring" if algorithm == C.NCCL else algorithm]
    n = len(f.points)
    sizes = sorted({q.ranks for q in f.points})
    src = (
        f"fitted by dlsuite project: {lf.framework} {lf.backend} {lf.op}, {f.algorithm} model, "
        f"{n} records at {', '.join(map(str, sizes))} ranks ({what}), rms residual "
        f"{100 * f.rms:.0f}%"
    )
    return f.link(src, f"{lf.backend} ({what}, measured)")


def collective_checks(link_fits: Sequence[LinkFit], checks: Extracted) -> list[dict[str, Any]]:
    """Each allreduce of the check runs against every algorithm's prediction from the fitted
    links: which algorithm the backend runs shows here (ring and halving-doubling part from 3
    ranks on)."""
    out = []
    fits = {(lf.framework, lf.backend, lf.scope): lf for lf in link_fits if lf.op == "allreduce"}
    for cp in checks.collectives:
        if cp.point.op != "allreduce":
            continue
        scope = "inter" if cp.nodes > 1 else "intra"
        lf = fits.get((cp.machine.framework, cp.machine.backend, scope))
        if lf is None:
            continue
        pred = {}
        for alg, f in lf.fits.items():
            t = f.predict(cp.point.message, cp.point.ranks)
            pred[alg] = {"seconds": t, "error": t / cp.point.seconds - 1.0}
        out.append({
            "record": cp.point.record, "framework": cp.machine.framework,
            "backend": cp.machine.backend, "scope": scope, "ranks": cp.point.ranks,
            "message_bytes": cp.point.message, "measured_s": cp.point.seconds,
            "predicted": pred,
            "closest": min(pred, key=lambda a: abs(pred[a]["error"])),
        })  # fmt: skip
    return out


# -- cases -------------------------------------------------------------------------------------


@dataclass
class Case:
    key: tuple[Any, ...]
    points: list[TrainPoint]

    @property
    def first(self) -> TrainPoint:
        return self.points[0]

    @property
    def label(self) -> str:
        p = self.first
        opts = ",".join(f"{k}={v}" for k, v in sorted(p.options.items()))
        strat = p.strategy + (f" ({opts})" if opts else "")
        what = "data_parallel" if p.benchmark == "data_parallel" else strat
        if p.bucket:
            what += f" (bucket {p.bucket / M.MiB:.4g} MiB)"
        kind = "global" if p.scaling == "strong" else "per-rank"
        return (
            f"{arch_label(p.arch_params)} · {what} · {kind} batch {p.batch} · {p.machine.framework}"
        )


def _cases(ex: Extracted) -> list[Case]:
    """The runs' training cases; a case of one-rank records only is left out where another
    case measured the same network, batch and machine at several ranks (its records are that
    case's compute; a bucket variant's one-rank records are the same work)."""
    groups: dict[tuple[Any, ...], list[TrainPoint]] = {}
    for tp in ex.training:
        groups.setdefault(tp.case, []).append(tp)
    cases = [Case(k, sorted(v, key=lambda t: (t.ranks, t.nodes))) for k, v in groups.items()]

    def work(c: Case) -> tuple[Any, ...]:
        f = c.first
        return (f.benchmark, f.arch, f.scaling, f.batch, f.machine.key)

    measured = {work(c) for c in cases if any(t.ranks > 1 for t in c.points)}
    return [c for c in cases if any(t.ranks > 1 for t in c.points) or work(c) not in measured]


def _compute_points(case: Case, ex: Extracted, elsewhere: Extracted | None) -> list[ComputePoint]:
    want = case.first.machine.key
    for source in (elsewhere, ex):
        if source is None:
            continue
        pts = [c for c in source.compute if c.arch == case.first.arch]
        if source is ex:
            pts = [c for c in pts if c.machine.key == want]
        if pts:
            common = Counter(c.machine.threads for c in pts).most_common(1)[0][0]
            return [c for c in pts if c.machine.threads == common]
    return []


def _grad_bytes(case: Case, ex: Extracted) -> tuple[float, str]:
    """The fp32 gradient's bytes: from a strategy record's uncompressed count where one exists
    for this network (what the adapter exchanged), else counted in its ONNX graph."""
    for tp in ex.training:
        if tp.arch != case.first.arch or tp.uncompressed_bytes is None or tp.ranks < 2:
            continue
        if tp.strategy in ("allreduce", "fp16", "bf16", "powersgd", "adasum", "local-sgd"):
            return tp.uncompressed_bytes / S.ring_factor(tp.ranks), f"record {tp.record}"
        if tp.strategy in M.PARAMETER_SERVER:
            return tp.uncompressed_bytes, f"record {tp.record}"
    try:
        n, _ = trainable_tensors(case.first.arch_params)
    except Exception as exc:  # noqa: BLE001 - a user network the zoo cannot build
        fix = (
            "the projection reads a user's file again at the path its records give: make it "
            "readable there"
            if case.first.arch_params.get("network") == USER_MODEL
            else "run the strategies benchmark for it, which records the bytes"
        )
        raise ConfigError(f"{case.label}: cannot count its gradient ({exc}); {fix}") from None
    return float(n * S.ITEMSIZE), "counted in its ONNX graph (the importer's trainable tensors)"


def _ddp_layers(case: Case, grad: float) -> tuple[float, ...] | None:
    """The gradient's tensors in the order DDP's backward pass produces them (bytes), where the
    zoo graph counts the same gradient the records do: DDP makes its buckets of them."""
    try:
        n, sizes = trainable_tensors(case.first.arch_params)
    except Exception:  # noqa: BLE001 - a user network the zoo cannot build: even buckets
        return None
    if abs(n * S.ITEMSIZE - grad) > 0.01 * grad:
        return None
    return tuple(float(S.ITEMSIZE * k) for k in reversed(sizes))


def _xla_cpu_messages(case: Case, grad: float, bucket: float | None) -> M.Fusion | None:
    """The messages of JAX's data-parallel step on CPUs (:data:`M.XLA_CPU`): each gradient
    tensor, then each batch norm statistic (rank 0's, summed), in the pytrees' order (by name);
    in flat buffers of at most ``bucket`` bytes where the records set one, as the adapter
    ravels them. None where the zoo graph does not count the records' gradient."""
    try:
        t = graph_tensors(case.first.arch_params)
    except Exception:  # noqa: BLE001 - a user network the zoo cannot build
        return None
    if abs(sum(t.named.values()) * S.ITEMSIZE - grad) > 0.01 * grad:
        return None
    grads = [float(S.ITEMSIZE * t.named[k]) for k in sorted(t.named)]
    stats = [float(S.ITEMSIZE * t.statistics[k]) for k in sorted(t.statistics)]
    said = (
        f"XLA on CPUs: one gloo allreduce per tensor ({len(grads)} gradients, {len(stats)} batch "
        "norm statistics)"
    )
    if bucket:  # the adapter's flat buffers, by its own rule
        grads, stats = (
            [
                sum(part[i] for i in g)
                for g in S.bucket_groups(part, ["float32"] * len(part), bucket)
            ]
            for part in (grads, stats)
        )
        said = (
            f"flat buffers of at most {bucket / M.MiB:.4g} MiB, one gloo allreduce each "
            f"({len(grads)} of gradients, {len(stats)} of batch norm statistics)"
        )
    return M.Fusion("tensors", bucket, tensors=tuple(grads + stats), said=said)


def _layouts(case: Case, targets: Sequence[int], default_g: int | None) -> list[tuple[int, int]]:
    """(ranks, ranks per node) to predict: the asked counts, and every measured layout; a
    layout whose node holds all its ranks is one layout, however many GPUs a node could hold."""
    out: dict[tuple[int, int], None] = {}
    for p in targets:
        out[(p, min(p, default_g or p))] = None
    for tp in case.points:
        if tp.ranks >= 1:
            out[(tp.ranks, min(tp.ranks, math.ceil(tp.ranks / tp.nodes)))] = None
    return sorted(out)


def _busy(loads: Sequence[tuple[str, Load]]) -> tuple[str, list[str]] | None:
    """One short line about the busy records and their ids, or None."""
    busy = [(rid, ld) for rid, ld in loads if ld.busy]
    if not busy:
        return None
    why = busy[0][1].why
    return (f"{len(busy)} of its records the quiet check called busy" + (f" ({why})" if why else ""),
            [rid for rid, _ in busy])  # fmt: skip


def _load_text(loads: Sequence[Load]) -> str:
    vals = [ld.loadavg for ld in loads if ld.loadavg is not None]
    if not vals:
        return ""
    lo, hi = f"{min(vals):.1f}", f"{max(vals):.1f}"
    return f"load {lo if lo == hi else f'{lo}-{hi}'} during the run"


def project(runs: Sequence[Run], s: Settings) -> dict[str, Any]:
    """The projection document (what ``--out`` writes and the table shows)."""
    s.check()
    # record ids name their run: one label for each run, unique across fitted, compute and
    # check runs
    label_runs([*runs, *s.compute_runs, *s.check_runs])
    ex = extract(runs)
    labels = ", ".join(r.label for r in runs)
    if not ex.collectives and not [t for t in ex.training if t.ranks > 1]:
        raise ConfigError(
            f"{labels}: no distributed records that passed their checks (collectives, "
            "data_parallel or strategies at 2 or more ranks); run `dlsuite run --level "
            "distributed --world-size 2` first"
        )
    sizes = sorted({t.ranks for t in ex.training if t.ranks > 1})
    absent = [r for r in s.fit_ranks or [] if r > 1 and r not in sizes]
    if absent:
        # a typo (3 for 2) would fit to the one-rank compute alone, and say nothing
        raise ConfigError(
            f"--fit-ranks {','.join(map(str, s.fit_ranks or []))}: no training record "
            f"(data_parallel, strategies) of {labels} at {', '.join(map(str, absent))} ranks; "
            f"give rank counts they have: {', '.join(map(str, sizes)) or 'none above 1'} (1, "
            "the compute, is always used)"
        )
    checks = extract(s.check_runs) if s.check_runs else Extracted()
    if s.check_runs and not checks.training and not checks.collectives:
        raise ConfigError(
            f"--check {', '.join(r.label for r in s.check_runs)}: no distributed records that "
            "passed their checks (collectives, data_parallel or strategies) to compare the "
            "projection with; give a distributed run, e.g. the same benchmarks at other ranks"
        )
    check_ids = {t.record for t in checks.training}
    ex.training += checks.training
    elsewhere = extract(s.compute_runs) if s.compute_runs else None
    if elsewhere is not None and not elsewhere.compute:
        raise ConfigError(
            "--compute-from: those runs hold no one-rank compute record (network train or "
            "data_parallel at 1 rank) that passed its checks"
        )
    notes: list[str] = []
    link_fits = fit_links(ex, s)
    by_key = {(lf.framework, lf.backend, lf.scope, lf.op): lf for lf in link_fits}
    rows: list[dict[str, Any]] = []
    cases = _cases(ex)
    nothing = (
        None
        if cases
        else f"{labels}: collective sweeps only ({len(ex.collectives)} records), nothing to "
        "project: a step is projected for a data_parallel or strategies record's network and "
        "batch; run `dlsuite run --level distributed --world-size 2 --benchmark data_parallel` "
        "(with --model FILE for your own network) and project that run, or it and this one "
        "together (--details shows the links fitted from these sweeps)"
    )
    skipped: list[str] = []
    # what the allreduce case of each (network, batch, machine, benchmark) measured, shared by
    # the strategies of the same group
    groups: dict[tuple[Any, ...], _Measured] = {}
    cases.sort(key=lambda c: (c.first.strategy != "allreduce", c.label))
    for case in cases:
        try:
            rows += _project_case(case, ex, elsewhere, s, by_key, groups, notes, check_ids)
        except ConfigError as exc:
            if len(cases) == 1:
                raise
            skipped.append(str(exc))
    if not rows and skipped:
        raise ConfigError(skipped[0])
    return {
        "schema": SCHEMA,
        "generated_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "runs": [str(r.path) for r in runs],
        "settings": {
            "ranks": s.ranks, "fit_ranks": s.fit_ranks, "algorithm": s.algorithm,
            "overlap": s.overlap, "bucket_bytes": s.bucket, "servers": s.servers,
            "hardware": s.hardware.origin or None,
            "compute_from": [str(r.path) for r in s.compute_runs] or None,
            "check": [str(r.path) for r in s.check_runs] or None,
            "accept_busy": s.accept_busy, "nccl_version": s.nccl_version,
            "cycle_ms": s.cycle_ms, "step_spread": s.step_spread,
            "max_band_points": MAX_BAND_POINTS,
        },
        "links": [lf.doc() for lf in link_fits],
        "projections": rows,
        **({"nothing_to_project": nothing} if nothing else {}),
        "skipped_cases": skipped,
        "notes": list(dict.fromkeys(notes)),
        "records_not_used": ex.skipped + checks.skipped,
        "collective_checks": collective_checks(link_fits, checks),
    }  # fmt: skip


@dataclass
class _Measured:
    """What an allreduce case's records said, for the strategies of its group."""

    overlap: M.Overlap
    contention: float


#: a confidence interval wider than this share of its median says little more than "positive":
#: a noise allowance never reaches zero (a 3-sample record spanning 1-190 ms still says its
#: median was not 1 ms)
MAX_NOISE = 0.9


def _tolerance(t: TrainPoint, compute_s: float, compute_rel: float) -> float:
    """A record's noise in seconds: its confidence interval (capped at ``MAX_NOISE``) and its
    compute's (a compute noisier than ``MAX_NOISE`` is not fitted)."""
    return t.step_s * min(t.rel_ci, MAX_NOISE) + compute_s * compute_rel


def _project_case(
    case: Case,
    ex: Extracted,
    elsewhere: Extracted | None,
    s: Settings,
    by_key: dict[tuple[str, str, str, str], LinkFit],
    groups: dict[tuple[Any, ...], _Measured],
    notes: list[str],
    check_ids: set[str],
) -> list[dict[str, Any]]:
    first = case.first
    mach = first.machine
    cpts = [c for c in _compute_points(case, ex, elsewhere) if c.record not in check_ids]
    if elsewhere is not None and not any(c.arch == first.arch for c in elsewhere.compute):
        notes.append(
            f"{case.label}: --compute-from holds no one-rank record of this network (a user's "
            "file is the same network at another path only where both records give its digest, "
            "work.model_sha256); its compute is this run's own"
        )
    if not cpts:
        raise ConfigError(
            f"{case.label}: no one-rank compute record for this network (data_parallel at 1 rank "
            "or network train on the same framework and device); add one or give --compute-from"
        )
    compute = M.fit_compute(cpts)
    if s.step_spread is not None:
        compute = compute.with_spread(s.step_spread, "--step-spread")
    multi = [t for t in case.points if t.ranks > 1]
    backend = next((t.machine.backend for t in multi), None) or next(
        (k[1] for k in by_key if k[0] == mach.framework), "?"
    )
    intra_fit = by_key.get((mach.framework, backend, "intra", "allreduce"))
    inter_fit = by_key.get((mach.framework, backend, "inter", "allreduce"))
    nccl_version = C.parse_version(s.nccl_version or mach.nccl)
    nccl_tree = nccl_version is None or nccl_version >= C.NCCL_TREE_SINCE
    if s.algorithm:
        algorithm, why = s.algorithm, "--algorithm"
    elif backend == "nccl":
        algorithm = C.NCCL
        why = (
            "NCCL: ring or tree, message by message, as its tuning model picks (tree from 2.4; "
            + (f"NCCL {s.nccl_version or mach.nccl}" if nccl_version else "version not recorded: "
               "2.4 or later assumed") + ")"
        )  # fmt: skip
        if not nccl_tree:
            algorithm, why = "ring", f"NCCL {s.nccl_version or mach.nccl} has no tree (before 2.4)"
    elif intra_fit is not None and intra_fit.best:
        algorithm, why = (
            intra_fit.best,
            (
                f"best fit of {mach.framework} {backend} allreduce over world sizes "
                f"{', '.join(map(str, sorted({q.ranks for q in intra_fit.fits['ring'].points})))}"
            ),
        )
    else:
        algorithm, why = (
            "ring",
            (
                "assumed: the records span one world size, which cannot tell ring from "
                "halving-doubling (gloo's allreduce and NCCL's default for large messages are rings)"
            ),
        )
    fit_alg = "ring" if algorithm == C.NCCL else algorithm
    hw = s.hardware
    problems: list[str] = []
    # -- the links: a fitted term at its bound is a problem where the fit is used
    for lf, given in ((intra_fit, hw.intra), (inter_fit, hw.inter)):
        if lf is None:
            continue
        f = lf.fits[fit_alg]
        used = given.latency_s is None or given.bandwidth is None
        if f.at_bound and used:
            problems.append(f"the {lf.backend} allreduce sweep ({lf.scope} node): {f.at_bound[0]}")
    measured_share = None
    if inter_fit is not None and hw.inter.bandwidth is not None:
        fitted_bw = inter_fit.fits[fit_alg].bandwidth
        share = fitted_bw / hw.inter.bandwidth
        if share > 1.0:
            problems.append(
                f"the multi-node allreduce sweep carried {fitted_bw / 1e9:.3g} GB/s, more than "
                f"the given line rate {hw.inter.bandwidth / 1e9:.3g} GB/s"
            )
        else:
            measured_share = (share, f"fitted: your multi-node {backend} allreduce sweep carried "
                              f"{100 * share:.0f}% of the given line rate")  # fmt: skip
    fitted_intra = _link_from(intra_fit, algorithm, "inside a node")
    fitted_inter = _link_from(inter_fit, algorithm, "between nodes")
    intra = resolve(hw.intra, fitted_intra, "intra_node", "intra")
    inter = resolve(hw.inter, fitted_inter, "inter_node", "inter", measured_share)
    if intra is None and inter is not None:
        # only sweeps across nodes: their link stands in where ranks would share a node
        intra = dataclasses.replace(
            inter,
            source=inter.source + " (no sweep inside a node: the inter-node figures stand in)",
        )
    if intra is None:
        raise ConfigError(
            f"{case.label}: no allreduce sweep of {mach.framework} {backend} in these runs to fit "
            "the link; add the allreduce benchmark or give --intra-bw and --latency"
        )
    # the records were measured on the links their sweeps fitted, not on the what-if ones:
    # what they say beyond the model is read against those
    measured_links = (fitted_intra or intra, fitted_inter or inter)
    lf_used = inter_fit if inter_fit is not None else intra_fit
    launch = lf_used.fits[fit_alg].launch_s if lf_used is not None else 0.0
    launch_why = (
        "fitted: the sweeps span several world sizes" if launch > 0 else
        "in the fitted latency (one world size cannot tell a call's launch from its steps)"
    )  # fmt: skip
    if algorithm == C.NCCL and (lf_used is None or hw.intra.bandwidth is not None):
        launch, launch_why = C.NCCL_LAUNCH_S, "NCCL's base latency per call (tuning.cc, Simple)"
    # a sweep at one world size fits the same time with its latency all per step (as taken) or
    # all per call (a launch the rank count does not multiply): the band spans both
    split: tuple[tuple[C.Link, C.Link | None], float] | None = None
    if (launch == 0.0 and lf_used is not None and lf_used is intra_fit
            and len(lf_used.world_sizes) == 1 and intra.line_rate is None
            and algorithm != C.NCCL):  # fmt: skip
        steps, _ = C.factors("allreduce", algorithm, lf_used.world_sizes[0])
        kept = 1e-3  # of the latency per step: a latency stays strictly positive
        split = (
            (dataclasses.replace(intra, latency_s=intra.latency_s * kept), inter),
            steps * intra.latency_s * (1 - kept),
        )
    grad, grad_src = _grad_bytes(case, ex)
    # the records were measured at their own bucket (the run's, else the framework's): the fit
    # reads them at it; --bucket is a what-if for the projected rows, as a given link is
    measured_bucket = first.bucket or M.DEFAULT_BUCKET.get(mach.framework)
    bucket = s.bucket if s.bucket is not None else measured_bucket
    if s.bucket is not None and grad / s.bucket > MAX_MESSAGES:
        # `--bucket 25` is 25 bytes: thousands of messages the model walks one by one, and
        # rows that cannot fit, where 25 MiB was meant (the published file's rule)
        raise ConfigError(
            f"--bucket {s.bucket:.0f} bytes: cuts {case.label}'s {grad / 1e6:.3g} MB gradient "
            f"into {grad / s.bucket:,.0f} messages a step, more than the model takes "
            f"({MAX_MESSAGES:,}): give a size with its unit, e.g. 25MiB (a bare number is bytes)"
        )
    cyclic = mach.framework in M.CYCLE_FUSION and first.strategy in M.OVERLAPPED
    layers = _ddp_layers(case, grad) if mach.framework == "pytorch" or cyclic else None
    xla = mach.framework in M.XLA_CPU and backend == "gloo" and first.strategy == "allreduce"

    def fusion_at(size: float | None) -> M.Fusion:
        # Horovod's NCCL path enqueues each allreduce on a stream and its thread goes on; on the
        # CPU (MPI, gloo) the thread runs the allreduce itself
        if cyclic:
            return M.Fusion(
                "cycle",
                size,
                (s.cycle_ms or first.cycle_ms or M.HOROVOD_CYCLE_S * 1e3) * 1e-3,
                async_ops=backend == "nccl",
                granules=layers,
            )  # fmt: skip
        return (_xla_cpu_messages(case, grad, size) if xla else None) or M.Fusion(
            "buckets", size, layers=layers
        )

    fusion = fusion_at(bucket)
    xla_cpu = xla and fusion.mode == "tensors"  # JAX's own messages, not DDP's buckets
    measured_fusion = fusion if measured_bucket == bucket else fusion_at(measured_bucket)
    membw = next(
        (c.machine.memory_bandwidth for c in cpts if c.machine.memory_bandwidth),
        ex.memory_bandwidth.get(mach.device_name),
    )
    copies = mach.framework in M.DEFAULT_BUCKET and first.strategy in M.OVERLAPPED
    default_g = hw.gpus_per_node or (inter_fit.ranks_per_node if inter_fit else None)
    ratio = next((t.compression_ratio for t in multi if t.compression_ratio), None)
    cut = next((t.sent_bytes for t in multi if first.strategy == "pipeline" and t.sent_bytes), None)
    max_stages = pipeline_max_stages(first.arch_params) if first.strategy == "pipeline" else None

    def placement(
        p: int, g: int, links: tuple[C.Link, C.Link | None] | None = None,
        launch_s: float | None = None, as_measured: bool = False,
    ) -> M.Placement:  # fmt: skip
        """``as_measured``: at the records' own bucket (a fit to them), not --bucket's."""
        li, le = links or (intra, inter)
        size, fused = (measured_bucket, measured_fusion) if as_measured else (bucket, fusion)
        if math.ceil(p / g) > 1 and le is None:
            raise ConfigError(
                f"{case.label}: {p} ranks at {g} per node span {math.ceil(p / g)} nodes, but no "
                "inter-node link is known: give --inter-bw and --inter-latency (or "
                "[network.inter_node] in the site profile), or add records run on several nodes"
            )
        assert li is not None
        return M.place(p, g, li, le, algorithm, size, compute,
                       launch_s=launch if launch_s is None else launch_s,
                       nccl_tree=nccl_tree, fusion=fused, memory_bandwidth=membw, copies=copies)  # fmt: skip

    def batches(p: int) -> tuple[float, float]:
        if first.strategy == "pipeline":
            return float(first.batch), float(first.batch)
        if first.scaling == "strong":
            return float(first.batch), first.batch / p
        return float(first.batch * p), float(first.batch)

    def breakdown(p: int, g: int, ov: M.Overlap, overhead: float, comp: M.Compute | None = None,
                  links: tuple[C.Link, C.Link | None] | None = None,
                  contention: float = 1.0, launch_s: float | None = None,
                  as_measured: bool = False) -> M.Breakdown:  # fmt: skip
        gb, pb = batches(p)
        return M.step(
            first.strategy, first.options, comp or compute, pb, gb, grad,
            placement(p, g, links, launch_s, as_measured),
            ov, overhead, ratio, s.servers, cut, contention,
        )  # fmt: skip

    # -- the inputs' load: records the quiet check called busy
    fit_rows = [t for t in multi if _in_fit(t.ranks, s) and t.record not in check_ids]
    loads = [(c.record, c.load) for c in cpts] + [(t.record, t.load) for t in fit_rows]
    for lf in (intra_fit, inter_fit):
        if lf is not None and (hw.intra.bandwidth is None or lf.scope == "inter"):
            loads += lf.loads
    busy_found = _busy(loads)
    busy, busy_ids = busy_found if busy_found else ("", [])
    load_text = _load_text([ld for _, ld in loads])
    if busy and not s.accept_busy:
        problems.append(f"{busy} (--accept-busy fits them)")
    # -- calibration on this case's multi-rank records in the fit set
    group = (first.benchmark, first.arch, first.batch, first.scaling, mach.key)
    none = M.Overlap("none")
    contention = 1.0
    overhead = 0.0
    in_sample: list[dict[str, Any]] = []
    u_fit = 0.0
    overlap = M.Overlap("timeline")
    if xla_cpu:
        overlap = M.Overlap(
            "none",
            why="XLA combines the step's pmeans into one all-reduce, which starts once the last "
            "gradient is made",
        )
    overlap_assumed = True  # neither given (--overlap) nor measured (a multi-rank record)

    def overlap_at(p: int, g: int, links: tuple[C.Link, C.Link | None] | None = None) -> M.Overlap:
        return _assumed(overlap, overlap_assumed, p, g, placement(p, g, links), compute)

    calibration_note = ""
    try:
        if problems:
            raise CannotFit(problems[0])
        if compute.rel_u > MAX_NOISE:
            raise CannotFit(
                f"the one-rank compute is uncertain by {100 * compute.rel_u:.0f}% (its records' "
                f"confidence intervals, or records of one batch disagreeing), more than "
                f"{100 * MAX_NOISE:.0f}%: measure the one-rank records again at a quiet time"
            )
        # compute slowed by sharing the node, where measured (the step without its exchange)
        ratios = []
        for t in fit_rows:
            if t.no_exchange_s and t.no_exchange_s > 0 and first.strategy == "allreduce":
                g = math.ceil(t.ranks / t.nodes)
                # the step without its exchange waits for no other rank: the median compute
                nb = breakdown(t.ranks, g, none, 0.0, as_measured=True)
                model_c = nb.compute - nb.straggle
                # a CPU rank given fewer threads than the one-rank record ran with is modelled
                # with perfect thread scaling; the measured step says how far that holds, down
                # to no gain from the threads at all (the floor): below it, one rank was slower
                pl = placement(t.ranks, g, as_measured=True)
                floor = M.thread_floor(compute, pl)
                tol = t.no_exchange_s * min(t.rel_ci, MAX_NOISE) + model_c * compute.rel_u
                if t.no_exchange_s < model_c * floor - tol:
                    per_rank = compute.seconds(batches(t.ranks)[1])
                    threads = (
                        f"; the one-rank record ran {compute.threads} threads, each of these "
                        f"ranks {pl.threads}, so {model_c * floor * 1e3:.3g} ms even if its "
                        "threads gained nothing"
                        if floor < 1.0 else ""
                    )  # fmt: skip
                    raise CannotFit(
                        f"1 rank slower than {t.ranks}: one rank's compute ({per_rank * 1e3:.3g} "
                        f"ms at the same per-rank batch, {model_c * 1e3:.3g} ms with the ranks "
                        f"sharing the node's cores) is longer than {t.ranks} ranks' step without "
                        f"its exchange ({t.no_exchange_s * 1e3:.3g} ms){threads}"
                    )
                ratios.append(max(floor, t.no_exchange_s / model_c))
        if ratios:
            contention = float(np.median(ratios))
        # the records at the fitted rank counts bound the wait for the slowest rank: a step
        # shorter than its median compute plus the expected wait (a spread inflated by drift
        # the ranks share, a loaded machine's) caps the spread at what the step leaves room for
        if compute.spread > 0 and s.step_spread is None:
            caps = []
            for t in fit_rows:
                g = math.ceil(t.ranks / t.nodes)
                b = breakdown(t.ranks, g, none, 0.0, contention=contention, as_measured=True)
                median = b.compute - b.straggle
                room = t.step_s - median - b.copies
                if b.straggle > room:
                    caps.append(max(0.0, room) / (median * M.expected_max_normal(t.ranks)))
            if caps:
                capped = min(caps)
                compute = compute.with_spread(
                    capped,
                    f"{compute.spread_from}; capped at {100 * capped:.2g}% by the records at the "
                    "fitted rank counts (their steps leave no room for more waiting)",
                )
        if s.overlap != "auto":
            overlap_assumed = False
            overlap = (M.Overlap(s.overlap) if s.overlap in M.OVERLAP_MODES
                       else M.Overlap("fixed", float(s.overlap)))  # fmt: skip
        elif first.strategy == "allreduce" and fit_rows:
            cal_rows, tols, backs = [], [], []
            for t in fit_rows:
                g = math.ceil(t.ranks / t.nodes)
                b = breakdown(t.ranks, g, none, 0.0, links=measured_links, contention=contention,
                              as_measured=True)  # fmt: skip
                cal_rows.append((t.step_s, b.compute, b.copies, b.exchange, t.record))
                # waiting for the slowest rank is an expectation, not a floor
                tols.append(_tolerance(t, b.compute, compute.rel_u) + b.straggle)
                backs.append(M.BACKWARD_FRACTION * b.compute)
            cal = M.calibrate(cal_rows, tols, backs)
            if cal.problem and "shorter than its compute" in cal.problem:
                t = fit_rows[0]
                why = f"1 rank slower than {t.ranks}: {cal.problem}"
                pl = placement(t.ranks, math.ceil(t.ranks / t.nodes))
                if ratios:
                    # the compute is the one measured at these ranks, not the one-rank record's
                    why = (
                        f"{cal.problem}, with the compute measured at {t.ranks} ranks (their step "
                        "without the exchange): the exchange took less than the model gives it "
                        "(the allreduce sweep's link, the framework's messages, at most the "
                        "backward pass hidden)"
                    )
                elif M.thread_floor(compute, pl) < 1.0:
                    # the compute at the ranks' thread count is assumed, not measured
                    why += (
                        f"; the one-rank record ran {compute.threads} threads, each of these "
                        f"ranks {pl.threads}, and perfect thread scaling was assumed (these "
                        "records hold no step without the exchange to measure it): measure the "
                        f"one-rank records with OMP_NUM_THREADS={pl.threads}, or give "
                        "--compute-from a run measured so"
                    )
                raise CannotFit(why)
            if cal.problem:
                raise CannotFit(cal.problem)
            overlap, overhead = cal.overlap, cal.overhead
            overlap_assumed = False
            groups[group] = _Measured(overlap, contention)
        elif group in groups:
            overlap, contention = groups[group].overlap, groups[group].contention
            overlap_assumed = False
        if first.strategy != "allreduce" and fit_rows and s.overlap == "auto":
            rows_o, tols = [], []
            for t in fit_rows:
                g = math.ceil(t.ranks / t.nodes)
                ov = overlap_at(t.ranks, g, measured_links)
                b = breakdown(t.ranks, g, ov, 0.0, links=measured_links, contention=contention,
                              as_measured=True)  # fmt: skip
                rows_o.append((t.step_s, b.total, t.record))
                # waiting for the slowest rank is an expectation, not a floor
                tols.append(_tolerance(t, b.compute, compute.rel_u) + b.straggle)
            overhead, problem = M.fitted_overhead(rows_o, tols)
            if problem:
                raise CannotFit(problem)
        for t in fit_rows:
            g = math.ceil(t.ranks / t.nodes)
            ov = overlap_at(t.ranks, g, measured_links)
            b = breakdown(t.ranks, g, ov, overhead, links=measured_links, contention=contention,
                          as_measured=True)  # fmt: skip
            # the noise the fit allowed this record: how far the model may honestly miss it
            noise = (_tolerance(t, b.compute, compute.rel_u) + b.straggle) / t.step_s
            in_sample.append({"record": t.record, "ranks": t.ranks, "nodes": t.nodes,
                              "measured_step_s": t.step_s, "model_step_s": b.total,
                              "error": b.total / t.step_s - 1.0, "noise": noise})  # fmt: skip
        if len(in_sample) > 1:
            u_fit = float(np.sqrt(np.mean([e["error"] ** 2 for e in in_sample])))
    except CannotFit as exc:
        calibration_note = str(exc)
    # the fitted multi-rank records' own noise (their confidence intervals): whatever term
    # took up their steps (the overhead, the hidden share) is known only to within it
    u_records = (
        float(np.sqrt(np.mean([(t.step_s * min(t.rel_ci, MAX_NOISE)) ** 2 for t in fit_rows])))
        if fit_rows and not calibration_note
        else 0.0
    )
    u_comm = 2.0 * (intra_fit.fits[fit_alg].rms if intra_fit else 0.0)
    if inter_fit is not None:
        u_comm = max(u_comm, 2.0 * inter_fit.fits[fit_alg].rms)
    fitted_from = sorted(
        set(compute.fitted_from)
        | {q.record for lf in (intra_fit, inter_fit) if lf for q in lf.fits[fit_alg].points}
        | {t.record for t in fit_rows}
    )
    # where a layout was measured both in a fitted run and in a --check run, the fitted one is
    # shown (the other is another sample of the same point, in "also_measured")
    measured: dict[tuple[int, int], TrainPoint] = {}
    also: dict[tuple[int, int], list[TrainPoint]] = {}
    for t in sorted(case.points, key=lambda t: t.record in check_ids):
        key = (t.ranks, min(t.ranks, math.ceil(t.ranks / t.nodes)))
        if key in measured:
            also.setdefault(key, []).append(t)
        else:
            measured[key] = t
    rows = []
    for p, g in _layouts(case, s.ranks, default_g):
        gb, pb = batches(p)
        row: dict[str, Any] = {
            "case": case.label, "network": arch_label(first.arch_params),
            "benchmark": first.benchmark, "strategy": first.strategy, "options": first.options,
            "scaling": first.scaling, "framework": mach.framework, "backend": backend,
            "device": f"{mach.device_kind} ({mach.device_name})", "ranks": p,
            "ranks_per_node": min(g, p), "nodes": math.ceil(p / g),
            "global_batch": gb, "per_rank_batch": pb, "bucket_bytes": bucket,
        }  # fmt: skip
        if first.strategy != "pipeline" and first.scaling == "strong" and pb < 1:
            row["not_possible"] = (
                f"the global batch {first.batch} gives each of {p} ranks less than one sample"
            )
            rows.append(row)
            continue
        if first.strategy == "pipeline" and p > 1 and p > (max_stages or p):
            row["not_possible"] = f"the network cuts into at most {max_stages} pipeline stages"
            rows.append(row)
            continue
        if calibration_note:
            row["cannot_fit"] = calibration_note + (f"; {load_text}" if load_text else "")
            row["fitted_from"] = fitted_from
            if busy_ids:
                row["busy_records"] = busy_ids
            rows.append(row)
            continue
        pl = placement(p, g)  # a ConfigError when the ranks span nodes and no link between is known
        ov = _assumed(overlap, overlap_assumed, p, g, pl, compute)
        row.update(_numbers(
            p, g, pl, compute, ov, overhead, contention, intra, inter, u_comm, u_fit,
            breakdown, batches, split, u_records,
        ))  # fmt: skip
        alts = {}
        for alg in C.ALL_ALGORITHMS:
            if alg == C.NCCL and backend != "nccl":
                continue
            alt_place = dataclasses.replace(pl, algorithm=alg)
            ab = M.step(first.strategy, first.options, compute, pb, gb, grad, alt_place,
                        ov, overhead if p > 1 else 0.0, ratio, s.servers, cut,
                        contention)  # fmt: skip
            alts[alg] = {"step_s": ab.total, "scaling_efficiency": row["_eff_of"](ab.total)}
        row.pop("_eff_of")
        row.update({
            "algorithm": algorithm, "algorithm_why": why,
            "launch_s": launch, "launch_from": launch_why,
            "exchange_model": row.pop("_note"), "overlap": ov.describe(),
            "fusion": fusion.describe(),
            "threads_per_rank": pl.threads, "compute_stretch": pl.stretch,
            "compute_contention": contention if p > 1 and pl.topology.local > 1 else 1.0,
            "oversubscribed": pl.oversubscribed,
            "gradient_bytes": grad, "gradient_bytes_from": grad_src,
            "memory_bandwidth_bytes_per_s": membw,
            "compute": compute.describe(),
            "links": {"intra_node": link_doc(intra), "inter_node": link_doc(inter)},
            "other_algorithms": alts,
            "fitted_from": fitted_from,
            "model_error": {
                "collective_fit_rms": (lf_used.fits[fit_alg].rms if lf_used else None),
                "compute_residuals": compute.residuals,
                "in_sample": in_sample,
            },
        })  # fmt: skip
        if busy:
            row["busy"] = f"fitted although {busy} (--accept-busy)" + (
                f"; {load_text}" if load_text else ""
            )
            row["busy_records"] = busy_ids
        if membw is None and copies and p > 1:
            row["copies_note"] = (
                "the framework's bucket copies are not in the model: no memory-bandwidth record "
                "for this device in the runs"
            )
        if pl.oversubscribed:
            fewer = (
                f", each against the 1-rank record's {compute.threads}"
                if compute.threads and compute.threads != pl.threads
                else ""
            )
            row["note"] = (
                f"oversubscribed: {min(g, p)} ranks a node x {pl.threads} thread(s) on "
                f"{compute.cores} cores{fewer} (compute x{pl.stretch:.2g})"
            )
            row["oversubscription"] = (
                "compute stretched by ranks x threads / cores, and by the 1-rank record's "
                "threads over a rank's (perfect thread scaling); the exchange's waits for "
                "descheduled ranks are not modelled"
            )
        seen = measured.get((p, min(g, p)))
        if seen is not None:
            row["measured"] = {
                "record": seen.record,
                "step_s": seen.step_s,
                "throughput": seen.throughput,
                "in_fit": seen.record not in check_ids and (p == 1 or seen in fit_rows),
            }
            # measured on the run's own links and bucket; a row on links given by the flags or
            # a profile, or on --bucket's, is a what-if, and its difference from the
            # measurement no error of the model: the JSON names it a difference, not an error
            on_given = [scope for scope, d in row["links"].items()
                        if d and d.get("line_rate_bytes_per_s") is not None
                        and (scope == "intra_node" or row["nodes"] > 1)]  # fmt: skip
            if on_given and p > 1:
                row["measured"]["links_given"] = on_given
            if bucket != measured_bucket and p > 1:
                row["measured"]["bucket_given"] = bucket
                row["measured"]["records_bucket"] = measured_bucket
            what_if = p > 1 and (on_given or bucket != measured_bucket)
            err_key = "throughput_difference" if what_if else "throughput_error"
            row["measured"][err_key] = row["throughput"] / seen.throughput - 1.0
            if what_if:
                row["measured"]["difference_is"] = (
                    "a what-if: this row on the given " + " and ".join(
                        [f"{sc.replace('_', '-')} link" for sc in on_given]
                        + (["bucket (--bucket)"] if bucket != measured_bucket else [])
                    ) + ", the record on the run's own; not an error of the model"
                )  # fmt: skip
            if also.get((p, min(g, p))):
                row["also_measured"] = [
                    {"record": t.record, "throughput": t.throughput,
                     err_key: row["throughput"] / t.throughput - 1.0}
                    for t in also[(p, min(g, p))]
                ]  # fmt: skip
        rows.append(row)
    one = measured.get((1, 1))
    model_one = next((r["throughput"] for r in rows if r["ranks"] == 1 and "throughput" in r),
                     None)  # fmt: skip
    for row in rows:
        m = row.get("measured")
        if m is not None and one is not None and row["ranks"] > 1:
            # as the run's own table gives it: against the measured one rank, not the model's
            m["scaling_efficiency"] = m["throughput"] / (row["ranks"] * one.throughput)
            m["one_rank_error"] = None if model_one is None else model_one / one.throughput - 1
    return rows


def _assumed(
    overlap: M.Overlap, assumed: bool, p: int, g: int, pl: M.Placement, compute: M.Compute
) -> M.Overlap:
    """The overlap at ``p`` ranks, ``g`` a node: ``overlap`` where it was given or measured,
    else none where no core is idle (``_no_idle_core``), else ``overlap`` (the timeline)."""
    rule = assumed and overlap.mode != "none"  # none already (XLA's): nothing more to say
    return (_no_idle_core(p, g, pl, compute) if rule else None) or overlap


def _no_idle_core(p: int, g: int, pl: M.Placement, compute: M.Compute) -> M.Overlap | None:
    """No overlap where a CPU node has no core to spare: gloo's exchange runs on threads of its
    own, which then take turns with the compute on the same cores, so nothing of it hides behind
    the backward pass (measured on this project's 2-core VM: 1 MiB buckets, 40 messages a step,
    cost 7-11% more than 25 MiB's 2, the opposite of what hiding them would give;
    docs/guide/projection.md, "Small buckets cost"). None where a core is idle or the node is a GPU's."""
    local = min(g, p)
    threads = pl.threads or 1
    if p < 2 or compute.device_kind != "cpu" or not compute.cores:
        return None
    if local * threads < compute.cores:
        return None
    return M.Overlap(
        "none",
        why=f"no idle core: {local} rank(s) x {threads} thread(s) on {compute.cores} cores, so "
        "the exchange's own threads take turns with the compute and nothing of it hides",
    )


def _numbers(
    p: int,
    g: int,
    pl: M.Placement,
    compute: M.Compute,
    overlap: M.Overlap,
    overhead: float,
    contention: float,
    intra: C.Link,
    inter: C.Link | None,
    u_comm: float,
    u_fit: float,
    breakdown: Callable[..., M.Breakdown],
    batches: Callable[[int], tuple[float, float]],
    split: tuple[tuple[C.Link, C.Link | None], float] | None = None,
    u_records: float = 0.0,
) -> dict[str, Any]:
    """A projected row's figures: step, throughput, efficiency, the band from every source, the
    dominant term, and the cause of an efficiency above 100%. ``u_records``: the fitted
    multi-rank records' noise in seconds (their confidence intervals), carried to every rank
    count with several ranks as the overhead moved by it."""
    gb, _ = batches(p)
    gb1, _ = batches(1)
    oh = overhead if p > 1 else 0.0

    def eff_at(comp: M.Compute | None = None, links: tuple[C.Link, C.Link | None] | None = None,
               scale: float = 1.0, launch_s: float | None = None,
               extra_s: float = 0.0) -> tuple[float, float]:  # fmt: skip
        b = breakdown(p, g, overlap, max(0.0, oh + extra_s), comp, links, contention, launch_s)
        base = breakdown(1, 1, overlap, 0.0, comp, links, contention, launch_s).total
        step_s = b.total * scale
        return step_s, (gb / step_s) / (p * gb1 / base)

    b = breakdown(p, g, overlap, oh, contention=contention)
    base1 = breakdown(1, 1, overlap, 0.0, contention=contention).total
    tp = gb / b.total
    eff = tp / (p * gb1 / base1)
    # the band: each source moved to its ends, the deviations added in quadrature
    sources: dict[str, tuple[tuple[float, float], tuple[float, float]]] = {}
    if compute.rel_u > 0:
        u = compute.rel_u  # at most MAX_NOISE: a noisier compute is not fitted
        sources["compute (its records' confidence interval or fit residual)"] = (
            eff_at(compute.scaled(1 - u)),
            eff_at(compute.scaled(1 + u)),
        )
    if compute.spread > 0 and p > 1:
        u_s = 2.29 / math.sqrt(compute.spread_n) if compute.spread_n > 0 else 0.0
        if u_s > 0:
            sources["the slowest rank's wait (the step-time spread's 95% interval)"] = (
                eff_at(compute.with_spread(compute.spread * max(0.0, 1 - u_s))),
                eff_at(compute.with_spread(compute.spread * (1 + u_s))),
            )
    if u_comm > 0 and b.exposed > 0:

        def scaled_links(k: float) -> tuple[C.Link, C.Link | None]:
            def one(link: C.Link | None) -> C.Link | None:
                if link is None or link.line_rate is not None:
                    return link  # a given link's uncertainty is its share of line rate
                return dataclasses.replace(link, latency_s=link.latency_s * k,
                                           bandwidth=link.bandwidth / k)  # fmt: skip

            li = one(intra)
            assert li is not None
            return li, one(inter)

        sources["the collective fit (2 x its rms residual)"] = (
            eff_at(links=scaled_links(max(1e-3, 1 - u_comm))),
            eff_at(links=scaled_links(1 + u_comm)),
        )
    for name, link in (("inside a node", intra), ("between nodes", inter)):
        if link is None or link.share_range is None or link.line_rate is None:
            continue
        if name == "between nodes" and pl.topology.nodes < 2:
            continue
        lo_s, hi_s = link.share_range
        if hi_s <= lo_s:
            continue

        def at(share: float, name: str = name, link: C.Link = link) -> tuple[C.Link, C.Link | None]:
            if name == "inside a node":
                return link.at_share(share), inter
            return intra, link.at_share(share)

        label = f"the share of line rate {name} ({lo_s:.2f}-{hi_s:.2f}, {link.kind or 'kind not known'})"
        sources[label] = (eff_at(links=at(lo_s)), eff_at(links=at(hi_s)))
    if split is not None and p > 1 and b.exchange > 0:
        sources["the fitted latency per step or per call (the sweep spans one world size)"] = (
            eff_at(),
            eff_at(links=split[0], launch_s=split[1]),
        )
    if u_records > 0 and p > 1:
        sources["the noise of the fitted multi-rank records (their confidence intervals)"] = (
            eff_at(extra_s=-u_records),
            eff_at(extra_s=u_records),
        )
    if u_fit > 0 and p > 1:
        uf = min(u_fit, 0.9)
        sources["the calibration's residuals at the fitted rank counts"] = (
            eff_at(scale=1 + uf),
            eff_at(scale=1 - uf),
        )
    # deviations added in quadrature as ratios (a step and an efficiency stay positive
    # however many sources push them down); an efficiency band stops at 100% unless the
    # projection itself is above it with its cause
    step_dev_lo = step_dev_hi = eff_dev_lo = eff_dev_hi = 0.0
    moves: dict[str, float] = {}
    for name, ends in sources.items():
        steps = [e[0] for e in ends]
        effs = [e[1] for e in ends]
        step_dev_lo += max(0.0, math.log(b.total / min(steps))) ** 2
        step_dev_hi += max(0.0, math.log(max(steps) / b.total)) ** 2
        eff_dev_lo += max(0.0, math.log(eff / min(effs))) ** 2
        eff_dev_hi += max(0.0, math.log(max(effs) / eff)) ** 2
        moves[name] = 100.0 * (max(effs) - min(effs))
    step_band = [
        b.total * math.exp(-math.sqrt(step_dev_lo)),
        b.total * math.exp(math.sqrt(step_dev_hi)),
    ]
    eff_band = [
        eff * math.exp(-math.sqrt(eff_dev_lo)),
        min(eff * math.exp(math.sqrt(eff_dev_hi)), max(1.0, eff)),
    ]
    width = 100.0 * (eff_band[1] - eff_band[0])
    parts = b.parts()
    dominant = max(parts, key=lambda k: parts[k])
    out: dict[str, Any] = {
        "step_s": b.total, "step_s_band": step_band,
        "throughput": tp, "throughput_band": [gb / step_band[1], gb / step_band[0]],
        "scaling_efficiency": eff, "scaling_efficiency_band": eff_band,
        "band_points": width, "band_sources": moves,
        "band_usable": width <= MAX_BAND_POINTS,
        "compute_s": b.compute, "exchange_s": b.exchange, "exposed_s": b.exposed,
        "copies_s": b.copies, "overhead_s": b.overhead, "hidden_share": b.hidden_share,
        "straggler_s": b.straggle, "interference_s": b.interfered,
        "messages_per_step": b.messages, "exchange_latency_s": b.latency,
        "dominant": dominant, "dominant_share": parts[dominant] / b.total if b.total > 0 else 0.0,
        "_note": b.note,
        "_eff_of": lambda step_s: (gb / step_s) / (p * gb1 / base1),
    }  # fmt: skip
    if not out["band_usable"]:
        worst = max(moves, key=lambda k: moves[k]) if moves else "?"
        out["no_band"] = (
            f"no usable band: {width:.0f} points wide (more than {MAX_BAND_POINTS:.0f}); "
            f"{worst} alone moves it {moves.get(worst, 0):.0f} points"
        )
    if eff > 1.0 + 1e-9:
        if pl.stretch < 1.0:
            out["above_100"] = (
                f"each rank runs {pl.threads} threads against the one-rank record's "
                f"{compute.threads}: compute x{pl.stretch:.2g} (perfect thread scaling assumed)"
            )
        else:
            out["above_100"] = "no cause in the model: please report it"
    return out
