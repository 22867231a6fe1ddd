"""benchmarks/validation/gpu_check.py's own logic, with steps that are tiny commands: the call budget,
resuming where a call stopped, a step killed at its limit, a run step resumed with --resume,
the exit codes. (The real steps run in tests/integration/test_gpu_check.py.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.validation import gpu_check as G


def _step(name: str, code: str, limit: float = 30, runs: tuple[str, ...] = ()) -> G.Step:
    return G.Step(name, f"test step {name}", {"cpu": limit, "cuda": limit},
                  {"cpu": [sys.executable, "-c", code], "cuda": None},
                  why_not={"cuda": "not on a GPU"}, runs=runs)  # fmt: skip


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Any:
    def use(steps: list[G.Step]) -> None:
        monkeypatch.setattr(G, "STEPS", steps)
        monkeypatch.setattr(G, "ensure_host_dependencies", lambda wheels=None: "test")
        monkeypatch.setattr(G.gpu_check_report, "finish", lambda *a: "summary")

    return use


def _state(out: Path) -> dict[str, Any]:
    return json.loads((out / "state.json").read_text())


def test_a_call_stops_when_the_next_limit_does_not_fit_and_the_next_call_goes_on(
    fake: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake([_step("a", "pass", 10), _step("b", "pass", 10), _step("c", "pass", 10)])
    out = tmp_path / "o"
    # the first step always starts; the second's 10 s do not fit in a budget of 5
    assert G.main(["--device", "cpu", "--out", str(out), "--call-budget", "5"]) == 3
    assert list(_state(out)["steps"]) == ["a"]
    assert "call again with the same --out" in capsys.readouterr().out
    assert G.main(["--device", "cpu", "--out", str(out), "--call-budget", "100"]) == 0
    st = _state(out)
    assert [st["steps"][n]["call"] for n in "abc"] == [1, 2, 2]
    assert len(st["calls"]) == 2 and st["calls"][1]["dependencies"] == "test"


def test_a_step_is_killed_at_its_limit_and_a_failed_one_is_not_rerun_unless_asked(
    fake: Any, tmp_path: Path
) -> None:
    fake([_step("slow", "import time; time.sleep(60)", 1), _step("bad", "raise SystemExit(4)")])
    out = tmp_path / "o"
    assert G.main(["--device", "cpu", "--out", str(out)]) == 1
    st = _state(out)["steps"]
    assert st["slow"]["status"] == "timeout" and st["slow"]["elapsed_s"] < 30
    assert st["bad"]["status"] == "failed" and st["bad"]["exit_code"] == 4
    assert "killed at its limit" in (out / "logs" / "slow.log").read_text()
    G.main(["--device", "cpu", "--out", str(out)])
    assert _state(out)["steps"]["bad"]["attempts"] == 1  # done is done
    G.main(["--device", "cpu", "--out", str(out), "--retry", "--only", "bad"])
    assert _state(out)["steps"]["bad"]["attempts"] == 2


def test_a_run_step_cut_off_is_resumed_once_with_resume(fake: Any, tmp_path: Path) -> None:
    # a stand-in for `python -m suite run ...`: argv[3] is "run", --resume is appended
    code = "import sys, time; print(sys.argv); time.sleep(0 if '--resume' in sys.argv else 60)"
    step = G.Step("r", "run step", {"cpu": 1, "cuda": 1},
                  {"cpu": [sys.executable, "-c", code, "run"], "cuda": None}, runs=("r",))  # fmt: skip
    fake([step])
    out = tmp_path / "o"
    assert G.main(["--device", "cpu", "--out", str(out)]) == 1
    assert _state(out)["steps"]["r"]["status"] == "timeout"
    assert G.main(["--device", "cpu", "--out", str(out)]) == 0
    st = _state(out)["steps"]["r"]
    assert st["status"] == "ok" and st["attempts"] == 2
    assert "'--resume'" in (out / "logs" / "r.log").read_text()


def test_a_step_without_a_command_on_this_device_is_skipped_with_its_reason(
    fake: Any, tmp_path: Path
) -> None:
    fake([_step("a", "pass")])
    out = tmp_path / "o"
    assert G.main(["--device", "cuda", "--out", str(out)]) == 0
    assert _state(out)["steps"]["a"] == {"status": "skipped", "reason": "not on a GPU"}
    with pytest.raises(SystemExit, match="holds a cuda check"):
        G.main(["--device", "cpu", "--out", str(out)])


def test_the_archive_leaves_the_dataset_out(tmp_path: Path) -> None:
    import tarfile

    from benchmarks.validation import gpu_check_report as R

    (tmp_path / "o" / "data" / "x").mkdir(parents=True)
    (tmp_path / "o" / "data" / "x" / "a.JPEG").write_bytes(b"1")
    (tmp_path / "o" / "README.md").write_text("s")
    with tarfile.open(tmp_path / "a.tgz", "w:gz") as tar:
        tar.add(tmp_path / "o", arcname="o", filter=R.archive_filter)
    with tarfile.open(tmp_path / "a.tgz") as tar:
        assert tar.getnames() == ["o", "o/README.md"]


def test_a_later_shorter_step_fills_what_a_longer_one_leaves(fake: Any, tmp_path: Path) -> None:
    """A step whose limit does not fit the rest of the call is passed over, not the end of the
    call: the shorter one after it runs (on the GPU the calls are few and short)."""
    fake([_step("a", "pass", 10), _step("big", "pass", 100), _step("small", "pass", 10)])
    out = tmp_path / "o"
    assert G.main(["--device", "cpu", "--out", str(out), "--call-budget", "30"]) == 3
    assert list(_state(out)["steps"]) == ["a", "small"]
    assert G.main(["--device", "cpu", "--out", str(out), "--call-budget", "300"]) == 0
    assert _state(out)["steps"]["big"]["call"] == 2


def test_a_run_step_starts_in_what_is_left_and_goes_on_in_the_next_call(
    fake: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A `dlsuite run` step longer than what is left of a call starts anyway, is cut at the
    call's end (pending, not failed, not an attempt) and resumes with --resume."""
    monkeypatch.setattr(G, "MIN_RUN_SLICE_S", 1.0)
    code = "import sys, time; print(sys.argv); time.sleep(0 if '--resume' in sys.argv else 60)"
    run = G.Step("r", "run step", {"cpu": 100, "cuda": 100},
                 {"cpu": [sys.executable, "-c", code, "run"], "cuda": None}, runs=("r",))  # fmt: skip
    fake([_step("a", "pass", 1), run])
    out = tmp_path / "o"
    assert G.main(["--device", "cpu", "--out", str(out), "--call-budget", "4"]) == 3
    st = _state(out)["steps"]["r"]
    assert st["status"] == "timeout" and st["cut_by_call"] and st["attempts"] == 0
    assert st["elapsed_s"] < 20
    assert G.main(["--device", "cpu", "--out", str(out), "--call-budget", "300"]) == 0
    st = _state(out)["steps"]["r"]
    assert st["status"] == "ok" and st["attempts"] == 1
    assert "'--resume'" in (out / "logs" / "r.log").read_text()


