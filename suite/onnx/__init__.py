"""The ONNX path, below the levels and the adapters: the zoo's networks as ONNX graphs
(``zoo``), the op list every network builder maps (``ops``), the one importer (``importer``:
checks, shape inference, constant folding, the plan), the kernel tables' shared helpers
(``kernels``), a float64 NumPy evaluator (``numpy_eval``) and ``dlsuite inspect``. Imports no
deep-learning framework."""

#: the ``network`` name of a user's ONNX file (``--model``; ``model`` gives its path): what
#: every level, the projection and the report tell a user's file from a zoo network by
USER_MODEL = "onnx"
