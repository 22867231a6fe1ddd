"""The summary's correctness column leads with the worst numerical check; a check of the
measurement (the timer's honesty, a cache state) shows only when it fails. A failure every
failed check of which the adapter declares (a known bug, a documented difference) says so, and
the run's exit code counts it as known unless ``--strict``. Its one duration formatter, last."""

from __future__ import annotations

import copy
import io
from typing import Any

import pytest
from rich.console import Console

from suite import summary
from suite.adapters import ADAPTERS
from suite.metrics.correctness import Check
from suite.optimizers import documented
from suite.results import validate_record
from tests import synthetic

TIMER = "timer_waits_for_the_device.materialised_over_timed"


def with_checks(*checks: Check) -> dict[str, Any]:
    rec = synthetic.operator_record()
    rec["correctness"] = {
        "passed": all(c.passed for c in checks),
        "checks": [c.to_dict() for c in checks],
    }
    validate_record(rec)
    return rec


def test_a_passing_timer_check_never_leads() -> None:
    # the timer check's 1.2 of 40 (0.03 of its tolerance) is a larger share than the numerical
    # check's 3e-7 of 1e-4: the column showed the timer check before
    rec = with_checks(Check("gemm.max_rel_error_vs_fp64", 3.1e-7, 1e-4), Check(TIMER, 1.2, 40.0))
    assert summary.correctness_cell(rec).plain == "pass 3.1e-07≤1e-04"


def test_the_report_says_what_the_terminal_says() -> None:
    """report.md's correctness column showed the passing timer check (``pass 2.4e+00≤4e+01``)
    where the run's table showed the numbers; it is the same cell now."""
    from suite.report.sections import correctness_text

    rec = with_checks(Check("gemm.max_rel_error_vs_fp64", 3.1e-7, 1e-4), Check(TIMER, 2.4, 40.0))
    assert correctness_text(rec) == "pass 3.1e-07≤1e-04" == summary.correctness_cell(rec).plain


def test_a_failing_timer_check_is_shown_after_the_numbers() -> None:
    rec = with_checks(Check("gemm.max_rel_error_vs_fp64", 3.1e-7, 1e-4), Check(TIMER, 52.0, 40.0))
    assert (
        summary.correctness_cell(rec).plain == "pass 3.1e-07≤1e-04; timer check FAIL 5.2e+01>4e+01"
    )


def test_merged_ranks_checks_are_classified_too() -> None:
    rec = with_checks(Check("rank0.x.max_rel", 1e-6, 1e-4), Check(f"rank1.{TIMER}", 2.0, 40.0))
    assert summary.correctness_cell(rec).plain == "pass 1.0e-06≤1e-04"
    assert summary.is_measurement_check(f"rank1.{TIMER}")
    assert summary.is_measurement_check("warm_read_from_cache")
    assert not summary.is_measurement_check("rank0.x.max_rel")


def test_only_measurement_checks_still_show() -> None:
    rec = with_checks(Check(TIMER, 1.2, 40.0))
    assert summary.correctness_cell(rec).plain == "pass 1.2e+00≤4e+01"


def test_the_worst_numerical_check_leads() -> None:
    rec = with_checks(
        Check("a.max_rel", 1e-5, 1e-4),
        Check("b.l2_rel", 9e-6, 1e-5),  # 0.9 of its tolerance: the worst
        Check(TIMER, 30.0, 40.0),
    )
    assert summary.correctness_cell(rec).plain == "pass 9.0e-06≤1e-05"


def test_a_quick_operator_summary_shows_no_timer_check() -> None:
    """Every fp32 operator record of the quick level carries the timer check beside its
    numerical ones: the table shows the numerical one."""
    rows = [with_checks(Check("c.max_rel_error_vs_fp64", 2e-7, 1e-4), Check(TIMER, 1.1, 40.0))]
    console = Console(width=250, file=io.StringIO())
    console.print(summary.table(rows))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "pass 2.0e-07≤1e-04" in text and "4e+01" not in text


