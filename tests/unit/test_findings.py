"""The explanation across levels (suite/report/decompose.py, bounds.py, findings.py) on
synthetic records whose answers are known, and every Finding of the committed runs under
docs/results/explain-cpu/ recomputed from its records (tests/explain_check.py), with the
report's section order (Findings first, levels in order, empty sections one line at the end)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from suite import metrics as M
from suite.levels.training.feed import INPUT_WAIT, STEP_TIME_MEMORY
from suite.metrics import Check
from suite.metrics.performance import INPUT_BOUND_SHARE
from suite.onnx import zoo
from suite.onnx.operators import graph_operators, load_model
from suite.report import NOTHING_TITLE, SECTION_TITLES, build_document
from suite.report.bounds import TERMS, bounds, bounds_section
from suite.report.decompose import decomposition_section, decompositions, remainder_text
from suite.report.document import Table
from suite.report.findings import findings
from suite.report.intervals import Iv
from suite.report.load import load_runs
from suite.results import validate_record
from tests.explain_check import check, records_by_id
from tests.synthetic import CPU, GPU, base, mark_busy, samples, write_run

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results" / "explain-cpu"
QUICK18 = {"resolution": 32, "classes": 10, "width": 4}
NET = {"network": "resnet18", "batch": 4, "channels_last": False, "compile": False, "lr": 0.01,
       **QUICK18}  # fmt: skip
BW = 10.0  # GB/s, the synthetic device's measured memory bandwidth
DEVICE = {**CPU, "peak_tflops": {"fp32": 0.2}, "peak_source": "synthetic",
          "peak_bandwidth_gbps": BW, "peak_bandwidth_source": "synthetic: declared"}  # fmt: skip


def _ok(rec: dict[str, Any], device: dict[str, Any] | None = None) -> dict[str, Any]:
    rec["device"] = copy.deepcopy(device or DEVICE)
    rec["correctness"] = {"passed": True, "checks": [Check("c", 0.0, 1.0).to_dict()]}
    rec["measurement"] = {"warmup_iters": 1, "inner_repeats": 1, "samples": 21,
                          "stop_reason": "ci_target_met"}  # fmt: skip
    validate_record(rec)
    return rec


def network_record(framework: str, step_s: float, spread: float = 0.01, mode: str = "train",
                   params: dict[str, Any] | None = None, device: dict[str, Any] | None = None
                   ) -> dict[str, Any]:  # fmt: skip
    p = params or NET
    rec = base(level="network", name=mode, params=p, framework=framework)
    metric = M.STEP_TIME if mode == "train" else M.LATENCY
    rec["metrics"] = [metric.entry(samples(step_s, spread)),
                      M.THROUGHPUT.entry(samples(p["batch"] / step_s, spread))]  # fmt: skip
    return _ok(rec, device)


def operator_records(framework: str, time_of: Any, mode: str = "train",
                     skip: int = 0, device: dict[str, Any] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """One record per operator task of the synthetic network, ``time_of(bench, params)``."""
    ops = graph_operators(load_model("resnet18", zoo.get("resnet18").validate(QUICK18)), 4,
                          training=True)  # fmt: skip
    out = []
    for bench, params, _ in ops.tasks()[skip:]:
        from suite.levels import load_benchmark

        p = load_benchmark("operator", bench).validate(params)
        rec = base(name=bench, params=p, framework=framework)
        rec["metrics"] = [M.TIME.entry(samples(time_of(bench, p), 0.01))]
        out.append(_ok(rec, device))
    return out


def feed_record(framework: str, wait_s: float, step_s: float, fmt: str = "folder",
                batch: int = 4, width: int = 4, slowed_s: float = 0.0) -> dict[str, Any]:  # fmt: skip
    p = {"network": "resnet18", "width": width, "batch": batch, "format": fmt, "workers": 1,
         "dataset": "quick", "steps": 8, "warmup": 2, "transform": "train", "decode": "host"}  # fmt: skip
    rec = base(level="training", name="feed", params=p, framework=framework)
    rec["metrics"] = [
        M.STEP_TIME.entry(samples(step_s + wait_s + slowed_s, 0.02)),
        STEP_TIME_MEMORY.entry(samples(step_s, 0.02)),
        INPUT_WAIT.entry(samples(wait_s, 0.02)),
        INPUT_BOUND_SHARE.entry(value=100 * wait_s / (step_s + wait_s)),
    ]
    return _ok(rec)


def dp_record(framework: str, world: int, step_s: float, nosync_s: float | None,
              params: dict[str, Any] | None = None, baseline: str | None = None,
              spread: float = 0.02) -> dict[str, Any]:  # fmt: skip
    p = {"network": "resnet18", **QUICK18, "scaling": "weak", "batch": 4, "lr": 0.01,
         **(params or {})}  # fmt: skip
    rec = base(level="distributed", name="data_parallel", params=p, framework=framework,
               world_size=world, rank=None)  # fmt: skip
    rec["metrics"] = [M.STEP_TIME.entry(samples(step_s, spread)),
                      M.THROUGHPUT.entry(samples(4 * world / step_s, spread))]  # fmt: skip
    rec["work"] = {"per_rank_batch": 4, "global_batch": 4 * world}
    if nosync_s is not None:
        rec["work"]["no_sync_step_s"] = nosync_s
    if baseline:
        rec["work"]["scaling_baseline_task_id"] = baseline
    return _ok(rec)


def _by_size(bench: str, p: dict[str, Any]) -> float:
    """A per-call time that differs by operator and direction (seconds)."""
    scale = {"conv2d": 2e-4, "norm": 3e-5, "gemm": 1e-5}[bench]
    return scale * (2.0 if p.get("direction") == "backward" else 1.0)


def _runs(tmp_path: Path, groups: dict[str, list[dict[str, Any]]]) -> list[Any]:
    return load_runs([write_run(tmp_path / name, recs) for name, recs in groups.items()])


def _counts() -> float:
    ops = graph_operators(load_model("resnet18", zoo.get("resnet18").validate(QUICK18)), 4,
                          training=True)  # fmt: skip
    total = 0.0
    for use in ops.benchmarked():
        for d in use.directions(True):
            total += use.count * _by_size(use.benchmark or "", use.task_params(d))
    return total


def test_a_step_is_the_sum_of_its_operators_plus_estimates_plus_remainder(tmp_path: Path) -> None:
    measured = _counts()
    runs = _runs(tmp_path, {"op": operator_records("pytorch", _by_size),
                            "net": [network_record("pytorch", measured + 0.02)]})  # fmt: skip
    (d,) = decompositions(runs)
    assert d.measured.value == pytest.approx(measured, rel=1e-12)
    assert d.estimated is not None and d.remainder is not None
    assert d.estimated.value > 0 and not d.estimated.has_width  # a model: no spread
    assert d.remainder.value == pytest.approx(0.02 - d.estimated.value, rel=1e-9)
    assert d.remainder.lo < d.remainder.value < d.remainder.hi
    # the update (SGD momentum over every trainable value) is one of the estimates
    update = next(u for u in d.uses if u.op == "SGD momentum update")
    assert (
        update.bytes["step"]
        == 5
        * 4
        * graph_operators(
            load_model("resnet18", zoo.get("resnet18").validate(QUICK18)), 4, training=True
        ).parameters
    )
    assert not d.missing and len(d.operator_records) == 34
    (f,) = [f for f in findings(runs) if f.topic == "step"]
    check(f, records_by_id(runs))


def test_the_unexplained_share_of_a_noisy_step_stays_within_the_step(tmp_path: Path) -> None:
    """A step measured with a wide interval (355 ms [284, 466] on a busy machine) had its
    remainder stated as "66% [34, 123] of the step": the remainder's upper end (made at the
    step's upper end) over the step's lower end. No part of a step is 123% of it; the share is
    1 - (measured + estimated) / step, bound by bound."""
    measured = _counts()
    step = 10 * measured
    runs = _runs(tmp_path, {"op": operator_records("pytorch", _by_size),
                            "net": [network_record("pytorch", step, spread=0.9)]})  # fmt: skip
    (d,) = decompositions(runs)
    assert d.remainder is not None and d.estimated is not None
    share = d.remainder_share()
    assert share is not None
    known = (d.measured.lo + d.estimated.value, d.measured.hi + d.estimated.value)
    assert share.lo == pytest.approx(1 - known[1] / d.step.lo, rel=1e-12)
    assert share.hi == pytest.approx(1 - known[0] / d.step.hi, rel=1e-12)
    assert share.lo < share.value < share.hi < 1.0
    assert d.remainder.over(d.step).hi > 1.0  # what it read before
    (f,) = [f for f in findings(runs) if f.topic == "step"]
    assert f.figures["unexplained"] == share
    check(f, records_by_id(runs))


def test_a_fused_step_gives_a_negative_remainder(tmp_path: Path) -> None:
    runs = _runs(tmp_path, {"op": operator_records("pytorch", _by_size),
                            "net": [network_record("pytorch", _counts() / 3)]})  # fmt: skip
    (d,) = decompositions(runs)
    assert d.remainder is not None and d.remainder.hi < 0
    assert "negative" in remainder_text(d)
    (f,) = [f for f in findings(runs) if f.topic == "step"]
    assert "negative remainder" in f.text
    check(f, records_by_id(runs))


def test_a_negative_share_keeps_its_value_inside_its_interval() -> None:
    r = Iv(-60.0, -62.0, -57.0).over(Iv(22.0, 21.0, 23.0))  # a negative remainder of a step
    assert (
        r.lo <= r.value <= r.hi
        and r.lo == pytest.approx(-62 / 21)
        and r.hi == pytest.approx(-57 / 23)
    )
    p = Iv(6.0, 4.0, 8.0).over(Iv(20.0, 16.0, 25.0))  # positive: lowest over highest and back
    assert (p.lo, p.hi) == (4.0 / 25.0, 8.0 / 16.0)


def test_a_shape_not_measured_leaves_no_remainder(tmp_path: Path) -> None:
    runs = _runs(tmp_path, {"op": operator_records("pytorch", _by_size, skip=1),
                            "net": [network_record("pytorch", 0.1)]})  # fmt: skip
    (d,) = decompositions(runs)
    assert d.remainder is None and len(d.missing) == 1
    assert any("not given" in n for n in d.notes)
    assert not [f for f in findings(runs) if f.topic == "step"]
    assert not any("--resume" in n for n in d.notes)  # the operator run finished


def test_a_killed_operator_run_is_pointed_at_resume(tmp_path: Path) -> None:
    """A step not taken apart because its operator run was killed part way named the shapes
    missing but not how to measure them: the note says `dlsuite run --resume --out DIR`."""
    runs = _runs(tmp_path, {"op": operator_records("pytorch", _by_size, skip=1),
                            "net": [network_record("pytorch", 0.1)]})  # fmt: skip
    manifest = tmp_path / "op" / "manifest.json"
    doc = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**doc, "state": "running"}))
    runs = load_runs([tmp_path / "op", tmp_path / "net"])
    (d,) = decompositions(runs)
    (note,) = [n for n in d.notes if "not given" in n]
    assert f"the operator run {tmp_path / 'op'} did not finish (its manifest says running)" in note
    assert f"`dlsuite run --resume --out {tmp_path / 'op'}` measures the rest" in note


def test_a_killed_operator_run_of_another_framework_is_not_pointed_at(tmp_path: Path) -> None:
    """The resume advice named any killed run holding operator records: a PyTorch step missing
    a shape was told to resume a killed TensorFlow operator run, which measures none of its
    shapes. Only a killed run of the step's own framework, machine and dtype is named."""
    runs = _runs(tmp_path, {"op": operator_records("pytorch", _by_size, skip=1),
                            "tf": operator_records("tensorflow", _by_size, skip=1),
                            "net": [network_record("pytorch", 0.1)]})  # fmt: skip
    manifest = tmp_path / "tf" / "manifest.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "state": "running"}))
    runs = load_runs([tmp_path / "op", tmp_path / "tf", tmp_path / "net"])
    (d,) = decompositions(runs)
    (note,) = [n for n in d.notes if "not given" in n]
    assert "--resume" not in note and str(tmp_path / "tf") not in note, note


