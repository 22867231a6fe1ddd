"""Performance references (references/*.toml, ReFrame style): loading, matching, verdicts.

(tests/unit/test_references.py is about the operators' float64 reference implementations.)
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from suite.errors import ConfigError
from suite.references import (
    Reference,
    check,
    check_references_main,
    load_references,
    parse_references,
)
from tests import synthetic as S
from tests.helpers import ROOT

SHIPPED = ROOT / "references" / "cpu-2core-ci.toml"

GEMM_REF = """
[[reference]]
level = "operator"
benchmark = "gemm"
params = { m = 256 }
dtype = "fp32"
device = "epyc"
metric = "flop_rate"
value = {value}
lower = -0.1
upper = 0.1
unit = "TFLOP/s"

[[reference]]
level = "operator"
benchmark = "gemm"
dtype = "fp32"
metric = "time"
value = {time}
upper = 0.2
"""


def _write(tmp_path: Path, text: str, name: str = "site.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _console() -> tuple[Console, io.StringIO]:
    buf = io.StringIO()
    return Console(file=buf, width=220, color_system=None), buf


def test_shipped_file_loads_and_matches_a_quick_gemm_on_the_ci_machine() -> None:
    refs = load_references([SHIPPED])
    assert len(refs) >= 2
    assert all(r.lower is None or r.lower == pytest.approx(-0.5) for r in refs)
    rec = S.operator_record("gemm", time_s=1.8e-4)  # 0.186 TFLOP/s on "AMD EPYC", 2 cores
    verdicts = check(rec, refs)
    assert {v["metric"] for v in verdicts} == {"flop_rate", "time"}
    assert all(v["verdict"] == "within" and v["passed"] for v in verdicts)
    # on a 64-core EPYC the CI references do not apply
    big = S.operator_record("gemm", device={**S.CPU, "cores": 64})
    assert check(big, refs) == []
    # the directory form loads the same files
    assert load_references([ROOT / "references"])


def test_verdicts_within_below_above(tmp_path: Path) -> None:
    rec = S.operator_record("gemm", time_s=1.8e-4)
    rate = next(m["value"] for m in rec["metrics"] if m["name"] == "flop_rate")
    for ref_value, expected, passed in (
        (rate, "within", True),
        (rate * 1.5, "below", False),  # measured 33% below a reference with -10%
        (rate / 1.5, "above", True),  # above a higher-is-better reference: not a failure
    ):
        refs = load_references(
            [
                _write(
                    tmp_path, GEMM_REF.replace("{value}", repr(ref_value)).replace("{time}", "1.0")
                )
            ]
        )
        (v,) = [v for v in check(rec, refs) if v["metric"] == "flop_rate"]
        assert (v["verdict"], v["passed"]) == (expected, passed)
        assert v["unit"] == "TFLOP/s" and v["lower"] == -0.1 and v["upper"] == 0.1
        assert set(v) >= {"metric", "value", "reference", "lower", "upper", "unit", "verdict"}
    # lower-is-better: a time above its bound fails; no lower bound = unbounded below
    refs = load_references(
        [_write(tmp_path, GEMM_REF.replace("{value}", "1").replace("{time}", "1e-4"))]
    )
    (t,) = [v for v in check(rec, refs) if v["metric"] == "time"]
    assert (t["verdict"], t["passed"], t["lower"]) == ("above", False, None)


def test_matching_keys() -> None:
    rec = S.operator_record("gemm", time_s=1.8e-4)
    base: dict[str, Any] = {
        "level": "operator",
        "benchmark": "gemm",
        "metric": "time",
        "value": 1.8e-4,
    }
    assert Reference(**base).matches(rec)
    assert Reference(**base, params={"m": 256, "k": 256}).matches(rec)
    assert not Reference(**base, params={"m": 512}).matches(rec)
    assert not Reference(**base, params={"batch": 4}).matches(rec)
    assert Reference(**base, device="Epyc").matches(rec)
    assert not Reference(**base, device="Xeon").matches(rec)
    assert not Reference(**base, device_kind="gpu").matches(rec)
    assert not Reference(**base, dtype="bf16").matches(rec)
    assert not Reference(**base, framework="jax").matches(rec)
    assert not Reference(**base, world_size=2).matches(rec)
    assert not Reference(**{**base, "benchmark": "conv2d"}).matches(rec)
    # a failed record fails the references it matches (it measured nothing); a skipped one
    # is not checked
    (failed,) = check(S.failed_record("gemm"), [Reference(**base)])
    assert (failed["verdict"], failed["passed"]) == ("failed", False)
    assert check(S.skipped_record("gemm"), [Reference(**base)]) == []


def test_bounds_are_relative_and_unbounded_when_absent() -> None:
    r = Reference("operator", "gemm", "flop_rate", 2.0, lower=-0.5, upper=None)
    assert r.bounds() == (1.0, math.inf)
    assert r.verdict(0.99) == "below" and r.verdict(1.0) == "within" and r.verdict(1e9) == "within"
    neg = Reference("operator", "gemm", "x", -2.0, lower=-0.5, upper=0.5)
    assert neg.bounds() == (-3.0, -1.0)
    # TOML inf means unbounded too
    (inf,) = parse_references(
        {"reference": [{**_min(), "lower": -math.inf, "upper": math.inf}]}, "t"
    )
    assert inf.lower is None and inf.upper is None


def _min() -> dict[str, object]:
    return {"level": "operator", "benchmark": "gemm", "metric": "time", "value": 1.0}


def test_invalid_files_are_config_errors(tmp_path: Path) -> None:
    cases = {
        "lower = 0.1": r"reference\[0\]\.lower: 0\.1 is greater than the maximum of 0",
        "upper = -0.1": r"reference\[0\]\.upper",
        "colour = 'red'": r"reference\[0\]: unknown key 'colour'; the keys here are",
        "dtype = 'fp8'": r"reference\[0\]\.dtype",
    }
    for extra, message in cases.items():
        text = "[[reference]]\nlevel='operator'\nbenchmark='gemm'\nmetric='time'\nvalue=1.0\n"
        with pytest.raises(ConfigError, match=message):
            load_references([_write(tmp_path, text + extra + "\n")])
    with pytest.raises(ConfigError, match=r"reference\[0\]: 'value' is a required"):
        load_references(
            [_write(tmp_path, "[[reference]]\nlevel='operator'\nbenchmark='g'\nmetric='t'\n")]
        )
    with pytest.raises(ConfigError, match="TOML syntax error"):
        load_references([_write(tmp_path, "[[reference]\n")])
    with pytest.raises(ConfigError, match="no such references file"):
        load_references([tmp_path / "missing.toml"])
    with pytest.raises(ConfigError, match="nan"):
        parse_references({"reference": [{**_min(), "value": math.nan}]}, "t")
    # a unit that disagrees with the record is the reference's mistake, named
    refs = parse_references({"reference": [{**_min(), "unit": "ms"}]}, "site.toml")
    with pytest.raises(ConfigError, match=r"site.toml: reference\[0\]: unit 'ms'"):
        check(S.operator_record(), refs)


def test_check_references_main_exit_codes(tmp_path: Path) -> None:
    rec = S.operator_record("gemm", time_s=1.8e-4)
    run = S.write_run(tmp_path / "run", [rec, S.failed_record()])
    ok = _write(
        tmp_path, GEMM_REF.replace("{value}", "0.186").replace("{time}", "1.8e-4"), "ok.toml"
    )
    console, buf = _console()
    assert check_references_main(run, [ok], console) == 0
    assert "within" in buf.getvalue() and "0 failing" in buf.getvalue()
    slow_ref = _write(
        tmp_path, GEMM_REF.replace("{value}", "1.0").replace("{time}", "1e-5"), "bad.toml"
    )
    console, buf = _console()
    assert check_references_main(run, [slow_ref], console) == 1
    out = buf.getvalue()
    assert "below" in out and "above" in out and "2 failing" in out
    # a reference that matches nothing is reported; where none matched, nothing was checked:
    # exit 2, not 0 (a gate over another device's run passed having judged nothing)
    other = _write(
        tmp_path,
        GEMM_REF.replace("gemm", "softmax").replace("{value}", "1").replace("{time}", "1"),
        "o.toml",
    )
    console, buf = _console()
    assert check_references_main(run, [other], console) == 2
    assert "nothing was checked" in buf.getvalue() and "unused" in buf.getvalue()
    with pytest.raises(ConfigError):
        check_references_main(tmp_path / "nope", [ok], console)


def test_a_file_joining_two_runs_is_refused_not_listed_twice(tmp_path: Path) -> None:
    """Two runs' results.jsonl joined: each reference matched the task's record of both runs,
    two rows alike, neither saying which run it came from. Refused as ``dlsuite compare``
    refuses it (exit 2, naming the runs); each run alone is checked."""
    ref = _write(
        tmp_path,
        "[[reference]]\nlevel = 'distributed'\nbenchmark = 'allreduce'\n"
        "params = { message_bytes = 4096 }\nmetric = 'busbw'\nvalue = 2.0\nlower = -0.5\n",
        "mine.toml",
    )
    runs = []
    for run_id, busbw in (("runmonday", 2.1), ("runtuesday", 0.7)):
        rec = S.collective_record(message_bytes=4096, world_size=2, busbw_gbps=busbw, rank=None)
        rec["run_id"] = run_id
        runs.append(S.write_run(tmp_path / run_id, [rec]))
    joined = tmp_path / "joined.jsonl"
    joined.write_text("".join((r / "results.jsonl").read_text() for r in runs))
    console, buf = _console()
    with pytest.raises(ConfigError, match="runmonday, runtuesday.*which record to check"):
        check_references_main(joined, [ref], console)
    assert buf.getvalue() == ""
    for run, code in zip(runs, (0, 1), strict=True):
        console, buf = _console()
        assert check_references_main(run, [ref], console) == code
        assert "1 verdict(s)" in buf.getvalue()


DIST_REF = """
[[reference]]
level = "distributed"
benchmark = "allreduce"
params = { message_bytes = 65536 }
world_size = 2
device = "EPYC"
metric = "busbw"
value = 0.25
lower = -0.5

