"""What a projection reads from runs: collective sweeps, compute per step, training steps.

Every point keeps the id of the record it came from (``run label:task id``), so a projection
can say which records it was fitted from. Only successful records whose correctness checks
passed are used: a number without its check is not a number here.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from suite.onnx import USER_MODEL
from suite.projection.collectives import COLLECTIVES, Point
from suite.report.load import Run, metric

#: parameters of a record that are not the network's architecture
NOT_ARCH = {
    "scaling", "batch", "lr", "strategy", "options", "digits", "channels_last", "compile",
    "bucket",
}  # fmt: skip


def record_id(run: Run, rec: dict[str, Any]) -> str:
    return f"{run.label}:{rec.get('task_id', '?')}"


def usable(rec: dict[str, Any]) -> bool:
    return rec.get("status") == "ok" and bool((rec.get("correctness") or {}).get("passed"))


def _count_hostlist(text: str) -> int:
    """Hosts in a Slurm hostlist (``node[1-2,5],gpu7`` is 4)."""
    total = 0
    for part in re.findall(r"[^,\[]+(?:\[[^\]]*\])?", text):
        inside = re.search(r"\[([^\]]*)\]", part)
        if not inside:
            total += 1
            continue
        for rng in inside.group(1).split(","):
            lo, _, hi = rng.partition("-")
            total += int(hi) - int(lo) + 1 if hi else 1
    return max(total, 1)


def node_count(rec: dict[str, Any]) -> int:
    """Nodes the record's ranks ran on: the Slurm allocation's node list where there is one
    (the local cluster's two nodes share one host name), else the distinct host names."""
    sched = rec.get("scheduler") or {}
    nodelist = sched.get("nodelist") if isinstance(sched, dict) else None
    hosts = len((rec.get("distributed") or {}).get("nodes") or []) or 1
    if isinstance(nodelist, str) and nodelist:
        try:
            return max(hosts, min(_count_hostlist(nodelist), rec.get("world_size") or 1))
        except ValueError:
            return hosts
    return hosts


def arch_of(params: dict[str, Any], work: dict[str, Any] | None = None) -> dict[str, Any]:
    """The network and its architecture parameters (batch, scaling, strategy... removed); a
    user's file with the digest its record gives (``work.model_sha256``)."""
    arch = {k: v for k, v in params.items() if k not in NOT_ARCH}
    digest = (work or {}).get("model_sha256")
    if arch.get("network") == USER_MODEL and isinstance(digest, str):
        arch["model_sha256"] = digest
    return arch


def arch_key(arch: dict[str, Any]) -> str:
    """What names a network across runs: its architecture; a user's file by its content where
    the record gave its digest (the same file at another path, on another machine, is the same
    network), else by its path."""
    if "model_sha256" in arch:
        arch = {k: v for k, v in arch.items() if k != "model"}
    return json.dumps(arch, sort_keys=True, separators=(",", ":"), default=str)


def arch_label(arch: dict[str, Any]) -> str:
    """``resnet18 32px w/4``: the network and what sets its size (the network level's style);
    a user's file by its name and dims."""
    if arch.get("network") == USER_MODEL and arch.get("model"):
        return " ".join(
            [Path(str(arch["model"])).name, *([arch["dims"]] if arch.get("dims") else [])]
        )
    extra = []
    if "resolution" in arch:
        extra.append(f"{arch['resolution']}px")
    if arch.get("width", 1) != 1:
        extra.append(f"w/{arch['width']}")
    if "seq" in arch:
        extra.append(f"{arch.get('config', '')} seq{arch['seq']}".strip())
    for key in ("features", "hidden", "layers"):
        if key in arch:
            extra.append(f"{key[0]}{arch[key]}")
    return " ".join([str(arch.get("network", "?")), *extra])


@dataclass(frozen=True)
class Load:
    """What the quiet-machine check (suite/telemetry/quiet.py) said while a record ran: whether
    it called the machine busy (and why, in one line) and the highest 1-minute load average."""

    busy: bool = False
    why: str = ""
    loadavg: float | None = None

    def text(self) -> str:
        load = f"load {self.loadavg:.1f}" if self.loadavg is not None else ""
        return ", ".join(x for x in (load, self.why) if x)


def load_of(rec: dict[str, Any]) -> Load:
    tel = rec.get("telemetry") or {}
    quiet = tel.get("quiet") or {}
    busy = [f for f in quiet.get("findings") or [] if f.get("busy")]
    loads = [
        float(f["evidence"]["loadavg_1m"])
        for f in quiet.get("findings") or []
        if isinstance((f.get("evidence") or {}).get("loadavg_1m"), (int, float))
    ]
    for pr in (tel.get("host") or {}).get("per_rank") or []:
        if isinstance(pr, dict) and isinstance(pr.get("loadavg_1m"), (int, float)):
            loads.append(float(pr["loadavg_1m"]))
    why = ""
    if busy:
        ev = busy[0].get("evidence") or {}
        if isinstance(ev.get("other_cores"), (int, float)):
            why = f"other processes kept {ev['other_cores']:.1f} of {ev.get('usable_cores', '?')} cores busy"
        else:
            why = str(busy[0].get("check", "busy"))
    return Load(bool(busy) or quiet.get("quiet") is False, why, max(loads) if loads else None)


def _threads(rec: dict[str, Any]) -> int | None:
    dev = rec.get("device") or {}
    for key in ("omp_num_threads", "torch_threads"):
        v = dev.get(key)
        try:
            if v is not None and int(v) > 0:
                return int(v)
        except (TypeError, ValueError):
            continue
    return None


@dataclass(frozen=True)
class Machine:
    """What the records say about where they ran."""

    framework: str
    backend: str  # the distributed backend (gloo, nccl, ...), "none" at one rank
    device_kind: str  # cpu | gpu
    device_name: str
    cores: int | None
    threads: int | None  # per rank
    nccl: str | None = None  # the NCCL version the framework carried (its records' provenance)
    memory_bandwidth: float | None = None  # bytes/s, the record's measured memory roof

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.framework, self.device_kind, self.device_name)


