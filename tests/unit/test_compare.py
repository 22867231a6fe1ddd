"""`dlsuite compare BASE NEW`: matching by task identity, CI-aware verdicts, exit codes."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from suite.compare import (
    compare_main,
    compare_runs,
    match_records,
    metric_verdict,
    parse_tolerance,
)
from suite.errors import ConfigError
from suite.levels.distributed import arithmetic as A
from suite.report.load import Run, load_run
from tests import synthetic as S
from tests.helpers import cli


def _console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=250, color_system=None), buf


def _records() -> list[dict[str, Any]]:
    return [
        S.operator_record("gemm", dtype="fp32", time_s=1.8e-4),
        S.operator_record("gemm", dtype="bf16", time_s=1.0e-4),
        S.operator_record(
            "softmax",
            {"rows": 2048, "cols": 128},
            time_s=1.0e-4,
            flops=5 * 2048 * 128,
            nbytes=8 * 2048 * 128,
        ),
        S.skipped_record(),
    ]


@pytest.fixture()
def base_dir(tmp_path: Path) -> Path:
    return S.write_run(tmp_path / "base", _records())


def _variant(tmp_path: Path, name: str, records: list[dict[str, Any]]) -> Path:
    return S.write_run(tmp_path / name, records)


def test_parse_tolerance() -> None:
    assert parse_tolerance("5%") == pytest.approx(0.05)
    assert parse_tolerance("0.05") == pytest.approx(0.05)
    assert parse_tolerance(" 12.5% ") == pytest.approx(0.125)
    assert parse_tolerance("0") == 0.0
    for bad in ("5", "abc", "-1%", "nan%", ""):
        with pytest.raises(ConfigError, match="--tolerance"):
            parse_tolerance(bad)


def test_a_run_given_twice_is_refused_as_report_refuses_it(base_dir: Path) -> None:
    """``dlsuite compare RUN RUN`` (also as RUN and RUN/results.jsonl, or through a link)
    printed a table of zero changes and "no regression" (exit 0): a gate that passes
    whatever the run holds. It is one clear error (exit 2), as ``dlsuite report RUN RUN``."""
    link = base_dir.parent / "link"
    link.symlink_to(base_dir)
    for other in (base_dir, base_dir / "results.jsonl", link):
        console, buf = _console()
        with pytest.raises(ConfigError, match="the same run as .*compare BASE with another"):
            compare_main(base_dir, other, 0.05, console)
        assert buf.getvalue() == ""
    proc = cli("compare", str(base_dir), str(link / "results.jsonl"))
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    (line,) = proc.stderr.splitlines()
    assert line.startswith("dlsuite: error:") and "the same run as" in line, proc.stderr


@pytest.mark.parametrize("where", ["before", "after"])
def test_a_negative_percentage_tolerance_is_one_clear_line(
    base_dir: Path, tmp_path: Path, where: str
) -> None:
    """``--tolerance -5%`` read as an unknown option (argparse takes "-0.05" for a value but
    not "-5%"), so the user was told the flag had no argument; now the value is read and
    refused for what it is."""
    new = _variant(tmp_path, "new", _records())
    runs = [str(base_dir), str(new)]
    flag = ["--tolerance", "-5%"]
    proc = cli("compare", *(flag + runs if where == "before" else runs + flag))
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    (line,) = proc.stderr.splitlines()
    assert line == "dlsuite: error: --tolerance -5%: must be a non-negative percentage such as 5%"


def test_a_copy_of_a_run_against_it_is_all_unchanged(base_dir: Path, tmp_path: Path) -> None:
    copy_dir = _variant(tmp_path, "copy", _records())
    console, buf = _console()
    assert compare_main(base_dir, copy_dir / "results.jsonl", 0.05, console) == 0
    cmp = compare_runs(load_run(base_dir), load_run(copy_dir), 0.05)
    assert cmp.pairs == 4 and not cmp.only_base and not cmp.only_new
    assert cmp.metrics and all(d.verdict == "unchanged" for d in cmp.metrics)
    assert "0 regressed" in buf.getvalue() and "no regression" in buf.getvalue()


def test_slower_copy_regresses_every_metric(base_dir: Path, tmp_path: Path) -> None:
    slow = [S.scaled(r, 1.5) if r["status"] == "ok" else r for r in _records()]
    new = _variant(tmp_path, "slow", slow)
    console, buf = _console()
    assert compare_main(base_dir, new, 0.05, console) == 1
    cmp = compare_runs(load_run(base_dir), load_run(new), 0.05)
    assert cmp.metrics and all(d.verdict == "regressed" for d in cmp.metrics)
    time_diffs = [d for d in cmp.metrics if d.name == "time"]
    assert all(d.change == pytest.approx(0.5) for d in time_diffs)
    rate = next(d for d in cmp.metrics if d.name == "flop_rate")
    assert rate.change == pytest.approx(1 / 1.5 - 1)
    out = buf.getvalue()
    assert "regressed" in out and "REGRESSION" in out and "+50.0%" in out
    assert f"{len(cmp.metrics)} regressed (in 3 records)" in out  # each record's metrics


def test_a_slowdown_measured_on_a_busy_machine_is_not_judged(
    base_dir: Path, tmp_path: Path
) -> None:
    """Two quick runs beside another run on a 2-core VM: "72 regressed" (medians of 8 ms where
    28 us was measured quiet), each record's quiet check saying busy. Such a difference is
    "busy", not regressed, and fails nothing; --include-busy judges it."""
    slow = [S.scaled(r, 1.5) if r["status"] == "ok" else r for r in _records()]
    S.mark_busy(slow[0])  # gemm fp32 measured beside other load
    new = _variant(tmp_path, "slow-busy", slow)
    cmp = compare_runs(load_run(base_dir), load_run(new), 0.05)
    verdicts = {
        (d.base_rec["benchmark"]["name"], d.base_rec["dtype"], d.verdict) for d in cmp.metrics
    }
    assert {v for n, dt, v in verdicts if (n, dt) == ("gemm", "fp32")} == {"busy"}
    assert {v for n, dt, v in verdicts if (n, dt) != ("gemm", "fp32")} == {"regressed"}
    console, buf = _console()
    assert compare_main(base_dir, new, 0.05, console) == 1  # the quiet records still regress
    assert "4 not judged" in buf.getvalue() and "--include-busy" in buf.getvalue()
    only_busy = _variant(tmp_path, "only-busy", [slow[0], *_records()[1:]])
    assert compare_main(base_dir, only_busy, 0.05, _console()[0]) == 0
    assert compare_main(base_dir, only_busy, 0.05, _console()[0], include_busy=True) == 1


def test_a_comparison_that_judged_nothing_does_not_say_no_regression(
    base_dir: Path, tmp_path: Path
) -> None:
    """Every record of NEW measured beside other load: each figure "not judged", and the last
    word was "no regression", as if the runs had been found alike. It says nothing was judged
    (still exit 0: busy figures fail nothing); --include-busy judges them."""
    busy = copy.deepcopy(_records())
    for rec in busy:
        if rec["status"] == "ok":
            S.mark_busy(rec)
    new = _variant(tmp_path, "all-busy", busy)
    console, buf = _console()
    assert compare_main(base_dir, new, 0.05, console) == 0
    text = " ".join(buf.getvalue().split())  # the last line, as wrapped
    assert "0 unchanged" in text and "not judged" in text
    assert text.endswith("nothing judged: no regression found, none ruled out"), text
    console, buf = _console()
    assert compare_main(base_dir, new, 0.05, console, include_busy=True) == 0
    assert buf.getvalue().strip().endswith("no regression")
    assert "nothing judged" not in buf.getvalue()


def test_faster_copy_improves_and_exits_0(base_dir: Path, tmp_path: Path) -> None:
    fast = [S.scaled(r, 1 / 1.5) if r["status"] == "ok" else r for r in _records()]
    new = _variant(tmp_path, "fast", fast)
    console, buf = _console()
    assert compare_main(base_dir, new, 0.05, console) == 0
    cmp = compare_runs(load_run(base_dir), load_run(new), 0.05)
    assert cmp.metrics and all(d.verdict == "improved" for d in cmp.metrics)
    assert "improved" in buf.getvalue()


def test_flipped_correctness_check_fails(base_dir: Path, tmp_path: Path) -> None:
    recs = _records()
    bad = recs[1]
    bad["correctness"]["checks"][1].update(error=0.5, passed=False)
    bad["correctness"]["passed"] = False
    new = _variant(tmp_path, "wrong", recs)
    console, buf = _console()
    assert compare_main(base_dir, new, 0.05, console) == 1
    cmp = compare_runs(load_run(base_dir), load_run(new), 0.05)
    assert [f.name for f in cmp.newly_failing_checks] == ["c.l2_rel_error_vs_fp64"]
    assert cmp.count("regressed") == 0
    assert "passed in BASE and fail in NEW" in buf.getvalue()
    # ... and the other way round it is a fix, not a failure
    assert compare_main(new, base_dir, 0.05, _console()[0]) == 0


def test_ok_record_that_now_fails_is_a_regression(base_dir: Path, tmp_path: Path) -> None:
    recs = _records()
    recs[0] = S.failed_record("gemm", status="timeout")
    new = _variant(tmp_path, "timeout", recs)
    console, buf = _console()
    assert compare_main(base_dir, new, 0.05, console) == 1
    cmp = compare_runs(load_run(base_dir), load_run(new), 0.05)
    assert len(cmp.status_regressions) == 1
    # the failed record (device unknown) still matched its ok counterpart
    assert cmp.pairs == 4 and not cmp.only_new
    assert "ok in BASE, timeout in NEW" in buf.getvalue()


def test_matching_ignores_task_id_but_not_device(tmp_path: Path) -> None:
    a = S.operator_record(task_id="operator-gemm-pytorch-fp32-auto000000")
    b = S.operator_record(task_id="operator-gemm-pytorch-fp32-cpu0000000")
    pairs, only_base, only_new = match_records([a], [b])
    assert len(pairs) == 1 and not only_base and not only_new
    other = S.operator_record(device={**S.CPU, "name": "Intel Xeon"})
    pairs, only_base, only_new = match_records([a], [other])
    assert not pairs and only_base == [a] and only_new == [other]
    reordered = copy.deepcopy(a)
    reordered["benchmark"]["params"] = {"k": 256, "n": 256, "m": 256}
    assert len(match_records([a], [reordered])[0]) == 1
    bf16 = S.operator_record(dtype="bf16")
    assert not match_records([a], [bf16])[0]


def test_within_tolerance_or_overlapping_ci_is_unchanged() -> None:
    base = {"name": "time", "unit": "s", "higher_is_better": False, "value": 1.0}
    base_ci = {**base, "median": 1.0, "ci95": [0.9, 1.1]}
    # 3% slower, no CI: within a 5% tolerance
    assert metric_verdict(base, {**base, "value": 1.03}, 0.05, False)[0] == "unchanged"
    # 10% slower, no CI: tolerance alone decides
    assert metric_verdict(base, {**base, "value": 1.10}, 0.05, False)[0] == "regressed"
    # 10% slower but the CIs overlap: not resolved
    new_ci = {**base, "median": 1.10, "ci95": [1.05, 1.2], "value": 1.10}
    assert metric_verdict(base_ci, new_ci, 0.05, False)[0] == "unchanged"
    # 30% slower, disjoint CIs
    far = {**base, "median": 1.3, "ci95": [1.2, 1.4], "value": 1.3}
    assert metric_verdict(base_ci, far, 0.05, False)[0] == "regressed"
    # direction: a higher-is-better metric going up improves
    rate = {"name": "r", "unit": "GB/s", "higher_is_better": True, "value": 1.0}
    assert metric_verdict(rate, {**rate, "value": 1.3}, 0.05, True)[0] == "improved"


def test_a_time_and_the_rates_made_from_it_get_one_verdict(tmp_path: Path) -> None:
    """Two quick gemm runs: time 150 -> 158 µs (+5.2%) "regressed" beside flop_rate, bandwidth
    and % of peak (-4.9%, the same measurement) "unchanged" at the default 5%. The tolerance
    is a factor either way, so the four agree: all regressed, all improved, all unchanged."""
    for factor, verdict in ((1.052, "regressed"), (1 / 1.052, "improved"), (1.048, "unchanged"),
                            (1 / 1.048, "unchanged")):  # fmt: skip
        base = S.write_run(tmp_path / f"b{factor}", [S.operator_record(time_s=150e-6)])
        new = S.write_run(tmp_path / f"n{factor}",
                          [S.operator_record(time_s=150e-6 * factor)])  # fmt: skip
        cmp = compare_runs(load_run(base), load_run(new), 0.05)
        got = {d.name: (d.verdict, round(d.change, 4)) for d in cmp.metrics}
        assert set(got) == {"time", "flop_rate", "bandwidth", "percent_of_peak"}
        assert {v for v, _ in got.values()} == {verdict}, (factor, got)
        assert got["time"][1] == round(factor - 1, 4)  # the change shown stays NEW vs BASE
        assert got["flop_rate"][1] == round(1 / factor - 1, 4)
    # a figure that is not positive keeps the relative rule
    neg = {"name": "d", "unit": "1", "higher_is_better": True, "value": -1.0}
    assert metric_verdict(neg, {**neg, "value": -1.04}, 0.05, True)[0] == "unchanged"
    assert metric_verdict(neg, {**neg, "value": -1.06}, 0.05, True)[0] == "regressed"


def test_percent_of_peak_gets_the_flop_rate_ci(tmp_path: Path) -> None:
    # 8% slower gemm fp32 with CIs still overlapping (each ±10%): flop_rate is unchanged,
    # and percent_of_peak (recorded without a CI) must not be called a regression alone.
    wide = [S.operator_record("gemm", time_s=1.8e-4)]
    for r in wide:
        for m in r["metrics"]:
            if "ci95" in m:
                m["ci95"] = [m["median"] * 0.9, m["median"] * 1.1]
    base = _variant(tmp_path, "wide", wide)
    slower = [S.scaled(wide[0], 1.08)]
    new = _variant(tmp_path, "wide-slower", slower)
    cmp = compare_runs(load_run(base), load_run(new), 0.05)
    verdicts = {d.name: d.verdict for d in cmp.metrics}
    assert verdicts["flop_rate"] == "unchanged"
    assert verdicts["percent_of_peak"] == "unchanged"
    assert next(d for d in cmp.metrics if d.name == "percent_of_peak").ci_derived


def test_a_share_of_another_peak_is_not_compared_and_says_why(tmp_path: Path) -> None:
    """The same times against a peak of 0.208 and one of 0.523 TFLOP/s (the CPU's clock
    measured from 2026-12): % of peak fell 60% and compare called every record regressed. Only
    the time and rates are compared; the pair of peaks is named, with why each was used; the
    exit code is 0. The same peak still compares % of peak."""
    old = S.operator_record(time_s=1.8e-4, peak_tflops=0.208)
    new = S.operator_record(time_s=1.8e-4, peak_tflops=0.523)
    new["device"]["peak_source"] = "estimated: 2 cores x 4.08 GHz (measured: dependent adds)"
    base_dir = S.write_run(tmp_path / "old-peak", [old])
    new_dir = S.write_run(tmp_path / "new-peak", [new])
    cmp = compare_runs(load_run(base_dir), load_run(new_dir), 0.05)
    assert {d.name for d in cmp.metrics} == {"time", "flop_rate", "bandwidth"}
    assert {d.verdict for d in cmp.metrics} == {"unchanged"} and not cmp.failed
    assert cmp.peak_changes == [
        "percent_of_peak, fp32: the peak changed from 0.208 TFLOP/s to 0.523 TFLOP/s (1 record)",
        "BASE's peak: synthetic: declared for a test; NEW's: estimated: 2 cores x 4.08 GHz "
        "(measured: dependent adds)",
    ]
    proc = cli("compare", str(base_dir), str(new_dir))
    assert proc.returncode == 0, proc.stdout
    assert "not compared (a share of another peak): percent_of_peak, fp32" in proc.stdout
    same = S.write_run(tmp_path / "same-peak", [S.scaled(old, 1.2)])
    cmp = compare_runs(load_run(base_dir), load_run(same), 0.05)
    assert {d.name: d.verdict for d in cmp.metrics}["percent_of_peak"] == "regressed"
    assert not cmp.peak_changes
    # a peak not recorded (a record the history store kept before it kept peaks) is not
    # known to be the same: not compared either
    unknown = copy.deepcopy(old)
    del unknown["work"]["peak_tflops"]
    cmp = compare_runs(_as_run(unknown), load_run(new_dir), 0.05)
    assert "percent_of_peak" not in {d.name for d in cmp.metrics}
    assert "a peak not recorded (BASE not recorded, NEW 0.523 TFLOP/s" in cmp.peak_changes[0]


def _as_run(rec: dict[str, Any]) -> Run:
    """A run of one record as the history store hands it to compare (not a directory)."""
    return Run(path=Path("gone"), results=Path("gone/results.jsonl"), records=[rec], label="s")


def test_bad_input_is_a_config_error(base_dir: Path, tmp_path: Path) -> None:
    console, _ = _console()
    with pytest.raises(ConfigError, match="no such run directory"):
        compare_main(tmp_path / "nope", base_dir, 0.05, console)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match="no results.jsonl"):
        compare_main(base_dir, empty, 0.05, console)
    broken = tmp_path / "broken"
    broken.mkdir()
    rec = S.operator_record()
    del rec["host"]
    (broken / "results.jsonl").write_text(json.dumps(rec) + "\n")
    with pytest.raises(ConfigError, match=r"results.jsonl:1: invalid record"):
        compare_main(base_dir, broken, 0.05, console)
    with pytest.raises(ConfigError, match="tolerance"):
        compare_main(base_dir, base_dir, -0.1, console)


def test_a_failure_message_that_looks_like_markup_is_printed_as_it_is(
    base_dir: Path, tmp_path: Path
) -> None:
    recs = _records()
    recs[0] = S.failed_record("gemm")
    recs[0]["reason"] = "[/__w/gloo/pair.cc:537] Read error"
    new = _variant(tmp_path, "markup", recs)
    console, buf = _console()
    assert compare_main(base_dir, new, 0.05, console) == 1
    assert "[/__w/gloo/pair.cc:537] Read error" in buf.getvalue()


def _sweep_point(size: int, world: int = 2) -> dict[str, Any]:
    """An ok allreduce record of one size, with the parameters the worker gives it."""
    n = A.element_count("allreduce", size, world)
    rec = S.collective_record(message_bytes=n * A.ITEMSIZE, world_size=world, rank=None)
    rec["benchmark"]["params"] = {
        "message_bytes": n * A.ITEMSIZE, "elements": n, "requested_bytes": size,
    }  # fmt: skip
    return rec


def test_a_collective_sweep_that_timed_out_is_a_failed_record_of_every_size(
    tmp_path: Path,
) -> None:
    """`dlsuite run --level distributed --benchmark allreduce --timeout 2`: the sweep timed
    out and wrote one record with the task's parameters (sizes [...]), where the run before
    wrote one per size. compare listed 5 "only in BASE", 1 "only in NEW", said "nothing was
    compared" and exited 0 ("no regression")."""
    sizes = [8, 1024, 65536, 1 << 20]
    base = _variant(tmp_path, "ok", [_sweep_point(s) for s in sizes])
    timeout = S.failed_record(
        "allreduce", status="timeout", level="distributed", params={"sizes": sizes},
        world_size=2,
    )  # fmt: skip
    other_world = S.failed_record(
        "allreduce", status="timeout", level="distributed", params={"sizes": sizes},
        world_size=4,
    )  # fmt: skip
    new = _variant(tmp_path, "timeout", [timeout, other_world])
    console, buf = _console()
    assert compare_main(base, new, 0.05, console) == 1
    cmp = compare_runs(load_run(base), load_run(new), 0.05)
    assert cmp.pairs == len(sizes) and not cmp.only_base
    assert [r["world_size"] for r in cmp.only_new] == [4]  # another world size covers nothing
    regressed = sorted(
        b["benchmark"]["params"]["requested_bytes"] for b, _ in cmp.status_regressions
    )
    assert regressed == sizes
    assert "allreduce 1 MiB ×2 ranks fp32 pytorch: ok in BASE, timeout in NEW" in buf.getvalue()
    # the other way round: each size is a status change, named by its size
    console, buf = _console()
    assert compare_main(new, base, 0.05, console) == 0
    assert "status change: allreduce 64 KiB ×2 ranks fp32: timeout → ok" in buf.getvalue()
    # a sweep of other sizes covers none of these records
    elsewhere = S.failed_record(
        "allreduce", status="timeout", level="distributed", params={"sizes": [16]},
        world_size=2,
    )  # fmt: skip
    pairs, only_base, only_new = match_records(load_run(base).records, [elsewhere])
    assert not pairs and len(only_base) == len(sizes) and only_new == [elsewhere]


