"""A network step taken apart across the levels: the report's "A step taken apart" section.

For each network-level ``train`` or ``infer`` record whose operators were measured beside it
(an operator run at the network's shapes, ``--sizes from:NETWORK``, in any run of the report),
the step's median time is decomposed into

* per operator kind and direction: sum over the graph's uses of count x the operator record's
  median time (convolutions forward, convolutions backward, GEMMs, ...);
* the operators no benchmark measures (ReLU, residual adds, pooling, bias adds, layout
  changes, embedding lookups; for a training step the optimizer's update and the loss), each
  costed from the bytes it must move at the device's measured memory bandwidth (and a
  product's FLOPs at its peak rate, whichever is longer), marked *estimated*, never part of the
  remainder. A model, not a bound: tensors that stay in cache move faster than the measured
  (DRAM) bandwidth, and each operator's dispatch costs time its bytes do not count;
* the remainder: step minus both. Framework overhead between operators, data movement,
  layout conversions, and, where the framework fuses operators (a convolution with its batch
  norm and ReLU), a **negative** remainder: the fused step beats the sum of its parts.

Every term carries an interval: the operators' and the step's 95% CIs of the median summed
bound by bound (conservative), the estimates as exact values (a model: no spread). The graph
walk is :mod:`suite.onnx.operators`, the same that made the operator run's sizes, so the
counts are the graph's, not the operator run's. Framework-neutral: records only.
"""

from __future__ import annotations

import json
import math
import os
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from suite.dtypes import ITEMSIZE
from suite.errors import SuiteError
from suite.onnx.operators import KIND_TITLES, KINDS, GraphOperators, graph_operators, load_model
from suite.report.document import Figure, Heading, Section, Table
from suite.report.intervals import Iv, fmt_time, total
from suite.report.load import Run, metric
from suite.summary import fmt_seconds

TITLE = "A step taken apart"
#: the metric a network record's step is timed by
STEP_METRIC = {"train": "step_time", "infer": "latency"}
#: bytes per value of the optimizer's state (fp32 master weights under mixed precision too):
#: SGD with momentum reads the weight, its gradient and the momentum and writes two
UPDATE_VALUES = 5
MASTER_ITEMSIZE = 4
#: the loss (softmax cross-entropy): logits read and probabilities written, then the
#: gradient read and written
LOSS_VALUES = 4


def record_id(run: Run, rec: dict[str, Any]) -> str:
    """How the explanation names a record: the run's label and the task id (the projection's
    naming too), and the rank where a record is one rank's."""
    rank = rec.get("rank")
    suffix = f"#rank{rank}" if rank not in (None, 0) else ""
    return f"{run.label}:{rec.get('task_id', '?')}{suffix}"


def _params_key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)


def machine_key(rec: dict[str, Any]) -> tuple[str, str, str]:
    dev = rec.get("device") or {}
    return (str(rec.get("host", "?")), str(dev.get("kind", "?")), str(dev.get("name", "?")))


def threads(rec: dict[str, Any]) -> str:
    """The threads a CPU record computed with: the framework's own count where its adapter
    records one, else ``OMP_NUM_THREADS`` ("default": neither was set); "" on other devices.
    A CPU step run on 2 threads is not explained by operators timed on 1."""
    dev = rec.get("device") or {}
    if dev.get("kind") != "cpu":
        return ""
    for key in ("torch_threads", "tf_intra_op_threads", "blas_threads", "omp_num_threads"):
        if dev.get(key) not in (None, ""):
            return str(dev[key])
    return "default"


def usable(rec: dict[str, Any]) -> bool:
    return rec.get("status") == "ok" and bool((rec.get("correctness") or {}).get("passed"))


