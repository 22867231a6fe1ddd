"""``dlsuite project``'s engine: from runs' records to projections at other rank counts.

:func:`project` fits the links (alpha-beta, per collective, framework and backend, inside a node
and between nodes), the compute per step at one rank, the hidden share of the exchange and each
strategy's overhead, then predicts every network x strategy of the runs at the asked rank counts
and at every layout the runs measured, saying for each row which records it was fitted from,
its model error on them, and, where the runs measured the same layout, the error against it.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from suite import strategies as S
from suite.errors import ConfigError
from suite.projection import collectives as C
from suite.projection import model as M
from suite.projection.hardware import Hardware, link_doc, resolve
from suite.projection.records import (
    ComputePoint,
    Extracted,
    TrainPoint,
    arch_label,
    extract,
    pipeline_max_stages,
    trainable_tensors,
)
from suite.report.load import Run, label_runs

SCHEMA = "dlsuite-projection/1"


@dataclass
class Settings:
    ranks: list[int]
    #: multi-rank records the model may be fitted to (by world size); None: all. One-rank
    #: compute records are always used (compute is "one rank alone" by definition).
    fit_ranks: list[int] | None = None
    algorithm: str | None = None  # None: the best-fitting one where measured, else ring
    overlap: str = "auto"  # auto | timeline | none | full | a hidden share in [0, 1]
    bucket: float | None = None  # bytes per bucket; None: the framework's default
    servers: int = 1  # parameter servers
    hardware: Hardware = field(default_factory=Hardware)
    compute_runs: Sequence[Run] = ()
    #: runs only compared with, never fitted to (e.g. the same benchmarks at 3 and 4 ranks)
    check_runs: Sequence[Run] = ()

    def check(self) -> None:
        if not self.ranks:
            raise ConfigError("--ranks: give at least one rank count, e.g. --ranks 2,8,64")
        bad = [r for r in self.ranks + list(self.fit_ranks or []) if r <= 0]
        if bad:
            raise ConfigError(f"--ranks/--fit-ranks: {bad[0]} is not a positive rank count")
        if self.algorithm is not None and self.algorithm not in C.ALGORITHMS:
            raise ConfigError(
                f"--algorithm {self.algorithm!r}: choose one of {', '.join(C.ALGORITHMS)}"
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


def _in_fit(ranks: int, s: Settings) -> bool:
    """Whether a training record of ``ranks`` ranks may be fitted to (collectives always are)."""
    return ranks == 1 or s.fit_ranks is None or ranks in s.fit_ranks


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

    def doc(self) -> dict[str, Any]:
        any_fit = next(iter(self.fits.values()))
        return {
            "framework": self.framework, "backend": self.backend, "scope": self.scope,
            "op": self.op, "best_algorithm": self.best,
            "world_sizes": sorted({q.ranks for q in any_fit.points}),
            "points": len(any_fit.points),
            "fitted_from": sorted({q.record for q in any_fit.points}),
            "algorithms": {
                alg: {"latency_s": f.latency_s, "bandwidth_bytes_per_s": f.bandwidth,
                      "rms_rel_residual": f.rms, "max_abs_rel_residual": f.max_abs}
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
        out.append(LinkFit(fw, backend, scope, op, fits, C.best_algorithm(fits), g))
    return out


def _link_from(lf: LinkFit | None, algorithm: str, what: str) -> C.Link | None:
    if lf is None:
        return None
    f = lf.fits[algorithm]
    n = len(f.points)
    sizes = sorted({q.ranks for q in f.points})
    src = (
        f"fitted by dlsuite project: {lf.framework} {lf.backend} {lf.op}, {algorithm} model, "
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
        kind = "global" if p.scaling == "strong" else "per-rank"
        return f"{arch_label(p.arch_params)} · {what} · {kind} batch {p.batch}"


def _cases(ex: Extracted) -> list[Case]:
    groups: dict[tuple[Any, ...], list[TrainPoint]] = {}
    for tp in ex.training:
        groups.setdefault(tp.case, []).append(tp)
    return [Case(k, sorted(v, key=lambda t: (t.ranks, t.nodes))) for k, v in groups.items()]


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
    for this network (what the adapter exchanged), else counted in the zoo graph."""
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
        raise ConfigError(
            f"{case.label}: cannot count its gradient ({exc}); run the strategies benchmark "
            "for it, which records the bytes"
        ) from None
    return float(n * S.ITEMSIZE), "counted in the zoo's ONNX graph (trainable tensors)"


