"""`dlsuite report`: Markdown + self-contained HTML from a real quick run and synthetic
distributed records (the distributed level and GPU telemetry do not exist yet)."""

from __future__ import annotations

import copy
import json
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from suite.errors import ConfigError
from suite.report import NOTHING_TITLE, SECTION_TITLES, report_main
from suite.report import sections as report_sections
from suite.report.document import PLOTS_DIR
from tests import synthetic as S
from tests.helpers import ROOT, cli, records

pytestmark = pytest.mark.pytorch


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report") / "quick-cpu"
    proc = cli(
        "run",
        "--quick",
        "--benchmark",
        "gemm,softmax",
        "--dtype",
        "fp32",
        "--device",
        "cpu",
        "--out",
        str(out),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


def _distributed_run(path: Path) -> Path:
    recs = []
    for ws in (2, 4):
        for k in range(10, 27, 4):
            size = 1 << k
            recs.append(
                S.collective_record(
                    "allreduce", size, world_size=ws, busbw_gbps=100 * size / (size + 2**20)
                )
            )
            # rank 1's record of the same task: the report plots rank 0 only
            recs.append(
                S.collective_record("allreduce", size, world_size=ws, rank=1, busbw_gbps=1.0)
            )
    for ws, eff in ((1, 100.0), (2, 96.0), (4, 91.0)):
        recs.append(S.scaling_record(world_size=ws, efficiency_pct=eff))
    recs += _strategy_records()
    gpu_op = S.operator_record(device=S.GPU, time_s=2e-6, peak_tflops=66.9)
    gpu_op["device"]["peak_bandwidth_gbps"] = 3350.0
    recs += [gpu_op, S.failed_record("conv2d"), S.skipped_record("attention")]
    return S.write_run(path, recs, telemetry={gpu_op["task_id"]: S.gpu_timeline()})


def _strategy_records() -> list[dict[str, Any]]:
    """Strategies of two frameworks at 2 ranks (pytorch also at 4), compared on the host with
    their allreduce baselines, and one strategy skipped with its declared reason."""
    from suite.aggregate import StrategyBaselines

    made = [
        S.strategy_record("allreduce", throughput=5000.0, tta=1.0, steps=49),
        S.strategy_record("fp16", throughput=6000.0, tta=0.9, steps=49),
        S.strategy_record("local-sgd", throughput=7000.0, tta=None, steps=None, final=0.9),
        S.strategy_record("allreduce", world_size=4, throughput=8000.0),
        S.strategy_record("fp16", world_size=4, throughput=9000.0),
        S.strategy_record("allreduce", framework="mxnet", throughput=3000.0, tta=0.6),
        S.strategy_record("ps-async", framework="mxnet", throughput=3200.0, tta=0.8, steps=42),
    ]
    tracker = StrategyBaselines()
    for rec in made:
        tracker.observe(rec)
    skipped = S.base(level="distributed", name="strategies", rank=None, status="skipped",
                     params={**made[0]["benchmark"]["params"], "strategy": "ps-sync"})  # fmt: skip
    skipped["reason"] = "PyTorch has no parameter server (synthetic)"
    return [*made, skipped]


def _images(md: str) -> list[str]:
    return re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", md)


def test_report_real_run_with_distributed_records(real_run: Path, tmp_path: Path) -> None:
    dist = _distributed_run(tmp_path / "dist")
    out = tmp_path / "out"
    written = report_main([real_run, dist], "both", out)
    assert written == [out / "report.md", out / "report.html"]
    md, page = (p.read_text() for p in written)
    # every section by level, then checks and provenance; the ones with nothing to show are a
    # line each under the last heading
    nothing = md.split(f"## {NOTHING_TITLE}", 1)[1] if NOTHING_TITLE in md else ""
    for title in SECTION_TITLES:
        if title == "Projection to other rank counts":
            continue  # the CLI's section (suite/projection, above the report): not report_main's
        if f"{title}: " in nothing:
            assert f"## {title}" not in md and f"{title}: " in page
            continue
        assert f"## {title}" in md, title
        assert f">{title}</h2>" in page
    headings = [t for t in re.findall(r"^## (.+)$", md, re.M) if t in SECTION_TITLES]
    assert headings[0] == "Findings" and headings == sorted(headings, key=SECTION_TITLES.index)
    assert page.count('<img src="data:image/png;base64,') >= 6
    assert not re.search(r'(src|href)="(https?:)?//', page), "report.html must be self-contained"
    images = _images(md)
    assert images and all(i.startswith(f"{PLOTS_DIR}/") for i in images)
    assert all((out / i).is_file() and (out / i).read_bytes()[:4] == b"\x89PNG" for i in images)
    names = " ".join(images)
    for kind in (
        "compare-operator-gemm",
        "compare-operator-softmax",
        "roofline-cpu",
        "roofline-gpu",
    ):
        assert kind in names
    assert "busbw-allreduce" in names and "scaling-ddp_train" in names and "telemetry-" in names
    assert "strategies-cost" in names and "strategies-bytes" in names
    assert "strategies-scaling" in names  # pytorch's strategies at 2 and 4 ranks
    strategies = md.split("## Distributed strategies", 1)[1].split("\n## ", 1)[0]
    rows = [
        line for line in strategies.splitlines() if line.startswith(("| dist · ", "| pytorch |"))
    ]
    assert len(rows) == 8, rows  # 7 measured + 1 not run
    fp16 = next(r for r in rows if "| fp16 |" in r and "| 2 |" in r)
    assert "1.20x" in fp16 and "0.90x" in fp16 and "2x" in fp16  # throughput, time, compression
    assert "not reached" in next(r for r in rows if "local-sgd" in r)
    assert "PyTorch has no parameter server (synthetic)" in strategies
    assert "not in the plot" in strategies  # local-sgd reached no target
    # real run: every record and every check is in the tables
    for rec in records(real_run):
        for check in rec["correctness"]["checks"]:
            assert check["name"] in md
    assert "quick-cpu" in md and "dist" in md
    assert "No distributed records" not in md and "No telemetry timelines" not in md
    # rank 0 only: 2 world sizes x 5 message sizes, not the rank-1 duplicates
    allreduce = md.split("### allreduce", 1)[1].split("###", 1)[0]
    assert len([line for line in allreduce.splitlines() if line.startswith("| dist")]) == 10
    assert "worker exited with code 1" in md and "not supported by this adapter" in md
    assert "2.13" in md or "torch=" in md  # framework version in the environment table
    # the real CPU run's records carry the host's measured bandwidth (suite/membw.py), so
    # its roofline has a memory roof whatever the CPU
    assert "Bandwidth source: measured: STREAM-style triad" in md
    assert "No memory-bandwidth peak is known for NVIDIA" not in md


def test_single_run_report_says_what_is_absent(real_run: Path) -> None:
    written = report_main([real_run], "both", None)
    assert written == [real_run / "report.md", real_run / "report.html"]
    md = written[0].read_text()
    assert "No distributed records in these runs" in md
    assert "No strategies records in these runs" in md
    # a CPU run has host telemetry only: its CPU timelines are plotted
    assert "No telemetry timelines" not in md and "mean host CPU (%)" in md
    assert "One series only" in md
    assert "Every record is ok" in md
    assert "| scheduler |" not in md and "| Slurm nodes |" not in md  # ran here, not in a job
    assert all((real_run / i).is_file() for i in _images(md))
    # the run stays a valid run directory, and a second report replaces the first
    assert report_main([real_run], "md", None) == [real_run / "report.md"]


def test_two_runs_side_by_side(real_run: Path, tmp_path: Path) -> None:
    slower = tmp_path / "slower"
    S.write_run(slower, [S.scaled(r, 1.25) for r in records(real_run)])
    out = tmp_path / "out"
    written = report_main([real_run, slower], "html", out)
    assert written == [out / "report.html"] and not (out / PLOTS_DIR).exists()
    page = written[0].read_text()
    assert "quick-cpu" in page and "slower" in page
    assert "(1.25×)" in page  # each series relative to the first in the comparison tables
    md = report_main([real_run, slower], "md", out)[0].read_text()
    gemm = md.split("### operator/gemm", 1)[1].split("###", 1)[0]
    header = next(line for line in gemm.splitlines() if line.startswith("| configuration"))
    assert "quick-cpu" in header and "slower" in header


def test_plots_are_capped_and_say_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(report_sections, "MAX_PLOTS", 2)
    monkeypatch.setattr(report_sections, "MAX_GROUPS", 3)
    recs = [
        S.operator_record(f"op{i}", {"n": n}, time_s=1e-4 * (n + 1))
        for i in range(3)
        for n in range(5)
    ]
    run = S.write_run(tmp_path / "many", recs)
    md = report_main([run], "md", None)[0].read_text()
    assert "Capped: showing 2 of 3 benchmark families" in md
    assert "Capped: showing 3 of 5 configurations" in md
    assert len([i for i in _images(md) if "compare-" in i]) == 2


def test_a_failed_check_shows_its_detail(tmp_path: Path) -> None:
    from suite.metrics import Check

    rec = S.operator_record()
    detail = {"steps": 40, "first_nonfinite_step": 23, "last_finite_loss": 0.0011}
    rec["correctness"] = {
        "passed": False,
        "checks": [Check("loss_finite_every_step", 17, 0.0, detail=detail).to_dict()],
    }
    md = report_main([S.write_run(tmp_path / "broken", [rec])], "md", None)[0].read_text()
    (row,) = [line for line in md.splitlines() if "| loss_finite_every_step |" in line]
    assert "| FAIL (" in row and "first_nonfinite_step 23" in row and "steps 40" in row, row


def test_bad_inputs_are_config_errors(tmp_path: Path) -> None:
    good = S.write_run(tmp_path / "good", [S.operator_record()])
    with pytest.raises(ConfigError, match="no such run directory"):
        report_main([tmp_path / "missing"], "both", None)
    (tmp_path / "empty-dir").mkdir()
    with pytest.raises(ConfigError, match="no results.jsonl"):
        report_main([tmp_path / "empty-dir"], "both", None)
    (tmp_path / "no-records").mkdir()
    (tmp_path / "no-records" / "results.jsonl").write_text("\n")
    with pytest.raises(ConfigError, match="holds no records"):
        report_main([tmp_path / "no-records"], "both", None)
    bad = tmp_path / "bad"
    bad.mkdir()
    rec = S.operator_record()
    rec["status"] = "finished"
    (bad / "results.jsonl").write_text(json.dumps(rec) + "\n")
    with pytest.raises(ConfigError, match=r"results.jsonl:1: invalid record: status"):
        report_main([good, bad], "both", None)
    (bad / "results.jsonl").write_text("{not json\n")
    with pytest.raises(ConfigError, match="not valid JSON"):
        report_main([bad], "both", None)
    # a NaN median (Python's json writes one, JSON has none) crashed the log-scale plot
    rec = S.operator_record("softmax", {"rows": 8, "cols": 8}, time_s=1e-6, flops=320)
    rec["metrics"][0]["median"] = float("nan")
    (bad / "results.jsonl").write_text(json.dumps(rec) + "\n" + json.dumps(rec) + "\n")
    with pytest.raises(ConfigError, match=r"results.jsonl:1: not valid JSON \(NaN is not a JSON"):
        report_main([bad], "md", tmp_path / "nan-report")
    proc = cli("compare", str(good), str(bad))
    assert proc.returncode == 2 and "NaN is not a JSON value" in proc.stderr, proc.stderr
    with pytest.raises(ConfigError, match="--format"):
        report_main([good], "pdf", None)
    with pytest.raises(ConfigError, match="not a directory"):
        report_main([good], "md", good / "results.jsonl")
    with pytest.raises(ConfigError, match="pass at least one"):
        report_main([], "md", None)


def test_the_same_run_given_twice_is_refused(tmp_path: Path) -> None:
    rec = S.operator_record("softmax", {"rows": 64, "cols": 32}, time_s=7e-6, flops=5 * 64 * 32)
    run = S.write_run(tmp_path / "mine", [rec])
    (tmp_path / "alias").symlink_to(run)
    for again in (run / "results.jsonl", tmp_path / "alias"):
        proc = cli("report", str(run), str(again), "--out", str(tmp_path / "rep"))
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert f"{again}: the same run as {run}" in proc.stderr
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "rep").exists()
    # another run of the same directory name is another run
    other = S.write_run(tmp_path / "b" / "mine", [rec])
    proc = cli("report", str(run), str(other), "--out", str(tmp_path / "rep"), "--format", "md")
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "rep" / "report.md").read_text()
    assert f"| {tmp_path.name}/mine | {run} |" in md and f"| b/mine | {other} |" in md


