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
    # words: the base framework's, all of them (the kit checks them here too); the levels keep
    # operator and network *tasks* to the base framework's adapter
    levels: ClassVar[frozenset[str]] = frozenset({"distributed"})
    unsupported_strategies: ClassVar[dict[str, str]] = dict(
        horovod_rendezvous.UNSUPPORTED_STRATEGIES
    )
    # this Horovod is built with gloo and no NCCL: its reducescatter is gloo's on every device
    known_bugs: ClassVar[dict[str, str]] = {"reduce_scatter": GLOO_REDUCE_SCATTER}
    #: none: Horovod fuses up to its fusion threshold, which it reads from
    #: HOROVOD_FUSION_THRESHOLD once, in ``hvd.init()``; the base framework's buckets (DDP's, on
    #: PyTorch) are not Horovod's exchange (the kit ran DDP without its process group before)
    data_parallel_buckets: ClassVar[str] = ""
    #: the framework binding imported in ``setup``: ``horovod.torch`` or ``horovod.tensorflow``
    horovod_binding: ClassVar[str]

    def __init__(self) -> None:
        super().__init__()
        self.hvd: Any = None
        self._rendezvous: Any = None

    def setup(self, device: str) -> DeviceInfo:
        info = super().setup(device)  # type: ignore[safe-super]  # the base framework's
        # loads Horovod's op library; starts no framework context
        self.hvd = importlib.import_module(self.horovod_binding)
        return info

    def versions(self) -> dict[str, str | None]:
        out = super().versions()
        out.update(horovod_rendezvous.versions(self.hvd))
        return out

    def data_parallel(self, net: Any, compression: str = "none") -> Any:
        """Horovod's data-parallel recipe with one of its compressors, "none" or "fp16"."""
        raise NotImplementedError

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
