"""Distributed strategies: framework-neutral definitions of how gradients, parameters or
activations move between ranks (the ``strategies`` benchmark that compares them is in
suite/levels/distributed/strategies.py). Below the levels and the adapters: an adapter maps a
strategy to its framework's mechanism, the benchmark measures it.

A :class:`Strategy` says *what* is exchanged, *when* and with which staleness (allreduce of
gradients every step; a parameter server, synchronous or not; compressed gradients with or
without error feedback; periodic model averaging; pipeline stages). It never says *how*: each
adapter maps a strategy to its framework's own mechanism (DDP communication hooks, MXNet's
kvstore, TensorFlow's ParameterServerStrategy, Horovod's compression) or declares it
unsupported with the reason (``Adapter.strategies`` / ``Adapter.unsupported_strategies``).

What a strategy costs is measured the same way for every framework
(suite/levels/distributed/strategy_run.py): throughput on a zoo network, the bytes each rank
sends per step (:func:`sent_bytes_per_step`, from the definition, and the process's own write
counter), the communication share, and the statistical cost on scikit-learn's digits (steps and
time to a target test accuracy, the accuracy after a fixed budget, the distance from the
synchronous trajectory), compared on the host with the synchronous ``allreduce`` baseline of
the same run. This module imports no framework.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from suite.errors import ConfigError, UnsupportedError

ITEMSIZE = 4  # fp32 gradients and parameters

#: the strategy every other one is compared with (the synchronous allreduce of the same run)
BASELINE = "allreduce"


@dataclass(frozen=True)
class Option:
    """A strategy's parameter: its type, default and lower bound (or allowed values)."""

    type: type
    default: Any
    minimum: float | None = None
    choices: tuple[Any, ...] | None = None
    help: str = ""


