"""Network-level benchmarks: ``train`` and ``infer`` on synthetic data, ``digits``
time-to-accuracy on real data. Framework-neutral: the networks are ONNX graphs from the zoo
(or a user's file); adapters map them to native networks through their network words."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from suite.errors import ConfigError
from suite.levels.network import zoo
from suite.levels.operator.base import Field, SizeSpec

Params = dict[str, Any]
USER_MODEL = "onnx"  # the "network" name of a user-supplied ONNX file

# Batch sizes per network for the two size sets. The quick ResNets train at batch 4, not less:
# at 32 px their last stage is 1x1, so its batch norms see only `batch` values per channel, and
# at batch 2 (two values: every normalised value is +-1) the gradients explode (ResNet-101's
# reach 4e7 in fp32, overflow fp16 at any loss scale); at batch 4 they stay below 1e3.
TRAIN_BATCHES = {
    "quick": {"mlp": [32], "alexnet": [4], "resnet18": [4], "resnet50": [4], "resnet101": [4], "transformer": [4]},
    "full": {"mlp": [256], "alexnet": [128], "resnet18": [32, 256], "resnet50": [32, 256], "resnet101": [32, 128],
             "transformer": [32]},
}  # fmt: skip
INFER_BATCHES = {
    "quick": {"mlp": [1, 32], "alexnet": [1, 4], "resnet18": [1, 4], "resnet50": [1, 4], "resnet101": [1, 2],
              "transformer": [1, 4]},
    "full": {"mlp": [1, 256], "alexnet": [1, 128], "resnet18": [1, 32, 256], "resnet50": [1, 32, 256],
             "resnet101": [1, 32, 256], "transformer": [1, 32]},
}  # fmt: skip
TRANSFORMER_FULL_BATCH = {128: 32, 512: 8}
# SGD learning rates (momentum 0.9). AlexNet has no batch norm: at 0.01 it diverged to NaN
# within 20 steps for one seed in three here, at 0.001 it trained stably for every seed tried.
DEFAULT_LR = {"alexnet": 0.001}
BASE_LR = 0.01  # BERT-base fine-tuning batches per sequence length


@dataclass(frozen=True)
class Workload:
    """A resolved network: its ONNX model and how to feed it."""

    model: Any
    input: zoo.InputSpec
    classes: int
    network: str


def model_input_spec(model: Any) -> tuple[zoo.InputSpec, int]:
    """Input spec and class count of a user model (batch = first dim; the rest concrete)."""
    graph = model.graph
    init = {i.name for i in graph.initializer}
    inputs = [i for i in graph.input if i.name not in init]
    if len(inputs) != 1:
        raise ConfigError(
            f"--model: the graph has {len(inputs)} inputs; dlsuite feeds models with exactly one input"
        )
    t = inputs[0].type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    if not dims or any(d is None or d <= 0 for d in dims[1:]):
        raise ConfigError(
            f"--model: input {inputs[0].name!r} has shape {dims}; every dimension except the batch "
            "must be a fixed positive size"
        )
    kind = "float" if t.elem_type in (1, 10, 11, 16) else "int64"
    out = graph.output[0].type.tensor_type
    odims = [d.dim_value if d.HasField("dim_value") else None for d in out.shape.dim]
    classes = odims[1] if len(odims) == 2 and odims[1] else 0
    return zoo.InputSpec(inputs[0].name, tuple(int(d) for d in dims[1:] if d), kind, high=2), int(
        classes or 0
    )


def fixed_batch(model: Any) -> int | None:
    """The batch a model was exported with when its input's first dimension is a number (an
    export with batch 1 is common), None when it is dynamic."""
    init = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in init]
    dims = inputs[0].type.tensor_type.shape.dim if inputs else []
    return (
        int(dims[0].dim_value)
        if dims and dims[0].HasField("dim_value") and dims[0].dim_value > 0
        else None
    )


class NetworkBenchmark:
    level: ClassVar[str] = "network"
    name: ClassVar[str]
    summary: ClassVar[str]
    modes: ClassVar[tuple[str, ...]] = ()
    common: ClassVar[dict[str, Field]] = {
        "network": Field(str),
        "batch": Field(int),
        "channels_last": Field(bool, default=True),
        "compile": Field(bool, default=False),
        "lr": Field(float, default=None),
    }

    def sizes(self, size_set: str) -> list[SizeSpec]:
        raise NotImplementedError

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

    def user_sizes(self, path: str, batches: list[int] | None, size_set: str) -> list[SizeSpec]:
        model = zoo.load_user_model(path)
        model_input_spec(model)  # fail early, naming the problem
        fixed = fixed_batch(model)
        if fixed is not None and batches and batches != [fixed]:
            raise ConfigError(
                f"--batch: {Path(path).name} has a fixed batch of {fixed} (its input's first "
                f"dimension); it runs at batch {fixed} only. Drop --batch, or re-export the "
                "model with a dynamic batch (torch.onnx.export(..., dynamic_axes=...))"
            )
        chosen = [fixed] if fixed is not None else batches or ([4] if size_set == "quick" else [32])
        src = f"user model {Path(path).name}"
        return [
            SizeSpec({"network": USER_MODEL, "model": str(Path(path).resolve()), "batch": b}, src)
            for b in chosen
        ]

    def validate(self, params: Mapping[str, Any]) -> Params:
        p = dict(params)
        name = p.get("network")
        if not isinstance(name, str):
            raise ConfigError(
                f"{self.name}.network: give a zoo network ({', '.join(zoo.network_names())}) or use --model"
            )
        batch = p.get("batch")
        if isinstance(batch, bool) or not isinstance(batch, int) or batch <= 0:
            raise ConfigError(f"{self.name}.batch: must be a positive integer, got {batch!r}")
        out: Params = {"network": name, "batch": batch}
        for key in ("channels_last", "compile"):
            value = p.get(key, self.common[key].default)
            if not isinstance(value, bool):
                raise ConfigError(f"{self.name}.{key}: expected true or false, got {value!r}")
            out[key] = value
        lr = p.get("lr", DEFAULT_LR.get(name, BASE_LR))
        if name == USER_MODEL and p.get("lr") is None:
            # a user's network has no tuned rate: the worker's LR range check picks one
            # (execute.lr_range_check) and records what it tried
            out["lr"] = None
        elif isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 < lr < 10:
            raise ConfigError(f"{self.name}.lr: expected a learning rate in (0, 10), got {lr!r}")
        else:
            out["lr"] = float(lr)
        rest = {k: v for k, v in p.items() if k not in self.common}
        if name == USER_MODEL:
            if set(rest) != {"model"}:
                raise ConfigError(
                    f"{self.name}: a user model takes only 'model', 'batch', 'lr', 'channels_last', 'compile'"
                )
            out["model"] = rest["model"]
            return out
        out.update(zoo.get(name).validate(rest))
        return out

    def label(self, p: Params) -> str:
        if p["network"] == USER_MODEL:
            return f"{Path(p['model']).name} b{p['batch']}"
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
            model = zoo.load_user_model(p["model"])
            spec, classes = model_input_spec(model)
            return Workload(model, spec, classes, USER_MODEL)
        net = zoo.get(p["network"])
        arch = {k: v for k, v in p.items() if k not in self.common}
        return Workload(
            net.build(arch, seed=seed), net.input_spec(arch), net.num_classes(arch), p["network"]
        )


def synthetic_batch(
    spec: zoo.InputSpec, batch: int, classes: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Seeded synthetic inputs (normal floats or token ids, never all zeros) and labels."""
    x: np.ndarray
    if spec.kind == "int64":
        x = rng.integers(0, max(spec.high, 2), size=(batch, *spec.shape))
    else:
        x = rng.standard_normal((batch, *spec.shape))
    y = rng.integers(0, max(classes, 1), size=batch)
    return x, y


