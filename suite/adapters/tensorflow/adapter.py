"""TensorFlow 2 / Keras 3 adapter (CPU; the GPU branch is written but untested here).

``tensorflow`` and ``keras`` are imported in ``setup``, never at module import. This module holds
the device, tensors and the network words; the other word groups are modules of this folder,
mixed into :class:`TensorFlowAdapter`: operators.py (the operator words: one op eager, several
as a ``tf.function``; every one XLA-compiled with ``--xla``: ``Adapter.xla``; and ``vjp``),
distributed.py
(``tf.distribute.MultiWorkerMirroredStrategy`` and its collectives, the strategies), optimizers.py
(Keras optimizers behind the optimizer handle), data.py (tf.data), network.py and kernels.py
(the ONNX graph through the shared importer as a Keras model).

Nothing in ``setup`` or ``versions`` runs a TensorFlow op: MultiWorkerMirroredStrategy must
configure the collective runtime before TensorFlow's eager context starts (``dist_init``
comes after both).
"""

from __future__ import annotations

import os
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
from suite.adapters.tensorflow.distributed import TensorFlowDistributed
from suite.adapters.tensorflow.operators import EAGER_WORDS, TensorFlowOperators, _onednn_enabled
from suite.adapters.tensorflow.optimizers import KerasOptimizerWords
from suite.errors import AdapterError
from suite.onnx.ops import CORE_OPS

_TF_DTYPES = ("fp64", "fp32", "bf16", "fp16")


class TensorFlowAdapter(KerasOptimizerWords, TensorFlowDistributed, TensorFlowOperators, Adapter):
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
    loaders: ClassVar[dict[str, str]] = {
        "tfrecord": "tf.data: interleave(TFRecordDataset) over the shards (Dataset.shard per "
        "rank), shuffle, map(parse, decode_and_crop_jpeg (decode_image for PNG, WebP ...), "
        "resize, flip; num_parallel_calls), "
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
                "eager_operators": self._eager_words(),
                "onednn": self._onednn(),
                "onednn_bf16": self._onednn_has_bf16(),
            }
        )
        self._build_ops()
        return info

    def _eager_words(self) -> list[str]:
        """The operator words that run eagerly in this task (none with ``--xla``)."""
        return [] if self.xla else sorted(EAGER_WORDS)

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
                "eager_operators": self._eager_words(),
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

    # -- network words -----------------------------------------------------------------------
    def network_options_not_applied(self, options: NetworkOptions) -> dict[str, str]:
        if options.channels_last or self.on_gpu:
            return {}
        return {
            "channels_last": "tensorflow: channels_last = false asked, but TensorFlow's CPU "
            "kernels have no NCHW convolution gradients: the network ran channels-last"
        }

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