def _statement(runs: list[Any]) -> str:
    """The section's one-line statement when no step is taken apart."""
    (text,) = [b for b in decomposition_section(runs, str).blocks if isinstance(b, str)]
    return text


def test_operators_from_another_machine_name_what_differs(tmp_path: Path) -> None:
    """A network run from one machine reported with operator runs from another said only "run
    the operator level at the network's shapes", which the user had done: now it names the
    fields that differ and both values."""
    other = {**DEVICE, "name": "Intel Xeon"}
    net = network_record("pytorch", 0.1, device=other)
    net["host"] = "node02"
    runs = _runs(tmp_path, {"op": operator_records("pytorch", _by_size), "net": [net]})
    assert decompositions(runs) == []
    text = _statement(runs)
    assert ("pytorch train resnet18 b4 32px w/4 fp32: the operator records differ "
            "from it in host 'node02' (network) against 'node01' (operators); device "
            "'cpu Intel Xeon' (network) against 'cpu AMD EPYC' (operators)") in text, text  # fmt: skip
    assert "framework '" not in text and "dtype '" not in text and "threads '" not in text


def test_operators_at_another_batch_say_so(tmp_path: Path) -> None:
    """A network record at batch 2 beside operator records of the same machine at batch 4 read
    "run the operator level at the network's shapes (... the same --quick/--batch)", as if no
    operator had been measured: now it says its shapes at batch 2 have none, the records there
    being at other shapes, and where those came from."""
    ops = operator_records("pytorch", _by_size)
    for rec in ops:
        rec["benchmark"]["source"] = "from resnet18 (res 32) b4: some shape, 1 use(s)"
    runs = _runs(tmp_path, {"op": ops, "net": [network_record("pytorch", 0.1,
                                                           params={**NET, "batch": 2})]})  # fmt: skip
    assert decompositions(runs) == []
    text = _statement(runs)
    n = len(graph_operators(load_model("resnet18", zoo.get("resnet18").validate(QUICK18)), 2,
                            training=True).tasks())  # fmt: skip
    assert (f"pytorch train resnet18 b2 32px w/4 fp32: none of its graph's {n} "
            "operator shapes at batch 2 has an operator record") in text, text  # fmt: skip
    assert "those in these runs are at other shapes (from resnet18 (res 32) b4)" in text
    assert "differ" not in text