@dataclass(frozen=True)
class Strategy:
    """How training state moves between ranks, independent of any framework."""

    name: str
    summary: str
    #: "gradients" | "parameters" | "activations"
    exchanged: str
    #: "collective" (every rank talks to every rank) | "parameter-server" | "pipeline"
    topology: str
    #: each step waits for every rank's contribution
    synchronous: bool
    #: steps a rank's update may lag behind the others: 0 synchronous, None unbounded
    staleness: int | None
    #: ranks take their steps in lock step (collectives every step or every period), so the
    #: measurement loop's joint decisions (agree_max) may run between steps
    lockstep: bool
    #: "fp16", "bf16", "powersgd", "2bit", "1bit" or None
    compression: str | None = None
    #: the quantisation error is kept (a residual) and added to the next step's gradient
    error_feedback: bool = False
    #: each rank trains on its shard of the global batch (False: pipeline stages see it whole)
    data_parallel: bool = True
    #: the k-step result must equal one process training on the global batch (the
    #: correctness check); otherwise convergence is checked and the distance recorded
    exact: bool = False
    #: after the timed steps every rank holds the same weights (checked)
    identical_across_ranks: bool = True
    options: dict[str, Option] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        """The definition as a record holds it."""
        return {
            "name": self.name,
            "summary": self.summary,
            "exchanged": self.exchanged,
            "topology": self.topology,
            "synchronous": self.synchronous,
            "staleness": self.staleness,
            "compression": self.compression,
            "error_feedback": self.error_feedback,
        }


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy(
            "allreduce",
            "synchronous data parallelism: gradients summed by an allreduce every step",
            "gradients", "collective", True, 0, True, exact=True,
        ),
        Strategy(
            "ps-sync",
            "parameter server, synchronous: workers push gradients, the server sums every "
            "worker's push, updates the weights and workers pull them",
            "gradients", "parameter-server", True, 0, True, exact=True,
        ),
        Strategy(
            "ps-async",
            "parameter server, asynchronous: the server applies each worker's gradient as it "
            "arrives (scaled by 1/world); workers pull whatever weights it holds",
            "gradients", "parameter-server", False, None, False, identical_across_ranks=False,
        ),
        Strategy(
            "ssp",
            "stale-synchronous parameter server: asynchronous, but no worker runs more than "
            "`staleness` steps ahead of the slowest",
            "gradients", "parameter-server", False, 2, False, identical_across_ranks=False,
            options={"staleness": Option(int, 2, 1, help="steps a worker may run ahead")},
        ),
        Strategy(
            "fp16",
            "allreduce of gradients cast to fp16 (half the bytes), no error feedback",
            "gradients", "collective", True, 0, True, compression="fp16",
        ),
        Strategy(
            "bf16",
            "allreduce of gradients cast to bf16 (half the bytes), no error feedback",
            "gradients", "collective", True, 0, True, compression="bf16",
        ),
        Strategy(
            "powersgd",
            "PowerSGD: each gradient matrix sent as two rank-r factors (power iteration), "
            "with error feedback; vectors and matrices it would not shrink go uncompressed",
            "gradients", "collective", True, 0, True, compression="powersgd",
            error_feedback=True,
            options={
                "rank": Option(int, 2, 1, help="matrix approximation rank r"),
                "start_iter": Option(
                    int, 2, 2, help="steps of plain allreduce before compression starts"
                ),
            },
        ),
        Strategy(
            "2bit",
            "2-bit quantised gradients (+threshold, 0, -threshold) with error feedback: what "
            "a quantisation drops is kept and added to the next step's gradient",
            "gradients", "parameter-server", True, 0, True, compression="2bit",
            error_feedback=True,
            options={"threshold": Option(float, 0.5, 0.0, help="quantisation threshold")},
        ),
        Strategy(
            "1bit",
            "1-bit quantised gradients (sign against a threshold) with error feedback",
            "gradients", "parameter-server", True, 0, True, compression="1bit",
            error_feedback=True,
            options={"threshold": Option(float, 0.0, None, help="quantisation threshold")},
        ),
        Strategy(
            "local-sgd",
            "local SGD: every rank steps on its own gradients, the models are averaged "
            "(allreduce of the parameters) every `period` steps",
            "parameters", "collective", False, None, True, identical_across_ranks=False,
            options={
                "period": Option(int, 4, 1, help="steps between model averagings"),
                "warmup": Option(
                    int, 0, 0, help="steps of synchronous allreduce before local steps start"
                ),
            },
        ),
        Strategy(
            "pipeline",
            "pipeline parallelism: the network cut into one stage per rank, the global batch "
            "split into micro-batches whose activations and gradients flow between stages",
            "activations", "pipeline", True, 0, True, data_parallel=False, exact=True,
            identical_across_ranks=False,
            options={
                "microbatches": Option(int, 4, 1, help="micro-batches per step"),
                "schedule": Option(str, "gpipe", choices=("gpipe", "1f1b")),
            },
        ),
        Strategy(
            "adasum",
            "Adasum: gradients combined by adaptive summation (orthogonal parts added, "
            "parallel parts averaged) instead of a mean",
            "gradients", "collective", True, 0, True, identical_across_ranks=True,
        ),
    )
}  # fmt: skip


def runs_at_one_rank(strategy: Strategy) -> bool:
    """A strategy a process group of one rank runs through the framework's own mechanism
    (``--world-size 1 --dist-backend nccl``): the synchronous collectives over gradients
    (allreduce and its compressions: a group of one still casts, launches and waits), not a
    parameter server, local SGD or a pipeline, which need a second rank to mean anything."""
    return strategy.topology == "collective" and strategy.synchronous and strategy.lockstep


def get(name: str) -> Strategy:
    if name not in STRATEGIES:
        raise ConfigError(
            f"--strategy {name!r}: no such strategy; choose from: {', '.join(STRATEGIES)}"
        )
    return STRATEGIES[name]


def validate_options(strategy: Strategy, given: Mapping[str, Any]) -> dict[str, Any]:
    """The strategy's options with defaults filled; one clear error for a wrong one."""
    unknown = set(given) - set(strategy.options)
    if unknown:
        known = ", ".join(strategy.options) or "none"
        raise ConfigError(
            f"strategies.options: {sorted(unknown)[0]!r} is not an option of {strategy.name} "
            f"(its options: {known})"
        )
    out: dict[str, Any] = {}
    for key, opt in strategy.options.items():
        v = given.get(key, opt.default)
        if opt.type is float and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if isinstance(v, bool) or not isinstance(v, opt.type):
            raise ConfigError(
                f"strategies.options.{key} ({strategy.name}): expected {opt.type.__name__}, "
                f"got {v!r}"
            )
        if opt.choices is not None and v not in opt.choices:
            raise ConfigError(
                f"strategies.options.{key} ({strategy.name}): {v!r} is not one of "
                f"{list(opt.choices)}"
            )
        if opt.minimum is not None and isinstance(v, (int, float)) and v < opt.minimum:
            raise ConfigError(
                f"strategies.options.{key} ({strategy.name}): must be at least {opt.minimum:g}, "
                f"got {v}"
            )
        out[key] = v
    return out