@dataclass
class OperatorIndex:
    """Every usable operator record of the runs, by what identifies a measurement."""

    by_key: dict[tuple[Any, ...], list[tuple[Run, dict[str, Any]]]] = field(default_factory=dict)
    #: runs holding operator records whose manifest does not say finished (killed, interrupted),
    #: each with the (framework, host, device, threads, dtype) of those records
    unfinished: list[tuple[Run, set[tuple[str, ...]]]] = field(default_factory=list)
    #: what usable records were measured on -> the first such record (its ``source`` names the
    #: graph and batch its shapes came from, where ``--sizes from:`` made them)
    examples: dict[tuple[str, ...], dict[str, Any]] = field(default_factory=dict)
    #: operator records that cannot take a step apart (not ok, or a failed check)
    unusable: int = 0

    @classmethod
    def of(cls, runs: Iterable[Run]) -> OperatorIndex:
        idx = cls()
        for run in runs:
            state = (run.manifest or {}).get("state")
            kinds = {cls.measured_on(r) for r in run.records
                     if r.get("benchmark", {}).get("level") == "operator"}  # fmt: skip
            if state not in (None, "finished") and kinds:
                idx.unfinished.append((run, kinds))
            for rec in run.records:
                if rec.get("benchmark", {}).get("level") != "operator":
                    continue
                if not usable(rec) or metric(rec, "time") is None:
                    idx.unusable += 1
                    continue
                idx.examples.setdefault(cls.measured_on(rec), rec)
                idx.by_key.setdefault(cls.key(rec, rec["benchmark"]["name"],
                                              rec["benchmark"]["params"]), []).append((run, rec))  # fmt: skip
        return idx

    @staticmethod
    def measured_on(rec: dict[str, Any]) -> tuple[str, ...]:
        """The framework, machine, CPU threads and dtype a record was measured with."""
        return (str((rec.get("framework") or {}).get("name")), *machine_key(rec),
                threads(rec), str(rec.get("dtype")))  # fmt: skip

    @classmethod
    def key(cls, rec: dict[str, Any], bench: str, params: dict[str, Any]) -> tuple[Any, ...]:
        return (*cls.measured_on(rec), bench, _params_key(params))

    def unfinished_beside(self, rec: dict[str, Any]) -> list[Run]:
        """The unfinished runs whose operator records share ``rec``'s framework, machine and
        dtype: those whose ``--resume`` can measure its missing shapes."""
        on = self.measured_on(rec)
        return [run for run, kinds in self.unfinished if on in kinds]

    def find(
        self, beside: dict[str, Any], run: Run, bench: str, params: dict[str, Any]
    ) -> tuple[Run, dict[str, Any]] | None:
        """The operator record measuring ``bench`` at ``params`` on the same framework,
        machine and dtype as ``beside``: from the same run where there is one."""
        found = self.by_key.get(self.key(beside, bench, params), [])
        same = [f for f in found if f[0] is run]
        return (same or found)[0] if found else None


@dataclass
class Term:
    """One line of a decomposition: a kind and direction, an estimate, or the remainder."""

    label: str
    time: Iv
    estimated: bool = False
    uses: int = 0


@dataclass
class UseTime:
    """One operator use of the graph and what it cost in this decomposition, per direction
    (per call; ``records`` names the operator records)."""

    kind: str
    op: str
    shape: str
    count: int
    benchmark: str | None
    per_call: dict[str, Iv] = field(default_factory=dict)
    records: dict[str, str] = field(default_factory=dict)
    bytes: dict[str, float] = field(default_factory=dict)