def test_operators_timed_on_other_cpu_threads_take_no_step_apart(tmp_path: Path) -> None:
    """A network step run on 2 threads was taken apart by operators timed on 1: 73 us of
    operators for a 138 us step read as a negative remainder, "fusion". CPU threads are now
    part of what must match, and a record left out is named with both thread counts, also
    beside a step that was taken apart."""
    one = {**DEVICE, "omp_num_threads": "1", "torch_threads": 1}
    two = {**DEVICE, "omp_num_threads": "2", "torch_threads": 2}
    runs = _runs(tmp_path, {"op": operator_records("pytorch", _by_size, device=one),
                            "net": [network_record("pytorch", 0.1, device=two)]})  # fmt: skip
    assert decompositions(runs) == []
    assert ("the operator records differ from it in threads '2' (network) against '1' "
            "(operators)") in _statement(runs)  # fmt: skip
    # beside a step of the operators' own threads: that one is taken apart, the other named
    both = _runs(tmp_path / "b", {"op": operator_records("pytorch", _by_size, device=one),
                                  "net": [network_record("pytorch", 0.1, device=one),
                                          network_record("pytorch", 0.05, mode="infer",
                                                         device=two)]})  # fmt: skip
    (d,) = decompositions(both)
    assert d.mode == "train"
    last = [b for b in decomposition_section(both, str).blocks if isinstance(b, str)][-1]
    assert last.startswith("Not taken apart: pytorch infer resnet18 b4") and "threads '2'" in last
    # a GPU record has no CPU threads to differ in
    gpu_a, gpu_b = {**DEVICE, **GPU, "omp_num_threads": "1"}, {**DEVICE, **GPU}
    gpu = _runs(tmp_path / "g", {"op": operator_records("pytorch", _by_size, device=gpu_a),
                                 "net": [network_record("pytorch", 0.1, device=gpu_b)]})  # fmt: skip
    assert len(decompositions(gpu)) == 1


def test_a_missing_level_is_named_with_the_command_that_measures_it(tmp_path: Path) -> None:
    """Operator records alone, or network records alone, both read "run the operator level at
    the network's shapes": wrong for the first (the network level is what is missing) and
    vague for the second. Each now names the missing level, the second with the command."""
    only_ops = _runs(tmp_path / "o", {"op": operator_records("pytorch", _by_size)})
    text = _statement(only_ops)
    assert "these runs hold no network train/infer record" in text
    assert "--level network --benchmark train,infer" in text
    only_net = _runs(tmp_path / "n", {"net": [network_record("pytorch", 0.1)]})
    cmd = ("dlsuite run --level operator --sizes from:resnet18,classes=10,resolution=32,width=4 "
           "--batch 4 --framework pytorch --dtype fp32")  # fmt: skip
    assert (
        f"these runs hold no operator record. Measure the network's operators at its "
        f"shapes: `{cmd}`" in _statement(only_net)
    )
    # the command measures exactly the shapes the step needs: its sizes are the graph's
    from suite.levels.operator.from_network import parse

    name, fields = parse(cmd.split("--sizes ")[1].split(" ")[0])
    assert name == "resnet18" and zoo.get("resnet18").validate(fields) == zoo.get(
        "resnet18"
    ).validate(QUICK18)


