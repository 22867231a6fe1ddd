"""The distributed level's arithmetic without any framework: nccl-tests' bus factors, message
sizes, the inputs and expected results of the collectives (checked against an independent
simulation), data-parallel batches, and the host-side merge of per-rank records."""

from __future__ import annotations

import copy
import itertools
import json
from typing import Any

import numpy as np
import pytest

from suite.aggregate import (
    LOG_TAIL,
    SCALING_EFFICIENCY,
    add_scaling_efficiency,
    group_by_point,
    launcher_root_cause,
    merge_ranks,
    missing_ranks_record,
    scaling_key,
)
from suite.errors import ConfigError
from suite.levels.distributed import arithmetic as B
from suite.levels.distributed import benchmarks as DB
from suite.levels.distributed import run as R
from suite.results import validate_record
from tests import synthetic

OPS = ("allreduce", "allgather", "broadcast", "reduce_scatter")
WORLDS = (2, 3, 4, 5, 8)


# -- nccl-tests' bus bandwidth factors ------------------------------------------------------------
@pytest.mark.parametrize(
    ("n", "allreduce", "gather_scatter"), [(2, 1.0, 0.5), (4, 1.5, 0.75), (8, 1.75, 0.875)]
)
def test_bus_factor_matches_nccl_tests(n: int, allreduce: float, gather_scatter: float) -> None:
    # nccl-tests doc/PERFORMANCE.md: allreduce 2(n-1)/n; allgather, reduce_scatter (n-1)/n;
    # broadcast 1
    assert B.bus_factor("allreduce", n) == allreduce == 2 * (n - 1) / n
    assert B.bus_factor("allgather", n) == gather_scatter == (n - 1) / n
    assert B.bus_factor("reduce_scatter", n) == gather_scatter
    assert B.bus_factor("broadcast", n) == 1.0


def test_bus_factor_unknown_op() -> None:
    with pytest.raises(ValueError, match="alltoall"):
        B.bus_factor("alltoall", 4)


# -- message sizes --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("op", "size", "world", "n"),
    [
        ("allreduce", 8, 2, 2),
        ("allreduce", 1, 8, 1),  # at least one element
        ("allreduce", 5, 2, 2),  # bytes round up to whole fp32 elements
        ("broadcast", 1023, 3, 256),
        ("broadcast", 8, 8, 2),  # no split: no rounding to the world
        ("allgather", 8, 2, 2),
        ("allgather", 8, 4, 4),  # 2 elements round up to one per rank
        ("allgather", 1024, 3, 258),  # 256 -> next multiple of 3
        ("reduce_scatter", 1024, 3, 258),
        ("reduce_scatter", 1, 8, 8),
        ("reduce_scatter", 1 << 20, 8, 1 << 18),  # already even: unchanged
    ],
)
def test_element_count(op: str, size: int, world: int, n: int) -> None:
    assert B.element_count(op, size, world) == n


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("world", WORLDS)
def test_element_count_never_shrinks_and_splits_evenly(op: str, world: int) -> None:
    for size in (*B.QUICK_SIZES, *B.FULL_SIZES[:6], 3, 7, 999):
        n = B.element_count(op, size, world)
        assert n * B.ITEMSIZE >= size
        assert n * B.ITEMSIZE < size + B.ITEMSIZE * world + B.ITEMSIZE
        if op in ("allgather", "reduce_scatter"):
            assert n % world == 0


def test_size_sets() -> None:
    assert B.QUICK_SIZES == [8, 1024, 65536, 1 << 20, 16 << 20]
    assert B.FULL_SIZES[0] == 8 and B.FULL_SIZES[-1] == 256 << 20 and len(B.FULL_SIZES) == 26
    assert all(b == 2 * a for a, b in itertools.pairwise(B.FULL_SIZES))


# -- inputs and expected results ------------------------------------------------------------------
def test_pattern_has_no_zeros_and_is_seeded() -> None:
    for seed in range(20):
        p = B.pattern(4097, seed)
        assert p.dtype == np.float64 and p.shape == (4097,)
        assert np.all(p != 0) and p.min() >= 1 and p.max() <= 4
        assert np.all(p == np.round(p))  # small integers: exact in any float format
        np.testing.assert_array_equal(p, B.pattern(4097, seed))
    assert not np.array_equal(B.pattern(1000, 1), B.pattern(1000, 2))
    assert set(np.unique(B.pattern(10_000, 0))) == {1.0, 2.0, 3.0, 4.0}