[[reference]]
level = "distributed"
benchmark = "allreduce"
params = { message_bytes = 3 }
metric = "busbw"
value = 1.0

[[reference]]
level = "distributed"
benchmark = "allreduce"
world_size = 4
metric = "time"
value = 1.0
"""


def test_a_benchmark_that_timed_out_fails_its_references(tmp_path: Path) -> None:
    """`dlsuite run --level distributed --benchmark allreduce --timeout 2`, then
    `dlsuite check-references RUN mine.toml`: the sweep timed out (one record, params
    {"sizes": [...]}, no device), and the gate printed "unused ... nothing was checked" and
    exited 0. A reference of a size the sweep covers now fails with the record's status."""
    timeout = S.failed_record(
        "allreduce", status="timeout", level="distributed",
        params={"sizes": [8, 1024, 65536]}, world_size=2,
    )  # fmt: skip
    run = S.write_run(tmp_path / "run", [timeout, S.skipped_record()])
    refs = _write(tmp_path, DIST_REF, "dist.toml")
    (sweep_ref, other_size, other_world) = load_references([refs])
    assert sweep_ref.matches(timeout)  # 65536 is one of its sizes; device unknown: any
    assert not other_size.matches(timeout) and not other_world.matches(timeout)
    (v,) = check(timeout, [sweep_ref, other_size, other_world])
    assert v["verdict"] == "timeout" and v["passed"] is False and v["value"] is None
    console, buf = _console()
    assert check_references_main(run, [refs], console) == 1
    out = buf.getvalue()
    assert "timeout" in out and "1 failing" in out and "reference[1]" in out  # unused
    # the same sweep ok: its records carry each size, and they pass
    ok = [S.collective_record(message_bytes=b, world_size=2, busbw_gbps=0.3) for b in (8, 65536)]
    for rec in ok:
        rec["device"]["name"] = "AMD EPYC 7B13"
    console, buf = _console()
    assert check_references_main(S.write_run(tmp_path / "ok", ok), [refs], console) == 0
    assert "within" in buf.getvalue()


