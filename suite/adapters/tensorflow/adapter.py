"""TensorFlow 2 / Keras 3 adapter (CPU; the GPU branch is written but untested here).

``tensorflow`` and ``keras`` are imported in ``setup``, never at module import. Operator words
are ``tf.function``s (XLA-compiled with ``--xla``: ``Adapter.xla``); the network words run the ONNX
graph through the shared importer as a Keras model (suite/adapters/tensorflow/network.py, kernels
in tensorflow_kernels.py); the distributed words use
``tf.distribute.MultiWorkerMirroredStrategy`` and its collectives.

Nothing in ``setup`` or ``versions`` runs a TensorFlow op: MultiWorkerMirroredStrategy must
configure the collective runtime before TensorFlow's eager context starts (``dist_init``
comes after both).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from suite.adapters.base import (
    ALL_WORDS,
    Adapter,
    Coordination,
    DeviceInfo,
    NetworkOptions,
    Tensor,
    host_cpu_info,
)
from suite.adapters.optimizer_words import DocumentedDifference
from suite.adapters.tensorflow import optimizers as keras_optimizers
from suite.errors import AdapterError, UnsupportedError
from suite.onnx.ops import CORE_OPS

_TF_DTYPES = ("fp64", "fp32", "bf16", "fp16")


def same_pads(size: int | None, kernel: int, stride: int, dilation: int = 1) -> tuple[int, int]:
    """The (before, after) padding of TensorFlow's ``padding="SAME"`` on one axis of ``size``
    (an unknown size matches no padding)."""
    if size is None:
        return (-1, -1)
    effective = (kernel - 1) * dilation + 1
    out = -(-size // stride)
    total = max((out - 1) * stride + effective - size, 0)
    return total // 2, total - total // 2


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _onednn_enabled() -> bool | None:
    """TensorFlow's own run-time answer (``IsMklEnabled``: TF_ENABLE_ONEDNN_OPTS, else the CPU's
    features); None where this TensorFlow does not expose it. Runs no op."""
    try:
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:
        return None
    check = getattr(_pywrap_util_port, "IsMklEnabled", None)
    return bool(check()) if check is not None else None


TF_NO_COMPRESSION = (
    "tf.distribute's collectives take CommunicationOptions (implementation RING or NCCL, bytes "
    "per pack, timeout) and no gradient compression (Horovod over TensorFlow has "
    "Compression.fp16: --framework horovod-tensorflow)"
)


class TensorFlowAdapter(Adapter):
    name: ClassVar[str] = "tensorflow"
    module: ClassVar[str] = "tensorflow"
    distribution: ClassVar[str] = "tensorflow-cpu"
    adapter_version: ClassVar[str] = "1"
    #: ``--xla`` (``self.xla``, set by the worker) compiles the operator words with XLA
    xla_capable: ClassVar[bool] = True
    words: ClassVar[frozenset[str]] = ALL_WORDS
    # every op the importer normalises (suite/onnx/ops.py); the kit checks that the
    # kernel table (suite/adapters/tensorflow/kernels.py) equals it, so listing the ops imports
    # no framework
    onnx_ops: ClassVar[frozenset[str]] = CORE_OPS
    strategies: ClassVar[dict[str, str]] = {
        "allreduce": "tf.distribute.MultiWorkerMirroredStrategy (RING collectives over gRPC on "
        "CPUs, NCCL on GPUs), GradientTape step under strategy.run",
        "ps-async": "tf.distribute.experimental.ParameterServerStrategy with a ClusterCoordinator "
        "on rank 0, one parameter-server process and one worker per rank: each shard's step "
        "scheduled on a free worker, its gradients applied to the variables on the parameter "
        "server without waiting for the other workers",
    }
    #: tf.distribute's collectives and ParameterServerStrategy talk gRPC, which sends with
    #: sendmsg(2): /proc/self/io's wchar does not count it
    write_counter_blind: ClassVar[str] = (
        "tf.distribute talks gRPC, which sends with sendmsg(2); /proc/self/io's wchar does not "
        "count it"
    )
    unsupported_strategies: ClassVar[dict[str, str]] = {
        "ps-sync": "TensorFlow 2's ParameterServerStrategy is asynchronous by design: the "
        "ClusterCoordinator runs each step on whichever worker is free, which updates the "
        "variables on the parameter servers without waiting for the others (TF 1's "
        "SyncReplicasOptimizer is not in TF 2)",
        "ssp": "ParameterServerStrategy has no staleness bound: its workers run asynchronously",
        "fp16": TF_NO_COMPRESSION,
        "bf16": TF_NO_COMPRESSION,
        "powersgd": TF_NO_COMPRESSION,
        "2bit": TF_NO_COMPRESSION,
        "1bit": TF_NO_COMPRESSION,
        "local-sgd": "tf.distribute has no local SGD (no periodic model averaging); "
        "MultiWorkerMirroredStrategy keeps the replicas' variables in sync every step",
        "pipeline": "tf.distribute has no pipeline parallelism (GPipe lives in Lingvo and "
        "Mesh TensorFlow, not in TensorFlow 2)",
        "adasum": "Adasum is Horovod's reduction (hvd.Adasum); tf.distribute has none",
    }

    # optimizers (suite/adapters/tensorflow/optimizers.py): keras.optimizers, three ways
    optimizers: ClassVar[dict[str, str]] = keras_optimizers.OPTIMIZERS
    unsupported_optimizers: ClassVar[dict[str, str]] = keras_optimizers.UNSUPPORTED_OPTIMIZERS
    documented_differences: ClassVar[dict[str, DocumentedDifference]] = (
        keras_optimizers.DOCUMENTED_DIFFERENCES
    )
    optimizer_implementations: ClassVar[dict[str, str]] = keras_optimizers.IMPLEMENTATIONS
    optimizer_hyperparameters: ClassVar[dict[str, frozenset[str]]] = (
        keras_optimizers.HYPERPARAMETERS
    )
    optimizer_dtypes: ClassVar[dict[str, str]] = keras_optimizers.DTYPES

    loaders: ClassVar[dict[str, str]] = {
        "tfrecord": "tf.data: interleave(TFRecordDataset) over the shards (Dataset.shard per "
        "rank), shuffle, map(parse, decode_and_crop_jpeg, resize, flip; num_parallel_calls), "
        "batch, prefetch",
    }
    unsupported_loaders: ClassVar[dict[str, str]] = {
        "folder": "the suite measures TensorFlow's TFRecord pipeline, what its ImageNet recipes "
        "read (a folder through tf.data.Dataset.list_files is a second pipeline, not added yet)",
        "webdataset": "TensorFlow has no WebDataset reader (a PyTorch-ecosystem format)",
        "recordio": "TensorFlow has no RecordIO reader (MXNet's format: run --framework mxnet)",
    }

    def data_loader(self, spec: Any) -> Any:
        from suite.adapters.tensorflow.data import TfDataLoader

        return TfDataLoader(spec)

    def __init__(self) -> None:
        self.tf: Any = None
        self.keras: Any = None
        self.device_name = "/CPU:0"
        self.on_gpu = False
        #: the half dtype ("fp16"/"bf16") of a conv2d traced on the CPU without XLA, which vjp
        #: may refuse (see _half_conv_gradient_refusal)
        self._half_cpu_conv: str | None = None
        #: set by conv2d for a grouped fp64 convolution on the CPU, whose gradient TensorFlow
        #: lacks ("Gradients for grouped convolutions are not supported on CPU"; oneDNN's
        #: grouped kernels serve fp32 and bf16): vjp declares it
        self._grouped_fp64_cpu = False
        self.xla = False
        self._dtypes: dict[str, Any] = {}
        self._ops: dict[str, Any] = {}
        self._strategy: Any = None
        self._launcher: Any = None
        self._comm_hint = "ring"
        self._timeout_s = 300.0
        self._rank = 0
        self._world = 1
        self._collectives: dict[str, Any] = {}
        self._ps: Any = None  # ParameterServerCluster (suite/adapters/tensorflow/strategies.py)

    @classmethod
    def installed_version(cls) -> str | None:
        # tensorflow-cpu on CPU machines; the plain tensorflow wheel (GPU builds) elsewhere
        from importlib import metadata

        for dist in (cls.distribution, "tensorflow"):
            try:
                return metadata.version(dist)
            except metadata.PackageNotFoundError:
                continue
        return None

    # -- device ------------------------------------------------------------------------------
    def setup(self, device: str) -> DeviceInfo:
        # INFO lines (oneDNN's notice, gRPC server start-up) off unless the user asks; the
        # oneDNN state is recorded in the device info instead
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
        try:
            import keras
            import tensorflow as tf
        except ImportError as exc:
            raise AdapterError(
                f"tensorflow: cannot import tensorflow/keras ({exc}); install dlsuite[tensorflow] "
                "or the pins of containers/tensorflow/requirements.txt"
            ) from exc
        self.tf, self.keras = tf, keras
        self._dtypes = {
            "fp64": tf.float64,
            "fp32": tf.float32,
            "bf16": tf.bfloat16,
            "fp16": tf.float16,
        }
        gpus = tf.config.list_physical_devices("GPU")  # does not start the eager context
        if device == "auto":
            device = "cuda" if gpus else "cpu"
        if device == "cuda":
            if not gpus:
                raise AdapterError(
                    "tensorflow: --device cuda but TensorFlow sees no GPU "
                    f"(TensorFlow {tf.__version__}; tensorflow-cpu has no CUDA build)"
                )
            return self._setup_gpu(gpus)
        if device != "cpu":
            raise AdapterError(f"tensorflow: unknown device {device!r}; use cpu, cuda or auto")
        self.device_name, self.on_gpu = "/CPU:0", False
        if gpus:
            try:
                tf.config.set_visible_devices([], "GPU")
            except RuntimeError:  # the context already started (setup called twice)
                pass
        threads = self._threads_from_environment()
        info = host_cpu_info()
        info.extra.update(
            {
                # None: TensorFlow's default (one thread per core)
                "tf_intra_op_threads": threads or None,
                "tf_inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads()
                or None,
                "xla_operators": self.xla,
                "onednn": self._onednn(),
                "onednn_bf16": self._onednn_has_bf16(),
            }
        )
        self._build_ops()
        return info

    def _threads_from_environment(self) -> int:
        """The suite states a rank's core budget in OMP_NUM_THREADS (launchers split the cores
        between ranks); TensorFlow's own pool ignores it, so it is applied here unless
        TF_NUM_INTRAOP_THREADS says otherwise. Only possible before the eager context starts."""
        tf = self.tf
        current = int(tf.config.threading.get_intra_op_parallelism_threads())
        wanted = os.environ.get("OMP_NUM_THREADS", "")
        if os.environ.get("TF_NUM_INTRAOP_THREADS") or not wanted.isdigit() or current:
            return current
        try:
            tf.config.threading.set_intra_op_parallelism_threads(int(wanted))
        except RuntimeError:  # the context already started (setup called twice)
            return current
        return int(wanted)

    def _onednn(self) -> str:
        """Whether TensorFlow runs its oneDNN kernels, as TensorFlow itself decides it at run
        time: TF_ENABLE_ONEDNN_OPTS if set, else on only for CPUs with AVX512_VNNI, AVX512_BF16,
        AVX_VNNI or AMX (off on an AVX2 AMD EPYC, for instance)."""
        flag = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
        state = {True: "on", False: "off", None: "unknown"}[_onednn_enabled()]
        return (
            f"{state} (TF_ENABLE_ONEDNN_OPTS={flag})" if flag is not None else f"{state} (default)"
        )

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

    def _setup_gpu(self, gpus: list[Any]) -> DeviceInfo:
        from suite.devices import declared_gpu_peak

        tf = self.tf
        for gpu in gpus:
            try:
                tf.config.experimental.set_memory_growth(gpu, True)
            except RuntimeError:  # context already started (setup called twice)
                pass
        # Strict fp32 unless the task asks for tf32 (TensorFlow enables TF32 by default).
        tf.config.experimental.enable_tensor_float_32_execution(False)
        local = int(os.environ.get("LOCAL_RANK", "0")) % len(gpus)
        details = tf.config.experimental.get_device_details(gpus[local])
        index = local
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:
            # one GPU per rank: MultiWorkerMirroredStrategy makes a replica of every visible GPU
            try:
                tf.config.set_visible_devices([gpus[local]], "GPU")
                index = 0
            except RuntimeError:  # the context already started (setup called twice)
                pass
        name = str(details.get("device_name", "GPU"))
        peaks, source = declared_gpu_peak(name)
        self.device_name, self.on_gpu = f"/GPU:{index}", True
        cc = details.get("compute_capability")
        self._build_ops()
        return DeviceInfo(
            kind="gpu",
            name=name,
            count=len(gpus),
            peak_tflops=peaks,
            peak_source=source,
            extra={
                "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
                "xla_operators": self.xla,
            },
        )

    def versions(self) -> dict[str, str | None]:
        tf, keras = self.tf, self.keras
        build = tf.sysconfig.get_build_info()
        return {
            "tensorflow": tf.__version__,
            "tensorflow_git": str(tf.version.GIT_VERSION),
            "keras": keras.__version__,
            "cuda": build.get("cuda_version"),
            "cudnn": build.get("cudnn_version"),
            "xla_operators": "on" if self.xla else "off",
            "onednn": self._onednn(),
        }

    def end_task(self) -> dict[str, list[str]]:
        if self.keras is None:
            return {"reset": [], "warm": []}
        self.keras.backend.clear_session()
        return {
            "reset": ["Keras' global state and layer names (keras.backend.clear_session)"],
            "warm": ["TensorFlow's eager context and thread pools (set once per process)"],
        }

    def supports(self, dtype: str) -> tuple[bool, str]:
        if dtype == "tf32":
            if not self.on_gpu:
                return (
                    False,
                    "tf32 is a tensor-core mode of NVIDIA GPUs (Ampere or newer); this task runs on the CPU",
                )
            self.tf.config.experimental.enable_tensor_float_32_execution(True)
            return True, ""
        if dtype not in _TF_DTYPES:
            return False, f"tensorflow adapter has no dtype {dtype!r}"
        return True, ""

    def synchronize(self) -> None:
        # Eager CPU ops run synchronously; a GPU's stream does not: SyncDevice waits for it
        # (what tf.test.experimental.sync_devices does, for this device only: under
        # MultiWorkerMirroredStrategy the logical devices include the other workers').
        if self.tf is None:
            return
        if self.on_gpu:
            with self.tf.device(self.device_name):
                self.tf.raw_ops.SyncDevice()
        from tensorflow.python.eager import context

        context.async_wait()

    def wait(self, out: Any) -> None:
        """Materialise the outputs (and synchronise the device): no work is left pending or
        skipped when :meth:`time` reads the clock. Steps scheduled on a parameter-server
        cluster's workers: until every scheduled step is done (``ClusterCoordinator.join``)."""
        tf = self.tf
        if self._ps is not None and self._ps.coordinator is not None:
            self._ps.coordinator.join()
        for t in tf.nest.flatten(out) if out is not None else ():
            if isinstance(t, tf.Tensor | tf.Variable):
                if self.on_gpu:  # one element to the host: waits for the tensor's producer
                    tf.reshape(t, [-1])[:1].numpy()
                else:
                    np.asarray(t)  # a CPU tensor's buffer, no copy: waits until it is ready

    # -- tensors -----------------------------------------------------------------------------
    def from_numpy(self, x: np.ndarray, dtype: str, *, requires_grad: bool = False) -> Tensor:
        tf = self.tf
        src = np.ascontiguousarray(x, dtype=np.float64)
        with tf.device(self.device_name):
            if dtype == "fp64":
                return tf.constant(src)
            # the values are already rounded to ``dtype``: the cast from fp32 is exact
            return tf.cast(tf.constant(src.astype(np.float32)), self._dtypes[dtype])

    def copy_from_numpy(self, t: Tensor, x: np.ndarray) -> None:
        """TensorFlow tensors are immutable and no word of this adapter changes a tensor it is
        given (its collectives return new tensors), so a buffer only ever holds the values it
        was made with: this checks ``t`` already holds ``x`` (a tf.Variable is assigned)."""
        tf = self.tf
        if isinstance(t, tf.Variable):
            t.assign(np.asarray(x).astype(t.dtype.as_numpy_dtype))
            return
        held = np.asarray(t)
        if held.shape != np.shape(x) or not np.array_equal(held, np.asarray(x, held.dtype)):
            raise AdapterError(
                "tensorflow: tensors are immutable; copy_from_numpy can only refill a buffer "
                "with the values it was created with (use from_numpy for new values)"
            )

    def to_numpy(self, t: Tensor) -> np.ndarray:
        from suite.adapters.tensorflow.strategies import PSSteps

        if isinstance(t, PSSteps):  # a parameter-server step: its shards' mean loss
            return np.asarray(t.mean_loss(), dtype=np.float64)
        return np.asarray(t.numpy()).astype(np.float64)

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
        """The operator words as tf.functions, compiled with XLA when DLSUITE_TF_XLA=1."""
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
            y = tf.nn.conv2d(xh, wh, strides=stride, padding=mode, dilations=dilation)
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
            name: tf.function(f, jit_compile=self.xla, autograph=False) for name, f in impl.items()
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

    # -- network words -----------------------------------------------------------------------
    def build_network(self, model: Any, dtype: str, options: NetworkOptions) -> Any:
        from suite.adapters.tensorflow.network import KerasNetwork

        # TensorFlow's CPU kernels have no NCHW convolution gradients, so on the CPU the
        # model is channels-last whatever ``options.channels_last`` says (recorded on the net).
        channels_last = options.channels_last or not self.on_gpu
        with self.tf.device(self.device_name):
            return KerasNetwork(model, dtype, options, channels_last)

    def forward(self, net: Any, x: Tensor) -> Tensor:
        return net.forward(x)

    def train_step(self, net: Any, x: Tensor, y: Tensor) -> Tensor:
        return net.train_step(x, y)

    def loss_scale(self, net: Any) -> float | None:
        scale: float | None = net.loss_scale()
        return scale

    def network_parameters(self, net: Any) -> dict[str, np.ndarray]:
        params: dict[str, np.ndarray] = net.parameters()
        return params

    def labels_from_numpy(self, y: np.ndarray) -> Tensor:
        with self.tf.device(self.device_name):
            return self.tf.constant(np.ascontiguousarray(y, dtype=np.int64))

    def reset_peak_memory(self) -> None:
        if self.on_gpu:
            self.tf.config.experimental.reset_memory_stats(self.device_name.strip("/"))

    def peak_memory_bytes(self) -> int | None:
        if self.on_gpu:
            info = self.tf.config.experimental.get_memory_info(self.device_name.strip("/"))
            return int(info["peak"])
        return None

    # -- optimizer words (suite/adapters/tensorflow/optimizers.py) -----------------------------
    def optimizer_build(self, spec: Any, params: Mapping[str, np.ndarray]) -> Any:
        return keras_optimizers.KerasOptimizer(
            self.tf, self.keras, self.device_name, self._dtypes[spec.dtype], spec, params
        )

    def optimizer_set_gradients(self, handle: Any, grads: Mapping[str, np.ndarray]) -> None:
        handle.set_gradients(grads)

    def optimizer_set_lr(self, handle: Any, lr: float) -> None:
        handle.set_lr(lr)

    def optimizer_step(self, handle: Any) -> Any:
        return handle.step()

    def optimizer_parameters(self, handle: Any, master: bool = False) -> dict[str, np.ndarray]:
        params: dict[str, np.ndarray] = handle.parameters()
        return params

    def optimizer_state_bytes(self, handle: Any) -> int:
        return int(handle.state_bytes())

    # -- distributed words -------------------------------------------------------------------
    def dist_init(self, backend: str) -> str:
        """MultiWorkerMirroredStrategy over the ranks: TF_CONFIG from the launcher's
        RANK/WORLD_SIZE/MASTER_ADDR and one port per rank (DLSUITE_RANK_PORTS), unless the
        environment already has a TF_CONFIG. RING collectives on CPUs, NCCL on GPUs."""
        tf = self.tf
        from tensorflow.python.eager import context

        if backend not in ("auto", "nccl", "ring"):
            raise UnsupportedError(
                f"tf.distribute has no {backend!r} communication; use --dist-backend auto "
                "(RING collectives over gRPC on CPUs, NCCL on GPUs) or nccl"
            )
        if backend == "nccl" and not self.on_gpu:
            raise UnsupportedError("NCCL collectives need GPUs; this task runs on the CPU")
        self._rank = int(os.environ["RANK"])
        self._world = int(os.environ["WORLD_SIZE"])
        if not os.environ.get("TF_CONFIG"):
            os.environ["TF_CONFIG"] = json.dumps(self._tf_config())
        if context.context()._context_handle is not None:
            raise AdapterError(
                "tensorflow: the eager context started before dist_init; "
                "MultiWorkerMirroredStrategy must configure collectives first"
            )
        impl = tf.distribute.experimental.CommunicationImplementation
        use_nccl = self.on_gpu and backend in ("auto", "nccl")
        self._comm_hint = "nccl" if use_nccl else "ring"
        self._timeout_s = float(os.environ.get("DLSUITE_DIST_TIMEOUT", "300"))
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=impl.NCCL if use_nccl else impl.RING,
            timeout_seconds=self._timeout_s,
        )
        self._strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
        if self._strategy.num_replicas_in_sync != self._world:
            raise AdapterError(
                f"tensorflow: {self._strategy.num_replicas_in_sync} replicas in sync for "
                f"{self._world} ranks (one device per rank expected)"
            )
        # the strategy's own collective launcher: our broadcasts, barriers and max-reductions
        # take instance keys from the same sequence as its all-reduces
        self._launcher = self._strategy.extended._cross_device_ops._launchers[0]
        self._collectives = {}
        return f"MultiWorkerMirroredStrategy/{self._comm_hint.upper()}"

    def _tf_config(self) -> dict[str, Any]:
        ports = [p for p in os.environ.get("DLSUITE_RANK_PORTS", "").split(",") if p.strip()]
        if len(ports) != self._world:
            raise AdapterError(
                f"tensorflow: MultiWorkerMirroredStrategy needs every rank's address up front: "
                f"DLSUITE_RANK_PORTS has {len(ports)} ports for {self._world} ranks (the suite's "
                "launchers export it), or set TF_CONFIG yourself"
            )
        host = os.environ.get("MASTER_ADDR", "127.0.0.1")
        return {
            "cluster": {"worker": [f"{host}:{int(p)}" for p in ports]},
            "task": {"type": "worker", "index": self._rank},
        }

    def dist_shutdown(self, clean: bool = True) -> None:
        # MultiWorkerMirroredStrategy has no shutdown; a closing barrier keeps a rank from
        # leaving (and tearing down its gRPC server) while another still talks to it.
        if self._strategy is not None and clean:
            self.barrier()
        self._strategy = None

    def _collective(self, name: str) -> Any:
        """One tf.function per collective (traced once per shape, instance keys fed per call)."""
        if name in self._collectives:
            return self._collectives[name]
        tf = self.tf
        from tensorflow.python.ops import collective_ops, gen_collective_ops

        strategy, launcher = self._strategy, self._launcher
        group, world = launcher._group_key, self._world
        hint, timeout = self._comm_hint, self._timeout_s
        sum_ = tf.distribute.ReduceOp.SUM

        def replica(fn: Callable[[Any, Any], Any]) -> Callable[[Any], Any]:
            def run(t: Any) -> Any:
                def step(v: Any) -> Any:
                    return fn(tf.distribute.get_replica_context(), tf.identity(v))

                out = strategy.run(step, args=(t,))
                return strategy.experimental_local_results(out)[0]

            return run

        def reduce_max(t: Any) -> Any:
            return collective_ops.all_reduce_v2(
                t, world, group, launcher._next_instance_key(), merge_op="Max",
                communication_hint=hint, timeout=timeout,
                ordering_token=launcher._get_ordering_token(),
            )  # fmt: skip

        def broadcast(t: Any, root: int) -> Any:
            key = launcher._next_instance_key()
            if self._rank == root:
                return collective_ops.broadcast_send_v2(
                    t, world, group, key, communication_hint=hint, timeout=timeout
                )
            return collective_ops.broadcast_recv_v2(
                tf.shape(t), t.dtype, world, group, key, communication_hint=hint, timeout=timeout
            )

        def reduce_scatter(t: Any) -> Any:
            if self.on_gpu:
                return gen_collective_ops.collective_reduce_scatter_v2(
                    t, group_size=world, group_key=group,
                    instance_key=launcher._next_instance_key(),
                    ordering_token=[launcher._get_ordering_token()],
                    merge_op="Add", final_op="Id", communication_hint=hint,
                    timeout_seconds=timeout,
                )  # fmt: skip
            # CollectiveReduceScatterV2 is NCCL-only (on the CPU it fails and aborts every later
            # collective): all-to-all of the world chunks, then this rank sums the chunks it
            # received. That is the pairwise-exchange reduce-scatter algorithm (MPI has it too),
            # with the bytes on the wire of a ring reduce-scatter, so its time is a
            # reduce-scatter's and it is not listed in ``emulated_collectives``.
            chunks = tf.reshape(t, (world, -1))
            received = collective_ops.all_to_all_v2(
                chunks, world, group, launcher._next_instance_key(), communication_hint=hint,
                timeout=timeout, ordering_token=launcher._get_ordering_token(),
            )  # fmt: skip
            return tf.reduce_sum(received, axis=0)

        impl: dict[str, Callable[..., Any]] = {
            "allreduce": replica(lambda ctx, v: ctx.all_reduce(sum_, v)),
            "allgather": replica(lambda ctx, v: ctx.all_gather(v, axis=0)),
            "max": reduce_max,
            "broadcast": broadcast,
            "reduce_scatter": reduce_scatter,
        }
        fn = tf.function(impl[name], autograph=False)
        self._collectives[name] = fn
        return fn

    def _require_dist(self) -> None:
        if self._strategy is None:
            raise AdapterError("tensorflow: distributed word used before dist_init")

    def barrier(self) -> None:
        # a collective every rank must enter before any rank leaves it
        self.agree_max(0)

    def agree_max(self, value: int) -> int:
        self._require_dist()
        with self.tf.device(self.device_name):
            t = self.tf.constant([float(value)], self.tf.float64)  # exact below 2**53
        return int(self._collective("max")(t).numpy()[0])

    def allreduce(self, t: Tensor) -> Tensor:
        """The sum across ranks, as a new tensor (TensorFlow tensors are immutable)."""
        self._require_dist()
        return self._collective("allreduce")(t)

    def allgather(self, t: Tensor) -> Tensor:
        self._require_dist()
        return self._collective("allgather")(t)

    def broadcast(self, t: Tensor, root: int = 0) -> Tensor:
        self._require_dist()
        return self._collective("broadcast")(t, int(root))

    def reduce_scatter(self, t: Tensor) -> Tensor:
        """This rank's chunk of the sum across ranks (NCCL's reduce-scatter on GPUs; on CPUs an
        all-to-all plus a local sum, TensorFlow having no CPU reduce-scatter)."""
        self._require_dist()
        return self._collective("reduce_scatter")(t)

    def data_parallel(self, net: Any) -> Any:
        self._require_dist()
        net.distribute(self._strategy, self._world)
        return net

    def train_step_no_sync(self, net: Any, x: Tensor, y: Tensor) -> Tensor:
        return net.train_step_no_sync(x, y)

    # -- strategies (suite/adapters/tensorflow/strategies.py) ----------------------------------
    def strategy_init(
        self, strategy: str, options: Mapping[str, Any], backend: str, rendezvous: str = ""
    ) -> str:
        if strategy != "ps-async":
            return self.dist_init(backend)
        from suite.adapters.tensorflow.strategies import ParameterServerCluster

        self._rank = int(os.environ["RANK"])
        self._world = int(os.environ["WORLD_SIZE"])
        self._ps = ParameterServerCluster(self.tf, rendezvous, self._rank, self._world)
        return str(self._ps.start())

    def strategy_shutdown(self, clean: bool = True) -> None:
        if self._ps is None:
            self.dist_shutdown(clean)
            return
        self._ps.stop(clean)
        self._ps = None

    def strategy_coordination(self) -> Coordination:
        # under ParameterServerStrategy, rank 0's coordinator drives every worker
        return self._ps if self._ps is not None else Coordination()

    def apply_strategy(
        self, net: Any, strategy: str, options: Mapping[str, Any], world: int
    ) -> Any:
        if strategy == "ps-async":
            net.parameter_server(self._ps.strategy, self._ps.coordinator, world)
            return net
        return super().apply_strategy(net, strategy, options, world)
