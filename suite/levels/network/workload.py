"""What a network task runs on: the resolved network (a zoo graph or a user's ONNX file), its
input, and the data (seeded synthetic batches; scikit-learn's digits). Framework-neutral."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from suite.errors import ConfigError, UnsupportedError
from suite.onnx import USER_MODEL, zoo
from suite.onnx.importer import data_inputs, the_input

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
    #: a user's model stored in 16-bit floats, run as float32 (zoo.as_float32): the stored type
    upcast_from: str | None = None
    #: "float64": a user's model stored in it, run rounded to float32 (zoo.as_float32)
    rounded_from: str | None = None
    #: a user's model's inputs other than the one fed, bound to constants (zoo.fix_user_inputs)
    bound: dict[str, str] | None = None
    #: a user's file's SHA-256 (its .onnx bytes): what names the same model at another path
    digest: str | None = None
    #: a user's model exported in training mode: its nodes that were (importer.inference_form)
    training_export: tuple[str, ...] = ()
    #: a user's model with several outputs: the ones after the first, taken out
    #: (importer.first_output_only)
    outputs_left_out: tuple[str, ...] = ()

    def said(self) -> dict[str, Any]:
        """What a record's work says of a user's file beside its results."""
        return {
            **(
                {"model_outputs_not_run": list(self.outputs_left_out)}
                if self.outputs_left_out
                else {}
            ),
            **({"model_upcast_from": self.upcast_from} if self.upcast_from else {}),
            **({"model_rounded_from": self.rounded_from} if self.rounded_from else {}),
            **({"inputs_bound": self.bound} if self.bound else {}),
            **({"model_sha256": self.digest} if self.digest else {}),
            **(
                {"model_training_export_nodes": len(self.training_export)}
                if self.training_export
                else {}
            ),
        }


def file_digest(path: str) -> str:
    """The SHA-256 of a file's bytes, hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def output_classes(model: Any) -> int:
    """The class count of a user model's first output, ``(batch, classes)``; 0 when it is not
    2-D. A file may name the classes dimension (``(batch, "c")``: a hand-written graph, an
    export with its output axes dynamic) where its inputs fix it: then ONNX's shape inference
    over the inputs as they are run gives it."""

    def dims(out: Any) -> list[int | None]:
        shape = out.type.tensor_type.shape
        return [d.dim_value if d.HasField("dim_value") else None for d in shape.dim]

    odims = dims(model.graph.output[0])
    if len(odims) == 2 and not odims[1]:
        try:
            inferred = onnx.shape_inference.infer_shapes(model)
        except (onnx.shape_inference.InferenceError, ValueError):  # a model over 2 GB
            inferred = None
        if inferred is not None:
            odims = dims(inferred.graph.output[0])
    return int(odims[1]) if len(odims) == 2 and odims[1] else 0


def model_input_spec(model: Any) -> tuple[zoo.InputSpec, int]:
    """Input spec and class count of a user model (batch = first dim; the rest concrete)."""
    try:
        fed = the_input(model.graph)
    except ConfigError as exc:
        raise ConfigError(f"--model: {exc}") from exc
    t = fed.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    if not dims or any(d is None or d <= 0 for d in dims[1:]):
        raise ConfigError(
            f"--model: input {fed.name!r} has shape {dims}; every dimension except the batch "
            "must be a fixed positive size"
        )
    kind = "float" if t.elem_type in (1, 10, 11, 16) else "int64"
    # token ids index an embedding: drawn from its whole vocabulary, as text would be (a Gather
    # of an initializer's rows by the input); 8-bit unsigned pixels (an image model that casts
    # and scales its own input) from 0-255; any other integer input from {0, 1}
    # (through reshapes and casts: GPT-2's export flattens the ids first)
    tables = {i.name: i.dims for i in model.graph.initializer}
    ids = {fed.name}
    for n in model.graph.node:  # in topological order
        if n.op_type in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Cast", "Identity") and (
            n.input and n.input[0] in ids
        ):
            ids.add(n.output[0])
    vocab = [
        int(tables[n.input[0]][0])
        for n in model.graph.node
        if n.op_type == "Gather" and n.input[1:2] and n.input[1] in ids and tables.get(n.input[0])
    ]
    pixels = t.elem_type == onnx.TensorProto.UINT8
    high = min(vocab) if vocab and kind == "int64" else 256 if pixels else 2
    classes = output_classes(model)
    return zoo.InputSpec(fed.name, tuple(int(d) for d in dims[1:] if d), kind, high=high), int(
        classes or 0
    )