@dataclass
class Decomposition:
    """One network record's step, taken apart (``remainder`` None: not every operator was
    measured, or no bandwidth was known to cost the rest: the remainder is then not given)."""

    run: Run
    record: dict[str, Any]
    rid: str
    mode: str
    step: Iv
    terms: list[Term]
    measured: Iv
    estimated: Iv | None
    remainder: Iv | None
    uses: list[UseTime]
    operator_records: list[str]
    missing: list[str]
    bandwidth_gbps: float | None
    bandwidth_source: str
    notes: list[str] = field(default_factory=list)

    @property
    def framework(self) -> str:
        return str(self.record["framework"]["name"])

    @property
    def records(self) -> list[str]:
        return [self.rid, *self.operator_records]

    def share(self, iv: Iv) -> Iv:
        """``iv`` as a share of the step."""
        return iv.over(self.step) if self.step.lo > 0 else Iv.exact(iv.value / self.step.value)

    def remainder_share(self) -> Iv | None:
        """The remainder's share of the step, 1 - (measured + estimated) / step: bound by
        bound, the step's lower end against the parts' upper ends and the reverse (the
        remainder over the step, each end taken alone, would pair the remainder's upper end,
        made at the step's upper end, with the step's lower end: a share above 100%)."""
        if self.remainder is None:
            return None
        known = self.measured + (self.estimated or Iv.exact(0.0))
        step = self.step
        if step.lo <= 0:
            return Iv.exact(1 - known.value / step.value)
        return Iv(1 - known.value / step.value, 1 - known.hi / step.lo, 1 - known.lo / step.hi)

    def largest(self) -> Term:
        measured = [t for t in self.terms if not t.estimated and t.label != "remainder"]
        return max(measured, key=lambda t: t.time.value)


def _kind_title(kind: str) -> str:
    return KIND_TITLES.get(kind, kind)


def _bandwidth(recs: Iterable[dict[str, Any]]) -> tuple[float | None, str]:
    for rec in recs:
        dev = rec.get("device") or {}
        if dev.get("peak_bandwidth_gbps"):
            return float(dev["peak_bandwidth_gbps"]), str(dev.get("peak_bandwidth_source", ""))
    return None, "no record of this device carries a measured memory bandwidth"


def _peak(recs: Iterable[dict[str, Any]], dtype: str) -> float | None:
    for rec in recs:
        peak = ((rec.get("device") or {}).get("peak_tflops") or {}).get(dtype)
        if peak:
            return float(peak)
    return None


