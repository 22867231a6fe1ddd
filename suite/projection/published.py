"""Published scaling results, projected from the papers' stated hardware and setup.

``published.toml`` (next to this module) holds, per paper, the hardware (GPUs per node, links),
the system's algorithm, message layout and overlap as the paper describes them, and per result
the network's size, the per-GPU compute at the paper's batch, the rank count and the published
efficiency. :func:`check` projects each result with the same model ``dlsuite project`` uses on
measured runs (``model.step``) and reports the error in percentage points of efficiency, with
the projection under the other overlap models beside it: which choice decides the outcome shows.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
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
#: the target of issue 27: within 10 percentage points of the published efficiency
TOLERANCE_POINTS = 10.0
SIZE_UNITS = {
    "B": 1,
    "KB": 1e3,
    "MB": 1e6,
    "GB": 1e9,
    "KiB": 1 << 10,
    "MiB": 1 << 20,
    "GiB": 1 << 30,
}


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

    @property
    def error_points(self) -> float:
        return self.projected - self.published

    @property
    def within(self) -> bool:
        return abs(self.error_points) <= TOLERANCE_POINTS


def _link(t: dict[str, Any], where: str) -> C.Link:
    for key in ("bandwidth", "latency", "source"):
        if key not in t:
            raise ConfigError(
                f"{where}.{key}: missing; every link needs bandwidth, latency, source"
            )
    return C.Link(
        parse_latency(t["latency"], f"{where}.latency"),
        parse_bandwidth(t["bandwidth"], f"{where}.bandwidth"),
        str(t["source"]),
        str(t.get("link", "")),
    )


def load(path: Path = PUBLISHED) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it ({exc})") from None
    setups = {s["id"]: s for s in doc.get("setup", [])}
    results = list(doc.get("result", []))
    for r in results:
        if r.get("setup") not in setups:
            raise ConfigError(f"{path}: result {r.get('id')!r}: no setup {r.get('setup')!r}")
    return setups, results


def _efficiency(
    r: dict[str, Any], setup: dict[str, Any], overlap: M.Overlap, algorithm: str
) -> tuple[float, M.Breakdown]:
    batch = float(r["batch_per_gpu"])
    if "compute_s" in r:
        step_s = float(r["compute_s"])
    else:
        step_s = batch / float(r["throughput_per_gpu"])
    compute = M.Compute(
        0.0, step_s / batch, "from the published inputs", 0.0, None, None, "gpu", []
    )
    intra = _link(setup["intra_node"], f"{setup['id']}.intra_node")
    inter = _link(setup["inter_node"], f"{setup['id']}.inter_node")
    g = int(setup["gpus_per_node"])
    tensors: list[float] | None = None
    bucket: float | None = None
    if setup["messages"] == "per-tensor":
        from suite.projection.records import trainable_tensors

        if "zoo" not in r:
            raise ConfigError(f"result {r['id']}: messages = per-tensor needs a zoo network")
        _, sizes = trainable_tensors(dict(r["zoo"]))
        tensors = [4.0 * n for n in reversed(sizes)]  # the backward pass produces them last first
        grad = sum(tensors)
    else:
        bucket = parse_size(setup["messages"], f"{setup['id']}.messages")
        grad = 4.0 * float(r["parameters"])

    def one(p: int) -> M.Breakdown:
        pl = M.place(p, g, intra, inter, algorithm, bucket, compute, tensors)
        return M.step("allreduce", {}, compute, batch, batch * p, grad, pl, overlap)

    p, pb = int(r["ranks"]), int(setup["baseline_ranks"])
    top, base = one(p), one(pb)
    eff = (batch * p / top.total) / (p / pb * batch * pb / base.total)
    return 100.0 * eff, top


def check(path: Path = PUBLISHED) -> list[Projected]:
    """Every result of ``published.toml`` projected: the headline (the setup's own overlap and
    algorithm) and the variants (no overlap, full overlap, and each other algorithm)."""
    setups, results = load(path)
    out = []
    for r in results:
        setup = setups[r["setup"]]
        overlap = M.Overlap(str(setup.get("overlap", "timeline")))
        algorithm = str(setup["algorithm"])
        eff, top = _efficiency(r, setup, overlap, algorithm)
        variants = {}
        for mode in ("none", "timeline", "full"):
            variants[f"overlap {mode}"] = _efficiency(r, setup, M.Overlap(mode), algorithm)[0]
        for alg in C.ALGORITHMS:
            variants[f"{alg}"] = _efficiency(r, setup, overlap, alg)[0]
        for factor in (0.1, 5.0):
            s2 = replace_latency(setup, factor)
            variants[f"latency x{factor:g}"] = _efficiency(r, s2, overlap, algorithm)[0]
        out.append(
            Projected(
                r["id"], r["network"], int(r["ranks"]), int(setup["baseline_ranks"]),
                float(r["published_efficiency"]), eff, variants, top.total, top.exposed,
                top.exchange, {"setup": setup, "result": r},
            )
        )  # fmt: skip
    return out


def replace_latency(setup: dict[str, Any], factor: float) -> dict[str, Any]:
    """The setup with both links' latencies scaled (the latencies are assumed: how much do
    they matter?)."""
    s = dict(setup)
    for scope in ("intra_node", "inter_node"):
        t = dict(s[scope])
        seconds = parse_latency(t["latency"], scope) * factor
        t["latency"] = f"{seconds * 1e6:.6g} us"
        s[scope] = t
    return s


def as_doc(items: list[Projected]) -> list[dict[str, Any]]:
    return [
        {
            "id": p.id, "network": p.network, "ranks": p.ranks, "baseline_ranks": p.baseline_ranks,
            "published_efficiency": p.published, "projected_efficiency": p.projected,
            "error_points": p.error_points, "within_10_points": p.within,
            "variants": p.variants, "step_s": p.step_s, "exposed_s": p.exposed_s,
            "exchange_s": p.exchange_s, "inputs": p.inputs,
        }
        for p in items
    ]  # fmt: skip


__all__ = ["PUBLISHED", "Projected", "as_doc", "check", "load", "parse_size"]
