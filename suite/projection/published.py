"""Published scaling results, projected from the papers' stated hardware and setup, with a band.

``published.toml`` (next to this module; ``dlsuite project --published FILE`` reads another in
the same format, docs/guide/projection.md) holds, per paper, the hardware (GPUs per node, links with
their line rates and kinds), the system's algorithm, how gradients become messages and how they
overlap as the paper describes them, and per result the network's size, the per-GPU compute at
the paper's batch, the rank count and the published efficiency. :func:`check` projects each
result with the same model ``dlsuite project`` uses on measured runs (``model.step``): the
exchange, the wait for the slowest GPU (its step-to-step ``step_spread`` and the spread of speed
between GPUs of one model, ``chip_spread``), compute slowed beside the exchange
(:func:`interference_range`: the SMs NCCL holds, its memory traffic), Horovod's coordination
(``coordination``), a slower path a ring crosses inside a node (``[setup.intra_node.across]``);
and its band from every source the inputs leave open: each link's achieved share of its line
rate (the published measurements for its kind), a latency the paper does not state (its
``latency_range``), the ranges of the spreads, the slowdown and the coordinator's cost per
message, an overlap the source leaves open (``overlap_range``), any input given several
published values (``[result.spread]``) and the GPUs the published runs happened to draw (the
baseline's and the other run's slowest GPU, one standard deviation of each draw), added in
quadrature. The error is in percentage points of efficiency; nothing is fitted to a published
efficiency.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from suite.errors import ConfigError
from suite.params import parse_size
from suite.projection import collectives as C
from suite.projection import model as M
from suite.projection.units import parse_bandwidth, parse_latency, parse_link_latency

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PUBLISHED = Path(__file__).with_name("published.toml")
#: within 10 percentage points of the published efficiency
TOLERANCE_POINTS = 10.0
#: a band wider than this is no usable band
MAX_BAND_POINTS = 20.0
#: what a setup that gives no spread takes: the values every set of published.toml takes from its
#: sources (docs/guide/projection.md, "What was taken from where"), so a file of your own does
#: not project as though every GPU ran every step alike. ``chip_spread = 0`` turns one off.
SPREAD_DEFAULTS: dict[str, tuple[float, tuple[float, float]]] = {
    # tf_cnn_benchmarks' jitter on dedicated machines (0.1-0.3%) to DeepLearningExamples' V100
    # latency percentiles (0.24-0.43%)
    "step_spread": (0.002, (0.001, 0.0043)),
    # pairs of published single-GPU throughputs of one V100 model (DeepLearningExamples'
    # ResNet-50 v1.5 README: 1.7-3.7% apart): sigma 1.2-2.6%
    "chip_spread": (0.019, (0.012, 0.026)),
}
MESSAGES = ("per-tensor", "cycle")
#: the most messages a step a bucket or a fusion threshold may cut the gradient into: the model
#: walks them one by one (10,000: 2-3 s for a file's band; DDP's smallest bucket is 1 MiB)
MAX_MESSAGES = 10_000
#: the most Horovod cycles one GPU's step may span (the model wakes at each; 1 ms cycles over a
#: 100 s step)
MAX_CYCLES = 100_000
#: bytes of GPU memory traffic for each byte NCCL moves over a link: it stores what it receives
#: and reads it back (2), and also reads or writes the user's buffers (3) -- NCCL's developer,
#: NVIDIA/nccl#1428 ("300GB/s needs to be multiplied by at least 2x for memory bandwidth ... it
#: can be 3x")
NCCL_MEMORY_TRAFFIC = (2.0, 3.0)


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
    """A link table as the model takes it (its keys checked by :func:`load`)."""
    share = t.get("achieved_share")
    return C.given_link(
        parse_link_latency(t["latency"], f"{where}.latency"),
        parse_bandwidth(t["bandwidth"], f"{where}.bandwidth"),
        str(t["source"]),
        str(t.get("link", "")),
        t.get("kind"),
        float(share) if share is not None else None,
        str(t.get("achieved_share_source", "")),
    )


def load(path: Path = PUBLISHED) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read it ({exc})") from None
    for key in doc:
        if key not in ("setup", "result"):
            raise ConfigError(
                f"{path}: {key}: not a table of this format; give [[setup]] and [[result]] "
                'tables (docs/guide/projection.md, "The file format of --published FILE")'
            )
    for kind in ("setup", "result"):
        tables = doc.get(kind, [])
        if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
            raise ConfigError(f"{path}: {kind}: give each as a [[{kind}]] table")
        for i, table in enumerate(tables):
            if not isinstance(table.get("id"), str) or not table["id"]:
                raise ConfigError(f"{path}: [[{kind}]] number {i + 1}: id missing (give it a name)")
        # a second table of one id replaced the first unseen (a setup) or could not be told
        # from it (a result)
        seen: set[str] = set()
        for i, table in enumerate(tables):
            if table["id"] in seen:
                raise ConfigError(
                    f"{path}: [[{kind}]] number {i + 1}: id = {table['id']!r} is taken by an "
                    f"earlier [[{kind}]]; give each {kind} its own id"
                )
            seen.add(table["id"])
    setups = {s["id"]: s for s in doc.get("setup", [])}
    results = list(doc.get("result", []))
    if not results:
        raise ConfigError(
            f"{path}: no [[result]] tables (docs/guide/projection.md shows the format)"
        )
    for s in setups.values():
        _check_setup(path, s)
    for r in results:
        _check_result(path, r, setups)
    return setups, results


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))


def _parses(parse: Any) -> Any:
    def ok(v: Any) -> bool:
        try:
            parse(v, "")
        except ConfigError:
            return False
        return isinstance(v, str)

    return ok


#: what each kind of value is, and what to write instead of a wrong one
_KINDS: dict[str, tuple[Any, str]] = {
    "count": (
        lambda v: _number(v) and v > 0 and float(v) == int(v),
        "give a whole number above 0 (a bare number: units as the format table says)",
    ),
    "positive": (
        lambda v: _number(v) and v > 0,
        "give a number above 0 (a bare number: units as the format table says)",
    ),
    "nonneg": (lambda v: _number(v) and v >= 0, "give a number of 0 or more"),
    "fraction": (
        lambda v: _number(v) and 0 <= v < 1,
        "give sigma over the median, from 0 to below 1, e.g. 0.003",
    ),
    "share": (
        lambda v: _number(v) and 0 < v <= 1,
        "give the share of the line rate the link carries, above 0 and at most 1, e.g. 0.85",
    ),
    "latency": (_parses(parse_latency), 'give a latency with its unit, e.g. "5 us" or "0.02 ms"'),
    "positive_latency": (
        _parses(parse_link_latency),
        'give a time above 0 with its unit, e.g. "2 us" or "5 ms"',
    ),
    "bandwidth": (
        _parses(parse_bandwidth),
        'give a bandwidth with its unit, e.g. "25 Gbit/s" (bits) or "12.5 GB/s" (bytes)',
    ),
    "size": (
        lambda v: _parses(parse_size)(v) or (_number(v) and v > 0),
        'give a size such as "25 MiB", "64MB" or 1048576 (bytes)',
    ),
    "bool": (lambda v: isinstance(v, bool), "give true or false (no quotes)"),
    "text": (lambda v: isinstance(v, str) and v.strip() != "", "give a text in quotes"),
    "version": (
        lambda v: isinstance(v, str) and any(c.isdigit() for c in v),
        'give a version in quotes, e.g. "2.4.8"',
    ),
    "table": (lambda v: isinstance(v, dict), "give a table"),
}
_LINK_KEYS: dict[str, Any] = {
    "bandwidth": "bandwidth", "latency": "positive_latency", "source": "text", "link": "text",
    "kind": tuple(C.LINK_KINDS), "achieved_share": "share",
    "latency_range": ("pair", "positive_latency"),
}  # fmt: skip
_SPREAD_KEYS: dict[str, Any] = {
    "step_spread": "fraction", "step_spread_range": ("pair", "fraction"),
    "chip_spread": "fraction", "chip_spread_range": ("pair", "fraction"),
}  # fmt: skip
_SETUP_KEYS: dict[str, Any] = {
    "id": "text", "paper": "text", "gpus_per_node": "count", "baseline_ranks": "count",
    "algorithm": C.ALL_ALGORITHMS, "messages": "messages",
    "overlap": tuple(m for m in M.OVERLAP_MODES if m != "auto"),
    "overlap_range": ("list", tuple(m for m in M.OVERLAP_MODES if m != "auto")),
    "fusion_threshold": "size", "cycle_time": "positive_latency", "cycle_sleep": ("after",),
    "coordination": M.COORDINATION, "coordination_message": "latency",
    "coordination_message_range": ("pair", "latency"), "async_ops": "bool",
    "launch": "latency", "nccl_version": "version", "memory_bandwidth": "bandwidth",
    "copies": "bool", "sm_count": "positive", "comm_sms": "nonneg",
    "intra_node": "table", "inter_node": "table", **_SPREAD_KEYS,
}  # fmt: skip
_RESULT_KEYS: dict[str, Any] = {
    "id": "text", "setup": "text", "network": "text", "batch_per_gpu": "count",
    "ranks": "count", "published_efficiency": "positive", "compute_s": "positive",
    "throughput_per_gpu": "positive", "parameters": "count", "tensors": ("list", "count"),
    "tensor_work": ("list", "nonneg"), "tensor_count": "count", "zoo": "zoo",
    "spread": "table", **_SPREAD_KEYS,
}  # fmt: skip
#: the inputs a result may publish with several values (``spread``)
SPREADABLE = ("compute_s", "throughput_per_gpu", "batch_per_gpu", "parameters", "tensor_count")


def _check_keys(
    path: Path, where: str, table: dict[str, Any], keys: dict[str, Any], required: tuple[str, ...]
) -> None:
    """The ``required`` keys of ``table`` present, every key known to ``keys`` (or a
    ``*_source``: free text for people) and each value of its kind; else one ConfigError
    naming ``where`` and the key."""
    for key in required:
        if key not in table:
            raise ConfigError(f"{path}: {where}: {key} missing")
    for key, value in table.items():
        if key.endswith("_source"):
            continue
        kind = keys.get(key)
        if kind is None:
            raise ConfigError(
                f"{path}: {where}: {key}: not a key of this format (the keys: "
                'docs/guide/projection.md, "The file format of --published FILE"; any '
                "*_source key is free text)"
            )
        hint = _wrong(value, kind)
        if hint:
            raise ConfigError(f"{path}: {where}: {key} = {value!r}: {hint}")


def _wrong(value: Any, kind: Any) -> str | None:
    """What to give instead of ``value`` for a key of ``kind``; None where it is right."""
    if isinstance(kind, tuple) and kind and kind[0] in ("pair", "list"):
        inner = kind[1]
        n = "two" if kind[0] == "pair" else "one or more"
        what = (_wrong(None, inner) or "").removeprefix("give ")
        if not isinstance(value, list) or not value or (kind[0] == "pair" and len(value) != 2):
            return f"give a list of {n} values, each {what}"
        bad = [v for v in value if _wrong(v, inner)]
        return f"give a list of {n} values, each {what} ({bad[0]!r} is not)" if bad else None
    if isinstance(kind, tuple):
        return None if value in kind else f"choose one of {', '.join(map(str, kind))}"
    if kind == "messages":
        if value in MESSAGES or _KINDS["size"][0](value):
            return None
        return 'give a bucket size ("25 MiB"), "per-tensor" or "cycle"'
    if kind == "zoo":
        return None if isinstance(value, (str, dict)) else (
            'give a network of the suite\'s zoo, "resnet50" or { network = "resnet50", '
            "resolution = 224, classes = 1000 }"
        )  # fmt: skip
    ok, hint = _KINDS[kind]
    return None if value is not None and ok(value) else hint


_LINK_REQUIRED = ("bandwidth", "latency", "source")


def _check_setup(path: Path, s: dict[str, Any]) -> None:
    """A setup's keys the projection reads, or one ConfigError naming the setup and key."""
    where = f"setup {s['id']!r}"
    _check_keys(path, where, s, _SETUP_KEYS, ("gpus_per_node", "algorithm", "messages",
                                              "baseline_ranks", "intra_node", "inter_node"))  # fmt: skip
    for scope in ("intra_node", "inter_node"):
        link = s[scope]
        keys = {**_LINK_KEYS, "across": "table"} if scope == "intra_node" else _LINK_KEYS
        _check_keys(path, f"{where}: {scope}", link, keys, _LINK_REQUIRED)
        if "across" in link:
            _check_keys(path, f"{where}: {scope}.across", link["across"],
                        {**_LINK_KEYS, "gpus": "count"}, ("gpus", *_LINK_REQUIRED))  # fmt: skip
        _check_range(path, f"{where}: {scope}", link, "latency", lambda v: parse_latency(v, ""))
    for key in ("step_spread", "chip_spread"):
        _check_range(path, where, s, key, float)
    _check_range(path, where, s, "coordination_message", lambda v: parse_latency(v, ""))
    if "comm_sms" in s and float(s["comm_sms"]) >= float(s.get("sm_count", math.inf)):
        raise ConfigError(
            f"{path}: {where}: comm_sms = {s['comm_sms']!r}: give the SMs NCCL's kernels hold, "
            f"fewer than sm_count ({s['sm_count']!r})"
        )
    if s["messages"] == "cycle" and not {"fusion_threshold", "cycle_time"} <= s.keys():
        raise ConfigError(
            f'{path}: {where}: messages = "cycle" needs fusion_threshold and cycle_time '
            '(Horovod\'s defaults: "128 MiB" and "1 ms" since 0.21, "64 MiB" and "5 ms" before)'
        )
    if s.get("coordination", "collective") != "collective" and not (
        parse_latency(s.get("coordination_message", "0 us"), "") > 0
    ):
        raise ConfigError(
            f"{path}: {where}: coordination = {s['coordination']!r} needs coordination_message "
            '(what one point-to-point message costs the coordinator, e.g. "2.5 us")'
        )