def network_fields(
    bench: str, params: dict[str, Any], rest: dict[str, Any], takes: str
) -> dict[str, Any]:
    """The network fields of a task (its ``network`` in ``params``, the rest in ``rest``): a
    user's file's ``model`` and ``dims`` (a ConfigError for any other, naming what the
    benchmark ``bench`` takes besides them: ``takes``), or the zoo network's own, validated by
    it, its tuned learning rate filled in where ``params`` gives none."""
    name = params["network"]
    if name == USER_MODEL:
        if "model" not in rest or set(rest) - {"model", "dims"}:
            raise ConfigError(f"{bench}: a user model takes only 'model', 'dims', {takes}")
        dims = zoo.parse_dims(rest.get("dims"), where=f"{bench}: dims")
        return {"model": rest["model"], **({"dims": zoo.canonical_dims(dims)} if dims else {})}
    if params["lr"] is None:
        params["lr"] = float(DEFAULT_LR.get(name, BASE_LR))
    result: dict[str, Any] = zoo.get(name).validate(rest)
    if bench != "infer":
        check_trainable_classes(bench, name, result)
    return result


def check_trainable_classes(bench: str, name: str, arch: dict[str, Any]) -> None:
    """A ConfigError when the zoo network ``name`` sized by ``arch`` has fewer than 2 classes,
    for a benchmark ``bench`` that trains it: softmax cross-entropy over one class is 0 whatever
    the weights, so the loss could not fall and every gradient would be zero."""
    if arch["classes"] < 2:
        raise ConfigError(
            f"{name}.classes: the {bench} benchmark trains on softmax cross-entropy, which "
            f"needs 2 classes or more (over {arch['classes']} it is 0 whatever the weights); "
            "set classes >= 2"
        )


def untrainable_output(classes: int) -> str | None:
    """Why a user's model with ``classes`` logits per sample (0: its output is not 2-D) cannot
    be trained on softmax cross-entropy, as every ``train`` and ``data_parallel`` step is; None
    when it can."""
    if classes < 1:
        return "training needs a (batch, classes) logits output; this model's output is not 2-D"
    if classes == 1:
        return (
            "training needs a (batch, classes) logits output with 2 classes or more; this "
            "model's output is (batch, 1) (a regression or single-logit head), whose softmax "
            "cross-entropy is 0 whatever the weights: measure its inference (infer), or export "
            "it with a logit per class"
        )
    return None


@dataclass(frozen=True)
class UserFile:
    """A user's model (``--model``), read and hashed once; :meth:`at` makes it as a task runs
    it at a batch, only where that batch is needed."""

    raw: Any  # onnx.ModelProto as stored
    dims: Any  # its --model-dims, parsed
    digest: str

    @classmethod
    def read(cls, path: str, dims_text: str | None) -> UserFile:
        return cls(zoo.load_user_model(path), zoo.parse_dims(dims_text), file_digest(path))

    def at(self, batch: int | None) -> Workload:
        """Its inputs fixed (the dims; ``batch``: the batch its bound inputs are made for,
        None to leave a dynamic batch dynamic), made float32, and how to feed it."""
        ran = zoo.as_run(self.raw, self.dims, batch)
        spec, classes = model_input_spec(ran.model)
        return Workload(ran.model, spec, classes, USER_MODEL, upcast_from=ran.upcast_from,
                        rounded_from=ran.rounded_from, bound=ran.bound, digest=self.digest,
                        training_export=tuple(ran.training_export),
                        outputs_left_out=tuple(ran.left_out.outputs if ran.left_out else ()))  # fmt: skip


