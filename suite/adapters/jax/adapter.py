"""JAX adapter (CPU here; the GPU branch is written for the GPU machines but untested here).

``jax`` and ``optax`` are imported in ``setup``, never at module import. This module holds the
device, tensors, synchronisation and the network words; the other word groups are modules of this
folder, mixed into :class:`JaxAdapter`: operators.py (every operator word a ``jax.jit`` function:
JAX always compiles with XLA, the device record says so; ``vjp`` is ``jax.vjp`` with the
backward pass jitted), distributed.py (``jax.distributed`` with ``psum``/``all_gather``/
``psum_scatter`` under ``shard_map`` over the global mesh of one device per process: gloo
collectives between CPU processes, NCCL on GPUs), optimizers.py (optax behind the optimizer
handle), data.py (Grain), network.py and kernels.py (the ONNX graph as a pure function over a
parameter pytree).

Synchronisation: JAX dispatches asynchronously and has no device-wide barrier, so the adapter
keeps the last few arrays its words produced and waits for them (``block_until_ready``) before
a clock is read (see :meth:`JaxAdapter.synchronize`), besides the outputs ``fn`` returns.

Ordering constraint: ``jax.distributed.initialize`` must run before JAX starts a backend, and
describing a GPU starts one, so a process launched with WORLD_SIZE > 1 joins the distributed
runtime in ``setup`` already (``dist_init`` then checks the requested backend).

Declared unsupported (``skipped`` records with the reason):

* tf32 on the CPU (a tensor-core mode); fp64 unless ``JAX_ENABLE_X64=1`` (x64 changes every
  default dtype of the process, so the adapter does not switch it on itself);
* ``--dist-backend mpi`` (JAX's MPI collectives need MPItrampoline) and ``nccl`` on the CPU;
* ONNX ops outside ``onnx_ops``, and attribute values its kernels (jax_kernels.py) do not
  map.
"""

from __future__ import annotations

import os
from collections import deque
from typing import Any, ClassVar

import numpy as np

from suite.adapters.base import (
    ALL_WORDS,
    DeviceInfo,
    NetworkOptions,
    Tensor,
    host_cpu_info,
)
from suite.adapters.jax.distributed import JaxDistributed
from suite.adapters.jax.operators import JaxOperators
from suite.adapters.jax.optimizers import OptaxOptimizerWords
from suite.adapters.known_bugs import GLOO_REDUCE_SCATTER
from suite.devices import declared_gpu_peak
from suite.errors import AdapterError, UnsupportedError
from suite.onnx.ops import CORE_OPS
from suite.telemetry.nvml import driver_version

#: how many recent word outputs are kept for the next synchronisation; an older one is waited
#: for (normally long finished) when it is dropped, so no dispatched work escapes a sync
PENDING_DEPTH = 8


