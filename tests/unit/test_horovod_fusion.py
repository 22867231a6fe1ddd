"""Horovod's fusion threshold as data_parallel's bucket: Horovod reads HOROVOD_FUSION_THRESHOLD
once, as ``hvd.init()`` starts its background thread, so the bucket must be in the environment
for the init and nowhere after it. The real run (Horovod's fused allreduces of the bucket's
size, checked against one process) is the conformance kit's bucketed MLP in the horovod
environments (tests/conformance/test_distributed_kit.py); here, what the suite's side does
around the init, with an object standing in for ``hvd`` that reads the environment when
``init`` is called."""

from __future__ import annotations

import os

import pytest

from suite.adapters.horovod import rendezvous as R


class _Init:
    """Stands in for ``horovod.torch``: remembers the threshold its init saw."""

    def __init__(self) -> None:
        self.seen: str | None = "never called"

    def init(self) -> None:
        self.seen = os.environ.get(R.FUSION_THRESHOLD)

    def is_initialized(self) -> bool:
        return True

    def size(self) -> int:
        return 1


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    # as under horovodrun: the rendezvous is not this rank's to host
    monkeypatch.setenv(R.RENDEZVOUS_ADDR, "127.0.0.1")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.delenv(R.FUSION_THRESHOLD, raising=False)
    monkeypatch.delenv(R.CYCLE_TIME, raising=False)
    return monkeypatch


def test_the_bucket_is_in_the_environment_for_the_init_only(env: pytest.MonkeyPatch) -> None:
    hvd = _Init()
    R.join(hvd, "auto", 1 << 20)
    assert hvd.seen == str(1 << 20)
    assert R.FUSION_THRESHOLD not in os.environ  # not left for the next task's init
    assert R.fusion_in_effect(1 << 20) == {
        "horovod_fusion_threshold_bytes": 1 << 20,
        "horovod_fusion_threshold_from": "bucket",
        "horovod_cycle_ms": 1.0,
        "horovod_cycle_from": "default",
    }


def test_a_users_threshold_is_put_back_and_recorded_where_no_bucket_is_set(
    env: pytest.MonkeyPatch,
) -> None:
    env.setenv(R.FUSION_THRESHOLD, "33554432")
    env.setenv(R.CYCLE_TIME, "3.5")
    hvd = _Init()
    R.join(hvd, "auto", 65536)  # the task's bucket wins for its init ...
    assert hvd.seen == "65536"
    assert os.environ[R.FUSION_THRESHOLD] == "33554432"  # ... and the user's is back after
    R.join(hvd, "auto")
    assert hvd.seen == "33554432"
    got = R.fusion_in_effect(None)
    assert got["horovod_fusion_threshold_bytes"] == 33554432
    assert got["horovod_fusion_threshold_from"].startswith("environment")
    assert (got["horovod_cycle_ms"], got["horovod_cycle_from"].startswith("environment")) == (
        3.5,
        True,
    )


@pytest.mark.parametrize(
    ("text", "read"),
    [("64MB", 64), (" 1048576 ", 1048576), ("none", 0), ("-1", -1)],
)
def test_a_malformed_threshold_is_recorded_as_horovod_reads_it(
    env: pytest.MonkeyPatch, text: str, read: int
) -> None:
    """strtol's reading: the leading number, 0 where there is none (Horovod then fuses
    nothing), never a value the runtime did not use."""
    env.setenv(R.FUSION_THRESHOLD, text)
    got = R.fusion_in_effect(None)
    assert got["horovod_fusion_threshold_bytes"] == read
    assert text in got["horovod_fusion_threshold_from"]


def test_without_anything_set_the_record_says_horovods_defaults(env: pytest.MonkeyPatch) -> None:
    got = R.fusion_in_effect(None)
    assert got == {
        "horovod_fusion_threshold_bytes": 128 * 2**20,
        "horovod_fusion_threshold_from": "default",
        "horovod_cycle_ms": 1.0,
        "horovod_cycle_from": "default",
    }


def test_a_bucketed_wrap_refuses_a_group_started_with_another_threshold() -> None:
    """The threshold cannot change after the init: a bucket the group did not start with is
    an error, not a record that says a bucket Horovod never used."""
    from suite.adapters.horovod.adapter import HorovodAdapter  # no framework until setup

    words = HorovodAdapter()
    words.data_parallel = lambda net, compression="none": net  # type: ignore[method-assign]
    words.fusion = R.fusion_in_effect(None)
    with pytest.raises(RuntimeError, match="HOROVOD_FUSION_THRESHOLD in hvd.init"):
        words.data_parallel_bucketed("net", 1 << 20)
    words.fusion = R.fusion_in_effect(1 << 20)
    assert words.data_parallel_bucketed("net", 1 << 20) == "net"


def test_the_guides_figures_are_the_committed_records() -> None:
    """docs/guide/projection.md ("Horovod's fusion threshold measured on this machine") quotes
    the committed records, each of which passed its checks and says Horovod started with its
    bucket; the study's rows likewise (docs/results/horovod-fusion/)."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    results = root / "docs" / "results" / "horovod-fusion"
    doc = (root / "docs" / "guide" / "projection.md").read_text(encoding="utf-8")
    quoted = 0
    for run in ("mlp1", "mlp2", "w2"):
        for line in (results / run / "results.jsonl").read_text().splitlines():
            rec = json.loads(line)
            if rec["benchmark"]["name"] != "data_parallel" or rec["world_size"] != 2:
                continue
            assert rec["status"] == "ok" and rec["correctness"]["passed"], rec["task_id"]
            work = rec["work"]
            assert work["horovod_fusion_threshold_from"] == "bucket"
            assert work["horovod_fusion_threshold_bytes"] == rec["benchmark"]["params"]["bucket"]
            (step,) = [m for m in rec["metrics"] if m["name"] == "step_time"]
            lo, hi = step["ci95"]
            text = f"{step['value'] * 1e3:.1f} ({lo * 1e3:.1f}-{hi * 1e3:.1f})"
            assert text in doc, text
            quoted += 1
    study = json.loads((results / "study" / "study.json").read_text())
    for row in study["rows"]:
        assert row["passed"], row["what"]
        lo, hi = row["ci95_s"]
        text = f"{row['median_s'] * 1e3:.0f} ({lo * 1e3:.0f}-{hi * 1e3:.0f})"
        assert text in doc, (row["what"], text)
        quoted += 1
    assert quoted == 8 + 6

    # the projections from one rank, as the guide's tables give them (3 significant digits)
    def projected(path: Path, network: str) -> list[str]:
        rows = json.loads(path.read_text())["projections"]
        steps = {r["bucket_bytes"]: r["step_s"] for r in rows
                 if r["ranks"] == 2 and "step_s" in r and r["network"].startswith(network)}  # fmt: skip
        return [f"{steps[b] * 1e3:.3g}" for b in sorted(steps)]

    for name in ("projection-mlp1.json", "projection-mlp2.json"):
        assert " / ".join(projected(results / name, "mlp")) in doc, name
    assert "- / " + " / ".join(projected(results / "projection-mlp1.json", "resnet18")) in doc
    assert " | ".join(projected(results / "study" / "projection.json", "mlp")) in doc
