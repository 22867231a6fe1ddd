"""Published scaling results, projected from the papers' stated hardware and setup, with a band.

``published.toml`` (next to this module; ``dlsuite project --published FILE`` reads another in
the same format, docs/projection.md) holds, per paper, the hardware (GPUs per node, links with
their line rates and kinds), the system's algorithm, how gradients become messages and how they
overlap as the paper describes them, and per result the network's size, the per-GPU compute at
the paper's batch, the rank count and the published efficiency. :func:`check` projects each
result with the same model ``dlsuite project`` uses on measured runs (``model.step``), and its
band from every source the inputs leave open: each link's achieved share of its line rate (the
published measurements for its kind), a latency the paper does not state (its ``latency_range``)
and any input given several published values (``[result.spread]``), added in quadrature. The
error is in percentage points of efficiency; nothing is fitted to a published efficiency.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from suite.errors import ConfigError
from suite.projection import collectives as C
from suite.projection import model as M
from suite.projection.units import parse_bandwidth, parse_latency

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PUBLISHED = Path(__file__).with_name("published.toml")
#: within 10 percentage points of the published efficiency
TOLERANCE_POINTS = 10.0
#: a band wider than this is no usable band
MAX_BAND_POINTS = 20.0
SIZE_UNITS = {
    "B": 1,
    "KB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "KiB": 1 << 10,
    "MiB": 1 << 20,
    "GiB": 1 << 30,
}
MESSAGES = ("per-tensor", "cycle")


def parse_size(text: str, what: str) -> float:
    """Bytes from ``"64 MiB"``, ``"25MB"`` or a plain number of bytes."""
    import re

    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)\s*([KMG]i?B|B)?\s*", str(text))
    if not m or float(m.group(1)) <= 0:
        raise ConfigError(f"{what} = {text!r}: give a size such as 25MiB, 64MB or 1048576")
    return float(m.group(1)) * SIZE_UNITS[m.group(2) or "B"]


@dataclass
class Projected:
    id: str
    network: str
    ranks: int
    baseline_ranks: int
    published: float  # percent
    projected: float  # percent, the headline model
    variants: dict[str, float]  # percent under the other model choices
    step_s: float
    exposed_s: float
    exchange_s: float
    inputs: dict[str, Any]
    band: tuple[float, float] = (0.0, 0.0)  # percent
    band_sources: dict[str, float] = field(default_factory=dict)  # points each source moves it
    dominant: str = ""

    @property
    def error_points(self) -> float:
        return self.projected - self.published

    @property
    def within(self) -> bool:
        return abs(self.error_points) <= TOLERANCE_POINTS

    @property
    def band_points(self) -> float:
        return self.band[1] - self.band[0]

    @property
    def inside(self) -> bool:
        """The published figure lies inside a usable band."""
        lo, hi = self.band
        return self.band_points <= MAX_BAND_POINTS and lo - 1e-9 <= self.published <= hi + 1e-9


def _link(t: dict[str, Any], where: str) -> C.Link:
    for key in ("bandwidth", "latency", "source"):
        if key not in t:
            raise ConfigError(
                f"{where}.{key}: missing; every link needs bandwidth, latency, source"
            )
    kind = t.get("kind")
    if kind is not None and kind not in C.LINK_KINDS:
        raise ConfigError(f"{where}.kind = {kind!r}: choose one of {', '.join(C.LINK_KINDS)}")
    share = t.get("achieved_share")
    return C.given_link(
        parse_latency(t["latency"], f"{where}.latency"),
        parse_bandwidth(t["bandwidth"], f"{where}.bandwidth"),
        str(t["source"]),
        str(t.get("link", "")),
        kind,
        float(share) if share is not None else None,
        str(t.get("achieved_share_source", "")),
    )


def load(path: Path = PUBLISHED) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it ({exc})") from None
    setups = {s["id"]: s for s in doc.get("setup", [])}
    results = list(doc.get("result", []))
    if not results:
        raise ConfigError(f"{path}: no [[result]] tables (docs/projection.md shows the format)")
    for s in setups.values():
        for key in ("gpus_per_node", "algorithm", "messages", "baseline_ranks", "intra_node",
                    "inter_node"):  # fmt: skip
            if key not in s:
                raise ConfigError(f"{path}: setup {s['id']!r}: {key} missing")
        if s["algorithm"] not in C.ALL_ALGORITHMS:
            raise ConfigError(
                f"{path}: setup {s['id']!r}: algorithm {s['algorithm']!r}: choose one of "
                f"{', '.join(C.ALL_ALGORITHMS)}"
            )
    for r in results:
        if r.get("setup") not in setups:
            raise ConfigError(f"{path}: result {r.get('id')!r}: no setup {r.get('setup')!r}")
        for key in ("network", "batch_per_gpu", "ranks", "published_efficiency"):
            if key not in r:
                raise ConfigError(f"{path}: result {r.get('id')!r}: {key} missing")
        if "compute_s" not in r and "throughput_per_gpu" not in r:
            raise ConfigError(
                f"{path}: result {r['id']!r}: give compute_s (seconds per step on one GPU) or "
                "throughput_per_gpu (samples/s on one GPU)"
            )
    return setups, results


@dataclass(frozen=True)
class _Inputs:
    """What one evaluation uses: the result's inputs (perhaps one spread value changed), the
    links (perhaps at another share or latency) and the model's choices."""

    result: dict[str, Any]
    setup: dict[str, Any]
    intra: C.Link
    inter: C.Link
    overlap: M.Overlap
    algorithm: str