def _check_range(path: Path, where: str, table: dict[str, Any], key: str, value_of: Any) -> None:
    """``key_range`` (two values, checked already) from low to high, around ``key``'s value
    where the table gives one."""
    rng = table.get(f"{key}_range")
    if rng is None:
        return
    lo, hi = (value_of(v) for v in rng)
    mid = value_of(table[key]) if key in table else lo
    if not lo <= mid <= hi:
        said = f" around {key} = {table[key]!r}" if key in table else ""
        raise ConfigError(
            f"{path}: {where}: {key}_range = {rng!r}: give the low end first, then the high{said}"
        )


def _check_result(path: Path, r: dict[str, Any], setups: dict[str, dict[str, Any]]) -> None:
    """A result's keys the projection reads, or one ConfigError naming the result and key."""
    where = f"result {r.get('id')!r}"
    if not isinstance(r.get("setup"), str) or r["setup"] not in setups:
        raise ConfigError(
            f"{path}: {where}: setup = {r.get('setup')!r}: give the id of one of the file's "
            f"[[setup]] tables ({', '.join(map(repr, setups)) or 'there are none'})"
        )
    _check_keys(path, where, r, _RESULT_KEYS,
                ("network", "batch_per_gpu", "ranks", "published_efficiency"))  # fmt: skip
    if "compute_s" not in r and "throughput_per_gpu" not in r:
        raise ConfigError(
            f"{path}: {where}: give compute_s (seconds per step on one GPU) or "
            "throughput_per_gpu (samples/s on one GPU)"
        )
    for key, spread in r.get("spread", {}).items():
        if key == "source":
            continue
        if key not in SPREADABLE:
            raise ConfigError(
                f"{path}: {where}: spread.{key}: only {', '.join(SPREADABLE)} can spread"
            )
        hint = _wrong(spread, ("list", _RESULT_KEYS[key]))
        if hint:
            raise ConfigError(f"{path}: {where}: spread.{key} = {spread!r}: {hint}")
    if not {"parameters", "tensors", "zoo"} & r.keys():
        raise ConfigError(
            f"{path}: {where}: give the gradient: parameters (its element count), tensors "
            "(each tensor's, forward order) or zoo (a network of the suite's zoo)"
        )
    base = setups[r["setup"]]["baseline_ranks"]
    if r["ranks"] <= base:
        raise ConfigError(
            f"{path}: {where}: ranks = {r['ranks']!r}: give a count above its setup's "
            f"baseline_ranks ({base}), which the efficiency is relative to"
        )
    if not 1.0 < r["published_efficiency"] <= 200.0:
        raise ConfigError(
            f"{path}: {where}: published_efficiency = {r['published_efficiency']!r}: give it in "
            "percent (93.5 for 93.5%)"
        )
    for key in ("step_spread", "chip_spread"):
        _check_range(path, where, r, key, float)
    if "zoo" in r:
        r["zoo"] = _zoo_arch(path, r)