def test_a_run_of_two_frameworks_names_each_rows_framework() -> None:
    """``--framework jax,pytorch`` gave two rows per size that differed only in their numbers:
    the table named the benchmark, never whose it was."""
    a = with_checks(Check("c.max_rel_error_vs_fp64", 2e-7, 1e-4))
    b = copy.deepcopy(a)
    b["framework"] = {**b["framework"], "name": "jax", "version": "0.10.2"}
    console = Console(width=250, file=io.StringIO())
    console.print(summary.table([a, b]))
    lines = console.file.getvalue().splitlines()  # type: ignore[attr-defined]
    assert "framework" in lines[1]
    rows = [line for line in lines if "pass 2.0e-07" in line]
    assert f"{a['framework']['name']} {a['framework']['version']}" in rows[0]
    assert "jax 0.10.2" in rows[1] and "jax" not in rows[0]


# -- declared differences ----------------------------------------------------------------------
DIFF = "Keras AdamW decays by lr*wd*p, not the cited paper's wd*p"


def optimizer_failure(declared: bool, *more: Check) -> dict[str, Any]:
    detail = {"differs_from_documentation": "follows x, not y"}
    if declared:
        detail.update(documented_difference=DIFF, documented_in="https://keras.io/x")
    return with_checks(
        Check("params_vs_documented_rule.bound_ratio", 1.3e4, 1.0, detail=detail), *more
    )


def test_a_documented_difference_is_shown_as_such() -> None:
    rec = optimizer_failure(True, Check(TIMER, 1.1, 40.0))
    cell = summary.correctness_cell(rec).plain
    assert cell == f"FAIL 1.3e+04>1e+00 (documented difference: {DIFF})"
    from suite.report.sections import correctness_text

    assert correctness_text(rec) == (
        f"FAIL params_vs_documented_rule.bound_ratio 1.3e+04>1e+00 (documented difference: {DIFF})"
    )
    assert summary.declared_known(rec)
    assert summary.documented_differences(rec) == [DIFF]


def test_an_undeclared_failure_beside_a_declared_one_is_unexplained() -> None:
    rec = optimizer_failure(True, Check("master_params.bound_ratio", 3.0, 1.0))
    assert not summary.declared_known(rec)
    assert "documented difference" not in summary.correctness_cell(rec).plain
    assert not summary.declared_known(optimizer_failure(False))


def test_known_bugs_and_differences_together_are_declared() -> None:
    rec = optimizer_failure(
        True, Check("reduce_scatter.wrong_elements", 3.0, 0.0, detail={"known_bug": "gloo's"})
    )
    assert summary.declared_known(rec)
    assert summary.correctness_cell(rec).plain.endswith(
        f"(documented difference: {DIFF}; known bug)"
    )


@pytest.mark.parametrize("framework", ["tensorflow", "mxnet"])
def test_declared_differences_are_the_ones_optimizers_toml_records(framework: str) -> None:
    """An adapter may declare a difference only where the framework's documented variant and
    the one recorded as implemented differ (its optimizers.toml), and must name where upstream."""
    cls = ADAPTERS.load(framework)
    assert cls.documented_differences
    for optimizer, diff in cls.documented_differences.items():
        entry = documented.entry(framework, optimizer)
        assert entry.documented_rule().name != entry.observed_rule().name, optimizer
        assert diff.documented_in.startswith("https://"), diff
        assert "docs/studies/optimizer-differences.md" in diff.documented_in


def test_merged_records_keep_declarations() -> None:
    rec = copy.deepcopy(optimizer_failure(True))
    rec["correctness"]["checks"][0]["name"] = "rank0." + rec["correctness"]["checks"][0]["name"]
    assert summary.declared_known(rec)


