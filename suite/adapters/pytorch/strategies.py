"""PyTorch's own mechanisms for the distributed strategies (suite/levels/distributed/strategies.py).

Imported only by the PyTorch adapter's strategy words (inside a worker, torch already imported):

* ``allreduce``: ``DistributedDataParallel`` (bucketed gradient allreduce in backward).
* ``fp16`` / ``bf16``: DDP with ``default_hooks.fp16_compress_hook`` / ``bf16_compress_hook``
  (each bucket cast down, allreduced, cast back and divided by the world size).
* ``powersgd``: DDP with ``powerSGD_hook.powerSGD_hook`` and its ``PowerSGDState``
  (``matrix_approximation_rank``, error feedback and warm start on, the first
  ``start_powerSGD_iter`` steps plain allreduce).
* ``local-sgd``: DDP with ``post_localSGD_hook`` (no gradient exchange after ``warmup`` steps:
  ``post_local_gradient_allreduce=False``) and ``PostLocalSGDOptimizer`` with a
  ``PeriodicModelAverager`` (parameters averaged every ``period`` steps).
* ``pipeline``: ``torch.distributed.pipelining``: this rank's stage (an ONNX sub-graph built as
  an ``nn.Module``) in a ``PipelineStage``, driven by ``ScheduleGPipe`` or ``Schedule1F1B``
  over the micro-batches; the loss on the last stage.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F


def ddp_with_hook(net: Any, strategy: str, options: Mapping[str, Any], device: Any) -> Any:
    """Wrap ``net`` (a TorchNetwork) in DDP and register ``strategy``'s communication hook."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    net.wrap(lambda m: DistributedDataParallel(m, device_ids=ids))
    ddp = net.ddp
    if strategy == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif strategy == "bf16":
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif strategy == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook

        state = powerSGD_hook.PowerSGDState(
            process_group=None,
            matrix_approximation_rank=int(options["rank"]),
            start_powerSGD_iter=int(options["start_iter"]),
            use_error_feedback=True,
            warm_start=True,
            random_seed=0,
        )
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    elif strategy == "local-sgd":
        from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook
        from torch.distributed.algorithms.model_averaging.averagers import (
            PeriodicModelAverager,
        )
        from torch.distributed.optim import PostLocalSGDOptimizer

        warmup = int(options["warmup"])
        local_state = post_localSGD_hook.PostLocalSGDState(
            process_group=None,
            subgroup=None,
            start_localSGD_iter=warmup,
            post_local_gradient_allreduce=False,
        )
        ddp.register_comm_hook(local_state, post_localSGD_hook.post_localSGD_hook)
        net.optimizer = PostLocalSGDOptimizer(
            optim=net.optimizer,
            averager=PeriodicModelAverager(period=int(options["period"]), warmup_steps=warmup),
        )
    elif strategy != "allreduce":
        raise ValueError(f"no DDP mapping for strategy {strategy!r}")
    return net


class PipelineNetwork:
    """One stage of a pipeline: this rank's part of the network as a ``PipelineStage``, trained
    by a ``torch.distributed.pipelining`` schedule over the micro-batches, then this stage's
    own optimizer step. ``train_step`` takes the whole global batch on every rank: the first
    stage feeds the inputs, the last the targets."""

    def __init__(self, net: Any, options: Mapping[str, Any], device: Any) -> None:
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

        self.net = net
        self.index, self.stages = int(options["stage"]), int(options["stages"])
        self.first, self.last = self.index == 0, self.index == self.stages - 1
        self.stage = PipelineStage(net.module, self.index, self.stages, device)
        schedule = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[str(options["schedule"])]

        def loss_fn(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(logits.float(), target)

        # scale_grads: each micro-batch's mean loss gradient divided by their number, so the
        # accumulated gradient is that of the mean loss over the global batch
        self.schedule = schedule(
            self.stage, int(options["microbatches"]), loss_fn=loss_fn, scale_grads=True
        )

    def prepare_input(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def train_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor | None:
        net = self.net
        net.module.train()
        net.optimizer.zero_grad()
        if self.first:
            self.schedule.step(x)
            loss = None
        elif self.last:
            losses: list[torch.Tensor] = []
            self.schedule.step(target=y, losses=losses)
            loss = torch.stack([v.detach() for v in losses]).mean()
        else:
            self.schedule.step()
            loss = None
        net.optimizer.step()
        return loss

    def parameters(self) -> dict[str, np.ndarray]:
        """Every stage's parameters, gathered from the ranks (a collective)."""
        mine = self.net.parameters()
        everyone: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, mine)
        out: dict[str, np.ndarray] = {}
        for part in everyone:
            out.update(part)
        return out