# -- bytes on the wire ------------------------------------------------------------------------


def bucket_groups(nbytes: Sequence[float], kinds: Sequence[str], bucket: float) -> list[list[int]]:
    """Consecutive tensors (by index) grouped into flat buffers of at most ``bucket`` bytes,
    each of one dtype (``kinds``); a tensor larger than ``bucket`` is a buffer alone. The JAX
    adapter's buckets (suite/adapters/jax/distributed.py), and the projection's count of them."""
    groups: list[list[int]] = []
    size = 0.0
    for i, n in enumerate(nbytes):
        if not groups or size + n > bucket or kinds[groups[-1][0]] != kinds[i]:
            groups.append([])
            size = 0.0
        groups[-1].append(i)
        size += n
    return groups


def ring_factor(world: int) -> float:
    """Bytes a rank sends in a ring (bandwidth-optimal) allreduce, per byte of the tensor."""
    return 2.0 * (world - 1) / world


def powersgd_elements(shape: Sequence[int], rank: int) -> tuple[int, bool]:
    """(elements sent, compressed) for one tensor under PowerSGD: a tensor of two or more
    dimensions is viewed as an (n, m) matrix (first dimension x the rest) and sent as P (n x r)
    and Q (m x r) when that is at most half its size (PowerSGD's rule in PyTorch's hook)."""
    n_elems = math.prod(shape)
    if len(shape) < 2:
        return n_elems, False
    n, m = shape[0], n_elems // shape[0]
    r = min(rank, n, m)
    if (n + m) * r * 2 < n * m:
        return (n + m) * r, True
    return n_elems, False


def sent_bytes_per_step(
    strategy: Strategy,
    options: Mapping[str, Any],
    shapes: Sequence[Sequence[int]],
    world: int,
    *,
    cut_elements: int = 0,
    stage: int = 0,
) -> dict[str, Any]:
    """What one rank sends per training step, computed from the strategy's definition.

    ``shapes``: the trainable tensors the rank exchanges; ``cut_elements``: the elements a
    pipeline stage sends per global batch (the activations of its output, the gradient of
    its input: a middle stage sends both). Returns the
    bytes, the uncompressed bytes of the same exchange (so ``uncompressed / bytes`` is the
    compression ratio) and how they were counted."""
    elems = sum(math.prod(s) for s in shapes)
    full = elems * ITEMSIZE
    ring = ring_factor(world)
    name = strategy.name
    if name in ("allreduce", "adasum"):
        sent = full * ring
        return {
            "bytes": sent,
            "uncompressed": sent,
            "model": "ring allreduce: 2(n-1)/n x gradients",
        }
    if name in ("fp16", "bf16"):
        return {"bytes": full * ring / 2, "uncompressed": full * ring,
                "model": f"ring allreduce of {name} gradients: 2(n-1)/n x 2 bytes per element"}  # fmt: skip
    if name == "powersgd":
        sent_elems = sum(powersgd_elements(s, options["rank"])[0] for s in shapes)
        return {"bytes": sent_elems * ITEMSIZE * ring, "uncompressed": full * ring,
                "model": "ring allreduce of the P and Q factors (rank r) and of the tensors "
                "left uncompressed"}  # fmt: skip
    if name in ("ps-sync", "ps-async", "ssp"):
        return {"bytes": float(full), "uncompressed": float(full),
                "model": "one push of every gradient to the server (the pull is received)"}  # fmt: skip
    if name in ("2bit", "1bit"):
        bits = 2 if name == "2bit" else 1
        # every element quantised to `bits` bits, packed into 32-bit words per tensor
        words = sum(math.ceil(math.prod(s) * bits / 32) for s in shapes)
        return {"bytes": float(words * 4), "uncompressed": float(full),
                "model": f"one push of every gradient quantised to {bits} bit(s) per element"}  # fmt: skip
    if name == "local-sgd":
        period = options["period"]
        return {"bytes": full * ring / period, "uncompressed": full * ring,
                "model": f"ring allreduce of the parameters every {period} steps"}  # fmt: skip
    if name == "pipeline":
        # one global batch's activations forward from every stage but the last, and their
        # gradients backward from every stage but the first
        sent = cut_elements * ITEMSIZE
        return {"bytes": float(sent), "uncompressed": float(sent),
                "model": f"stage {stage}: the activations of its output to the next stage and "
                "the gradient of its input to the previous one, one global batch of each"}  # fmt: skip
    raise ValueError(f"no byte model for strategy {name!r}")