def _zoo_arch(path: Path, r: dict[str, Any]) -> dict[str, Any]:
    """A result's ``zoo``, a name or a table, as the zoo builds it (its defaults filled in)."""
    from suite.onnx import zoo

    spec = {"network": r["zoo"]} if isinstance(r["zoo"], str) else dict(r["zoo"])
    try:
        if not isinstance(spec.get("network"), str):
            raise ConfigError(f"network missing; choose one of {', '.join(zoo.network_names())}")
        net = zoo.get(spec["network"])
        fields = net.validate({k: v for k, v in spec.items() if k != "network"})
    except ConfigError as exc:
        raise ConfigError(f"{path}: result {r['id']!r}: zoo: {exc}") from None
    return {"network": spec["network"], **fields}


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
    #: one GPU's step-to-step spread (sigma over the median): the slowest rank's wait
    step_spread: float = 0.0
    #: the spread of speed between GPUs of one model (sigma over the median), each GPU's own
    #: for the whole run: a synchronous step also waits for the slowest GPU it drew
    chip_spread: float = 0.0
    #: the baseline's compute moved by this share (the GPUs its run drew; a band's end)
    baseline_shift: float = 0.0
    #: compute's slowdown while the exchange runs beside it; None: the middle of
    #: :func:`interference_range` at these links
    interference: float | None = None
    #: what one point-to-point coordination message costs Horovod's coordinator; None: the
    #: setup's ``coordination_message``
    coordination_message: float | None = None
    #: a slower path a ring over more than ``across_gpus`` of a node's GPUs also crosses
    #: (``[setup.intra_node.across]``), None where there is none
    across: C.Link | None = None
    across_gpus: int = 0