def machine(rec: dict[str, Any]) -> Machine:
    dev = rec.get("device") or {}
    backend = (rec.get("work") or {}).get("dist_backend") or (rec.get("distributed") or {}).get(
        "backend"
    )
    versions = (rec.get("provenance") or {}).get("versions") or {}
    membw = dev.get("peak_bandwidth_gbps")
    return Machine(
        framework=rec["framework"]["name"],
        backend=str(backend or "none"),
        device_kind=str(dev.get("kind") or "?"),
        device_name=str(dev.get("name") or "?"),
        cores=int(dev["cores"]) if isinstance(dev.get("cores"), int) else None,
        threads=_threads(rec),
        nccl=str(versions["nccl"]) if versions.get("nccl") else None,
        memory_bandwidth=float(membw) * 1e9
        if isinstance(membw, (int, float)) and membw > 0
        else None,
    )


def _rel_halfwidth(m: dict[str, Any] | None) -> float:
    """Half the 95% CI of the median over the median (0 where unknown)."""
    if not m or not m.get("ci95") or not m.get("median"):
        return 0.0
    lo, hi = m["ci95"]
    med = float(m["median"])
    return max(0.0, (float(hi) - float(lo)) / 2.0 / med) if med > 0 else 0.0


@dataclass(frozen=True)
class CollectivePoint:
    point: Point
    machine: Machine
    nodes: int
    run: str
    load: Load = Load()


def _rel_spread(m: dict[str, Any] | None) -> tuple[float | None, int]:
    """One rank's step-to-step spread: the samples' interquartile range / 1.349 (a normal
    distribution's sigma, robust to the odd slow step) over their median, and how many samples;
    (None, 0) where the record holds no spread."""
    if not m or not m.get("median") or not isinstance(m.get("iqr"), (int, float)):
        return None, 0
    med = float(m["median"])
    n = int(m.get("n") or 0)
    if med <= 0 or not math.isfinite(float(m["iqr"])):
        return None, n
    return max(0.0, float(m["iqr"]) / 1.349 / med), n