# -- pipeline stages: the ONNX graph cut where one tensor crosses ------------------------------


def _weight_size(init: Any) -> int:
    """Elements of a weight (a floating-point initializer of more than one element; scalars
    and integer shapes are constants)."""
    floating = (1, 10, 11, 16)  # FLOAT, FLOAT16, DOUBLE, BFLOAT16
    n = math.prod(init.dims)
    return n if init.data_type in floating and n > 1 else 0


def cut_points(model: Any) -> list[tuple[int, str, int]]:
    """Every place the graph can be cut with exactly one tensor crossing: (number of nodes
    before the cut, the crossing value's name, parameters before the cut)."""
    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    sizes = {name: _weight_size(i) for name, i in inits.items()}
    last_use: dict[str, int] = {}
    for i, node in enumerate(graph.node):
        for name in node.input:
            if name and name not in inits:
                last_use[name] = i
    out = []
    live: set[str] = {i.name for i in graph.input if i.name not in inits}
    params = 0
    seen_inits: set[str] = set()
    for i, node in enumerate(graph.node[:-1]):
        for name in node.input:
            if name in inits and name not in seen_inits:
                seen_inits.add(name)
                params += sizes[name]
        live |= {o for o in node.output if o}
        live = {v for v in live if last_use.get(v, -1) > i}
        if len(live) == 1:
            out.append((i + 1, next(iter(live)), params))
    return out


def split_stages(model: Any, stages: int) -> tuple[list[Any], list[str]]:
    """The model cut into ``stages`` consecutive ONNX models (each with one input and one
    output), the cuts chosen so that the stages' parameter counts are as even as possible.
    Returns the stage models and the names of the values crossing each cut."""
    import onnx
    from onnx import utils as onnx_utils

    from suite.onnx.importer import data_inputs

    if stages < 2:
        raise ConfigError("pipeline: needs at least 2 stages (ranks)")
    # of the cuts with the same parameters before them (a Gemm's output and its ReLU's), the
    # last: so no stage is left with no weights while another choice would give it some
    by_params: dict[int, tuple[int, str, int]] = {}
    for point in cut_points(model):
        by_params[point[2]] = point
    points = [p for p in by_params.values() if p[2] > 0]
    total = sum(_weight_size(i) for i in model.graph.initializer)
    chosen: list[tuple[int, str, int]] = []
    for k in range(1, stages):
        want = total * k / stages
        after = [p for p in points if not chosen or p[0] > chosen[-1][0]]
        if len(after) < stages - k:
            raise UnsupportedError(
                f"pipeline: the network has {len(points)} places to cut it with one tensor "
                f"crossing and weights on both sides, too few for {stages} stages (ranks)"
            )
        candidates = after[: len(after) - (stages - 1 - k)]
        chosen.append(min(candidates, key=lambda p: abs(p[2] - want)))
    graph_in = data_inputs(model.graph)[0].name
    graph_out = model.graph.output[0].name
    bounds = [graph_in] + [c[1] for c in chosen] + [graph_out]
    inferred = onnx.shape_inference.infer_shapes(model)
    extractor = onnx_utils.Extractor(inferred)
    parts = [extractor.extract_model([bounds[i]], [bounds[i + 1]]) for i in range(stages)]
    return parts, [c[1] for c in chosen]


def value_elements_per_sample(model: Any, name: str) -> int:
    """Elements per sample of the value ``name`` (shape inference; the batch dimension
    excluded)."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model).graph
    for vi in [*inferred.value_info, *inferred.output, *inferred.input]:
        if vi.name == name:
            dims = [d.dim_value for d in vi.type.tensor_type.shape.dim[1:]]
            if all(d > 0 for d in dims):
                return math.prod(dims)
    raise ValueError(f"no static shape for {name!r}")