def _across(setup: dict[str, Any]) -> tuple[C.Link | None, int]:
    """The slower path inside a node that a ring over more than ``gpus`` GPUs also crosses
    (``[setup.intra_node.across]``: NCCL 1's ring in device order crossing a DGX-1's two
    NVLink quads through host memory), and that number of GPUs."""
    t = (setup.get("intra_node") or {}).get("across")
    if t is None:
        return None, 0
    return _link(t, f"{setup['id']}.intra_node.across"), int(t["gpus"])


def _intra_at(x: _Inputs, local: int) -> C.Link:
    """The link a ring over ``local`` GPUs of a node waits on: the intra-node link, or the
    slower path it also crosses past ``x.across_gpus`` GPUs (its bandwidth; the larger
    latency of the two: a ring's step waits for its slowest hop)."""
    if x.across is None or local <= x.across_gpus:
        return x.intra
    slow = x.across
    return replace(
        slow, latency_s=max(slow.latency_s, x.intra.latency_s),
        bandwidth=min(slow.bandwidth, x.intra.bandwidth),
        source=f"{x.intra.source}; across: {slow.source}",
    )  # fmt: skip


def _relative_spread(
    result: dict[str, Any], setup: dict[str, Any], key: str
) -> tuple[float, tuple[float, float] | None]:
    """A spread (sigma over the median) the result or its setup gives as ``key``, and the range
    its source measured (``key_range``; None: a single value); :data:`SPREAD_DEFAULTS` where
    neither gives one."""
    where = result if key in result else setup
    if key not in where:
        return SPREAD_DEFAULTS[key]
    value = float(where[key])  # its kind and range checked by :func:`load`
    rng = where.get(f"{key}_range")
    return value, None if rng is None else (float(rng[0]), float(rng[1]))