def test_the_exit_code_counts_declared_failures_as_known_unless_strict() -> None:
    ok = with_checks(Check("a.max_rel", 1e-6, 1e-4))
    declared = optimizer_failure(True)
    unexplained = optimizer_failure(False)
    assert summary.run_exit_code([ok, declared]) == 0
    assert summary.run_exit_code([ok, declared], strict=True) == 1
    assert summary.run_exit_code([ok, declared, unexplained]) == 1
    assert summary.run_exit_code([ok, synthetic.failed_record(status="oom")]) == 1
    assert summary.run_exit_code([ok]) == 0 and summary.run_exit_code([ok], strict=True) == 0


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (12345.6, "12346 s"),  # whole seconds, never an exponent
        (999.6, "1000 s"),
        (1.5, "1.5 s"),
        (0.99996, "1 s"),  # the unit is chosen after rounding
        (0.0123456, "12.3 ms"),
        (0.0009996, "1 ms"),
        (4.2e-5, "42 µs"),
        (3e-8, "30 ns"),
        (0.0, "0 µs"),
        (-2e-3, "-2 ms"),  # a negative remainder keeps its sign and unit
    ],
)
def test_one_duration_formatter_three_significant_digits(seconds: float, text: str) -> None:
    """summary.fmt_seconds is what the summary, the report and the projection print."""
    assert summary.fmt_seconds(seconds) == text


def test_a_percent_of_peak_above_100_is_marked_and_explained(tmp_path: Any) -> None:
    """gemm fp32 at 117% of a CPU's estimated peak (its clock as a VM reports it; turbo ran
    faster) was printed as a plain 117.0: the cell is marked, one note under the run's table
    and in the report says why and how to give the peak, and the roofline marks it too."""
    from pathlib import Path

    from suite.report.document import Table
    from suite.report.load import Run
    from suite.report.sections import roofline_section, summary_section

    below = synthetic.operator_record("conv2d", time_s=2.5e-4, peak_tflops=0.16)  # 84%
    above = synthetic.operator_record("gemm", time_s=1.8e-4, peak_tflops=0.16)  # 117%
    assert summary.over_peak_note([below]) is None
    assert summary.above_peak(100.06) and not summary.above_peak(100.04)  # prints as 100.0
    note = summary.over_peak_note([below, above])
    assert note is not None and note.startswith(
        "* 1 record(s) above 100% of the peak (at most 117%"
    )
    assert "synthetic: declared for a test" in note and "[device] peak_tflops" in note
    out = io.StringIO()
    Console(file=out, width=250).print(summary.table([below, above]))
    assert "116.5*" in out.getvalue() and out.getvalue().count("*") == 1
    run = Run(Path(tmp_path), Path(tmp_path) / "results.jsonl", [below, above], label="r")
    blocks = summary_section([run]).blocks
    (tab,) = [b for b in blocks if isinstance(b, Table)]
    peak = {row[0]: row[8] for row in tab.rows}
    assert peak["gemm"] == "116.5*" and not peak["conv2d"].endswith("*"), peak
    assert note in blocks
    roof = [b for b in roofline_section([run], lambda name: name).blocks if isinstance(b, str)]
    assert any(b.startswith("* 1 record(s) above their roof") for b in roof), roof


def test_a_pipeline_that_feeds_less_than_one_accelerator_says_so_in_words() -> None:
    """ "feeds 0×H100 (6% of one)" read as a count; the share is the figure there."""
    rec: dict[str, Any] = {"pipeline": {"feeding": [
        {"accelerators": 0, "accelerator": "H100", "share_of_one": 0.063}]}}  # fmt: skip
    assert summary.feeding_label(rec) == " feeds 6% of one H100"
    rec["pipeline"]["feeding"][0]["accelerators"] = 2
    assert summary.feeding_label(rec) == " feeds 2×H100"