def test_runs_of_two_machines_or_two_frameworks_say_why_nothing_paired_and_pair_across(
    tmp_path: Path,
) -> None:
    """A run of this machine against one of an Intel machine, or PyTorch's against JAX's: the
    output listed every record "only in BASE"/"only in NEW" and "nothing was compared", without
    the one field that kept them apart, and there was no way to compare them."""
    sizes = [1024, 1 << 20]
    amd = [_sweep_point(s) for s in sizes]
    intel = [S.scaled(r, 2.0) for r in copy.deepcopy(amd)]
    for r in intel:
        r["device"] = {**r["device"], "name": "Intel Xeon Gold 6338"}
    base, other_machine = _variant(tmp_path, "amd", amd), _variant(tmp_path, "intel", intel)
    console, buf = _console()
    # nothing paired is exit 2, not 0: a CI gate comparing main's run of another machine
    # with this one passed while it had checked nothing
    assert compare_main(base, other_machine, 0.05, console) == 2
    out = buf.getvalue()
    assert "nothing was compared" in out and "exit code 2" in out
    assert "2 record(s) of NEW differ from one of BASE only in the device" in out
    assert "Intel Xeon Gold 6338" in out and "--across device pairs them" in out
    console, buf = _console()
    assert compare_main(base, other_machine, 0.05, console, across=("device",)) == 1
    cmp = compare_runs(load_run(base), load_run(other_machine), 0.05, across=("device",))
    assert cmp.pairs == 2 and not cmp.only_base and not cmp.only_new
    assert {d.verdict for d in cmp.metrics} == {"regressed"}  # twice the time
    assert "→ Intel Xeon Gold 6338" in buf.getvalue() and "across device" in buf.getvalue()

    jax = copy.deepcopy(amd)
    for r in jax:
        r["framework"] = {**r["framework"], "name": "jax", "version": "0.8.1"}
    jax_run = _variant(tmp_path, "jax", jax)
    console, buf = _console()
    assert compare_main(base, jax_run, 0.05, console) == 2
    assert "only in the framework (BASE: pytorch; NEW: jax)" in buf.getvalue()
    console, buf = _console()
    assert compare_main(base, jax_run, 0.05, console, across=("framework",)) == 0
    cmp = compare_runs(load_run(base), load_run(jax_run), 0.05, across=("framework",))
    assert cmp.pairs == 2 and {d.verdict for d in cmp.metrics} == {"unchanged"}
    assert "pytorch → jax" in buf.getvalue()
    # across the framework only: the device still keeps two machines apart
    assert not match_records(amd, intel, across=("framework",))[0]


