"""NumPy: the reference adapter (every word but the distributed ones, float64-exact where
asked) and the template to copy; its ONNX op kernels with their vector-Jacobian products and
its network builder. Importing this package imports nothing beyond NumPy."""

ADAPTERS = {"numpy": "suite.adapters.numpy.adapter:NumPyAdapter"}