def test_a_loader_read_by_several_ranks_says_its_rate_is_rank_0s() -> None:
    """`--world-size 2` on the loader: the record's throughput is rank 0's; the table printed
    it bare (249.7 samples/s) where the two ranks' steady rates summed to 557.1."""
    from rich.console import Console

    ranks = {"world_size": 2, "aggregate_rate": 557.14, "per_rank_rate": {"0": 337.9, "1": 219.2}}
    rec: dict[str, Any] = {"pipeline": {"ranks": ranks}}
    assert summary.ranks_label(rec) == " (rank 0 of 2; 557.1 all ranks, steady)"
    assert summary.ranks_label({"pipeline": {"ranks": {"world_size": 1}}}) == ""
    assert summary.ranks_label({"metrics": []}) == ""  # not a loader: nothing
    loader = {
        **with_checks(Check("labels_match_files", 0.0, 0.0)),
        "benchmark": {"level": "training", "name": "loader", "params": {
            "format": "folder", "workers": 1, "batch": 6, "transform": "train", "cache": "warm",
            "data": "/data/insects"}},
        "metrics": [{"name": "batch_time", "unit": "s", "higher_is_better": False,
                     "value": 0.0125, "median": 0.0125, "ci95": [0.01, 0.015], "n": 8},
                    {"name": "throughput", "unit": "samples/s", "higher_is_better": True,
                     "value": 490.7, "median": 490.7, "ci95": [400.0, 560.0], "n": 8}],
        "pipeline": {"ranks": {**ranks, "aggregate_rate": 1199.5},
                     "epoch": {"steady_rate": 540.3}},
        "world_size": 2,
    }  # fmt: skip
    console = Console(width=400, record=True)
    console.print(summary.table([loader]))
    assert "490.7 samples/s (rank 0 of 2; 1199.5 all ranks, steady)" in console.export_text()


def test_corrupt_samples_a_loader_delivered_are_said_under_the_table() -> None:
    """A truncated JPEG in a user's ImageFolder: the PyTorch loader delivers it as zeros and
    the record lists it (pipeline.corrupt), but the run printed only "ok"."""
    bad = {"pipeline": {"corrupt": {"count": 1, "files": ["cat/cat_trunc.jpg"], "ids": [40]}}}
    clean = {"pipeline": {"corrupt": {"count": 0, "files": [], "ids": []}}}
    assert summary.corrupt_note([clean, {"metrics": []}]) is None
    note = summary.corrupt_note([bad, clean, bad])
    assert note is not None
    assert note.startswith("corrupt: 2 record(s) read samples their loader could not decode")
    assert "cat/cat_trunc.jpg;" in note and "--scan" in note
    many = {"pipeline": {"corrupt": {"count": 5, "files": [f"c/{i}.jpg" for i in range(5)]}}}
    assert "c/0.jpg, c/1.jpg, c/2.jpg and 2 more" in (summary.corrupt_note([many]) or "")


def test_a_long_skip_reason_keeps_its_fix_in_the_table() -> None:
    """A bf16 optimizer task skipped for want of master weights: the table cut its reason at
    120 characters, inside the parenthesis, and the fix (master_weights = 'none') was lost."""
    why = (
        "pytorch offers no fp32 master weights for bf16 parameters (its optimizers hold "
        "bfloat16 parameters, gradients and state (torch.optim keeps no fp32 master copy)); "
        "set master_weights = 'none' to step them as they are"
    )
    cell = summary.short_reason(why)
    assert len(cell) <= 120 and cell.startswith("pytorch offers no fp32 master weights")
    assert cell.endswith("…; set master_weights = 'none' to step them as they are")
    assert summary.short_reason("short; fix") == "short; fix"
    long_fix = "x" * 100 + "; " + "y" * 100  # no fix short enough to keep: cut at the end
    assert summary.short_reason(long_fix) == "x" * 100 + "; " + "y" * 17 + "…"


