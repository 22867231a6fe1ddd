"""MXNet's operator words and their backward (``vjp``): ``mx.nd`` with MXNet's own kernels
(oneDNN on the CPU), gradients through ``mx.autograd``. A mixin of
:class:`~suite.adapters.mxnet.adapter.MXNetAdapter`; ``mxnet`` is imported by the adapter's
``setup``, never here at module import.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from suite.adapters.base import Adapter, Tensor


class MXNetOperators(Adapter):
    """The operator words (state set up by the adapter's ``__init__`` and ``setup``)."""

    mx: Any
    ctx: Any
    _masks: dict[tuple[int, str], Any]
    _bn_stats: dict[tuple[int, str], tuple[Any, Any]]

    # -- autodiff ----------------------------------------------------------------------------
    def vjp(
        self, fn: Callable[..., Tensor], primals: Mapping[str, Tensor], cotangent: Tensor
    ) -> Callable[[], Sequence[Tensor]]:
        """``fn`` is recorded once; each call runs only its backward (``retain_graph``). The
        gradients are the primals' ``.grad`` buffers, overwritten by the next call."""
        autograd = self.mx.autograd
        names = list(primals)
        for k in names:
            primals[k].attach_grad()
        with autograd.record():
            out = fn(**primals)

        def backward() -> Sequence[Tensor]:
            out.backward(out_grad=cotangent, retain_graph=True)
            return [primals[k].grad for k in names]

        return backward

    # -- operator words ----------------------------------------------------------------------
    def matmul(self, a: Tensor, b: Tensor) -> Tensor:
        nd = self.mx.nd
        if b.ndim == 2:  # (..., k) @ (k, n)
            return nd.dot(a, b)
        batch = a.shape[:-2]
        out = nd.batch_dot(a.reshape((-1, *a.shape[-2:])), b.reshape((-1, *b.shape[-2:])))
        return out.reshape((*batch, a.shape[-2], b.shape[-1]))

    def conv2d(
        self, x: Tensor, w: Tensor, *, stride: int, padding: int, dilation: int = 1, groups: int = 1
    ) -> Tensor:
        return self.mx.nd.Convolution(
            data=x,
            weight=w,
            kernel=tuple(w.shape[2:]),
            stride=(stride, stride),
            pad=(padding, padding),
            dilate=(dilation, dilation),
            num_filter=w.shape[0],
            num_group=groups,
            no_bias=True,
        )

    def batch_norm(self, x: Tensor, gamma: Tensor, beta: Tensor, *, eps: float) -> Tensor:
        """Training mode (batch statistics). MXNet's BatchNorm also updates running statistics
        in training mode: it is given scratch ones, kept per shape so no call allocates."""
        mx = self.mx
        c = x.shape[1]
        stat_dtype = "float64" if x.dtype == np.float64 else "float32"
        if x.dtype == np.float16:  # half-precision data takes fp32 scale and shift
            gamma, beta = gamma.astype("float32"), beta.astype("float32")
        key = (c, stat_dtype)
        if key not in self._bn_stats:
            self._bn_stats[key] = (
                mx.nd.zeros((c,), ctx=self.ctx, dtype=stat_dtype),
                mx.nd.ones((c,), ctx=self.ctx, dtype=stat_dtype),
            )
        mean, var = self._bn_stats[key]
        with mx.autograd.train_mode():
            return mx.nd.BatchNorm(
                x, gamma, beta, mean, var, eps=eps, fix_gamma=False, use_global_stats=False
            )

    def layer_norm(self, x: Tensor, gamma: Tensor, beta: Tensor, *, eps: float) -> Tensor:
        return self.mx.nd.LayerNorm(x, gamma, beta, axis=-1, eps=eps)

    def softmax(self, x: Tensor) -> Tensor:
        return self.mx.nd.softmax(x, axis=-1)

    def gelu(self, x: Tensor) -> Tensor:
        nd = self.mx.nd
        if x.dtype == np.float64:
            # MXNet's gelu kernel evaluates erf in float32, and erf's own gradient carries a
            # float32 constant (3e-8 relative error in fp64, measured): the fp64 GELU is a
            # function with its gradient written out, dy (Phi(x) + x phi(x))
            return self._gelu64()(x)
        return nd.LeakyReLU(x, act_type="gelu")  # the exact (erf) GELU

    def _gelu64(self) -> Any:
        nd = self.mx.nd

        class Gelu64(self.mx.autograd.Function):  # type: ignore[name-defined]
            def forward(self, x: Any) -> Any:
                self.save_for_backward(x)
                return 0.5 * x * (1.0 + nd.erf(x * math.sqrt(0.5)))

            def backward(self, dy: Any) -> Any:
                (x,) = self.saved_tensors
                pdf = nd.exp(-0.5 * x * x) * (1.0 / math.sqrt(2.0 * math.pi))
                return dy * (0.5 * (1.0 + nd.erf(x * math.sqrt(0.5))) + x * pdf)

        return Gelu64()

    def attention(self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool) -> Tensor:
        """Unfused: ``softmax(q k^T / sqrt(d)) v`` with batch_dot over batch x heads."""
        nd = self.mx.nd
        shape = q.shape
        seq, d = shape[-2], shape[-1]
        q3, k3, v3 = (t.reshape((-1, t.shape[-2], t.shape[-1])) for t in (q, k, v))
        scores = nd.batch_dot(q3, k3, transpose_b=True) * (1.0 / math.sqrt(d))
        if causal:
            scores = nd.broadcast_add(scores, self._causal_mask(seq, k.shape[-2], q.dtype))
        out = nd.batch_dot(nd.softmax(scores, axis=-1), v3)
        return out.reshape((*shape[:-1], v.shape[-1]))

    def _causal_mask(self, n: int, m: int, dtype: Any) -> Tensor:
        key = (n * 1_000_003 + m, np.dtype(dtype).name)
        if key not in self._masks:
            later = np.triu(np.ones((n, m), dtype=bool), k=1)  # keys after the query
            mask = np.where(later, -np.inf, 0.0).astype(dtype)[None]
            self._masks[key] = self.mx.nd.array(mask, ctx=self.ctx, dtype=dtype)
        return self._masks[key]
