"""An input pipeline's headline (the median of its windows' rates) beside its epoch's steady
rate: where one large image or a stall makes the epoch slower than the median's interval says
(a user's folder: median 241.5 samples/s, epoch 69.7), the run's table and the report say so."""

from __future__ import annotations

from typing import Any

from rich.console import Console

from suite import summary
from suite.metrics import Check
from suite.metrics.performance import BATCH_TIME, THROUGHPUT
from tests.synthetic import CPU, _ok_fields, base


def loader(window_rates: list[float], steady: float) -> dict[str, Any]:
    rec = base(level="training", name="loader",
               params={"format": "folder", "workers": 1, "batch": 8, "cache": "cold"})  # fmt: skip
    _ok_fields(rec, CPU, [Check("exactly_once_per_epoch", 0.0, 0.0)])
    rec["metrics"] = [
        THROUGHPUT.entry(window_rates),
        BATCH_TIME.entry([8 / r for r in window_rates]),
    ]
    rec["pipeline"] = {"epoch": {"steady_rate": steady}}
    return rec


def test_an_epoch_slower_than_the_windows_median_is_shown_beside_it() -> None:
    fast = [240.0 + i for i in range(12)] + [20.0]  # one window with the 3000x2000 JPEG
    rec = loader(fast, 69.7)
    assert summary.steady_label(rec) == " (epoch 69.7)"
    console = Console(width=250, record=True)
    console.print(summary.table([rec]))
    assert "samples/s (epoch 69.7)" in console.export_text()
    # an epoch inside the median's interval: nothing to add
    assert summary.steady_label(loader([100.0 + i for i in range(13)], 104.0)) == ""
    # a record of another kind (no pipeline): nothing
    assert summary.steady_label({"metrics": [THROUGHPUT.entry(fast)]}) == ""