def decompose(
    run: Run,
    rec: dict[str, Any],
    index: OperatorIndex,
    graphs: dict[str, GraphOperators] | None = None,
    why_not: list[tuple[str, str]] | None = None,
) -> Decomposition | None:
    """The decomposition of one network ``train``/``infer`` record, or None when no operator
    record was measured beside it (nothing to take it apart with), or its graph cannot be
    walked as it ran: then ``why_not`` gets the record's label and the reason. ``graphs`` keeps
    each network's walked graph for the next record of the same parameters (the frameworks of
    a comparison share them: the zoo builds each network once)."""
    from suite.levels import load_benchmark

    mode = rec["benchmark"]["name"]
    step_m = metric(rec, STEP_METRIC.get(mode, ""))
    if mode not in STEP_METRIC or step_m is None or not usable(rec):
        return None
    why_not = why_not if why_not is not None else []
    label = network_label(rec)
    params = rec["benchmark"]["params"]
    notes: list[str] = []
    key = json.dumps([params, mode == "train"], sort_keys=True, default=str)
    try:
        changed = _model_changed(rec)
        if changed:
            why_not.append((label, changed))
            return None
        ops = (graphs or {}).get(key) or graph_operators(
            load_model(params["network"], params), int(params["batch"]), training=mode == "train"
        )
        if graphs is not None:
            graphs[key] = ops
    except (SuiteError, OSError, ValueError, KeyError) as exc:
        why_not.append((label, f"its graph could not be walked ({exc})"))
        return None
    dtype = rec["dtype"]
    uses: list[UseTime] = []
    op_recs: list[tuple[str, dict[str, Any]]] = []
    missing: list[str] = []
    by_kind: dict[tuple[str, str], list[Iv]] = {}
    for use in ops.benchmarked():
        assert use.benchmark is not None
        bench = load_benchmark("operator", use.benchmark)
        row = UseTime(use.kind, use.op, use.shape, use.count, use.benchmark)
        for direction in use.directions(mode == "train"):
            p = bench.validate(use.task_params(direction))
            found = index.find(rec, run, use.benchmark, p)
            if found is None:
                missing.append(f"{use.benchmark} {bench.label(p)}")
                continue
            orun, orec = found
            t = Iv.of_metric(metric(orec, "time") or {})
            row.per_call[direction] = t
            row.records[direction] = record_id(orun, orec)
            op_recs.append((record_id(orun, orec), orec))
            by_kind.setdefault((use.kind, direction), []).append(t.scale(use.count))
        uses.append(row)
    if not op_recs:
        why_not.append((label, _no_operators(rec, index, missing)))
        return None
    machine_recs = [r for _, r in op_recs] + [rec]
    bw, bw_source = _bandwidth(machine_recs)
    peak = _peak(machine_recs, dtype)
    itemsize = ITEMSIZE.get(dtype, 4)
    terms: list[Term] = []
    for kind in KINDS:
        for direction in ("forward", "backward"):
            parts = by_kind.get((kind, direction))
            if parts:
                terms.append(Term(f"{_kind_title(kind)}, {direction}", total(parts),
                                  uses=sum(u.count for u in ops.benchmarked() if u.kind == kind)))  # fmt: skip
    measured = total(t.time for t in terms)
    # the rest: estimated from bytes (and FLOPs) at the device's measured rates
    estimated: Iv | None = None
    if bw is not None:
        est: dict[str, float] = {}
        for use in ops.estimated():
            row = UseTime(use.kind, use.op, use.shape, use.count, None)
            for direction in use.directions(mode == "train"):
                nbytes = use.elements.get(direction, 0.0) * itemsize
                seconds = nbytes / (bw * 1e9)
                if use.kind == "product" and peak:
                    seconds = max(seconds, use.flops.get(direction, 0.0) / (peak * 1e12))
                row.bytes[direction] = nbytes
                row.per_call[direction] = Iv.exact(seconds)
                label = _kind_title(use.kind)
                est[label] = est.get(label, 0.0) + use.count * seconds
            uses.append(row)
        if mode == "train":
            update = ops.parameters * UPDATE_VALUES * MASTER_ITEMSIZE
            uses.append(UseTime("update", "SGD momentum update", f"{ops.parameters} values", 1,
                                None, {"step": Iv.exact(update / (bw * 1e9))}, {},
                                {"step": float(update)}))  # fmt: skip
            est[_kind_title("update")] = update / (bw * 1e9)
            logits = int(math.prod(ops.output_shape)) if ops.output_shape else 0
            loss = logits * LOSS_VALUES * itemsize
            uses.append(UseTime("update", "softmax cross-entropy loss", f"{logits} logits", 1,
                                None, {"step": Iv.exact(loss / (bw * 1e9))}, {},
                                {"step": float(loss)}))  # fmt: skip
            est[_kind_title("update")] += loss / (bw * 1e9)
        for label, seconds in est.items():
            terms.append(Term(f"{label}, estimated", Iv.exact(seconds), estimated=True))
        estimated = Iv.exact(sum(est.values()))
    else:
        notes.append(
            "no measured memory bandwidth on this device: the operators without a benchmark "
            "are not costed, and the remainder is not separated from them"
        )
    step = Iv.of_metric(step_m)
    remainder = None
    if missing:
        resume = "".join(
            f"; the operator run {r.path} did not finish (its manifest says "
            f"{(r.manifest or {}).get('state')}): `dlsuite run --resume --out {r.path}` "
            "measures the rest"
            for r in index.unfinished_beside(rec)[:1]
        )
        notes.append(
            f"{len(missing)} operator shape(s) of the graph have no usable operator record "
            f"(e.g. {missing[0]}): the remainder is not given{resume}"
        )
    elif estimated is not None:
        remainder = step - measured - estimated
        terms.append(Term("remainder", remainder))
    if ops.notes:
        notes.extend(ops.notes)
    if params.get("channels_last") and any(u.benchmark == "conv2d" for u in uses):
        notes.append(
            "the network ran channels-last (NHWC) where the framework has it; the operator "
            "level's convolutions are NCHW (the layout's cost or gain is in the remainder)"
        )
    if params.get("compile"):
        notes.append("the network was compiled (its fusions are in the remainder)")
    ids = list(dict.fromkeys(i for i, _ in op_recs))
    return Decomposition(run, rec, record_id(run, rec), mode, step, terms, measured, estimated,
                         remainder, uses, ids, missing, bw, bw_source, notes)  # fmt: skip