def _with_spread(x: _Inputs, key: str, value: float) -> _Inputs:
    """``x`` with its step_spread or chip_spread (``key``) at ``value``."""
    if key == "step_spread":
        return replace(x, step_spread=value)
    return replace(x, chip_spread=value)


def _gives(x: _Inputs, key: str) -> bool:
    """Whether the result or its setup gives ``key`` (else the default is taken)."""
    return key in x.result or key in x.setup


def step_spread(
    result: dict[str, Any], setup: dict[str, Any]
) -> tuple[float, tuple[float, float] | None]:
    """One GPU's step-to-step spread (sigma over the median) the result or its setup gives,
    and the range its source measured (None: a single value)."""
    return _relative_spread(result, setup, "step_spread")


def chip_spread(
    result: dict[str, Any], setup: dict[str, Any]
) -> tuple[float, tuple[float, float] | None]:
    """The spread of speed between GPUs of one model (sigma over the median, each GPU's own for
    the whole run) the result or its setup gives, and the range its source measured. Each
    step's slowest GPU is the slowest of ``p`` draws whose spread is this and the step-to-step
    spread in quadrature (both normal and independent)."""
    return _relative_spread(result, setup, "chip_spread")


def interference_range(
    setup: dict[str, Any], intra: C.Link, inter: C.Link, ranks: int
) -> tuple[float, float] | None:
    """How much slower compute runs while NCCL's exchange runs beside it, from the setup's
    GPU: the share of its SMs NCCL's kernels hold (``comm_sms`` of ``sm_count``: a
    compute-bound kernel loses them) and the share of its memory bandwidth NCCL's traffic takes
    (2-3 bytes of memory per byte on the busiest link, :data:`NCCL_MEMORY_TRAFFIC`: a
    memory-bound kernel loses it). A backward pass mixes both kinds of kernel: the range spans
    the smaller to the larger. None where the setup gives no ``sm_count`` or memory bandwidth."""
    if "sm_count" not in setup or "memory_bandwidth" not in setup:
        return None
    membw = parse_bandwidth(setup["memory_bandwidth"], f"{setup['id']}.memory_bandwidth")
    sms = float(setup["sm_count"])
    held = float(setup.get("comm_sms", 0.0))  # fewer than sm_count: checked by :func:`load`
    g = int(setup["gpus_per_node"])
    link = min(intra.bandwidth, inter.bandwidth) if ranks > g else intra.bandwidth
    sm_share = held / sms
    mem = [k * link / membw for k in NCCL_MEMORY_TRAFFIC]
    return min(sm_share, mem[0]), max(sm_share, mem[1])