@dataclass(frozen=True)
class ComputePoint:
    """One rank alone: the step time at a per-rank batch (no exchange), and its samples' spread
    (sigma over the median, :func:`_rel_spread`)."""

    arch: str  # arch_key
    batch: float
    seconds: float
    rel_ci: float
    machine: Machine
    record: str
    source: str  # "data_parallel at 1 rank" | "network train"
    load: Load = Load()
    spread: float | None = None
    samples: int = 0


@dataclass(frozen=True)
class TrainPoint:
    """One multi-rank (or one-rank) training record: data_parallel or a strategy."""

    benchmark: str  # data_parallel | strategies
    arch: str
    arch_params: dict[str, Any]
    strategy: str  # "allreduce" for data_parallel
    options: dict[str, Any]
    scaling: str  # strong (global batch fixed) | weak (per-rank batch fixed)
    batch: int  # the record's batch parameter (global for strong, per rank for weak)
    ranks: int
    nodes: int
    global_batch: float
    per_rank_batch: float
    step_s: float
    rel_ci: float
    throughput: float
    machine: Machine
    record: str
    #: the strategy's bytes per step as the record computed them, and uncompressed
    sent_bytes: float | None = None
    uncompressed_bytes: float | None = None
    compression_ratio: float | None = None
    no_exchange_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    load: Load = Load()
    bucket: float | None = None  # data_parallel's bucket (bytes) where the record set one
    cycle_ms: float | None = None  # Horovod's cycle where the user's environment set one

    @property
    def case(self) -> tuple[Any, ...]:
        """What records of different world sizes share when they measure the same thing."""
        return (
            self.benchmark, self.arch, self.strategy, arch_key(self.options), self.scaling,
            self.batch, self.machine.key, self.bucket,
        )  # fmt: skip


@dataclass
class Extracted:
    collectives: list[CollectivePoint] = field(default_factory=list)
    compute: list[ComputePoint] = field(default_factory=list)
    training: list[TrainPoint] = field(default_factory=list)
    archs: dict[str, dict[str, Any]] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # records not usable, and why
    #: bytes/s of memory measured on each device (any record's peak_bandwidth_gbps: the
    #: operator and training levels' CPU records carry it, suite/membw.py)
    memory_bandwidth: dict[str, float] = field(default_factory=dict)


def _value(rec: dict[str, Any], name: str) -> float | None:
    m = metric(rec, name)
    if m is None or m.get("value") is None:
        return None
    v = float(m["value"])
    return v if math.isfinite(v) else None


def extract(runs: Sequence[Run]) -> Extracted:
    out = Extracted()
    for run in runs:
        for rec in run.records:
            _one(run, rec, out)
    return out


