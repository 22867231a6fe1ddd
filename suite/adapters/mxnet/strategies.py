"""MXNet's own mechanisms for the distributed strategies: the parameter-server kvstore.

Imported by the MXNet adapter's strategy words inside a worker, and — through pickle — by the
kvstore *server* process when a worker registers :class:`ServerSGD` with
``KVStore.set_optimizer`` (so it imports nothing but mxnet, which that process is importing).

* ``ps-sync`` / ``ps-async``: kvstore ``dist_sync`` / ``dist_async`` with the optimizer on the
  server (``update_on_kvstore``, as ``gluon.Trainer`` does for ``dist_async``): workers push
  gradients and pull weights; the server applies MXNet's SGD with momentum once per round of
  pushes (sync) or to each push as it arrives (async), gradients rescaled by 1/world.
* ``2bit``: kvstore ``dist_sync`` with ``set_gradient_compression({'type': '2bit',
  'threshold': t})``: every push quantised on the worker to (-t, 0, +t), the error kept as the
  worker's residual and added to the next push (error feedback); the server sums the
  dequantised pushes; the pull is not compressed.
"""

from __future__ import annotations

from typing import Any

import mxnet as mx

#: kvstore keys at and above this are the suite's own (barrier-free control words:
#: agree_max, allgather, ...); below, a network's parameters. 100000 keeps ps-lite's key
#: placement (key * 9973, an int) from overflowing.
CONTROL_BASE = 100_000


class ServerSGD(mx.optimizer.SGD):
    """MXNet's SGD with momentum, run by the kvstore server on the parameter keys; a control
    key keeps what was pushed (the round's sum, in ``dist_sync``) as a server without an
    optimizer does. The learning rate of each key is its network's (``lr_mult``), the base
    rate 1. One key at a time (no aggregated multi-tensor updates)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.aggregate_num = 0

    def create_state_multi_precision(self, index: Any, weight: Any) -> Any:
        if isinstance(index, int) and index >= CONTROL_BASE:
            return None
        return super().create_state_multi_precision(index, weight)

    def update_multi_precision(self, index: Any, weight: Any, grad: Any, state: Any) -> None:
        if isinstance(index, int) and index >= CONTROL_BASE:
            weight[:] = grad
            return
        super().update_multi_precision(index, weight, grad, state)


class ServerUpdate:
    """The exchange of a network whose weights the server updates: push every gradient, pull
    every weight (into the parameters' own arrays); no local optimizer step."""

    on_server = True

    def __init__(self, holder: Any, keys: list[int], world: int) -> None:
        self.holder = holder
        self.keys = keys
        self.world = world

    def exchange(self, grads: list[Any], weights: list[Any]) -> None:
        kv = self.holder.kv
        if kv is None:
            raise RuntimeError("mxnet: parameter-server step after dist_shutdown")
        kv.push(self.keys, grads)
        kv.pull(self.keys, out=weights)
