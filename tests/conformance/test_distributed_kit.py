"""Conformance, distributed part: the adapter's distributed words give the right values on 2
real ranks (started by the suite's spawn launcher, so no framework-specific launcher is needed),
and data-parallel training keeps the ranks' weights identical and equal to one-process training.
An adapter without the distributed words must have every distributed task skipped with a reason.

Runs in whichever interpreter runs the kit, so inside a framework's own environment too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from suite.adapters import ADAPTERS
from tests.conformance.test_adapters import ADAPTER_NAMES
from tests.helpers import FAST_MEASURE, cli, records

COLLECTIVES = "allreduce,allgather,broadcast,reduce_scatter"


@pytest.mark.parametrize("name", ADAPTER_NAMES)
def test_collectives_and_data_parallel_on_two_ranks(name: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = cli(
        "run", "--level", "distributed", "--framework", name, "--backend", "local",
        "--launcher", "spawn", "--world-size", "2", "--quick", "--network", "mlp",
        "--benchmark", f"{COLLECTIVES},data_parallel", "--config", str(FAST_MEASURE),
        "--out", str(out), "--timeout", "240", timeout=900,
    )  # fmt: skip
    recs = records(out)
    assert recs, proc.stderr[-3000:]
    if "distributed" not in ADAPTERS.load(name).words:
        assert {r["status"] for r in recs} == {"skipped"}, [r["reason"] for r in recs]
        assert all("distributed" in r["reason"] for r in recs)
        return
    # a collective the framework lacks on this device may be declared (skipped, with a
    # reason); allreduce and data-parallel training are what the level cannot do without
    bad = [
        (r["benchmark"]["name"], r["status"], r.get("reason"))
        for r in recs
        if r["status"] not in ("ok", "skipped")
        or (r["status"] == "skipped" and not r.get("reason"))
    ]
    assert not bad, (bad, proc.stderr[-3000:])
    ok = [r for r in recs if r["status"] == "ok"]
    wrong = [
        (r["benchmark"]["name"], r["benchmark"]["params"], r["correctness"])
        for r in ok
        if not r["correctness"]["passed"]
    ]
    assert not wrong, wrong
    assert {r["benchmark"]["name"] for r in recs} == set(COLLECTIVES.split(",")) | {"data_parallel"}
    assert {"allreduce", "data_parallel"} <= {r["benchmark"]["name"] for r in ok}
    multi = [r for r in ok if r["world_size"] == 2]
    assert any(r["benchmark"]["name"] == "data_parallel" for r in multi), "no 2-rank training"
    assert {r["distributed"]["launcher"] for r in multi} == {"spawn"}
