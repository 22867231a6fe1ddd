"""JAX: the adapter, its ONNX op kernels and its network builder (the plan traced under
jax.jit). Importing this package imports no framework."""

ADAPTERS = {"jax": "suite.adapters.jax.adapter:JaxAdapter"}