def _tensor_sizes(r: dict[str, Any]) -> list[int]:
    """Each parameter tensor's elements in forward order: the result's ``tensors``, or its zoo
    network's."""
    if "tensors" in r:
        return [int(n) for n in r["tensors"]]
    from suite.projection.records import trainable_tensors

    return list(trainable_tensors(dict(r["zoo"]))[1])


def _gradient_bytes(r: dict[str, Any]) -> float:
    """The gradient's FP32 bytes: the result's ``parameters``, else its tensors' sum."""
    return 4.0 * float(r["parameters"] if "parameters" in r else sum(_tensor_sizes(r)))


def _ready_at(r: dict[str, Any], count: int) -> tuple[float, ...] | None:
    """When each tensor is ready (backward order) as a share of the backward pass: the layers'
    work done by then (``tensor_work``: each tensor's layer's multiply-adds, forward order, a
    layer's work on its weight and 0 on its bias); None where the result gives none."""
    work = r.get("tensor_work")
    if work is None:
        return None
    if len(work) != count or any(float(w) < 0 for w in work) or sum(work) <= 0:
        raise ConfigError(
            f"result {r['id']}: tensor_work must give one non-negative number per tensor "
            f"({count}), not all zero"
        )
    done = np.cumsum([float(w) for w in reversed(work)])
    return tuple(float(v) for v in done / done[-1])


def _few_messages(
    setup: dict[str, Any], r: dict[str, Any], key: str, grad: float, bucket: float
) -> None:
    """A bucket or fusion threshold that cuts the gradient into at most :data:`MAX_MESSAGES`
    messages a step (a bare number is bytes: ``messages = "64"`` meant 64 MiB, not 1.6 million
    messages the model would walk one by one)."""
    if grad / bucket > MAX_MESSAGES:
        raise ConfigError(
            f"setup {setup['id']!r}: {key} = {setup[key]!r}: cuts result {r['id']!r}'s "
            f"{grad / 1e6:.3g} MB gradient into {grad / bucket:,.0f} messages a step, more than "
            f'the model takes ({MAX_MESSAGES:,}): give a size with its unit, e.g. "25 MiB" (a '
            "bare number is bytes)"
        )