def simulate(op: str, inputs: list[np.ndarray], dtype: Any) -> list[np.ndarray]:
    """What each rank holds after the collective, computed by hand from every rank's input:
    a sum in rank order, a rank-ordered concatenation, chunks of the sum, rank 0's copy."""
    world = len(inputs)
    x = [a.astype(dtype) for a in inputs]
    if op == "allreduce":
        total = x[0].copy()
        for a in x[1:]:
            total = (total + a).astype(dtype)
        return [total.copy() for _ in range(world)]
    if op == "allgather":
        return [np.concatenate(x) for _ in range(world)]
    if op == "broadcast":
        return [x[0].copy() for _ in range(world)]
    if op == "reduce_scatter":
        total = x[0].copy()
        for a in x[1:]:
            total = (total + a).astype(dtype)
        chunks = np.split(total, world)
        return [chunks[r] for r in range(world)]
    raise ValueError(op)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("world", WORLDS)
@pytest.mark.parametrize("size", [8, 1000, 65536])
def test_expected_matches_an_independent_simulation(op: str, world: int, size: int) -> None:
    n = B.element_count(op, size, world)
    seed = 17 + size
    inputs = [B.rank_input(op, n, r, world, seed) for r in range(world)]
    if op == "allgather":
        assert all(a.shape == (n // world,) for a in inputs)
    else:
        assert all(a.shape == (n,) for a in inputs)
    for dtype in (np.float64, np.float32):
        got = simulate(op, inputs, dtype)
        for r in range(world):
            want = B.expected(op, n, r, world, seed)
            assert want.shape == got[r].shape
            # exact: every value is a small integer, so fp32 sums are exact in any order
            np.testing.assert_array_equal(got[r].astype(np.float64), want)
            np.testing.assert_array_equal(want.astype(np.float32).astype(np.float64), want)


@pytest.mark.parametrize("world", WORLDS)
def test_fp32_sums_are_exact_in_any_order(world: int) -> None:
    n, seed = 4096, 3
    inputs = [B.rank_input("allreduce", n, r, world, seed).astype(np.float32) for r in range(world)]
    want = B.expected("allreduce", n, 0, world, seed)
    assert want.max() < 2**24  # integers below 2^24 are exact in fp32
    rng = np.random.default_rng(0)
    for _ in range(5):
        order = rng.permutation(world)
        acc = np.zeros(n, dtype=np.float32)
        for r in order:
            acc += inputs[r]
        np.testing.assert_array_equal(acc.astype(np.float64), want)
    # a tree (pairwise) reduction, as ring/tree algorithms do
    level = list(inputs)
    while len(level) > 1:
        level = [
            level[i] + level[i + 1] if i + 1 < len(level) else level[i]
            for i in range(0, len(level), 2)
        ]
    np.testing.assert_array_equal(level[0].astype(np.float64), want)


@pytest.mark.parametrize("op", OPS)
def test_a_wrong_collective_is_caught(op: str) -> None:
    """The value check can fail: a collective that leaves its input alone, or hands every rank
    rank 0's data, does not produce the expected values."""
    world, n, seed = 4, B.element_count(op, 4096, 4), 5
    for r in range(world):
        want = B.expected(op, n, r, world, seed)
        mine = B.rank_input(op, n, r, world, seed)
        if op == "broadcast" and r == 0:
            continue  # the root's own buffer is the answer
        assert mine.shape != want.shape or np.count_nonzero(mine != want) > 0
    if op == "broadcast":  # non-roots hold a sentinel no pattern value equals
        assert np.all(B.rank_input(op, n, 1, world, seed) == -1.0)
    if op == "reduce_scatter":  # rank r's chunk, not rank 0's
        assert not np.array_equal(
            B.expected(op, n, 0, world, seed), B.expected(op, n, 1, world, seed)
        )


# -- data-parallel batches ------------------------------------------------------------------------
def test_batches_strong_and_weak() -> None:
    strong, weak = {"scaling": "strong", "batch": 64}, {"scaling": "weak", "batch": 64}
    assert B.data_parallel_batches(strong, 1) == (64, 64)
    assert B.data_parallel_batches(strong, 2) == (64, 32)
    assert B.data_parallel_batches(strong, 8) == (64, 8)
    assert B.data_parallel_batches(weak, 1) == (64, 64)
    assert B.data_parallel_batches(weak, 4) == (256, 64)


def test_strong_batch_must_split_evenly() -> None:
    with pytest.raises(ConfigError, match="multiple of 4") as err:
        B.data_parallel_batches({"scaling": "strong", "batch": 10}, 4)
    assert "data_parallel.batch" in str(err.value) and "10" in str(err.value)
    assert B.data_parallel_batches({"scaling": "weak", "batch": 10}, 4) == (40, 10)


def test_data_parallel_validate() -> None:
    dp = DB.DataParallel()
    p = dp.validate({"network": "mlp", "scaling": "strong", "batch": 64})
    assert p["scaling"] == "strong" and p["batch"] == 64 and p["lr"] > 0
    for bad, word in (
        ({"network": "mlp", "scaling": "linear", "batch": 8}, "scaling"),
        ({"network": "mlp", "batch": 0}, "batch"),
        ({"network": "mlp", "batch": True}, "batch"),
        ({"batch": 8}, "network"),
        ({"network": "mlp", "batch": 8, "lr": -1}, "lr"),
    ):
        with pytest.raises(ConfigError, match=word):
            dp.validate(bad)


def test_collective_validate() -> None:
    c = DB.AllReduce()
    assert c.validate({"sizes": [1024, 8, 1024]}) == {"sizes": [8, 1024]}
    bads: list[dict[str, Any]] = [
        {"sizes": []},
        {"sizes": [0]},
        {"sizes": [True]},
        {"sizes": 8},
        {"n": 1},
    ]
    for bad in bads:
        with pytest.raises(ConfigError):
            c.validate(bad)
    assert c.label({"message_bytes": 1 << 20}) == "1 MiB"
    assert c.label({"sizes": [8, 16 << 20]}) == "2 sizes 8 B..16 MiB"


def test_a_collective_the_adapter_declares_is_skipped_on_the_host(tmp_path: Any) -> None:
    """`dlsuite run --level distributed --framework mxnet --benchmark broadcast` started two
    ranks, a kvstore scheduler and server (7-8 s on this VM) for a record that said MXNet has
    no broadcast; JAX's emulated broadcast and MXNet's emulated allgather the same. What the
    adapter class declares is now known on the host: the task is skipped before any
    environment or rank, with the declaration as its reason."""
    from suite import plan
    from suite.adapters import ADAPTERS
    from suite.config import resolve
    from suite.runner import level_not_run

    cfg = resolve({"quick": True, "level": ["distributed"], "backend": "venv",
                   "envs_dir": str(tmp_path), "frameworks": ["mxnet", "jax", "tensorflow"],
                   "benchmarks": ["allreduce", "allgather", "broadcast", "reduce_scatter"]},
                  env={})  # fmt: skip
    why = {(t.framework, t.benchmark): level_not_run(t) for t in plan.build(cfg)}
    mxnet, jax = ADAPTERS.load("mxnet"), ADAPTERS.load("jax")
    assert why.pop(("mxnet", "broadcast")) == mxnet.unsupported_collectives["broadcast"]
    assert why.pop(("mxnet", "allgather")).startswith("mxnet: the kvstore only sums")
    assert why.pop(("jax", "broadcast")) == jax.emulated_collectives["broadcast"]
    assert why == {key: "" for key in why} and len(why) == 9, why  # the rest run
    # the worker's check is the same function (a task that reaches a rank all the same)
    assert R.collective_declined(mxnet, "broadcast").startswith(
        "the kvstore dist_sync has no broadcast"
    )


# -- merging the ranks' records -------------------------------------------------------------------
def rank_records(busbw: list[float], name: str = "allreduce", size: int = 1 << 20) -> list[Any]:
    recs = []
    for r, bw in enumerate(busbw):
        rec = synthetic.collective_record(name, size, world_size=len(busbw), busbw_gbps=bw, rank=r)
        rec["host"] = f"node{r // 2:02d}"
        rec["duration_s"] = 1.0 + r
        rec["work"] = {"dist_backend": "nccl", "bytes": size}
        rec["telemetry"]["host"] = {"rank": r}
        recs.append(rec)
    return recs


def metric(rec: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(m for m in rec["metrics"] if m["name"] == name)
    return found


def test_merge_keeps_the_worst_rank_per_direction() -> None:
    recs = rank_records([100.0, 80.0, 120.0, 90.0])
    merged = merge_ranks(list(reversed(recs)), 4, "torchrun")  # any order in
    validate_record(merged)
    assert merged["status"] == "ok" and merged["rank"] is None
    busbw, algbw, t = metric(merged, "busbw"), metric(merged, "algbw"), metric(merged, "time")
    # higher is better: the lowest rank's value; lower is better: the highest
    assert busbw["value"] == pytest.approx(80.0)
    assert busbw["across_ranks"]["worst_rank"] == 1
    assert busbw["across_ranks"]["min"] == pytest.approx(80.0)
    assert busbw["across_ranks"]["max"] == pytest.approx(120.0)
    assert busbw["across_ranks"]["median"] == pytest.approx(95.0)  # mean of 90 and 100
    assert t["across_ranks"]["worst_rank"] == 1
    assert t["value"] == max(metric(r, "time")["value"] for r in recs)
    assert t["median"] == metric(recs[1], "time")["median"]  # the worst rank's statistics
    assert algbw["value"] == min(metric(r, "algbw")["value"] for r in recs)
    assert merged["duration_s"] == 4.0  # the slowest rank
    d = merged["distributed"]
    assert (d["world_size"], d["launcher"], d["backend"]) == (4, "torchrun", "nccl")
    assert d["nodes"] == ["node00", "node01"]
    assert [r["rank"] for r in d["ranks"]] == [0, 1, 2, 3]
    assert merged["telemetry"]["host"] == {"per_rank": [{"rank": r} for r in range(4)]}


def test_merge_names_each_ranks_slurm_node() -> None:
    """Two Slurm nodes on one host (the local cluster): the host names agree, the ranks' own
    job sections (SLURMD_NODENAME) tell the nodes apart."""
    recs = rank_records([100.0, 90.0])
    for r, rec in enumerate(recs):
        rec["host"] = "samehost"
        rec["scheduler"] = {"kind": "slurm", "job_id": "7", "nodelist": "node[1-2]",
                            "node": f"node{r + 1}"}  # fmt: skip
    merged = merge_ranks(recs, 2, "srun")
    validate_record(merged)
    assert merged["distributed"]["nodes"] == ["samehost"]
    assert [(r["rank"], r["node"]) for r in merged["distributed"]["ranks"]] == [
        (0, "node1"), (1, "node2"),
    ]  # fmt: skip
    spawned = merge_ranks(rank_records([1.0, 1.0]), 2, "spawn")  # no scheduler: no node
    assert all("node" not in r for r in spawned["distributed"]["ranks"])


def test_merge_prefixes_checks_with_the_rank() -> None:
    recs = rank_records([100.0, 100.0])
    recs[1]["correctness"]["checks"][0].update(error=3.0, passed=False)
    recs[1]["correctness"]["passed"] = False
    merged = merge_ranks(recs, 2, "mpirun")
    validate_record(merged)
    names = [c["name"] for c in merged["correctness"]["checks"]]
    assert names == ["rank0.value_vs_expected", "rank1.value_vs_expected"]
    assert merged["correctness"]["passed"] is False
    assert merged["status"] == "ok"  # it ran; the values were wrong


def test_merge_does_not_touch_its_input() -> None:
    recs = rank_records([100.0, 50.0])
    before = copy.deepcopy(recs)
    merge_ranks(recs, 2, "torchrun")
    assert recs == before


def test_a_failed_rank_fails_the_merged_record() -> None:
    recs = rank_records([100.0, 100.0, 100.0])
    bad = recs[2]
    for key in ("metrics", "correctness", "measurement"):
        bad.pop(key)
    bad.update(
        status="failed",
        reason="RuntimeError: Connection closed by peer",
        error={"type": "RuntimeError", "message": "Connection closed by peer"},
    )
    merged = merge_ranks(recs, 3, "torchrun")
    validate_record(merged)
    assert merged["status"] == "failed"
    assert merged["reason"] == "rank 2: RuntimeError: Connection closed by peer"
    assert merged["error"]["type"] == "RuntimeError"
    assert "metrics" not in merged and "correctness" not in merged
    assert [r["status"] for r in merged["distributed"]["ranks"]] == ["ok", "ok", "failed"]


def test_a_point_without_every_rank_is_not_ok() -> None:
    """Rank 1 failed the whole sweep (one record with the task's parameters) while rank 0
    measured every point: no point was measured by both ranks."""
    ok0 = rank_records([100.0, 100.0])[0]
    failed1 = synthetic.failed_record("allreduce", world_size=2)
    failed1.update(rank=1, benchmark={**failed1["benchmark"], "level": "distributed"})
    failed1["benchmark"]["params"] = {"sizes": [1 << 20]}
    groups = group_by_point([ok0, failed1])
    assert len(groups) == 2
    merged = [merge_ranks(g, 2, "torchrun") for g in groups.values()]
    for rec in merged:
        validate_record(rec)
    by_params = {json.dumps(r["benchmark"]["params"], sort_keys=True): r for r in merged}
    point = by_params[json.dumps({"message_bytes": 1 << 20})]
    assert point["status"] == "failed"
    assert "rank(s) [1]" in point["reason"] and "metrics" not in point
    sweep = by_params[json.dumps({"sizes": [1 << 20]})]
    assert sweep["status"] == "failed" and sweep["reason"].startswith("rank 1:")


def test_group_by_point() -> None:
    recs = rank_records([1.0, 2.0], size=8) + rank_records([1.0, 2.0], size=1024)
    groups = group_by_point(recs)
    assert len(groups) == 2
    assert all(sorted(r["rank"] for r in g) == [0, 1] for g in groups.values())


TORCHRUN_TAIL = """\
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
=======================================================
suite.worker FAILED
-------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-22_16:12:43
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 22928)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 22928
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-22_16:12:43
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 22929)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 22929
=======================================================
"""
MPIRUN_SIGNAL_TAIL = (
    "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).\n"
)
MPIRUN_STATUS_TAIL = """\
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[47361,1],1]
  Exit code:    3
"""


def test_launcher_root_cause() -> None:
    assert launcher_root_cause(TORCHRUN_TAIL) == "torchrun saw rank 1 fail first (SIGKILL)"
    plain = TORCHRUN_TAIL.replace("  (SIGKILL)", "").replace("-9 (pid", "2 (pid")
    assert launcher_root_cause(plain) == "torchrun saw rank 1 fail first (exit code 2)"
    assert launcher_root_cause(MPIRUN_SIGNAL_TAIL) == "mpirun saw rank 1 exit on signal 9"
    assert launcher_root_cause(MPIRUN_STATUS_TAIL) == "mpirun saw rank 1 exit with code 3"
    assert launcher_root_cause("Traceback ...\nValueError: x\n") is None


@pytest.mark.parametrize(
    ("tail", "cause"),
    [
        (TORCHRUN_TAIL, "torchrun saw rank 1 fail first (SIGKILL)"),
        (MPIRUN_SIGNAL_TAIL, "mpirun saw rank 1 exit on signal 9"),
        ("", None),
    ],
)
def test_missing_ranks_record(tail: str, cause: str | None) -> None:
    how = "the launcher exited with code 1"
    skeleton = synthetic.failed_record("allreduce", world_size=4)
    skeleton["error"] = {
        "type": "WorkerDied",
        "message": how + (LOG_TAIL + tail if tail else ""),
        "log": "logs/t.log",
    }
    rec = missing_ranks_record(skeleton, {0, 2}, 4, how + " (a rank crashed or was killed)")
    validate_record(rec)
    assert rec["status"] == "failed"
    assert rec["reason"].startswith(
        "rank(s) [1, 3] wrote no record: the launcher exited with code 1 (a rank crashed"
    )
    assert "\n" not in rec["reason"]
    if cause:
        assert rec["reason"].endswith("; " + cause)
    assert rec["error"]["type"] == "RankFailed"
    assert rec["error"]["log"] == "logs/t.log"  # the log stays findable
    assert rec["error"]["message"].startswith(rec["reason"])
    assert rec["error"]["message"].endswith(tail)
    assert skeleton["error"]["type"] == "WorkerDied"  # the skeleton is not modified


# -- scaling efficiency ---------------------------------------------------------------------------
def dp_record(world: int, throughput: float, status: str = "ok") -> dict[str, Any]:
    rec = synthetic.scaling_record("data_parallel", world_size=world, throughput=throughput)
    rec["metrics"] = [m for m in rec["metrics"] if m["name"] != "scaling_efficiency"]
    rec["metrics"][1] = synthetic.THROUGHPUT.entry(synthetic.samples(throughput))
    rec["task_id"] = f"dp-w{world}"
    rec["work"] = {}
    if status != "ok":
        rec["status"] = status
    return rec


@pytest.mark.parametrize(
    ("world", "tp_n", "tp_1", "eff"), [(2, 1800.0, 1000.0, 90.0), (4, 3000.0, 1000.0, 75.0)]
)
def test_scaling_efficiency(world: int, tp_n: float, tp_1: float, eff: float) -> None:
    rec, base = dp_record(world, tp_n), dp_record(1, tp_1)
    add_scaling_efficiency(rec, base)
    validate_record(rec)
    m = metric(rec, "scaling_efficiency")
    assert m["value"] == pytest.approx(eff) == pytest.approx(100 * tp_n / (world * tp_1))
    assert (m["unit"], m["higher_is_better"]) == ("%", True)
    assert m["unit"] == SCALING_EFFICIENCY.unit
    assert rec["work"]["scaling_baseline_task_id"] == "dp-w1"


def test_scaling_efficiency_carries_the_interval_of_both_throughputs() -> None:
    """Both throughputs it divides have a 95% interval of the median; the efficiency had none.
    It gets the ratio's ends at the ends of both (the report's rule), and says how."""
    two, one = dp_record(2, 1500.0), dp_record(1, 1000.0)
    metric(two, "throughput")["ci95"] = [1400.0, 1560.0]
    metric(one, "throughput")["ci95"] = [950.0, 1040.0]
    add_scaling_efficiency(two, one)
    validate_record(two)
    m = metric(two, "scaling_efficiency")
    assert m["value"] == pytest.approx(75.0)
    lo, hi = m["ci95"]
    assert lo == pytest.approx(100 * 1400 / (2 * 1040)) and hi == pytest.approx(
        100 * 1560 / (2 * 950)
    )
    assert lo < m["value"] < hi
    how = two["work"]["scaling_efficiency_interval"]
    assert "low end over 1 rank's high end" in how and "0.95^2" in how
    # a throughput without an interval (one sample): none, and the record says which
    bare = dp_record(4, 2000.0)
    del metric(bare, "throughput")["ci95"]
    for k in ("median", "mean", "min", "max", "p5", "p95", "iqr", "n", "p99"):
        metric(bare, "throughput").pop(k, None)
    add_scaling_efficiency(bare, one)
    validate_record(bare)
    assert "ci95" not in metric(bare, "scaling_efficiency")
    assert bare["work"]["scaling_efficiency_interval"] == (
        "none: the 4 ranks' throughput has no interval"
    )


def test_scaling_efficiency_without_a_baseline() -> None:
    for base in (None, dp_record(1, 1000.0, status="failed")):
        rec = dp_record(2, 1800.0)
        add_scaling_efficiency(rec, base)
        assert "scaling_efficiency" not in [m["name"] for m in rec["metrics"]]
        assert "1-rank" in rec["work"]["scaling_efficiency_unavailable"]


def test_scaling_efficiency_only_for_ok_multi_rank_records() -> None:
    one = dp_record(1, 1000.0)
    add_scaling_efficiency(one, dp_record(1, 1000.0))
    assert "scaling_efficiency" not in [m["name"] for m in one["metrics"]]
    assert one["work"] == {}


def test_scaling_key_pairs_the_same_point_across_world_sizes() -> None:
    a, b = dp_record(1, 1000.0), dp_record(2, 1800.0)
    assert scaling_key(a) == scaling_key(b)
    c = copy.deepcopy(b)
    c["benchmark"]["params"] = {**c["benchmark"]["params"], "batch_per_rank": 64}
    assert scaling_key(c) != scaling_key(a)


def test_one_1_rank_record_is_the_baseline_of_both_scalings() -> None:
    """At 1 rank strong and weak scaling at a batch are one configuration, measured once (the
    plan keeps the first): a strong 2-rank record finds a weak 1-rank baseline and the other
    way round; a different batch or network does not."""
    weak_one = dp_record(1, 1000.0)
    weak_one["benchmark"]["params"] = {"network": "mlp", "hidden": 96, "scaling": "weak",
                                       "batch": 36}  # fmt: skip
    strong_two = dp_record(2, 1500.0)
    strong_two["benchmark"]["params"] = {**weak_one["benchmark"]["params"], "scaling": "strong"}
    assert scaling_key(weak_one) == scaling_key(strong_two)
    add_scaling_efficiency(
        strong_two, {scaling_key(weak_one): weak_one}.get(scaling_key(strong_two))
    )
    assert metric(strong_two, "scaling_efficiency")["value"] == pytest.approx(75.0)
    other = copy.deepcopy(strong_two)
    other["benchmark"]["params"]["batch"] = 72
    assert scaling_key(other) != scaling_key(weak_one)


def test_a_users_rate_is_the_smallest_any_rank_chose_and_a_failure_reaches_every_rank(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """data_parallel on a user's file without an lr: each rank's range check, then one
    agreement (the max of the candidates' indices: the smallest rate). A rank whose shard no
    rate trains still takes part in the agreement, so that no rank waits on it, and every rank
    fails."""
    from suite.levels.distributed import run as R
    from suite.levels.network.run import LR_CANDIDATES

    def chose(lr: float | None) -> Any:
        def check(*args: Any, **kwargs: Any) -> tuple[float, list[Any]]:
            if lr is None:
                raise RuntimeError("no learning rate of this shard")
            return lr, [{"lr": lr}]

        return check

    heard: list[int] = []

    def agree_with(other: int) -> Any:
        def agree(mine: int) -> int:
            heard.append(mine)
            return max(mine, other)

        return agree

    args = (None, None, None, None, None)
    monkeypatch.setattr(R, "lr_range_check", chose(0.01))
    lr, said = R._user_lr(*args, agree_with(LR_CANDIDATES.index(0.001)))
    assert (lr, said["chosen"], said["this_rank_chose"]) == (0.001, 0.001, 0.01)
    assert R._user_lr(*args, None)[0] == 0.01  # one rank: its own
    with pytest.raises(RuntimeError, match="another rank's shard.*distributed.data_parallel"):
        R._user_lr(*args, agree_with(len(LR_CANDIDATES)))
    monkeypatch.setattr(R, "lr_range_check", chose(None))
    heard.clear()
    with pytest.raises(RuntimeError, match="no learning rate of this shard"):
        R._user_lr(*args, agree_with(0))
    assert heard == [len(LR_CANDIDATES)]


def test_a_stopped_sweep_leaves_the_sizes_it_did_not_measure() -> None:
    """What a sweep stopped by its timeout still owes: the sizes no kept point names (by the
    size asked for; a record from before ``requested_bytes`` by its ``message_bytes``)."""
    bench = DB.AllGather()
    params = {"sizes": [96, 8, 4096, 1 << 20]}
    done = [{"message_bytes": 8, "elements": 2, "requested_bytes": 8}, {"message_bytes": 96}]
    assert bench.remaining(params, done) == {"sizes": [4096, 1 << 20]}
    assert bench.remaining(params, []) == params
    every = [{"requested_bytes": s, "message_bytes": s + 4} for s in params["sizes"]]
    assert bench.remaining(params, every) is None
    assert bench.label({"sizes": [4096]}) == "1 size 4 KiB"
    # a benchmark of one record: any point written is the whole task
    dp = DB.DataParallel()
    assert dp.remaining({"network": "mlp"}, []) == {"network": "mlp"}
    assert dp.remaining({"network": "mlp"}, [{"network": "mlp"}]) is None
