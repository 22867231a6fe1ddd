"""The learning-rate range check of a user's model (suite/levels/network/run.py): what its
confirmation holds a rate to, on the NumPy adapter."""

from __future__ import annotations

from typing import Any

import numpy as np

from suite.adapters.base import NetworkOptions
from suite.adapters.numpy.adapter import NumPyAdapter
from suite.levels.network import run as R
from suite.levels.network import workload as B
from suite.measure import MeasureConfig
from suite.onnx import zoo


class Lagging(NumPyAdapter):
    """A network whose inference-mode logits, once it has taken more than the probe's steps at
    a rate of 0.01 or more, give a higher loss than before training, as batch norms' running
    statistics do while the weights still change fast; its training losses fall as they are."""

    def train_step(self, net: Any, x: Any, y: Any) -> Any:
        net.steps = getattr(net, "steps", 0) + 1
        return super().train_step(net, x, y)

    def forward(self, net: Any, x: Any) -> Any:
        logits = super().forward(net, x)
        lagging = getattr(net, "steps", 0) > R.LR_PROBE_STEPS and net.lr >= 0.01
        return -10.0 * logits if lagging else logits


def test_a_rate_whose_inference_loss_ends_above_where_it_began_gives_way() -> None:
    """The record checks the inference-mode loss on the batch after training against the one
    before; a rate under which it ends higher (a GoogLeNet exported in training mode at 0.003:
    2.3 before, 8.7 after its 30 confirmation steps) gives way to the next smaller rate, and
    the confirmation records both losses."""
    net_def = zoo.get("mlp")
    arch = net_def.validate({"features": 16, "hidden": 16, "layers": 2, "classes": 4})
    w = B.Workload(net_def.build(arch, seed=0), net_def.input_spec(arch), 4, "mlp")
    rng = np.random.default_rng(0)
    x, y = B.synthetic_batch(w.input, 8, 4, rng)
    adapter = Lagging()
    adapter.setup("cpu")
    cfg = MeasureConfig(time_budget_s=0.01, min_time_s=0.0)
    lr, tried = R.lr_range_check(adapter, w, "fp32", NetworkOptions(), x, y, cfg)
    confirmed = [t for t in tried if "confirmed" in t]
    assert confirmed[0]["lr"] >= 0.01 and not confirmed[0]["confirmed"]["trains"], tried
    first = confirmed[0]["confirmed"]
    assert first["last_loss"] < first["first_loss"]  # its training loss fell
    assert first["inference_loss_after"] > first["inference_loss_before"]
    assert lr < 0.01 and confirmed[-1]["lr"] == lr and confirmed[-1]["confirmed"]["trains"]
    last = confirmed[-1]["confirmed"]
    assert last["inference_loss_after"] <= last["inference_loss_before"]
