"""NumPy reference adapter: every operator word, its gradient, and the network words, on the CPU.

This is the adapter to copy when adding a framework (docs/adding-a-framework.md): each word of
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

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from scipy.special import erf

from suite.adapters.base import (
    ALL_WORDS,
    Adapter,
    DeviceInfo,
    NetworkOptions,
    Tensor,
    host_cpu_info,
)
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
Backward = Callable[[np.ndarray, Sequence[bool]], Sequence[np.ndarray | None]]


@dataclass(frozen=True)
class _Step:
    """One operator call recorded while ``vjp`` traces its function."""

    inputs: tuple[np.ndarray, ...]
    output: np.ndarray
    backward: Backward


class NumPyAdapter(Adapter):
    """NumPy on the host CPU, fp64 and fp32. Tensors are ``np.ndarray``s of the task's dtype.

    NumPy is synchronous: every word returns a finished array, so ``synchronize`` is the base
    class's no-op and ``time`` the base class's clock around the calls.
    """

    name: ClassVar[str] = "numpy"
    module: ClassVar[str] = "numpy"
    distribution: ClassVar[str] = "numpy"
    adapter_version: ClassVar[str] = "1"
    # No "distributed": NumPy has no distributed runtime (the distributed level skips).
    words: ClassVar[frozenset[str]] = ALL_WORDS - {"distributed"}  # no distributed runtime
    # every op the importer normalises (suite/onnx/ops.py); the kit checks that the
    # kernel table equals it, so listing the ops imports no framework
    onnx_ops: ClassVar[frozenset[str]] = CORE_OPS

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
    ) -> Callable[[], dict[str, Tensor]]:
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

        def backward() -> dict[str, Tensor]:
            grads: dict[int, np.ndarray] = {id(out): cotangent}  # keyed by the array's identity
            for step in reversed(tape):
                dy = grads.pop(id(step.output), None)
                if dy is None:
                    continue
                needs = (True,) * len(step.inputs)
                for x, g in zip(step.inputs, step.backward(dy, needs), strict=False):
                    if g is not None:
                        grads[id(x)] = grads[id(x)] + g if id(x) in grads else g
            return {
                k: grads[id(t)] if id(t) in grads else np.zeros_like(t) for k, t in primals.items()
            }

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
        return self._apply(matmul, a, b)

    def conv2d(self, x: Tensor, w: Tensor, *, stride: int, padding: int) -> Tensor:
        """Cross-correlation, zero padding on every side, as im2col + one BLAS product."""
        return self._apply(conv2d, x, w, strides=(stride, stride), pads=(padding,) * 4)

    def batch_norm(self, x: Tensor, gamma: Tensor, beta: Tensor, *, eps: float) -> Tensor:
        """Training mode: this batch's mean and biased variance over N, H, W."""
        return self._apply(batch_norm, x, gamma, beta, eps=eps)

    def layer_norm(self, x: Tensor, gamma: Tensor, beta: Tensor, *, eps: float) -> Tensor:
        """Mean and biased variance over the last axis."""
        return self._apply(layer_norm, x, gamma, beta, eps=eps)

    def softmax(self, x: Tensor) -> Tensor:
        """Over the last axis, the row maximum subtracted first (no overflow)."""
        return self._apply(softmax, x)

    def gelu(self, x: Tensor) -> Tensor:
        """Exact GELU with SciPy's erf (not the tanh approximation)."""
        return self._apply(gelu, x)

    def attention(self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool) -> Tensor:
        """Unfused: the (seq x seq) scores are materialised, as a framework's math path does."""
        return self._apply(attention, q, k, v, causal=causal)

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


# ----------------------------------------------------------------------------------------------
# Kernels: the operators NumPy lacks, each returning its output and its VJP. They compute in
# the dtype of their inputs (Python float constants do not promote float32 arrays). The
# network builder (numpy_network.py) uses them too.
# ----------------------------------------------------------------------------------------------