def test_html_renders_the_emphasis_and_commands_the_text_holds(tmp_path: Path) -> None:
    """A run stopped after 1 of 3 tasks, moved to another directory: the HTML shows the
    incomplete-run line in bold and the --resume command (at the run's place now) as code."""
    done = S.operator_record("norm", {"kind": "layer", "rows": 64, "cols": 48}, time_s=9e-6)
    run = S.write_run(tmp_path / "moved" / "stopped", [done])
    manifest = json.loads((run / "manifest.json").read_text())
    manifest.update(
        state="interrupted",
        tasks=[done["task_id"], "operator-gelu-pytorch-fp32-0000000001", "operator-gelu-x-2"],
        argv=["run", "--benchmark", "norm,gelu", "--out", "elsewhere/it was"],
    )
    (run / "manifest.json").write_text(json.dumps(manifest))
    page = report_main([run], "html", tmp_path / "rep")[0].read_text()
    assert "**" not in page
    assert "<strong>Incomplete runs</strong>: stopped (interrupted): 2 of 3 planned tasks" in page
    assert "<strong>noisy</strong>" in page  # the Summary's own emphasis
    resume = f"dlsuite run --benchmark norm,gelu --out {run} --resume"
    assert f"<code>{resume}</code> runs them" in page
    assert "operator-gelu-pytorch-fp32-0000000001, operator-gelu-x-2." in page