def _efficiency(x: _Inputs) -> tuple[float, M.Breakdown]:
    r, setup = x.result, x.setup
    batch = float(r["batch_per_gpu"])
    step_s = float(r["compute_s"]) if "compute_s" in r else batch / float(r["throughput_per_gpu"])
    compute = M.Compute(
        0.0,
        step_s / batch,
        "from the published inputs",
        0.0,
        None,
        None,
        "gpu",
        [],
        spread=math.hypot(x.step_spread, x.chip_spread),
    )
    g = int(setup["gpus_per_node"])
    tensors: list[float] | None = None
    bucket: float | None = None
    messages = str(setup["messages"])
    if messages == "per-tensor":
        if "tensors" not in r and "zoo" not in r:
            raise ConfigError(
                f"result {r['id']}: messages = per-tensor needs tensors = [...] or a zoo network"
            )
        # the backward pass produces them last first
        tensors = [4.0 * n for n in reversed(_tensor_sizes(r))]
        grad = sum(tensors)
        fusion = M.Fusion("tensors", None, tensors=tuple(tensors),
                          ready_at=_ready_at(r, len(tensors)))  # fmt: skip
    elif messages == "cycle":
        bucket = parse_size(setup["fusion_threshold"], f"{setup['id']}.fusion_threshold")
        cycle = parse_latency(setup["cycle_time"], f"{setup['id']}.cycle_time")
        if step_s / max(cycle, 1e-6) > MAX_CYCLES:
            raise ConfigError(
                f"result {r['id']!r}: one GPU's step of {step_s:.3g} s (compute_s, or "
                f"batch_per_gpu over throughput_per_gpu) spans {step_s / max(cycle, 1e-6):,.0f} "
                f"cycles of setup {setup['id']!r} (cycle_time = {setup['cycle_time']!r}), more "
                f"than the model walks ({MAX_CYCLES:,}): check the step's inputs and the cycle"
            )
        grad = _gradient_bytes(r)
        _few_messages(setup, r, "fusion_threshold", grad, bucket)
        coordination = str(setup.get("coordination", "collective"))  # checked by load()
        message_s = x.coordination_message
        if message_s is None:
            message_s = (parse_latency(setup["coordination_message"],
                                       f"{setup['id']}.coordination_message")
                         if "coordination_message" in setup else 0.0)  # fmt: skip
        granules = None
        if "tensors" in r or "zoo" in r:  # whole tensors: no cycle sends more than it has ready
            granules = tuple(4.0 * n for n in reversed(_tensor_sizes(r)))
        count = float(r.get("tensor_count", len(granules) if granules else 0.0))
        if coordination == "point-to-point per tensor" and count <= 0:
            raise ConfigError(
                f"result {r['id']}: coordination by one message per tensor needs tensor_count "
                "(the gradient's tensors)"
            )
        fusion = M.Fusion("cycle", bucket, cycle, str(setup.get("cycle_sleep", "")) == "after",
                          coordination=coordination, message_s=message_s, tensor_count=count,
                          async_ops=bool(setup.get("async_ops", False)),
                          granules=granules,
                          ready_at=_ready_at(r, len(granules)) if granules else None)  # fmt: skip
    else:
        bucket = parse_size(messages, f"{setup['id']}.messages")
        grad = _gradient_bytes(r)
        _few_messages(setup, r, "messages", grad, bucket)
        fusion = M.Fusion("buckets", bucket)
    launch = parse_latency(setup["launch"], f"{setup['id']}.launch") if "launch" in setup else 0.0
    version = C.parse_version(setup.get("nccl_version"))
    tree = version is None or version >= C.NCCL_TREE_SINCE
    membw = (
        parse_bandwidth(setup["memory_bandwidth"], f"{setup['id']}.memory_bandwidth")
        if "memory_bandwidth" in setup
        else None
    )

    def one(p: int, compute: M.Compute) -> M.Breakdown:
        intra = _intra_at(x, min(p, g))
        interference = x.interference
        if interference is None:
            rng = interference_range(setup, intra, x.inter, p)
            interference = sum(rng) / 2.0 if rng else 0.0
        pl = M.place(p, g, intra, x.inter, x.algorithm, bucket, compute, tensors,
                     launch_s=launch, nccl_tree=tree, fusion=fusion, memory_bandwidth=membw,
                     copies=bool(setup.get("copies", False)),
                     interference=interference)  # fmt: skip
        return M.step("allreduce", {}, compute, batch, batch * p, grad, pl, x.overlap)

    p, pb = int(r["ranks"]), int(setup["baseline_ranks"])
    top = one(p, compute)
    base = one(pb, compute.scaled(1.0 + x.baseline_shift) if x.baseline_shift else compute)
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
            lats = [parse_link_latency(v, f"{x.setup['id']}.{scope}_node.latency_range")
                    for v in table["latency_range"]]  # fmt: skip
            ends[f"{scope}-node latency {table['latency_range'][0]}-{table['latency_range'][-1]}"] = [
                _efficiency(_with_link(x, scope, replace(link, latency_s=v)))[0] for v in lats
            ]  # fmt: skip
    local = min(int(x.result["ranks"]), g)
    if x.across is not None and local > x.across_gpus:
        slow = x.across
        if slow.share_range and slow.share_range[1] > slow.share_range[0]:
            lo, hi = slow.share_range
            ends[f"the share of line rate across the node ({lo:.2f}-{hi:.2f}, {slow.kind})"] = [
                _efficiency(replace(x, across=slow.at_share(v)))[0] for v in (lo, hi)
            ]
    overlaps = x.setup.get("overlap_range")
    if overlaps:
        ends[f"overlap {' to '.join(overlaps)}"] = [
            _efficiency(replace(x, overlap=M.Overlap(m)))[0] for m in overlaps
        ]
    for key, what in (("step_spread", "one GPU's step-time spread {} (stragglers{})"),
                      ("chip_spread", "the spread between GPUs {} (the slowest GPU{})")):  # fmt: skip
        _, rng_s = _relative_spread(x.result, x.setup, key)
        if rng_s and rng_s[1] > rng_s[0]:
            lo, hi = rng_s
            given = "" if _gives(x, key) else ", the default"
            ends[what.format(f"{100 * lo:.2g}-{100 * hi:.2g}%", given)] = [
                _efficiency(_with_spread(x, key, v))[0] for v in (lo, hi)
            ]
    if x.chip_spread > 0:
        # the GPUs each published run drew: the slowest of the baseline's and of the other
        # run's, each one standard deviation of its own draw (one GPU's: chip_spread), as
        # independent draws
        p, pb = int(x.result["ranks"]), int(x.setup["baseline_ranks"])
        drawn = x.chip_spread * math.hypot(M.sd_max_normal(p), M.sd_max_normal(pb))
        ends[f"the GPUs the runs drew (+-{100 * drawn:.2g}%)"] = [
            _efficiency(replace(x, baseline_shift=v))[0] for v in (-drawn, drawn)
        ]
    rng = interference_range(x.setup, x.intra, x.inter, int(x.result["ranks"]))
    if rng and rng[1] > rng[0]:
        ends[f"compute slowed beside the exchange {100 * rng[0]:.2g}-{100 * rng[1]:.2g}%"] = [
            _efficiency(replace(x, interference=v))[0] for v in rng
        ]
    if "coordination_message_range" in x.setup:
        rng_t = x.setup["coordination_message_range"]
        costs = [parse_latency(v, f"{x.setup['id']}.coordination_message_range") for v in rng_t]
        ends[f"the coordinator's cost per message {rng_t[0]}-{rng_t[-1]}"] = [
            _efficiency(replace(x, coordination_message=v))[0] for v in costs
        ]
    for key, values in (x.result.get("spread") or {}).items():
        if key == "source":
            continue
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
        try:
            out.append(_check_one(r, setups[r["setup"]]))
        except ConfigError as exc:  # an input only the evaluation can judge: name the file too
            said = str(exc)
            raise ConfigError(said if said.startswith(str(path)) else f"{path}: {said}") from None
    return out