class JaxAdapter(OptaxOptimizerWords, JaxDistributed, JaxOperators):
    """JAX on one device per process (CPU or one CUDA GPU). Tensors are ``jax.Array``s
    committed to that device."""

    name: ClassVar[str] = "jax"
    module: ClassVar[str] = "jax"
    distribution: ClassVar[str] = "jax"
    adapter_version: ClassVar[str] = "1"
    default_launcher: ClassVar[str] = "spawn"
    # gloo between CPU processes, NCCL between GPUs (dist_init refuses the other one)
    dist_backends: ClassVar[frozenset[str] | None] = frozenset({"gloo", "nccl"})
    words: ClassVar[frozenset[str]] = ALL_WORDS
    # the broadcast word works (a masked psum, as JAX's own broadcast_one_to_all); timed, it
    # would be an allreduce's cost, so the broadcast benchmark is skipped
    emulated_collectives: ClassVar[dict[str, str]] = {
        "broadcast": "jax has no broadcast primitive; it is a masked psum (an allreduce's "
        "bytes, as jax's own broadcast_one_to_all), so its time would not be a broadcast's"
    }
    # on CPUs, XLA's reduce-scatter is gloo's (on GPUs NCCL's)
    known_bugs: ClassVar[dict[str, str]] = {"reduce_scatter": GLOO_REDUCE_SCATTER}
    network_options_ignored: ClassVar[dict[str, str]] = {
        "channels_last": "jax: the network is NCHW as the ONNX graph; XLA chooses its own layouts",
        "compile": "jax: XLA always compiles the network (jax.jit); compile changes nothing",
    }
    xla_reason: ClassVar[str] = (
        "jax always compiles its operators with XLA (its records say compiler: XLA), so --xla "
        "would measure the run without it again; run jax without --xla"
    )
    # every op the importer normalises (suite/onnx/ops.py); the kit checks that the
    # kernel table equals it, so listing the ops imports no JAX
    onnx_ops: ClassVar[frozenset[str]] = CORE_OPS

    loaders: ClassVar[dict[str, str]] = {
        "folder": "grain.python.DataLoader over the JPEG files (worker processes, IndexSampler "
        "with ShardOptions, NumPy/Pillow transforms)",
    }
    unsupported_loaders: ClassVar[dict[str, str]] = {
        "tfrecord": "JAX has no TFRecord reader; Grain reads ArrayRecord or any random-access "
        "source, and tf.data would make it TensorFlow's pipeline (run --framework tensorflow)",
        "webdataset": "JAX has no WebDataset reader (a PyTorch-ecosystem format)",
        "recordio": "JAX has no RecordIO reader (MXNet's format: run --framework mxnet)",
    }

    def data_loader(self, spec: Any) -> Any:
        from suite.adapters.jax.data import GrainLoader

        return GrainLoader(spec)

    def __init__(self) -> None:
        self.jax: Any = None
        self.jnp: Any = None
        self.device: Any = None
        self.on_gpu = False
        self._dtypes: dict[str, Any] = {}
        self._ops: dict[str, Any] = {}
        self._pending: deque[Any] = deque()
        self._peak_baseline: int | None = None
        # distributed
        self._world = 1
        self._rank = 0
        self._mesh: Any = None
        self._collectives: dict[tuple[str, Any], Any] = {}

    # -- device ------------------------------------------------------------------------------
    def setup(self, device: str) -> DeviceInfo:
        try:
            import jax
            import jax.numpy as jnp
        except ImportError as exc:
            raise AdapterError(
                f"jax: cannot import jax ({exc}); install the pins of "
                "containers/jax/requirements.txt (dlsuite envs create jax)"
            ) from exc
        self.jax, self.jnp = jax, jnp
        if device == "auto":
            device = "cuda" if _cuda_plugin_installed() else "cpu"
        if device not in ("cpu", "cuda"):
            raise AdapterError(f"jax: unknown device {device!r}; use cpu, cuda or auto")
        platform = "cuda" if device == "cuda" else "cpu"
        if not _backends_initialized():
            # Only this platform's backend is started (a CPU task never probes for GPUs).
            jax.config.update("jax_platforms", platform)
            self._join_if_launched(platform)
        try:
            local = jax.local_devices(backend=platform)
        except RuntimeError as exc:
            raise AdapterError(
                f"jax: --device {device} but JAX has no {platform} backend here ({exc}); "
                "the CPU wheel needs the jax[cuda12]/jax[cuda13] plugin for GPUs"
            ) from exc
        self.device = local[0]
        self.on_gpu = platform == "cuda"
        self._dtypes = {"fp32": jnp.float32, "bf16": jnp.bfloat16, "fp16": jnp.float16}
        if jax.config.jax_enable_x64:
            self._dtypes["fp64"] = jnp.float64
        self._build_ops()
        if self.on_gpu:
            return self._gpu_info(local)
        info = host_cpu_info()
        info.extra.update(
            {
                "compiler": "XLA",
                "jax_platform": "cpu",
                "xla_flags": os.environ.get("XLA_FLAGS"),
                "x64": bool(jax.config.jax_enable_x64),
            }
        )
        return info

    def _gpu_info(self, local: list[Any]) -> DeviceInfo:
        d = self.device
        name = str(getattr(d, "device_kind", "GPU"))
        peaks, source = declared_gpu_peak(name)
        extra: dict[str, Any] = {"compiler": "XLA", "jax_platform": "cuda"}
        capability = getattr(d, "compute_capability", None)
        if capability is not None:
            extra["compute_capability"] = str(capability)
        stats = _memory_stats(d)
        if stats.get("bytes_limit"):
            extra["memory_gb"] = round(stats["bytes_limit"] / 2**30, 2)
        extra["xla_python_client_preallocate"] = os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE")
        return DeviceInfo(
            kind="gpu",
            name=name,
            count=len(local),
            peak_tflops=peaks,
            peak_source=source,
            driver=driver_version(),
            extra=extra,
        )

    def versions(self) -> dict[str, str | None]:
        import jaxlib
        import optax

        out: dict[str, str | None] = {
            "jax": self.jax.__version__,
            "jaxlib": jaxlib.__version__,
            "optax": optax.__version__,
            "cuda": None,
            "cudnn": None,
            "nccl": None,
        }
        try:  # a private module (JAX 0.4-0.10): a release without it reports no versions
            from jax._src.lib import cuda_versions
        except ImportError:
            cuda_versions = None
        if cuda_versions is not None:  # a jax_cuda plugin is installed
            queries = (("cuda", "cuda_runtime_get_version", _cuda_version),
                       ("cudnn", "cudnn_get_version", _cudnn_version))  # fmt: skip
            for key, fn, fmt in queries:
                try:
                    out[key] = fmt(int(getattr(cuda_versions, fn)()))
                except Exception:  # noqa: BLE001 - a plugin without this query
                    out[key] = None
            out["nccl"] = _distribution_version("nvidia-nccl-cu13", "nvidia-nccl-cu12")
        return out

    def end_task(self) -> dict[str, list[str]]:
        if self.jax is None:
            return {"reset": [], "warm": []}
        self.jax.clear_caches()
        return {
            "reset": ["JAX's compiled functions (jax.clear_caches)"],
            "warm": ["the XLA backend and its device client"],
        }

    def supports(self, dtype: str) -> tuple[bool, str]:
        """On GPUs this also sets JAX's default matmul precision for the task (as PyTorch's
        allow_tf32): fp32 is strict fp32 ("highest"; XLA's default on GPUs rounds fp32 matmul
        inputs to tf32), tf32 is "tensorfloat32", bf16/fp16 the default. On the CPU XLA computes
        fp32 in fp32 and the default is left alone (CPU dots refuse "highest" for fp16)."""
        jax = self.jax
        if dtype == "tf32":
            if not self.on_gpu:
                return (
                    False,
                    "tf32 is a tensor-core mode of NVIDIA GPUs (Ampere or newer); this task "
                    "runs on the CPU",
                )
            major = int(str(getattr(self.device, "compute_capability", "0")).split(".")[0])
            if major < 8:
                return False, f"tf32 needs compute capability 8.0+, device has {major}.x"
            jax.config.update("jax_default_matmul_precision", "tensorfloat32")
            return True, ""
        if dtype == "fp64" and "fp64" not in self._dtypes:
            return (
                False,
                "fp64 needs JAX's x64 mode (JAX_ENABLE_X64=1), which changes every default "
                "dtype of the process; it is off",
            )
        if dtype not in self._dtypes:
            return False, f"jax adapter has no dtype {dtype!r}"
        if self.on_gpu:
            precision = "highest" if dtype in ("fp32", "fp64") else None
            jax.config.update("jax_default_matmul_precision", precision)
        return True, ""

    # -- synchronisation and timing ----------------------------------------------------------
    def _track(self, out: Any) -> Any:
        """Remember a word's output for the next synchronisation (tracers are not work)."""
        if isinstance(out, self.jax.core.Tracer):
            return out
        self._pending.append(out)
        if len(self._pending) > PENDING_DEPTH:
            self.jax.block_until_ready(self._pending.popleft())
        return out

    def memory_bandwidth(self) -> Any:
        if not self.on_gpu:
            return None
        from suite.adapters.jax.bandwidth import jax_triad

        return jax_triad()

    def synchronize(self) -> None:
        """Wait for every array the words produced since the last synchronisation."""
        while self._pending:
            self.jax.block_until_ready(self._pending.popleft())

    def wait(self, out: Any) -> None:
        """``block_until_ready`` on the outputs; :meth:`time` then synchronises on everything
        the words dispatched meanwhile."""
        jax = self.jax
        leaves = [x for x in jax.tree.leaves(out) if isinstance(x, jax.Array)]
        if leaves:
            jax.block_until_ready(leaves)

    # -- tensors -----------------------------------------------------------------------------
    def from_numpy(self, x: np.ndarray, dtype: str, *, requires_grad: bool = False) -> Tensor:
        """A new array of ``dtype`` on the adapter's device (``requires_grad`` needs no flag:
        ``vjp`` differentiates with respect to whatever primals it is given)."""
        if dtype not in self._dtypes:
            ok, why = self.supports(dtype)
            if not ok:
                raise UnsupportedError(why)
        target = self._dtypes.get(dtype, self.jnp.float32)  # tf32 is stored as fp32
        host = np.asarray(x, dtype=np.float32 if target != self.jnp.float64 else np.float64)
        # the values are already rounded to ``dtype``: the cast from fp32 is exact
        return self.jax.device_put(host, self.device).astype(target)

    def to_numpy(self, t: Tensor) -> np.ndarray:
        """A float64 host copy; a global array spread over processes gives this process's
        shard (a distributed word's result is always this rank's part)."""
        if isinstance(t, self.jax.Array) and not t.is_fully_addressable:
            t = t.addressable_shards[0].data
        return np.array(t, dtype=np.float64)

    def copy_from_numpy(self, t: Tensor, x: np.ndarray) -> None:
        """JAX arrays are immutable and no word of this adapter changes an array it is given
        (collectives return new arrays), so a buffer only ever holds the values it was made
        with: this checks ``t`` already holds ``x``."""
        held = np.asarray(t)
        if held.shape != np.shape(x) or not np.array_equal(held, np.asarray(x, held.dtype)):
            raise AdapterError(
                "jax: arrays are immutable; copy_from_numpy can only refill a buffer with the "
                "values it was created with (use from_numpy for new values)"
            )

    # -- network words -----------------------------------------------------------------------
    def build_network(self, model: Any, dtype: str, options: NetworkOptions) -> Any:
        """fp32, and bf16/fp16 (mixed precision with ``amp``, pure low precision without);
        ``channels_last`` and ``compile`` do not apply (XLA always compiles and picks layouts)."""
        from suite.adapters.jax.network import JaxNetwork

        ok, why = self.supports(dtype)
        if not ok:
            raise UnsupportedError(why)
        # buffer donation saves a copy of the weights per step; the CPU client ignores it
        return JaxNetwork(model, dtype, options, self.device, donate=self.on_gpu)

    def forward(self, net: Any, x: Tensor) -> Tensor:
        return self._track(net.forward(x))

    def train_step(self, net: Any, x: Tensor, y: Tensor) -> Tensor:
        """One jitted step: training-mode forward, softmax cross-entropy, ``jax.grad``, optax
        SGD with momentum (and the gradient average across ranks once ``data_parallel``)."""
        loss = net.train_step(x, y)
        self._track(net.params)
        return self._track(loss)

    def loss_scale(self, net: Any) -> float | None:
        return float(net.scaler["scale"]) if net.loss_scaling else None

    def network_parameters(self, net: Any) -> dict[str, np.ndarray]:
        params: dict[str, np.ndarray] = net.parameters()
        return params

    def labels_from_numpy(self, y: np.ndarray) -> Tensor:
        """Integer labels or token ids (int32: JAX's default integer without x64)."""
        dtype = np.int64 if self.jax.config.jax_enable_x64 else np.int32
        return self.jax.device_put(np.asarray(y, dtype=dtype), self.device)

    def reset_peak_memory(self) -> None:
        # XLA's allocator cannot reset its peak: remember it, and report a peak only when a
        # larger one was reached after this call
        self._peak_baseline = _memory_stats(self.device).get("peak_bytes_in_use")

    def peak_memory_bytes(self) -> int | None:
        """The device's peak when it rose after ``reset_peak_memory`` (None on the CPU, or when
        an earlier, larger peak hides it)."""
        peak = _memory_stats(self.device).get("peak_bytes_in_use")
        if peak is None or self._peak_baseline is None or peak <= self._peak_baseline:
            return None
        return int(peak)

    def known_bug(self, benchmark: str) -> str | None:
        return None if self.on_gpu else self.known_bugs.get(benchmark)


