"""Conformance, distributed part: the adapter's distributed words give the right values on 2
real ranks (started by the suite's spawn launcher, so no framework-specific launcher is needed),
and data-parallel training keeps the ranks' weights identical and equal to one-process training.
An adapter without the distributed words must have every distributed task skipped with a reason
(then the test is reported skipped with it).

Runs in whichever interpreter runs the kit, so inside a framework's own environment too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from suite import summary
from suite.adapters import ADAPTERS
from suite.levels.distributed.run import collective_declined
from tests.conformance.test_adapters import ADAPTER_NAMES, skip_declared
from tests.helpers import FAST_MEASURE, ROOT, cli, records

COLLECTIVES = "allreduce,allgather,broadcast,reduce_scatter"


#: the quick MLP's two sizes and the strong one again in buckets of 64 KiB (its 104 KB of
#: gradients in two messages)
MLP = '{ network = "mlp", features = 64, hidden = 128, layers = 2, classes = 10, batch = 48'
DATA_PARALLEL = (
    f'[distributed.data_parallel]\nsizes = [{MLP}, scaling = "strong" }}, '
    f'{MLP}, scaling = "weak" }}, {MLP}, scaling = "strong", bucket = 65536 }}]\n'
)


@pytest.mark.parametrize("name", ADAPTER_NAMES)
def test_collectives_and_data_parallel_on_two_ranks(name: str, tmp_path: Path) -> None:
    """... and data_parallel's ``bucket`` runs the adapter's own bucketing where it declares one
    (``data_parallel_buckets``), with the same check against one process; elsewhere it is
    skipped, saying so."""
    out = tmp_path / "run"
    config = tmp_path / "kit.toml"
    config.write_text(FAST_MEASURE.read_text(encoding="utf-8") + DATA_PARALLEL, encoding="utf-8")
    proc = cli(
        "run", "--level", "distributed", "--framework", name, "--backend", "local",
        "--launcher", "spawn", "--world-size", "2", "--quick", "--network", "mlp",
        "--benchmark", f"{COLLECTIVES},data_parallel", "--config", str(config),
        "--out", str(out), "--timeout", "240", timeout=900,
    )  # fmt: skip
    recs = records(out)
    assert recs, proc.stderr[-3000:]
    if "distributed" not in ADAPTERS.load(name).words:
        assert {r["status"] for r in recs} == {"skipped"}, [r["reason"] for r in recs]
        assert all("distributed words" in r["reason"] for r in recs)
        skip_declared(recs[0]["reason"])
    # a collective the framework lacks on this device may be declared (skipped, with a
    # reason); allreduce and data-parallel training are what the level cannot do without
    bad = [
        (r["benchmark"]["name"], r["status"], r.get("reason"))
        for r in recs
        if r["status"] not in ("ok", "skipped")
        or (r["status"] == "skipped" and not r.get("reason"))
    ]
    assert not bad, (bad, proc.stderr[-3000:])
    # a collective the class declares (emulated, or no word) is skipped on the host, with the
    # declaration: no rank started for it (a rank's reason would begin "rank 0:")
    cls = ADAPTERS.load(name)
    for r in recs:
        op = r["benchmark"]["name"]
        why = collective_declined(cls, op) if op in COLLECTIVES.split(",") else ""
        if why:
            assert (r["status"], r["reason"]) == ("skipped", why), r
    ok = [r for r in recs if r["status"] == "ok"]
    # A wrong value fails the kit, unless every failed check names the bug the adapter
    # declares for that collective (``known_bugs``: a framework's own bug, which the suite
    # must report, not hide; jax's reduce-scatter on CPUs is one).
    declared = ADAPTERS.load(name).known_bugs
    wrong = [
        (r["benchmark"]["name"], r["benchmark"]["params"], r["correctness"])
        for r in ok
        if not r["correctness"]["passed"]
        and summary.known_bugs(r) != [declared.get(r["benchmark"]["name"])]
    ]
    assert not wrong, wrong
    assert {r["benchmark"]["name"] for r in recs} == set(COLLECTIVES.split(",")) | {"data_parallel"}
    assert {"allreduce", "data_parallel"} <= {r["benchmark"]["name"] for r in ok}
    multi = [r for r in ok if r["world_size"] == 2]
    assert any(r["benchmark"]["name"] == "data_parallel" for r in multi), "no 2-rank training"
    assert {r["distributed"]["launcher"] for r in multi} == {"spawn"}
    bucketed = [r for r in recs if r["benchmark"]["params"].get("bucket")]
    assert sorted(r["world_size"] for r in bucketed) == [1, 2], bucketed
    mechanism = ADAPTERS.load(name).data_parallel_buckets
    for r in bucketed:
        if mechanism:
            assert r["status"] == "ok" and r["correctness"]["passed"], (r.get("reason"), r)
            assert r["work"]["bucket_bytes"] == 65536
            assert r["work"]["bucket_mechanism"] == mechanism
            if name.startswith("horovod") and r["world_size"] == 2:  # for hvd.init(), not after
                assert r["work"]["horovod_fusion_threshold_bytes"] == 65536, r["work"]
                assert r["work"]["horovod_fusion_threshold_from"] == "bucket", r["work"]
        else:
            assert r["status"] == "skipped" and "no bucket size to set" in r["reason"], r


STRATEGIES_KIT = ROOT / "tests" / "strategies-kit.toml"


@pytest.mark.parametrize("name", ADAPTER_NAMES)
def test_declared_strategies_run_and_the_rest_are_skipped_with_their_reason(
    name: str, tmp_path: Path
) -> None:
    """Every strategy of the suite on 2 ranks (spawn): a strategy the adapter maps runs its
    mechanism and converges (ok, every check passed, compared with the allreduce record of the
    run); one it declares unsupported is skipped with exactly the declared reason; a mapped one
    may still be skipped on this device if its framework refuses it here, with a reason."""
    from suite import strategies as S

    out = tmp_path / "run"
    proc = cli(
        "run", "--level", "distributed", "--framework", name, "--backend", "local",
        "--launcher", "spawn", "--world-size", "2", "--quick", "--benchmark", "strategies",
        "--config", str(STRATEGIES_KIT), "--out", str(out), "--timeout", "600", timeout=3600,
    )  # fmt: skip
    recs = records(out)
    assert recs, proc.stderr[-3000:]
    cls = ADAPTERS.load(name)
    by_strategy = {r["benchmark"]["params"]["strategy"]: r for r in recs}
    assert set(by_strategy) == set(S.STRATEGIES), sorted(by_strategy)
    if "distributed" not in cls.words:
        assert {r["status"] for r in recs} == {"skipped"}, [r["reason"] for r in recs]
        assert all("distributed words" in r["reason"] for r in recs)
        skip_declared(recs[0]["reason"])
    for strategy, rec in by_strategy.items():
        if strategy not in cls.strategies:
            assert rec["status"] == "skipped", (strategy, rec["status"], rec.get("reason"))
            assert rec["reason"] == cls.unsupported_strategies[strategy]
            continue
        if rec["status"] == "skipped":  # mapped, refused by the framework on this device
            assert rec.get("reason"), strategy
            continue
        assert rec["status"] == "ok", (strategy, rec.get("reason"), proc.stderr[-2000:])
        assert rec["correctness"]["passed"], (strategy, rec["correctness"])
        section = rec["strategy"]
        assert section["mechanism"] == cls.strategies[strategy]
        names = {m["name"] for m in rec["metrics"]}
        assert {"throughput", "throughput_per_rank", "bytes_per_step", "final_accuracy",
                "time_to_accuracy", "steps_to_target", "distance_from_sync"} <= names, names  # fmt: skip
        assert (S.get(strategy).compression is not None) == ("compression_ratio" in names)
        if strategy == S.BASELINE:
            assert "vs_baseline" not in section
        else:
            vs = section["vs_baseline"]
            assert vs["baseline_task_id"] == by_strategy[S.BASELINE]["task_id"]
            assert vs["throughput_ratio"] > 0 and vs["time_to_accuracy_ratio"] > 0
    assert by_strategy[S.BASELINE]["status"] == "ok", "the allreduce baseline must run"
