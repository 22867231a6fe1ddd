"""`make gpu-check DEVICE=cpu`: the rehearsal of the GPU acceptance run (benchmarks/validation/
gpu_check.py), every step at tiny sizes on the CPU, so the script cannot rot between lent GPUs.
Run for real: the ratios, the telemetry on/off runs, the training level's loader and feed, the
distributed level at world size 1 through a gloo process group of one rank, JAX's operator
level (in its environment), the report; resumed across two calls as on the GPU machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.pytorch]


def _make(out: Path, *args: str, timeout: float = 2400) -> subprocess.CompletedProcess[str]:
    argv = ["make", "-s", "gpu-check", "DEVICE=cpu", f"OUT_DIR={out}",
            f"GPU_PYTHON={sys.executable}", f"ARGS={' '.join(args)}"]  # fmt: skip
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def _records(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "results.jsonl").read_text().splitlines() if x.strip()]


def test_the_rehearsal_runs_every_step_and_resumes(tmp_path: Path) -> None:
    # JAX's step runs in JAX's environment: built (or found) first, outside the step's limit
    env = subprocess.run([sys.executable, "-m", "suite", "envs", "create", "jax"], cwd=ROOT,
                         capture_output=True, text=True, timeout=1800)  # fmt: skip
    assert env.returncode == 0, env.stdout[-2000:] + env.stderr[-2000:]
    out = tmp_path / "gc"

    # a call whose budget one step already spends stops after it, and says how to go on
    first = _make(out, "--call-budget", "1")
    # the script exits 3 (steps pending), which make reports as its own failure
    assert "Error 3" in first.stderr, first.stdout[-3000:] + first.stderr[-3000:]
    state = json.loads((out / "state.json").read_text())
    # (the gpu tests' steps, which the CPU has not, are marked skipped in passing)
    assert [n for n, st in state["steps"].items() if st["status"] != "skipped"] == ["ratio-gemm"]
    assert "call again with the same --out" in first.stdout

    t0 = time.monotonic()
    archive = tmp_path / "gc.tar.gz"
    second = _make(out, "--archive", str(archive))
    elapsed = time.monotonic() - t0
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-2000:]
    state = json.loads((out / "state.json").read_text())
    assert len(state["calls"]) == 2
    assert state["steps"]["ratio-gemm"]["call"] == 1  # not run again
    for name, st in state["steps"].items():
        if name.startswith("gpu-test"):
            assert st["status"] == "skipped" and "need a GPU" in st["reason"]
        else:
            assert st["status"] == "ok", (name, st)

    # the ratios: each with the correctness check of the same run
    for name in ("ratio-gemm", "ratio-resnet50", "ratio-adamw"):
        fig = json.loads((out / "steps" / f"{name}.json").read_text())
        assert fig["correctness"]["passed"], (name, fig["correctness"])
        assert fig["ratio"] > 0 and len(fig["per_round"]) == fig["size"]["rounds"]

    # telemetry: the same GEMM with the sampler and without it, and the sampler really off
    tel = json.loads((out / "steps" / "telemetry.json").read_text())
    assert tel["records_ok"] and tel["gemm"]["correct"]
    on = _records(out / "runs" / "telemetry-on")[0]
    off = _records(out / "runs" / "telemetry-off")[0]
    assert on["telemetry"]["sampling"] is True and off["telemetry"]["sampling"] is False
    assert on["telemetry"]["host"]["sampler"]["ticks"] > 0
    assert off["telemetry"]["host"]["sampler"]["ticks"] == 0

    # the training level: host decode measured and fed; the device decode skipped with its
    # reason on a CPU (no nvJPEG), never failed
    feed = _records(out / "runs" / "feed")
    by = {(r["benchmark"]["name"], r["benchmark"]["params"]["decode"]): r for r in feed}
    assert by[("loader", "host")]["status"] == "ok" and by[("feed", "host")]["status"] == "ok"
    for name in ("loader", "feed"):
        rec = by[(name, "device")]
        assert rec["status"] == "skipped" and "needs an accelerator" in rec["reason"]

    # the distributed level at one rank, through a real gloo process group
    nccl = _records(out / "runs" / "nccl")
    ran = [r for r in nccl if r["status"] == "ok"]
    assert {r["benchmark"]["name"] for r in ran} == {"allreduce", "data_parallel", "strategies"}
    for r in ran:
        assert r["world_size"] == 1 and r["correctness"]["passed"], r["task_id"]
        assert (r.get("work") or {}).get("dist_backend") == "gloo", r["task_id"]
    local_sgd = [r for r in nccl if (r.get("strategy") or {}).get("name") == "local-sgd"
                 or r["benchmark"]["params"].get("strategy") == "local-sgd"]  # fmt: skip
    assert local_sgd and all(r["status"] == "skipped" for r in local_sgd)

    jax = _records(out / "runs" / "jax-operator")
    assert jax and all(r["status"] == "ok" and r["correctness"]["passed"] for r in jax)

    summary = (out / "README.md").read_text()
    assert "| ratio-gemm | ok |" in summary and "| nccl | ok |" in summary
    assert (out / "report" / "report.md").is_file()
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert "gc/README.md" in names and not any(n.startswith("gc/data/") for n in names)
    # the rehearsal's own figure (its target is 3 minutes on an idle machine; CI is not idle)
    print(f"rehearsal: {elapsed:.0f} s for the second call, load {os.getloadavg()[0]:.1f}")
