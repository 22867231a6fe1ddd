"""ONNX graph -> ``torch.nn.Module`` with the same initializer values.

Imported only by the PyTorch adapter's network words (so only inside a worker). Each ONNX op
maps to the native PyTorch op; float initializers with more than one element become
trainable ``nn.Parameter``s (BatchNormalization's mean and variance become buffers, updated
in training mode like ``nn.BatchNorm2d``), scalars and integer initializers become constants.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from onnx import ModelProto, NodeProto, numpy_helper
from torch import nn

from suite.adapters.base import NetworkOptions
from suite.levels.network.zoo import node_attributes

# The ONNX ops this builder maps (the zoo's op set plus a few common ones in user files).
ONNX_OPS = frozenset(
    {
        "Add", "AveragePool", "BatchNormalization", "Concat", "Conv", "Div", "Dropout", "Erf",
        "Flatten", "Gather", "Gemm", "GlobalAveragePool", "Identity", "LayerNormalization",
        "MatMul", "MaxPool", "Mul", "Relu", "Reshape", "Sigmoid", "Softmax", "Sqrt", "Sub",
        "Tanh", "Transpose",
    }
)  # fmt: skip


_attrs = node_attributes


def _key(name: str) -> str:
    """nn.Module attribute names may not contain dots."""
    return name.replace(".", "__").replace("/", "_").replace(":", "_")


def _pads2d(pads: list[int] | None) -> tuple[tuple[int, int], bool]:
    """ONNX pads [top, left, bottom, right] -> (symmetric padding, needs explicit F.pad)."""
    if not pads:
        return (0, 0), False
    t, lft, b, r = pads
    if t == b and lft == r:
        return (t, lft), False
    return (0, 0), True


class OnnxModule(nn.Module):
    """Executes the ONNX graph node by node with native PyTorch ops."""

    def __init__(self, model: ModelProto) -> None:
        super().__init__()
        graph = model.graph
        self.nodes = list(graph.node)
        init_names = {i.name for i in graph.initializer}
        self.input_names = [i.name for i in graph.input if i.name not in init_names]
        self.output_name = graph.output[0].name
        bn_stats = {n.input[3] for n in self.nodes if n.op_type == "BatchNormalization"} | {
            n.input[4] for n in self.nodes if n.op_type == "BatchNormalization"
        }
        self.param_names: dict[str, str] = {}  # onnx name -> attribute key
        self.consts: dict[str, Any] = {}
        for init in graph.initializer:
            arr = numpy_helper.to_array(init)
            key = _key(init.name)
            if arr.dtype.kind == "f" and init.name in bn_stats:
                self.register_buffer(key, torch.from_numpy(arr.astype(np.float32).copy()))
                self.param_names[init.name] = key
            elif arr.dtype.kind == "f" and arr.size > 1:
                self.register_parameter(
                    key, nn.Parameter(torch.from_numpy(arr.astype(np.float32).copy()))
                )
                self.param_names[init.name] = key
            elif arr.dtype.kind == "f":
                # scalar float constant (1/sqrt(d), 0.5, ...): a buffer so it follows .to(device)
                self.register_buffer(key, torch.from_numpy(arr.astype(np.float32).copy()))
                self.param_names[init.name] = key
            else:
                self.consts[init.name] = arr
        self.trainable = {
            name: key
            for name, key in self.param_names.items()
            if isinstance(getattr(self, key), nn.Parameter)
        }
        self.attrs = [_attrs(n) for n in self.nodes]

    def _value(self, env: dict[str, Any], name: str) -> Any:
        if name in env:
            return env[name]
        if name in self.param_names:
            return getattr(self, self.param_names[name])
        if name in self.consts:
            return self.consts[name]
        raise KeyError(f"value {name!r} is neither computed nor an initializer")

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        env: dict[str, Any] = dict(zip(self.input_names, inputs, strict=True))
        for node, attrs in zip(self.nodes, self.attrs, strict=True):
            args = [self._value(env, n) if n else None for n in node.input]
            env[node.output[0]] = _OPS[node.op_type](self, node, attrs, args)
        out: torch.Tensor = env[self.output_name]
        return out


def _as_tensor(x: Any, like: torch.Tensor) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x
    return torch.as_tensor(np.asarray(x), device=like.device)


def _binary(fn: Callable[[Any, Any], torch.Tensor]) -> Callable[..., torch.Tensor]:
    def op(m: OnnxModule, node: NodeProto, attrs: dict[str, Any], args: list[Any]) -> torch.Tensor:
        a, b = args
        if not isinstance(a, torch.Tensor):
            a = _as_tensor(a, b)
        if not isinstance(b, torch.Tensor):
            b = _as_tensor(b, a)
        return fn(a, b)

    return op


def _conv(m: OnnxModule, node: NodeProto, a: dict[str, Any], args: list[Any]) -> torch.Tensor:
    x, w = args[0], args[1]
    b = args[2] if len(args) > 2 else None
    padding, explicit = _pads2d(a.get("pads"))
    if explicit:
        t, lft, bt, r = a["pads"]
        x = F.pad(x, (lft, r, t, bt))
    if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise NotImplementedError(f"Conv auto_pad={a['auto_pad']!r} in node {node.name}")
    return F.conv2d(
        x,
        w,
        b,
        stride=tuple(a.get("strides", (1, 1))),
        padding=padding,
        dilation=tuple(a.get("dilations", (1, 1))),
        groups=a.get("group", 1),
    )


def _batchnorm(m: OnnxModule, node: NodeProto, a: dict[str, Any], args: list[Any]) -> torch.Tensor:
    x, scale, bias, mean, var = args
    return F.batch_norm(
        x,
        mean,
        var,
        scale,
        bias,
        training=m.training,
        momentum=1.0 - a.get("momentum", 0.9),
        eps=a.get("epsilon", 1e-5),
    )


def _pool(kind: str) -> Callable[..., torch.Tensor]:
    def op(m: OnnxModule, node: NodeProto, a: dict[str, Any], args: list[Any]) -> torch.Tensor:
        x = args[0]
        padding, explicit = _pads2d(a.get("pads"))
        if explicit:
            raise NotImplementedError(f"{node.op_type} with asymmetric pads in node {node.name}")
        k = tuple(a["kernel_shape"])
        s = tuple(a.get("strides", (1, 1)))
        ceil = bool(a.get("ceil_mode", 0))
        if kind == "max":
            return F.max_pool2d(x, k, s, padding, ceil_mode=ceil)
        return F.avg_pool2d(
            x, k, s, padding, ceil_mode=ceil, count_include_pad=bool(a.get("count_include_pad", 0))
        )

    return op


def _gemm(m: OnnxModule, node: NodeProto, a: dict[str, Any], args: list[Any]) -> torch.Tensor:
    x, w = args[0], args[1]
    c = args[2] if len(args) > 2 else None
    alpha, beta = a.get("alpha", 1.0), a.get("beta", 1.0)
    if a.get("transA", 0):
        x = x.t()
    if a.get("transB", 0) and alpha == 1.0 and beta == 1.0:
        return F.linear(x, w, c)
    y = alpha * (x @ (w.t() if a.get("transB", 0) else w))
    return y + beta * c if c is not None else y


def _reshape(m: OnnxModule, node: NodeProto, a: dict[str, Any], args: list[Any]) -> torch.Tensor:
    x, shape = args
    shape = [int(v) for v in np.asarray(shape.cpu() if isinstance(shape, torch.Tensor) else shape)]
    if not a.get("allowzero", 0):
        shape = [x.shape[i] if v == 0 else v for i, v in enumerate(shape)]
    return x.reshape(shape)


def _gather(m: OnnxModule, node: NodeProto, a: dict[str, Any], args: list[Any]) -> torch.Tensor:
    data, idx = args
    axis = a.get("axis", 0)
    if isinstance(idx, np.ndarray) and idx.ndim == 0:
        return data.select(axis, int(idx))
    idx_t = _as_tensor(idx, data).long()
    if axis == 0 and isinstance(data, nn.Parameter):
        return F.embedding(idx_t, data)
    flat = torch.index_select(data, axis, idx_t.reshape(-1))
    return flat.reshape(*data.shape[:axis], *idx_t.shape, *data.shape[axis + 1 :])


def _layernorm(m: OnnxModule, node: NodeProto, a: dict[str, Any], args: list[Any]) -> torch.Tensor:
    x, scale = args[0], args[1]
    bias = args[2] if len(args) > 2 else None
    axis = a.get("axis", -1)
    axis = axis if axis >= 0 else x.dim() + axis
    return F.layer_norm(x, tuple(x.shape[axis:]), scale, bias, eps=a.get("epsilon", 1e-5))


def _dropout(m: OnnxModule, node: NodeProto, a: dict[str, Any], args: list[Any]) -> torch.Tensor:
    ratio = a.get("ratio", 0.5)
    if len(args) > 1 and args[1] is not None:
        ratio = float(
            np.asarray(args[1].detach().cpu() if isinstance(args[1], torch.Tensor) else args[1])
        )
    return F.dropout(args[0], ratio, training=m.training)


def _softmax(m: OnnxModule, node: NodeProto, a: dict[str, Any], args: list[Any]) -> torch.Tensor:
    return torch.softmax(args[0], dim=a.get("axis", -1))


_OPS: dict[str, Callable[..., torch.Tensor]] = {
    "Add": _binary(torch.add),
    "Sub": _binary(torch.sub),
    "Mul": _binary(torch.mul),
    "Div": _binary(torch.div),
    "MatMul": _binary(torch.matmul),
    "Conv": _conv,
    "BatchNormalization": _batchnorm,
    "Relu": lambda m, n, a, args: F.relu(args[0]),
    "Sigmoid": lambda m, n, a, args: torch.sigmoid(args[0]),
    "Tanh": lambda m, n, a, args: torch.tanh(args[0]),
    "Erf": lambda m, n, a, args: torch.erf(args[0]),
    "Sqrt": lambda m, n, a, args: torch.sqrt(args[0]),
    "Identity": lambda m, n, a, args: args[0],
    "MaxPool": _pool("max"),
    "AveragePool": _pool("avg"),
    "GlobalAveragePool": lambda m, n, a, args: args[0].mean(dim=(2, 3), keepdim=True),
    "Flatten": lambda m, n, a, args: torch.flatten(args[0], a.get("axis", 1)),
    "Gemm": _gemm,
    "Reshape": _reshape,
    "Transpose": lambda m, n, a, args: args[0].permute(*a["perm"]),
    "Softmax": _softmax,
    "LayerNormalization": _layernorm,
    "Gather": _gather,
    "Dropout": _dropout,
    "Concat": lambda m, n, a, args: torch.cat(list(args), dim=a["axis"]),
}
assert set(_OPS) == ONNX_OPS


class TorchNetwork:
    """A built network: module, optimizer, precision policy, compiled callables."""

    def __init__(
        self, model: ModelProto, device: torch.device, dtype: str, options: NetworkOptions
    ) -> None:
        self.device = device
        self.options = options
        torch.manual_seed(options.seed)  # dropout masks: reproducible per task
        self.module = OnnxModule(model).to(device)
        self.image_input = False
        first = model.graph.input[0].type.tensor_type
        if first.elem_type == 1 and len(first.shape.dim) == 4:  # float NCHW
            self.image_input = True
        if options.channels_last and self.image_input:
            self.module = self.module.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
        self.amp_dtype = (
            {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype) if options.amp else None
        )
        self.optimizer = torch.optim.SGD(
            self.module.parameters(), lr=options.lr, momentum=options.momentum
        )
        self.scaler = torch.amp.GradScaler(device.type) if self.amp_dtype is torch.float16 else None
        self.call: Callable[..., torch.Tensor] = self.module
        self.ddp: Any = None
        if options.compile:
            self.call = torch.compile(self.module)

    def wrap(self, wrapper: Callable[[nn.Module], Any]) -> None:
        """Data parallelism: ``wrapper`` (DistributedDataParallel) wraps the module; training
        goes through the wrapper, so gradients are averaged across ranks in backward."""
        self.ddp = wrapper(self.module)
        self.call = torch.compile(self.ddp) if self.options.compile else self.ddp

    def prepare_input(self, x: torch.Tensor) -> torch.Tensor:
        if self.options.channels_last and self.image_input and x.dim() == 4:
            return x.contiguous(memory_format=torch.channels_last)
        return x

    def _autocast(self) -> Any:
        return torch.autocast(
            self.device.type, dtype=self.amp_dtype, enabled=self.amp_dtype is not None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.module.eval()
        with torch.no_grad(), self._autocast():
            return self.call(x)

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.module.train()
        self.optimizer.zero_grad()  # set_to_none, the default (Horovod's wrapper takes no argument)
        with self._autocast():
            logits = self.call(x)
        loss = F.cross_entropy(logits.float(), y)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        return loss.detach()

    def parameters(self) -> dict[str, np.ndarray]:
        return {
            name: getattr(self.module, key).detach().to("cpu", torch.float64).numpy()
            for name, key in self.module.trainable.items()
        }


def param_count(net: TorchNetwork) -> int:
    return sum(math.prod(p.shape) for p in net.module.parameters())