def test_operator_records_that_failed_their_checks_are_said(tmp_path: Path) -> None:
    """Every operator record failed its check (the timer's own, on a loaded machine): the
    section says so and how they are measured again, not "run the operator level"."""
    ops = operator_records("pytorch", _by_size)
    for rec in ops:
        rec["correctness"]["passed"] = False
    runs = _runs(tmp_path, {"op": ops, "net": [network_record("pytorch", 0.1)]})
    text = _statement(runs)
    assert f"none of the {len(ops)} operator records is ok with its checks passed" in text, text
    assert "operator-retry" in text


def test_a_users_model_file_gone_or_changed_is_said(tmp_path: Path) -> None:
    """A user's model reported where its file is not (or after it was exported again) read "No
    network train/infer record with its operators measured beside it", beside both; the walk's
    error was dropped. Now the record is named with why: no such file, or a SHA-256 other than
    the one it ran."""
    import hashlib

    import onnx

    path = tmp_path / "mine.onnx"
    onnx.save(zoo.get("mlp").build(zoo.get("mlp").validate({"features": 12, "hidden": 9,
                                                            "layers": 1, "classes": 3})), path)  # fmt: skip
    params = {"network": "onnx", "model": str(path), "batch": 4, "channels_last": False,
              "compile": False, "lr": None}  # fmt: skip
    net = network_record("pytorch", 0.1, params=params)
    net["work"] = {"model_sha256": hashlib.sha256(b"the bytes it ran").hexdigest()}
    runs = _runs(tmp_path / "c", {"op": operator_records("pytorch", _by_size), "net": [net]})
    now = hashlib.sha256(path.read_bytes()).hexdigest()
    assert (
        f"pytorch train mine.onnx b4 fp32: its model file {path} changed since it ran "
        f"(SHA-256 {now[:12]} now, {net['work']['model_sha256'][:12]} in the record)"
    ) in _statement(runs)
    path.unlink()
    runs = _runs(tmp_path / "g", {"op": operator_records("pytorch", _by_size), "net": [net]})
    assert (
        "pytorch train mine.onnx b4 fp32: its graph could not be walked (--model "
        f"{path}: no such file"
    ) in _statement(runs)


def test_without_a_measured_bandwidth_nothing_is_estimated(tmp_path: Path) -> None:
    dev = {k: v for k, v in DEVICE.items() if not k.startswith("peak_bandwidth")}
    runs = _runs(tmp_path, {"op": operator_records("pytorch", _by_size, device=dev),
                            "net": [network_record("pytorch", 0.1, device=dev)]})  # fmt: skip
    (d,) = decompositions(runs)
    assert d.estimated is None and d.remainder is None
    assert any("bandwidth" in n for n in d.notes)


def test_fastest_framework_or_no_difference(tmp_path: Path) -> None:
    runs = _runs(tmp_path, {"net": [network_record("pytorch", 0.010),
                                    network_record("tensorflow", 0.020),
                                    network_record("jax", 0.0101, spread=0.05)]})  # fmt: skip
    found = [f for f in findings(runs) if f.topic == "fastest"]
    assert len(found) == 2
    tf = next(f for f in found if "TensorFlow" in f.text)
    assert "PyTorch is faster than TensorFlow" in tf.text and tf.figures[
        "ratio"
    ].value == pytest.approx(2.0)
    jax = next(f for f in found if "JAX" in f.text)
    assert jax.text.startswith("no difference between PyTorch and JAX")
    by_id = records_by_id(runs)
    for f in found:
        check(f, by_id)


def test_a_fastest_finding_names_the_threads_where_the_frameworks_used_different_counts(
    tmp_path: Path,
) -> None:
    """PyTorch run on 2 threads against TensorFlow on 1 (--threads differed between their
    runs): the finding said PyTorch was faster, as if of the code alone."""
    two, one = {**DEVICE, "torch_threads": 2}, {**DEVICE, "tf_intra_op_threads": 1}
    runs = _runs(tmp_path, {"net": [network_record("pytorch", 0.010, device=two),
                                    network_record("tensorflow", 0.020, device=one)]})  # fmt: skip
    (f,) = [f for f in findings(runs) if f.topic == "fastest"]
    assert "on different CPU threads: TensorFlow 1, PyTorch 2" in f.text, f.text
    same = _runs(tmp_path / "same", {"net": [network_record("pytorch", 0.010, device=two),
                                             network_record("tensorflow", 0.020,
                                                            device={**one, "tf_intra_op_threads": 2})]})  # fmt: skip
    (g,) = [f for f in findings(same) if f.topic == "fastest"]
    assert "threads" not in g.text, g.text
    check(f, records_by_id(runs))


def test_a_finding_on_records_measured_busy_says_so(tmp_path: Path) -> None:
    """`make explain` beside another run: "2 ranks reach 283% of 2 x one rank's throughput",
    its one-rank record busy. A finding resting on busy records ends naming the first."""
    busy = network_record("tensorflow", 0.020)
    mark_busy(busy)
    runs = _runs(tmp_path, {"net": [network_record("pytorch", 0.010), busy,
                                    network_record("jax", 0.030)]})  # fmt: skip
    found = {
        f.text.split(" is faster than ")[1][:10]: f for f in findings(runs) if f.topic == "fastest"
    }
    tf, jax = found["TensorFlow"], found["JAX at the"]
    assert tf.text.endswith(
        f"**Measured on a busy machine**: 1 of its 2 records ({tf.records[0]}: other processes "
        "kept 1.04 of 2 cores busy); rerun quiet before trusting it."
    ), tf.text
    assert tf.basis["busy_records"] == [tf.records[0]]
    assert "busy" not in jax.text and "busy_records" not in jax.basis