def test_across_names_a_field_compare_knows() -> None:
    from suite.cli.compare import parse_across

    assert parse_across("device, framework,device") == ("device", "framework")
    assert parse_across("") == ()
    with pytest.raises(
        ConfigError, match="--across dtype: dtype is not a field.*device, framework"
    ):
        parse_across("dtype")


def test_across_a_field_still_pairs_records_of_the_same_one_first(tmp_path: Path) -> None:
    """Two runs of PyTorch and JAX each, compared --across framework: a record pairs with its
    own framework's where there is one, whatever the order of BASE's records."""
    pt = _sweep_point(1024)
    jax = copy.deepcopy(pt)
    jax["framework"] = {**jax["framework"], "name": "jax", "version": "0.8.1"}
    slow_pt = S.scaled(pt, 3.0)
    pairs, only_base, only_new = match_records([jax, pt], [slow_pt, jax], across=("framework",))
    assert not only_base and not only_new
    assert {(b["framework"]["name"], n["framework"]["name"]) for b, n in pairs} == {
        ("pytorch", "pytorch"), ("jax", "jax"),
    }  # fmt: skip
    # one framework in NEW: its records pair with the other framework's only where its own
    # has none
    pairs, only_base, _ = match_records([jax, pt], [slow_pt], across=("framework",))
    assert [(b["framework"]["name"], n["framework"]["name"]) for b, n in pairs] == [
        ("pytorch", "pytorch")
    ]
    assert only_base == [jax]