def user_batches(
    path: str, batches: list[int] | None, size_set: str, dims_text: str | None
) -> tuple[str, dict[str, str], list[int]]:
    """What a plan runs a user's model (``--model``) at: its resolved path, its ``dims``
    (``{}`` when none were given) and the batches (``--batch``, the model's fixed batch, or
    4 for ``--quick`` and 32 otherwise). A model that cannot be fed, or a ``--batch`` its
    fixed batch rules out, is a ConfigError naming the flag."""
    dims = zoo.parse_dims(dims_text)
    model, _ = zoo.fix_user_inputs(zoo.load_user_model(path), dims, batch=None)
    model_input_spec(model)  # fail early, naming the problem
    fixed = fixed_batch(model)
    if fixed is not None and batches and batches != [fixed]:
        raise ConfigError(
            f"--batch: {Path(path).name} has a fixed batch of {fixed} (its input's first "
            f"dimension); it runs at batch {fixed} only. Drop --batch, or re-export the "
            "model with a dynamic batch (torch.onnx.export(..., dynamic_axes=...))"
        )
    chosen = [fixed] if fixed is not None else batches or ([4] if size_set == "quick" else [32])
    given = {"dims": zoo.canonical_dims(dims)} if dims else {}
    return str(Path(path).resolve()), given, chosen


@cache
def refuse_fixed_sizes(path: str, dims_text: str | None, batch: int) -> None:
    """A ConfigError (exit 2, at planning) where a user's model cannot be planned at ``batch``
    and its ``--model-dims`` because of a size the file fixed at export (``FixedSizeError``);
    what a framework cannot map stays that framework's skip, in the worker."""
    from suite.onnx.importer import FixedSizeError, ImportedGraph

    graph = ImportedGraph(zoo.as_run(zoo.load_user_model(path), zoo.parse_dims(dims_text),
                                     batch=None).model)  # fmt: skip
    try:
        graph.plan(graph.input_shape(batch))
    except FixedSizeError as exc:
        at = f"batch {batch}" + (f", --model-dims {dims_text}" if dims_text else "")
        raise ConfigError(f"--model {Path(path).name} at {at}: {exc}") from exc
    except UnsupportedError:
        pass


def without_final_softmax(w: Workload) -> tuple[Workload, str | None]:
    """A user's model whose output is a Softmax over its classes (exports made for serving:
    Keras' applications, Caffe2's zoo) trains on that Softmax's input, as the framework's own
    loss does for probabilities (Keras' ``from_logits=False``): the training loss is softmax
    cross-entropy, and on probabilities it would apply the softmax twice, squashing every
    gradient. Returns the workload to train and the Softmax node's name (None: unchanged)."""
    import copy

    graph = w.model.graph
    out = graph.output[0]
    last = next((n for n in graph.node if out.name in n.output), None)
    if last is None or last.op_type != "Softmax" or w.classes < 1:
        return w, None
    axis = next(
        (a.i for a in last.attribute if a.name == "axis"), -1 if _opset(w.model) >= 13 else 1
    )
    if axis not in (1, -1):
        return w, None
    model = copy.deepcopy(w.model)
    g = model.graph
    g.node.remove(next(n for n in g.node if out.name in n.output))
    g.output[0].name = last.input[0]
    return replace(w, model=model), last.name or "Softmax"


def _opset(model: Any) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def fixed_batch(model: Any) -> int | None:
    """The batch a model was exported with when its input's first dimension is a number (an
    export with batch 1 is common), None when it is dynamic."""
    inputs = data_inputs(model.graph)
    dims = inputs[0].type.tensor_type.shape.dim if inputs else []
    return (
        int(dims[0].dim_value)
        if dims and dims[0].HasField("dim_value") and dims[0].dim_value > 0
        else None
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
