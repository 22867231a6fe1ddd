"""The adapter registry. Built-in adapters are registered here; third-party packages add theirs
through the ``dlsuite.adapters`` entry-point group. Nothing here imports a framework."""

from __future__ import annotations

from suite.adapters.base import Adapter, DeviceInfo
from suite.registry import Registry

ADAPTERS: Registry[type[Adapter]] = Registry("framework", entry_point_group="dlsuite.adapters")
ADAPTERS.register("pytorch", "suite.adapters.pytorch:PyTorchAdapter")
ADAPTERS.register("tensorflow", "suite.adapters.tensorflow:TensorFlowAdapter")
ADAPTERS.register("numpy", "suite.adapters.numpy_adapter:NumPyAdapter")
ADAPTERS.register("jax", "suite.adapters.jax_adapter:JaxAdapter")
ADAPTERS.register("mxnet", "suite.adapters.mxnet_adapter:MXNetAdapter")
ADAPTERS.register("horovod", "suite.adapters.horovod:HorovodAdapter")
ADAPTERS.register(
    "horovod-tensorflow", "suite.adapters.horovod_tensorflow:HorovodTensorFlowAdapter"
)


def adapter_class(name: str) -> type[Adapter]:
    return ADAPTERS.load(name)


__all__ = ["ADAPTERS", "Adapter", "DeviceInfo", "adapter_class"]