def test_a_new_run_stopped_half_way_is_said_to_be_incomplete(tmp_path: Path) -> None:
    """NEW was interrupted after one of its three tasks: its missing tasks were only listed as
    'only in BASE', with nothing saying NEW had not finished."""
    base = [S.operator_record("norm", {"kind": "batch", "n": 2, "c": 3, "h": 5, "w": 5}, time_s=4e-6),
            S.operator_record("gelu", {"rows": 33, "cols": 7}, time_s=2e-6, flops=8 * 231),
            S.operator_record("gemm", {"m": 12, "n": 12, "k": 12}, time_s=1e-6, flops=3456)]  # fmt: skip
    base_dir = S.write_run(tmp_path / "monday", base)
    new_dir = S.write_run(tmp_path / "tuesday", copy.deepcopy(base[:1]))
    manifest = json.loads((new_dir / "manifest.json").read_text())
    manifest.update(state="interrupted", tasks=[r["task_id"] for r in base])
    (new_dir / "manifest.json").write_text(json.dumps(manifest))
    console, buf = _console()
    assert compare_main(base_dir, new_dir, 0.05, console) == 0  # missing is not a regression
    out = " ".join(buf.getvalue().split())
    assert "2 record(s) only in BASE" in out
    assert "NEW is incomplete (interrupted): 2 of its 3 planned tasks have no record" in out
    assert "BASE is incomplete" not in out