def unbroadcast(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum ``g`` down to ``shape``: the VJP of NumPy broadcasting an array of ``shape``."""
    while g.ndim > len(shape):
        g = g.sum(axis=0)
    for axis, size in enumerate(shape):
        if size == 1 and g.shape[axis] != 1:
            g = g.sum(axis=axis, keepdims=True)
    return g


def matmul(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, Backward]:
    """``a @ b`` (batched and broadcasting as ``np.matmul``)."""

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        da = db = None
        if needs[0]:
            da = unbroadcast(dy @ b.swapaxes(-1, -2), a.shape)
        if needs[1] and b.ndim == 2:
            # a weight shared by every row of a batched ``a``: one product over all the rows
            db = a.reshape(-1, a.shape[-1]).T @ dy.reshape(-1, dy.shape[-1])
        elif needs[1]:
            db = unbroadcast(a.swapaxes(-1, -2) @ dy, b.shape)
        return [da, db]

    return a @ b, backward


def _windows(x: np.ndarray, kernel: tuple[int, int], strides: tuple[int, int]) -> np.ndarray:
    """Every ``kernel``-sized window of NCHW ``x`` at ``strides``: a (N, C, OH, OW, KH, KW) view."""
    sh, sw = strides
    return sliding_window_view(x, kernel, axis=(2, 3))[:, :, ::sh, ::sw]


def _add_windows(
    windows: np.ndarray, shape: tuple[int, ...], strides: tuple[int, int]
) -> np.ndarray:
    """The adjoint of :func:`_windows`: add each window's values back where they were read."""
    out = np.zeros(shape, dtype=windows.dtype)
    _, _, oh, ow, kh, kw = windows.shape
    sh, sw = strides
    for i in range(kh):
        for j in range(kw):
            out[:, :, i : i + sh * (oh - 1) + 1 : sh, j : j + sw * (ow - 1) + 1 : sw] += windows[
                :, :, :, :, i, j
            ]
    return out


def conv2d(
    x: np.ndarray,
    w: np.ndarray,
    *,
    strides: tuple[int, int] = (1, 1),
    pads: tuple[int, int, int, int] = (0, 0, 0, 0),
) -> tuple[np.ndarray, Backward]:
    """Cross-correlation of NCHW ``x`` with OIHW ``w`` (no bias, dilation 1, groups 1) as
    im2col + one matrix product (``np.tensordot`` copies the windows into a matrix and calls
    BLAS). ``pads`` are ONNX's (top, left, bottom, right)."""
    top, left, bottom, right = pads
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    cols = _windows(xp, (w.shape[2], w.shape[3]), strides)  # (N, C, OH, OW, KH, KW)
    y = np.tensordot(cols, w, axes=((1, 4, 5), (1, 2, 3)))  # (N, OH, OW, O)

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        dx = dw = None
        if needs[0]:
            dcols = np.tensordot(dy, w, axes=(1, 0))  # (N, OH, OW, C, KH, KW)
            dxp = _add_windows(dcols.transpose(0, 3, 1, 2, 4, 5), xp.shape, strides)
            dx = dxp[:, :, top : top + x.shape[2], left : left + x.shape[3]]
        if needs[1]:
            dw = np.tensordot(dy, cols, axes=((0, 2, 3), (0, 2, 3)))  # (O, C, KH, KW)
        return [dx, dw]

    return np.ascontiguousarray(y.transpose(0, 3, 1, 2)), backward


def max_pool(
    x: np.ndarray,
    *,
    kernel: tuple[int, int],
    strides: tuple[int, int],
    pads: tuple[int, int, int, int] = (0, 0, 0, 0),
) -> tuple[np.ndarray, Backward]:
    """Max over each window of NCHW ``x`` (padding never wins); the gradient goes to the first
    maximum of each window, as in PyTorch."""
    top, left, bottom, right = pads
    xp = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=-np.inf)
    windows = _windows(xp, kernel, strides)
    flat = windows.reshape(*windows.shape[:4], -1)  # (N, C, OH, OW, KH*KW), a copy
    where = flat.argmax(axis=-1)[..., None]
    y = np.take_along_axis(flat, where, axis=-1)[..., 0]

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        dflat = np.zeros(flat.shape, dtype=dy.dtype)
        np.put_along_axis(dflat, where, dy[..., None], axis=-1)
        dxp = _add_windows(dflat.reshape(windows.shape), xp.shape, strides)
        return [dxp[:, :, top : top + x.shape[2], left : left + x.shape[3]]]

    return y, backward