def test_a_ratio_step_leaves_the_rounds_it_finished(tmp_path: Path) -> None:
    from benchmarks.validation import gpu_check_steps as S

    path = tmp_path / "s.json"
    S._PARTIAL.update(path=path, meta={"step": "ratio-gemm", "size": {}, "device_kind": "gpu"})
    try:
        S._round_done([1.01], [2.02], [2.0], case="gemm", correctness={"passed": True})
    finally:
        S._PARTIAL.clear()
    doc = json.loads(path.read_text())
    assert doc["partial"] and doc["rounds_done"] == 1 and doc["met"]
    from benchmarks.validation import gpu_check_report as R

    assert "partial: the 1 round(s) done" in R._ratio_line(doc)


def test_every_gpu_step_fits_a_call() -> None:
    """A step whose limit exceeds what a call has for steps could run only as a call's first
    step and then overrun the call (its archive and summary lost)."""
    room = G.CALL_BUDGET_S - G.REPORT_RESERVE_S["cuda"]
    assert all(s.limit_s["cuda"] <= room for s in G.STEPS if s.command.get("cuda")), [
        (s.name, s.limit_s["cuda"]) for s in G.STEPS if s.limit_s["cuda"] > room
    ]


def test_a_step_json_cut_off_mid_write_is_no_result(tmp_path: Path) -> None:
    from benchmarks.validation import gpu_check_report as R

    (tmp_path / "steps").mkdir()
    (tmp_path / "steps" / "ratio-gemm.json").write_text('{"ratio": 1.0, "per_ro')
    st = {"status": "timeout"}
    assert R._step_text("ratio-gemm", tmp_path, st, {}) == "no result (see the log)"
