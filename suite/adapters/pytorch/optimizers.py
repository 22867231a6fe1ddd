"""PyTorch's own optimizers (``torch.optim``) for the training level's optimizer benchmark.

The declarations are plain data (read on the host, no torch import); :class:`TorchOptimizer`
(built in the worker, torch already imported) drives ``torch.optim.<Class>`` over
``nn.Parameter`` tensors whose ``.grad`` holds the step's gradients, with one of its three
implementations: ``foreach=False`` (a for-loop over the tensors, one kernel per tensor and
operation), ``foreach=True`` (``torch._foreach_*`` multi-tensor kernels) and ``fused=True``
(one fused kernel per step: ``torch._fused_adam_``, ``_fused_sgd_``, ``_fused_adagrad_``; on
the CPU since torch 2.4). torch.optim keeps no fp32 master copy of low-precision parameters:
bf16/fp16 parameters are stepped in their own dtype, state included.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from suite.adapters.optimizer_words import OptimizerHandle, OptimizerWords

#: (optimizer, implementation) -> the device types it runs on, where that is not every device
DEVICES: dict[tuple[str, str], tuple[str, ...]] = {
    # measured on an H200 with torch 2.11: "`fused=True` requires all the params to be
    # floating point Tensors of supported devices: ['mps', 'xpu', 'hpu', 'cpu', 'mtia',
    # 'privateuseone'] but torch.float32 and cuda"
    ("adagrad", "fused"): ("cpu", "mps", "xpu", "hpu", "mtia"),
}


def unavailable(optimizer: str, implementation: str, device_type: str) -> str:
    """Why ``implementation`` of ``optimizer`` does not run on ``device_type`` ("" if it does)."""
    devices = DEVICES.get((optimizer, implementation))
    if devices is None or device_type in devices:
        return ""
    return (
        f"torch.optim's {implementation} {_CLASSES[optimizer]} does not run on {device_type} "
        f"(its fused kernel exists for: {', '.join(devices)})"
    )


_ADAM = frozenset({"lr", "beta1", "beta2", "eps", "weight_decay"})
_CLASSES = {
    "sgd": "SGD",
    "momentum": "SGD",
    "nesterov": "SGD",
    "adam": "Adam",
    "adamw": "AdamW",
    "amsgrad": "Adam",
    "rmsprop": "RMSprop",
    "adagrad": "Adagrad",
}


def arguments(optimizer: str, hyper: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``torch.optim.<Class>`` for the suite's ``hyper``."""
    h = hyper
    if optimizer in ("sgd", "momentum", "nesterov"):
        return {
            "lr": h["lr"],
            "momentum": h["momentum"],
            "dampening": h["dampening"],
            "nesterov": h["nesterov"],
            "weight_decay": h["weight_decay"],
        }
    if optimizer in ("adam", "adamw", "amsgrad"):
        return {
            "lr": h["lr"],
            "betas": (h["beta1"], h["beta2"]),
            "eps": h["eps"],
            "weight_decay": h["weight_decay"],
            "amsgrad": optimizer == "amsgrad",
        }
    if optimizer == "rmsprop":
        return {
            "lr": h["lr"],
            "alpha": h["rho"],
            "eps": h["eps"],
            "weight_decay": h["weight_decay"],
            "momentum": h["momentum"],
            "centered": h["centered"],
        }
    if optimizer == "adagrad":
        return {
            "lr": h["lr"],
            "lr_decay": h["lr_decay"],
            "weight_decay": h["weight_decay"],
            "initial_accumulator_value": h["initial_accumulator"],
            "eps": h["eps"],
        }
    raise KeyError(optimizer)


def implementation_arguments(implementation: str) -> dict[str, Any]:
    return {
        "forloop": {"foreach": False},
        "foreach": {"foreach": True},
        "fused": {"fused": True},
    }[implementation]


