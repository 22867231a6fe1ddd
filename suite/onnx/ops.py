"""The ONNX ops the importer normalises and every network-level adapter maps: one kernel per
op per adapter (suite/adapters/<framework>_kernels.py). Framework-free, so that an adapter's
``onnx_ops`` and ``dlsuite inspect`` list them without importing a framework.

An adapter declares ``onnx_ops = CORE_OPS`` (or a subset, saying why for what it leaves out);
its kit checks the declaration equals its kernel table. Shape arithmetic (Shape, Size,
ConstantOfShape, Range, ...) is not here: the importer folds it for the input shape a task runs;
where it cannot (a shape computed from the data), the model is skipped naming the node.
"""

from __future__ import annotations

ELEMENTWISE = frozenset({
    "Abs", "Add", "And", "Cast", "Ceil", "Clip", "Div", "Elu", "Equal", "Erf", "Exp", "Floor",
    "Gelu", "Greater", "HardSigmoid", "HardSwish", "Identity", "IsInf", "IsNaN", "LeakyRelu",
    "Less", "Log", "Max", "Min", "Mul", "Neg", "Not", "Or", "Pow", "PRelu", "Reciprocal", "Relu",
    "Selu", "Sigmoid", "Softplus", "Sqrt", "Sub", "Sum", "Tanh", "Where",
})  # fmt: skip
PRODUCTS = frozenset({"Conv", "ConvTranspose", "Einsum", "Gemm", "MatMul"})
POOLING = frozenset({"AveragePool", "GlobalAveragePool", "GlobalMaxPool", "MaxPool"})
NORMALISATION = frozenset({
    "BatchNormalization", "InstanceNormalization", "LayerNormalization", "LogSoftmax", "LRN",
    "Softmax",
})  # fmt: skip
REDUCTIONS = frozenset({
    "ReduceL2", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum",
    "ReduceSumSquare",
})  # fmt: skip
LAYOUT = frozenset({
    "Concat", "Dropout", "Expand", "Flatten", "Gather", "Pad", "Reshape", "Resize", "Slice",
    "Split", "Squeeze", "Tile", "Transpose", "Unsqueeze", "Upsample",
})  # fmt: skip

CORE_OPS: frozenset[str] = ELEMENTWISE | PRODUCTS | POOLING | NORMALISATION | REDUCTIONS | LAYOUT
