"""What the two Horovod adapters share (Horovod over PyTorch, adapter.py; over TensorFlow,
adapter_tensorflow.py): Horovod's declarations, its import in ``setup``, its versions, and the
strategies mapped to its optimizer wrappers. A mixin placed before the base framework's adapter
(``class HorovodAdapter(HorovodWords, PyTorchAdapter)``); ``horovod`` is imported in ``setup``,
never here at module import."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, ClassVar

from suite.adapters.base import Adapter, DeviceInfo
from suite.adapters.horovod import rendezvous as horovod_rendezvous
from suite.adapters.known_bugs import GLOO_REDUCE_SCATTER


class HorovodWords(Adapter):
    """Horovod's part of an adapter that is its base framework's adapter otherwise."""

    module: ClassVar[str] = "horovod"
    distribution: ClassVar[str] = "horovod"
    adapter_version: ClassVar[str] = "1"
    default_launcher: ClassVar[str] = "horovodrun"
    # built with gloo only (no MPI, no NCCL): rendezvous.join refuses the others
    dist_backends: ClassVar[frozenset[str] | None] = frozenset({"gloo"})
    # Horovod's rendezvous spans nodes (horovodrun -H, or the suite's over srun), whatever
    # the base adapter's own runtime does
    single_node: ClassVar[str] = ""
    # words: the base framework's, all of them (the kit checks them here too); the levels keep
    # operator and network *tasks* to the base framework's adapter
    levels: ClassVar[frozenset[str]] = frozenset({"distributed"})
    unsupported_strategies: ClassVar[dict[str, str]] = dict(
        horovod_rendezvous.UNSUPPORTED_STRATEGIES
    )
    # this Horovod is built with gloo and no NCCL: its reducescatter is gloo's on every device
    known_bugs: ClassVar[dict[str, str]] = {"reduce_scatter": GLOO_REDUCE_SCATTER}
    #: Horovod fuses the gradients that became ready in each cycle of its background thread
    #: into allreduces of at most its fusion threshold, which that thread reads from
    #: HOROVOD_FUSION_THRESHOLD once, as ``hvd.init()`` starts it: the task's bucket is given
    #: before the init (:meth:`bucket_at_init`), not where the network is wrapped. The base
    #: framework's buckets (DDP's, on PyTorch) are not Horovod's exchange.
    data_parallel_buckets: ClassVar[str] = (
        "HOROVOD_FUSION_THRESHOLD=bytes for hvd.init(): the gradients ready in each of "
        "Horovod's cycles fused into allreduces of at most this size"
    )
    #: the framework binding imported in ``setup``: ``horovod.torch`` or ``horovod.tensorflow``
    horovod_binding: ClassVar[str]

    def __init__(self) -> None:
        super().__init__()
        self.hvd: Any = None
        self._rendezvous: Any = None
        self._fusion_bytes: int | None = None  # the next init's, from bucket_at_init
        #: the fusion threshold and cycle time Horovod started with (``_join``)
        self.fusion: dict[str, Any] = {}

    def setup(self, device: str) -> DeviceInfo:
        info = super().setup(device)  # type: ignore[safe-super]  # the base framework's
        # loads Horovod's op library; starts no framework context
        self.hvd = importlib.import_module(self.horovod_binding)
        return info

    def versions(self) -> dict[str, str | None]:
        out = super().versions()
        out.update(horovod_rendezvous.versions(self.hvd))
        return out

    def bucket_at_init(self, bucket_bytes: int | None) -> None:
        self._fusion_bytes = None if bucket_bytes is None else int(bucket_bytes)

    def _join(self, backend: str) -> None:
        """``hvd.init()`` through the shared rendezvous, with the fusion threshold the task
        asked for (once: a later init without ``bucket_at_init`` takes the environment's)."""
        fusion, self._fusion_bytes = self._fusion_bytes, None
        self._rendezvous = horovod_rendezvous.join(self.hvd, backend, fusion)
        self.fusion = horovod_rendezvous.fusion_in_effect(fusion)

    def data_parallel_settings(self) -> dict[str, Any]:
        return dict(self.fusion)

    def data_parallel(self, net: Any, compression: str = "none") -> Any:
        """Horovod's data-parallel recipe with one of its compressors, "none" or "fp16"."""
        raise NotImplementedError

    def data_parallel_bucketed(self, net: Any, bucket_bytes: int) -> Any:
        """Horovod's recipe, in the process group started with the bucket as its fusion
        threshold; a group started with another threshold cannot take it (an error)."""
        if self.fusion.get("horovod_fusion_threshold_from") != "bucket" or self.fusion.get(
            "horovod_fusion_threshold_bytes"
        ) != int(bucket_bytes):
            raise RuntimeError(
                f"{self.name}: Horovod started with a fusion threshold of "
                f"{self.fusion.get('horovod_fusion_threshold_bytes')} bytes, not the bucket "
                f"{int(bucket_bytes)}: it reads HOROVOD_FUSION_THRESHOLD in hvd.init() only "
                "(bucket_at_init before dist_init)"
            )
        return self.data_parallel(net)

    def apply_strategy(
        self, net: Any, strategy: str, options: Mapping[str, Any], world: int
    ) -> Any:
        """Horovod's own optimizer wrapper (its ``data_parallel``), not the base framework's
        mechanism: ``allreduce`` plain, ``fp16`` with Horovod's fp16 compression."""
        if strategy in ("allreduce", "fp16"):
            return self.data_parallel(
                net, compression="none" if strategy == "allreduce" else "fp16"
            )
        raise NotImplementedError(f"{self.name} has no mapping of {strategy!r}")
