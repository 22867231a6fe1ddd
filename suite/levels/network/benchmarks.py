"""Network-level benchmarks: ``train`` and ``infer`` on synthetic data, ``digits``
time-to-accuracy on real data, ``agreement`` across frameworks. Framework-neutral: the
networks are ONNX graphs from the zoo (or a user's file); adapters map them to native networks
through their network words. Each benchmark runs itself (suite/levels/network/run.py)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from suite.benchmark import Benchmark, Context, Field, Params, Result, SizeSpec
from suite.errors import ConfigError
from suite.levels.network import run as R
from suite.levels.network.workload import (
    INFER_BATCHES,
    TRAIN_BATCHES,
    TRANSFORMER_FULL_BATCH,
    USER_MODEL,
    UserFile,
    Workload,
    network_fields,
    refuse_fixed_sizes,
    user_batches,
)
from suite.onnx import zoo

__all__ = ["USER_MODEL", "Agreement", "Digits", "Infer", "NetworkBenchmark", "Train"]


class NetworkBenchmark(Benchmark):
    """A benchmark of a whole network: a zoo network (its architecture fields are the zoo
    network's own, validated by it) or a user's ONNX file (``network = "onnx"``, ``model``)."""

    level: ClassVar[str] = "network"
    words: ClassVar[frozenset[str]] = frozenset({"network"})
    open_fields: ClassVar[bool] = True
    fields: ClassVar[dict[str, Field]] = {
        "network": Field(str),
        "batch": Field(int),
        "channels_last": Field(bool, default=True),
        "compile": Field(bool, default=False),
        # None: the network's tuned rate (a user's model: the worker's LR range check)
        "lr": Field(float, default=None, nullable=True, below=10),
    }

    def _batches(self, size_set: str) -> dict[str, list[int]]:
        raise NotImplementedError

    def zoo_sizes(self, size_set: str) -> list[SizeSpec]:
        out = []
        for name in zoo.network_names():
            net = zoo.get(name)
            for spec in net.sizes(size_set):
                batches = self._batches(size_set).get(name, [4])
                if (
                    name == "transformer"
                    and size_set == "full"
                    and spec.params.get("config") == "base"
                ):
                    batches = [TRANSFORMER_FULL_BATCH.get(spec.params.get("seq", 128), 8)]
                    if self.name == "infer":
                        batches = [1, *batches]
                for b in batches:
                    out.append(SizeSpec({"network": name, "batch": b, **spec.params}, spec.source))
        return out

    def user_sizes(
        self, path: str, batches: list[int] | None, size_set: str, dims_text: str | None = None
    ) -> list[SizeSpec]:
        resolved, given, chosen = user_batches(path, batches, size_set, dims_text)
        for b in chosen:
            refuse_fixed_sizes(resolved, dims_text, b)
        src = f"user model {Path(path).name}"
        return [
            SizeSpec(
                {"network": USER_MODEL, "model": resolved, "batch": b, **given},
                src,
            )
            for b in chosen
        ]

    def validate_extra(self, params: Params, rest: Params) -> Params:
        return network_fields(self.name, params, rest, "'batch', 'lr', 'channels_last', 'compile'")

    def label(self, p: Params) -> str:
        if p["network"] == USER_MODEL:
            return " ".join([
                Path(p["model"]).name, f"b{p['batch']}", *([p["dims"]] if p.get("dims") else []),
                *(["compiled"] if p.get("compile") else []),
            ])  # fmt: skip
        extra = []
        if "resolution" in p:
            extra.append(f"{p['resolution']}px")
        if "seq" in p:
            extra.append(f"{p.get('config', '')} seq{p['seq']}".strip())
        if p.get("width", 1) != 1:
            extra.append(f"w/{p['width']}")
        if p.get("compile"):
            extra.append("compiled")
        return " ".join([p["network"], f"b{p['batch']}", *extra])

    def workload(self, p: Params, seed: int) -> Workload:
        if p["network"] == USER_MODEL:
            return UserFile.read(p["model"], p.get("dims")).at(p["batch"])
        net = zoo.get(p["network"])
        arch = {k: v for k, v in p.items() if k not in self.fields}
        return Workload(
            net.build(arch, seed=seed), net.input_spec(arch), net.num_classes(arch), p["network"]
        )


class SyntheticBenchmark(NetworkBenchmark):
    """``train`` and ``infer``: every zoo network at the level's batch sizes, timed on
    synthetic data (suite/levels/network/run.py: ``run_timed``)."""

    #: training steps (``train``) or inference (``infer``)
    training: ClassVar[bool]
    #: the batch sizes per size set and network
    batch_sizes: ClassVar[dict[str, dict[str, list[int]]]]

    def _batches(self, size_set: str) -> dict[str, list[int]]:
        return self.batch_sizes[size_set]

    def sizes(self, size_set: str) -> list[SizeSpec]:
        return self.zoo_sizes(size_set)

    def run(self, ctx: Context) -> Result:
        return R.run_timed(ctx, self.workload(ctx.params, ctx.seed), training=self.training)


class Train(SyntheticBenchmark):
    name: ClassVar[str] = "train"
    summary: ClassVar[str] = "training steps on synthetic data: samples/s, step time, peak memory"
    training: ClassVar[bool] = True
    batch_sizes: ClassVar[dict[str, dict[str, list[int]]]] = TRAIN_BATCHES


class Infer(SyntheticBenchmark):
    name: ClassVar[str] = "infer"
    summary: ClassVar[str] = (
        "inference on synthetic data: samples/s and latency percentiles per batch size"
    )
    training: ClassVar[bool] = False
    batch_sizes: ClassVar[dict[str, dict[str, list[int]]]] = INFER_BATCHES


AGREEMENT_NETWORKS = ("mlp", "alexnet", "resnet18", "transformer")


class Agreement(NetworkBenchmark):
    """Cross-framework agreement (see agreement.py): one point per zoo network at its quick
    size (the comparison is of numbers, not speed, so small sizes say as much)."""

    name: ClassVar[str] = "agreement"
    summary: ClassVar[str] = (
        "same ONNX weights and batch in every framework: logits and first SGD step, per pair"
    )
    # it runs every framework eager, in NCHW (run.py, run_agreement): a record says so
    fields: ClassVar[dict[str, Field]] = {
        **NetworkBenchmark.fields,
        "channels_last": Field(bool, default=False),
    }

    def check(self, params: Params) -> None:
        for name in ("channels_last", "compile"):
            if params[name]:
                raise ConfigError(
                    f"agreement.{name}: agreement compares every framework's eager NCHW "
                    f"network, so it takes no {name}; drop it (train and infer take it)"
                )

    def _batches(self, size_set: str) -> dict[str, list[int]]:
        return {name: [4] for name in zoo.network_names()}

    def sizes(self, size_set: str) -> list[SizeSpec]:
        # resnet50/101 add no op resnet18 lacks; the transformer's small config stands for both
        return [
            SizeSpec({**s.params, "channels_last": False}, s.source)
            for s in self.zoo_sizes("quick")
            if s.params["network"] in AGREEMENT_NETWORKS
        ]

    def run(self, ctx: Context) -> Result:
        w = self.workload(ctx.params, ctx.seed)
        with ctx.timed_region():
            return R.run_agreement(ctx, w)


class Digits(Benchmark):
    """Time-to-accuracy on scikit-learn's bundled digits (real data, no download)."""

    level: ClassVar[str] = "network"
    name: ClassVar[str] = "digits"
    summary: ClassVar[str] = (
        "time-to-accuracy on scikit-learn digits (MLP), MLPerf-style summary of repeats"
    )
    words: ClassVar[frozenset[str]] = frozenset({"network"})
    fields: ClassVar[dict[str, Field]] = {
        "network": Field(str, choices=("mlp",), default="mlp"),
        "hidden": Field(int, default=128),
        "layers": Field(int, default=2),
        "batch": Field(int, default=32),
        "target_accuracy": Field(float, default=0.95, below=1.0),
        "max_epochs": Field(int, default=60),
        "repeats": Field(int, default=5),
        "lr": Field(float, default=0.05),
    }

    def sizes(self, size_set: str) -> list[SizeSpec]:
        if size_set == "quick":
            return [
                SizeSpec({"repeats": 5}, "scikit-learn digits (1797 8x8 images), MLP 64-128-128-10")
            ]
        return [
            SizeSpec(
                {"repeats": 10, "target_accuracy": 0.97},
                "scikit-learn digits, MLP 64-128-128-10, 10 runs",
            )
        ]

    def check(self, params: Params) -> None:
        if params["repeats"] < 3:
            raise ConfigError(
                "digits.repeats: the MLPerf rule drops the fastest and slowest run; use at least 3"
            )

    def label(self, p: Params) -> str:
        return f"mlp to {p['target_accuracy']:.0%} x{p['repeats']}"

    def run(self, ctx: Context) -> Result:
        with ctx.timed_region():
            return R.run_digits(ctx)
