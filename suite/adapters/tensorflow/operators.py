"""TensorFlow's operator words and their backward (``vjp``): a word that is one op runs eagerly
(:data:`EAGER_WORDS`), one of several ops as a ``tf.function``; ``--xla`` (``Adapter.xla``)
compiles every word. A mixin of
:class:`~suite.adapters.tensorflow.adapter.TensorFlowAdapter`; ``tensorflow`` is imported by the
adapter's ``setup``, never here at module import.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from suite.adapters.base import Adapter, Tensor
from suite.errors import UnsupportedError


def same_pads(size: int | None, kernel: int, stride: int, dilation: int = 1) -> tuple[int, int]:
    """The (before, after) padding of TensorFlow's ``padding="SAME"`` on one axis of ``size``
    (an unknown size matches no padding)."""
    if size is None:
        return (-1, -1)
    effective = (kernel - 1) * dilation + 1
    out = -(-size // stride)
    total = max((out - 1) * stride + effective - size, 0)
    return total // 2, total - total // 2


#: The words that are one TensorFlow op (``tf.linalg.matmul``, ``tf.nn.softmax``,
#: ``fused_batch_norm``: in fp32 the casts of its scale and offset return them unchanged). They
#: run eagerly, as TensorFlow 2 runs an op by default and as the bare loop ``tf.matmul(a, b)``
#: runs it: a ``tf.function`` around one op adds only its call. On a 2-core AMD EPYC
#: (TensorFlow 2.21, quick fp32 sizes, docs/results/tf-eager-words/): GEMM 256^3 173 us eager
#: against 393 us as a ``tf.function``, softmax 138 against 326, batch norm 544 against 573;
#: their backward 448 against 763, 501 against 728, 587 against 915; the suite's GEMM went from
#: 1.8-2.3x a bare eager loop to 0.99-1.04x. The words the suite composes from several ops
#: (conv2d with its layout transposes, layer norm, GELU, attention) stay one ``tf.function``
#: each, as a Keras layer runs in ``Model.fit``'s graph: op by op, layer norm's backward took
#: 2.0x as long, conv2d's 1.3x. ``--xla`` compiles every word.
EAGER_WORDS = frozenset({"matmul", "softmax", "batch_norm"})


def _onednn_enabled() -> bool | None:
    """TensorFlow's own run-time answer (``IsMklEnabled``: TF_ENABLE_ONEDNN_OPTS, else the CPU's
    features); None where this TensorFlow does not expose it. Runs no op."""
    try:
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:
        return None
    check = getattr(_pywrap_util_port, "IsMklEnabled", None)
    return bool(check()) if check is not None else None


class TensorFlowOperators(Adapter):
    """The operator words (state set up by the adapter's ``__init__`` and ``setup``)."""

    tf: Any
    on_gpu: bool
    _ops: dict[str, Any]
    _half_cpu_conv: str | None
    _grouped_fp64_cpu: bool

    def _onednn_has_bf16(self) -> bool:
        """Whether TensorFlow's bf16 CPU kernels are oneDNN's (fp32 accumulation): oneDNN on
        and a CPU it has a bf16 path for (AVX512F or AVX_NE_CONVERT), as TensorFlow tests it."""
        if not _onednn_enabled():
            return False
        try:
            from tensorflow.python.util import _pywrap_utils
        except ImportError:
            return False
        check = getattr(_pywrap_utils, "IsDataTypeSupportedByOneDNNOnThisCPU", None)
        return bool(check(self.tf.bfloat16)) if check is not None else False

    def _half_conv_gradient_refusal(self, dtype: str) -> str | None:
        """Why the conv2d gradients in ``dtype`` on this CPU (without XLA) are declared, or None.

        Both run in TensorFlow's own (Eigen) kernels unless oneDNN serves the dtype, and those
        keep partial sums in the half type instead of fp32. Measured on a 2-core AVX2 AMD EPYC
        (TensorFlow 2.21, N4 C32 28x28 K32 3x3, the kit's backward size): bf16 weight gradient
        l2 error 2.0e-2 with 2 threads, 3.2e-2 (max 6.1e-2) with 1, against the bf16 tolerance
        1e-2 and the 1.7e-3 that rounding an exact result to bf16 gives; the input gradient
        8e-3 (1.0e-2 at C64 56x56, 2.0e-2 at C512 7x7). The same inputs give 1.7e-3 (the
        rounding alone) through the forward kernel and through XLA, so the adapter's inputs
        are right and the tolerance model is not what fails."""
        if dtype == "fp16":
            return (
                "tensorflow: the fp16 conv2d weight gradient on this CPU accumulates in fp16 "
                "(no oneDNN fp16 path without AVX512-FP16; measured l2 error 2.6e-3 > the fp16 "
                "tolerance 2e-3); run it with --xla, which accumulates in fp32"
            )
        if dtype == "bf16" and not self._onednn_has_bf16():
            enabled, flag = _onednn_enabled(), os.environ.get("TF_ENABLE_ONEDNN_OPTS")
            if enabled:
                why = "oneDNN has no bf16 path on this CPU: it needs AVX512"
            elif enabled is None:
                why = "this TensorFlow does not say whether its oneDNN kernels are on"
            elif flag is not None:
                why = f"TF_ENABLE_ONEDNN_OPTS={flag} turns TensorFlow's oneDNN kernels off"
            else:
                why = (
                    "TensorFlow turns its oneDNN kernels on only on CPUs with AVX512_VNNI, "
                    "AVX512_BF16, AVX_VNNI or AMX"
                )
            return (
                "tensorflow: the bf16 conv2d gradients on this CPU run in TensorFlow's own "
                f"kernels, which keep partial sums in bf16 ({why}; oneDNN's accumulate in "
                "fp32): measured weight-gradient l2 error 2.0e-2 > the bf16 tolerance 1e-2 "
                "(3.2e-2 on one thread); run it with --xla, which accumulates in fp32"
            )
        return None

    # -- autodiff ----------------------------------------------------------------------------
    def vjp(
        self, fn: Callable[..., Tensor], primals: Mapping[str, Tensor], cotangent: Tensor
    ) -> Callable[[], Sequence[Tensor]]:
        tf = self.tf
        inputs = list(primals.values())
        # A persistent tape records the forward once; each call replays only the backward
        # (the recorded tf.function's gradient function).
        self._half_cpu_conv = None
        self._grouped_fp64_cpu = False
        with tf.GradientTape(persistent=True) as tape:
            for t in inputs:
                tape.watch(t)
            out = fn(**primals)
        refusal = self._half_conv_gradient_refusal(self._half_cpu_conv or "")
        if refusal:
            raise UnsupportedError(refusal)
        if self._grouped_fp64_cpu:
            raise UnsupportedError(
                "tensorflow: no fp64 gradient of a grouped convolution on the CPU (its Eigen "
                "kernels: 'Gradients for grouped convolutions are not supported on CPU'; "
                "oneDNN's serve fp32 and bf16)"
            )

        def backward() -> Sequence[Tensor]:
            grads: Sequence[Tensor] = tape.gradient(out, inputs, output_gradients=cotangent)
            return grads

        return backward

    # -- operator words ----------------------------------------------------------------------
    def _build_ops(self) -> None:
        """The operator words: with ``--xla`` (``self.xla``) each one ``tf.function``
        compiled with XLA; without it the words of :data:`EAGER_WORDS` run eagerly and the
        others as one ``tf.function`` each."""
        tf = self.tf

        def conv2d(x: Any, w: Any, stride: int, padding: int, dilation: int) -> Any:
            # TensorFlow's CPU convolutions (forward and both gradients) are NHWC/HWIO only:
            # the NCHW/OIHW contract costs two transposes in and one out, inside the function.
            xh, wh = tf.transpose(x, (0, 2, 3, 1)), tf.transpose(w, (2, 3, 1, 0))
            # "SAME"/"VALID" rather than explicit padding: with EXPLICIT padding the bf16
            # weight gradient leaves oneDNN for a slow Eigen kernel that accumulates in bf16
            # (17x slower, l2 error 2e-2 instead of 3e-3, where oneDNN serves bf16; where it
            # does not, every padding runs that kernel: _half_conv_gradient_refusal)
            # a grouped convolution is the same op with an HWIO weight of I = C / groups
            # (oneDNN's grouped kernels); a dilated one spans dilation * (k - 1) + 1
            mode = "VALID"
            if padding and not all(
                same_pads(int(size), int(k), stride, dilation) == (padding, padding)
                for size, k in ((x.shape[2], w.shape[2]), (x.shape[3], w.shape[3]))
            ):
                xh = tf.pad(xh, ((0, 0), (padding, padding), (padding, padding), (0, 0)))
            elif padding:
                mode = "SAME"

            def dense(xp: Any, wp: Any) -> Any:
                if dilation > 1 and stride == 1:
                    # TensorFlow's own route for a dilated convolution (tf.nn.convolution:
                    # space to batch, a dense conv, batch to space): Conv2D's dilations have
                    # no gradient kernel on a CPU without oneDNN ("Current CPU implementations
                    # do not yet support dilation rates larger than 1")
                    return tf.nn.convolution(xp, wp, strides=1, padding=mode, dilations=dilation)
                return tf.nn.conv2d(xp, wp, strides=stride, padding=mode, dilations=dilation)

            groups = int(xh.shape[3]) // int(wh.shape[2])
            if groups > 1 and not self.on_gpu and not self.xla and not _onednn_enabled():
                # TensorFlow's own CPU kernels have no grouped gradient ("Gradients for grouped
                # convolutions are not supported on CPU"): where oneDNN is off (a 2-core AVX2
                # AMD EPYC, where TensorFlow turns it on only with VNNI, BF16 or AMX) the groups
                # run as dense convolutions of their channel slices, concatenated
                xs, ws = tf.split(xh, groups, axis=3), tf.split(wh, groups, axis=3)
                y = tf.concat([dense(a, b) for a, b in zip(xs, ws, strict=True)], axis=3)
            else:
                y = dense(xh, wh)
            return tf.transpose(y, (0, 3, 1, 2))

        def batch_norm(x: Any, gamma: Any, beta: Any, eps: float) -> Any:
            if x.dtype == tf.float64:  # FusedBatchNorm has no double kernel
                mean, var = tf.nn.moments(x, axes=(0, 2, 3), keepdims=True)
                shape = (1, -1, 1, 1)
                return tf.nn.batch_normalization(
                    x, mean, var, tf.reshape(beta, shape), tf.reshape(gamma, shape), eps
                )
            # fused kernel (statistics in fp32 for half types); scale/offset must be fp32
            y, _, _ = tf.compat.v1.nn.fused_batch_norm(
                x,
                tf.cast(gamma, tf.float32),
                tf.cast(beta, tf.float32),
                epsilon=eps,
                data_format="NCHW",
                is_training=True,
            )
            return y

        def layer_norm(x: Any, gamma: Any, beta: Any, eps: float) -> Any:
            # TensorFlow has no layer-norm kernel; this is Keras' LayerNormalization
            # arithmetic (statistics in fp32 for half types)
            dtype = x.dtype
            if dtype in (tf.float16, tf.bfloat16):
                x, gamma, beta = (tf.cast(v, tf.float32) for v in (x, gamma, beta))
            mean, var = tf.nn.moments(x, axes=(-1,), keepdims=True)
            y = (x - mean) * tf.math.rsqrt(var + eps) * gamma + beta
            return tf.cast(y, dtype)

        def attention(q: Any, k: Any, v: Any, causal: bool) -> Any:
            scale = tf.cast(1.0 / np.sqrt(float(q.shape[-1])), q.dtype)
            scores = tf.matmul(q, k, transpose_b=True) * scale
            if causal:
                n, m = scores.shape[-2], scores.shape[-1]
                keep = tf.linalg.band_part(tf.ones((n, m), tf.bool), -1, 0)  # j <= i
                scores = tf.where(keep, scores, tf.constant(float("-inf"), scores.dtype))
            return tf.matmul(tf.nn.softmax(scores, axis=-1), v)

        def gelu(x: Any) -> Any:
            # tf.nn.gelu(approximate=False)'s own graph, 0.5 x erfc(-x / sqrt(2)), with the
            # constant made in x's dtype: tf.nn.gelu casts a float32-rounded 1/sqrt(2), so its
            # fp64 result is off by ~1e-9 (fp32/bf16/fp16 are unaffected)
            return 0.5 * x * tf.math.erfc(-x * tf.constant(0.7071067811865476, x.dtype))

        impl: dict[str, Callable[..., Any]] = {
            "matmul": lambda a, b: tf.linalg.matmul(a, b),
            "conv2d": conv2d,
            "batch_norm": batch_norm,
            "layer_norm": layer_norm,
            "softmax": lambda x: tf.nn.softmax(x, axis=-1),
            "gelu": gelu,
            "attention": attention,
        }
        self._ops = {
            name: f
            if name in EAGER_WORDS and not self.xla
            else tf.function(f, jit_compile=self.xla, autograph=False)
            for name, f in impl.items()
        }

    def matmul(self, a: Tensor, b: Tensor) -> Tensor:
        return self._ops["matmul"](a, b)

    def conv2d(
        self, x: Tensor, w: Tensor, *, stride: int, padding: int, dilation: int = 1, groups: int = 1
    ) -> Tensor:
        half = {self.tf.float16: "fp16", self.tf.bfloat16: "bf16"}.get(x.dtype)
        if half and not self.on_gpu and not self.xla:
            self._half_cpu_conv = half  # vjp may declare its backward (see there)
        if groups != 1 and x.dtype == self.tf.float64 and not self.on_gpu:
            self._grouped_fp64_cpu = True  # vjp declares its backward (see there)
        # groups is the weight's shape (I = C / groups): Conv2D reads it from there
        return self._ops["conv2d"](x, w, int(stride), int(padding), int(dilation))

    def batch_norm(self, x: Tensor, gamma: Tensor, beta: Tensor, *, eps: float) -> Tensor:
        return self._ops["batch_norm"](x, gamma, beta, float(eps))

    def layer_norm(self, x: Tensor, gamma: Tensor, beta: Tensor, *, eps: float) -> Tensor:
        return self._ops["layer_norm"](x, gamma, beta, float(eps))

    def softmax(self, x: Tensor) -> Tensor:
        return self._ops["softmax"](x)

    def gelu(self, x: Tensor) -> Tensor:
        return self._ops["gelu"](x)

    def attention(self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool) -> Tensor:
        return self._ops["attention"](q, k, v, bool(causal))
