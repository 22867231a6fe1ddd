"""Apache MXNet 1.9.1 adapter (CPU; the GPU branch is written but untested here).

MXNet 1.9.1 (May 2022) is the last release: Apache retired the project in 2023. It needs
NumPy < 1.24, so it lives in an environment of its own (containers/mxnet/requirements.txt).
``mxnet`` is imported in ``setup``, never at module import.

This module holds the device, tensors and the network words; the other word groups are modules
of this folder, mixed into :class:`MXNetAdapter`:

* operators.py: ``mx.nd`` with MXNet's own kernels (oneDNN on the CPU); MXNet's engine is
  asynchronous, so ``synchronize`` is ``mx.nd.waitall()`` and ``time`` waits for it before each
  clock read. Gradients: ``mx.autograd``.
* network.py and kernels.py: the ONNX graph through the shared importer, as a hybridized Gluon
  ``SymbolBlock`` per input shape with the same initializer values, trained with ``autograd`` +
  ``gluon.Trainer``.
* distributed.py: the parameter-server kvstore ``dist_sync``, its scheduler and server started
  by rank 0 (MXNet's bundled launcher does not run on Python 3.11), and the strategies.
* optimizers.py (``mx.optimizer`` through its Updater, behind the optimizer handle) and data.py
  (ImageRecordIter, Gluon's DataLoader).

Declared unsupported (skipped with the reason, never failed): tf32 (an NVIDIA GPU mode), bf16
(no bfloat16 NDArray in MXNet 1.9.1), fp16 on the CPU (MXNet's CPU dot and convolution
gradient have no float16 kernel), network-level mixed precision, the ``broadcast`` collective
(a ``dist_sync`` server only answers once every worker pushed), ONNX attributes the kernels
do not map, and Einsum equations with an ellipsis, a diagonal or more than two operands (the
legacy operators have no einsum: the kernel is transposes and ``batch_dot``).
"""

from __future__ import annotations

import os
import subprocess
from importlib import metadata
from typing import Any, ClassVar

import numpy as np

from suite.adapters.base import (
    ALL_WORDS,
    DeviceInfo,
    NetworkOptions,
    Tensor,
    host_cpu_info,
)
from suite.adapters.mxnet.distributed import BROADCAST, MXNetDistributed, _KVHolder
from suite.adapters.mxnet.operators import MXNetOperators
from suite.adapters.mxnet.optimizers import MXNetOptimizerWords
from suite.errors import AdapterError, UnsupportedError
from suite.onnx.ops import CORE_OPS

_NP_DTYPES: dict[str, type[np.floating[Any]]] = {
    "fp64": np.float64,
    "fp32": np.float32,
    "fp16": np.float16,
}
UNSUPPORTED_DTYPES: dict[str, str] = {
    "tf32": "tf32 is a tensor-core mode of NVIDIA GPUs (Ampere or newer); this task runs on "
    "the CPU (and MXNet 1.9.1 has no switch for it)",
    # one reason for every level: an operator's inputs and a network's weights alike
    "bf16": "MXNet 1.9.1 has no bfloat16 NDArray: bfloat16 exists only inside its oneDNN AMP "
    "graph pass (mx.contrib.amp with target_dtype='bfloat16'), which this adapter does not "
    "apply, so neither an operator's inputs nor a network's weights can be bf16",
}
FP16_ON_CPU = (
    "MXNet 1.9.1 has no float16 CPU kernels for dot/batch_dot ('dot only supports "
    "float32/float64 for CPU') nor for the convolution gradient ('FP16 gemm on cpu not "
    "implemented'): fp16 runs on GPUs only"
)


def _cuda_distribution() -> tuple[str, str] | None:
    """(name, version) of an installed CUDA build of MXNet (mxnet-cu112, ...), if any."""
    for dist in metadata.distributions():
        name = str(dist.metadata["Name"] or "").lower()
        if name.startswith("mxnet-cu"):
            return name, str(dist.version)
    return None


def _cuda_from_distribution() -> str | None:
    """The CUDA version of a CUDA build, from its distribution name (mxnet-cu112 -> 11.2)."""
    found = _cuda_distribution()
    digits = found[0][8:11] if found else ""
    return f"{digits[:-1]}.{digits[-1]}" if digits.isdigit() else None


