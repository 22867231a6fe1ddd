"""`make gpu-check`: one prepared acceptance run for a lent GPU, most valuable first, every
step with its own time limit, every record written as it goes, resumable.

    make gpu-check [DEVICE=cuda|cpu] [OUT_DIR=docs/results/h200-2026-11-27] [ARGS=...]
    python -m benchmarks.validation.gpu_check --device cuda --out DIR [--call-budget 280] [--archive F]

A GPU is lent for about 15 minutes in all, and a machine's start takes a minute or more of it,
so one call of this script spends at most ``--call-budget`` seconds (default 280, 45 of them
kept for the report and the archive): it starts a step while the step's own limit fits in
what is left, passes over one that does not for a later, shorter one, starts a `dlsuite run`
step anyway while 60 s are left (cut at the call's end, it goes on with ``--resume`` in the
next call), and a second call with the same ``--out`` continues where the first stopped
(``state.json``; a `dlsuite run` step cut off by its own limit is resumed once). ``--device cpu`` is the rehearsal CI runs: the same steps
at tiny sizes on the CPU, gloo in place of NCCL, no nvJPEG, the ``gpu`` tests skipped by
name, in under 3 minutes, so the script cannot rot between lent GPUs.

The steps (docs/guide/gpu-check.md has the table with each step's limit and sizes):

1. ``ratio-gemm``, ``ratio-resnet50``, ``ratio-adamw``: same-run, interleaved suite/bare
   ratios (benchmarks/validation/gpu_check_steps.py), target 0.97-1.03 each;
2. ``feed``: the training level on the GPU: the loader on the host's cores with Pillow decode
   and with nvJPEG (``decode = device``), and the ``feed`` benchmark (ResNet-50 bf16 on the
   GPU) fed by each; the feeding capacity against this GPU's own training rate;
3. ``nccl``: the distributed level at world size 1 on NCCL (allreduce, data_parallel, the
   strategies that run at one rank);
4. ``telemetry``: the 8192^3 bf16 GEMM with telemetry and with ``--no-telemetry`` (the
   sampler's cost), the idle power before it, and a ResNet-50 bf16 training record (energy per
   sample);
5. ``jax-operator``: JAX's quick operator level on the GPU, fp32 and bf16;
6. ``gpu-tests``: the short ``gpu``-marked tests; then what the two long ones run, as
   resumable `dlsuite run` steps (cut at a call's end, they go on in the next):
   ``pytorch-operator`` (PyTorch's quick operator level: 233 s on an H100) and ``network``
   (the quick network level), last;
7. ``report``: `dlsuite report` over every run, after every call.

The paths the GPU alone takes (nvJPEG, NCCL, CUDA events, NVML) come before the telemetry
step and the tests, which other steps' records already exercise in part (every record of a
GPU run carries its NVML telemetry).

The output folder is meant to be committed as docs/results/<gpu>-<date>/: ``README.md``
(the one-screen summary), ``state.json``, ``steps/*.json``, ``runs/<step>/`` (records,
telemetry, logs), ``logs/``, ``report/``. ``--archive F`` also packs it into one .tar.gz (the
lent machine returns at most 8 files). Imports no framework: every step is a subprocess.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import site
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.validation import (
    gpu_check_report,  # run as `python -m` from the checkout: the checkout is on the path
)

ROOT = Path(__file__).resolve().parents[2]
#: default seconds one call may spend (two calls and a machine's start fit 15 minutes)
CALL_BUDGET_S = 280.0
#: the CPU rehearsal's per-step cap and call budget: caps against a hang, not targets (the
#: rehearsal takes about 3 minutes in all on an idle 2-core machine; CI's is not idle)
CPU_LIMIT_S, CPU_CALL_BUDGET_S = 300.0, 1800.0
#: a resumed `dlsuite run` step that timed out again is not tried a third time
MAX_ATTEMPTS = 2
#: seconds of a call kept for the report and the archive after its steps (the GPU call's
#: command limit is the budget plus a little: what runs past it brings nothing back)
REPORT_RESERVE_S = {"cuda": 45.0, "cpu": 0.0}
REPORT_TIMEOUT_S = {"cuda": 40.0, "cpu": 180.0}
#: a `dlsuite run` step whose limit does not fit what is left of a call still starts when at
#: least this much is left: cut at the call's end, it keeps its finished tasks and goes on
#: with --resume in the next call (not counted as an attempt)
MIN_RUN_SLICE_S = 60.0
#: the host dependencies the GPU machine's Python lacks (`make gpu-wheels` downloads them)
WHEELS, SITE = ROOT / ".gpu-wheels", ROOT / ".gpu-site"


def ensure_host_dependencies(wheel_dir: Path = WHEELS) -> str:
    """Import what the host side needs; where ``jsonschema`` is missing, install the carried
    wheels (.gpu-wheels/) into .gpu-site/ with no index and put it on the path, for this
    process and the steps. Returns what was done, for the summary."""
    try:
        import jsonschema  # noqa: F401

        return "host dependencies importable"
    except ImportError:
        pass
    wheels = sorted(wheel_dir.glob("*.whl"))
    if not wheels:
        raise SystemExit(
            f"gpu_check: jsonschema does not import here and {wheel_dir} holds no wheels: run "
            "`make gpu-wheels` where pip reaches an index, and carry .gpu-wheels"
        )
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index",
                           "--no-deps", "--no-compile", "--no-cache-dir", "--upgrade",
                           "--target", str(SITE), *map(str, wheels)])  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(
            f"gpu_check: the wheels in {wheel_dir} do not install on this Python "
            f"({sys.version.split()[0]}; pip said why above): make them for it with `make "
            "gpu-wheels` (it downloads for CPython 3.12, the GPU machine's)"
        )
    site.addsitedir(str(SITE))  # what was just installed there, importable in this process
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(SITE), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    return f"installed {len(wheels)} carried wheels into .gpu-site/: " + ", ".join(
        w.name.split("-")[0] for w in wheels
    )


@dataclass(frozen=True)
class Step:
    """One step: its time limit per device, and its command per device (a list of arguments;
    ``{out}``, ``{py}``, ``{step_json}``, ``{run}``, ``{data}`` filled in). ``None`` as a
    command: the step does not exist on that device, with ``why``."""

    name: str
    what: str
    limit_s: dict[str, float]
    command: dict[str, list[str] | None]
    why_not: dict[str, str] = field(default_factory=dict)
    #: the step writes `dlsuite run` directories (resumable with --resume)
    runs: tuple[str, ...] = ()


def _run(out_name: str, *args: str) -> list[str]:
    """A `dlsuite run` into ``{out}/runs/<out_name>`` (the suite from source, no history
    store: the records are the result)."""
    return ["{py}", "-m", "suite", "run", "--out", "{out}/runs/" + out_name, "--no-history",
            *args]  # fmt: skip


def _config(name: str) -> str:
    return str(ROOT / "benchmarks" / "validation" / "gpu-check" / name)


STEPS: list[Step] = [
    Step("ratio-gemm", "suite/bare: the operator level's GEMM record vs torch.matmul",
         {"cuda": 120, "cpu": CPU_LIMIT_S},
         {d: ["{py}", "-m", "benchmarks.validation.gpu_check_steps", "ratio-gemm", "--device", d, "--out",
              "{step_json}"] for d in ("cuda", "cpu")}),
    Step("ratio-resnet50", "suite/bare: ResNet-50 training (network level) vs a bare loop",
         {"cuda": 150, "cpu": CPU_LIMIT_S},
         {d: ["{py}", "-m", "benchmarks.validation.gpu_check_steps", "ratio-resnet50", "--device", d,
              "--out", "{step_json}"] for d in ("cuda", "cpu")}),
    Step("ratio-adamw", "suite/bare: fused AdamW on ResNet-50's parameters",
         {"cuda": 60, "cpu": CPU_LIMIT_S},
         {d: ["{py}", "-m", "benchmarks.validation.gpu_check_steps", "ratio-adamw", "--device", d,
              "--out", "{step_json}"] for d in ("cuda", "cpu")}),
    Step("feed", "training level on the device: loader (host / device decode) and feed",
         {"cuda": 200, "cpu": CPU_LIMIT_S},
         {"cuda": _run("feed", "--config", _config("feed-cuda.toml"), "--device", "cuda",
                       "--backend", "local", "--data-dir", "{data}", "--dtype", "bf16"),
          "cpu": _run("feed", "--config", _config("feed-cpu.toml"), "--device", "cpu",
                      "--backend", "local", "--data-dir", "{data}")},
         runs=("feed",)),
    Step("nccl", "distributed level at world size 1 through the framework's process group",
         {"cuda": 120, "cpu": CPU_LIMIT_S},
         {"cuda": _run("nccl", "--config", _config("nccl-cuda.toml"), "--device", "cuda",
                       "--backend", "local", "--world-size", "1", "--dist-backend", "nccl"),
          "cpu": _run("nccl", "--config", _config("nccl-cpu.toml"), "--device", "cpu",
                      "--backend", "local", "--world-size", "1", "--dist-backend", "gloo")},
         runs=("nccl",)),
    Step("telemetry", "GEMM with and without the sampler; idle power; ResNet-50 energy/sample",
         {"cuda": 150, "cpu": CPU_LIMIT_S},
         {"cuda": ["{py}", "-m", "benchmarks.validation.gpu_check", "--telemetry-step", "cuda", "{out}"],
          "cpu": ["{py}", "-m", "benchmarks.validation.gpu_check", "--telemetry-step", "cpu", "{out}"]},
         runs=("telemetry-on", "telemetry-off", "resnet50-energy")),
    Step("jax-operator", "JAX's quick operator level, fp32 and bf16",
         {"cuda": 180, "cpu": CPU_LIMIT_S},
         {"cuda": _run("jax-operator", "--level", "operator", "--framework", "jax", "--quick",
                       "--device", "cuda", "--backend", "local", "--dtype", "fp32,bf16"),
          "cpu": _run("jax-operator", "--level", "operator", "--framework", "jax", "--quick",
                      "--device", "cpu", "--benchmark", "gemm", "--dtype", "fp32")},
         runs=("jax-operator",)),
    Step("gpu-tests", "the short gpu-marked tests: CUDA timer, GEMM telemetry, energy per sample",
         {"cuda": 150, "cpu": 30},
         {"cuda": ["{py}", "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider", "-q",
                   "-k", "not test_quick_run_on_cuda and not test_network_quick_on_cuda", "--junitxml", "{out}/logs/gpu-tests.xml",
                   "tests/integration/test_gpu.py", "tests/integration/test_telemetry.py"],
          "cpu": None},
         why_not={"cpu": "the gpu-marked tests need a GPU: skipped by name in the rehearsal"}),
    Step("pytorch-operator", "PyTorch's quick operator level (test_quick_run_on_cuda's run: "
         "233 s on an H100 in round 1)",
         {"cuda": 235, "cpu": CPU_LIMIT_S},
         {"cuda": _run("pytorch-operator", "--level", "operator", "--framework", "pytorch",
                       "--quick", "--device", "cuda", "--backend", "local"),
          "cpu": _run("pytorch-operator", "--level", "operator", "--framework", "pytorch",
                      "--quick", "--device", "cpu", "--backend", "local", "--benchmark", "gemm",
                      "--dtype", "fp32")},
         runs=("pytorch-operator",)),
    Step("network", "the quick network level, train and infer, fp32 and bf16 "
         "(test_network_quick_on_cuda's run)",
         {"cuda": 235, "cpu": CPU_LIMIT_S},
         {"cuda": _run("network", "--level", "network", "--framework", "pytorch", "--quick",
                       "--device", "cuda", "--backend", "local", "--dtype", "fp32,bf16",
                       "--benchmark", "train,infer"),
          "cpu": _run("network", "--level", "network", "--framework", "pytorch", "--quick",
                      "--device", "cpu", "--backend", "local", "--dtype", "fp32",
                      "--benchmark", "infer", "--network", "mlp")},
         runs=("network",)),
]  # fmt: skip


# -- the state ------------------------------------------------------------------------------


def load_state(out: Path, device: str) -> dict[str, Any]:
    path = out / "state.json"
    if path.is_file():
        state: dict[str, Any] = json.loads(path.read_text())
        if state.get("device") != device:
            raise SystemExit(
                f"gpu_check: {out} holds a {state.get('device')} check; give another --out "
                f"for --device {device}"
            )
        return state
    return {"device": device, "calls": [], "steps": {}}


def save_state(out: Path, state: dict[str, Any]) -> None:
    tmp = out / "state.json.tmp"
    tmp.write_text(json.dumps(state, indent=1))
    tmp.replace(out / "state.json")


def machine() -> dict[str, Any]:
    """What this call ran on (the GPU as nvidia-smi names it, where there is one)."""
    info: dict[str, Any] = {"host": platform.node(), "python": sys.version.split()[0],
                            "cpu": _cpu_model(), "cores": os.cpu_count(),
                            "loadavg": list(os.getloadavg())}  # fmt: skip
    if shutil.which("nvidia-smi"):
        try:
            q = subprocess.run(
                ["nvidia-smi", "--query-gpu=name,memory.total,driver_version,power.draw",
                 "--format=csv,noheader"], capture_output=True, text=True, timeout=30,
            )  # fmt: skip
            info["gpus"] = [line.strip() for line in q.stdout.splitlines() if line.strip()]
        except (OSError, subprocess.SubprocessError) as exc:
            info["gpus_error"] = str(exc)
    return info


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


# -- running a step -------------------------------------------------------------------------


def step_command(step: Step, device: str, out: Path, resume: bool) -> list[str] | None:
    cmd = step.command.get(device)
    if cmd is None:
        return None
    fill = {"{py}": sys.executable, "{out}": str(out), "{data}": str(out / "data"),
            "{step_json}": str(out / "steps" / f"{step.name}.json")}  # fmt: skip
    argv = []
    for a in cmd:
        for k, v in fill.items():
            a = a.replace(k, v)
        argv.append(a)
    if resume and _is_run(step, device):
        argv.append("--resume")
    return argv


def run_step(step: Step, device: str, out: Path, limit: float, resume: bool) -> dict[str, Any]:
    """Run one step in its own process group, killed at ``limit`` seconds."""
    argv = step_command(step, device, out, resume)
    log = out / "logs" / f"{step.name}.log"
    t0 = time.time()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "PYTHONUNBUFFERED": "1",
    }
    with log.open("a", encoding="utf-8") as fh:
        fh.write(f"\n== {time.strftime('%Y-%m-%dT%H:%M:%S')} {' '.join(argv or [])}\n")
        fh.flush()
        proc = subprocess.Popen(argv or [], cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)  # fmt: skip
        try:
            rc = proc.wait(timeout=limit)
            status = "ok" if rc == 0 else "failed"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            rc, status = None, "timeout"
            fh.write(f"\n== killed at its limit of {limit:.0f} s\n")
    return {"status": status, "exit_code": rc, "elapsed_s": time.time() - t0,
            "limit_s": limit, "log": str(log.relative_to(out))}  # fmt: skip


def _is_run(step: Step, device: str) -> bool:
    """A `dlsuite run` step: cut anywhere, it keeps its finished tasks (--resume)."""
    cmd = step.command.get(device) or []
    return bool(step.runs) and "run" in cmd[:4]


def _archive(out: Path, archive: Path) -> None:
    archive.parent.mkdir(parents=True, exist_ok=True)
    tmp = archive.with_name(archive.name + ".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        tar.add(out, arcname=out.name, filter=gpu_check_report.archive_filter)
    tmp.replace(archive)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--out", type=Path, help="the output folder (default runs/gpu-check-DEVICE)")
    ap.add_argument("--call-budget", type=float, default=None,
                    help=f"seconds this call may spend (default {CALL_BUDGET_S:.0f}; "
                    f"{CPU_CALL_BUDGET_S:.0f} for the CPU rehearsal)")  # fmt: skip
    ap.add_argument("--only", help="only these steps (comma-separated)")
    ap.add_argument("--retry", action="store_true", help="run failed and timed-out steps again")
    ap.add_argument("--archive", type=Path, help="also pack the folder into this .tar.gz")
    ap.add_argument("--wheels", type=Path, default=WHEELS,
                    help="the carried wheels of the missing host dependencies (.gpu-wheels)")  # fmt: skip
    ap.add_argument("--telemetry-step", nargs=2, metavar=("DEVICE", "OUT"),
                    help=argparse.SUPPRESS)  # fmt: skip
    args = ap.parse_args(argv)
    if args.call_budget is None:
        args.call_budget = CALL_BUDGET_S if args.device == "cuda" else CPU_CALL_BUDGET_S
    if args.telemetry_step:
        return gpu_check_report.telemetry_step(args.telemetry_step[0],
                                               Path(args.telemetry_step[1]), ROOT)  # fmt: skip
    deps = ensure_host_dependencies(args.wheels)
    out = (args.out or ROOT / "runs" / f"gpu-check-{args.device}").resolve()
    for sub in ("steps", "runs", "logs"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    state = load_state(out, args.device)
    call = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": machine(),
            "budget_s": args.call_budget, "dependencies": deps}  # fmt: skip
    state["calls"].append(call)
    save_state(out, state)
    only = set(args.only.split(",")) if args.only else None
    t_call = time.monotonic()
    started = 0
    for step in STEPS:
        if only is not None and step.name not in only:
            continue
        done = state["steps"].get(step.name)
        resume = False
        if done is not None:
            again = args.retry and done["status"] in ("failed", "timeout")
            resumable = done["status"] == "timeout" and step.runs
            if not (again or (resumable and done.get("attempts", 1) < MAX_ATTEMPTS)):
                continue
            resume = bool(step.runs)
        if step.command.get(args.device) is None:
            state["steps"][step.name] = {"status": "skipped",
                                         "reason": step.why_not.get(args.device, "")}  # fmt: skip
            save_state(out, state)
            print(f"{step.name:20s} skipped: {step.why_not.get(args.device, '')}", flush=True)
            continue
        limit = step.limit_s[args.device]
        left = args.call_budget - REPORT_RESERVE_S[args.device] - (time.monotonic() - t_call)
        cut = started > 0 and limit > left
        if cut and not (_is_run(step, args.device) and left >= MIN_RUN_SLICE_S):
            print(f"{step.name:20s} not started: {max(left, 0):.0f} s left of this call's "
                  f"{args.call_budget:.0f}, its limit is {limit:.0f} s; call again with the "
                  "same --out to continue", flush=True)  # fmt: skip
            continue  # a later, shorter step may fit
        limit = min(limit, left) if cut else limit
        started += 1
        print(
            f"{step.name:20s} running (limit {limit:.0f} s"
            f"{', cut at the end of this call' if cut else ''}): {step.what}",
            flush=True,
        )
        result = run_step(step, args.device, out, limit, resume)
        attempts = (done or {}).get("attempts", 0)
        if cut and result["status"] == "timeout":
            result["cut_by_call"] = True  # resumed in the next call, not an attempt of its own
        else:
            attempts += 1
        result["attempts"] = attempts
        result["call"] = len(state["calls"])
        state["steps"][step.name] = result
        save_state(out, state)
        print(f"{step.name:20s} {result['status']} in {result['elapsed_s']:.0f} s "
              f"(log: {result['log']})", flush=True)  # fmt: skip
    call["ended"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    call["spent_s"] = time.monotonic() - t_call
    save_state(out, state)
    if args.archive:  # before the report too: a call cut off in it still brings the steps back
        _archive(out, args.archive)
    summary = gpu_check_report.finish(out, state, STEPS, args.device, ROOT,
                                      REPORT_TIMEOUT_S[args.device])  # fmt: skip
    print(summary, flush=True)
    if args.archive:
        _archive(out, args.archive)
        print(f"archive: {args.archive} ({args.archive.stat().st_size / 1e6:.1f} MB)")
    cut = [n for n, r in state["steps"].items() if r.get("cut_by_call")]
    pending = [s.name for s in STEPS if (s.name not in state["steps"] or s.name in cut)
               and (only is None or s.name in only)]  # fmt: skip
    failed = [n for n, r in state["steps"].items()
              if r["status"] in ("failed", "timeout") and n not in cut]  # fmt: skip
    if pending:
        print(f"pending: {', '.join(pending)}: call again with --out {out}")
    return 1 if failed else (3 if pending else 0)


if __name__ == "__main__":
    raise SystemExit(main())