def batch_norm(
    x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, *, eps: float
) -> tuple[np.ndarray, Backward]:
    """Training-mode batch norm of NCHW ``x``: statistics over N, H, W, biased variance."""
    axes = (0, 2, 3)
    mean = x.mean(axis=axes, keepdims=True)
    rstd = 1.0 / np.sqrt(x.var(axis=axes, keepdims=True) + eps)
    xhat = (x - mean) * rstd
    scale = gamma.reshape(1, -1, 1, 1)
    y = xhat * scale + beta.reshape(1, -1, 1, 1)

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        dxhat = dy * scale
        dx = rstd * (
            dxhat
            - dxhat.mean(axis=axes, keepdims=True)
            - xhat * (dxhat * xhat).mean(axis=axes, keepdims=True)
        )
        return [dx, (dy * xhat).sum(axis=axes), dy.sum(axis=axes)]

    return y, backward


def layer_norm(
    x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, *, eps: float
) -> tuple[np.ndarray, Backward]:
    """Layer norm over the last axis, biased variance."""
    mean = x.mean(axis=-1, keepdims=True)
    rstd = 1.0 / np.sqrt(x.var(axis=-1, keepdims=True) + eps)
    xhat = (x - mean) * rstd
    y = xhat * gamma + beta

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        dxhat = dy * gamma
        dx = rstd * (
            dxhat
            - dxhat.mean(axis=-1, keepdims=True)
            - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True)
        )
        rows = (-1, x.shape[-1])
        return [dx, (dy * xhat).reshape(rows).sum(axis=0), dy.reshape(rows).sum(axis=0)]

    return y, backward


def softmax(x: np.ndarray, axis: int = -1) -> tuple[np.ndarray, Backward]:
    """Softmax along ``axis`` (the maximum subtracted first, so it never overflows)."""
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    y = e / e.sum(axis=axis, keepdims=True)

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        return [y * (dy - (dy * y).sum(axis=axis, keepdims=True))]

    return y, backward


_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def gelu(x: np.ndarray) -> tuple[np.ndarray, Backward]:
    """Exact GELU, ``x * Phi(x)`` with the normal CDF ``Phi`` from erf."""
    cdf = 0.5 * (1.0 + erf(x * _SQRT_HALF))

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        pdf = np.exp(-0.5 * x * x) * _INV_SQRT_2PI
        return [dy * (cdf + x * pdf)]

    return x * cdf, backward


def erf_kernel(x: np.ndarray) -> tuple[np.ndarray, Backward]:
    """The error function (ONNX Erf)."""

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        return [dy * (np.exp(-x * x) * _TWO_OVER_SQRT_PI)]

    return erf(x), backward


def attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, *, causal: bool
) -> tuple[np.ndarray, Backward]:
    """``softmax(q k^T / sqrt(d)) v`` on (..., seq, d); ``causal`` hides keys after the query
    (PyTorch's ``is_causal``: the mask is aligned to the top-left corner)."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = (q @ k.swapaxes(-1, -2)) * scale
    if causal:
        later = np.triu(np.ones(scores.shape[-2:], dtype=bool), k=1)
        scores = np.where(later, -np.inf, scores)
    p, softmax_backward = softmax(scores)

    def backward(dy: np.ndarray, needs: Sequence[bool]) -> list[np.ndarray | None]:
        dv = p.swapaxes(-1, -2) @ dy
        (dscores,) = softmax_backward(dy @ v.swapaxes(-1, -2), (True,))
        assert dscores is not None
        dscores = dscores * scale
        return [dscores @ k, dscores.swapaxes(-1, -2) @ q, dv]

    return p @ v, backward
