"""PyTorch: the adapter (CPU and CUDA), its ONNX op kernels, its network builder and its
strategies. Importing this package imports no framework: it only names the adapter class."""

ADAPTERS = {"pytorch": "suite.adapters.pytorch.adapter:PyTorchAdapter"}