@pytest.mark.parametrize(
    ("key", "typo", "needle"),
    [
        ("benchmark", "allreduc", r"reference\[0\]\.benchmark: 'allreduc' is not a benchmark of "
         r"level distributed .*allgather, allreduce"),
        ("metric", "bus_bw", r"reference\[0\]\.metric: 'bus_bw' is not a metric .*busbw"),
        ("framework", "pytroch", r"reference\[0\]\.framework: 'pytroch' is not a framework"),
    ],
)  # fmt: skip
def test_a_name_this_suite_does_not_have_is_bad_input(
    tmp_path: Path, key: str, typo: str, needle: str
) -> None:
    """A typo in a reference's benchmark, metric or framework matched no record: the reference
    was "unused", "nothing was checked", exit 0 — a gate that could never fail."""
    fields = {"benchmark": "allreduce", "metric": "busbw", "framework": "pytorch", key: typo}
    text = '[[reference]]\nlevel = "distributed"\nvalue = 1.0\n' + "".join(
        f'{k} = "{v}"\n' for k, v in fields.items()
    )
    with pytest.raises(ConfigError, match=needle):
        load_references([_write(tmp_path, text)])
    rec = S.collective_record(message_bytes=1 << 20, world_size=2, busbw_gbps=2.0)
    run = S.write_run(tmp_path / "run", [rec])
    with pytest.raises(ConfigError):
        check_references_main(run, [tmp_path / "site.toml"], _console()[0])
    # the host's own record names are names too
    agreement = '[[reference]]\nlevel = "network"\nbenchmark = "agreement_matrix"\n'
    assert load_references(
        [_write(tmp_path, agreement + 'metric = "agreement_error"\nvalue = 0.0\n', "a.toml")]
    )