def test_a_fastest_finding_over_several_runs_says_it_chose_each_frameworks_fastest(
    tmp_path: Path,
) -> None:
    """`dlsuite report A B`: each framework's fastest record of the two runs was paired, a
    best-of-N choice the interval does not count; the sentence says so."""
    one = _runs(tmp_path / "one", {"a": [network_record("pytorch", 0.010),
                                         network_record("tensorflow", 0.020)]})  # fmt: skip
    (f,) = [f for f in findings(one) if f.topic == "fastest"]
    assert "fastest record of" not in f.text
    two = _runs(tmp_path / "two", {"a": [network_record("pytorch", 0.010),
                                         network_record("tensorflow", 0.020)],
                                   "b": [network_record("pytorch", 0.012),
                                         network_record("tensorflow", 0.019)]})  # fmt: skip
    (f,) = [f for f in findings(two) if f.topic == "fastest"]
    assert "each framework's fastest record of up to 2 runs, a choice the interval" in f.text


def test_operator_level_compares_the_shapes_every_framework_ran(tmp_path: Path) -> None:
    slow = operator_records("tensorflow", lambda b, p: 3 * _by_size(b, p))
    runs = _runs(tmp_path, {"pt": operator_records("pytorch", _by_size), "tf": slow[:10]})
    (f,) = [f for f in findings(runs) if f.topic == "fastest"]
    assert "10 operator shapes" in f.text and f.figures["ratio"].value == pytest.approx(3.0)
    check(f, records_by_id(runs))


def test_bounds_name_the_largest_term_or_no_clear_bound(tmp_path: Path) -> None:
    at224 = {"resolution": 224}  # the feed trains at the loader's 224 px
    one = dp_record("pytorch", 1, 0.010, None, at224)
    runs = _runs(tmp_path, {"run": [
        one,
        dp_record("pytorch", 2, 0.030, 0.010, at224, baseline=one["task_id"]),
        feed_record("pytorch", 0.001, 0.009),
        # TensorFlow: comm 10 ms against compute 10 ms: overlapping intervals
        dp_record("tensorflow", 2, 0.020, 0.010, at224, spread=0.2),
        feed_record("tensorflow", 0.001, 0.009, fmt="tfrecord"),
        # JAX: no feed record at this configuration
        dp_record("jax", 2, 0.030, 0.010, at224),
    ]})  # fmt: skip
    every = bounds(runs)
    found = {b.framework: b for b in every if b.world == 2}
    # at one rank: the feed beside the step from memory (no network record here), no exchange
    ones = {b.framework: b for b in every if b.world == 1}
    assert set(ones) == {"pytorch", "tensorflow"}
    assert ones["pytorch"].verdict() == ("compute-bound", "compute")
    assert ones["pytorch"].terms["compute"].source == "feed benchmark's step from memory"
    assert found["pytorch"].verdict() == ("communication-bound", "communication")
    assert found["tensorflow"].verdict()[0].startswith("no clear bound")
    assert found["jax"].verdict()[0].startswith("not decided: input not measured")
    assert "tfrecord" in found["tensorflow"].pipeline
    by_id = records_by_id(runs)
    fs = findings(runs)
    bound = [f for f in fs if f.topic == "bound"]
    assert len(bound) == 4  # 2 ranks: pytorch, tensorflow (jax undecided: nothing); 1 rank: 2
    for f in bound:
        check(f, by_id)
    (scaling,) = [f for f in fs if f.topic == "scaling"]
    # throughput 8/0.030 against 2 x 4/0.010: one third
    assert scaling.figures["efficiency"].value == pytest.approx(1 / 3)
    check(scaling, by_id)


def test_a_bound_says_where_the_loader_slowed_the_step_beyond_its_wait(tmp_path: Path) -> None:
    """On shared cores the loader's workers also slow the step itself: a PyTorch feed record
    on the 2-core VM took 227 ms fed against 129 ms from memory with a 5 ms wait, and the
    verdict read "compute takes 96% of the step". The finding states the rest."""
    runs = _runs(tmp_path, {"run": [
        feed_record("pytorch", 0.005, 0.129, slowed_s=0.093),
        feed_record("tensorflow", 0.005, 0.129, fmt="tfrecord"),  # fed = memory + wait
    ]})  # fmt: skip
    ones = {b.framework: b for b in bounds(runs) if b.world == 1}
    assert ones["pytorch"].verdict() == ("compute-bound", "compute")  # the terms as they were
    note = ones["pytorch"].slowdown_note()
    assert "slowed the step by 93" in note and "227 ms" in note, note
    assert ones["tensorflow"].slowdown_note() == ""
    by_id = records_by_id(runs)
    texts = {f.text.split(" ")[0]: f for f in findings(runs) if f.topic == "bound"}
    assert "slowed the step by 93" in texts["pytorch"].text
    assert "slowed" not in texts["tensorflow"].text
    for f in texts.values():
        check(f, by_id)


def test_a_bound_names_the_threads_where_its_terms_records_used_different_counts(
    tmp_path: Path,
) -> None:
    """A 2-rank step measured on 1 thread a rank beside a feed run on 2 threads: the bound
    said input-bound or compute-bound as if of one machine; it says the counts differed."""
    at224 = {"resolution": 224}
    dp, feed = dp_record("pytorch", 2, 0.030, 0.010, at224), feed_record("pytorch", 0.001, 0.009)
    dp["device"]["torch_threads"], feed["device"]["torch_threads"] = 1, 2
    runs = _runs(tmp_path, {"run": [dp, feed]})
    (b,) = [b for b in bounds(runs) if b.world == 2]
    assert b.threads_note() == (
        "measured on different CPU threads: compute 1, input 2, communication 1"
    )
    (f,) = [f for f in findings(runs) if f.topic == "bound" and "2 rank" in f.text]
    assert f.text.endswith(f"The terms were {b.threads_note()}."), f.text
    check(f, records_by_id(runs))
    table = next(x for x in bounds_section(runs, str).blocks if isinstance(x, Table))
    assert any("different CPU threads" in r[-1] for r in table.rows)
    (one,) = [b for b in bounds(runs) if b.world == 1]  # the feed alone: one count
    assert one.threads_note() == ""


