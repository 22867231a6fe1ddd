"""ONNX graph -> ``torch.nn.Module`` with the same initializer values.

Imported only by the PyTorch adapter's network words (so only inside a worker). The importer
(suite/onnx/importer.py) reads the graph and sorts its initializers; the module runs
its plan with the kernels of pytorch_kernels.py. Trainable initializers become
``nn.Parameter``s, BatchNormalization's running statistics buffers (updated in training mode
like ``nn.BatchNorm2d``, never differentiated); constants are converted once per plan and device.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import torch
import torch.nn.functional as F
from onnx import ModelProto
from torch import nn

from suite.adapters.base import NetworkOptions
from suite.adapters.pytorch.kernels import KERNELS, Ctx
from suite.onnx.importer import check_mapped, import_graph, kernel_call, run

#: the ONNX ops this builder maps
ONNX_OPS = frozenset(KERNELS)


def _key(name: str) -> str:
    """nn.Module attribute names may not contain dots."""
    return "v_" + "".join(c if c.isalnum() or c == "_" else "_" for c in name)


def _tensor(value: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(value, copy=True))


class OnnxModule(nn.Module):
    """Runs the imported graph's plan for the input's shape with PyTorch kernels."""

    def __init__(self, model: ModelProto) -> None:
        super().__init__()
        self.graph = import_graph(model)
        check_mapped(self.graph, ONNX_OPS, self.graph.input_shape(1), "pytorch")
        self.keys: dict[str, str] = {}  # onnx name -> attribute key
        for name, value in self.graph.params.items():
            self.keys[name] = key = _key(name)
            self.register_parameter(key, nn.Parameter(_tensor(value.astype(np.float32))))
        for name, value in self.graph.state.items():
            self.keys[name] = key = _key(name)
            self.register_buffer(key, _tensor(value.astype(np.float32)))
        self.trainable = {name: self.keys[name] for name in self.graph.params}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        plan = self.graph.plan(tuple(x.shape))
        values = {name: getattr(self, key) for name, key in self.keys.items()}
        device = x.device
        out: torch.Tensor = run(
            plan, values, x, kernel_call(KERNELS, Ctx(self.training)),
            lambda v: _tensor(v).to(device), cache_key=str(device),
        )  # fmt: skip
        return out


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
            # Module.to converts in place; its typed overloads have no memory_format alone
            cast(Any, self.module).to(memory_format=torch.channels_last)
        self.amp_dtype = (
            {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype) if options.amp else None
        )
        weights = list(self.module.parameters())
        # None for an inference-only file (its weights all constants): the level never trains
        # one (it says why), and SGD refuses an empty parameter list
        self.optimizer: Any = (
            torch.optim.SGD(weights, lr=options.lr, momentum=options.momentum) if weights else None
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
