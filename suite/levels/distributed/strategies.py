"""The ``strategies`` benchmark of the distributed level: the same network trained with each
distributed strategy (suite/strategies.py: allreduce, parameter server sync/async, compressed
gradients, local SGD, pipeline) through each framework's own mechanism, compared on
throughput, bytes per step and accuracy cost with the synchronous allreduce of the same run.
Runs itself on every rank (suite/levels/distributed/strategy_run.py). Imports no framework."""

from __future__ import annotations

import math
from typing import Any, ClassVar

from suite import strategies as S
from suite.benchmark import Benchmark, Context, Field, Params, Result, SizeSpec
from suite.errors import ConfigError
from suite.levels.distributed import strategy_run as R
from suite.levels.distributed.arithmetic import check_strategy_world, round_up, strategy_batches
from suite.levels.distributed.strategy_run import DIGITS_DEFAULTS
from suite.levels.network.workload import BASE_LR, DEFAULT_LR, check_trainable_classes
from suite.onnx import zoo

BASELINE = S.BASELINE


class Strategies(Benchmark):
    """The ``strategies`` benchmark: one task per strategy x network x framework x world size."""

    level: ClassVar[str] = "distributed"
    name: ClassVar[str] = "strategies"
    words: ClassVar[frozenset[str]] = frozenset({"distributed"})
    open_fields: ClassVar[bool] = True  # the zoo network's architecture fields
    fields: ClassVar[dict[str, Field]] = {
        "network": Field(str),
        "batch": Field(int),
        "lr": Field(float, default=None, nullable=True),
        "strategy": Field(str, default=S.BASELINE),
        "options": Field(dict, default={}),
        "digits": Field(dict, default={}),
    }
    summary: ClassVar[str] = (
        "distributed strategies (allreduce, parameter server sync/async, compressed gradients, "
        "local SGD, pipeline): throughput, bytes per step, accuracy cost vs allreduce"
    )

    def sizes(self, size_set: str) -> list[SizeSpec]:
        digits = DIGITS_DEFAULTS["quick" if size_set == "quick" else "full"]
        nets: list[tuple[dict[str, Any], int, str]]
        if size_set == "quick":
            nets = [({"network": "mlp"}, 48, "zoo MLP 64-128-128-10, global batch 48")]
        else:
            nets = [
                ({"network": "resnet50", "resolution": 224, "classes": 1000, "width": 1}, 256,
                 "ResNet-50 224 px, global batch 256"),
                ({"network": "mlp", "features": 784, "hidden": 1024, "layers": 3, "classes": 10},
                 256, "MNIST-style MLP, global batch 256"),
            ]  # fmt: skip
        return [
            SizeSpec({**arch, "batch": batch, "digits": dict(digits)}, source)
            for arch, batch, source in nets
        ]

    def validate_extra(self, params: Params, rest: Params) -> Params:
        name = params["network"]
        if params["lr"] is None:
            params["lr"] = float(DEFAULT_LR.get(name, BASE_LR))
        strategy = S.get(params["strategy"])
        params["strategy"] = strategy.name
        params["options"] = S.validate_options(strategy, params["options"])
        params["digits"] = _validate_digits(params["digits"])
        arch: Params = zoo.get(name).validate(rest)
        check_trainable_classes(self.name, name, arch)
        return arch

    def validate(self, params: Any) -> Params:
        out = super().validate(params)
        # the record's order: network, its architecture, then the run's fields
        order = ["network", *(k for k in out if k not in self.fields), "batch", "lr",
                 "strategy", "options", "digits"]  # fmt: skip
        return {k: out[k] for k in order}

    def label(self, p: Params) -> str:
        opts = ",".join(f"{k}={v}" for k, v in p["options"].items())
        return f"{p['strategy']}{f' ({opts})' if opts else ''} {p['network']} b{p['batch']}"

    @staticmethod
    def batches(p: Params, world: int) -> tuple[int, int]:
        """(global batch, per-rank batch): data-parallel strategies split the global batch,
        a pipeline feeds it whole to its first stage."""
        return strategy_batches(p, S.get(p["strategy"]).data_parallel, world)

    def check_world(self, p: Params, world: int) -> None:
        """Every batch of the task splits over ``world`` ranks (and a pipeline's batches into
        its micro-batches): a ConfigError naming the field otherwise (checked when planning)."""
        check_strategy_world(p, S.get(p["strategy"]).data_parallel, world)

    def fit_world(self, p: Params, world: int) -> tuple[Params, str]:
        """The batches rounded up to split over ``world`` ranks and into a pipeline's
        micro-batches, so the suite's sizes run at any world size (48 over 32 ranks: 64)."""
        # the same for every strategy (a pipeline's micro-batches at their default included):
        # a strategy shares its batches with the allreduce baseline it is compared with
        microbatches = S.get("pipeline").options["microbatches"].default
        if not S.get(p["strategy"]).data_parallel:
            microbatches = math.lcm(microbatches, p["options"]["microbatches"])
        need = math.lcm(world, microbatches)
        batch, digits = round_up(p["batch"], need), round_up(p["digits"]["batch"], need)
        if (batch, digits) == (p["batch"], p["digits"]["batch"]):
            return p, ""
        fitted = {**p, "batch": batch, "digits": {**p["digits"], "batch": digits}}
        changed = [
            f"{what} {old} rounded up to {new}"
            for what, old, new in (("batch", p["batch"], batch),
                                   ("digits batch", p["digits"]["batch"], digits))
            if old != new
        ]  # fmt: skip
        return fitted, f"{', '.join(changed)} for {world} ranks"

    def declined(self, ctx: Context) -> str:
        return super().declined(ctx) or ctx.adapter.strategy_declined(ctx.params["strategy"])

    def run(self, ctx: Context) -> list[Result]:
        return R.run_strategy(ctx)


def _validate_digits(d: Any) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise ConfigError("strategies.digits: give a table (batch, lr, target_accuracy, epochs)")
    base = DIGITS_DEFAULTS["quick"]
    unknown = set(d) - set(base)
    if unknown:
        raise ConfigError(
            f"strategies.digits: unknown setting {sorted(unknown)[0]!r}; known: {', '.join(base)}"
        )
    out = {**base, **d}
    for key in ("batch", "epochs"):
        v = out[key]
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ConfigError(f"strategies.digits.{key}: must be a positive integer, got {v!r}")
    for key in ("lr", "target_accuracy"):
        v = out[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise ConfigError(f"strategies.digits.{key}: must be a positive number, got {v!r}")
        out[key] = float(v)
    if not out["target_accuracy"] < 1.0:
        raise ConfigError("strategies.digits.target_accuracy: a fraction below 1.0, e.g. 0.95")
    return out