def _layouts(case: Case, targets: Sequence[int], default_g: int | None) -> list[tuple[int, int]]:
    """(ranks, ranks per node) to predict: the asked counts, and every measured layout."""
    out: dict[tuple[int, int], None] = {}
    for p in targets:
        out[(p, default_g or p)] = None
    for tp in case.points:
        if tp.ranks >= 1:
            out[(tp.ranks, math.ceil(tp.ranks / tp.nodes))] = None
    return sorted(out)


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
    checks = extract(s.check_runs) if s.check_runs else Extracted()
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
    skipped: list[str] = []
    # the hidden share of each (network, batch, machine, benchmark): calibrated on its
    # allreduce case, shared by the strategies of the same group
    overlaps: dict[tuple[Any, ...], M.Overlap] = {}
    cases.sort(key=lambda c: (c.first.strategy != "allreduce", c.label))
    for case in cases:
        try:
            rows += _project_case(case, ex, elsewhere, s, by_key, overlaps, notes, check_ids)
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
        },
        "links": [lf.doc() for lf in link_fits],
        "projections": rows,
        "skipped_cases": skipped,
        "notes": list(dict.fromkeys(notes)),
        "records_not_used": ex.skipped + checks.skipped,
        "collective_checks": collective_checks(link_fits, checks),
    }  # fmt: skip


