"""The input pipeline's measurement and checks without a framework: the window statistic,
exactly-once with duplicates, drops and declared padding, labels, the order checks, the
feeding capacity (MLPerf Storage's rule), the cache checks, the process tree's counters on a
real child reading a real evicted file, and the host's side (settings, plan, declined
loaders, bad --data)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from suite import cli
from suite.adapters import ADAPTERS, Adapter
from suite.adapters.data_words import DATA_FORMATS
from suite.config import resolve
from suite.datasets import make as M
from suite.datasets.storage import evict
from suite.errors import ConfigError
from suite.levels.training import pipeline as P
from suite.plan import build
from suite.runner import level_not_run


def epoch(batches: list[list[int]], times: list[float], labels: list[int] | None = None,
          pad: int = 0) -> P.Epoch:  # fmt: skip
    ep = P.Epoch(0, 0.0)
    for ids, t in zip(batches, times, strict=True):
        ep.arrivals.append(t)
        ep.sizes.append(len(ids))
        ep.ids.append(np.asarray(ids))
        lab = labels if labels is not None else [0] * 10_000
        ep.labels.append(np.asarray([lab[i] for i in ids]))
    ep.pad = pad
    ep.end = times[-1]
    return ep


def test_windows_span_every_worker_and_skip_the_fill() -> None:
    # 40 batches of 10: the first 5 slow (workers starting), then bursts of 2 (2 workers)
    times, t = [], 0.0
    for i in range(40):
        t += 1.0 if i < 5 else (0.0 if i % 2 else 0.2)
        times.append(t)
    ep = epoch([[0] * 10 for _ in range(40)], times)
    w = P.windows(ep, workers=2)
    assert w.warmup == 5 and w.per_window >= 2
    # a window of 2 batches (one burst) takes 0.2 s: 100 samples/s, never the burst's gap
    assert np.median(w.rates) == pytest.approx(100.0, rel=1e-6)
    assert w.steady_rate == pytest.approx(100.0, rel=0.05)
    with pytest.raises(ValueError):
        P.windows(epoch([[0], [1]], [0.1, 0.2]), 1)


def test_exactly_once_counts_duplicates_drops_and_declared_padding() -> None:
    expected = set(range(6))
    ok = epoch([[3, 1, 5], [0, 2, 4]], [1, 2])
    assert P.exactly_once([ok], expected, 0).passed
    dup = epoch([[3, 1, 5], [0, 2, 2]], [1, 2])  # 4 dropped, 2 twice
    c = P.exactly_once([dup], expected, 0)
    assert not c.passed and c.detail["epochs"][0]["missing"] == 1
    padded = epoch([[3, 1, 5], [0, 2, 4, 3]], [1, 2], pad=1)  # a sampler's declared repeat
    assert P.exactly_once([padded], expected, 1).passed
    undeclared = epoch([[3, 1, 5], [0, 2, 4, 3]], [1, 2], pad=0)
    assert not P.exactly_once([undeclared], expected, 0).passed
    # the ids 0 .. n-1 as a count (NumPy, for 1.28M ids) give the same verdicts
    for ep, pad in ((ok, 0), (dup, 0), (padded, 1), (undeclared, 0)):
        a, b = P.exactly_once([ep], expected, pad), P.exactly_once([ep], 6, pad)
        assert (a.passed, a.error, a.detail) == (b.passed, b.error, b.detail)
    unknown = P.exactly_once([epoch([[3, 1, 5], [0, 2, 4, -1, 9, 9]], [1, 2])], 6, 0)
    assert unknown.detail["epochs"][0]["unknown"] == 2 and not unknown.passed
    big = P.Epoch(0, 0.0)
    big.ids = np.array_split(np.random.default_rng(0).permutation(1_281_167), 5_005)
    assert P.exactly_once([big], 1_281_167, 0).passed


def test_labels_must_match_the_files() -> None:
    labels = [0, 1, 2, 3]
    assert P.labels_match([epoch([[0, 1], [2, 3]], [1, 2], labels)], labels).passed
    bad = epoch([[0, 1], [2, 3]], [1, 2], labels)
    bad.labels[1] = np.asarray([2, 0])
    c = P.labels_match([bad], labels)
    assert not c.passed and c.detail["mismatched"] == 1


def test_order_checks_fail_a_sequential_read_and_a_repeated_order() -> None:
    n = 200
    stored = np.arange(n)
    seq = epoch([list(range(i, i + 10)) for i in range(0, n, 10)], list(range(20)))
    checks = P.shuffle_checks([seq, seq], stored, shuffled=True)
    assert [c.passed for c in checks] == [False, False]
    rng = np.random.default_rng(0)
    a, b = rng.permutation(n), rng.permutation(n)
    e0 = epoch([a[i : i + 10].tolist() for i in range(0, n, 10)], list(range(20)))
    e1 = epoch([b[i : i + 10].tolist() for i in range(0, n, 10)], list(range(20)))
    assert all(c.passed for c in P.shuffle_checks([e0, e1], stored, shuffled=True))
    assert not P.shuffle_checks([e0, e0], stored, shuffled=True)[1].passed


def test_feeding_capacity_is_mlperf_storages_rule() -> None:
    consumer = [{"accelerator": "X", "rate": 1000.0, "source": "s"}]
    # 1800/s keeps two accelerators at 900/s each (90% busy), not three
    assert P.feeding_capacity(1800.0, consumer)[0]["accelerators"] == 2
    assert P.feeding_capacity(1799.0, consumer)[0]["accelerators"] == 1
    out = P.feeding_capacity(50.0, consumer)[0]
    assert out["accelerators"] == 0 and out["share_of_one"] == pytest.approx(0.05)


def test_feeding_rates_come_from_references_with_their_source() -> None:
    rates = P.feeding_rates()
    h100 = [r for r in rates if "H100" in r["accelerator"]]
    assert h100 and h100[0]["rate"] == 3915.0 and "docs/results/h100" in h100[0]["source"]


def test_cache_checks() -> None:
    verified = {"verified": True}
    assert P.cache_check("cold", 95, 100, verified).passed
    assert not P.cache_check("cold", 40, 100, verified).passed  # half the epoch was cached
    assert not P.cache_check("cold", 100, 100, {"verified": False}).passed
    assert P.cache_check("warm", 1, 100, None).passed
    assert not P.cache_check("warm", 50, 100, None).passed


def test_a_warm_epoch_is_judged_by_the_datasets_reads_not_its_workers_imports(
    tmp_path: Path,
) -> None:
    """JAX's warm loader with 2 workers (started fresh each epoch) failed
    `warm_read_from_cache` on a 48-image dataset whose files were all in the page cache: its
    workers re-read the modules the kernel had dropped (17 times the dataset, with the JAX
    environment's files dropped as a loaded machine does). The check now counts at most the
    dataset's bytes not in the page cache before or after the epoch (mincore); a dataset
    dropped from the cache still fails it."""
    files = []
    for i in range(6):
        f = tmp_path / f"s{i}.JPEG"
        f.write_bytes(os.urandom(40_000 + 1000 * i))
        files.append(str(f))
    expected = float(sum(os.path.getsize(f) for f in files))
    here = P.dataset_residency(files)
    assert here["bytes"] >= expected and here["not_resident"] == 0  # just written: cached
    whole = {"not_resident_before": 0, "not_resident_after": 0}
    libraries = int(17 * expected)  # the tree's bytes from storage, the workers' imports
    check = P.cache_check("warm", libraries, expected, None, whole)
    assert check.passed and check.error == 0.0
    assert check.detail["share_from_storage"] == pytest.approx(17.0)
    # the dataset dropped from the cache: its bytes from storage count, the check fails
    assert evict(files)["verified"]
    gone = P.dataset_residency(files)
    assert gone["not_resident"] == gone["bytes"] >= expected
    dropped = {"not_resident_before": gone["not_resident"], "not_resident_after": 0}
    check = P.cache_check("warm", libraries, expected, None, dropped)
    assert not check.passed and check.error >= 1.0
    # dropped during the epoch (not resident after it): fails too
    during = {"not_resident_before": 0, "not_resident_after": gone["not_resident"] // 2}
    assert not P.cache_check("warm", libraries, expected, None, during).passed
    # the tree read little although the dataset was not cached (the loader's own memory):
    # the smaller share, passes
    assert P.cache_check("warm", 0, expected, None, dropped).passed
    # residency unknown: the tree's share alone, as before
    unknown = P.cache_check("warm", libraries, expected, None, {"unknown": "mincore failed"})
    assert not unknown.passed and unknown.detail["dataset_residency"] == "mincore failed"
    assert P.dataset_residency([str(tmp_path / "absent.JPEG")])["unknown"].startswith("mincore")


def test_a_cold_epoch_counts_the_dataset_its_pages_brought_in() -> None:
    """A 2-rank JAX cold task read 5.6 times its shard "from storage" (18.6 with the JAX
    environment's files dropped): Grain's workers, started with the epoch, re-read their
    modules. The cold share now counts at most the bytes of the files the epoch read that
    are in the page cache after it (all evicted before it); a cold epoch served from the
    cache still fails, and so does one whose eviction was not verified."""
    from suite.levels.training.loader import _cold_across_ranks

    expected = 2_473_884.0
    verified = {"verified": True}
    came_in = {"bytes": 2_588_672, "method": "mincore", "resident_after": 2_588_672}
    tree = int(18.6 * expected)
    check = P.cache_check("cold", tree, expected, verified, came_in)
    assert check.passed and check.detail["share_from_storage"] == pytest.approx(18.6)
    assert check.detail["dataset_share_from_storage"] == pytest.approx(2_588_672 / expected)
    assert P.dataset_read_bytes(tree, came_in) == 2_588_672
    # the dataset came from the cache (another process had read it): the tree read little
    assert not P.cache_check("cold", int(0.1 * expected), expected, verified, came_in).passed
    # the workers' imports do not make up for a dataset that stayed out of the cache
    none_in = {**came_in, "resident_after": int(0.3 * expected)}
    assert not P.cache_check("cold", tree, expected, verified, none_in).passed
    assert not P.cache_check("cold", tree, expected, {"verified": False}, came_in).passed
    # ranks on one node, judged together by their dataset's bytes in the page cache
    half = expected / 2
    docs = {r: {"rank": r, "host": "n1", "read_bytes": tree, "expected_bytes": half,
                "evicted": True, "resident_after": int(half)} for r in (0, 1)}  # fmt: skip
    one = _cold_across_ranks(docs)
    node = one.detail["per_node"]["n1"]
    assert one.passed and node["dataset_share_from_storage"] == pytest.approx(1.0)
    assert node["share_from_storage"] == pytest.approx(2 * 18.6)  # both ranks' imports
    # one RecordIO file: rank 0's read-ahead took rank 1's part (rank 1 read nothing); the
    # pages are in rank 1's part, and the node together read its bytes
    docs[0]["read_bytes"], docs[1]["read_bytes"] = int(expected), 0
    assert _cold_across_ranks(docs).passed
    for d in docs.values():
        d["resident_after"] = int(0.2 * half)
    assert not _cold_across_ranks(docs).passed
    # the report shows the tree's MB and the dataset's part
    from suite.report.training import _from_storage

    assert _from_storage({"read_bytes_from_storage": tree,
                          "dataset_read_bytes": 2_588_672}) == "46 MB (3 MB of the dataset)"  # fmt: skip
    assert _from_storage({"read_bytes_from_storage": 2_600_000}) == "3 MB"


def test_a_ranks_epoch_targets_are_the_files_it_read(tmp_path: Path) -> None:
    """A rank's warm epoch reads its shard's files: residency is judged over those (on a
    node of its own, the other ranks' files are not in its page cache)."""
    from suite.levels.training import loader as L
    from suite.levels.training.dataset import Catalogue, TaskData

    n = 10
    cat = Catalogue([f"c/{i}.JPEG" for i in range(n)], [0] * n, [str(i) for i in range(n)], 1)
    files = [str(tmp_path / f"{i}.JPEG") for i in range(n)]
    data = TaskData(tmp_path, "folder", tmp_path, files, 10, cat, "made", "d")
    assert L.epoch_targets(data, np.array([7, 1, 3, 1])) == [files[1], files[3], files[7]]
    packed = TaskData(tmp_path, "tfrecord", tmp_path, files[:2], 10, cat, "made", "d")
    assert L.epoch_targets(packed, np.array([0])) == files[:2]


def test_tree_counters_see_a_real_childs_cold_read(tmp_path: Path) -> None:
    f = tmp_path / "blob"
    f.write_bytes(os.urandom(8 << 20))
    assert evict([f])["verified"]
    a = P.tree_snapshot()
    # 0.3 s of CPU time (not wall time: the machine may be shared)
    code = f"open({str(f)!r}, 'rb').read(); import time\nwhile time.process_time() < 0.3: pass"
    subprocess.run([sys.executable, "-c", code], check=True)  # ended and reaped: in our figures
    d = P.tree_delta(a, P.tree_snapshot())
    assert d["read_bytes"] >= 8 << 20
    assert d["cpu_s"] >= 0.25


def test_every_adapter_declares_every_format() -> None:
    """An adapter with a data word declares every format, in exactly one of ``loaders`` and
    ``unsupported_loaders``; one that declares neither has no data words and needs no loader
    declaration (the kit's test_every_format_has_a_loader_or_a_reason skips it the same way:
    every format is declined saying so)."""
    for name in ADAPTERS.names():
        cls = ADAPTERS.load(name)
        if not cls.loaders and not cls.unsupported_loaders:
            continue  # no data words: every loader task is declined, naming them
        for fmt in DATA_FORMATS:
            both = "both" if fmt in cls.loaders else "neither"
            assert (fmt in cls.loaders) != (fmt in cls.unsupported_loaders), (
                f"{name}: the {fmt!r} format is in {both} of loaders and unsupported_loaders; "
                f"put it in exactly one (loaders: its loader in one line; unsupported_loaders: "
                f"why it has none)"
            )
            if fmt in cls.unsupported_loaders:
                assert len(cls.unsupported_loaders[fmt]) > 20, (
                    f"{name}: unsupported_loaders[{fmt!r}] needs a reason, not a word"
                )


class _NoDataWordsAdapter(Adapter):
    """A new adapter as the guide's minimal one: operator words only, no data words."""

    name = "nodatafw"
    module = "dlsuite_nodatafw"
    distribution = "dlsuite-nodatafw"
    adapter_version = "1"

    def setup(self, device: str) -> Any:
        raise NotImplementedError

    def from_numpy(self, x: Any, dtype: str, *, requires_grad: bool = False) -> Any:
        raise NotImplementedError

    def to_numpy(self, t: Any) -> Any:
        raise NotImplementedError


class _OneLoaderAdapter(_NoDataWordsAdapter):
    name = "oneloaderfw"
    loaders: ClassVar[dict[str, str]] = {"folder": "its own folder reader, four workers"}


def _register(monkeypatch: pytest.MonkeyPatch, **classes: str) -> None:
    ADAPTERS.names()  # entry points scanned before the registry is patched
    monkeypatch.setattr(ADAPTERS, "_targets", {**ADAPTERS._targets, **classes})
    monkeypatch.setattr(ADAPTERS, "_loaded", dict(ADAPTERS._loaded))


def test_a_new_adapter_without_the_data_words_needs_no_loader_declaration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The guide's "no test changes" holds for an adapter that declares neither loaders nor
    unsupported_loaders (it failed ('folder' in {}) != ('folder' in {})); one that declares
    some formats is told which one it left out and where to put it."""
    _register(monkeypatch, nodatafw=f"{__name__}:_NoDataWordsAdapter")
    test_every_adapter_declares_every_format()
    _register(monkeypatch, oneloaderfw=f"{__name__}:_OneLoaderAdapter")
    with pytest.raises(AssertionError, match=r"oneloaderfw: the 'webdataset' format is in "
                       r"neither of loaders and unsupported_loaders; put it in exactly one"):  # fmt: skip
        test_every_adapter_declares_every_format()


def test_plan_carries_the_data_dir_and_declines_on_the_host(tmp_path: Path) -> None:
    cfg = resolve({"level": ["training"], "frameworks": ["numpy"], "quick": True,
                   "data_dir": str(tmp_path / "d"), "benchmarks": ["loader"]}, env={})  # fmt: skip
    tasks = build(cfg)
    assert {t.dtype for t in tasks} == {"fp32"}
    doc = tasks[0].document(run_id="r", record_path="x", provenance={})
    assert doc["data"]["dir"] == str(tmp_path / "d") and doc["data"]["dir_source"] == "--data-dir"
    assert doc["data"]["paths"]  # what the quiet check reads: the data dir while not made
    assert "no data loader" in level_not_run(tasks[0])
    cfg = resolve({"level": ["training"], "frameworks": ["pytorch"], "quick": True}, env={})
    reasons = {t.params["format"]: level_not_run(t) for t in build(cfg) if t.benchmark == "loader"}
    assert reasons["folder"] == "" and "TFRecord" in reasons["tfrecord"]
    # the skipped record names the framework that reads the format (not Horovod's, which
    # inherits TensorFlow's loaders but runs no training level)
    assert reasons["tfrecord"].endswith("tfrecord is read by: tensorflow (--framework tensorflow)")
    assert "read by: mxnet" in reasons["recordio"]


def test_data_dir_precedence(tmp_path: Path) -> None:
    conf = tmp_path / "c.toml"
    conf.write_text(f'[run]\ndata_dir = "{tmp_path / "conf"}"\n')
    env = {"DLSUITE_DATA_DIR": str(tmp_path / "env")}
    assert resolve({"config": str(conf)}, env={}).data_dir == str(tmp_path / "conf")
    assert resolve({"config": str(conf)}, env=env).data_dir == str(tmp_path / "env")
    flag = resolve({"config": str(conf), "data_dir": str(tmp_path / "flag")}, env=env)
    assert flag.data_dir == str(tmp_path / "flag") and flag.data_dir_source == "--data-dir"


def test_user_data_replaces_the_suite_dataset(tmp_path: Path) -> None:
    ds = M.make_imagefolder(tmp_path, "quick", classes=2, images=24, workers=1)
    cfg = resolve({"level": ["training"], "frameworks": ["pytorch"], "quick": True,
                   "data": str(ds.folder), "benchmarks": ["loader"],
                   "data_dir": str(tmp_path / "dd")}, env={})  # fmt: skip
    tasks = build(cfg)
    assert {t.params["data"] for t in tasks} == {str(ds.folder)}
    assert tasks[0].document(run_id="r", record_path="x", provenance={})["data"]["paths"] == [
        str(ds.folder)
    ]
    # planned from what it holds: its folder only, a batch of 2 (10 batches of its 24 images),
    # the dataset at that path as the source
    assert {t.params["format"] for t in tasks} == {"folder"}
    assert {t.params["batch"] for t in tasks} == {2} and {t.params["dataset"] for t in tasks} == {
        None
    }
    assert tasks[0].source.startswith(f"the dataset at {ds.folder} (imagefolder: 24 samples")
    # too small for a loader epoch of 10 batches: one line at planning, not a failed task
    small = M.make_imagefolder(tmp_path, "quick", classes=2, images=4, workers=1)
    cfg = resolve({"level": ["training"], "frameworks": ["pytorch"], "quick": True,
                   "data": str(small.folder), "benchmarks": ["loader"],
                   "data_dir": str(tmp_path / "dd")}, env={})  # fmt: skip
    with pytest.raises(ConfigError, match="4 samples per rank give fewer than 10 batches"):
        build(cfg)


@pytest.mark.parametrize("case", ["missing", "empty", "mixed", "flat"])
def test_bad_data_exits_2_with_one_line(tmp_path: Path, case: str,
                                        capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    d = tmp_path / "d"
    if case != "missing":
        d.mkdir()
    if case == "mixed":
        (d / "cls").mkdir()
        (d / "cls" / "a.jpg").write_bytes(b"\xff\xd8x")
        (d / "x.tar").write_bytes(b"")
    if case == "flat":
        (d / "a.jpg").write_bytes(b"\xff\xd8x")
    code = cli.main(["run", "--level", "training", "--quick", "--data", str(d), "--dry-run",
                     "--data-dir", str(tmp_path / "dd")])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and str(d) in err[0]


@pytest.mark.root
def test_a_data_dir_too_small_for_the_datasets_exits_2_before_anything_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real 3 MB tmpfs as the data dir: the quick set (2,000 JPEGs) cannot fit; the plan
    says so in one line, before any worker starts, and nothing is made."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mnt)], check=True)
    try:
        code = cli.main(["run", "--level", "training", "--framework", "pytorch", "--quick",
                         "--data-dir", str(mnt), "--benchmark", "loader",
                         "--out", str(tmp_path / "run")])  # fmt: skip
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1 and str(mnt) in err[0] and "free" in err[0]
        assert list(mnt.iterdir()) == [] and not (tmp_path / "run").exists()
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_a_users_packed_dataset_too_small_for_any_benchmark_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = tmp_path / "wds"
    d.mkdir()
    import tarfile

    with tarfile.open(d / "train-000000.tar", "w") as tar:
        for name in ("a.jpg", "a.cls"):
            f = tmp_path / name
            f.write_bytes(b"\xff\xd8x" if name.endswith("jpg") else b"0")
            tar.add(f, arcname=name)
    code = cli.main(["run", "--level", "training", "--quick", "--data", str(d), "--dry-run",
                     "--data-dir", str(tmp_path / "dd")])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert "webdataset: 1 samples" in err[0] and "fewer than 10 batches" in err[0], err


def test_no_rank_of_a_cold_task_reads_before_every_rank_has_evicted(tmp_path: Path) -> None:
    """A 2-rank cold TFRecord loader task: rank 0 (started first) read its shard, and part of
    it again after rank 1's eviction dropped its read-ahead, 2.05 times its shard from storage
    against rank 1's 1.04. Each rank now evicts, then waits at a file per rank beside the
    task's records until every rank has evicted; only then its clock and counters start."""
    import threading
    import time

    from suite.adapters.base import DeviceInfo
    from suite.adapters.numpy.adapter import NumPyAdapter
    from suite.benchmark import Context
    from suite.levels.training.loader import ranks_evicted

    task = {"record_path": str(tmp_path / "task.0.records.jsonl")}
    ctx = Context(task, NumPyAdapter(), DeviceInfo("cpu", "cpu", 1), {})
    got: dict[int, dict[str, Any]] = {}
    first = threading.Thread(target=lambda: got.update({0: ranks_evicted(ctx, 0, 2)}))
    first.start()
    time.sleep(0.6)  # rank 1 evicts late (a slower import, another node's start)
    assert first.is_alive() and 0 not in got  # rank 0 has not started reading
    got[1] = ranks_evicted(ctx, 1, 2)
    first.join(timeout=10)
    assert got[0]["ranks"] == got[1]["ranks"] == [0, 1]
    assert got[0]["missing"] == got[1]["missing"] == []
    assert got[0]["waited_s"] >= 0.5 > got[1]["waited_s"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "task.0.records.jsonl.evicted.rank0", "task.0.records.jsonl.evicted.rank1"]  # fmt: skip


def _rank_epochs(rank: int, world: int, samples: int) -> list[P.Epoch]:
    """Two epochs as one rank of ``world`` delivers them: its ids one per batch, every
    ``world``-th sample from ``rank``, a batch every 10 ms."""
    out = []
    for e in range(2):
        ids = list(range(rank, samples, world))
        ep = P.Epoch(e, 0.0, arrivals=[0.01 * (i + 1) for i in range(len(ids))],
                     sizes=[1] * len(ids), ids=[np.array([i]) for i in ids],
                     counters={"read_bytes": 0})  # fmt: skip
        ep.end = ep.arrivals[-1]
        out.append(ep)
    return out


def test_the_files_ranks_meet_through_are_removed_once_every_rank_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each rank of a cold loader task left ``.evicted.rankN`` and ``.ids.rankN.json`` in the
    run's tasks/ for good. Rank 0 now removes them once it holds every rank's ids (every rank
    passed the barrier by then); where a rank never reported they stay beside the record."""
    import threading

    from suite.adapters.base import DeviceInfo
    from suite.adapters.numpy.adapter import NumPyAdapter
    from suite.benchmark import Context
    from suite.levels.training import loader as L
    from suite.levels.training.dataset import Catalogue, TaskData

    samples, world = 12, 3
    cat = Catalogue([f"c/{i}.jpg" for i in range(samples)], [i % 2 for i in range(samples)],
                    [str(i) for i in range(samples)], 2)  # fmt: skip
    data = TaskData(tmp_path, "folder", tmp_path, [], 12 * 1000, cat, "made", "d")
    task = {"record_path": str(tmp_path / "t.1.records.jsonl")}
    ctx = Context(task, NumPyAdapter(), DeviceInfo("cpu", "cpu", 1), {})
    got: dict[int, Any] = {}

    def rank(r: int) -> None:
        L.ranks_evicted(ctx, r, world)
        eps = _rank_epochs(r, world, samples)
        got[r] = L.gather_ranks(ctx, eps, eps[0], 1, r, world, data, "cold", {"verified": True})

    threads = [threading.Thread(target=rank, args=(r,)) for r in (2, 1, 0)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    ranks, checks = got[0]
    assert ranks is not None and set(ranks["per_rank_rate"]) == {0, 1, 2}
    assert checks[0].name == "exactly_once_across_ranks" and checks[0].passed
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    # a rank that never reports: rank 0 gives up after the timeout and removes nothing
    monkeypatch.setattr(L, "GATHER_TIMEOUT_S", 0.5)
    eps = _rank_epochs(0, 2, samples)
    _, checks = L.gather_ranks(ctx, eps, eps[0], 1, 0, 2, data, "warm")
    assert not checks[0].passed and checks[0].detail["missing_ranks"] == [1]
    assert [p.name for p in tmp_path.iterdir()] == ["t.1.records.jsonl.ids.rank0.json"]


def test_ranks_sharing_a_page_cache_are_judged_cold_together() -> None:
    """Two ranks of a cold RecordIO task read parts of one `.rec`: the kernel's read-ahead of
    rank 0 (8 MB here) took rank 1's part into the page cache, so rank 0 read 2.0 times its
    part and rank 1 0.0, and rank 1's record failed `cold_read_from_storage` (2 of 4 records,
    before and after the eviction barrier). Ranks on one node are now judged together."""
    from suite.adapters.base import DeviceInfo
    from suite.adapters.numpy.adapter import NumPyAdapter
    from suite.benchmark import Context
    from suite.levels.training.loader import _cold_across_ranks, shares_page_cache

    def ctx(nodes: int) -> Context:
        return Context({"nodes": nodes}, NumPyAdapter(), DeviceInfo("cpu", "cpu", 1), {})

    assert shares_page_cache(ctx(1), 2) and shares_page_cache(ctx(2), 4)
    assert not shares_page_cache(ctx(2), 2) and not shares_page_cache(ctx(1), 1)
    half = 1_700_000.0
    one_node = {0: {"rank": 0, "host": "n1", "read_bytes": int(2 * half), "expected_bytes": half,
                    "evicted": True},
                1: {"rank": 1, "host": "n1", "read_bytes": 0, "expected_bytes": half,
                    "evicted": True}}  # fmt: skip
    check = _cold_across_ranks(one_node)
    assert check.passed and check.name == "cold_read_from_storage_across_ranks"
    assert check.detail["per_node"]["n1"]["ranks"] == [0, 1]  # type: ignore[index]
    # a node whose ranks together read little from storage is not cold: the worst node fails
    two_nodes = {**one_node, 2: {"rank": 2, "host": "n2", "read_bytes": int(0.1 * half),
                                 "expected_bytes": half, "evicted": True}}  # fmt: skip
    check = _cold_across_ranks(two_nodes)
    assert not check.passed and check.error == pytest.approx(0.9)
    # an eviction one rank could not verify: not cold
    one_node[1]["evicted"] = False
    assert not _cold_across_ranks(one_node).passed