def test_a_file_joining_two_runs_is_refused_not_paired_with_the_wrong_copy(
    tmp_path: Path,
) -> None:
    """``cat a/results.jsonl b/results.jsonl > ab/results.jsonl`` then ``compare a ab``: a's
    records paired with their own copies ("no regression", exit 0) and b's, 10% slower, were
    listed "only in NEW" though a holds each task. A file that holds a task twice is one line
    naming it and the runs, exit 2."""
    from suite.cli import main as cli_main

    a_recs = [S.operator_record(time_s=2e-4), S.operator_record("gemm", dtype="bf16")]
    b_recs = [S.operator_record(time_s=2.2e-4), S.operator_record("gemm", dtype="bf16")]
    for r in b_recs:
        r["run_id"] = "20260101-000000-beef"
    a = S.write_run(tmp_path / "a", a_recs)
    joined = tmp_path / "ab" / "results.jsonl"
    joined.parent.mkdir()
    joined.write_text("".join(json.dumps(r) + "\n" for r in a_recs + b_recs))
    console, _ = _console()
    with pytest.raises(ConfigError) as err:
        compare_main(a, joined, 0.05, console)
    msg = str(err.value)
    assert msg.startswith(f"NEW {joined}: 2 task(s) have more than one record (e.g. gemm ")
    assert f"from run(s) 20260101-000000-beef, {a_recs[0]['run_id']};" in msg
    assert cli_main(["compare", str(joined), str(a)]) == 2  # as BASE too
    b = S.write_run(tmp_path / "b", b_recs)  # each run alone: the slowdown is found
    assert compare_main(a, b, 0.05, console) == 1
    # report and project refused nothing: each row shown twice, each record fitted twice
    for argv, verb in (
        (["report", str(joined), "--out", str(tmp_path / "rep")], "which record to report"),
        (["project", str(joined), "--ranks", "8"], "which record to project from"),
    ):
        proc = cli(*argv)
        assert proc.returncode == 2 and verb in proc.stderr, proc.stdout + proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "rep" / "report.md").exists()
    assert cli("report", str(a), str(b), "--out", str(tmp_path / "rep")).returncode == 0