def _efficiency(x: _Inputs) -> tuple[float, M.Breakdown]:
    r, setup = x.result, x.setup
    batch = float(r["batch_per_gpu"])
    step_s = float(r["compute_s"]) if "compute_s" in r else batch / float(r["throughput_per_gpu"])
    compute = M.Compute(
        0.0, step_s / batch, "from the published inputs", 0.0, None, None, "gpu", []
    )
    g = int(setup["gpus_per_node"])
    tensors: list[float] | None = None
    bucket: float | None = None
    messages = str(setup["messages"])
    if messages == "per-tensor":
        from suite.projection.records import trainable_tensors

        if "tensors" in r:  # each parameter tensor's elements, in forward order
            sizes = [int(n) for n in r["tensors"]]
        elif "zoo" in r:
            _, sizes = trainable_tensors(dict(r["zoo"]))
        else:
            raise ConfigError(
                f"result {r['id']}: messages = per-tensor needs tensors = [...] or a zoo network"
            )
        tensors = [4.0 * n for n in reversed(sizes)]  # the backward pass produces them last first
        grad = sum(tensors)
        fusion = M.Fusion("tensors", None, tensors=tuple(tensors))
    elif messages == "cycle":
        bucket = parse_size(setup["fusion_threshold"], f"{setup['id']}.fusion_threshold")
        cycle = parse_latency(setup["cycle_time"], f"{setup['id']}.cycle_time")
        grad = 4.0 * float(r["parameters"])
        fusion = M.Fusion("cycle", bucket, cycle, str(setup.get("cycle_sleep", "")) == "after")
    else:
        bucket = parse_size(messages, f"{setup['id']}.messages")
        grad = 4.0 * float(r["parameters"])
        fusion = M.Fusion("buckets", bucket)
    launch = parse_latency(setup["launch"], f"{setup['id']}.launch") if "launch" in setup else 0.0
    version = C.parse_version(setup.get("nccl_version"))
    tree = version is None or version >= C.NCCL_TREE_SINCE
    membw = (
        parse_bandwidth(setup["memory_bandwidth"], f"{setup['id']}.memory_bandwidth")
        if "memory_bandwidth" in setup
        else None
    )

    def one(p: int) -> M.Breakdown:
        pl = M.place(p, g, x.intra, x.inter, x.algorithm, bucket, compute, tensors,
                     launch_s=launch, nccl_tree=tree, fusion=fusion, memory_bandwidth=membw,
                     copies=bool(setup.get("copies", False)))  # fmt: skip
        return M.step("allreduce", {}, compute, batch, batch * p, grad, pl, x.overlap)

    p, pb = int(r["ranks"]), int(setup["baseline_ranks"])
    top, base = one(p), one(pb)
    eff = (batch * p / top.total) / (p / pb * batch * pb / base.total)
    return 100.0 * eff, top


def _with_link(x: _Inputs, scope: str, link: C.Link) -> _Inputs:
    return replace(x, intra=link) if scope == "intra" else replace(x, inter=link)


