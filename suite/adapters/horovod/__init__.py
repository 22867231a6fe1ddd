"""Horovod: a distributed strategy over a base framework, one adapter per base (PyTorch,
TensorFlow) and the rendezvous they share. Importing this package imports no framework."""

ADAPTERS = {
    "horovod": "suite.adapters.horovod.adapter:HorovodAdapter",
    "horovod-tensorflow": "suite.adapters.horovod.adapter_tensorflow:HorovodTensorFlowAdapter",
}