def _project_case(
    case: Case,
    ex: Extracted,
    elsewhere: Extracted | None,
    s: Settings,
    by_key: dict[tuple[str, str, str, str], LinkFit],
    overlaps: dict[tuple[Any, ...], M.Overlap],
    notes: list[str],
    check_ids: set[str],
) -> list[dict[str, Any]]:
    first = case.first
    mach = first.machine
    cpts = [c for c in _compute_points(case, ex, elsewhere) if c.record not in check_ids]
    if not cpts:
        raise ConfigError(
            f"{case.label}: no one-rank compute record for this network (data_parallel at 1 rank "
            "or network train on the same framework and device); add one or give --compute-from"
        )
    compute = M.fit_compute(cpts)
    multi = [t for t in case.points if t.ranks > 1]
    backend = next((t.machine.backend for t in multi), None) or next(
        (k[1] for k in by_key if k[0] == mach.framework), "?"
    )
    intra_fit = by_key.get((mach.framework, backend, "intra", "allreduce"))
    inter_fit = by_key.get((mach.framework, backend, "inter", "allreduce"))
    if s.algorithm:
        algorithm, why = s.algorithm, "--algorithm"
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
    hw = s.hardware
    intra = resolve(
        hw.intra, _link_from(intra_fit, algorithm, "inside a node"), "intra_node", "intra"
    )
    inter = resolve(
        hw.inter, _link_from(inter_fit, algorithm, "between nodes"), "inter_node", "inter"
    )
    if intra is None and inter is not None:
        # only sweeps across nodes: their link stands in where ranks would share a node
        intra = C.Link(inter.latency_s, inter.bandwidth,
                       inter.source + " (no sweep inside a node: the inter-node figures stand in)",
                       inter.name)  # fmt: skip
    if intra is None:
        raise ConfigError(
            f"{case.label}: no allreduce sweep of {mach.framework} {backend} in these runs to fit "
            "the link; add the allreduce benchmark or give --intra-bw and --latency"
        )
    grad, grad_src = _grad_bytes(case, ex)
    bucket = s.bucket if s.bucket is not None else M.DEFAULT_BUCKET.get(mach.framework)
    default_g = hw.gpus_per_node or (inter_fit.ranks_per_node if inter_fit else None)
    ratio = next((t.compression_ratio for t in multi if t.compression_ratio), None)
    cut = next((t.sent_bytes for t in multi if first.strategy == "pipeline" and t.sent_bytes), None)
    max_stages = pipeline_max_stages(first.arch_params) if first.strategy == "pipeline" else None

    def placement(p: int, g: int) -> M.Placement:
        if math.ceil(p / g) > 1 and inter is None:
            raise ConfigError(
                f"{case.label}: {p} ranks at {g} per node span {math.ceil(p / g)} nodes, but no "
                "inter-node link is known: give --inter-bw and --inter-latency (or "
                "[network.inter_node] in the site profile), or add records run on several nodes"
            )
        return M.place(p, g, intra, inter, algorithm, bucket, compute)

    def batches(p: int) -> tuple[float, float]:
        if first.strategy == "pipeline":
            return float(first.batch), float(first.batch)
        if first.scaling == "strong":
            return float(first.batch), first.batch / p
        return float(first.batch * p), float(first.batch)

    def breakdown(p: int, g: int, ov: M.Overlap, overhead: float) -> M.Breakdown:
        gb, pb = batches(p)
        return M.step(
            first.strategy, first.options, compute, pb, gb, grad, placement(p, g), ov,
            overhead, ratio, s.servers, cut,
        )  # fmt: skip

    # -- calibration on this case's multi-rank records in the fit set
    fit_rows = [t for t in multi if _in_fit(t.ranks, s) and t.record not in check_ids]
    group = (first.benchmark, first.arch, first.batch, first.scaling, mach.key)
    none = M.Overlap("none")
    provisional = [
        (t, breakdown(t.ranks, math.ceil(t.ranks / t.nodes), none, 0.0)) for t in fit_rows
    ]
    if s.overlap not in ("auto",):
        overlap = (
            M.Overlap(s.overlap)
            if s.overlap in M.OVERLAP_MODES
            else M.Overlap("fixed", float(s.overlap))
        )
    elif first.strategy == "allreduce" and provisional:
        overlap, _ = M.calibrate_overlap(provisional)
        overlaps[group] = overlap
    else:
        overlap = overlaps.get(group) or M.Overlap("timeline")
    overhead = 0.0
    if provisional:
        overhead = M.fitted_overhead(
            [(t, breakdown(t.ranks, math.ceil(t.ranks / t.nodes), overlap, 0.0)) for t in fit_rows]
        )
    in_sample: list[dict[str, Any]] = []
    for t in fit_rows:
        b = breakdown(t.ranks, math.ceil(t.ranks / t.nodes), overlap, overhead)
        in_sample.append({"record": t.record, "ranks": t.ranks, "nodes": t.nodes,
                          "measured_step_s": t.step_s, "model_step_s": b.total,
                          "error": b.total / t.step_s - 1.0})  # fmt: skip
    u_fit = (
        float(np.sqrt(np.mean([e["error"] ** 2 for e in in_sample]))) if len(in_sample) > 1 else 0.0
    )
    lf_used = inter_fit if inter_fit is not None else intra_fit
    u_comm = 2.0 * (intra_fit.fits[algorithm].rms if intra_fit else 0.0)
    if inter_fit is not None:
        u_comm = max(u_comm, 2.0 * inter_fit.fits[algorithm].rms)
    fitted_from = sorted(
        set(compute.fitted_from)
        | {q.record for lf in (intra_fit, inter_fit) if lf for q in lf.fits[algorithm].points}
        | {t.record for t in fit_rows}
    )
    # one rank alone: the baseline of the scaling efficiency
    gb1, pb1 = batches(1)
    base = breakdown(1, 1, overlap, 0.0)
    tp1 = gb1 / base.total
    rows = []
    # where a layout was measured both in a fitted run and in a --check run, the fitted one is
    # shown (the other is another sample of the same point, in "also_measured")
    measured: dict[tuple[int, int], TrainPoint] = {}
    also: dict[tuple[int, int], list[TrainPoint]] = {}
    for t in sorted(case.points, key=lambda t: t.record in check_ids):
        key = (t.ranks, math.ceil(t.ranks / t.nodes))
        if key in measured:
            also.setdefault(key, []).append(t)
        else:
            measured[key] = t
    for p, g in _layouts(case, s.ranks, default_g):
        gb, pb = batches(p)
        row: dict[str, Any] = {
            "case": case.label, "network": arch_label(first.arch_params),
            "benchmark": first.benchmark, "strategy": first.strategy, "options": first.options,
            "scaling": first.scaling, "framework": mach.framework, "backend": backend,
            "device": f"{mach.device_kind} ({mach.device_name})", "ranks": p,
            "ranks_per_node": min(g, p), "nodes": math.ceil(p / g),
            "global_batch": gb, "per_rank_batch": pb,
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
        pl = placement(p, g)  # a ConfigError when the ranks span nodes and no link between is known
        b = breakdown(p, g, overlap, overhead if p > 1 else 0.0)
        tp = gb / b.total
        eff = tp / (p * tp1)
        comp_u = compute.rel_u
        lo = b.compute * (1 - comp_u) + b.exposed * (1 - u_comm) + b.overhead - u_fit * b.total
        hi = b.compute * (1 + comp_u) + b.exposed * (1 + u_comm) + b.overhead + u_fit * b.total
        lo = max(lo, 1e-12)
        alts = {}
        for alg in C.ALGORITHMS:
            alt_place = dataclasses.replace(pl, algorithm=alg)
            gb_, pb_ = batches(p)
            ab = M.step(first.strategy, first.options, compute, pb_, gb_, grad, alt_place,
                        overlap, overhead if p > 1 else 0.0, ratio, s.servers, cut)  # fmt: skip
            alts[alg] = {"step_s": ab.total, "scaling_efficiency": (gb_ / ab.total) / (p * tp1)}
        row.update({
            "algorithm": algorithm, "algorithm_why": why,
            "step_s": b.total, "step_s_band": [lo, hi],
            "throughput": tp, "throughput_band": [gb / hi, gb / lo],
            "scaling_efficiency": eff,
            "scaling_efficiency_band": [(gb / hi) / (p * tp1), (gb / lo) / (p * tp1)],
            "compute_s": b.compute, "exchange_s": b.exchange, "exposed_s": b.exposed,
            "overhead_s": b.overhead, "hidden_share": b.hidden_share,
            "exchange_model": b.note, "overlap": overlap.describe(),
            "threads_per_rank": pl.threads, "compute_stretch": pl.stretch,
            "oversubscribed": pl.oversubscribed,
            "gradient_bytes": grad, "gradient_bytes_from": grad_src,
            "bucket_bytes": bucket, "compute": compute.describe(),
            "links": {"intra_node": link_doc(intra), "inter_node": link_doc(inter)},
            "other_algorithms": alts,
            "fitted_from": fitted_from,
            "model_error": {
                "collective_fit_rms": (lf_used.fits[algorithm].rms if lf_used else None),
                "compute_residuals": compute.residuals,
                "in_sample": in_sample,
            },
        })  # fmt: skip
        if pl.oversubscribed:
            row["note"] = (
                f"oversubscribed: {min(g, p)} ranks x {pl.threads} thread(s) on "
                f"{compute.cores} cores (compute x{pl.stretch:.2g})"
            )
            row["oversubscription"] = (
                "compute stretched by ranks x threads / cores; the exchange's waits for "
                "descheduled ranks are not modelled"
            )
        seen = measured.get((p, g))
        if seen is not None:
            row["measured"] = {
                "record": seen.record,
                "step_s": seen.step_s,
                "throughput": seen.throughput,
                "throughput_error": tp / seen.throughput - 1.0,
                "in_fit": seen.record not in check_ids and (p == 1 or seen in fit_rows),
            }
            if also.get((p, g)):
                row["also_measured"] = [
                    {"record": t.record, "throughput": t.throughput,
                     "throughput_error": tp / t.throughput - 1.0}
                    for t in also[(p, g)]
                ]  # fmt: skip
        rows.append(row)
    return rows