class TorchOptimizer(OptimizerHandle):
    """A ``torch.optim`` optimizer over its own parameters (the handle of the optimizer
    words)."""

    def __init__(
        self, torch: Any, device: Any, dtype: Any, spec: Any, params: Mapping[str, np.ndarray]
    ) -> None:
        self.torch, self.device, self.dtype = torch, device, dtype
        self.params = {
            name: torch.nn.Parameter(
                torch.from_numpy(np.asarray(params[name], dtype=np.float32)).to(
                    device=device, dtype=dtype
                )
            )
            for name in spec.names
        }
        cls = getattr(torch.optim, _CLASSES[spec.optimizer])
        self.optimizer = cls(
            list(self.params.values()),
            **arguments(spec.optimizer, spec.hyper),
            **implementation_arguments(spec.implementation),
        )

    def set_gradients(self, grads: Mapping[str, np.ndarray]) -> None:
        for name, p in self.params.items():
            p.grad = self.torch.from_numpy(np.asarray(grads[name], dtype=np.float32)).to(
                device=self.device, dtype=self.dtype
            )

    def set_lr(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def step(self) -> None:
        self.optimizer.step()

    def parameters(self, master: bool = False) -> dict[str, np.ndarray]:
        return {
            name: p.detach().to(device="cpu", dtype=self.torch.float64).numpy()
            for name, p in self.params.items()
        }

    def state_bytes(self) -> int:
        total = 0
        for state in self.optimizer.state.values():
            for value in state.values():
                if self.torch.is_tensor(value):
                    total += value.numel() * value.element_size()
        return total


class TorchOptimizerWords(OptimizerWords):
    """PyTorch's optimizer words, ``torch.optim``, three implementations: the declarations (class
    attributes, read on the host without a framework import) and ``optimizer_build``."""

    torch: Any
    device: Any
    _dtypes: dict[str, Any]

    optimizers: ClassVar[dict[str, str]] = {
        "sgd": "torch.optim.SGD(params, lr, weight_decay)",
        "momentum": "torch.optim.SGD(params, lr, momentum, dampening, weight_decay)",
        "nesterov": "torch.optim.SGD(params, lr, momentum, nesterov=True, weight_decay)",
        "adam": "torch.optim.Adam(params, lr, betas=(beta1, beta2), eps, weight_decay)",
        "adamw": "torch.optim.AdamW(params, lr, betas=(beta1, beta2), eps, weight_decay)",
        "amsgrad": "torch.optim.Adam(params, lr, betas, eps, weight_decay, amsgrad=True)",
        "rmsprop": "torch.optim.RMSprop(params, lr, alpha=rho, eps, weight_decay, momentum, centered)",
        "adagrad": "torch.optim.Adagrad(params, lr, lr_decay, weight_decay, "
        "initial_accumulator_value, eps)",
    }
    unsupported_optimizers: ClassVar[dict[str, str]] = {
        "lamb": "torch.optim has no LAMB (third-party packages such as torch-optimizer have one)",
        "lars": "torch.optim has no LARS",
    }
    optimizer_implementations: ClassVar[dict[str, str]] = {
        "forloop": "foreach=False: a Python loop over the tensors, one kernel per tensor and operation",
        "foreach": "foreach=True: torch._foreach_* multi-tensor kernels, one per operation",
        "fused": "fused=True: one fused kernel per step over every tensor",
    }
    unsupported_implementations: ClassVar[dict[str, dict[str, str]]] = {
        "rmsprop": {
            "fused": "torch.optim.RMSprop has no fused implementation (no fused= argument)"
        },
    }
    optimizer_hyperparameters: ClassVar[dict[str, frozenset[str]]] = {
        "sgd": frozenset({"lr", "weight_decay"}),
        "momentum": frozenset({"lr", "momentum", "dampening", "weight_decay"}),
        "nesterov": frozenset({"lr", "momentum", "weight_decay"}),
        "adam": _ADAM,
        "adamw": _ADAM,
        "amsgrad": _ADAM,
        "rmsprop": frozenset({"lr", "rho", "eps", "momentum", "centered", "weight_decay"}),
        "adagrad": frozenset({"lr", "lr_decay", "weight_decay", "initial_accumulator", "eps"}),
    }
    optimizer_dtypes: ClassVar[dict[str, str]] = {
        "fp32": "float32 parameters, gradients and state",
        "bf16": "bfloat16 parameters, gradients and state (torch.optim keeps no fp32 master copy)",
        "fp16": "float16 parameters, gradients and state (torch.optim keeps no fp32 master copy)",
    }

    def optimizer_unavailable(self, optimizer: str, implementation: str) -> str:
        return unavailable(optimizer, implementation, self.device.type)

    def optimizer_build(self, spec: Any, params: Mapping[str, np.ndarray]) -> Any:
        return TorchOptimizer(self.torch, self.device, self._dtypes[spec.dtype], spec, params)
