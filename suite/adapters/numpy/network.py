"""ONNX graph -> a NumPy network that trains: the importer's plan (suite/levels/network/
importer.py) runs with the kernels of numpy_kernels.py, and the gradient is reverse-mode
autodiff over the same steps.

Imported only by the NumPy adapter's ``build_network`` (so only inside a worker). Every kernel
returns its output and its VJP (see ``numpy_kernels``). ``train_step`` runs the plan keeping
the VJPs on a tape, walks the tape backwards from the loss to the gradient of every trainable
initializer, and takes one SGD-with-momentum step as ``torch.optim.SGD`` does. The importer
sorts the initializers (parameters, BatchNormalization running statistics, constants).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import ModelProto

from suite.adapters.base import NetworkOptions
from suite.adapters.numpy.kernels import KERNELS, Ctx
from suite.onnx.importer import Step, check_mapped, import_graph, run

#: the ONNX ops this builder maps
ONNX_OPS = frozenset(KERNELS)


def softmax_cross_entropy(logits: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean softmax cross-entropy over the batch, and its gradient with respect to the logits."""
    z = logits - logits.max(axis=1, keepdims=True)
    log_p = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    rows = np.arange(len(labels))
    loss = -log_p[rows, labels].mean()
    dlogits = np.exp(log_p)
    dlogits[rows, labels] -= 1.0
    return np.asarray(loss, dtype=logits.dtype), dlogits / len(labels)


class NumPyNetwork:
    """A built network: the imported graph, its values in the network's dtype, the SGD state."""

    def __init__(
        self, model: ModelProto, dtype: type[np.floating[Any]], options: NetworkOptions
    ) -> None:
        self.graph = import_graph(model)
        check_mapped(self.graph, ONNX_OPS, self.graph.input_shape(1), "numpy")
        self.dtype = np.dtype(dtype)
        self.lr, self.momentum = options.lr, options.momentum
        self.rng = np.random.default_rng(options.seed)  # dropout masks: reproducible per task
        self.params = {k: v.astype(self.dtype) for k, v in self.graph.params.items()}
        self.state = {k: v.astype(self.dtype) for k, v in self.graph.state.items()}
        self.velocity = {name: np.zeros_like(p) for name, p in self.params.items()}

    def _const(self, value: np.ndarray) -> np.ndarray:
        return value.astype(self.dtype) if value.dtype.kind == "f" else value

    def _run(self, x: np.ndarray, training: bool) -> tuple[np.ndarray, list[tuple[Step, Any]]]:
        """The graph's output, and (in training) the tape of the steps a gradient flows through."""
        if x.dtype.kind == "f":  # float data in the network's dtype; token ids stay integers
            x = np.asarray(x, dtype=self.dtype)
        plan = self.graph.plan(x.shape)
        ctx = Ctx(training, self.rng, self.dtype)
        tape: list[tuple[Step, Any]] = []

        def call(step: Step, args: list[Any]) -> Any:
            out, backward = KERNELS[step.op](ctx, step, args)
            if training and any(step.needs_grad):
                tape.append((step, backward))
            return out

        out = run(
            plan, {**self.state, **self.params}, x, call, self._const, cache_key=self.dtype.name
        )
        return np.asarray(out), tape

    def forward(self, x: np.ndarray) -> np.ndarray:
        """Inference-mode logits: dropout off, BatchNorm with the running statistics."""
        return self._run(x, training=False)[0]

    def train_step(self, x: np.ndarray, labels: np.ndarray) -> np.ndarray:
        """One step: training-mode forward, softmax cross-entropy, backward, then for each
        parameter ``v = momentum * v + grad; p -= lr * v`` (torch.optim.SGD, no dampening).
        Returns the loss (before the update) as a 0-d array."""
        logits, tape = self._run(x, training=True)
        loss, dlogits = softmax_cross_entropy(logits, labels)
        grads: dict[str, np.ndarray] = {self.graph.output_name: dlogits}
        for step, backward in reversed(tape):
            if len(step.outputs) == 1:
                dy: Any = grads.pop(step.outputs[0], None)
                if dy is None:
                    continue
            else:
                dy = [grads.pop(o, None) for o in step.outputs]
                if all(g is None for g in dy):
                    continue
            needs: Sequence[bool] = step.needs_grad
            for name, need, g in zip(step.inputs, needs, backward(dy, needs), strict=False):
                if need and g is not None:
                    g = np.asarray(g, dtype=self.dtype)
                    grads[name] = grads[name] + g if name in grads else g
        for name, p in self.params.items():
            if name not in grads:  # not used by this graph's output: no gradient, no step
                continue
            v = self.velocity[name]
            v *= self.momentum
            v += grads[name]
            p -= self.lr * v
        return loss

    def parameters(self) -> dict[str, np.ndarray]:
        """The trainable values as float64 copies, keyed by ONNX initializer name."""
        return {name: p.astype(np.float64) for name, p in self.params.items()}