def test_an_exchange_measured_below_zero_is_said_in_words(tmp_path: Path) -> None:
    """The step without the exchange slower than with it (noise, or an exchange hidden
    entirely) gives a communication term below zero: kept as measured, but said as none
    measurable, so the table and the finding show no negative time on its own."""
    at224 = {"resolution": 224}
    runs = _runs(tmp_path, {"run": [
        dp_record("pytorch", 2, 0.010, 0.011, at224),
        feed_record("pytorch", 0.001, 0.009),
    ]})  # fmt: skip
    (b,) = [b for b in bounds(runs) if b.world == 2]
    comm = b.terms["communication"]
    assert comm is not None and comm.seconds.value == pytest.approx(-0.001)
    assert b.verdict() == ("compute-bound", "compute")
    (f,) = [f for f in findings(runs) if f.topic == "bound" and "2 rank" in f.text]
    assert "communication none measurable (-1" in f.text and "was no faster)" in f.text
    section = bounds_section(runs, str)
    table = next(x for x in section.blocks if isinstance(x, Table))
    row = next(r for r in table.rows if "2 rank" in r[0])
    cell = row[1 + list(TERMS).index("communication")]
    assert cell.startswith("none measurable (-1") and "%" not in cell


def test_the_bounds_name_the_projections_term_as_the_projection_section_fits_it() -> None:
    """The report's projection section fits records the quiet check called busy (each row says
    so); the bounds table and the findings read the same projection, so they do too, and say
    it. Before, their hook refused busy records: the committed 224 px study (a loaded VM) had
    a projection section and no projection beside any bound."""
    from suite.projection.report_section import dominant_terms

    study = RESULTS / "resnet18-224"
    runs = load_runs([study / k for k in ("network", "training", "distributed", "collectives")])
    rows = dominant_terms(runs)
    assert rows and all(r["busy"] for r in rows.values())
    section = bounds_section(runs, str, dominant_terms)
    table = next(x for x in section.blocks if isinstance(x, Table))
    column = table.headers.index("projection's dominant term")
    two = [r for r in table.rows if "2 rank(s)" in r[0]]
    assert len(two) == 3
    assert all(" at 64 ranks (" in r[column] and "fitted to busy records" in r[column] for r in two)


def test_cpu_against_gpu(tmp_path: Path) -> None:
    cpu = network_record("pytorch", 0.1)
    gpu = network_record("pytorch", 0.002, device={**GPU, "peak_tflops": {}, "peak_source": "x"})
    runs = _runs(tmp_path, {"cpu": [cpu], "gpu": [gpu]})
    (f,) = [f for f in findings(runs) if f.topic == "cpu-gpu"]
    assert f.figures["ratio"].value == pytest.approx(50.0)
    check(f, records_by_id(runs))


def test_report_order_findings_first_levels_then_checks_empty_last(tmp_path: Path) -> None:
    runs = _runs(tmp_path, {"op": operator_records("pytorch", _by_size),
                            "net": [network_record("pytorch", 0.1)]})  # fmt: skip
    doc = build_document(runs)
    titles = [s.title for s in doc.sections]
    assert titles[0] == "Findings" and titles[-1] == NOTHING_TITLE
    shown = titles[:-1]
    assert shown == sorted(shown, key=SECTION_TITLES.index)
    assert shown.index("A step taken apart") < shown.index("Summary") < shown.index("Runs")
    nothing = doc.sections[-1]
    assert all(isinstance(b, str) for b in nothing.blocks)
    listed = {t for t in SECTION_TITLES for b in nothing.blocks if b.startswith(f"{t}: ")}
    assert len(listed) == len(nothing.blocks)
    assert "What bounds training" in listed and "Distributed strategies" in listed
    assert not listed & set(shown)
    # every section of the report but the CLI's projection (a package above the report)
    assert set(shown) | listed == set(SECTION_TITLES) - {"Projection to other rank counts"}


# -- the committed runs -----------------------------------------------------------------------------
def _committed() -> list[Path]:
    return sorted(p.parent for p in RESULTS.glob("*/*/results.jsonl"))


def test_the_committed_findings_are_what_their_records_say() -> None:
    """docs/results/explain-cpu/: every finding recomputed from its records; and the Findings
    of docs/studies/explain-cpu.md are exactly the statements the report makes of them now."""
    studies: dict[str, list[Path]] = {}
    for run in _committed():
        studies.setdefault(run.parent.name, []).append(run)
    assert studies, f"no committed runs under {RESULTS}"
    doc = (ROOT / "docs" / "studies" / "explain-cpu.md").read_text(encoding="utf-8")
    total, topics = 0, set()
    for _study, dirs in sorted(studies.items()):
        runs = load_runs(dirs)
        by_id = records_by_id(runs)
        found = findings(runs)
        assert found
        for f in found:
            check(f, by_id)
            assert f.text in doc, f"docs/studies/explain-cpu.md lacks: {f.text}"
            total += 1
            topics.add(f.topic)
    # every kind of finding the CPU runs can support is among them (cpu-gpu needs a GPU run)
    assert topics == {"fastest", "step", "bound", "scaling"}, json.dumps(sorted(topics))
    assert total >= 5