def test_partial_last_line_is_tolerated(tmp_path: Path) -> None:
    run = S.write_run(tmp_path / "killed", [S.operator_record()])
    with (run / "results.jsonl").open("a") as fh:
        fh.write('{"schema_version": "1", "run_')  # killed mid-write
    md = report_main([run], "md", None)[0].read_text()
    assert "ignored a partial last line" in md


def test_report_modules_import_light() -> None:
    code = (
        "import sys, suite.report, suite.report.sections, suite.compare, suite.references\n"
        "heavy = [m for m in ('matplotlib', 'torch', 'tensorflow', 'jax', 'mxnet') "
        "if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "print('LIGHT')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert out.returncode == 0 and "LIGHT" in out.stdout, out.stderr


def test_results_file_path_is_accepted(real_run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(real_run, copy)
    written = report_main([copy / "results.jsonl"], "md", None)
    assert written == [copy / "report.md"]


@pytest.mark.parametrize("width", [6.0, 8.0, 16.0])
def test_a_long_plot_title_is_wrapped_inside_the_figure(width: float) -> None:
    """The subtitle of a scaling plot holds every shared parameter; it was cut off at both
    edges. Each title line must now lie inside the figure, and no word may be lost."""
    from suite.report import plots as report_plots

    title = "data_parallel: scaling efficiency vs world size\n" + " ".join(
        f"param{i}={i * 37}" for i in range(14)
    )
    fig, (ax,) = report_plots._figure(width, 4.8)
    report_plots.set_title(ax, title)
    fig.canvas.draw()
    box = ax.title.get_window_extent(fig.canvas.get_renderer())
    assert 0 <= box.x0 and box.x1 <= fig.bbox.width, (box, fig.bbox)
    assert ax.title.get_text().split() == title.split()


def test_a_run_still_going_and_a_killed_one_are_told_apart(tmp_path: Path) -> None:
    """The manifest says running in both cases; the run directory's lock (taken here for real,
    as `dlsuite run` takes it) tells a run still going from one killed without a word."""
    from suite.rundir import RunLock

    done = S.operator_record("gelu", {"rows": 300, "cols": 70}, time_s=4e-6, flops=8 * 300 * 70)
    run = S.write_run(tmp_path / "nightly", [done])
    manifest = json.loads((run / "manifest.json").read_text())
    later = ["operator-gelu-pytorch-bf16-00000000aa", "operator-gelu-pytorch-fp16-00000000bb"]
    manifest.update(state="running", tasks=[done["task_id"], *later], argv=["run"])
    (run / "manifest.json").write_text(json.dumps(manifest))
    lock = RunLock(run).acquire(["run"], str(run))
    try:
        md = report_main([run], "md", tmp_path / "live")[0].read_text()
    finally:
        lock.release()
    assert "**Incomplete runs**: nightly (running): 2 of 3 planned tasks" in md
    assert "A run still going: report again when it has ended." in md
    assert "nightly: 2 of its 3 planned tasks have no record yet (a dlsuite run holds" in md
    assert "--resume" not in md
    md = report_main([run], "md", tmp_path / "dead")[0].read_text()
    killed = "running per its manifest, but no dlsuite run holds it (killed?)"
    assert f"**Incomplete runs**: nightly ({killed}): 2 of 3 planned tasks" in md
    assert f"`dlsuite run --out {run} --resume` runs them" in md
    assert f"{later[0]}, {later[1]}." in md


def test_a_retried_task_says_what_its_attempt_before_was(tmp_path: Path) -> None:
    """After --resume (a timeout the first time) the Summary says so under the run's table,
    once per task even where the task wrote a record per rank."""
    flaky = S.operator_record(
        "gemm", {"m": 40, "n": 24, "k": 8}, time_s=3e-6, flops=2 * 40 * 24 * 8
    )
    flaky["retry"] = {"attempt": 2, "previous_status": "timeout",
                      "previous_reason": "task exceeded its timeout of 30 s; the worker was terminated"}  # fmt: skip
    ranks = [S.collective_record("allreduce", 4096, world_size=2, rank=r) for r in (0, 1)]
    for rec in ranks:
        rec["retry"] = {"attempt": 3, "previous_status": "failed", "previous_reason": None}
    steady = S.operator_record("softmax", {"rows": 96, "cols": 16}, time_s=2e-6, flops=5 * 96 * 16)
    run = S.write_run(tmp_path / "resumed", [flaky, *ranks, steady])
    md = report_main([run], "md", tmp_path / "rep")[0].read_text()
    [note] = [line for line in md.splitlines() if line.startswith("retried:")]
    assert note.startswith("retried: 2 task(s) were measured again")
    assert f"the earlier records are in {run / 'superseded.jsonl'}: " in note
    assert (
        "gemm 40x24x8 fp32 pytorch: attempt 2, the one before timeout (task exceeded its " in note
    )
    assert "allreduce 4 KiB ×2 ranks fp32 pytorch: attempt 3, the one before failed" in note
    assert "softmax" not in note


@pytest.mark.parametrize("names", [["numpy", "jax", "onnxruntime"], ["a", "b"]])
def test_the_agreement_colour_bar_label_fits_the_figure(names: list[str]) -> None:
    """Three frameworks gave a 2.85-inch figure whose colour bar label ran off both ends."""
    from suite.report import plots as report_plots

    n = len(names)
    grid = [[math.nan if i == j else 2e-4 * (i + j) for j in range(n)] for i in range(n)]
    label = "error / tolerance (log scale; < 1 passes)"
    fig = report_plots.heatmap_figure([("mlp b4", names, grid)], label)
    fig.canvas.draw()
    text = fig.axes[-1].yaxis.label
    box = text.get_window_extent(fig.canvas.get_renderer())
    assert 0 <= box.y0 and box.y1 <= fig.bbox.height and box.x1 <= fig.bbox.width, box
    assert text.get_text().split() == label.split()


def test_a_fast_wrong_result_is_marked_in_the_comparison(tmp_path: Path) -> None:
    """NumPy's gemm 2.5x faster but with a failed correctness check: the comparison table must
    not show it as a plain 0.40x."""
    shape = {"m": 64, "n": 64, "k": 32}
    right = S.operator_record("gemm", shape, time_s=5e-6, flops=2 * 64 * 64 * 32)
    wrong = S.operator_record("gemm", shape, time_s=2e-6, flops=2 * 64 * 64 * 32,
                              framework="numpy", error=1e-2, tolerance=1e-5)  # fmt: skip
    assert not wrong["correctness"]["passed"] and wrong["status"] == "ok"
    run = S.write_run(tmp_path / "mixed", [right, wrong])
    md = report_main([run], "md", tmp_path / "rep")[0].read_text()
    section = md[md.index("### operator/gemm") :]
    row = next(line for line in section.splitlines() if line.startswith("| 64x64x32 fp32 |"))
    pytorch_cell, numpy_cell = row.split(" | ")[1:3]
    assert "(1.00×)" in pytorch_cell and "FAIL" not in pytorch_cell
    assert numpy_cell.startswith("2 µs") and "(0.40×) FAIL: wrong result" in numpy_cell
    assert "FAIL: wrong result: 1 value(s) from records whose correctness check failed" in section
    page = report_main([run], "html", tmp_path / "rep")[0].read_text()
    assert '<td class="fail">2 µs ±0.5% (0.40×) FAIL: wrong result</td>' in page
    roof = md[md.index("## Operator roofline") : md.index("## Framework and run comparison")]
    rows = [line for line in roof.splitlines() if line.startswith("| mixed | gemm |")]
    assert [r.endswith("FAIL: wrong result |") for r in rows] == [False, True]


def test_a_stopped_run_says_why(tmp_path: Path) -> None:
    """A run stopped by a full disk: the manifest keeps the reason; the report said 'stopped'."""
    done = S.operator_record("softmax", {"rows": 128, "cols": 10}, time_s=5e-6, flops=6400)
    run = S.write_run(tmp_path / "full-disk", [done])
    manifest = json.loads((run / "manifest.json").read_text())
    why = "the disk is full (No space left on device writing results.jsonl); the run stopped"
    manifest.update(state="stopped", stop_reason=why, tasks=[done["task_id"], "operator-x-1"])
    (run / "manifest.json").write_text(json.dumps(manifest))
    md = report_main([run], "md", tmp_path / "rep")[0].read_text()
    assert f"**Incomplete runs**: full-disk (stopped: {why}): 1 of 2 planned tasks" in md
    assert f"| stopped: {why} | 2 | 1 | 1 |" in md


def test_a_capped_comparison_plots_the_configurations_series_share(tmp_path: Path) -> None:
    """20 gemm shapes, PyTorch alone in the first 17, PyTorch and NumPy in the last 3: the
    capped plot (16) took the first 16, showing no comparison and no NumPy at all."""
    from suite.report.sections import MAX_GROUPS

    recs = []
    for i in range(MAX_GROUPS + 4):
        shape = {"m": 8 * (i + 1), "n": 8, "k": 8}
        recs.append(S.operator_record("gemm", shape, time_s=1e-6 * (i + 1), flops=1024))
        if i >= MAX_GROUPS + 1:
            recs.append(S.operator_record("gemm", shape, time_s=2e-6 * (i + 1), flops=1024,
                                          framework="numpy"))  # fmt: skip
    recs += [S.operator_record("softmax", {"rows": 4 * k, "cols": 4}, time_s=1e-6, flops=80)
             for k in range(1, MAX_GROUPS + 3)]  # fmt: skip
    # NumPy alone, at a shape past the cap that nobody shares: left out, and said so
    recs.append(S.operator_record("softmax", {"rows": 999, "cols": 4}, time_s=1e-6, flops=80,
                                  framework="numpy"))  # fmt: skip
    run = S.write_run(tmp_path / "shapes", recs)
    md = report_main([run], "md", tmp_path / "rep")[0].read_text()
    gemm = md[md.index("### operator/gemm") : md.index("### operator/softmax")]
    assert (
        f"Capped: showing {MAX_GROUPS} of {MAX_GROUPS + 4} configurations; those measured" in gemm
    )
    assert "Not in the plot" not in gemm  # NumPy's three shapes are among those plotted
    softmax = md[md.index("### operator/softmax") :].split("| configuration")[0]
    assert "Not in the plot (no value among the configurations plotted; the table has " in softmax
    assert "theirs): shapes · numpy · AMD EPYC." in softmax


def test_the_environment_does_not_invent_a_version_for_a_task_that_never_ran(
    tmp_path: Path,
) -> None:
    """A timeout (no framework version, no commit: the host wrote it) beside an ok record of
    the same framework read 'pytorch 2.13.0+cpu (adapter 1); pytorch ? (adapter unknown)' and
    'unknown; <commit>', as if two versions and an unknown checkout had been measured."""
    ok = S.operator_record("gelu", {"rows": 17, "cols": 3}, time_s=1e-6, flops=408)
    timeout = S.failed_record("gemm", status="timeout", framework="mxnet")
    # as the runner writes a record for a task that never reached its framework
    timeout["framework"].update(version=None, adapter_version="unknown")
    timeout["provenance"]["git_commit"] = None
    late = copy.deepcopy(timeout)
    late["framework"]["name"] = ok["framework"]["name"]
    run = S.write_run(tmp_path / "mixed", [ok, late, timeout])
    md = report_main([run], "md", tmp_path / "rep")[0].read_text()
    env = md[md.index("## Environment and provenance") :]
    fw = next(line for line in env.splitlines() if line.startswith("| framework |"))
    version = ok["framework"]["version"]
    assert fw == (
        f"| framework | {ok['framework']['name']} {version} (adapter "
        f"{ok['framework']['adapter_version']}); mxnet (version not recorded: no record of it "
        "ran) |"
    )
    commit = next(line for line in env.splitlines() if line.startswith("| git commit |"))
    assert "unknown" not in commit and ok["provenance"]["git_commit"] in commit


def test_time_to_accuracy_is_not_titled_per_call() -> None:
    from suite.report.sections import comparison_title

    assert comparison_title("network", "digits", ["time_to_accuracy"]) == (
        "network/digits: time_to_accuracy (median, 95% CI)"
    )
    assert comparison_title("network", "train", ["step_time"]) == (
        "network/train: step_time per call (median, 95% CI)"
    )


def test_a_folder_holds_one_report_an_earlier_one_of_the_other_format_goes(
    tmp_path: Path,
) -> None:
    """``--format html`` after an earlier ``--format md`` (of other runs) left two reports of
    different content side by side; the earlier one is removed and the command says so. A
    file of that name dlsuite did not write, and a file of the user's among the plots, stay."""
    first = S.write_run(tmp_path / "first", [S.operator_record(), S.failed_record()])
    second = S.write_run(tmp_path / "second", [S.scaled(S.operator_record(), 2.0)])
    out = tmp_path / "reports"
    report_main([first], "md", out)
    assert (out / "report.md").is_file() and list((out / PLOTS_DIR).glob("*.png"))
    removed: list[Path] = []
    assert report_main([first, second], "html", out, removed=removed) == [out / "report.html"]
    assert removed == [out / "report.md", out / PLOTS_DIR]
    assert sorted(p.name for p in out.iterdir()) == ["report.html"]
    removed.clear()
    (out / PLOTS_DIR).mkdir()
    (out / PLOTS_DIR / "my-notes.txt").write_text("mine")
    report_main([second], "md", out, removed=removed)  # the html of two runs goes now
    assert removed == [out / "report.html"] and not (out / "report.html").exists()
    (out / PLOTS_DIR / "my-plot.png").write_bytes(b"a picture of the user's")
    report_main([second], "html", out)
    assert (out / PLOTS_DIR / "my-notes.txt").read_text() == "mine"
    assert (out / PLOTS_DIR / "my-plot.png").read_bytes() == b"a picture of the user's"
    (out / PLOTS_DIR / "my-plot.png").unlink()
    assert not (out / "report.md").exists() and not list((out / PLOTS_DIR).glob("*.png"))
    # a report.md of the user's own is not dlsuite's to remove; --format both keeps both
    (out / "report.md").write_text("# my notes on the cluster\n")
    removed.clear()
    report_main([second], "html", out, removed=removed)
    assert removed == [] and (out / "report.md").read_text() == "# my notes on the cluster\n"
    proc = cli("report", str(first), "--format", "md", "--out", str(tmp_path / "cli"))
    assert proc.returncode == 0, proc.stderr
    proc = cli("report", str(first), "--format", "html", "--out", str(tmp_path / "cli"))
    assert proc.returncode == 0, proc.stderr
    assert (
        f"removed {tmp_path / 'cli' / 'report.md'}: left by an earlier dlsuite report "
        "(--format html writes report.html only; --format both writes both)"
    ) in proc.stdout, proc.stdout
    assert not (tmp_path / "cli" / "report.md").exists()
