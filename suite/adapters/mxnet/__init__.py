"""MXNet 1.9: the adapter, its ONNX op kernels, its network builder (a Gluon SymbolBlock) and its
strategies (the parameter-server kvstore). Importing this package imports no framework."""

ADAPTERS = {"mxnet": "suite.adapters.mxnet.adapter:MXNetAdapter"}
