"""Apache MXNet 1.9.1 adapter (CPU; the GPU branch is written but untested here).

MXNet 1.9.1 (May 2022) is the last release: Apache retired the project in 2023. It needs
NumPy < 1.24, so it lives in an environment of its own (containers/mxnet/requirements.txt).
``mxnet`` is imported in ``setup``, never at module import.

* Operators: ``mx.nd`` with MXNet's own kernels (oneDNN on the CPU); MXNet's engine is
  asynchronous, so ``synchronize`` is ``mx.nd.waitall()`` and ``time`` waits for it before each
  clock read. Gradients: ``mx.autograd``.
* Networks: the ONNX graph through the shared importer, as a hybridized Gluon ``SymbolBlock``
  per input shape with the same initializer values, trained with ``autograd`` +
  ``gluon.Trainer`` (suite/adapters/mxnet/network.py, kernels in mxnet_kernels.py).
* Distributed: the parameter-server kvstore ``dist_sync``. MXNet's bundled launcher
  (tools/launch.py) does not run on Python 3.11, so rank 0's ``dist_init`` starts the
  scheduler and one server as child processes (``DMLC_ROLE=scheduler/server``, dying with
  it) and every rank joins as a worker; ``dist_shutdown`` stops them.

Declared unsupported (skipped with the reason, never failed): tf32 (an NVIDIA GPU mode), bf16
(no bfloat16 NDArray in MXNet 1.9.1), fp16 on the CPU (MXNet's CPU dot and convolution
gradient have no float16 kernel), network-level mixed precision, the ``broadcast`` collective
(a ``dist_sync`` server only answers once every worker pushed), ONNX attributes the kernels
do not map, and Einsum equations with an ellipsis, a diagonal or more than two operands (the
legacy operators have no einsum: the kernel is transposes and ``batch_dot``).
"""

from __future__ import annotations