def test_a_value_measured_on_a_busy_machine_is_not_judged(tmp_path: Path) -> None:
    """`dlsuite check-references` on a run the quiet check found busy: a busbw below its
    reference failed the gate (exit 1) where `dlsuite compare` left the same record unjudged."""
    rec = S.collective_record(message_bytes=65536, world_size=2, busbw_gbps=0.05)
    rec["device"]["name"] = "AMD EPYC 7B13"
    S.mark_busy(rec)
    quiet = S.collective_record(message_bytes=1024, world_size=2, busbw_gbps=0.05)
    run = S.write_run(tmp_path / "run", [rec, quiet])
    refs = _write(
        tmp_path,
        "".join(
            f'[[reference]]\nlevel = "distributed"\nbenchmark = "allreduce"\n'
            f'params = {{ message_bytes = {b} }}\nmetric = "busbw"\nvalue = 1.0\nlower = -0.5\n'
            for b in (65536, 1024)
        ),
    )
    console, buf = _console()
    assert check_references_main(run, [refs], console) == 1  # the quiet record still fails
    out = buf.getvalue()
    assert "busy (below)" in out and "1 failing, 1 not judged" in out and "--include-busy" in out
    only_busy = S.write_run(tmp_path / "busy", [rec])
    assert check_references_main(only_busy, [refs], _console()[0]) == 0
    console, buf = _console()
    assert check_references_main(only_busy, [refs], console, include_busy=True) == 1
    assert "busy" not in buf.getvalue().split("┃ verdict")[-1].split("verdict(s)")[0]


def test_an_unused_reference_says_which_of_its_keys_matched_no_record(tmp_path: Path) -> None:
    """``params = { row = 2048 }`` (for ``rows``) read "matched no record of this run (ok,
    failed, timeout or oom)", exit 0, with nothing on which key: each unused reference names
    the first key that leaves no record, and what the run's records have there."""
    run = S.write_run(
        tmp_path / "run",
        [
            S.operator_record("softmax", {"rows": 2048, "cols": 128}, dtype="bf16"),
            S.operator_record("gemm", {"m": 64, "n": 64, "k": 64}),
            S.skipped_record(),
        ],
    )
    refs = "".join(
        f'[[reference]]\nlevel = "operator"\n{body}\nvalue = 1.0\n'
        for body in (
            'benchmark = "softmax"\nparams = { row = 2048 }\nmetric = "time"',
            'benchmark = "softmax"\nparams = { rows = "2048" }\nmetric = "time"',
            'benchmark = "softmax"\ndtype = "fp32"\nmetric = "time"',
            'benchmark = "gemm"\ndevice = "xeon"\nmetric = "time"',
            'benchmark = "gemm"\nmetric = "throughput"',
            'benchmark = "attention"\nmetric = "time"',
            'benchmark = "conv2d"\nmetric = "time"',
            'benchmark = "gemm"\nframework = "jax"\nmetric = "time"',
        )
    )
    buf = io.StringIO()
    console = Console(file=buf, width=1000, color_system=None)
    assert check_references_main(run, [_write(tmp_path, refs)], console) == 2  # none matched
    lines = [" ".join(x.split()) for x in buf.getvalue().splitlines() if x.startswith("unused")]
    said = [x.partition("matched no record of this run: ")[2] for x in lines]
    assert said == [
        "no softmax record has params.row (theirs: cols, rows)",
        "no softmax record has params.rows = '2048' (theirs: 2048)",
        "no softmax record has dtype fp32 (theirs: bf16)",
        f"no gemm record's device name holds 'xeon' (theirs: {S.CPU['name']})",
        "its records carry no throughput (they carry bandwidth, flop_rate, percent_of_peak, time)",
        "its 1 record(s) were skipped (nothing measured)",  # the skipped one is attention
        "this run has no operator conv2d record",
        "no gemm record has framework jax (theirs: pytorch)",
    ], lines
    assert lines[2].startswith("unused: ") and "(softmax fp32 time)" in lines[2]