def _backends_initialized() -> bool:
    """Whether JAX has started its backends (then ``jax_platforms`` can no longer choose).
    A private API (``jax._src.xla_bridge``, JAX 0.4-0.10): a release that moved it is taken
    as not started, so the platform is still set, as on a fresh process it is."""
    try:
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):
        return False


def _cuda_plugin_installed() -> bool:
    """Whether a JAX CUDA plugin is installed (checked without starting a backend)."""
    import importlib.util

    for name in ("jax_cuda13_plugin", "jax_cuda12_plugin", "jax_plugins.xla_cuda12"):
        try:
            if importlib.util.find_spec(name) is not None:
                return True
        except ModuleNotFoundError:  # a dotted name whose parent package is missing
            continue
    return False


def _memory_stats(device: Any) -> dict[str, int]:
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001 - the CPU client has none
        return {}
    return dict(stats or {})


def _cuda_version(v: int) -> str:
    """CUDA's integer versions: major * 1000 + minor * 10 (12040 -> 12.4)."""
    return f"{v // 1000}.{(v % 1000) // 10}"


def _cudnn_version(v: int) -> str:
    """cuDNN's: major * 10000 + minor * 100 + patch since 9 (90100 -> 9.1.0), * 1000 before."""
    major, rest = divmod(v, 10000) if v >= 90000 else divmod(v, 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def _distribution_version(*names: str) -> str | None:
    from importlib import metadata

    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None