class MXNetAdapter(MXNetOptimizerWords, MXNetDistributed, MXNetOperators):
    name: ClassVar[str] = "mxnet"
    module: ClassVar[str] = "mxnet"
    distribution: ClassVar[str] = "mxnet"
    adapter_version: ClassVar[str] = "1"
    words: ClassVar[frozenset[str]] = ALL_WORDS
    # the allgather word serves data_parallel's identical-weights check; timed, it would be
    # the bandwidth of a world-times-larger sum, so the allgather benchmark is skipped
    emulated_collectives: ClassVar[dict[str, str]] = {
        "allgather": "mxnet: the kvstore only sums; allgather is emulated as a sum of "
        "zero-padded buffers (world x the message), so its time would not be an all-gather's"
    }
    unsupported_collectives: ClassVar[dict[str, str]] = {"broadcast": BROADCAST}
    network_options_ignored: ClassVar[dict[str, str]] = {
        "channels_last": "mxnet: convolutions take NCHW (oneDNN picks its own layout inside); "
        "the network ran NCHW",
        "compile": "mxnet: the network is always a hybridized SymbolBlock; compile changes nothing",
    }
    # every op the importer normalises (suite/onnx/ops.py); the kit checks that the
    # kernel table (suite/adapters/mxnet/kernels.py) equals it, so listing the ops imports no
    # framework
    onnx_ops: ClassVar[frozenset[str]] = CORE_OPS

    loaders: ClassVar[dict[str, str]] = {
        "recordio": "mx.io.ImageRecordIter over the .rec/.idx (C++ decode and augmentation "
        "threads, part_index/num_parts per rank)",
        "folder": "gluon.data.DataLoader (worker processes) over the JPEG files, "
        "gluon.data.vision.transforms",
    }
    unsupported_loaders: ClassVar[dict[str, str]] = {
        "tfrecord": "MXNet has no TFRecord reader (TensorFlow's format: run --framework tensorflow)",
        "webdataset": "MXNet has no WebDataset reader (a PyTorch-ecosystem format)",
    }

    def data_loader(self, spec: Any) -> Any:
        from suite.adapters.mxnet import data as mxdata

        if spec.format == "recordio":
            return mxdata.RecordIterLoader(spec)
        return mxdata.GluonLoader(spec)

    #: neither loader above decodes without cropping
    unsupported_transforms: ClassVar[dict[str, str]] = {
        "decode": "ImageRecordIter always crops to data_shape (it has no decode-only mode), and "
        "the Gluon pipeline is measured with the train and eval transforms only",
    }

    def __init__(self) -> None:
        self.mx: Any = None
        self.ctx: Any = None
        self.on_gpu = False
        self._masks: dict[tuple[int, str], Any] = {}
        self._bn_stats: dict[tuple[int, str], tuple[Any, Any]] = {}
        # distributed state
        self._holder = _KVHolder()
        self._children: list[subprocess.Popen[bytes]] = []
        self._rank = 0
        self._world = 1
        self._next_key = 0
        self._keys: dict[tuple[Any, ...], Any] = {}
        self._kv_type = "dist_sync"
        self._compression: dict[str, Any] | None = None
        self._server_lrs: dict[int, float] = {}

    @classmethod
    def installed_version(cls) -> str | None:
        # mxnet on CPUs; the CUDA builds are distributions of their own (mxnet-cu112, ...)
        try:
            return metadata.version(cls.distribution)
        except metadata.PackageNotFoundError:
            pass
        found = _cuda_distribution()
        return found[1] if found else None

    # -- device ------------------------------------------------------------------------------
    def setup(self, device: str) -> DeviceInfo:
        try:
            import mxnet as mx
        except ImportError as exc:
            raise AdapterError(
                f"mxnet: cannot import mxnet ({exc}); MXNet 1.9.1 needs its own environment "
                "with NumPy < 1.24 (containers/mxnet/requirements.txt)"
            ) from exc
        self.mx = mx
        gpus = int(mx.context.num_gpus()) if self._feature("CUDA") else 0
        if device == "auto":
            device = "cuda" if gpus else "cpu"
        if device == "cuda":
            if not gpus:
                raise AdapterError(
                    f"mxnet: --device cuda but MXNet sees no GPU (mxnet {mx.__version__}; the "
                    "'mxnet' wheel is CPU-only, CUDA builds are mxnet-cuXXX)"
                )
            return self._setup_gpu(gpus)
        if device != "cpu":
            raise AdapterError(f"mxnet: unknown device {device!r}; use cpu, cuda or auto")
        self.ctx, self.on_gpu = mx.cpu(), False
        info = host_cpu_info()
        info.extra.update(
            {
                "onednn": self._feature("MKLDNN"),
                "blas": next(
                    (
                        b
                        for b in ("BLAS_OPEN", "BLAS_MKL", "BLAS_ATLAS", "BLAS_APPLE")
                        if self._feature(b)
                    ),
                    None,
                ),
                "mxnet_engine": os.environ.get("MXNET_ENGINE_TYPE", "ThreadedEnginePerDevice"),
            }
        )
        return info

    def _setup_gpu(self, gpus: int) -> DeviceInfo:
        from suite.devices import declared_gpu_peak

        mx = self.mx
        index = int(os.environ.get("LOCAL_RANK", "0")) % gpus
        self.ctx, self.on_gpu = mx.gpu(index), True
        name = "NVIDIA GPU"
        try:
            import pynvml  # optional: nvidia-ml-py

            pynvml.nvmlInit()
            raw = pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(index))
            name = raw.decode() if isinstance(raw, bytes) else str(raw)
        except Exception:  # noqa: BLE001 - NVML is optional; a generic name then
            pass
        peaks, source = declared_gpu_peak(name)
        return DeviceInfo(kind="gpu", name=name, count=gpus, peak_tflops=peaks, peak_source=source)

    def _feature(self, name: str) -> bool:
        features = self.mx.runtime.Features()
        return bool(name in features and features.is_enabled(name))

    def versions(self) -> dict[str, str | None]:
        mx = self.mx
        cuda = _cuda_from_distribution() if self._feature("CUDA") else None
        enabled = "enabled (MXNet does not report its version)"
        return {
            "mxnet": mx.__version__,
            "numpy": np.__version__,
            "cuda": cuda,
            "cudnn": enabled if self._feature("CUDNN") else None,
            "nccl": enabled if self._feature("NCCL") else None,
            "onednn": "enabled" if self._feature("MKLDNN") else "disabled",
            "dist_kvstore": "enabled" if self._feature("DIST_KVSTORE") else "disabled",
            "status": "retired (Apache MXNet was retired in 2023; 1.9.1 is its last release)",
        }

    def end_task(self) -> dict[str, list[str]]:
        if self.mx is None:
            return {"reset": [], "warm": []}
        self.mx.nd.waitall()  # nothing of the task is still queued in the engine
        return {
            "reset": ["MXNet's engine queue (nd.waitall)"],
            "warm": ["MXNet's storage pool (freed arrays' memory is kept for reuse)"],
        }

    def supports(self, dtype: str) -> tuple[bool, str]:
        if dtype in UNSUPPORTED_DTYPES:
            return False, UNSUPPORTED_DTYPES[dtype]
        if dtype == "fp16" and not self.on_gpu:
            return False, FP16_ON_CPU
        if dtype not in _NP_DTYPES:
            return False, f"mxnet adapter has no dtype {dtype!r}"
        return True, ""

    def synchronize(self) -> None:
        if self.mx is not None:
            self.mx.nd.waitall()  # every pending operation of MXNet's engine, on every device

    # ``time`` is the base class's: ``synchronize`` (waitall) before the first call and after
    # the last, so the clock includes all the work the calls queued.

    # -- tensors -----------------------------------------------------------------------------
    def _np_dtype(self, dtype: str) -> type[np.floating[Any]]:
        ok, why = self.supports(dtype)
        if not ok:
            raise UnsupportedError(why)
        return _NP_DTYPES[dtype]

    def from_numpy(self, x: np.ndarray, dtype: str, *, requires_grad: bool = False) -> Tensor:
        """A new NDArray of ``dtype`` (``vjp`` attaches gradients itself)."""
        np_dtype = self._np_dtype(dtype)
        src = np.ascontiguousarray(x, dtype=np_dtype)  # exact: already quantised to dtype
        return self.mx.nd.array(src, ctx=self.ctx, dtype=np_dtype)

    def to_numpy(self, t: Tensor) -> np.ndarray:
        return np.asarray(t.asnumpy(), dtype=np.float64)

    def copy_from_numpy(self, t: Tensor, x: np.ndarray) -> None:
        t[:] = np.asarray(x, dtype=t.dtype)

    # -- network words -----------------------------------------------------------------------
    def build_network(self, model: Any, dtype: str, options: NetworkOptions) -> Any:
        """fp32 only: ``channels_last`` does not apply (MXNet convolutions take NCHW; oneDNN
        picks its own layout) and the block is always hybridized (``compile`` changes
        nothing)."""
        if dtype != "fp32":
            ok, why = self.supports(dtype)
            raise UnsupportedError(
                why
                if not ok
                else (
                    f"mxnet: network-level {dtype} (mixed precision) is not mapped: MXNet's AMP "
                    "(mx.contrib.amp) is not wired into this adapter"
                )
            )
        from suite.adapters.mxnet.network import MXNetNetwork

        return MXNetNetwork(model, self.ctx, options)

    def forward(self, net: Any, x: Tensor) -> Tensor:
        return net.forward(x)

    def train_step(self, net: Any, x: Tensor, y: Tensor) -> Tensor:
        return net.train_step(x, y)

    def network_parameters(self, net: Any) -> dict[str, np.ndarray]:
        params: dict[str, np.ndarray] = net.parameters()
        return params

    def labels_from_numpy(self, y: np.ndarray) -> Tensor:
        return self.mx.nd.array(np.asarray(y, dtype=np.int64), ctx=self.ctx, dtype=np.int64)
