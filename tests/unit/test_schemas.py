"""JSON Schemas (result, task, config) and the results file that validates records on write."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from suite import schemas
from suite.errors import SchemaError, SuiteError
from suite.metrics import TIME, Check
from suite.results import ResultsFile, dumps, read_records, validate_file

# -- record builders ---------------------------------------------------------------------------


def base_record(
    status: str, task_id: str = "operator-gemm-pytorch-fp32-0123456789"
) -> dict[str, Any]:
    """Every field the result schema requires whatever the status."""
    return {
        "schema_version": "1",
        "run_id": "20240101-000000-abcd",
        "task_id": task_id,
        "status": status,
        "benchmark": {"level": "operator", "name": "gemm", "params": {"m": 2, "n": 2, "k": 2}},
        "framework": {"name": "pytorch", "version": "2.3.0", "adapter_version": "1"},
        "backend": {"kind": "local"},
        "dtype": "fp32",
        "rank": None,
        "world_size": 1,
        "host": "node01",
        "telemetry": {"gpu": None, "host": None},
        "provenance": {"suite_version": "0.1.0", "git_commit": None, "python": "3.11.9"},
        "started_at": "2024-01-01T00:00:00+00:00",
        "duration_s": 1.5,
    }


def ok_record(task_id: str = "operator-gemm-pytorch-fp32-0123456789") -> dict[str, Any]:
    rec = base_record("ok", task_id)
    rec["metrics"] = [TIME.entry([1e-3, 1.1e-3, 0.9e-3])]
    rec["correctness"] = {
        "passed": True,
        "checks": [Check("c.max_rel_error_vs_fp64", 1e-7, 1e-4).to_dict()],
    }
    rec["device"] = {"kind": "cpu", "name": "Some CPU", "count": 1}
    rec["measurement"] = {
        "warmup_iters": 3,
        "inner_repeats": 8,
        "samples": 3,
        "stop_reason": "time_budget",
    }
    return rec


def skipped_record() -> dict[str, Any]:
    rec = base_record("skipped")
    rec["reason"] = "bf16 is not supported on this device"
    return rec


def failed_record() -> dict[str, Any]:
    rec = base_record("failed")
    rec["error"] = {"type": "RuntimeError", "message": "boom"}
    return rec


def _schema_error(kind: str, doc: Any) -> str:
    with pytest.raises(SchemaError) as info:
        schemas.validate(kind, doc)
    assert isinstance(info.value, SuiteError)
    return str(info.value)


# -- valid records -----------------------------------------------------------------------------


@pytest.mark.parametrize("make", [ok_record, skipped_record, failed_record])
def test_minimal_records_validate(make: Any) -> None:
    rec = make()
    schemas.validate("result", rec)
    assert schemas.errors("result", rec) == []
    json.loads(dumps(rec))  # and they are plain JSON


@pytest.mark.parametrize("status", ["timeout", "oom"])
def test_timeout_and_oom_need_an_error_too(status: str) -> None:
    rec = failed_record()
    rec["status"] = status
    schemas.validate("result", rec)
    del rec["error"]
    assert "error" in _schema_error("result", rec)


def test_metric_entries_with_value_only_validate() -> None:
    rec = ok_record()
    rec["metrics"].append(
        {"name": "percent_of_peak", "unit": "%", "higher_is_better": True, "value": 1.0}
    )
    schemas.validate("result", rec)


def test_nonfinite_check_records_null_error_and_validates() -> None:
    rec = ok_record()
    rec["correctness"] = {
        "passed": False,
        "checks": [Check("y.max_rel_error_vs_fp64", float("inf"), 1e-4).to_dict()],
    }
    schemas.validate("result", rec)


def test_a_check_may_carry_its_detail() -> None:
    rec = ok_record()
    detail = {"steps": 40, "first_nonfinite_step": 23, "last_finite_loss": 0.0011}
    check = Check("loss_finite_every_step", 17, 0.0, detail=detail).to_dict()
    assert check["detail"] == detail and "detail" not in Check("c", 0.0, 0.0).to_dict()
    rec["correctness"] = {"passed": False, "checks": [check]}
    schemas.validate("result", rec)
    check["detail"] = "step 23"  # an object, not free text
    assert any("detail" in e for e in schemas.errors("result", rec))


# -- invalid records ---------------------------------------------------------------------------


def _without(rec: dict[str, Any], key: str) -> dict[str, Any]:
    rec = copy.deepcopy(rec)
    del rec[key]
    return rec


def _metric_without_unit() -> dict[str, Any]:
    rec = ok_record()
    del rec["metrics"][0]["unit"]
    return rec


def _check_error_string() -> dict[str, Any]:
    rec = ok_record()
    rec["correctness"]["checks"][0]["error"] = "1e-7"
    return rec


def _unknown_status() -> dict[str, Any]:
    rec = ok_record()
    rec["status"] = "exploded"
    return rec


def _extra_field() -> dict[str, Any]:
    rec = ok_record()
    rec["colour"] = "blue"
    return rec


def _empty_metrics() -> dict[str, Any]:
    rec = ok_record()
    rec["metrics"] = []
    return rec


def _ok_correctness_null() -> dict[str, Any]:
    rec = ok_record()
    rec["correctness"] = None
    return rec


def _skipped_empty_reason() -> dict[str, Any]:
    rec = skipped_record()
    rec["reason"] = ""
    return rec


def _bad_task_id() -> dict[str, Any]:
    return ok_record(task_id="has spaces/and slashes")


def _partial_summary() -> dict[str, Any]:
    rec = ok_record()
    del rec["metrics"][0]["ci95"]
    return rec


def _bad_stop_reason() -> dict[str, Any]:
    rec = ok_record()
    rec["measurement"]["stop_reason"] = "bored"
    return rec


INVALID = [
    ("missing status", lambda: _without(ok_record(), "status"), ["status"]),
    ("unknown status", _unknown_status, ["status", "exploded"]),
    ("ok without metrics", lambda: _without(ok_record(), "metrics"), ["metrics"]),
    ("ok with empty metrics", _empty_metrics, ["metrics"]),
    ("ok without correctness", lambda: _without(ok_record(), "correctness"), ["correctness"]),
    ("ok with null correctness", _ok_correctness_null, ["correctness"]),
    ("ok without device", lambda: _without(ok_record(), "device"), ["device"]),
    ("metric without unit", _metric_without_unit, ["metrics[0]", "unit"]),
    ("summary without ci95", _partial_summary, ["metrics[0]", "ci95"]),
    ("check error as string", _check_error_string, ["correctness.checks[0].error"]),
    ("extra top-level field", _extra_field, ["colour"]),
    ("failed without error", lambda: _without(failed_record(), "error"), ["error"]),
    ("skipped without reason", lambda: _without(skipped_record(), "reason"), ["reason"]),
    ("skipped with empty reason", _skipped_empty_reason, ["reason"]),
    ("missing host", lambda: _without(ok_record(), "host"), ["host"]),
    ("bad task id", _bad_task_id, ["task_id"]),
    ("bad stop reason", _bad_stop_reason, ["measurement.stop_reason"]),
]


@pytest.mark.parametrize(("case", "make", "words"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_records_name_the_field(case: str, make: Any, words: list[str]) -> None:
    rec = make()
    msg = _schema_error("result", rec)
    for w in words:
        assert w in msg, (case, msg)
    assert schemas.errors("result", rec), case


def test_errors_lists_every_problem() -> None:
    rec = _without(ok_record(), "host")
    rec["dtype"] = "fp8"
    problems = schemas.errors("result", rec)
    assert any(p.startswith("dtype:") for p in problems)
    assert any("host" in p for p in problems)


def test_unknown_schema_kind() -> None:
    with pytest.raises(ValueError):
        schemas.schema("nope")


# -- task schema -------------------------------------------------------------------------------


def task_doc() -> dict[str, Any]:
    return {
        "schema_version": "1",
        "task_id": "operator-gemm-pytorch-fp32-0123456789",
        "run_id": "r1",
        "level": "operator",
        "benchmark": "gemm",
        "params": {"m": 2, "n": 2, "k": 2},
        "framework": "pytorch",
        "dtype": "fp32",
        "device": "cpu",
        "backend": "local",
        "world_size": 1,
        "seed": 0,
        "measure": {"time_budget_s": 1.0, "min_samples": 5},
        "timeout_s": 300.0,
        "record_path": "records/x.json",
    }


def test_task_schema_valid() -> None:
    schemas.validate("task", task_doc())


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda d: d.pop("record_path"), "record_path"),
        (lambda d: d.update(dtype="fp8"), "dtype"),
        (lambda d: d.update(world_size=0), "world_size"),
        (lambda d: d.update(task_id="a b"), "task_id"),
        (lambda d: d["measure"].update(min_samples=0), "measure.min_samples"),
        (lambda d: d["measure"].update(warmup=3), "warmup"),
        (lambda d: d.update(extra=1), "extra"),
    ],
)
def test_task_schema_invalid(mutate: Any, field: str) -> None:
    doc = task_doc()
    mutate(doc)
    assert field in _schema_error("task", doc)


# -- config schema -----------------------------------------------------------------------------


def test_config_schema_valid() -> None:
    doc = {
        "run": {
            "level": "operator",
            "frameworks": ["pytorch"],
            "dtypes": ["fp32", "bf16"],
            "device": "cpu",
            "quick": True,
            "seed": 3,
            "timeout": 60,
        },
        "measure": {"min_samples": 5, "time_budget_s": 0.5},
        "device": {"peak_tflops": {"fp32": 10.0}},
        "operator": {"gemm": {"sizes": [{"m": 8, "n": 8, "k": 8}]}},
    }
    schemas.validate("config", doc)
    schemas.validate("config", {})


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        ({"run": {"colour": "red"}}, ["run", "colour"]),
        ({"runs": {}}, ["runs"]),
        ({"run": {"quick": "yes"}}, ["run.quick"]),
        ({"run": {"seed": -1}}, ["run.seed"]),
        ({"run": {"dtypes": ["fp8"]}}, ["run.dtypes[0]"]),
        ({"measure": {"min_samples": 1.5}}, ["measure.min_samples"]),
        ({"device": {"peak_tflops": {"fp32": 0}}}, ["device.peak_tflops.fp32"]),
        ({"operator": {"gemm": {"sizes": []}}}, ["operator.gemm.sizes"]),
        ({"operator": {"gemm": {"size": [{"m": 1}]}}}, ["operator.gemm", "size"]),
    ],
)
def test_config_schema_invalid(doc: dict[str, Any], words: list[str]) -> None:
    msg = _schema_error("config", doc)
    for w in words:
        assert w in msg, msg


# -- ResultsFile -------------------------------------------------------------------------------


def test_append_writes_one_validated_line_per_record(tmp_path: Path) -> None:
    rf = ResultsFile(tmp_path / "results.jsonl")
    rf.append(ok_record())
    rf.append(skipped_record())
    lines = (tmp_path / "results.jsonl").read_text().splitlines()
    assert len(lines) == 2
    assert [json.loads(line)["status"] for line in lines] == ["ok", "skipped"]
    assert [r["status"] for r in rf] == ["ok", "skipped"]
    assert rf.done_task_ids() == {ok_record()["task_id"]}


def test_append_rejects_bad_record_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    rf = ResultsFile(path)
    with pytest.raises(SchemaError, match="status"):
        rf.append(_unknown_status())
    assert not path.exists() or path.read_bytes() == b""
    rf.append(ok_record())
    before = path.read_bytes()
    with pytest.raises(SchemaError):
        rf.append(_extra_field())
    assert path.read_bytes() == before


def test_append_rejects_nan_even_if_schema_allows_number(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    rec = ok_record()
    rec["duration_s"] = float("nan")
    with pytest.raises((SchemaError, ValueError)):
        ResultsFile(path).append(rec)
    assert not path.exists() or path.read_bytes() == b""


def test_repair_truncates_partial_last_line(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    good = dumps(ok_record()) + "\n" + dumps(skipped_record()) + "\n"
    partial = '{"schema_version":"1","task_id":"oper'
    path.write_text(good + partial)
    removed = ResultsFile(path).repair()
    assert removed == len(partial.encode())
    assert path.read_text() == good
    assert ResultsFile(path).repair() == 0  # idempotent
    assert validate_file(path) == 2


def test_repair_drops_unparsable_terminated_last_line(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    good = dumps(ok_record()) + "\n"
    path.write_text(good + '{"broken": \n')
    assert ResultsFile(path).repair() == len('{"broken": \n')
    assert path.read_text() == good


def test_repair_keeps_complete_file_and_handles_missing_or_empty(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    assert ResultsFile(path).repair() == 0  # missing
    path.write_text("")
    assert ResultsFile(path).repair() == 0
    good = dumps(ok_record()) + "\n" + dumps(failed_record()) + "\n"
    path.write_text(good)
    assert ResultsFile(path).repair() == 0
    assert path.read_text() == good
    only_partial = '{"a": 1'
    path.write_text(only_partial)
    assert ResultsFile(path).repair() == len(only_partial)
    assert path.read_text() == ""


def test_repair_then_append_gives_valid_file(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(dumps(ok_record()) + "\n" + '{"half')
    rf = ResultsFile(path)
    rf.repair()
    rf.append(failed_record())
    assert validate_file(path) == 2


def test_validate_file_names_the_line_of_the_first_bad_record(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    lines = [
        dumps(ok_record()),
        "",
        dumps(skipped_record()),
        dumps(_without(failed_record(), "error")),
        dumps(_unknown_status()),
    ]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(SchemaError) as info:
        validate_file(path)
    msg = str(info.value)
    assert f"{path}:4:" in msg  # the blank line 2 still counts as a line
    assert "error" in msg


def test_validate_file_invalid_json_line_and_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(dumps(ok_record()) + "\n{not json}\n")
    with pytest.raises(SchemaError, match=":2:"):
        validate_file(path)
    path.write_text("\n")
    with pytest.raises(SchemaError, match="no records"):
        validate_file(path)
    with pytest.raises(SchemaError, match="no such file"):
        validate_file(tmp_path / "missing.jsonl")


def test_validate_file_counts_records(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(
        "\n".join(dumps(r) for r in (ok_record(), skipped_record(), failed_record())) + "\n\n"
    )
    assert validate_file(path) == 3


def test_read_records_strict_and_lenient(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"
    path.write_text(dumps(ok_record()) + "\nnot json\n" + dumps(skipped_record()) + "\n")
    assert [r["status"] for r in read_records(path, strict=False)] == ["ok", "skipped"]
    with pytest.raises(SchemaError, match=":2:"):
        list(read_records(path))
    assert list(read_records(tmp_path / "none.jsonl")) == []


@pytest.mark.parametrize("kind", schemas.KINDS)
def test_every_schema_is_a_valid_draft_2020_12_schema(kind: str) -> None:
    """Checked here, once, not by every process that validates a document (suite/schemas:
    the meta-schema check cost each worker about 0.3 s)."""
    schemas.Validator.check_schema(schemas.schema(kind))


def test_validate_refuses_edited_verdicts_nan_and_names_a_cut_off_last_line(
    tmp_path: Path,
) -> None:
    """``dlsuite validate`` said "valid" for a record whose check failed while its correctness
    still said passed (what the report and the exit code read), for a check marked passed with
    an error over its tolerance, and for a ``NaN`` (not JSON; the suite writes null); a run
    killed mid-write was "not valid JSON" with nothing on what to do."""
    path = tmp_path / "results.jsonl"
    rec = ok_record()
    rec["correctness"]["checks"].append(Check("c.l2_rel_error_vs_fp64", 0.5, 1e-4).to_dict())
    path.write_text(dumps(ok_record()) + "\n" + json.dumps(rec) + "\n")  # passed left true
    with pytest.raises(SchemaError, match=r":2: correctness.passed is true but a check failed"):
        validate_file(path)
    rec["correctness"]["passed"] = False
    path.write_text(json.dumps(rec) + "\n")
    assert validate_file(path) == 1  # as the suite writes it
    rec["correctness"]["checks"][1]["passed"] = True
    path.write_text(json.dumps(rec) + "\n")
    with pytest.raises(SchemaError, match=r"checks\[1\] \(c.l2_rel_error_vs_fp64\): passed is "
                       r"true with its error 0.5 and tolerance 0.0001"):  # fmt: skip
        validate_file(path)
    nan = ok_record()
    nan["duration_s"] = float("nan")
    path.write_text(json.dumps(nan) + "\n")
    with pytest.raises(SchemaError, match=r":1: not valid JSON \(NaN is not JSON"):
        validate_file(path)
    whole = dumps(ok_record()) + "\n" + dumps(skipped_record()) + "\n"
    path.write_text(whole[:-40])
    with pytest.raises(SchemaError, match=r":2: the last line is cut off .* --resume") as err:
        validate_file(path)
    assert "\n" not in str(err.value)
    path.write_text(whole.replace("\n", "}\n", 1))  # a bad line that is not the last one
    with pytest.raises(SchemaError, match=r":1: not valid JSON \(Extra data"):
        validate_file(path)


def test_validate_of_a_run_directory_checks_its_manifest_too(tmp_path: Path) -> None:
    """``dlsuite validate RUN_DIR`` said "records valid" for a run directory whose
    manifest.json was cut off or edited (its state, its run id: what --resume and the report
    read); the manifest is validated against its schema too, and named."""
    import shutil

    from tests.helpers import ROOT, cli

    run = tmp_path / "run"
    shutil.copytree(ROOT / "docs/results/explain-cpu/resnet50-224/training", run)
    ok = cli("validate", str(run))
    assert ok.returncode == 0 and ok.stdout.strip().endswith("manifest.json valid"), ok.stderr
    good = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**good, "state": "exploded"}))
    bad = cli("validate", str(run))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "manifest.json: state: 'exploded' is not one of" in bad.stderr
    (run / "manifest.json").write_text(json.dumps(good)[:-30])
    cut = cli("validate", str(run))
    assert cut.returncode == 2 and "manifest.json: not valid JSON" in cut.stderr, cut.stderr
    only = cli("validate", str(run / "results.jsonl"))  # the file alone: its records only
    assert only.returncode == 0, only.stderr


def test_validate_says_when_valid_records_join_two_runs(tmp_path: Path) -> None:
    """Two runs' results.jsonl joined are valid records each, and ``dlsuite validate`` said
    only that, while compare and check-references refuse the file; it says so in a note (the
    records are still valid: exit 0)."""
    from tests.helpers import cli

    joined = tmp_path / "joined.jsonl"
    mine = [{**ok_record(), "run_id": run_id} for run_id in ("monday01", "tuesday02")]
    joined.write_text("".join(dumps(r) + "\n" for r in mine))
    proc = cli("validate", str(joined))
    assert proc.returncode == 0, proc.stderr
    valid, note = proc.stdout.strip().splitlines()
    assert valid == f"{joined}: 2 records valid"
    assert note.startswith("note: ") and "monday01, tuesday02" in note
    assert "`dlsuite compare` and `dlsuite check-references` refuse it" in note
    joined.write_text(dumps(mine[0]) + "\n")  # one run: no note
    assert cli("validate", str(joined)).stdout.strip() == f"{joined}: 1 records valid"


def test_validate_lists_every_bad_line_capped_and_the_manifest_with_them(tmp_path: Path) -> None:
    """``dlsuite validate`` stopped at the first bad line, so a user fixing a hand-edited file
    found each next mistake one run at a time; it lists every bad line (the first MAX_LISTED,
    then how many more), and a run directory's bad manifest beside them, still one exit 2."""
    from suite.results import MAX_LISTED
    from tests.helpers import cli

    run = tmp_path / "run"
    run.mkdir()
    edited = ok_record()
    edited["world_size"] = "two"  # typed by hand
    lines = [dumps(ok_record()), json.dumps(edited), "", "[1, 2]", dumps(skipped_record())]
    lines += [json.dumps({**ok_record(), "status": f"s{i}"}) for i in range(MAX_LISTED + 2)]
    (run / "results.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(SchemaError) as info:
        validate_file(run / "results.jsonl")
    msg = str(info.value).splitlines()
    bad = MAX_LISTED + 4
    assert (
        msg[0]
        == f"{run / 'results.jsonl'}: {bad} of its {len(lines) - 1} lines are not valid records"
    )
    assert msg[1].endswith(":2: world_size: 'two' is not of type 'integer'")
    assert msg[2].endswith(":4: a JSON list, not a record")  # the blank line 3 counted
    assert msg[3].endswith(
        ":6: status: 's0' is not one of ['ok', 'failed', 'timeout', 'oom', 'skipped']"
    )
    assert len(msg) == 1 + MAX_LISTED + 1 and msg[-1] == "  ... and 4 more bad lines"
    (run / "manifest.json").write_text("{}")
    out = cli("validate", str(run))
    assert out.returncode == 2 and out.stdout == "", out.stdout
    err = out.stderr.strip().splitlines()
    assert err[0].endswith(f"{bad} of its {len(lines) - 1} lines are not valid records")
    assert "manifest.json: top level:" in err[-1] and "is a required property" in err[-1]
    assert "Traceback" not in out.stderr


def test_validate_refuses_a_median_edited_outside_its_interval(tmp_path: Path) -> None:
    """A time's median doubled by hand (its ci95, min and max left) was "valid": the suite
    writes a median inside its ci95 and its min and max, so such a record was edited."""
    from metrics import TIME

    rec = ok_record()
    rec["metrics"] = [TIME.entry([3e-4, 3.1e-4, 3.05e-4, 2.95e-4, 3.2e-4, 3.0e-4, 2.9e-4])]
    path = tmp_path / "results.jsonl"
    path.write_text(dumps(rec) + "\n")
    assert validate_file(path) == 1  # as the suite writes it
    edited = copy.deepcopy(rec)
    edited["metrics"][0]["median"] = 6e-4
    path.write_text(dumps(edited) + "\n")
    with pytest.raises(SchemaError, match=r":1: metrics\[0\] \(time\): median 0.0006 lies outside "
                       r"its ci95 \[0.00029, 0.00032\]"):  # fmt: skip
        validate_file(path)
    narrow = copy.deepcopy(rec)
    narrow["metrics"][0]["min"] = 3.05e-4  # above its median
    path.write_text(dumps(narrow) + "\n")
    with pytest.raises(SchemaError, match=r"median 0.0003 lies outside its min and max"):
        validate_file(path)


def test_a_file_that_is_no_results_file_is_one_line_and_a_manifest_is_validated_as_one(
    tmp_path: Path,
) -> None:
    """``dlsuite validate RUN/manifest.json`` (or any multi-line JSON or TOML) listed each of
    its lines as "not valid JSON"; ``compare``/``report`` of it said "not valid JSON" of a
    valid manifest. A file with no JSON record is one line; a manifest given alone is
    validated as a manifest, and the readers name the run directory to give."""
    from tests.helpers import cli

    run = tmp_path / "run"
    run.mkdir()
    (run / "results.jsonl").write_text(dumps(ok_record()) + "\n")
    manifest = {"nodes": 1, "state": "exploded"}  # pretty-printed, as a person writes JSON
    (run / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    notes = tmp_path / "notes.toml"
    notes.write_text('[run]\nlevel = "operator"\n\n# mine\nquick = true\n')
    with pytest.raises(SchemaError) as err:
        validate_file(notes)
    assert str(err.value) == (
        f"{notes}: none of its 4 lines is a JSON record (line 1: not valid JSON (Expecting "
        "value: line 1 column 2 (char 1))); give a results.jsonl written by `dlsuite run` (or "
        "its run directory)"
    )
    bad = cli("validate", str(run / "manifest.json"))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1, bad.stderr
    assert "manifest.json: top level:" in bad.stderr or "manifest.json: state:" in bad.stderr
    for command in ("compare", "report"):
        args = [str(run), str(run / "manifest.json")] if command == "compare" else [
            str(run / "manifest.json")]  # fmt: skip
        out = cli(command, *args)
        assert out.returncode == 2, out.stderr
        assert out.stderr.strip().endswith(
            f"manifest.json: a run's manifest, not its records; give the run directory {run} "
            "(or its results.jsonl)"
        ), out.stderr
