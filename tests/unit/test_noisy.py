"""Noisy records: a median whose CI ended wider than its target when the time budget ran out
is marked in the summary table and the report, not printed as a plain "ok"."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

from rich.console import Console

from suite.report.document import Table
from suite.report.load import Run
from suite.report.sections import summary_section
from suite.results import noisy, validate_record
from suite.summary import table
from tests import synthetic as S


def _with(rec: dict[str, Any], **measurement: Any) -> dict[str, Any]:
    rec["measurement"].update(measurement)
    validate_record(rec)
    return rec


def test_noisy_is_a_budget_stop_wider_than_the_target() -> None:
    budget = dict(stop_reason="time_budget", target_ci_rel=0.02)
    assert noisy(_with(S.operator_record(), ci_rel_width=0.43, **budget)) == 0.43
    assert noisy(_with(S.operator_record(), ci_rel_width=12.26, **budget)) == 12.26
    assert noisy(_with(S.operator_record(), ci_rel_width=None, **budget)) == math.inf
    # within the target when the budget ran out: known as well as asked
    assert noisy(_with(S.operator_record(), ci_rel_width=0.019, **budget)) is None
    # the target was met: not noisy, whatever else
    met = dict(stop_reason="ci_target_met", target_ci_rel=0.02, ci_rel_width=0.01)
    assert noisy(_with(S.operator_record(), **met)) is None
    assert noisy(S.failed_record("conv2d")) is None
    # the sample cap stopped it before the target: as noisy (a config's max_samples = 10 gave
    # a 15% wide interval printed as a plain "ok")
    capped = dict(stop_reason="max_samples", target_ci_rel=0.02)
    assert noisy(_with(S.operator_record(), ci_rel_width=0.15, **capped)) == 0.15
    assert noisy(_with(S.operator_record(), ci_rel_width=0.01, **capped)) is None
    # a fixed number of epochs or steps has no target: its interval is shown, never "noisy"
    fixed = S.operator_record()
    fixed["measurement"] = {k: v for k, v in fixed["measurement"].items() if k != "target_ci_rel"}
    assert noisy(_with(fixed, stop_reason="max_samples", ci_rel_width=2.4)) is None
    # the strategies' fixed schedule (ranks that cannot decide jointly) records no target
    from suite.levels.distributed.strategy_run import _measured

    doc = {"stop_reason": "max_samples", "target_ci_rel": 0.02, "ci_rel_width": 0.3}
    assert "target_ci_rel" not in _measured(dict(doc), fixed=True)
    assert _measured(dict(doc), fixed=False) == doc


def test_summary_and_report_mark_noisy_records() -> None:
    wide = _with(
        S.operator_record(), stop_reason="time_budget", target_ci_rel=0.02, ci_rel_width=0.43
    )
    fine = _with(S.operator_record(name="softmax", params={"rows": 8, "cols": 8}),
                 stop_reason="ci_target_met", target_ci_rel=0.02, ci_rel_width=0.01)  # fmt: skip
    out = io.StringIO()
    Console(file=out, width=250).print(table([wide, fine]))
    lines = [line for line in out.getvalue().splitlines() if "gemm" in line or "softmax" in line]
    assert "noisy: CI 43% wide > 2%" in next(line for line in lines if "gemm" in line)
    assert "noisy" not in next(line for line in lines if "softmax" in line)

    run = Run(path=Path("r"), results=Path("r/results.jsonl"), records=[wide, fine], label="r")
    (summary,) = [b for b in summary_section([run]).blocks if isinstance(b, Table)]
    status = {row[0]: row[4] for row in summary.rows}
    assert status == {"gemm": "ok, noisy: CI 43% wide > 2%", "softmax": "ok"}


def test_a_records_strings_are_shown_as_they_are_never_as_markup() -> None:
    """A framework's error message such as gloo's "[/__w/.../pair.cc:537] Read error" is a
    closing tag to rich's markup parser: the table crashed the run's summary with a
    MarkupError (CI, the distributed kit), and "[red]x" would have been styled."""
    failed = S.failed_record("conv2d")
    failed["reason"] = "rank 0: RuntimeError: [/__w/gloo/pair.cc:537] Read error [red]x"
    validate_record(failed)
    out = io.StringIO()
    Console(file=out, width=250).print(table([failed, S.operator_record()]))
    assert "[/__w/gloo/pair.cc:537] Read error [red]x" in out.getvalue()


def test_a_record_measured_on_a_busy_machine_says_so_in_the_table_and_the_report() -> None:
    """The quiet check's verdict was only recorded: a 1-rank step measured beside another
    process's busy loop read 56 ms (0.7 ms quiet) as a plain "ok". Its status says "busy" now,
    one note under the table gives the finding, and the report does the same."""
    from suite.summary import busy_note

    busy, quiet = (
        S.operator_record(),
        S.operator_record(name="softmax", params={"rows": 8, "cols": 8}),
    )
    message = "other processes kept 1.02 of the task's 2 usable CPU cores busy over 4.5 s"
    S.mark_busy(busy, message=message)
    quiet["telemetry"]["quiet"] = {"quiet": True, "findings": []}
    out = io.StringIO()
    Console(file=out, width=250).print(table([busy, quiet]))
    lines = {w: next(x for x in out.getvalue().splitlines() if w in x) for w in ("gemm", "softmax")}
    assert "ok busy" in lines["gemm"] and "busy" not in lines["softmax"]
    note = busy_note([busy, quiet])
    assert note is not None and note.startswith("busy: 1 record(s) measured while the machine")
    assert message in note and "--require-quiet" in note and busy_note([quiet]) is None
    run = Run(path=Path("r"), results=Path("r/results.jsonl"), records=[busy, quiet], label="r")
    blocks = summary_section([run]).blocks
    (summary,) = [b for b in blocks if isinstance(b, Table)]
    assert {row[0]: row[4] for row in summary.rows} == {"gemm": "ok, busy", "softmax": "ok"}
    assert note in blocks
    # noisy and busy: a separator, not "CI 43% wide > 2% busy" (read as "> 2% busy")
    both = _with(busy, stop_reason="time_budget", target_ci_rel=0.02, ci_rel_width=0.43)
    out = io.StringIO()
    Console(file=out, width=250).print(table([both]))
    assert "ok noisy: CI 43% wide > 2%; busy" in out.getvalue()
    run = Run(path=Path("r"), results=Path("r/results.jsonl"), records=[both], label="r")
    (summary,) = [b for b in summary_section([run]).blocks if isinstance(b, Table)]
    assert summary.rows[0][4] == "ok, noisy: CI 43% wide > 2%; busy"