def _check_one(r: dict[str, Any], setup: dict[str, Any]) -> Projected:
    """One result projected: its headline, band and variants."""
    across, across_gpus = _across(setup)
    x = _Inputs(
        r, setup, _link(setup["intra_node"], f"{setup['id']}.intra_node"),
        _link(setup["inter_node"], f"{setup['id']}.inter_node"),
        M.Overlap(str(setup.get("overlap", "timeline"))), str(setup["algorithm"]),
        step_spread(r, setup)[0], chip_spread(r, setup)[0], across=across,
        across_gpus=across_gpus,
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
    variants["no stragglers"] = _efficiency(replace(x, step_spread=0.0))[0]
    variants["no spread between GPUs"] = _efficiency(replace(x, chip_spread=0.0))[0]
    variants["no interference"] = _efficiency(replace(x, interference=0.0))[0]
    variants["no coordination cost"] = _efficiency(replace(x, coordination_message=1e-15))[0]
    variants["line rate"] = _efficiency(replace(
        x, intra=x.intra.at_share(1.0), inter=x.inter.at_share(1.0),
        across=x.across.at_share(1.0) if x.across else None,
    ))[0]  # fmt: skip
    parts = top.parts()
    dom = max(parts, key=lambda k: parts[k])
    return Projected(
        r["id"], r["network"], int(r["ranks"]), int(setup["baseline_ranks"]),
        float(r["published_efficiency"]), eff, variants, top.total, top.exposed,
        top.exchange, {"setup": setup, "result": r}, band, moves,
        f"{dom} {100 * parts[dom] / top.total:.0f}%",
    )  # fmt: skip


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


__all__ = [
    "MAX_BAND_POINTS", "PUBLISHED", "Projected", "as_doc", "check", "chip_spread", "load",
    "step_spread",
]  # fmt: skip