def test_a_users_dataset_is_named_by_its_last_two_parts_in_a_label() -> None:
    """A loader row's params repeated the dataset's whole path, widening the table past a
    screen; the record keeps it whole."""
    from suite.levels.training.loader import LoaderBenchmark, short_path

    assert short_path("/scratch/me/imagenet/train") == "…/imagenet/train"
    assert short_path("/data/train") == "/data/train" and short_path("train") == "train"
    p = {"format": "folder", "workers": 2, "batch": 32, "transform": "train", "cache": "warm",
         "data": "/scratch/me/imagenet/train"}  # fmt: skip
    assert LoaderBenchmark().label(p) == "folder w2 b32 train warm …/imagenet/train"


def test_a_lopsided_interval_is_shown_by_its_two_sides() -> None:
    """A median CI of 830 us [37 us, 7.57 ms] read "±453.9%", as though its low end were
    below zero; an about symmetric one keeps its half-width."""
    assert summary.ci_text(830e-6, 37e-6, 7.57e-3) == "-95.5%/+812%"
    assert summary.ci_text(100.0, 99.0, 101.5) == "±1.2%"  # sides 1 and 1.5: about symmetric
    assert summary.ci_text(100.0, 99.9, 100.3) == "±0.2%"  # both small: the half-width
    assert summary.ci_text(1.0, 0.411, 11.5) == "-58.9%/+1050%"  # no exponent (1.05e+03%)
    assert summary.ci_text(1.0, 1 - 1e-8, 1.1) == "-<0.01%/+10%"
    assert summary.ci_text(0.0, -1.0, 1.0) == "-"


def test_the_tables_rates_keep_three_significant_digits() -> None:
    """A layer norm at 0.89 GFLOP/s and 0.9 GB/s read "0.000 TFLOP/s" and "0.9" (a fixed three
    and one decimals): a rate that reads as zero. The table now keeps three significant
    digits, and a GPU's large rates stay whole numbers."""
    small = synthetic.operator_record("norm", {"kind": "layer", "batch": 512, "channels": 256},
                              time_s=1.175e-3, flops=1048576.0, nbytes=1050624.0)  # fmt: skip
    out = io.StringIO()
    Console(file=out, width=250).print(summary.table([small]))
    row = next(line for line in out.getvalue().splitlines() if "layer 512x256" in line)
    assert "0.000892 TFLOP/s" in row and "0.000 TFLOP/s" not in row, row
    assert " 0.894 " in row, row
    assert [summary.fmt_rate(v) for v in (789.6, 3352.0, 12.34, 0.0107, 1.88e-6, 0.0)] == [
        "790", "3352", "12.3", "0.0107", "1.88e-06", "0",
    ]  # fmt: skip


def test_a_record_without_a_timing_shows_its_checks() -> None:
    """`dlsuite run --level network --benchmark agreement` (the README's command): the
    agreement records carry no timing, and their row left the correctness column empty (the
    place of a skip's reason), so the run's table said nothing of the agreement it measured."""
    rec = with_checks(
        Check("logits.max_rel_error.numpy_vs_pytorch", 9.9e-7, 1e-3),
        Check("weights.max_rel_error.numpy_vs_pytorch", 1.4e-7, 1e-4),
    )
    rec["metrics"] = [{"name": "agreement_error", "unit": "ratio", "higher_is_better": False,
                       "value": 9.9e-7}]  # fmt: skip
    validate_record(rec)
    failing = with_checks(Check("logits.max_rel_error_vs_onnxruntime", 3e-2, 1e-3))
    failing["metrics"] = rec["metrics"]
    skipped = synthetic.skipped_record()
    console = Console(width=250, file=io.StringIO())
    console.print(summary.table([rec, failing, skipped]))
    lines = console.file.getvalue().splitlines()  # type: ignore[attr-defined]
    assert any("pass 1.4e-07≤1e-04" in ln for ln in lines), lines
    assert any("FAIL 3.0e-02>1e-03" in ln for ln in lines), lines
    reason = summary.short_reason(skipped["reason"])[:30]
    assert any(reason in ln for ln in lines), (reason, lines)
