"""PyTorch adapter (CPU and CUDA). ``torch`` is imported in ``setup``, never at module import."""

from __future__ import annotations

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
from suite.adapters.known_bugs import TORCH_CPU_FUSED_SGD_LOWP, major_minor, optimizer_key
from suite.adapters.pytorch.optimizers import TorchOptimizerWords
from suite.devices import declared_gpu_bandwidth, declared_gpu_peak
from suite.errors import AdapterError, UnsupportedError
from suite.onnx.ops import CORE_OPS
from suite.telemetry.nvml import driver_version

PS_REASON = (
    "PyTorch has no parameter server: its RPC tutorial ('Implementing a Parameter Server Using "
    "the Distributed RPC Framework') has the user write the server's aggregation and update, "
    "so a parameter server here would be the suite's runtime, not PyTorch's"
)
QUANTISE_REASON = (
    "PyTorch's DDP communication hooks compress to fp16, bf16, a low rank (PowerSGD) or 8 bits "
    "(quantization_hooks, without error feedback); none sends 1- or 2-bit gradients"
)


class PyTorchAdapter(TorchOptimizerWords, Adapter):
    name: ClassVar[str] = "pytorch"
    module: ClassVar[str] = "torch"
    distribution: ClassVar[str] = "torch"
    adapter_version: ClassVar[str] = "1"
    default_launcher: ClassVar[str] = "torchrun"
    dist_backends: ClassVar[frozenset[str] | None] = frozenset({"gloo", "nccl", "mpi"})
    words: ClassVar[frozenset[str]] = ALL_WORDS
    keeps_process_group: ClassVar[bool] = True  # init_process_group once per worker session
    # every op the importer normalises (suite/onnx/ops.py); the kit checks that the
    # kernel table equals it, so listing the ops imports no framework
    onnx_ops: ClassVar[frozenset[str]] = CORE_OPS

    strategies: ClassVar[dict[str, str]] = {
        "allreduce": "DistributedDataParallel: bucketed gradient allreduce overlapped with backward",
        "fp16": "DDP + ddp_comm_hooks.default_hooks.fp16_compress_hook",
        "bf16": "DDP + ddp_comm_hooks.default_hooks.bf16_compress_hook (NCCL on GPUs only)",
        "powersgd": "DDP + ddp_comm_hooks.powerSGD_hook.powerSGD_hook (PowerSGDState: "
        "matrix_approximation_rank, error feedback, warm start)",
        "local-sgd": "DDP + post_localSGD_hook (no gradient exchange) + "
        "torch.distributed.optim.PostLocalSGDOptimizer with a PeriodicModelAverager",
        "pipeline": "torch.distributed.pipelining: one PipelineStage per rank, ScheduleGPipe "
        "or Schedule1F1B over the micro-batches",
    }
    unsupported_strategies: ClassVar[dict[str, str]] = {
        "ps-sync": PS_REASON,
        "ps-async": PS_REASON,
        "ssp": "PyTorch has no parameter server, so no staleness bound either (see ps-sync)",
        "2bit": QUANTISE_REASON,
        "1bit": QUANTISE_REASON,
        "adasum": "Adasum is Horovod's reduction (hvd.Adasum); torch.distributed has none "
        "(run --framework horovod)",
    }

    loaders: ClassVar[dict[str, str]] = {
        "folder": "torch.utils.data.DataLoader over a map-style dataset of the JPEG files "
        "(RandomSampler, or DistributedSampler on several ranks), worker processes",
        "webdataset": "torch.utils.data.DataLoader over webdataset.WebDataset (shards split by "
        "rank and worker, seeded shard shuffle, sample shuffle buffer)",
    }
    device_decoder: ClassVar[str] = (
        "nvJPEG through torchvision.io.decode_jpeg on the GPU, batched; transforms on the GPU"
    )
    unsupported_loaders: ClassVar[dict[str, str]] = {
        "tfrecord": "PyTorch has no TFRecord reader of its own (third-party readers exist: "
        "run --framework tensorflow for tf.data over TFRecord)",
        "recordio": "PyTorch has no RecordIO reader (MXNet's format: run --framework mxnet)",
    }

    def __init__(self) -> None:
        self.torch: Any = None
        self.device: Any = None
        #: ``self.device.type == "cuda"``, read once: the timed loop asks it around every
        #: sample, and ``torch.device.type`` costs 0.3 us (docs/studies/overhead-cpu.md)
        self._cuda = False
        self.dtype_tf32 = False
        self._dtypes: dict[str, Any] = {}

    # -- device ------------------------------------------------------------------------------
    def setup(self, device: str) -> DeviceInfo:
        try:
            import torch
        except ImportError as exc:  # the worker reports this as a failed/skipped task
            raise AdapterError(
                f"pytorch: cannot import torch ({exc}); install dlsuite[torch]"
            ) from exc
        self.torch = torch
        self._dtypes = {
            "fp64": torch.float64,
            "fp32": torch.float32,
            "tf32": torch.float32,
            "bf16": torch.bfloat16,
            "fp16": torch.float16,
        }
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cuda":
            if not torch.cuda.is_available():
                raise AdapterError(
                    "pytorch: --device cuda but torch.cuda.is_available() is False "
                    f"(torch {torch.__version__}, built for CUDA {torch.version.cuda})"
                )
            self.device = torch.device("cuda", torch.cuda.current_device())
            self._cuda = True
            props = torch.cuda.get_device_properties(self.device)
            peaks, source = declared_gpu_peak(props.name)
            # Strict fp32 unless the task asks for tf32 (``supports('tf32')`` switches it on).
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cudnn.benchmark = True
            return DeviceInfo(
                kind="gpu",
                name=props.name,
                count=torch.cuda.device_count(),
                peak_tflops=peaks,
                peak_source=source,
                driver=driver_version(),
                extra={
                    "peak_bandwidth_gbps": declared_gpu_bandwidth(props.name),
                    "memory_gb": round(props.total_memory / 2**30, 2),
                    "compute_capability": f"{props.major}.{props.minor}",
                    "multiprocessors": props.multi_processor_count,
                },
            )
        if device != "cpu":
            raise AdapterError(f"pytorch: unknown device {device!r}; use cpu, cuda or auto")
        self.device = torch.device("cpu")
        self._cuda = False
        # Denormal floats make x86 arithmetic 10-100x slower (seen here: a transformer's step
        # time drifting 8 ms -> 500 ms as its loss went to 1e-4). GPUs and oneDNN kernels flush
        # them; flush them in PyTorch's own CPU kernels too, and say so in the record.
        flush = bool(torch.set_flush_denormal(True))
        info = host_cpu_info()
        info.extra["torch_threads"] = torch.get_num_threads()
        info.extra["flush_denormal"] = flush
        return info

    def versions(self) -> dict[str, str | None]:
        torch = self.torch
        cudnn = None
        if torch.backends.cudnn.is_available():
            cudnn = str(torch.backends.cudnn.version())
        nccl = None
        if torch.cuda.is_available() and hasattr(torch.cuda, "nccl"):
            try:
                nccl = ".".join(str(v) for v in torch.cuda.nccl.version())
            except Exception:  # noqa: BLE001 - a build without NCCL
                nccl = None
        return {
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "cudnn": cudnn,
            "nccl": nccl,
            "mkldnn": str(torch.backends.mkldnn.is_available()),
        }

    def known_bug(self, benchmark: str) -> str | None:
        # the CPU fused SGD kernel's low-precision path (known_bugs.TORCH_CPU_FUSED_SGD_LOWP):
        # the CPU only, and the releases it was reported for and before (a later one still
        # wrong stays an unexplained failure, which is news)
        lowp = {optimizer_key("sgd", "fused", d) for d in ("bf16", "fp16")}
        release = major_minor(self.torch.__version__)
        if benchmark in lowp and not self._cuda and release is not None and release <= (2, 13):
            return TORCH_CPU_FUSED_SGD_LOWP
        return super().known_bug(benchmark)

    def supports(self, dtype: str) -> tuple[bool, str]:
        torch = self.torch
        on_gpu = self.device.type == "cuda"
        if dtype == "tf32":
            if not on_gpu:
                return (
                    False,
                    "tf32 is a tensor-core mode of NVIDIA GPUs (Ampere or newer); this task runs on the CPU",
                )
            major, _ = torch.cuda.get_device_capability(self.device)
            if major < 8:
                return False, f"tf32 needs compute capability 8.0+, device has {major}.x"
            torch.backends.cuda.matmul.allow_tf32 = True
            torch.backends.cudnn.allow_tf32 = True
            return True, ""
        if dtype == "bf16" and on_gpu and not torch.cuda.is_bf16_supported():
            return False, "bf16 is not supported by this GPU"
        if dtype not in self._dtypes:
            return False, f"pytorch adapter has no dtype {dtype!r}"
        return True, ""

    def data_loader(self, spec: Any) -> Any:
        from suite.adapters.pytorch.data import TorchLoader

        return TorchLoader(spec, self.device)

    def batch_to_network(self, images: Any) -> Tensor:
        """The loader's own tensor (pinned when the network is on a GPU, or already there
        after a device decode) copied to the device as a training loop does, not through
        NumPy."""
        if isinstance(images, self.torch.Tensor):
            if images.dim() == 4 and images.shape[-1] == 3 and images.shape[1] != 3:
                images = images.permute(0, 3, 1, 2)
            return images.to(self.device, dtype=self.torch.float32, non_blocking=True)
        return super().batch_to_network(images)

    def memory_bandwidth(self) -> Any:
        if self.device is None or self.device.type != "cuda":
            return None
        from suite.adapters.pytorch.bandwidth import torch_triad

        return torch_triad(str(self.device))

    def synchronize(self) -> None:
        if self._cuda:
            self.torch.cuda.synchronize(self.device)

    def time(self, fn: Callable[[], Any], n: int) -> float:
        if not self._cuda:
            return super().time(fn, n)
        # CUDA events measure device time between the two records; synchronising on the end
        # event before reading it is the device sync.
        torch = self.torch
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize(self.device)
        start.record()
        for _ in range(n):
            fn()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end)) / 1e3

    # -- tensors -----------------------------------------------------------------------------
    def from_numpy(self, x: np.ndarray, dtype: str, *, requires_grad: bool = False) -> Tensor:
        torch = self.torch
        t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64)).to(
            device=self.device, dtype=self._dtypes[dtype]
        )
        if requires_grad:
            t.requires_grad_(True)
        return t

    def copy_from_numpy(self, t: Tensor, x: np.ndarray) -> None:
        with self.torch.no_grad():
            t.copy_(self.torch.from_numpy(np.ascontiguousarray(x)))

    def to_numpy(self, t: Tensor) -> np.ndarray:
        return t.detach().to(device="cpu", dtype=self.torch.float64).numpy()

    def vjp(
        self, fn: Callable[..., Tensor], primals: Mapping[str, Tensor], cotangent: Tensor
    ) -> Callable[[], Sequence[Tensor]]:
        torch = self.torch
        inputs = tuple(primals.values())
        for t in inputs:
            if not t.requires_grad:
                t.requires_grad_(True)
        out = fn(**primals)
        grad = torch.autograd.grad

        def backward() -> Sequence[Tensor]:
            return grad(out, inputs, cotangent, retain_graph=True)

        return backward

    # -- operator words ----------------------------------------------------------------------
    def matmul(self, a: Tensor, b: Tensor) -> Tensor:
        return self.torch.matmul(a, b)

    def conv2d(
        self, x: Tensor, w: Tensor, *, stride: int, padding: int, dilation: int = 1, groups: int = 1
    ) -> Tensor:
        return self.torch.nn.functional.conv2d(
            x, w, stride=stride, padding=padding, dilation=dilation, groups=groups
        )

    def batch_norm(self, x: Tensor, gamma: Tensor, beta: Tensor, *, eps: float) -> Tensor:
        return self.torch.nn.functional.batch_norm(
            x, None, None, gamma, beta, training=True, eps=eps
        )

    def layer_norm(self, x: Tensor, gamma: Tensor, beta: Tensor, *, eps: float) -> Tensor:
        return self.torch.nn.functional.layer_norm(x, (x.shape[-1],), gamma, beta, eps=eps)

    def softmax(self, x: Tensor) -> Tensor:
        return self.torch.softmax(x, dim=-1)

    def gelu(self, x: Tensor) -> Tensor:
        return self.torch.nn.functional.gelu(x, approximate="none")

    def attention(self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool) -> Tensor:
        return self.torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)

    # -- network words -----------------------------------------------------------------------
    def build_network(self, model: Any, dtype: str, options: NetworkOptions) -> Any:
        from suite.adapters.pytorch.network import TorchNetwork

        return TorchNetwork(model, self.device, dtype, options)

    def forward(self, net: Any, x: Tensor) -> Tensor:
        return net.forward(net.prepare_input(x))

    def train_step(self, net: Any, x: Tensor, y: Tensor) -> Tensor:
        return net.train_step(net.prepare_input(x), y)

    def network_parameters(self, net: Any) -> dict[str, np.ndarray]:
        params: dict[str, np.ndarray] = net.parameters()
        return params

    def loss_scale(self, net: Any) -> float | None:
        return None if net.scaler is None else float(net.scaler.get_scale())

    def labels_from_numpy(self, y: np.ndarray) -> Tensor:
        return self.torch.from_numpy(np.ascontiguousarray(y, dtype=np.int64)).to(self.device)

    def reset_peak_memory(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.reset_peak_memory_stats(self.device)

    def peak_memory_bytes(self) -> int | None:
        if self.device.type == "cuda":
            return int(self.torch.cuda.max_memory_allocated(self.device))
        return None

    def end_task(self) -> dict[str, list[str]]:
        import sys

        torch = self.torch
        reset: list[str] = []
        warm: list[str] = []
        if torch is None:
            return {"reset": reset, "warm": warm}
        dynamo = sys.modules.get("torch._dynamo")  # imported only when a task compiled
        if dynamo is not None:
            dynamo.reset()
            reset.append("torch.compile's compiled graphs (torch._dynamo.reset)")
        if self.device is not None and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()
            reset.append("the CUDA caching allocator's cached blocks (torch.cuda.empty_cache)")
            warm += [
                "the CUDA context",
                "cuDNN's autotuner cache (a shape tuned before is not tuned again in the "
                "next warm-up; the timed region is after the warm-up either way)",
            ]
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            warm.append("the process group (rendezvous and communicators)")
        return {"reset": reset, "warm": warm}

    # -- distributed words -------------------------------------------------------------------
    def dist_init(self, backend: str) -> str:
        import datetime
        import os

        dist = self.torch.distributed
        if backend == "auto":
            backend = "nccl" if self.device.type == "cuda" else "gloo"
        # What this build or device cannot run is a skipped record, as in the other adapters;
        # init_process_group would raise RuntimeError ("Distributed package doesn't have NCCL
        # built in"): a failed record, exit 1.
        built = {"gloo": dist.is_gloo_available, "nccl": dist.is_nccl_available,
                 "mpi": dist.is_mpi_available}  # fmt: skip
        if backend in built and not built[backend]():
            raise UnsupportedError(
                f"this PyTorch build ({self.torch.__version__}) has no {backend} backend "
                f"(torch.distributed.is_{backend}_available() is False); use --dist-backend "
                + ("gloo" if backend != "gloo" else "auto")
            )
        if backend == "nccl" and self.device.type != "cuda":
            raise UnsupportedError(
                "NCCL collectives need GPUs; this task runs on the CPU (use --dist-backend gloo)"
            )
        if self.device.type == "cuda":
            self.device = self.torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            self.torch.cuda.set_device(self.device)
        if dist.is_initialized():  # an earlier task of this worker session set it up
            return str(dist.get_backend())
        timeout = datetime.timedelta(seconds=float(os.environ.get("DLSUITE_DIST_TIMEOUT", "300")))
        dist.init_process_group(backend=backend, init_method="env://", timeout=timeout)
        return str(dist.get_backend())

    def dist_shutdown(self, clean: bool = True) -> None:
        dist = self.torch.distributed
        if dist.is_initialized():
            # A barrier first: destroying the group right after the last collective sometimes
            # aborts at exit with gloo (MACHINE-NOTES: 4 of 13 runs; 0 of 12 with the barrier).
            if clean:
                dist.barrier()
            dist.destroy_process_group()

    def barrier(self) -> None:
        self.torch.distributed.barrier()

    def agree_max(self, value: int) -> int:
        t = self.torch.tensor([int(value)], dtype=self.torch.int64, device=self.device)
        self.torch.distributed.all_reduce(t, op=self.torch.distributed.ReduceOp.MAX)
        return int(t.item())

    def allreduce(self, t: Tensor) -> Tensor:
        self.torch.distributed.all_reduce(t)
        return t

    def allgather(self, t: Tensor) -> Tensor:
        dist = self.torch.distributed
        out = t.new_empty((dist.get_world_size() * t.shape[0], *t.shape[1:]))
        dist.all_gather_into_tensor(out, t)
        return out

    def broadcast(self, t: Tensor, root: int = 0) -> Tensor:
        self.torch.distributed.broadcast(t, root)
        return t

    def reduce_scatter(self, t: Tensor) -> Tensor:
        dist = self.torch.distributed
        out = t.new_empty((t.shape[0] // dist.get_world_size(), *t.shape[1:]))
        dist.reduce_scatter_tensor(out, t)
        return out

    def data_parallel(self, net: Any) -> Any:
        from torch.nn.parallel import DistributedDataParallel

        ids = [self.device.index] if self.device.type == "cuda" else None
        net.wrap(lambda m: DistributedDataParallel(m, device_ids=ids))
        return net

    data_parallel_buckets: ClassVar[str] = "DistributedDataParallel(bucket_cap_mb=bytes / 2**20)"

    def data_parallel_bucketed(self, net: Any, bucket_bytes: int) -> Any:
        from torch.nn.parallel import DistributedDataParallel

        ids = [self.device.index] if self.device.type == "cuda" else None
        cap = bucket_bytes / 2**20
        net.wrap(lambda m: DistributedDataParallel(m, device_ids=ids, bucket_cap_mb=cap))
        return net

    def train_step_no_sync(self, net: Any, x: Tensor, y: Tensor) -> Tensor:
        with net.ddp.no_sync():
            return net.train_step(net.prepare_input(x), y)

    # -- strategies (suite/adapters/pytorch/strategies.py) -------------------------------------
    def strategy_init(
        self, strategy: str, options: Mapping[str, Any], backend: str, rendezvous: str = ""
    ) -> str:
        if strategy == "bf16" and self.device.type != "cuda":
            # DDP's own check (_check_comm_hook) refuses the hook without CUDA and NCCL
            raise UnsupportedError(
                "pytorch: bf16_compress_hook needs CUDA 11+ and NCCL 2.10+ (DDP refuses it on "
                "the CPU: 'BF16 all reduce communication hook required CUDA 11+ and NCCL 2.10+')"
            )
        return self.dist_init(backend)

    def apply_strategy(
        self, net: Any, strategy: str, options: Mapping[str, Any], world: int
    ) -> Any:
        from suite.adapters.pytorch import strategies as pytorch_strategies

        if strategy == "pipeline":
            return pytorch_strategies.PipelineNetwork(net, options, self.device)
        return pytorch_strategies.ddp_with_hook(net, strategy, options, self.device)
