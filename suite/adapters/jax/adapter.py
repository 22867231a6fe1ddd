"""JAX adapter (CPU here; the GPU branch is written for the GPU machines but untested here).

``jax`` and ``optax`` are imported in ``setup``, never at module import. Every operator word is
a ``jax.jit`` function (JAX always compiles with XLA: the device record says so); ``vjp`` is
``jax.vjp`` with the backward pass jitted; the network words map the ONNX graph to a pure
function over a parameter pytree (suite/adapters/jax/network.py); the distributed words use
``jax.distributed`` with ``psum``/``all_gather``/``psum_scatter`` under ``shard_map`` over the
global mesh of one device per process (gloo collectives between CPU processes, NCCL on GPUs).

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

import math
import os
from collections import deque
from collections.abc import Callable, Mapping, Sequence
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
from suite.adapters.jax import optimizers as optax_optimizers
from suite.adapters.known_bugs import GLOO_REDUCE_SCATTER
from suite.devices import declared_gpu_peak
from suite.errors import AdapterError, UnsupportedError
from suite.onnx.ops import CORE_OPS

#: how many recent word outputs are kept for the next synchronisation; an older one is waited
#: for (normally long finished) when it is dropped, so no dispatched work escapes a sync
PENDING_DEPTH = 8
MESH_AXIS = "ranks"


JAX_NO_COMPRESSION = (
    "JAX's collectives (psum, pmean over named axes, compiled by XLA) have no gradient "
    "compression; casting, quantising or factorising gradients before a psum would be the "
    "suite's scheme, not JAX's"
)
JAX_NO_PS = (
    "JAX is SPMD: every process runs the same compiled program and exchanges through "
    "collectives; it has no parameter server"
)


class JaxAdapter(Adapter):
    """JAX on one device per process (CPU or one CUDA GPU). Tensors are ``jax.Array``s
    committed to that device."""

    name: ClassVar[str] = "jax"
    module: ClassVar[str] = "jax"
    distribution: ClassVar[str] = "jax"
    adapter_version: ClassVar[str] = "1"
    default_launcher: ClassVar[str] = "spawn"
    words: ClassVar[frozenset[str]] = ALL_WORDS
    # the broadcast word works (a masked psum, as JAX's own broadcast_one_to_all); timed, it
    # would be an allreduce's cost, so the broadcast benchmark is skipped
    emulated_collectives: ClassVar[dict[str, str]] = {
        "broadcast": "jax has no broadcast primitive; it is a masked psum (an allreduce's "
        "bytes, as jax's own broadcast_one_to_all), so its time would not be a broadcast's"
    }
    # on CPUs, XLA's reduce-scatter is gloo's (on GPUs NCCL's)
    known_bugs: ClassVar[dict[str, str]] = {"reduce_scatter": GLOO_REDUCE_SCATTER}
    strategies: ClassVar[dict[str, str]] = {
        "allreduce": "jax.lax.pmean of the gradients inside the jitted step over the processes' "
        "devices (jax.distributed, gloo collectives on CPUs)",
    }
    unsupported_strategies: ClassVar[dict[str, str]] = {
        "ps-sync": JAX_NO_PS,
        "ps-async": JAX_NO_PS,
        "ssp": JAX_NO_PS,
        "fp16": JAX_NO_COMPRESSION,
        "bf16": JAX_NO_COMPRESSION,
        "powersgd": JAX_NO_COMPRESSION,
        "2bit": JAX_NO_COMPRESSION,
        "1bit": JAX_NO_COMPRESSION,
        "local-sgd": "JAX has no local SGD or model averager; skipping the pmean for k steps "
        "and averaging the parameters would be the suite's loop, not a JAX mechanism",
        "pipeline": "JAX has no pipeline schedule: shard_map with ppermute lets a user write "
        "one (GPipe-style loops in user code), which would be the suite's runtime",
        "adasum": "Adasum is Horovod's reduction (hvd.Adasum); JAX has none",
    }
    # every op the importer normalises (suite/onnx/ops.py); the kit checks that the
    # kernel table equals it, so listing the ops imports no JAX
    onnx_ops: ClassVar[frozenset[str]] = CORE_OPS

    # optimizers (suite/adapters/jax/optimizers.py): optax, jitted
    optimizers: ClassVar[dict[str, str]] = optax_optimizers.OPTIMIZERS
    unsupported_optimizers: ClassVar[dict[str, str]] = optax_optimizers.UNSUPPORTED_OPTIMIZERS
    optimizer_implementations: ClassVar[dict[str, str]] = optax_optimizers.IMPLEMENTATIONS
    optimizer_hyperparameters: ClassVar[dict[str, frozenset[str]]] = (
        optax_optimizers.HYPERPARAMETERS
    )
    optimizer_dtypes: ClassVar[dict[str, str]] = optax_optimizers.DTYPES

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
        from jax._src import xla_bridge

        if not xla_bridge.backends_are_initialized():
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
            driver=_nvml_driver_version(),
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
        from jax._src.lib import cuda_versions

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

    # -- optimizer words (suite/adapters/jax/optimizers.py) ------------------------------------
    def optimizer_build(self, spec: Any, params: Mapping[str, np.ndarray]) -> Any:
        return optax_optimizers.OptaxOptimizer(
            self.jax, self.device, self._dtypes[spec.dtype], spec, params
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
    def _join_if_launched(self, platform: str) -> None:
        """``jax.distributed.initialize`` from the launcher's variables, before any backend
        starts (JAX refuses it afterwards). One device per process: on GPUs the LOCAL_RANK-th."""
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return
        jax = self.jax
        from jax._src import distributed

        rank = int(os.environ.get("RANK", "0"))
        if distributed.global_state.client is None:
            address = f"{os.environ.get('MASTER_ADDR', '127.0.0.1')}:{os.environ['MASTER_PORT']}"
            timeout = int(float(os.environ.get("DLSUITE_DIST_TIMEOUT", "300")))
            local_ids = [int(os.environ.get("LOCAL_RANK", "0"))] if platform == "cuda" else None
            if platform == "cpu":
                jax.config.update("jax_cpu_collectives_implementation", "gloo")
            jax.distributed.initialize(
                coordinator_address=address,
                num_processes=world,
                process_id=rank,
                local_device_ids=local_ids,
                initialization_timeout=timeout,
            )
        self._world, self._rank = world, rank

    def dist_init(self, backend: str) -> str:
        """The runtime was joined in ``setup`` (see the module docstring); this builds the mesh
        of one device per rank, in rank order, and says which collectives run: gloo between
        CPU processes, NCCL between GPUs."""
        jax = self.jax
        in_use = "nccl" if self.on_gpu else "gloo"
        if backend not in ("auto", in_use):
            raise UnsupportedError(
                f"jax on the {'GPU' if self.on_gpu else 'CPU'} runs its collectives with "
                f"{in_use}; --dist-backend {backend} is not available (use auto)"
            )
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if jax.process_count() != world or self._world != world:
            raise AdapterError(
                f"jax: {jax.process_count()} processes joined for WORLD_SIZE={world}; the "
                "distributed runtime is joined in setup, which this process ran before the "
                "launcher's variables were set"
            )
        devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
        if len(devices) != world:
            raise AdapterError(f"jax: {len(devices)} devices for {world} ranks; want one each")
        from jax.sharding import Mesh

        self._mesh = Mesh(np.array(devices), (MESH_AXIS,))
        return in_use

    def dist_shutdown(self, clean: bool = True) -> None:
        jax = self.jax
        from jax._src import distributed

        if distributed.global_state.client is None:
            return
        if clean:
            self.barrier()
        self.synchronize()
        jax.distributed.shutdown()

    def _require_mesh(self) -> Any:
        if self._mesh is None:
            raise AdapterError("jax: distributed word used before dist_init")
        return self._mesh

    def _global(self, local: Any, replicated: bool) -> Any:
        """This rank's array as its part of a global array over the mesh: a shard of a global
        array split along axis 0 (rank order), or one copy of a replicated one."""
        jax = self.jax
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P

        mesh = self._require_mesh()
        if replicated:
            return jax.make_array_from_single_device_arrays(
                local.shape, NamedSharding(mesh, P()), [local]
            )
        shape = (self._world * local.shape[0], *local.shape[1:])
        return jax.make_array_from_single_device_arrays(
            shape, NamedSharding(mesh, P(MESH_AXIS)), [local]
        )

    @staticmethod
    def _local(g: Any) -> Any:
        return g.addressable_shards[0].data

    def _collective(self, op: str, root: int = 0) -> Any:
        """A jitted shard_map over the mesh: each rank's block in, each rank's block out."""
        key = (op, root)
        if key in self._collectives:
            return self._collectives[key]
        jax = self.jax
        jnp = self.jnp
        lax = jax.lax
        from jax.sharding import PartitionSpec as P

        axis = MESH_AXIS

        def body(x: Any) -> Any:
            if op == "allreduce":
                return lax.psum(x, axis)
            if op == "allgather":
                return lax.all_gather(x, axis, axis=0, tiled=True)
            if op == "reduce_scatter":
                return lax.psum_scatter(x, axis, scatter_dimension=0, tiled=True)
            if op == "max":
                return lax.pmax(x, axis)
            if op == "broadcast":
                # JAX has no broadcast primitive; multihost_utils.broadcast_one_to_all is this
                # same masked psum (only the root's values are non-zero, so the sum is exact)
                mine = lax.axis_index(axis) == root
                return lax.psum(jnp.where(mine, x, jnp.zeros_like(x)), axis)
            raise ValueError(op)

        fn = jax.jit(
            jax.shard_map(body, mesh=self._require_mesh(), in_specs=P(axis), out_specs=P(axis))
        )
        self._collectives[key] = fn
        return fn

    def _run_collective(self, op: str, t: Tensor, root: int = 0) -> Tensor:
        out = self._collective(op, root)(self._global(t, replicated=False))
        return self._track(self._local(out))

    def barrier(self) -> None:
        """A tiny psum every rank must enter before any leaves it, waited for."""
        token = self.jax.device_put(np.zeros(1, np.float32), self.device)
        self.jax.block_until_ready(self._run_collective("allreduce", token))

    def agree_max(self, value: int) -> int:
        t = self.jax.device_put(np.array([int(value)], dtype=np.int32), self.device)
        return int(np.asarray(self._run_collective("max", t))[0])

    def allreduce(self, t: Tensor) -> Tensor:
        """The sum across ranks, as a new array (JAX arrays are immutable)."""
        return self._run_collective("allreduce", t)

    def allgather(self, t: Tensor) -> Tensor:
        return self._run_collective("allgather", t)

    def broadcast(self, t: Tensor, root: int = 0) -> Tensor:
        """Root's values on every rank: a masked ``psum``, as JAX's own
        ``multihost_utils.broadcast_one_to_all`` (so it moves an allreduce's bytes)."""
        return self._run_collective("broadcast", t, int(root))

    def reduce_scatter(self, t: Tensor) -> Tensor:
        """``psum_scatter``: this rank's chunk of the sum across ranks. On CPUs it is the
        framework's own reduce-scatter with its known bug (``known_bugs``), measured as it is:
        an allreduce and a slice would be right, and an allreduce's time."""
        return self._run_collective("reduce_scatter", t)

    def known_bug(self, benchmark: str) -> str | None:
        return None if self.on_gpu else self.known_bugs.get(benchmark)

    def data_parallel(self, net: Any) -> Any:
        """The network's step as a shard_map over the ranks: each rank differentiates its own
        batch, the gradients are averaged with ``pmean`` inside the jitted step (DDP's average),
        and every rank applies the same update. BatchNormalization's running statistics are
        taken from rank 0 after the step (DDP broadcasts rank 0's buffers before each forward).
        The weights stay replicated; dropout masks differ per rank (the key is folded with the
        rank)."""
        jax = self.jax
        jnp = self.jnp
        lax = jax.lax
        from jax.sharding import PartitionSpec as P

        mesh = self._require_mesh()
        axis = MESH_AXIS

        def step(params: Any, opt_state: Any, state: Any, scaler: Any, x: Any, y: Any,
                 key: Any) -> tuple[Any, ...]:  # fmt: skip
            key, sub = jax.random.split(key)
            sub = jax.random.fold_in(sub, lax.axis_index(axis))
            # The weights are the same on every rank (invariant); marked as varying per rank,
            # jax.grad gives this rank's own gradients (differentiating through the implicit
            # invariant->varying cast would sum them already), and the exchange is the pmean.
            local = jax.tree.map(lambda p: _pcast_varying(lax, p, axis), params)
            loss, grads, new_state = net.gradients(local, state, scaler, x, y, sub)
            grads = lax.pmean(grads, axis)
            params, opt_state, scaler = net.apply_update(params, opt_state, scaler, grads)
            first = lax.axis_index(axis) == 0
            new_state = jax.tree.map(
                lambda s: lax.psum(jnp.where(first, s, jnp.zeros_like(s)), axis), new_state
            )
            return params, opt_state, new_state, scaler, key, loss.reshape(1)

        rep, shard = P(), P(axis)
        compiled = jax.jit(
            jax.shard_map(
                step,
                mesh=mesh,
                in_specs=(rep, rep, rep, rep, shard, shard, rep),
                out_specs=(rep, rep, rep, rep, rep, shard),
            )
        )

        def dp_step(params: Any, opt_state: Any, state: Any, scaler: Any, x: Any, y: Any,
                    key: Any) -> tuple[Any, ...]:  # fmt: skip
            to_rep = lambda tree: jax.tree.map(  # noqa: E731
                lambda a: self._global(a, replicated=True), tree
            )
            out = compiled(
                to_rep(params), to_rep(opt_state), to_rep(state), to_rep(scaler),
                self._global(x, replicated=False), self._global(y, replicated=False), to_rep(key),
            )  # fmt: skip
            *trees, loss = out
            local = [jax.tree.map(self._local, tree) for tree in trees]
            return (*local, self._local(loss).reshape(()))

        net.dp_step = dp_step
        return net

    def train_step_no_sync(self, net: Any, x: Tensor, y: Tensor) -> Tensor:
        """The same jitted step on this rank's batch without the gradient exchange (DDP's
        ``no_sync``): the ranks' weights drift apart afterwards."""
        loss = net.train_step(x, y, sync=False)
        self._track(net.params)
        return self._track(loss)


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


def _pcast_varying(lax: Any, x: Any, axis: str) -> Any:
    """``x`` marked as varying over ``axis`` inside shard_map (``lax.pcast`` in JAX >= 0.8,
    ``lax.pvary`` before)."""
    if hasattr(lax, "pcast"):
        return lax.pcast(x, axis, to="varying")
    return lax.pvary(x, axis)


def _memory_stats(device: Any) -> dict[str, int]:
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001 - the CPU client has none
        return {}
    return dict(stats or {})


def _nvml_driver_version() -> str | None:
    try:
        import pynvml  # optional: nvidia-ml-py

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # noqa: BLE001 - NVML is optional; no driver version then
        return None


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