import gc
import math
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from importlib import metadata
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
from suite.adapters.mxnet import optimizers as mx_optimizers
from suite.adapters.optimizer_words import DocumentedDifference
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
    "bf16": "MXNet 1.9.1 has no bfloat16 NDArray (bfloat16 exists only inside its oneDNN AMP "
    "graph pass), so bf16 operators cannot be given bf16 inputs",
}
FP16_ON_CPU = (
    "MXNet 1.9.1 has no float16 CPU kernels for dot/batch_dot ('dot only supports "
    "float32/float64 for CPU') nor for the convolution gradient ('FP16 gemm on cpu not "
    "implemented'): fp16 runs on GPUs only"
)
BROADCAST = (
    "the kvstore dist_sync has no broadcast from a chosen rank: a server answers a key only "
    "after every worker pushed it, and KVStore.broadcast (init + pull) sends from ps-lite's "
    "worker 0 once per key; a broadcast made of a sum with zeros would measure an allreduce"
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


#: the scheduler's and server's program (argv[1]: the pid of the rank that started it)
_ROLE_MAIN = (
    "import os, sys; from suite.launchers.base import die_with_parent; die_with_parent(); "
    "os.getppid() == int(sys.argv[1]) or sys.exit(1); import mxnet"
)


MX_NO_FLOAT_COMPRESSION = (
    "the kvstore's gradient compression types are '2bit' and '1bit'; pushing fp16 or bf16 "
    "arrays means training in that precision (no fp16 CPU kernels, no bfloat16 NDArray in "
    "MXNet 1.9.1), not compressing fp32 gradients"
)


class _KVHolder:
    """The kvstore, shared with data-parallel networks (so ``dist_shutdown`` can drop the one
    reference that keeps it alive: freeing it is what stops ps-lite)."""

    kv: Any = None


class MXNetAdapter(Adapter):
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
    strategies: ClassVar[dict[str, str]] = {
        "allreduce": "kvstore dist_sync without an optimizer on the server: every gradient "
        "pushed, the server sums the workers' pushes, the sum pulled back and a local "
        "Trainer step (MXNet has no collective allreduce on CPUs: the server does the sum)",
        "ps-sync": "kvstore dist_sync with the optimizer on the server (set_optimizer: MXNet's "
        "SGD with momentum): gradients pushed, summed over the workers, one update per "
        "round, weights pulled",
        "ps-async": "kvstore dist_async with the optimizer on the server: each worker's push "
        "applied as it arrives, weights pulled without waiting for the other workers",
        "2bit": "kvstore dist_sync with set_gradient_compression({'type': '2bit', "
        "'threshold': t}): pushes quantised on the worker with the residual kept (error "
        "feedback), the server sums, the pull uncompressed; a local Trainer step",
    }
    #: ps-lite sends through ZeroMQ, with send(2)/sendmsg(2): /proc/self/io's wchar does not
    #: count them, so the write counter says nothing about the kvstore's traffic
    write_counter_blind: ClassVar[str] = (
        "ps-lite sends through ZeroMQ with send(2)/sendmsg(2), which /proc/self/io's wchar does "
        "not count"
    )
    unsupported_strategies: ClassVar[dict[str, str]] = {
        "1bit": "MXNet 1.9.1's kvstore compresses only to '2bit' ('1bit' is refused: "
        "'Unknown type for gradient compression')",
        "ssp": "the kvstore has dist_sync and dist_async; ps-lite as MXNet 1.9.1 uses it "
        "offers no bounded-delay (staleness) consistency",
        "fp16": MX_NO_FLOAT_COMPRESSION,
        "bf16": MX_NO_FLOAT_COMPRESSION,
        "powersgd": "MXNet has no PowerSGD (its kvstore compresses to 2 or 1 bits only)",
        "local-sgd": "MXNet has no local SGD: the kvstore exchanges on every push; averaging "
        "the parameters every k steps would be the suite's loop, not MXNet's",
        "pipeline": "MXNet 1.9.1 has no pipeline parallelism (a Gluon block runs on the "
        "contexts of one process; placing layers on devices by hand is not a pipeline "
        "schedule)",
        "adasum": "Adasum is Horovod's reduction; MXNet's 'horovod' kvstore needs Horovod "
        "built against MXNet (not in this environment)",
    }
    # every op the importer normalises (suite/onnx/ops.py); the kit checks that the
    # kernel table (suite/adapters/mxnet/kernels.py) equals it, so listing the ops imports no
    # framework
    onnx_ops: ClassVar[frozenset[str]] = CORE_OPS

    # optimizers (suite/adapters/mxnet/optimizers.py): mx.optimizer through its Updater
    optimizers: ClassVar[dict[str, str]] = mx_optimizers.OPTIMIZERS
    unsupported_optimizers: ClassVar[dict[str, str]] = mx_optimizers.UNSUPPORTED_OPTIMIZERS
    documented_differences: ClassVar[dict[str, DocumentedDifference]] = (
        mx_optimizers.DOCUMENTED_DIFFERENCES
    )
    optimizer_implementations: ClassVar[dict[str, str]] = mx_optimizers.IMPLEMENTATIONS
    unsupported_implementations: ClassVar[dict[str, dict[str, str]]] = (
        mx_optimizers.UNSUPPORTED_IMPLEMENTATIONS
    )
    optimizer_hyperparameters: ClassVar[dict[str, frozenset[str]]] = mx_optimizers.HYPERPARAMETERS
    optimizer_dtypes: ClassVar[dict[str, str]] = mx_optimizers.DTYPES
    master_weights: ClassVar[dict[str, str]] = mx_optimizers.MASTER_WEIGHTS

    @classmethod
    def optimizer_declined(
        cls, optimizer: str, hyper: Mapping[str, Any], implementation: str, dtype: str
    ) -> str:
        return super().optimizer_declined(
            optimizer, hyper, implementation, dtype
        ) or mx_optimizers.declined(optimizer, hyper)

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

    # -- optimizer words (suite/adapters/mxnet/optimizers.py) ----------------------------------
    def optimizer_build(self, spec: Any, params: Mapping[str, np.ndarray]) -> Any:
        return mx_optimizers.MXNetOptimizer(self.mx, self.ctx, spec, params)

    def optimizer_set_gradients(self, handle: Any, grads: Mapping[str, np.ndarray]) -> None:
        handle.set_gradients(grads)

    def optimizer_set_lr(self, handle: Any, lr: float) -> None:
        handle.set_lr(lr)

    def optimizer_step(self, handle: Any) -> Any:
        handle.step()
        return None

    def optimizer_parameters(self, handle: Any, master: bool = False) -> dict[str, np.ndarray]:
        params: dict[str, np.ndarray] = handle.parameters(master)
        return params

    def optimizer_state_bytes(self, handle: Any) -> int:
        return int(handle.state_bytes())

    # -- distributed words -------------------------------------------------------------------
    def dist_init(self, backend: str) -> str:
        """Join the kvstore ``dist_sync`` as a worker; rank 0 first starts the scheduler and
        one server (child processes that die with it). The scheduler listens on MASTER_ADDR
        at the first of DLSUITE_RANK_PORTS (else MASTER_PORT)."""
        return self._join(backend, "dist_sync", None)

    def _join(self, backend: str, kv_type: str, compression: dict[str, Any] | None) -> str:
        """Join the kvstore ``kv_type`` (dist_sync or dist_async), with ``compression``
        (set_gradient_compression's argument) set before any key exists."""
        if backend not in ("auto", "dist_sync"):
            raise UnsupportedError(
                f"mxnet: no {backend!r} communication; the kvstore dist_sync (parameter "
                "server over ps-lite) is used: --dist-backend auto"
            )
        if not self._feature("DIST_KVSTORE"):
            raise UnsupportedError("mxnet: this MXNet build has no distributed kvstore")
        from suite.launchers.base import RANK_PORTS

        self._rank = int(os.environ["RANK"])
        self._world = int(os.environ["WORLD_SIZE"])
        ports = [p.strip() for p in os.environ.get(RANK_PORTS, "").split(",") if p.strip()]
        port = ports[0] if ports else os.environ.get("MASTER_PORT", "")
        if not port.isdigit():
            raise AdapterError(
                f"mxnet: the kvstore scheduler needs a port: set {RANK_PORTS} or MASTER_PORT"
            )
        cluster = {
            "DMLC_PS_ROOT_URI": os.environ.get("MASTER_ADDR", "127.0.0.1"),
            "DMLC_PS_ROOT_PORT": port,
            "DMLC_NUM_WORKER": str(self._world),
            "DMLC_NUM_SERVER": "1",
        }
        if self._rank == 0:
            self._start_roles(cluster)
        os.environ.update(cluster)
        os.environ["DMLC_ROLE"] = "worker"
        kv = self.mx.kv.create(kv_type)
        if kv.num_workers != self._world:
            raise AdapterError(f"mxnet: kvstore has {kv.num_workers} workers for {self._world}")
        if compression is not None:
            kv.set_gradient_compression(compression)
        self._holder.kv = kv
        self._next_key, self._keys, self._server_lrs = 0, {}, {}
        self._kv_type, self._compression = kv_type, compression
        return f"kvstore/{kv_type}" + (f"+{compression['type']}" if compression else "")

    def _start_roles(self, cluster: dict[str, str]) -> None:
        """Scheduler and server: ``import mxnet`` with DMLC_ROLE set runs the role and exits.
        Each first asks the kernel to kill it when this rank dies (``die_with_parent``), and
        exits at once if this rank is already gone."""
        for role in ("scheduler", "server"):
            env = {**os.environ, **cluster, "DMLC_ROLE": role, "OMP_NUM_THREADS": "1"}
            self._children.append(
                subprocess.Popen(
                    [sys.executable, "-c", _ROLE_MAIN, str(os.getpid())],
                    env=env,
                    stdin=subprocess.DEVNULL,
                )
            )

    def dist_shutdown(self, clean: bool = True) -> None:
        kv = self._holder.kv
        if kv is not None:
            if clean:
                self.mx.nd.waitall()
                kv._barrier()
            else:  # another rank may be gone: no barrier when ps-lite finalises
                import ctypes

                from mxnet.base import _LIB, check_call

                check_call(_LIB.MXKVStoreSetBarrierBeforeExit(kv.handle, ctypes.c_int(0)))
        # Freeing the kvstore finalises ps-lite; worker 0 tells the server to stop, and the
        # scheduler exits when every node has left.
        self._holder.kv = None
        self._holder = _KVHolder()  # networks built before keep the old (now empty) holder
        del kv
        gc.collect()
        for child in self._children:
            try:
                child.wait(timeout=30 if clean else 0.1)
            except subprocess.TimeoutExpired:
                child.terminate()
                try:
                    child.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
        self._children = []

    def _kv(self) -> Any:
        if self._holder.kv is None:
            raise AdapterError("mxnet: distributed word used before dist_init")
        return self._holder.kv

    def _key(self, kind: str, shape: tuple[int, ...], dtype: Any, count: int = 1) -> Any:
        """Integer kvstore keys (never strings: MXNet refuses mixed key types), ``count`` of
        them per (kind, shape, dtype), initialised once (every rank in the same order)."""
        from suite.adapters.mxnet.strategies import CONTROL_BASE

        name = (kind, shape, np.dtype(dtype).name, count)
        if name not in self._keys:
            first = CONTROL_BASE + sum(len(k) for k in self._keys.values())
            keys = list(range(first, first + count))
            zeros = [self.mx.nd.zeros(shape, ctx=self.ctx, dtype=dtype) for _ in keys]
            self._kv().init(keys, zeros)
            self._keys[name] = keys
        return self._keys[name]

    def barrier(self) -> None:
        kv = self._kv()
        self.mx.nd.waitall()  # this rank's queued work (pushes and pulls included) first
        kv._barrier()

    def agree_max(self, value: int) -> int:
        """Every rank pushes a one-hot vector holding its value (float64, exact below 2**53);
        the pulled sum holds every rank's value."""
        kv = self._kv()
        (key,) = self._key("agree_max", (self._world,), np.float64)
        slots = np.zeros(self._world)
        slots[self._rank] = float(value)
        buf = self.mx.nd.array(slots, ctx=self.ctx, dtype=np.float64)
        kv.push(key, buf)
        kv.pull(key, out=buf)
        return int(buf.asnumpy().max())

    def allreduce(self, t: Tensor) -> Tensor:
        """In place: push ``t`` (the server sums the workers' pushes), pull the sum into it."""
        kv = self._kv()
        (key,) = self._key("allreduce", tuple(t.shape), t.dtype)
        kv.push(key, t)
        kv.pull(key, out=t)
        return t

    def allgather(self, t: Tensor) -> Tensor:
        """A sum of zero-padded slots (this rank's ``t`` at its rank's rows): the kvstore only
        sums, and a dist_sync server needs a push from every worker to every key, so each rank
        pushes and pulls world times its message (the bandwidth of that sum, not of a ring
        all-gather)."""
        kv = self._kv()
        n = t.shape[0]
        shape = (self._world * n, *t.shape[1:])
        (key,) = self._key("allgather", shape, t.dtype)
        buf = self.mx.nd.zeros(shape, ctx=self.ctx, dtype=t.dtype)
        buf[self._rank * n : (self._rank + 1) * n] = t
        kv.push(key, buf)
        kv.pull(key, out=buf)
        return buf

    def broadcast(self, t: Tensor, root: int = 0) -> Tensor:
        raise UnsupportedError(BROADCAST)

    def reduce_scatter(self, t: Tensor) -> Tensor:
        """One key per chunk: every rank pushes its world chunks, the server sums each, and
        this rank pulls only its own chunk (the parameter-server reduce-scatter)."""
        kv = self._kv()
        k = t.shape[0] // self._world
        keys = self._key("reduce_scatter", (k, *t.shape[1:]), t.dtype, count=self._world)
        kv.push(keys, [t[i * k : (i + 1) * k] for i in range(self._world)])
        out = self.mx.nd.zeros((k, *t.shape[1:]), ctx=self.ctx, dtype=t.dtype)
        kv.pull(keys[self._rank], out=out)
        return out

    def data_parallel(self, net: Any) -> Any:
        """Gradients summed across workers by the kvstore (push + pull per step, keys of this
        network's own), then the local Trainer step rescaled by 1/world (the mean)."""
        from suite.adapters.mxnet.network import DataParallel

        kv = self._kv()
        grads = [p.grad(net.ctx) for p in net.trainable]
        keys = list(range(self._next_key, self._next_key + len(grads)))
        self._next_key += len(grads)
        kv.init(keys, [self.mx.nd.zeros(g.shape, ctx=self.ctx, dtype=g.dtype) for g in grads])
        net.parallel = DataParallel(self._holder, keys, self._world)
        return net

    def train_step_no_sync(self, net: Any, x: Tensor, y: Tensor) -> Tensor:
        return net.train_step(x, y, sync=False)

    # -- strategies (suite/adapters/mxnet/strategies.py) ---------------------------------------
    def strategy_init(
        self, strategy: str, options: Mapping[str, Any], backend: str, rendezvous: str = ""
    ) -> str:
        if strategy == "ps-async":
            return self._join(backend, "dist_async", None)
        if strategy == "2bit":
            threshold = float(options["threshold"])
            if threshold <= 0:
                raise UnsupportedError(
                    "mxnet: 2bit compression needs a threshold above 0 ('threshold must be "
                    "greater than 0')"
                )
            return self._join(backend, "dist_sync", {"type": "2bit", "threshold": threshold})
        return self._join(backend, "dist_sync", None)

    def strategy_words_usable(self, strategy: str) -> bool:
        # gradient compression quantises every push, the control words' included (a pushed
        # 0.3 comes back as 0 at threshold 0.5); the barrier (ps-lite's) still works
        return strategy != "2bit"

    def apply_strategy(
        self, net: Any, strategy: str, options: Mapping[str, Any], world: int
    ) -> Any:
        if strategy in ("allreduce", "2bit"):
            return self.data_parallel(net)
        if strategy not in ("ps-sync", "ps-async"):
            raise NotImplementedError(f"mxnet has no mapping of {strategy!r}")
        return self._server_update(net)

    def _server_update(self, net: Any) -> Any:
        """The network's weights on the server: keys initialised with them (worker 0's values;
        every rank built the same), pulled back, and the server's optimizer (re)registered
        with this network's learning rate (by rank 0, between barriers, so no push of the new
        keys reaches the server before it)."""
        from suite.adapters.mxnet.strategies import ServerSGD, ServerUpdate

        mx, kv = self.mx, self._kv()
        weights = [p.data(net.ctx) for p in net.trainable]
        keys = list(range(self._next_key, self._next_key + len(weights)))
        self._next_key += len(weights)
        kv.init(keys, weights)
        kv.pull(keys, out=weights)
        trainer = net.trainer._optimizer
        self._server_lrs.update({k: float(trainer.learning_rate) for k in keys})
        self.barrier()
        if self._rank == 0:
            optimizer = ServerSGD(
                learning_rate=1.0,
                momentum=float(trainer.momentum),
                wd=0.0,
                rescale_grad=1.0 / self._world,
            )
            optimizer.set_lr_mult(dict(self._server_lrs))
            kv.set_optimizer(optimizer)
        self.barrier()
        mx.nd.waitall()
        net.parallel = ServerUpdate(self._holder, keys, self._world)
        return net

    def strategy_bytes(
        self,
        strategy: str,
        options: Mapping[str, Any],
        shapes: list[tuple[int, ...]],
        world: int,
        *,
        cut_elements: int = 0,
        stage: int = 0,
    ) -> dict[str, Any]:
        if strategy == "allreduce":
            # no ring: one push of every gradient to the server (the sum comes back in a pull)
            full = float(sum(math.prod(s) for s in shapes) * 4)
            return {
                "bytes": full,
                "uncompressed": full,
                "model": "one push of every gradient to the server (the server sums; the pull "
                "is received)",
            }
        return super().strategy_bytes(
            strategy, options, shapes, world, cut_elements=cut_elements, stage=stage
        )
