"""The training level's sizes from a config file (``[training.loader]``, ``[training.feed]``):
a size's own dataset (``data = PATH``) is detected and checked at planning as ``--data``'s
is, and the suite dataset's counts are checked naming the field the user wrote."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from suite import plan
from suite.config import resolve
from suite.errors import ConfigError


def pictures(root: Path, classes: tuple[str, ...] = ("ant", "bee", "moth"), each: int = 14) -> Path:
    """A small ImageFolder of seeded PNGs and JPEGs (sizes vary, as a user's do)."""
    rng = np.random.default_rng(11)
    for c in classes:
        (root / c).mkdir(parents=True)
        for i in range(each):
            h, w = (int(v) for v in rng.integers(40, 90, size=2))
            img = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
            img.save(root / c / f"{c}{i:02d}.{'png' if i % 3 else 'jpg'}")
    return root


def planned(tmp_path: Path, sizes: str, benchmark: str = "loader") -> list[plan.Task]:
    conf = tmp_path / "train.toml"
    conf.write_text(
        f'[run]\nlevel = "training"\nbenchmarks = ["{benchmark}"]\ndtypes = ["fp32"]\n'
        f"[training.{benchmark}]\nsizes = [{sizes}]\n",
        encoding="utf-8",
    )
    cfg = resolve({"config": str(conf), "data_dir": str(tmp_path / "data")}, env={})
    return plan.build(cfg)


def test_a_sizes_own_dataset_is_planned_from_what_it_holds(tmp_path: Path) -> None:
    ds = pictures(tmp_path / "insects")
    cwd = os.getcwd()
    os.chdir(tmp_path)  # a relative path, as --data takes one: from the current directory
    try:
        (task,) = planned(tmp_path, '{data = "insects", workers = 1, batch = 4}')
    finally:
        os.chdir(cwd)
    assert task.params["data"] == str(ds)
    assert task.params["dataset"] is None  # the user's, not a size of the suite's
    assert task.source.startswith(f"the dataset at {ds} (imagefolder: 42 samples, 3 classes")


def test_a_sizes_dataset_that_is_missing_is_one_error_at_planning(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        planned(tmp_path, f'{{data = "{tmp_path / "nowhere"}"}}')
    msg = str(err.value)
    assert f"[training.loader] sizes[0]: data: {tmp_path / 'nowhere'}: no such file" in msg
    assert "--data" not in msg  # the user wrote data = PATH in the file


@pytest.mark.parametrize("command", ["info", "evict"])
def test_data_commands_name_the_path_not_a_flag(
    tmp_path: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`dlsuite data evict PATH` of a missing PATH said "--data PATH: ...", a flag the user
    did not type (`data info` said it right)."""
    from suite.cli import main

    assert main(["data", command, str(tmp_path / "gone")]) == 2
    err = capsys.readouterr().err
    assert f"dlsuite: error: {tmp_path / 'gone'}: no such file or directory" in err
    assert "--data" not in err


def test_a_format_the_sizes_dataset_does_not_hold_is_one_error(tmp_path: Path) -> None:
    ds = pictures(tmp_path / "insects")
    with pytest.raises(ConfigError) as err:
        planned(tmp_path, f'{{data = "{ds}", format = "webdataset", batch = 4}}')
    assert "[training.loader] sizes[0]: format = webdataset" in str(err.value)
    assert "set format = folder" in str(err.value)


def test_a_sizes_batch_its_dataset_cannot_fill_names_the_batch_that_fits(tmp_path: Path) -> None:
    ds = pictures(tmp_path / "insects")
    with pytest.raises(ConfigError, match=r"batch = 8 gives 5 of the 10 batches .* set batch = 4"):
        planned(tmp_path, f'{{data = "{ds}", batch = 8}}')


@pytest.mark.parametrize(
    ("size", "field", "fix"),
    [
        ("{images = 40}", "loader.images", "give images >= 100"),
        ("{classes = 3000}", "loader.classes", "give classes <= 2000"),
        ('{dataset = "full", images = 900}', "loader.images", "give images >= 1000"),
    ],
)
def test_the_suite_datasets_counts_name_the_field_written(
    tmp_path: Path, size: str, field: str, fix: str
) -> None:
    with pytest.raises(ConfigError) as err:
        planned(tmp_path, size)
    msg = str(err.value)
    assert f"[training.loader] sizes[0]: {field}:" in msg and fix in msg
    assert "--images" not in msg  # the user typed no flag


def test_images_from_the_flag_names_the_flag(tmp_path: Path) -> None:
    cfg = resolve(
        {"level": ["training"], "benchmarks": ["loader"], "quick": True, "images": 30,
         "data_dir": str(tmp_path)},
        env={},
    )  # fmt: skip
    with pytest.raises(ConfigError, match=r"^--images 30: loader.images: 30 images"):
        plan.build(cfg)


def test_a_subset_of_the_quick_set_with_its_classes_is_planned(tmp_path: Path) -> None:
    (task,) = planned(tmp_path, "{images = 300, classes = 30, workers = 1}")
    assert (task.params["images"], task.params["classes"]) == (300, 30)


@pytest.mark.parametrize(
    ("size", "needle"),
    [
        ("{width = 3}", "feed.width: resnet18.width: 3 does not divide the base width 64"),
        ('{network = "resnet50", width = 48}', "feed.width: resnet50.width: 48 does not divide"),
        ("{lr = 25.0}", "feed.lr: must be below 10"),
    ],
)
def test_a_feed_networks_fields_are_checked_at_planning(
    tmp_path: Path, size: str, needle: str
) -> None:
    """A width the ResNet cannot take was a failed task (the worker's build refused it)."""
    with pytest.raises(ConfigError) as err:
        planned(tmp_path, size, benchmark="feed")
    assert f"[training.feed] sizes[0]: {needle}" in str(err.value)


def test_a_feed_at_a_quarter_width_is_planned(tmp_path: Path) -> None:
    (task,) = planned(tmp_path, "{width = 4, workers = 1, steps = 3}", benchmark="feed")
    assert task.params["width"] == 4


def test_label_base_1_on_a_dataset_counted_from_0_is_refused_not_ignored(tmp_path: Path) -> None:
    """``--label-base 1`` with an ImageFolder (labels: its sorted folders' positions) or with
    the suite's own datasets was planned and silently ignored."""
    ds = pictures(tmp_path / "insects")
    common = {"level": ["training"], "benchmarks": ["loader"], "quick": True,
              "data_dir": str(tmp_path / "dd"), "label_base": 1}  # fmt: skip
    with pytest.raises(ConfigError, match=r"^--label-base 1: --data .*insects is an ImageFolder"):
        resolve({**common, "data": str(ds)}, env={})
    with pytest.raises(ConfigError, match=r"^--label-base 1: the suite's own datasets count"):
        resolve(common, env={})
    assert resolve({**common, "label_base": 0}, env={}).label_base == 0  # what they are
    assert resolve({**common, "level": ["operator"]}, env={}).label_base == 1  # not read there


def test_a_world_size_no_chosen_benchmark_runs_at_is_refused_or_noted(tmp_path: Path) -> None:
    """``--world-size 2`` with the training level's optimizer and feed (or the operator level)
    ran everything on one process without a word."""
    base = {"quick": True, "world_size": 2, "dtypes": ["fp32"], "data_dir": str(tmp_path)}
    for cli in ({"level": ["training"], "benchmarks": ["optimizer", "feed"]},
                {"level": ["operator"], "benchmarks": ["gemm"]}):  # fmt: skip
        with pytest.raises(ConfigError, match=r"^--world-size 2: no chosen benchmark runs on"):
            plan.build(resolve({**base, **cli}, env={}))
    # a standing setting is a note, not an error
    cfg = resolve({**base, "world_size": None, "level": ["operator"], "benchmarks": ["gemm"]},
                  env={"DLSUITE_WORLD_SIZE": "2"})  # fmt: skip
    assert plan.build(cfg) and any("DLSUITE_WORLD_SIZE 2: no chosen" in n for n in cfg.plan_notes)
    # with the loader: its tasks take the ranks, and the others are named in a note
    cfg = resolve({**base, "level": ["training"], "benchmarks": ["loader", "optimizer"]}, env={})
    tasks = plan.build(cfg)
    assert {t.world_size for t in tasks if t.benchmark == "loader"} == {2}
    assert {t.world_size for t in tasks if t.benchmark == "optimizer"} == {1}
    assert any(
        n.startswith("--world-size 2: the training level's optimizer runs on one process")
        for n in cfg.plan_notes
    )


def test_a_format_no_chosen_framework_reads_is_one_line_not_a_run_of_skips(
    tmp_path: Path,
) -> None:
    """``--format tfrecord`` with PyTorch alone planned four loader tasks that all skipped,
    and the run ended "0 ok", exit 0."""
    base = {"level": ["training"], "benchmarks": ["loader"], "quick": True,
            "data_dir": str(tmp_path)}  # fmt: skip
    with pytest.raises(ConfigError) as err:
        resolve({**base, "formats": ["tfrecord"]}, env={})
    msg = str(err.value)
    assert msg.startswith("--format tfrecord: tfrecord is read by tensorflow; the default")
    assert "choose a format it reads (folder, webdataset)" in msg
    # one of the formats read by one of the frameworks: planned (the others' tasks skip)
    assert resolve({**base, "formats": ["tfrecord", "folder"]}, env={}).formats
    cfg = resolve({**base, "formats": ["tfrecord"], "frameworks": ["tensorflow"]}, env={})
    assert cfg.formats == ["tfrecord"]


def test_a_training_section_in_a_run_of_another_level_says_which_level(tmp_path: Path) -> None:
    """training-level.md's example file holds only [training.optimizer]; run without
    --level training it was refused as "[training.optimizer] is not a benchmark; use one of:
    operator.attention, ..."."""
    conf = tmp_path / "mine.toml"
    conf.write_text('[training.optimizer]\nsizes = [{optimizer = "lamb"}]\n', encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        plan.build(resolve({"config": str(conf), "benchmarks": ["optimizer"]}, env={}))
    assert str(err.value) == (
        f"{conf}: [training.optimizer] is a benchmark of the training level, which this run "
        'does not select (level: operator); add --level training (or level = "training" in '
        "[run])"
    )
    conf.write_text('[training.optimiser]\nsizes = [{optimizer = "lamb"}]\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"\[training.optimiser\] is not a benchmark"):
        plan.build(resolve({"config": str(conf), "level": ["training"]}, env={}))