def _one(run: Run, rec: dict[str, Any], out: Extracted) -> None:
    bench = rec.get("benchmark") or {}
    level, name = bench.get("level"), bench.get("name")
    if rec.get("rank") not in (None, 0):
        return  # a per-rank record of a merged task: the merged one is used
    rid = record_id(run, rec)
    if level == "distributed" and name in COLLECTIVES + ("data_parallel", "strategies"):
        if not usable(rec):
            out.skipped.append(f"{rid}: {rec.get('status')} (not used)")
            return
    mach = machine(rec) if rec.get("device") else None
    if mach is None:
        return
    if mach.memory_bandwidth:
        out.memory_bandwidth.setdefault(mach.device_name, mach.memory_bandwidth)
    load = load_of(rec)
    params = dict(bench.get("params") or {})
    if level == "distributed" and name in COLLECTIVES:
        t = _value(rec, "time")
        size = params.get("message_bytes")
        if t is None or not isinstance(size, (int, float)) or rec.get("world_size", 1) < 2:
            return
        out.collectives.append(
            CollectivePoint(
                Point(name, int(rec["world_size"]), float(size), t, rid),
                mach,
                node_count(rec),
                run.label,
                load,
            )
        )
        return
    if level == "network" and name == "train" and usable(rec):
        if rec.get("dtype") != "fp32" or params.get("compile"):
            return
        t = _value(rec, "step_time")
        if t is None:
            return
        arch = arch_of(params, rec.get("work"))
        key = arch_key(arch)
        out.archs[key] = arch
        out.compute.append(
            ComputePoint(
                key,
                float(params["batch"]),
                t,
                _rel_halfwidth(metric(rec, "step_time")),
                mach,
                rid,
                "network train",
                load,
                *_rel_spread(metric(rec, "step_time")),
            )  # fmt: skip
        )
        return
    if level != "distributed" or name not in ("data_parallel", "strategies"):
        return
    if rec.get("dtype") not in (None, "fp32"):
        return
    t = _value(rec, "step_time")
    tp = _value(rec, "throughput")
    if t is None or tp is None:
        return
    work = rec.get("work") or {}
    world = int(rec.get("world_size") or 1)
    arch = arch_of(params, work)
    key = arch_key(arch)
    out.archs[key] = arch
    rel = _rel_halfwidth(metric(rec, "step_time"))
    gb = float(work.get("global_batch") or 0) or None
    pb = float(work.get("per_rank_batch") or 0) or None
    batch = int(params["batch"])
    if name == "data_parallel":
        scaling = str(params.get("scaling", "weak"))
        gb = gb or (batch if scaling == "strong" else batch * world)
        pb = pb or (batch / world if scaling == "strong" else batch)
        bucket = params.get("bucket")
        bucket = float(bucket) if isinstance(bucket, (int, float)) and bucket > 0 else None
        bucket = bucket or _users_fusion(work)
        if world == 1:
            out.compute.append(
                ComputePoint(
                    key,
                    float(pb),
                    t,
                    rel,
                    mach,
                    rid,
                    "data_parallel at 1 rank",
                    load,
                    *_rel_spread(metric(rec, "step_time")),
                )  # fmt: skip
            )
        own: dict[str, Any] = {
            "strategy": "allreduce", "options": {}, "scaling": scaling,
            "no_exchange_s": work.get("no_sync_step_s"), "bucket": bucket if world > 1 else None,
            "cycle_ms": _users_cycle(work),
        }  # fmt: skip
    else:
        section = rec.get("strategy") or {}
        wire = section.get("bytes_per_step") or {}
        strategy = str(params.get("strategy", "allreduce"))
        gb = gb or float(batch)
        pb = pb or (batch / world if strategy != "pipeline" else float(batch))
        own = {
            "strategy": strategy, "options": dict(params.get("options") or {}),
            "scaling": "strong", "sent_bytes": _num(wire.get("computed")),
            "uncompressed_bytes": _num(wire.get("uncompressed")),
            "compression_ratio": _value(rec, "compression_ratio"),
            "no_exchange_s": work.get("no_exchange_step_s"),
            "bucket": _users_fusion(work) if world > 1 else None, "cycle_ms": _users_cycle(work),
            "extra": {"mechanism": section.get("mechanism")},
        }  # fmt: skip
    out.training.append(
        TrainPoint(
            benchmark=name,
            arch=key,
            arch_params=arch,
            batch=batch,
            ranks=world,
            nodes=node_count(rec),
            global_batch=float(gb),
            per_rank_batch=float(pb),
            step_s=t,
            rel_ci=rel,
            throughput=tp,
            machine=mach,
            record=rid,
            load=load,
            **own,
        )  # fmt: skip
    )


