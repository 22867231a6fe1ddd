"""ONNX graph -> hybridized Gluon ``SymbolBlock``s with the same initializer values (MXNet 1.9).

Imported only by the MXNet adapter's network words (so only inside a worker, after ``setup``
imported mxnet). The importer (suite/onnx/importer.py) reads the graph, sorts its
initializers and plans it for each input shape; the plan runs once per shape on ``mx.sym``
variables with the kernels of mxnet_kernels.py, and the symbol becomes a ``gluon.SymbolBlock``
(hybridized: one cached MXNet graph per shape) over one shared ``ParameterDict``: trainable
initializers are Parameters with a gradient, BatchNormalization's running statistics the
symbol's auxiliary states (``grad_req="null"``, updated in training mode), constants
parameters without a gradient.

Training: softmax cross-entropy (mean over the batch), ``autograd`` backward, and a
``gluon.Trainer("sgd", momentum, wd=0)`` step. MXNet's momentum SGD is ``m = mu*m - lr*g;
w += m``, PyTorch's ``v = mu*v + g; w -= lr*v``: the same weights for a constant learning rate
(``m = -lr*v``). BatchNorm conventions agree too: MXNet's ``momentum`` is the weight of the old
running value, as ONNX's is.
"""

from __future__ import annotations

import re
from typing import Any

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon
from onnx import ModelProto

from suite.adapters.base import NetworkOptions
from suite.adapters.mxnet.kernels import KERNELS, Ctx
from suite.onnx.importer import check_mapped, import_graph, kernel_call, run

#: the ONNX ops this builder maps; the adapter declares the same set as ``onnx_ops``
ONNX_OPS = frozenset(KERNELS)


class DataParallel:
    """The gradient exchange of a data-parallel network: every gradient is pushed to the
    ``dist_sync`` kvstore (the server sums the workers' pushes) and pulled back, as
    ``gluon.Trainer`` does with ``update_on_kvstore=False``; the keys are the adapter's (unique
    across networks: a Trainer numbers its keys 0..P-1, so two Trainers on one kvstore collide).
    """

    on_server = False

    def __init__(self, holder: Any, keys: list[int], world: int) -> None:
        self.holder = holder  # .kv is the kvstore (None after dist_shutdown)
        self.keys = keys
        self.world = world

    def exchange(self, grads: list[Any]) -> None:
        kv = self.holder.kv
        if kv is None:
            raise RuntimeError("mxnet: data-parallel step after dist_shutdown")
        kv.push(self.keys, grads)
        kv.pull(self.keys, out=grads)


class MXNetNetwork:
    """A built network: its parameters, a hybridized block per input shape, its Trainer, the
    loss, the optional exchange."""

    def __init__(self, model: ModelProto, ctx: Any, options: NetworkOptions) -> None:
        mx.random.seed(options.seed)  # dropout masks: reproducible per task
        self.ctx = ctx
        self.graph = import_graph(model)
        check_mapped(self.graph, ONNX_OPS, self.graph.input_shape(1), "mxnet")
        self.params = gluon.ParameterDict(prefix="")
        #: ONNX initializer name -> parameter (and symbol variable) name
        self.keys: dict[str, str] = {}
        for name, value in [*self.graph.params.items(), *self.graph.state.items()]:
            safe = re.sub(r"\W", "_", name)
            self.keys[name] = key = f"onnx_{len(self.keys)}_{safe}"
            self._parameter(key, value, "write" if name in self.graph.params else "null")
        self.trainable = [self.params[self.keys[n]] for n in self.graph.params]
        self.blocks: dict[tuple[int, ...], Any] = {}
        # wd=0: no weight decay (MXNet's SGD default is 0 too; said here so it stays so)
        # None for an inference-only file (its weights all constants): the level never trains
        # one (it says why), and a Trainer without parameters fails to build
        self.trainer: Any = (
            gluon.Trainer(
                self.trainable,
                "sgd",
                {"learning_rate": options.lr, "momentum": options.momentum, "wd": 0.0},
                kvstore=None,
            )
            if self.trainable
            else None
        )
        self.loss = gluon.loss.SoftmaxCrossEntropyLoss()
        self.parallel: Any = None  # DataParallel, or a server-side update (mxnet_strategies)

    def _parameter(self, key: str, value: np.ndarray, grad_req: str) -> Any:
        # allow_deferred_init: what SymbolBlock asks of the parameters it takes from the dict
        p = self.params.get(key, shape=value.shape, dtype="float32", grad_req=grad_req,
                            differentiable=grad_req != "null", allow_deferred_init=True,
                            init=mx.init.Zero())  # fmt: skip
        p.initialize(ctx=self.ctx)
        p.set_data(mx.nd.array(value, ctx=self.ctx, dtype="float32"))
        return p

    def block(self, shape: tuple[int, ...]) -> Any:
        """The hybridized block for inputs of ``shape`` (built once per shape)."""
        if shape not in self.blocks:
            plan = self.graph.plan(shape)
            kctx = Ctx(prefix=f"plan{len(self.blocks)}_")
            data = mx.sym.var("data", shape=shape, dtype="float32")
            values = {name: mx.sym.var(key) for name, key in self.keys.items()}
            key = object()  # the constants' symbols belong to this build only
            out = run(plan, values, data, kernel_call(KERNELS, kctx),
                      lambda v: v if v.size == 1 else kctx.const(v), cache_key=key)  # fmt: skip
            plan.converted.pop(key, None)
            for name, value in kctx.constants.items():
                self._parameter(name, value, "null")
            block = gluon.SymbolBlock(out, data, params=self.params)
            block.hybridize(static_alloc=True)
            self.blocks[shape] = block
        return self.blocks[shape]

    def _call(self, x: Any) -> Any:
        if x.dtype != np.float32:  # token ids: every value of the graph is fp32 (mxnet_kernels)
            x = x.astype("float32")
        return self.block(tuple(x.shape))(x)

    def forward(self, x: Any) -> Any:
        """Inference mode (outside ``autograd.record``): dropout off, running statistics."""
        return self._call(x)

    def train_step(self, x: Any, y: Any, sync: bool = True) -> Any:
        labels = y.astype("float32")  # the loss's pick takes float indices (exact < 2**24)
        with autograd.record():  # training mode: dropout on, batch statistics
            loss = self.loss(self._call(x), labels).mean()
        loss.backward()
        world = 1
        if self.parallel is not None and self.parallel.on_server:
            if sync:  # the server's optimizer steps; the weights come back with the pull
                self.parallel.exchange(
                    [p.grad(self.ctx) for p in self.trainable],
                    [p.data(self.ctx) for p in self.trainable],
                )
                return loss
        elif self.parallel is not None:
            world = self.parallel.world
            if sync:
                self.parallel.exchange([p.grad(self.ctx) for p in self.trainable])
        # the gradient of the local mean loss, summed over the workers: rescale by 1/world so
        # the step uses the mean over the global batch (ignore_stale_grad: a parameter the
        # output does not depend on gets no gradient and no step, as in the other builders)
        self.trainer.step(world, ignore_stale_grad=True)
        return loss

    def parameters(self) -> dict[str, np.ndarray]:
        return {
            name: self.params[self.keys[name]].data(self.ctx).asnumpy().astype(np.float64)
            for name in self.graph.params
        }