class Train(NetworkBenchmark):
    name: ClassVar[str] = "train"
    summary: ClassVar[str] = "training steps on synthetic data: samples/s, step time, peak memory"

    def _batches(self, size_set: str) -> dict[str, list[int]]:
        return TRAIN_BATCHES[size_set]

    def sizes(self, size_set: str) -> list[SizeSpec]:
        return self.zoo_sizes(size_set)


class Infer(NetworkBenchmark):
    name: ClassVar[str] = "infer"
    summary: ClassVar[str] = (
        "inference on synthetic data: samples/s and latency percentiles per batch size"
    )

    def _batches(self, size_set: str) -> dict[str, list[int]]:
        return INFER_BATCHES[size_set]

    def sizes(self, size_set: str) -> list[SizeSpec]:
        return self.zoo_sizes(size_set)


AGREEMENT_NETWORKS = ("mlp", "alexnet", "resnet18", "transformer")


class Agreement(NetworkBenchmark):
    """Cross-framework agreement (see agreement.py): one point per zoo network at its quick
    size (the comparison is of numbers, not speed, so small sizes say as much)."""

    name: ClassVar[str] = "agreement"
    summary: ClassVar[str] = (
        "same ONNX weights and batch in every framework: logits and first SGD step, per pair"
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


class Digits:
    """Time-to-accuracy on scikit-learn's bundled digits (real data, no download)."""

    level: ClassVar[str] = "network"
    name: ClassVar[str] = "digits"
    summary: ClassVar[str] = (
        "time-to-accuracy on scikit-learn digits (MLP), MLPerf-style summary of repeats"
    )
    fields: ClassVar[dict[str, Field]] = {
        "network": Field(str, choices=("mlp",), default="mlp"),
        "hidden": Field(int, default=128),
        "layers": Field(int, default=2),
        "batch": Field(int, default=32),
        "target_accuracy": Field(float, default=0.95),
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

    def validate(self, params: Mapping[str, Any]) -> Params:
        unknown = set(params) - set(self.fields)
        if unknown:
            raise ConfigError(
                f"digits: unknown parameter {sorted(unknown)[0]!r}; known: {', '.join(self.fields)}"
            )
        out: Params = {}
        for key, f in self.fields.items():
            v = params.get(key, f.default)
            if f.type is float and isinstance(v, int) and not isinstance(v, bool):
                v = float(v)
            if not isinstance(v, f.type) or isinstance(v, bool):
                raise ConfigError(f"digits.{key}: expected {f.type.__name__}, got {v!r}")
            if f.choices is not None and v not in f.choices:
                raise ConfigError(f"digits.{key}: {v!r} is not one of {list(f.choices)}")
            if isinstance(v, (int, float)) and v <= 0:
                raise ConfigError(f"digits.{key}: must be positive, got {v}")
            out[key] = v
        if not out["target_accuracy"] < 1.0:
            raise ConfigError("digits.target_accuracy: must be below 1.0 (a fraction, e.g. 0.95)")
        if out["repeats"] < 3:
            raise ConfigError(
                "digits.repeats: the MLPerf rule drops the fastest and slowest run; use at least 3"
            )
        return out

    def label(self, p: Params) -> str:
        return f"mlp to {p['target_accuracy']:.0%} x{p['repeats']}"


def digits_data(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """scikit-learn's digits, standardised, split 80/20 with a seeded shuffle."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x: np.ndarray = data.data.astype(np.float64) / 16.0
    y: np.ndarray = data.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    x, y = x[order], y[order]
    n_train = int(0.8 * len(x))
    mean, std = x[:n_train].mean(axis=0), x[:n_train].std(axis=0) + 1e-6
    x = (x - mean) / std
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]