def _users_fusion(work: dict[str, Any]) -> float | None:
    """Horovod's fusion threshold where the user's environment set it
    (HOROVOD_FUSION_THRESHOLD: its records say so, suite/adapters/horovod/rendezvous.py); 0,
    fusion off, is every tensor alone. None where Horovod ran at its default."""
    if not str(work.get("horovod_fusion_threshold_from", "")).startswith("environment"):
        return None
    value = _num(work.get("horovod_fusion_threshold_bytes"))
    return None if value is None else max(value, 1.0)


def _users_cycle(work: dict[str, Any]) -> float | None:
    """Horovod's cycle time (ms) where the user's environment set it (HOROVOD_CYCLE_TIME)."""
    if not str(work.get("horovod_cycle_from", "")).startswith("environment"):
        return None
    value = _num(work.get("horovod_cycle_ms"))
    return value if value is not None and value > 0 else None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


# -- the networks' gradients ------------------------------------------------------------------


@dataclass(frozen=True)
class GraphTensors:
    """A network's tensors as the adapters' importer makes them (elements each)."""

    #: the trainable tensors by name, and batch norm's running statistics by name (JAX's
    #: pytrees order their leaves by name)
    named: dict[str, int]
    statistics: dict[str, int]
    #: the trainable tensors' names in graph order (first use): backward produces them reversed
    order: list[str]

    @property
    def trainable(self) -> list[int]:
        """The trainable tensors' elements in graph order."""
        return [self.named[n] for n in self.order]


_TENSOR_CACHE: dict[str, GraphTensors] = {}


def graph_tensors(arch: dict[str, Any]) -> GraphTensors:
    """The trainable tensors and running statistics of a zoo network or a user's file
    (``network = "onnx"``, ``model``: read again from its path, taken as its run took it),
    counted from its ONNX graph on
    the host (onnx, no framework) as the adapters' importer makes its parameters: the
    floating-point initializers of more than one element, without batch norm's running mean
    and variance (buffers, not gradients: ``statistics``) or values read where a static one is
    expected."""
    key = arch_key(arch)
    if key in _TENSOR_CACHE:
        return _TENSOR_CACHE[key]
    from suite.onnx import zoo
    from suite.onnx.importer import ImportedGraph

    if arch.get("network") == USER_MODEL:
        # as the run trained it: its other inputs bound, its dims set, a training-mode export as
        # its inference twin, the graph to its first output (an auxiliary head's parameters
        # get no gradient, so none is exchanged)
        model = zoo.as_run(zoo.load_user_model(str(arch["model"])),
                           zoo.parse_dims(arch.get("dims")), batch=None).model  # fmt: skip
    else:
        net = zoo.get(str(arch["network"]))
        rest = {k: v for k, v in arch.items() if k != "network"}
        model = net.build(net.validate(rest), seed=0)
    graph = ImportedGraph(model)  # the importer's own choice of what trains
    params = graph.params
    order = list(dict.fromkeys(n for node in model.graph.node for n in node.input if n in params))
    _TENSOR_CACHE[key] = GraphTensors(
        {k: int(v.size) for k, v in params.items()},
        {k: int(v.size) for k, v in graph.state.items()},
        order,
    )
    return _TENSOR_CACHE[key]


def trainable_tensors(arch: dict[str, Any]) -> tuple[int, list[int]]:
    """(elements, each trainable tensor's elements in graph order): :func:`graph_tensors`."""
    sizes = graph_tensors(arch).trainable
    return sum(sizes), sizes


def pipeline_max_stages(arch: dict[str, Any]) -> int | None:
    """How many pipeline stages the zoo network can be cut into (as the strategy cuts it: one
    tensor crossing each cut, weights on both sides); None where the zoo cannot build it."""
    from suite import strategies as S
    from suite.onnx import zoo

    try:
        net = zoo.get(str(arch["network"]))
        rest = {k: v for k, v in arch.items() if k != "network"}
        model = net.build(net.validate(rest), seed=0)
    except Exception:  # noqa: BLE001 - a user network: no limit known
        return None
    with_weights = {point[2] for point in S.cut_points(model) if point[2] > 0}
    return len(with_weights) + 1