#: what must agree between a network record and the operator records that take it apart
MATCH_FIELDS = ("framework", "host", "device", "threads", "dtype")


def _match_fields(rec: dict[str, Any]) -> dict[str, str]:
    host, kind, name = machine_key(rec)
    return {"framework": str((rec.get("framework") or {}).get("name", "?")), "host": host,
            "device": f"{kind} {name}", "threads": threads(rec) or "-",
            "dtype": str(rec.get("dtype", "?"))}  # fmt: skip


def network_label(rec: dict[str, Any]) -> str:
    """A network record as the section names it: framework, mode, network and batch, dtype."""
    from suite.summary import params_label

    return (f"{(rec.get('framework') or {}).get('name', '?')} {rec['benchmark']['name']} "
            f"{params_label(rec)} {rec.get('dtype', '?')}")  # fmt: skip


def _model_changed(rec: dict[str, Any]) -> str | None:
    """Why a user model's file is not the graph its record ran (its SHA-256 differs from the
    record's ``work.model_sha256``), or None: the walk would count another graph's operators."""
    import hashlib

    params = rec["benchmark"]["params"]
    ran = (rec.get("work") or {}).get("model_sha256")
    path = params.get("model")
    if params.get("network") != "onnx" or not ran or not path or not os.path.isfile(str(path)):
        return None  # a missing file: the walk says so
    h = hashlib.sha256()
    with open(str(path), "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    if h.hexdigest() == ran:
        return None
    return (f"its model file {path} changed since it ran (SHA-256 {h.hexdigest()[:12]} now, "
            f"{ran[:12]} in the record): its graph is not the one measured; report it with the "
            "file it ran, or run the network and operator levels again")  # fmt: skip


def _differ(net: dict[str, str], ops: dict[str, str]) -> str:
    return "; ".join(f"{k} {net[k]!r} (network) against {ops[k]!r} (operators)"
                     for k in MATCH_FIELDS if ops[k] != net[k])  # fmt: skip


def _no_operators(rec: dict[str, Any], index: OperatorIndex, missing: list[str]) -> str:
    """Why no operator record takes ``rec``'s step apart: its graph has no operator a benchmark
    measures, the records of its framework, machine, threads and dtype are at other shapes (a
    batch, a resolution), or none shares those (the fields that differ, both values)."""
    if not missing:
        return ("its graph has no operator an operator benchmark measures (convolution, GEMM, "
                "normalisation, softmax, GELU): nothing to take its step apart with")  # fmt: skip
    on = OperatorIndex.measured_on(rec)
    batch = rec["benchmark"]["params"].get("batch")
    if on in index.examples:
        source = str(index.examples[on]["benchmark"].get("source") or "").split(":")[0]
        return (f"none of its graph's {len(missing)} operator shapes at batch {batch} has an "
                f"operator record of its framework, machine, threads and dtype (e.g. "
                f"{missing[0]}); those in these runs are at other shapes"
                + (f" ({source})" if source.startswith("from ") else "")
                + ": run the operator level at this record's network and batch")  # fmt: skip
    net_f = _match_fields(rec)
    best = min((_match_fields(r) for r in index.examples.values()),
               key=lambda f: sum(f[k] != net_f[k] for k in MATCH_FIELDS))  # fmt: skip
    return (f"the operator records differ from it in {_differ(net_f, best)} (a step is taken "
            "apart only with operators of its own framework, host, device, CPU threads and "
            "dtype): run the operator level there")  # fmt: skip


def from_network_command(rec: dict[str, Any]) -> str:
    """The operator run that measures a network record's shapes (shown, never run)."""
    params = rec["benchmark"]["params"]
    if params.get("network") == "onnx":
        spec = f"from:{params.get('model')}"
        dims = f" --model-dims {shlex.quote(str(params['dims']))}" if params.get("dims") else ""
    else:
        skip = {"network", "batch", "lr", "channels_last", "compile"}
        spec = "from:" + ",".join([str(params.get("network")),
                                   *(f"{k}={v}" for k, v in params.items() if k not in skip)])  # fmt: skip
        dims = ""
    return (
        f"dlsuite run --level operator --sizes {shlex.quote(spec)} --batch {params.get('batch')}"
        f"{dims} --framework {rec['framework']['name']} --dtype {rec.get('dtype')}"
    )


def _why_none(runs: list[Run], why_not: list[tuple[str, str]]) -> str:
    """The section's statement when no step is taken apart: which level is missing (with the
    command that measures it), or each network record's reason."""
    nets = [r for run in runs for r in run.records
            if r.get("benchmark", {}).get("level") == "network"
            and r["benchmark"].get("name") in STEP_METRIC]  # fmt: skip
    ops = [r for run in runs for r in run.records
           if r.get("benchmark", {}).get("level") == "operator"]  # fmt: skip
    head = "No network train/infer record with its operators measured beside it"
    if not nets and not ops:
        return (f"{head}: these runs hold neither. Run the network level's train/infer and the "
                "operator level at the network's shapes (`dlsuite run --level operator --sizes "
                "from:NETWORK`, the same --quick/--batch; docs/guide/explain.md) and report both "
                "runs together.")  # fmt: skip
    if not nets:
        source = next((str(r["benchmark"].get("source")).split(":")[0] for r in ops
                       if str(r["benchmark"].get("source") or "").startswith("from ")), "")  # fmt: skip
        return (f"{head}: these runs hold no network train/infer record (their {len(ops)} "
                "operator records" + (f" are {source}" if source else "") + "). Run the network "
                "level at the same network and batch (`dlsuite run --level network --benchmark "
                "train,infer`, `--model FILE` for a file of yours) and report both runs together.")  # fmt: skip
    good = [r for r in nets if usable(r)]
    if not good:
        return (f"{head}: none of the {len(nets)} network train/infer records is ok with its "
                "checks passed (the Skipped and failed section says why).")  # fmt: skip
    if not ops:
        cmds = list(dict.fromkeys(f"`{from_network_command(r)}`" for r in good))
        return (f"{head}: these runs hold no operator record. Measure the network's operators "
                f"at its shapes: {'; '.join(cmds[:3])}" + (f" (and {len(cmds) - 3} more)"
                if len(cmds) > 3 else "") + ", then report both runs together.")  # fmt: skip
    if not why_not:
        return (f"{head}: none of the {len(ops)} operator records is ok with its checks passed "
                "(rerun those sizes: the explain study measures them again into operator-retry).")  # fmt: skip
    return f"{head}. " + not_taken_apart(why_not)


def not_taken_apart(why_not: list[tuple[str, str]], most: int = 6) -> str:
    """The network records no step was taken apart for, grouped by reason."""
    by: dict[str, list[str]] = {}
    for label, reason in why_not:
        by.setdefault(reason, []).append(label)
    parts = [f"{', '.join(labels)}: {reason}" for reason, labels in by.items()]
    more = f" (and {len(parts) - most} more reasons)" if len(parts) > most else ""
    return "Not taken apart: " + "; ".join(parts[:most]) + more + "."


def decompositions(
    runs: list[Run], why_not: list[tuple[str, str]] | None = None
) -> list[Decomposition]:
    """Every network train/infer record of the runs that can be taken apart; ``why_not`` gets
    each other usable one's label and reason (where the runs hold usable operator records)."""
    index = OperatorIndex.of(runs)
    if not index.by_key:
        return []
    out = []
    graphs: dict[str, GraphOperators] = {}
    for run in runs:
        for rec in run.records:
            if rec.get("benchmark", {}).get("level") != "network":
                continue
            d = decompose(run, rec, index, graphs, why_not)
            if d is not None:
                out.append(d)
    return out


# -- the section --------------------------------------------------------------------------------
def group_key(d: Decomposition) -> tuple[str, ...]:
    p = {k: v for k, v in d.record["benchmark"]["params"].items() if k != "lr"}
    return (d.mode, _params_key(p), d.record["dtype"], *machine_key(d.record))


def group_title(d: Decomposition) -> str:
    from suite.summary import params_label

    dev = d.record.get("device") or {}
    return f"{d.mode}: {params_label(d.record)} {d.record['dtype']} on {dev.get('name', '?')}"


def remainder_text(d: Decomposition) -> str:
    r = d.remainder
    if r is None:
        return "not given"
    if r.hi < 0:
        return f"{fmt_time(r)}: negative, the step beats the sum of its operators (fusion, layout)"
    if r.lo <= 0:
        return f"{fmt_time(r)}: not distinguishable from zero"
    return fmt_time(r)


def _cell(d: Decomposition, iv: Iv) -> str:
    share = iv.value / d.step.value if d.step.value else 0.0
    return f"{fmt_time(iv)} ({100 * share:.0f}%)"


def decomposition_section(runs: list[Run], figure_name: Callable[[str], str]) -> Section:
    s = Section(TITLE)
    why_not: list[tuple[str, str]] = []
    decs = decompositions(runs, why_not)
    if not decs:
        s.add(_why_none(runs, why_not))
        return s
    s.add(
        "Each network step's median time, taken apart: per operator kind and direction, the "
        "graph's uses of each shape times that shape's median on the operator level (the same "
        "framework, machine, CPU threads and dtype); the operators no benchmark measures, costed from the "
        "bytes they move at the device's measured memory bandwidth (marked estimated, never "
        "part of the remainder; a model, not a bound: tensors that stay in cache move faster, "
        "and each operator's dispatch costs time its bytes do not count); and the remainder, "
        "what neither explains: "
        "framework overhead between operators, data movement and layout changes, and where the "
        "framework fuses operators a negative remainder (the fused step beats the sum). "
        "Intervals: the 95% CIs of the medians, summed bound by bound (conservative); "
        "estimates have none. Under load (a shared machine) the intervals are wide: read "
        "them, not the medians alone."
    )
    groups: dict[tuple[str, ...], list[Decomposition]] = {}
    for d in decs:
        groups.setdefault(group_key(d), []).append(d)
    for gi, items in enumerate(groups.values()):
        first = items[0]
        s.add(Heading(group_title(first)))
        several_runs = len({d.run.label for d in items}) > 1
        cols = [d.framework + (f" ({d.run.label})" if several_runs else "") for d in items]
        labels: list[str] = []
        for d in items:
            for t in d.terms:
                if t.label not in labels and t.label != "remainder":
                    labels.append(t.label)
        rows = [["step (measured)", *(fmt_time(d.step) for d in items)]]
        for label in labels:
            row = [label]
            for d in items:
                term = next((t for t in d.terms if t.label == label), None)
                row.append(_cell(d, term.time) if term else "-")
            rows.append(row)
        rows.append(["sum of measured operators", *(_cell(d, d.measured) for d in items)])
        rows.append(["remainder", *(remainder_text(d) for d in items)])
        s.add(Table(["", *cols], rows, caption="per step; (share of the step's median)"))
        if gi < 12:
            s.add(Figure(figure_name(f"decomposition-{gi}"), _plot(items, cols, group_title(first)),
                         f"step decomposition: {group_title(first)}"))  # fmt: skip
        s.add(_uses_table(items, cols))
        for bw, source in dict.fromkeys((d.bandwidth_gbps, d.bandwidth_source) for d in items):
            s.add(f"Memory bandwidth for the estimates: {bw:g} GB/s ({source})." if bw else
                  f"No memory bandwidth for the estimates: {source}.")  # fmt: skip
        for d in items:
            lines = [f"{d.framework}: network record {d.rid}; {len(d.operator_records)} operator "
                     "records", *d.notes]  # fmt: skip
            s.add("; ".join(lines) + ".")
    if why_not:  # the network records left out, each with why
        s.add(not_taken_apart(why_not))
    return s


def _uses_table(items: list[Decomposition], cols: list[str]) -> Table:
    """Per operator shape: its uses, and per framework the per-call medians (forward /
    backward) or, for the estimated ones, the bytes moved and the estimated time."""

    def key(u: UseTime) -> tuple[str, str, str]:
        return (u.kind, u.op, u.shape)

    order: dict[tuple[str, str, str], UseTime] = {}
    for d in items:
        for u in d.uses:
            order.setdefault(key(u), u)
    headers = ["kind", "op", "shape", "uses", *cols]
    rows = []
    for k, use in order.items():
        row = [_kind_title(use.kind), use.op, use.shape, str(use.count)]
        for d in items:
            found = next((x for x in d.uses if key(x) == k), None)
            if found is None or not found.per_call:
                row.append("not measured")
                continue
            parts = []
            for direction, iv in found.per_call.items():
                tag = {"forward": "fwd", "backward": "bwd"}.get(direction, direction)
                if found.benchmark is None:  # estimated: the bytes it moves, and their time
                    moved = _bytes_text(found.bytes.get(direction, 0.0))
                    parts.append(f"{tag} {moved} → {fmt_seconds(iv.value)} est.")
                else:
                    parts.append(f"{tag} {fmt_seconds(iv.value)}")
            row.append(", ".join(parts))
        rows.append(row)
    return Table(headers, rows, caption="per call: the operator records' medians, or (est.) "
                 "the bytes an operator without a benchmark moves and their time at the "
                 "measured bandwidth")  # fmt: skip


def _bytes_text(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _plot(items: list[Decomposition], cols: list[str], title: str) -> bytes:
    from suite.report.plots import _png

    return _png(plot_figure(items, cols, title))


def plot_figure(items: list[Decomposition], cols: list[str], title: str) -> Any:
    """A horizontal stacked bar per framework, in % of its own step's median (frameworks whose
    steps differ tenfold stay readable): the terms in order, estimates hatched, the remainder
    last (drawn left of zero when negative); the measured step (100%) with its CI in black.
    Titled with the step (``title``); each term once in the legend."""
    from matplotlib import colormaps

    from suite.report.plots import _figure, set_title

    labels: list[str] = []
    for d in items:
        for t in d.terms:
            if t.label not in labels:
                labels.append(t.label)
    # the legend below the axes, outside them (constrained layout makes room for it): as the
    # axes' legend anchored below, it covered the x-axis label of a one- or two-bar figure
    legend_rows = -(-len(labels) // 3)
    fig, (ax,) = _figure(9.0, 1.4 + 0.55 * len(items) + 0.16 * legend_rows)
    cmap = colormaps["tab20"]
    colors = {
        lab: "#999999" if lab == "remainder" else cmap(i % 20) for i, lab in enumerate(labels)
    }
    in_legend: set[str] = set()

    def legend_label(label: str) -> str | None:
        """Each term once in the legend, from whichever bar has it first."""
        if label in in_legend:
            return None
        in_legend.add(label)
        return label

    for y, d in enumerate(items):
        left, neg = 0.0, 0.0
        scale = 100.0 / d.step.value
        for label in labels:
            term = next((t for t in d.terms if t.label == label), None)
            if term is None:
                continue
            width = term.time.value * scale
            hatch = "//" if term.estimated else None
            if width >= 0:
                ax.barh(y, width, left=left, color=colors[label], hatch=hatch,
                        label=legend_label(label), edgecolor="white")  # fmt: skip
                left += width
            else:
                ax.barh(y, width, left=neg, color=colors[label], label=legend_label(label))
                neg += width
        step = d.step
        ax.errorbar([100.0], [y], xerr=[[100.0 - step.lo * scale], [step.hi * scale - 100.0]],
                    fmt="k|", markersize=18, capsize=4)  # fmt: skip
    ticks = [f"{c}\n{fmt_seconds(d.step.value)}" for c, d in zip(cols, items, strict=True)]
    ax.set_yticks(range(len(items)), ticks)
    ax.set_xlabel("% of the step's median (black: the measured step, 100%, and its 95% CI)")
    ax.axvline(0, color="black", linewidth=0.6)
    set_title(ax, f"A step taken apart: {title}", fontsize=10)
    fig.legend(fontsize=7, loc="outside lower center", ncol=3)
    return fig