def _band(x: _Inputs, eff: float) -> tuple[tuple[float, float], dict[str, float]]:
    """Every open input moved to its ends; the deviations added in quadrature."""
    ends: dict[str, list[float]] = {}
    g = int(x.setup["gpus_per_node"])
    one_node = int(x.result["ranks"]) <= g and int(x.setup["baseline_ranks"]) <= g
    for scope in ("intra",) if one_node else ("intra", "inter"):
        link: C.Link = getattr(x, scope)
        if link.share_range and link.share_range[1] > link.share_range[0]:
            lo, hi = link.share_range
            ends[f"{scope}-node share of line rate {lo:.2f}-{hi:.2f} ({link.kind or 'kind not known'})"] = [
                _efficiency(_with_link(x, scope, link.at_share(s)))[0] for s in (lo, hi)
            ]  # fmt: skip
        table = x.setup[f"{scope}_node"]
        if "latency_range" in table:
            lats = [parse_latency(v, f"{x.setup['id']}.{scope}_node.latency_range")
                    for v in table["latency_range"]]  # fmt: skip
            ends[f"{scope}-node latency {table['latency_range'][0]}-{table['latency_range'][-1]}"] = [
                _efficiency(_with_link(x, scope, replace(link, latency_s=v)))[0] for v in lats
            ]  # fmt: skip
    for key, values in (x.result.get("spread") or {}).items():
        if key in ("source",):
            continue
        if key not in ("compute_s", "throughput_per_gpu", "batch_per_gpu", "parameters"):
            raise ConfigError(
                f"result {x.result['id']}: spread.{key}: only compute_s, throughput_per_gpu, "
                "batch_per_gpu and parameters can spread"
            )
        ends[f"{key} {min(values):g}-{max(values):g}"] = [
            _efficiency(replace(x, result={**x.result, key: v}))[0] for v in values
        ]
    # in quadrature as ratios, as dlsuite project's bands: never below zero, never past 100%
    dev_lo = math.sqrt(sum(max(0.0, math.log(eff / min(v))) ** 2 for v in ends.values()))
    dev_hi = math.sqrt(sum(max(0.0, math.log(max(v) / eff)) ** 2 for v in ends.values()))
    moves = {k: max(v) - min(v) for k, v in ends.items()}
    return (eff * math.exp(-dev_lo), min(eff * math.exp(dev_hi), max(100.0, eff))), moves


def check(path: Path = PUBLISHED) -> list[Projected]:
    """Every result of the file projected: the headline (the setup's own overlap and algorithm)
    with its band, and the variants (no overlap, full overlap, each other algorithm, the
    latencies x0.1 and x5, every link at its line rate)."""
    setups, results = load(path)
    out = []
    for r in results:
        setup = setups[r["setup"]]
        x = _Inputs(
            r, setup, _link(setup["intra_node"], f"{setup['id']}.intra_node"),
            _link(setup["inter_node"], f"{setup['id']}.inter_node"),
            M.Overlap(str(setup.get("overlap", "timeline"))), str(setup["algorithm"]),
        )  # fmt: skip
        eff, top = _efficiency(x)
        band, moves = _band(x, eff)
        variants = {}
        for mode in ("none", "timeline", "full"):
            variants[f"overlap {mode}"] = _efficiency(replace(x, overlap=M.Overlap(mode)))[0]
        for alg in C.ALL_ALGORITHMS:
            variants[alg] = _efficiency(replace(x, algorithm=alg))[0]
        for factor in (0.1, 5.0):
            variants[f"latency x{factor:g}"] = _efficiency(replace(
                x, intra=replace(x.intra, latency_s=x.intra.latency_s * factor),
                inter=replace(x.inter, latency_s=x.inter.latency_s * factor),
            ))[0]  # fmt: skip
        variants["line rate"] = _efficiency(replace(x, intra=x.intra.at_share(1.0),
                                                    inter=x.inter.at_share(1.0)))[0]  # fmt: skip
        parts = top.parts()
        dom = max(parts, key=lambda k: parts[k])
        out.append(
            Projected(
                r["id"], r["network"], int(r["ranks"]), int(setup["baseline_ranks"]),
                float(r["published_efficiency"]), eff, variants, top.total, top.exposed,
                top.exchange, {"setup": setup, "result": r}, band, moves,
                f"{dom} {100 * parts[dom] / top.total:.0f}%",
            )
        )  # fmt: skip
    return out


def as_doc(items: list[Projected]) -> list[dict[str, Any]]:
    return [
        {
            "id": p.id, "network": p.network, "ranks": p.ranks, "baseline_ranks": p.baseline_ranks,
            "published_efficiency": p.published, "projected_efficiency": p.projected,
            "band": list(p.band), "band_points": p.band_points, "band_sources": p.band_sources,
            "error_points": p.error_points, "within_10_points": p.within,
            "inside_band": p.inside, "dominant": p.dominant,
            "variants": p.variants, "step_s": p.step_s, "exposed_s": p.exposed_s,
            "exchange_s": p.exchange_s, "inputs": p.inputs,
        }
        for p in items
    ]  # fmt: skip


__all__ = ["MAX_BAND_POINTS", "PUBLISHED", "Projected", "as_doc", "check", "load", "parse_size"]