def test_training_level_compares_each_frameworks_fastest_pipeline(tmp_path: Path) -> None:
    slow_pt = feed_record("pytorch", 0.004, 0.010)
    slow_pt["benchmark"]["params"]["workers"] = 2
    slow_pt["task_id"] += "-w2"
    runs = _runs(tmp_path, {"feed": [slow_pt, feed_record("pytorch", 0.001, 0.010),
                                     feed_record("tensorflow", 0.001, 0.021, fmt="tfrecord")]})  # fmt: skip
    (f,) = [f for f in findings(runs) if f.topic == "fastest"]
    assert "PyTorch is faster than TensorFlow at the training level" in f.text
    assert "TensorFlow tfrecord with 1 worker(s), PyTorch folder with 1 worker(s)" in f.text
    assert f.figures["ratio"].value == pytest.approx(0.022 / 0.011)
    check(f, records_by_id(runs))


def test_two_users_models_are_two_bounds_named_by_their_files(tmp_path: Path) -> None:
    """Records of users' files (network "onnx") are told apart by their paths, not merged as
    one network "onnx", and each is named by its file."""

    def user(path: str) -> dict[str, Any]:
        return {"network": "onnx", "model": path}

    a = [dp_record("pytorch", 1, 0.010, None, user("/m/a.onnx")),
         dp_record("pytorch", 2, 0.030, 0.010, user("/m/a.onnx"))]  # fmt: skip
    b = [dp_record("pytorch", 1, 0.020, None, user("/n/b.onnx")),
         dp_record("pytorch", 2, 0.025, 0.020, user("/n/b.onnx"))]  # fmt: skip
    for rec in a + b:  # the zoo ResNet-18's fields dp_record starts from
        for key in QUICK18:
            rec["benchmark"]["params"].pop(key)
    every = [x for x in bounds(_runs(tmp_path, {"run": a + b})) if x.world == 2]
    assert sorted(x.label().split(" · ")[1] for x in every) == ["a.onnx", "b.onnx"]
    by_name = {x.label().split(" · ")[1]: x for x in every}
    for name, recs in (("a.onnx", a), ("b.onnx", b)):
        ids = {r["task_id"] for r in recs}
        assert by_name[name].records and {r.split(":")[-1] for r in by_name[name].records} <= ids


def test_one_baseline_of_both_scalings_is_named_by_each_records_own_scaling(
    tmp_path: Path,
) -> None:
    """The plan measures one 1-rank data_parallel run for both scalings (here the strong
    one); the weak 2-rank record's finding read "resnet18 strong (global batch 4) (weak
    scaling)": it named the baseline's scaling. Each finding now names its own record's."""
    from suite.aggregate import add_scaling_efficiency

    one = dp_record("pytorch", 1, 0.05, None, {"scaling": "strong"})
    weak = dp_record("pytorch", 2, 0.06, None, {"scaling": "weak"})
    strong = dp_record("pytorch", 2, 0.03, None, {"scaling": "strong"})
    for rec in (weak, strong):
        add_scaling_efficiency(rec, one)
        assert rec["work"]["scaling_baseline_task_id"] == one["task_id"]
    found = {f.text.split(":")[0] for f in findings(_runs(tmp_path, {"run": [one, weak, strong]}))
             if f.topic == "scaling"}  # fmt: skip
    assert found == {
        "PyTorch data-parallel resnet18 weak (per-rank batch 4) (weak scaling), fp32, CPU (AMD EPYC)",
        "PyTorch data-parallel resnet18 strong (global batch 4) (strong scaling), fp32, CPU (AMD EPYC)",
    }, found


def test_an_efficiency_above_100_percent_comes_with_its_cause(tmp_path: Path) -> None:
    """2 ranks at 0.0005 s a step against one rank at 0.05 s (what a busy 1-rank baseline
    gave on a shared machine: 7127% in a user's run; 10000% here) is no speed-up: the run's table marks it,
    its note and the Finding say why; the cause follows the records."""
    from suite import summary
    from suite.aggregate import add_scaling_efficiency

    def pair(params: dict[str, Any], busy: bool) -> list[dict[str, Any]]:
        one = dp_record("pytorch", 1, 0.05, None, params)
        two = dp_record("pytorch", 2, 0.0005, None, params)
        add_scaling_efficiency(two, one)
        if busy:
            mark_busy(one)
        return [one, two]

    recs = pair({"scaling": "weak"}, busy=True)
    assert summary.above_ideal(recs[1]) and not summary.above_ideal(recs[0])
    note = summary.above_ideal_note(recs)
    assert (
        note and "at most 10000%" in note and "the 1-rank baseline was measured on a busy" in note
    )
    from rich.console import Console

    console = Console(width=250, record=True)
    console.print(summary.table(recs))
    assert "10000% eff.*" in console.export_text()
    # quiet records, strong scaling: the working set is what the run can point at
    strong = pair({"scaling": "strong"}, busy=False)
    assert "strong scaling: each rank runs 1/2" in (summary.above_ideal_note(strong) or "")
    weak = pair({"scaling": "weak"}, busy=False)
    assert "not explained by this run" in (summary.above_ideal_note(weak) or "")
    runs = _runs(tmp_path, {"run": weak})
    (f,) = [f for f in findings(runs) if f.topic == "scaling"]
    assert "Above 100% is not a speed-up the run shows: not explained" in f.text
    from suite.report.document import render_markdown

    text = render_markdown(build_document(runs))  # the report: the scaling table marks it,
    # (with its interval, from both throughputs': suite/aggregate.py)
    assert "| 2 | 1e+04 % ±2.0%* |" in text, text[-3000:]  # and a note under two tables
    assert text.count("above 100% scaling efficiency") == 2
    # 95%: no mark, no note
    fine = dp_record("pytorch", 1, 0.010, None)
    two = dp_record("pytorch", 2, 0.0105, None)
    add_scaling_efficiency(two, fine)
    assert not summary.above_ideal(two) and summary.above_ideal_note([fine, two]) is None


