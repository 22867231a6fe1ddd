"""JAX's operator words and their backward (``vjp``): every operator word a ``jax.jit``
function (JAX always compiles with XLA), ``vjp`` ``jax.vjp`` with the backward pass jitted. A mixin
of :class:`~suite.adapters.jax.adapter.JaxAdapter`; ``jax`` is imported by the adapter's
``setup``, never here at module import.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from suite.adapters.base import Adapter, Tensor


class JaxOperators(Adapter):
    """The operator words (state set up by the adapter's ``__init__`` and ``setup``)."""

    jax: Any
    jnp: Any
    on_gpu: bool
    _ops: dict[str, Any]

    if TYPE_CHECKING:

        def _track(self, out: Any) -> Any: ...

    # -- autodiff ----------------------------------------------------------------------------
    def vjp(
        self, fn: Callable[..., Tensor], primals: Mapping[str, Tensor], cotangent: Tensor
    ) -> Callable[[], Sequence[Tensor]]:
        """``jax.vjp`` runs the forward once; the returned callable applies the pullback (its
        residuals passed as arguments of one jitted function, so it is compiled once and can be
        called any number of times)."""
        jax = self.jax
        names = list(primals)

        def positional(*args: Any) -> Any:
            return fn(**dict(zip(names, args, strict=True)))

        _, pullback = jax.vjp(positional, *(primals[k] for k in names))
        apply = jax.jit(lambda pb, ct: pb(ct))

        def backward() -> Sequence[Tensor]:
            grads: Sequence[Tensor] = apply(pullback, cotangent)
            self._track(grads)
            return grads

        return backward

    # -- operator words ----------------------------------------------------------------------
    def _build_ops(self) -> None:
        """The operator words as jitted functions (keyword attributes are static)."""
        jax, jnp = self.jax, self.jnp
        lax = jax.lax

        def stats(x: Any) -> Any:
            return x.astype(jnp.float32) if x.dtype in (jnp.bfloat16, jnp.float16) else x

        def conv2d(x: Any, w: Any, *, stride: int, padding: int, dilation: int, groups: int) -> Any:
            return lax.conv_general_dilated(
                x, w, (stride, stride), [(padding, padding)] * 2,
                rhs_dilation=(dilation, dilation), feature_group_count=groups,
                dimension_numbers=("NCHW", "OIHW", "NCHW"),
            )  # fmt: skip

        def batch_norm(x: Any, gamma: Any, beta: Any, *, eps: float) -> Any:
            # statistics in fp32 for 16-bit inputs, as cuDNN and PyTorch's CPU kernels do
            xs = stats(x)
            mean = xs.mean(axis=(0, 2, 3), keepdims=True)
            var = jnp.mean(jnp.square(xs - mean), axis=(0, 2, 3), keepdims=True)
            c = (1, -1, 1, 1)
            y = (xs - mean) * lax.rsqrt(var + eps) * stats(gamma).reshape(c)
            return (y + stats(beta).reshape(c)).astype(x.dtype)

        def layer_norm(x: Any, gamma: Any, beta: Any, *, eps: float) -> Any:
            xs = stats(x)
            mean = xs.mean(axis=-1, keepdims=True)
            var = jnp.mean(jnp.square(xs - mean), axis=-1, keepdims=True)
            y = (xs - mean) * lax.rsqrt(var + eps) * stats(gamma) + stats(beta)
            return y.astype(x.dtype)

        def softmax(x: Any) -> Any:
            return jax.nn.softmax(stats(x), axis=-1).astype(x.dtype)

        def attention(q: Any, k: Any, v: Any, *, causal: bool) -> Any:
            if self.on_gpu:  # (batch, seq, heads, head_dim) there; cuDNN's kernel where it applies
                out = jax.nn.dot_product_attention(
                    q.swapaxes(1, 2), k.swapaxes(1, 2), v.swapaxes(1, 2), is_causal=causal
                )
                return out.swapaxes(1, 2)
            # On the CPU, jax.nn.dot_product_attention asks for fp32 accumulation, which XLA's
            # CPU dot refuses for fp16: the same math written out, products in the inputs' dtype
            # and the softmax in fp32 (as jax.nn's)
            scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) * (1.0 / math.sqrt(q.shape[-1]))
            if causal:
                later = jnp.triu(jnp.ones(scores.shape[-2:], dtype=bool), k=1)
                scores = jnp.where(later, -jnp.inf, scores)
            p = jax.nn.softmax(stats(scores), axis=-1).astype(q.dtype)
            return jnp.einsum("bhqk,bhkd->bhqd", p, v)

        self._ops = {
            "matmul": jax.jit(jnp.matmul),
            "conv2d": jax.jit(conv2d, static_argnames=("stride", "padding", "dilation", "groups")),
            "batch_norm": jax.jit(batch_norm, static_argnames=("eps",)),
            "layer_norm": jax.jit(layer_norm, static_argnames=("eps",)),
            "softmax": jax.jit(softmax),
            "gelu": jax.jit(lambda x: jax.nn.gelu(x, approximate=False)),
            "attention": jax.jit(attention, static_argnames=("causal",)),
        }

    def matmul(self, a: Tensor, b: Tensor) -> Tensor:
        return self._track(self._ops["matmul"](a, b))

    def conv2d(
        self, x: Tensor, w: Tensor, *, stride: int, padding: int, dilation: int = 1, groups: int = 1
    ) -> Tensor:
        return self._track(
            self._ops["conv2d"](
                x, w, stride=stride, padding=padding, dilation=dilation, groups=groups
            )
        )

    def batch_norm(self, x: Tensor, gamma: Tensor, beta: Tensor, *, eps: float) -> Tensor:
        return self._track(self._ops["batch_norm"](x, gamma, beta, eps=eps))

    def layer_norm(self, x: Tensor, gamma: Tensor, beta: Tensor, *, eps: float) -> Tensor:
        return self._track(self._ops["layer_norm"](x, gamma, beta, eps=eps))

    def softmax(self, x: Tensor) -> Tensor:
        return self._track(self._ops["softmax"](x))

    def gelu(self, x: Tensor) -> Tensor:
        """Exact (erf) GELU: ``jax.nn.gelu(approximate=False)``."""
        return self._track(self._ops["gelu"](x))

    def attention(self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool) -> Tensor:
        """``jax.nn.dot_product_attention`` (XLA's implementation on CPUs; JAX picks cuDNN's
        fused kernel on GPUs where it applies)."""
        return self._track(self._ops["attention"](q, k, v, causal=causal))
