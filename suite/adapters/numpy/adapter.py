"""NumPy reference adapter: every operator word, its gradient, and the network words, on the CPU.

This is the adapter to copy when adding a framework (docs/guide/adding-a-framework.md): each word of
the contract in ``base.py`` is implemented here, with what it must guarantee said where it is
written. NumPy is not a deep-learning framework, so the operators it lacks (convolution,
normalisation, attention) and their gradients are written out below in plain NumPy; an
adapter for a real framework calls the framework's own operators and autodiff instead, and
is much shorter. Computing in the task's dtype with NumPy's BLAS, it is also a third opinion,
next to the float64 references and onnxruntime, in agreement checks.

Declared unsupported (recorded as ``skipped`` with the reason, never ``failed``):

* the dtypes tf32, bf16 and fp16 (the reasons are in :data:`UNSUPPORTED_DTYPES`);
* the distributed words: NumPy has no distributed runtime, and the contract asks for the
  framework's own, never a home-made one;
* ONNX ops outside :attr:`NumPyAdapter.onnx_ops`, and a few attribute values the network
  builder does not map (grouped or dilated convolutions, ``ceil_mode`` pooling...).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from suite.adapters.base import (
    ALL_WORDS,
    Adapter,
    DeviceInfo,
    NetworkOptions,
    Tensor,
    host_cpu_info,
)
from suite.adapters.numpy import vjp as V
from suite.adapters.numpy.vjp import Backward
from suite.errors import AdapterError, UnsupportedError
from suite.onnx.ops import CORE_OPS

#: the dtypes this adapter computes in (every word computes in the dtype of its inputs)
NUMPY_DTYPES: dict[str, type[np.floating[Any]]] = {"fp64": np.float64, "fp32": np.float32}
UNSUPPORTED_DTYPES: dict[str, str] = {
    "tf32": "tf32 is a tensor-core mode of NVIDIA GPUs; NumPy computes on the CPU",
    "bf16": (
        "NumPy has no bfloat16 dtype (ml_dtypes stores one but computes in float32: "
        "neither bf16 speed nor bf16 rounding would be measured)"
    ),
    "fp16": (
        "NumPy's float16 is a storage format: its arithmetic is emulated through float32 and "
        "matmul bypasses BLAS, so the timings would say nothing about fp16 hardware"
    ),
}

#: a VJP: given the cotangent ``dy`` of an output and which inputs need a gradient, the
#: gradient of each input in order (``None`` where not needed; trailing constant inputs may
#: be left out)


@dataclass(frozen=True)
class _Step:
    """One operator call recorded while ``vjp`` traces its function."""

    inputs: tuple[np.ndarray, ...]
    output: np.ndarray
    backward: Backward


NO_LOADER = (
    "NumPy is the reference adapter: it has no data loader of its own (no workers, no decoder), "
    "so it has no input pipeline to measure"
)


class NumPyAdapter(Adapter):
    """NumPy on the host CPU, fp64 and fp32. Tensors are ``np.ndarray``s of the task's dtype.

    NumPy is synchronous: every word returns a finished array, so ``synchronize`` is the base
    class's no-op and ``time`` the base class's clock around the calls.
    """

    name: ClassVar[str] = "numpy"
    module: ClassVar[str] = "numpy"
    distribution: ClassVar[str] = "numpy"
    adapter_version: ClassVar[str] = "1"
    # No "distributed": NumPy has no distributed runtime (the distributed level skips). No
    # "optimizer": NumPy has no optimizers of its own; the suite's float64 NumPy rules
    # (suite/optimizers/rules.py) are the reference every framework's optimizer is checked
    # against, and a NumPy "implementation" would be that reference checked against itself.
    words: ClassVar[frozenset[str]] = ALL_WORDS - {"distributed", "optimizer"}
    missing_words: ClassVar[dict[str, str]] = {
        "distributed": "NumPy has no distributed runtime, and the suite writes none of its own "
        "(a distributed word maps a framework's own runtime)",
    }
    unsupported_optimizers: ClassVar[dict[str, str]] = dict.fromkeys(
        ("sgd", "momentum", "nesterov", "adam", "adamw", "amsgrad", "rmsprop", "adagrad",
         "lamb", "lars"),
        "numpy has no optimizers of its own: the suite's float64 NumPy update rules "
        "(suite/optimizers/rules.py) are the reference every framework is checked against",
    )  # fmt: skip
    network_options_ignored: ClassVar[dict[str, str]] = {
        "channels_last": "numpy: the interpreter runs the ONNX graph's NCHW layout",
        "compile": "numpy: an interpreter, nothing is compiled",
    }
    # every op the importer normalises (suite/onnx/ops.py); the kit checks that the
    # kernel table equals it, so listing the ops imports no framework
    onnx_ops: ClassVar[frozenset[str]] = CORE_OPS
    unsupported_loaders: ClassVar[dict[str, str]] = dict.fromkeys(
        ("folder", "webdataset", "tfrecord", "recordio"), NO_LOADER
    )

    def __init__(self) -> None:
        # While ``vjp`` traces a function, the operator calls it makes; None otherwise.
        self._tape: list[_Step] | None = None

    # -- device ------------------------------------------------------------------------------
    def setup(self, device: str) -> DeviceInfo:
        """NumPy runs on the host CPU only: "cpu" and "auto" select it, "cuda" is an error."""
        if device == "cuda":
            raise AdapterError(
                "numpy: NumPy computes on the CPU only; use --device cpu (or auto) with "
                "--framework numpy"
            )
        if device not in ("cpu", "auto"):
            raise AdapterError(f"numpy: unknown device {device!r}; use cpu or auto")
        info = host_cpu_info()
        info.extra["blas"] = _blas()
        info.extra["blas_threads"] = _blas_threads()
        return info

    def versions(self) -> dict[str, str | None]:
        import scipy

        return {"numpy": np.__version__, "scipy": scipy.__version__, "blas": _blas()}

    def supports(self, dtype: str) -> tuple[bool, str]:
        if dtype in NUMPY_DTYPES:
            return True, ""
        return False, UNSUPPORTED_DTYPES.get(dtype, f"numpy adapter has no dtype {dtype!r}")

    # -- tensors -----------------------------------------------------------------------------
    def from_numpy(self, x: np.ndarray, dtype: str, *, requires_grad: bool = False) -> Tensor:
        """A new array of ``dtype`` (a copy: the caller's array is never aliased).

        ``requires_grad`` needs no flag here: ``vjp`` differentiates with respect to whatever
        primals it is given.
        """
        if dtype not in NUMPY_DTYPES:
            raise UnsupportedError(self.supports(dtype)[1])
        return np.array(x, dtype=NUMPY_DTYPES[dtype], order="C")

    def to_numpy(self, t: Tensor) -> np.ndarray:
        """A float64 copy (never a view of the adapter's array)."""
        return np.array(t, dtype=np.float64)

    def copy_from_numpy(self, t: Tensor, x: np.ndarray) -> None:
        """Overwrite ``t`` in place, cast to its dtype."""
        t[...] = x

    # -- autodiff ----------------------------------------------------------------------------
    def vjp(
        self, fn: Callable[..., Tensor], primals: Mapping[str, Tensor], cotangent: Tensor
    ) -> Callable[[], Sequence[Tensor]]:
        """Reverse mode over a tape: ``fn`` runs once, and every operator word it calls records
        its inputs, output and VJP. The returned callable walks the tape backwards from
        ``cotangent`` (the chain rule, summing where a value is used twice) and only reads the
        tape, so it can be called (and timed) any number of times.

        ``fn`` must be a composition of this adapter's words: NumPy arithmetic between them is
        not on the tape. A result that no word produced is refused rather than differentiated
        wrongly."""
        self._tape = []
        try:
            out = fn(**primals)
        finally:
            tape, self._tape = self._tape, None
        produced = [s.output for s in tape] + list(primals.values())
        if not any(out is t for t in produced):
            raise ValueError("vjp: fn must return the result of an adapter word (or a primal)")

        def backward() -> Sequence[Tensor]:
            grads: dict[int, np.ndarray] = {id(out): cotangent}  # keyed by the array's identity
            for step in reversed(tape):
                dy = grads.pop(id(step.output), None)
                if dy is None:
                    continue
                needs = (True,) * len(step.inputs)
                for x, g in zip(step.inputs, step.backward(dy, needs), strict=False):
                    if g is not None:
                        grads[id(x)] = grads[id(x)] + g if id(x) in grads else g
            return [grads[id(t)] if id(t) in grads else np.zeros_like(t) for t in primals.values()]

        return backward

    def _apply(
        self, kernel: Callable[..., tuple[np.ndarray, Backward]], *inputs: Any, **attrs: Any
    ) -> Tensor:
        """Run a kernel; while ``vjp`` traces, put the call on its tape."""
        out, backward = kernel(*inputs, **attrs)
        if self._tape is not None:
            self._tape.append(_Step(inputs, out, backward))
        return out

    # -- operator words ----------------------------------------------------------------------
    # Each computes in its inputs' dtype and returns a new array (never a view of an input).
    def matmul(self, a: Tensor, b: Tensor) -> Tensor:
        """``a @ b`` with BLAS (sgemm for fp32, dgemm for fp64)."""
        return self._apply(V.matmul, a, b)

    def conv2d(
        self, x: Tensor, w: Tensor, *, stride: int, padding: int, dilation: int = 1, groups: int = 1
    ) -> Tensor:
        """Cross-correlation, zero padding on every side, as im2col + one BLAS product (one
        per group: an einsum over the groups' windows)."""
        if dilation == 1 and groups == 1:
            return self._apply(V.conv2d, x, w, strides=(stride, stride), pads=(padding,) * 4)
        from suite.adapters.numpy.kernels import conv2d_grouped

        return self._apply(
            conv2d_grouped, x, w, stride=stride, padding=padding, dilation=dilation, groups=groups
        )

    def batch_norm(self, x: Tensor, gamma: Tensor, beta: Tensor, *, eps: float) -> Tensor:
        """Training mode: this batch's mean and biased variance over N, H, W."""
        return self._apply(V.batch_norm, x, gamma, beta, eps=eps)

    def layer_norm(self, x: Tensor, gamma: Tensor, beta: Tensor, *, eps: float) -> Tensor:
        """Mean and biased variance over the last axis."""
        return self._apply(V.layer_norm, x, gamma, beta, eps=eps)

    def softmax(self, x: Tensor) -> Tensor:
        """Over the last axis, the row maximum subtracted first (no overflow)."""
        return self._apply(V.softmax, x)

    def gelu(self, x: Tensor) -> Tensor:
        """Exact GELU with SciPy's erf (not the tanh approximation)."""
        return self._apply(V.gelu, x)

    def attention(self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool) -> Tensor:
        """Unfused: the (seq x seq) scores are materialised, as a framework's math path does."""
        return self._apply(V.attention, q, k, v, causal=causal)

    # -- network words -----------------------------------------------------------------------
    def build_network(self, model: Any, dtype: str, options: NetworkOptions) -> Any:
        """fp64 and fp32 compute in that dtype; ``channels_last`` and ``compile`` do not apply
        to NumPy and are ignored; ``amp`` never reaches here (bf16/fp16 are unsupported)."""
        from suite.adapters.numpy.network import NumPyNetwork

        if dtype not in NUMPY_DTYPES:
            raise UnsupportedError(self.supports(dtype)[1])
        return NumPyNetwork(model, NUMPY_DTYPES[dtype], options)

    def forward(self, net: Any, x: Tensor) -> Tensor:
        """Inference-mode logits: dropout off, BatchNorm with the running statistics."""
        return net.forward(x)

    def train_step(self, net: Any, x: Tensor, y: Tensor) -> Tensor:
        """Forward (dropout on, BatchNorm on batch statistics), softmax cross-entropy,
        backward, one SGD-with-momentum update; returns the loss as a 0-d array."""
        return net.train_step(x, y)

    def network_parameters(self, net: Any) -> dict[str, np.ndarray]:
        """Float64 copies of the trainable initializers, keyed by their ONNX names."""
        params: dict[str, np.ndarray] = net.parameters()
        return params

    def labels_from_numpy(self, y: np.ndarray) -> Tensor:
        """An int64 copy (class labels, or token ids fed to a Gather)."""
        return np.array(y, dtype=np.int64)


def _blas() -> str | None:
    """The BLAS NumPy was built against, e.g. "scipy-openblas 0.3.27" (None if not reported)."""
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]  # NumPy >= 1.25
    except (TypeError, KeyError):
        return None
    return f"{blas.get('name', '?')} {blas.get('version', '?')}"


def _blas_threads() -> int | None:
    """The BLAS thread pool's size (threadpoolctl comes with scikit-learn), None if unknown."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return None
    pools = [p for p in threadpool_info() if p.get("user_api") == "blas"]
    return int(pools[0]["num_threads"]) if pools else None