def test_the_fed_step_against_memory_is_a_ratio_under_its_own_name(tmp_path: Path) -> None:
    """The feed table's "slower than memory" showed 1 - memory/fed: a fed step of 0.187 s
    against 0.108 s from memory read "42.5%" slower, where it is 73% slower; now the ratio."""
    from suite.report.training import training_section

    rec = feed_record("pytorch", wait_s=0.0125, step_s=0.108)
    rec["end_to_end"] = {"network": "resnet18", "resolution": 224, "batch": 4,
                         "step_s_memory": 0.108, "step_s_fed": 0.187, "input_wait_s": 0.0125,
                         "input_bound_share": 0.0125 / 0.187, "slowdown_share": 1 - 0.108 / 0.187}  # fmt: skip
    runs = _runs(tmp_path, {"training": [rec]})
    (table,) = [b for b in training_section(runs, str).blocks if isinstance(b, Table)]
    assert table.headers[-1] == "fed / memory" and "slower than memory" not in table.headers
    (row,) = table.rows
    assert row[-1] == "1.73x" and row[-2] == "6.7%"


def test_the_study_page_renders_each_table_and_finding_apart() -> None:
    """docs/studies/explain-cpu.md ran its blocks together: a paragraph after a table rendered
    as one of its rows, the bounds table as rows of the step table, and the text after a
    Findings list as part of its last finding. Rendered as GitHub does (CommonMark + tables),
    each table is its own, and each finding is a list item of one line."""
    import re

    from markdown_it import MarkdownIt

    text = (ROOT / "docs" / "studies" / "explain-cpu.md").read_text(encoding="utf-8")
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    separators = [ln for ln in text.splitlines() if re.fullmatch(r"\|( *-+ *\|)+", ln)]
    tables = [i for i, t in enumerate(tokens) if t.type == "table_open"]
    assert len(tables) == len(separators)
    for i in tables:  # every row of a table has as many cells as its header
        close = next(j for j in range(i, len(tokens)) if tokens[j].type == "table_close")
        widths: list[int] = []
        for t in tokens[i:close]:
            if t.type == "tr_open":
                widths.append(0)
            elif t.type in ("th_open", "td_open"):
                widths[-1] += 1
        # a paragraph line run into a table becomes a row whose one cell holds it (the others
        # empty: markdown-it pads), so compare the rows' text, not only their cell counts
        assert len(set(widths)) == 1, tokens[i].map
        body = text.splitlines()[tokens[i].map[0] : tokens[i].map[1]]
        assert all(ln.startswith("|") for ln in body), body[-1]
    items = [tokens[k + 2].content for k, t in enumerate(tokens) if t.type == "list_item_open"
             and tokens[k + 1].type == "paragraph_open"]  # fmt: skip
    findings_items = [c for c in items if "rerun quiet before trusting it." in c]
    assert findings_items and all(c.endswith("rerun quiet before trusting it.") and "\n" not in c
                                  for c in findings_items)  # fmt: skip


def test_a_scaling_efficiency_below_one_percent_is_not_printed_as_zero() -> None:
    """JAX's data_parallel on 2 CPU ranks: 0.37% efficiency read "(0% eff.)" in the run's table
    (here 1 rank at 0.15 ms a step, 2 ranks at 20.2 ms: 0.74%)."""
    from rich.console import Console

    from suite import summary
    from suite.aggregate import add_scaling_efficiency

    one = dp_record("jax", 1, 0.00015, None, {"scaling": "strong"})
    for two_step, shown in (
        (0.0202, "(0.74% eff.)"),
        (0.0025, "(6% eff.)"),
        (0.00016, "(94% eff.)"),
    ):
        two = dp_record("jax", 2, two_step, None, {"scaling": "strong"})
        add_scaling_efficiency(two, one)
        console = Console(width=250, record=True)
        console.print(summary.table([one, two]))
        assert shown in console.export_text()


def test_the_step_plot_has_a_title_and_every_term_in_its_legend() -> None:
    """The first bar (PyTorch here) has no normalisation; TensorFlow's has. Its colour was
    drawn without a legend entry, and the plot had no title to say which step it was."""
    from suite.report.decompose import Decomposition, Term, plot_figure
    from suite.report.intervals import Iv

    def dec(framework: str, terms: list[tuple[str, float]]) -> Decomposition:
        step = Iv(0.02, 0.019, 0.021)
        parts = [Term(label, Iv.exact(t)) for label, t in terms]
        return Decomposition(
            run=None, record={"framework": {"name": framework}}, rid=framework, mode="train",  # type: ignore[arg-type]
            step=step, terms=parts, measured=Iv.exact(0.0), estimated=None, remainder=None,
            uses=[], operator_records=[], missing=[], bandwidth_gbps=None, bandwidth_source="",
        )  # fmt: skip

    items = [
        dec("pytorch", [("convolution, forward", 0.008), ("remainder", 0.012)]),
        dec(
            "tensorflow",
            [
                ("convolution, forward", 0.006),
                ("normalisation, forward", 0.004),
                ("remainder", 0.010),
            ],
        ),  # fmt: skip
    ]
    fig = plot_figure(items, ["pytorch", "tensorflow"], "train: my-cnn b8 fp32 on Some CPU")
    (ax,) = fig.axes
    assert "train: my-cnn b8 fp32 on Some CPU" in " ".join(ax.get_title().split())
    (fig_legend,) = fig.legends
    legend = [t.get_text() for t in fig_legend.get_texts()]
    assert sorted(legend) == ["convolution, forward", "normalisation, forward", "remainder"]
    # the legend lies below the axes' x-axis label, not over it (it covered the label)
    from suite.report.plots import _png

    _png(fig)  # lays the figure out
    renderer = fig.canvas.get_renderer()
    label = ax.xaxis.label.get_window_extent(renderer)
    box = fig_legend.get_window_extent(renderer)
    assert box.y1 <= label.y0, (box, label)