def test_a_metric_or_check_base_has_and_new_lacks_is_named(tmp_path: Path) -> None:
    """A failing check deleted from NEW by hand (or a metric NEW no longer records) was
    compared by nothing and said by nothing; each is named, not failing the comparison."""
    base = S.write_run(
        tmp_path / "b", [S.operator_record(), S.operator_record("gemm", dtype="bf16")]
    )
    edited = S.operator_record(error=5e-5)  # its l2 check fails ...
    edited["correctness"]["checks"] = [
        c for c in edited["correctness"]["checks"] if c["name"] != "c.l2_rel_error_vs_fp64"
    ]  # ... and is removed; the rest of the record stays as written
    edited["correctness"]["passed"] = True
    edited["metrics"] = [m for m in edited["metrics"] if m["name"] != "bandwidth"]
    new = S.write_run(tmp_path / "n", [edited, S.operator_record("gemm", dtype="bf16")])
    cmp = compare_runs(load_run(base), load_run(new), 0.05)
    assert cmp.dropped == [
        "gemm 256x256x256 fp32 pytorch: metric bandwidth, check c.l2_rel_error_vs_fp64"
    ]
    console, buf = _console()
    assert compare_main(base, new, 0.05, console) == 0
    assert ("not in NEW, not compared: gemm 256x256x256 fp32 pytorch: metric bandwidth, check "
            "c.l2_rel_error_vs_fp64") in buf.getvalue()  # fmt: skip
    assert compare_runs(load_run(base), load_run(base), 0.05).dropped == []
